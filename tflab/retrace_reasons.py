"""Why a tf.function traced again: the Trace/Reason records and the reason engine.

A `tf.function` keeps a cache of ConcreteFunctions keyed by FunctionType: one
TraceType per parameter (``TensorSpec`` for tensors, ``Literal`` for Python
numbers/strings/bools, ``Weakref`` for other Python objects, ``List``/``Dict``/
``Tuple`` for containers) plus a FunctionContext whose ``scope_type`` says
whether variable creation was allowed. A call whose FunctionType is not a
subtype of a cached one traces a new FuncGraph (TF 2.21,
``tensorflow/core/function/polymorphism/function_type.py``,
``type_dispatch.py`` and ``python/eager/polymorphic_function/tracing_compilation.py``).

This module explains each new trace the way PyTorch's ``TORCH_LOGS=recompiles``
does: it compares the trace's FunctionType with the nearest earlier one (the
fewest changes) and writes one reason per change (``x: shape (3,) -> (4,)``,
``n: 4 -> 8``, ``fn: new object each call``…), each with its fix. A trace that
raised says what the error means (a tf.Variable created on every trace…).

It is the bottom of the retrace family and imports none of it. Its callers
bring the FunctionTypes: `tflab.retrace_probe` (a wrapper that sees each trace),
`tflab.retrace_log` (TF's "Creating new FuncGraph" log records),
`tflab.retrace_expect` (both) and the diagnosis work. To reuse the engine,
`reasons_between(old, new)` compares two FunctionTypes (TF objects, or
(parameter, TraceType text) pairs); `explain` / `make_trace` compare one with
a list of earlier `Trace` records.

``PerReplicaSpec`` TraceTypes (a ``tf.distribute`` dataset element) are
explained here too (``x: per-replica shape (2, 4) -> (1, 4)``), through
`TRACE_TYPE_HOOKS`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, NamedTuple, Sequence

# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------

# The FunctionContext scope types TF 2.21 uses (tracing_compilation.ScopeType).
VARIABLE_CREATION = "VARIABLE_CREATION"
NO_VARIABLE_CREATION = "NO_VARIABLE_CREATION"

FIXES = {
    "shape": "give the tf.function an input_signature with None for the dims that vary "
             "(tf.TensorSpec([None, ...])), or use reduce_retracing=True",
    "dtype": "cast to one dtype before the call (tf.cast), or trace each dtype on purpose "
             "with get_concrete_function",
    "value": "pass a tensor (tf.constant(value)), not a Python number: a tensor's value is "
             "not part of its TraceType, a Python value is",
    "flag": "a Python bool traces once per value (expected for a flag like training); to "
            "share one graph pass tf.constant(flag) and branch with tf.cond",
    "bound_method": "bind the method once outside the loop (fn = obj.method) and pass that same "
                    "object every call: TF keeps only a weak reference to an argument object, "
                    "and a freed one never matches again",
    "object": "pass the same object every call, or make its class a frozen dataclass with "
              "__tf_tracing_type__ (a TraceType by value), or pass its numbers as tensors",
    "length": "keep the length fixed or pass one tensor (tf.stack the items): a Python list's "
              "length is part of its TraceType",
    "keys": "pass the same keys every call: a dict's keys are part of its TraceType",
    "kind": "pass the same kind of value every call (always a tensor, or always the same "
            "Python type)",
    "signature": "pass the same arguments every call (a default passed explicitly is the same "
                 "as leaving it out)",
    "variable_creation": "nothing to fix: TF traces once more after the first call created "
                         "tf.Variables; create them outside the tf.function to skip it",
    # TF's log says a trace started, not whether it succeeded: both outcomes are named.
    "variable_creation_unknown": "nothing to fix if that call returned (create the tf.Variables "
                                 "outside the tf.function to skip this trace); if it raised "
                                 "ValueError 'tf.function only supports singleton tf.Variables "
                                 "created on the first call', the function creates a tf.Variable "
                                 "on every trace: create it once outside the function, or guard "
                                 "it with `if self.v is None`",
    "variable_per_trace": "create it once outside the function, or guard it with "
                          "`if self.v is None` so only the first trace creates it",
    "error": "fix the error the trace raised: TF caches no ConcreteFunction for a failed trace, "
             "so the next call with these inputs traces again",
    "context": "call it from the same context (device scope, outer tf.function, strategy)",
    "unexplained": "look for a garbage-collected argument object, a cleared cache, or an "
                   "earlier trace that raised",
}

# Fixes that change when the tf.function already has an option on.
FIXES_WITH_REDUCE_RETRACING = {
    "shape": "reduce_retracing is already on: TF traced this call with the dims that differ "
             "relaxed to None (see 'traced as'), so later calls that fit it reuse it; to skip "
             "this trace too, give the tf.function an input_signature with None for the dims "
             "that vary (tf.TensorSpec([None, ...]))",
}

# TF 2.21 polymorphic_function.Function._initialize: the error of a trace that
# creates a tf.Variable once variable creation is disabled.
_SINGLETON_VARIABLE = "tf.function only supports singleton tf.Variables created on the first call"


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why one parameter made TF trace again.

    Attributes:
        parameter: the parameter's name, with a path into containers
            (``x``, ``cfg[0]``, ``batch['image']``); "" for reasons not tied
            to a parameter (TF's variable-creation re-trace).
        kind: "shape", "dtype", "value", "flag", "bound_method", "object",
            "length", "keys", "kind", "signature", "variable_creation",
            "variable_per_trace" (the trace raised TF's singleton-tf.Variable
            error), "error" (the trace raised something else), "context" or
            "unexplained". A tensor whose dtype and shape both changed gives
            two reasons, one per kind, each with its fix.
        old: the earlier trace's value, as text ("(3,)", "4", "float32").
        new: this trace's value, as text.
        text: the reason line, e.g. ``x: shape (3,) -> (4,)``.
        fix: what to change so this parameter stops causing traces.
    """

    parameter: str
    kind: str
    old: str
    new: str
    text: str
    fix: str

    def __str__(self) -> str:
        return self.text


@dataclasses.dataclass(frozen=True)
class Trace:
    """One FuncGraph TF traced, and why.

    Attributes:
        index: 1-based trace number for this function.
        kind: "first" (no earlier trace), "retrace" (the inputs changed),
            "cached" (read from the trace cache by `cached_traces`: a
            baseline, no reasons),
            "variable_creation" (TF's own second trace after the first call
            created tf.Variables: not the user's fault), "concrete" (made by
            ``get_concrete_function``) or "failed" (tracing raised: the last
            reason says what the error means).
        reasons: one line per change, e.g. ``x: shape (3,) -> (4,)`` (a
            tensor's dtype and shape are separate changes).
        fixes: the fix for each reason, same order.
        inputs: (parameter, TraceType text) pairs of the FunctionType TF
            looked up, e.g. ``("x", "TensorSpec(shape=(3,), dtype=tf.float32, name=None)")``.
        compared_with: the index of the earlier trace the reasons compare
            against (the nearest one), or None.
        scope: the FunctionContext ``scope_type`` name (VARIABLE_CREATION,
            NO_VARIABLE_CREATION, …) or None when unknown.
        traced_as: the FunctionType TF traced when it differs from the one it
            looked up (``reduce_retracing`` relaxes dims to None), else None.
        call: 1-based number of the call that traced (0: not from a call).
        details: the `Reason` objects behind ``reasons``.
        runner_up: when another earlier trace differs by as many changes as
            ``compared_with`` (a tie, broken toward the smaller kind of
            change), its index; else None.
        runner_up_reasons: the reasons against ``runner_up``.
        diagnosis: for a trace that raised, or whose call raised, the
            `tflab.diagnosis.Diagnosis` (kind, culprit line, fix); else None.
    """

    index: int
    kind: str
    reasons: list[str]
    fixes: list[str]
    inputs: tuple[tuple[str, str], ...]
    compared_with: int | None = None
    scope: str | None = None
    traced_as: tuple[tuple[str, str], ...] | None = None
    call: int = 0
    details: tuple[Reason, ...] = ()
    runner_up: int | None = None
    runner_up_reasons: tuple[str, ...] = ()

    def __repr__(self) -> str:
        why = "; ".join(self.reasons) if self.reasons else ", ".join(
            f"{n}={_short_type(t)}" for n, t in self.inputs)
        return f"<Trace #{self.index} {self.kind}: {why}>"

    @property
    def versus(self) -> str:
        """`` vs #N`` naming the trace the reasons compare with ("" when none applies)."""
        if self.compared_with is None or self.kind in ("first", "variable_creation"):
            return ""
        return f" vs #{self.compared_with}"

    def to_text(self) -> str:
        """One line per reason: ``#3 retrace vs #1: x: shape (3,) -> (4,)``, then ``fix: …``."""
        head = f"#{self.index} {self.kind}"
        if self.kind in ("first", "cached"):
            return f"{head}: " + ", ".join(f"{n}={_short_type(t)}" for n, t in self.inputs)
        if self.kind == "concrete" and not self.details:
            return f"{head}: get_concrete_function(" + ", ".join(
                f"{n}={_short_type(t)}" for n, t in self.inputs) + ")"
        head += self.versus
        lines, pad = [], " " * (len(head) + 2)
        for i, r in enumerate(self.details):
            lines.append(f"{head}: {r.text}" if i == 0 else f"{pad}{r.text}")
            if i + 1 == len(self.details) or self.details[i + 1].fix != r.fix:
                lines.append(f"{pad}fix: {r.fix}")  # once per run of equal fixes
        if self.runner_up is not None:
            n = len(self.runner_up_reasons)
            lines.append(f"{pad}runner-up vs #{self.runner_up} (also {n} change{'s' * (n != 1)}): "
                         + "; ".join(self.runner_up_reasons))
        if self.traced_as:
            lines.append(f"{pad}traced as: " + ", ".join(
                f"{n}={_short_type(t)}" for n, t in self.traced_as))
        if self.diagnosis is not None:
            lines = lines or [head]
            lines.append(f"{pad}diagnosis: {self.diagnosis.summary()}")
        return "\n".join(lines) if lines else head

    def to_dict(self) -> dict:
        """JSON-ready dict (inputs as a name → TraceType text mapping)."""
        return {"index": self.index, "kind": self.kind, "call": self.call,
                "reasons": list(self.reasons), "fixes": list(self.fixes),
                "compared_with": self.compared_with, "scope": self.scope,
                "runner_up": self.runner_up, "runner_up_reasons": list(self.runner_up_reasons),
                "inputs": dict(self.inputs),
                "traced_as": dict(self.traced_as) if self.traced_as else None,
                "diagnosis": self.diagnosis.to_dict() if self.diagnosis is not None else None}

    # Why the trace, or the call that made it, raised: a tflab.diagnosis.Diagnosis
    # (set by tflab.diagnosis.probe_diagnosis), else None.
    diagnosis: Any = None



# ---------------------------------------------------------------------------
# The reason engine: TraceType text -> tree -> per-parameter reasons
# ---------------------------------------------------------------------------


class _Node(NamedTuple):
    """A parsed TraceType repr. kind: tensor | literal | object | seq | map | other."""

    kind: str
    name: str = ""          # List/Tuple/Dict/NamedTuple type name; TensorSpec class
    value: str = ""         # literal repr, object label, or raw text for "other"
    shape: str = ""
    dtype: str = ""
    children: tuple = ()    # ((key_text, _Node), ...)


_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = set(_OPEN.values())
# TF 2.21's Weakref.__repr__ ends in "])": drop the stray ")" so brackets balance.
_WEAKREF_FIX = re.compile(r"(Weakref\[<[^<>]*>\])\)")
_TENSOR_RE = re.compile(r"^(\w*Spec)\(shape=(.*?), dtype=tf\.(\w+)")
_WEAKREF_TO = re.compile(r"; to '([^']+)'")


def _split_top(text: str) -> list[str]:
    """Splits on commas that are outside brackets and quotes."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def parse_trace_type(text: str) -> _Node:
    """Parses the repr of a TF 2.21 TraceType (as printed in a FunctionType) into a tree."""
    text = _WEAKREF_FIX.sub(r"\1", text.strip())
    m = _TENSOR_RE.match(text)
    if m:
        return _Node("tensor", name=m.group(1), shape=m.group(2), dtype=m.group(3), value=text)
    if text.startswith("Literal[") and text.endswith("]"):
        return _Node("literal", value=text[len("Literal["):-1])
    if text.startswith("Weakref[") and text.endswith("]"):
        inner = text[len("Weakref["):-1]
        m = _WEAKREF_TO.search(inner)
        label = "garbage-collected object" if "; dead" in inner else (
            "bound method" if m and m.group(1) == "method" else f"{m.group(1) if m else 'Python'} object")
        return _Node("object", value=label, name=inner)
    m = re.match(r"^([A-Za-z_][\w.]*)\[(.*)\]$", text, re.S)
    if m:
        name, body = m.group(1), m.group(2)
        items = _split_top(body)
        if name in ("List", "Tuple"):
            return _Node("seq", name=name,
                         children=tuple((str(i), parse_trace_type(t)) for i, t in enumerate(items)))
        pairs = []
        for item in items:
            if item.startswith("[") and item.endswith("]"):
                kv = _split_top(item[1:-1])
                if len(kv) == 2:
                    pairs.append((kv[0], parse_trace_type(kv[1])))
                    continue
            pairs.append((str(len(pairs)), parse_trace_type(item)))
        return _Node("map", name=name, children=tuple(pairs))
    return _Node("other", value=text)


def _dims(shape: str) -> list[str] | None:
    if not (shape.startswith("(") and shape.endswith(")")):
        return None
    return [d.strip() for d in shape[1:-1].split(",") if d.strip()]


class TraceTypeHook(NamedTuple):
    """How to explain a TraceType repr the tree parser does not know (see `TRACE_TYPE_HOOKS`)."""

    describe_trace_type: Any   # (text) -> short label
    diff_trace_type: Any       # (path, old text, new text) -> list[Reason]


def _hook(node: _Node) -> TraceTypeHook | None:
    if node.kind == "other":
        for prefix, hook in TRACE_TYPE_HOOKS.items():
            if node.value.startswith(prefix):
                return hook
    return None


def _describe(node: _Node) -> str:
    """A short human label for a TraceType tree (used for kind changes and first traces)."""
    if _hook(node) is not None:
        return _hook(node).describe_trace_type(node.value)
    if node.kind == "tensor":
        return f"{node.dtype}{node.shape}" if node.name == "TensorSpec" else f"{node.name} {node.dtype}{node.shape}"
    if node.kind == "literal":
        return node.value
    if node.kind == "object":
        return node.value
    if node.kind == "seq":
        inner = ", ".join(_describe(c) for _, c in node.children)
        return f"[{inner}]" if node.name == "List" else f"({inner}{',' if len(node.children) == 1 else ''})"
    if node.kind == "map":
        inner = ", ".join(f"{k}: {_describe(c)}" for k, c in node.children)
        return "{" + inner + "}" if node.name == "Dict" else f"{node.name}({inner})"
    return node.value


def _short_type(text: str) -> str:
    return _describe(parse_trace_type(text))


def _kind_label(node: _Node) -> str:
    if node.kind == "tensor":
        return f"tensor {node.dtype}{node.shape}"
    if node.kind == "literal":
        return f"Python value {node.value}"
    if node.kind == "seq":
        return f"{node.name.lower()} of {len(node.children)}"
    if node.kind == "map":
        return "dict" if node.name == "Dict" else node.name
    return _describe(node)


def _child_path(path: str, node: _Node, key: str) -> str:
    """``xs[0]`` / ``d['a']`` for List, Tuple and Dict; ``cfg.scale`` for NamedTuple/attrs."""
    if node.kind == "map" and node.name != "Dict":
        return f"{path}.{key.strip(chr(39))}"
    return f"{path}[{key}]"


def _diff(path: str, a: _Node, b: _Node, out: list[Reason]) -> None:
    """Appends one Reason per leaf where TraceType trees ``a`` (earlier) and ``b`` differ."""
    if a == b:
        return
    if _hook(a) is not None and _hook(a) is _hook(b):
        out.extend(_hook(a).diff_trace_type(path, a.value, b.value))
        return
    # List vs Tuple, Dict vs NamedTuple, two NamedTuple types: a change of kind.
    if a.kind != b.kind or (a.kind in ("seq", "map") and a.name != b.name):
        out.append(_reason(path, "kind", _kind_label(a), _kind_label(b),
                           f"{path}: {_kind_label(a)} -> {_kind_label(b)}"))
        return
    if a.kind == "tensor":
        # dtype and shape are separate changes with separate fixes: each is one
        # Reason, so the nearest earlier trace is the one with the fewest changes.
        if a.dtype != b.dtype:
            out.append(_reason(path, "dtype", a.dtype, b.dtype,
                               f"{path}: dtype {a.dtype} -> {b.dtype}"))
        if a.shape != b.shape:
            note = ""
            da, db = _dims(a.shape), _dims(b.shape)
            if da is not None and db is not None and len(da) == len(db) and len(da) > 1:
                changed = [f"dim {i}: {x} -> {y}" for i, (x, y) in enumerate(zip(da, db)) if x != y]
                note = f" ({', '.join(changed)})"
            out.append(_reason(path, "shape", a.shape, b.shape,
                               f"{path}: shape {a.shape} -> {b.shape}{note}"))
        if a.dtype == b.dtype and a.shape == b.shape:  # another TypeSpec field (name, ragged rank…)
            out.append(_reason(path, "kind", a.value, b.value, f"{path}: {a.value} -> {b.value}"))
    elif a.kind == "literal":
        kind = "flag" if a.value in ("True", "False") and b.value in ("True", "False") else "value"
        out.append(_reason(path, kind, a.value, b.value, f"{path}: {a.value} -> {b.value}"))
    elif a.kind == "object":
        kind = "bound_method" if "bound method" in (a.value, b.value) else "object"
        label = b.value if b.value != "garbage-collected object" else a.value
        out.append(_reason(path, kind, a.value, b.value,
                           f"{path}: new object each call ({label}; TF matches it by weak reference)"))
    elif a.kind == "seq":
        if len(a.children) != len(b.children):
            what = "list" if b.name == "List" else "tuple"
            out.append(_reason(path, "length", str(len(a.children)), str(len(b.children)),
                               f"{path}: {what} length {len(a.children)} -> {len(b.children)}"))
            return
        for (k, ca), (_, cb) in zip(a.children, b.children):
            _diff(_child_path(path, a, k), ca, cb, out)
    elif a.kind == "map":
        ka = [k for k, _ in a.children]
        kb = [k for k, _ in b.children]
        if sorted(ka) != sorted(kb):
            out.append(_reason(path, "keys", f"[{', '.join(ka)}]", f"[{', '.join(kb)}]",
                               f"{path}: {'dict ' if a.name == 'Dict' else a.name + ' '}keys "
                               f"[{', '.join(ka)}] -> [{', '.join(kb)}]"))
            return
        cb_map = dict(b.children)
        for k, ca in a.children:
            _diff(_child_path(path, a, k), ca, cb_map[k], out)
    else:
        out.append(_reason(path, "kind", a.value, b.value, f"{path}: {a.value} -> {b.value}"))


def _reason(path: str, kind: str, old: str, new: str, text: str) -> Reason:
    return Reason(parameter=path, kind=kind, old=old, new=new, text=text, fix=FIXES[kind])


def _param_reasons(old: dict[str, str], new: dict[str, str]) -> list[Reason]:
    """One Reason per change between two FunctionTypes' inputs.

    A change is one leaf of a parameter's TraceType tree (``xs[1]``,
    ``cfg.scale``) and, for a tensor, its dtype or its shape: a tensor whose
    dtype and shape both changed counts as two changes, each with its own fix.
    """
    reasons: list[Reason] = []
    for name, text in new.items():
        if name not in old:
            reasons.append(_reason(name, "signature", "absent", _short_type(text),
                                   f"{name}: new argument ({_short_type(text)})"))
            continue
        if old[name] != text:
            _diff(name, parse_trace_type(old[name]), parse_trace_type(text), reasons)
    for name in old:
        if name not in new:
            reasons.append(_reason(name, "signature", _short_type(old[name]), "absent",
                                   f"{name}: no longer passed"))
    return reasons


def _as_inputs(function_type: Any) -> dict[str, str]:
    """``{parameter: TraceType text}`` from a TF FunctionType, a mapping, or (name, text) pairs."""
    if hasattr(function_type, "parameters"):
        return dict(function_type_inputs(function_type))
    if isinstance(function_type, Mapping):
        return {str(k): str(v) for k, v in function_type.items()}
    return {str(k): str(v) for k, v in function_type}


def reasons_between(old: Any, new: Any) -> list[Reason]:
    """The reasons a call with FunctionType ``new`` does not reuse the trace of ``old``.

    The reusable core of `explain`, for any code that holds two FunctionTypes
    (the diagnosis work, a cache dump): no trace list, no scope or context
    rules, just one `Reason` per change of a parameter's TraceType tree (a
    tensor's dtype and shape count separately), in parameter order.

    Args:
        old: the earlier FunctionType: a TF ``FunctionType`` (e.g.
            ``concrete_fn.function_type``), a ``{parameter: TraceType text}``
            mapping, or (parameter, TraceType text) pairs as in `Trace.inputs`.
        new: the later one, in any of those forms.

    Returns:
        The `Reason`s, [] when the inputs are the same.

    Example:

    >>> [r.text for r in reasons_between(
    ...     {"x": "TensorSpec(shape=(3,), dtype=tf.float32, name=None)"},
    ...     {"x": "TensorSpec(shape=(4,), dtype=tf.float32, name=None)"})]
    ['x: shape (3,) -> (4,)']
    """
    return _param_reasons(_as_inputs(old), _as_inputs(new))


# Changes inside the same structure (a tensor's dtype or shape, a Python
# value, an object) rank before changes of the structure itself (a dict's keys,
# a list's length, a kind or a parameter): on a tie in the number of changes,
# the nearest trace is the one whose changes are the smaller kind.
_STRUCTURE_KINDS = frozenset({"length", "keys", "kind", "signature"})


class _Candidate(NamedTuple):
    trace: Trace
    reasons: list[Reason]

    @property
    def rank(self) -> tuple[int, int, int]:
        # fewest changes, then fewest structure changes, then the latest trace
        return (len(self.reasons), sum(r.kind in _STRUCTURE_KINDS for r in self.reasons),
                -self.trace.index)


def _ranked_candidates(new: dict[str, str], previous: Sequence[Trace]) -> list[_Candidate]:
    """Every earlier trace with its reasons, nearest first (see `_Candidate.rank`)."""
    return sorted((_Candidate(p, _param_reasons(dict(p.inputs), new)) for p in previous),
                  key=lambda c: c.rank)


def explain(inputs: Sequence[tuple[str, str]], previous: Sequence[Trace], *,
            scope: str | None = None, context: str | None = None,
            previous_contexts: Sequence[str | None] | None = None,
            reduce_retracing: bool = False,
            outcome_known: bool = True) -> tuple[str, int | None, list[Reason]]:
    """Explains a new trace against the earlier ones of the same function.

    Compares the new FunctionType's inputs with each earlier trace's and keeps
    the nearest, as TF's dispatch would have used the closest cached type had
    it matched: the fewest changes (a tensor's dtype and shape count
    separately); on a tie, the fewest changes of structure (dict keys, list
    length, kind of value) rather than of a dtype, shape or value inside the
    same structure; then the latest trace.

    Args:
        inputs: (parameter, TraceType text) pairs of the new trace's FunctionType.
        previous: earlier `Trace` records of the same function, oldest first.
        scope: the new trace's FunctionContext scope_type name, if known.
        context: the new trace's FunctionContext ``context`` text, if known.
        previous_contexts: the ``context`` text of each earlier trace.
        reduce_retracing: the tf.function has ``reduce_retracing=True``: a
            shape change's fix does not suggest turning it on.
        outcome_known: False when the caller cannot tell whether the trace
            succeeded (TF's log): TF's variable-creation re-trace then names
            both outcomes instead of saying "nothing to fix".

    Returns:
        (kind, index of the trace compared with or None, reasons).
    """
    return _explain(inputs, previous, scope=scope, context=context,
                    previous_contexts=previous_contexts, reduce_retracing=reduce_retracing,
                    outcome_known=outcome_known)[:3]


def _explain(inputs: Sequence[tuple[str, str]], previous: Sequence[Trace], *,
             scope: str | None, context: str | None,
             previous_contexts: Sequence[str | None] | None, reduce_retracing: bool,
             outcome_known: bool) -> tuple[str, int | None, list[Reason], _Candidate | None]:
    """`explain`, plus the runner-up candidate when it ties on the number of changes."""
    if not previous:
        return "first", None, [], None
    new = dict(inputs)
    # TF's own re-trace: the first call traced with variable creation allowed,
    # created variables, then traced the same inputs with creation disabled
    # (polymorphic_function.Function._initialize / _call).
    if scope == NO_VARIABLE_CREATION and not any(p.scope == NO_VARIABLE_CREATION for p in previous):
        for p in reversed(previous):
            if p.scope == VARIABLE_CREATION and dict(p.inputs) == new:
                text = ("TF's own re-trace: the first call created tf.Variables, so TF traced "
                        "again with variable creation disabled (not caused by the inputs)")
                fix = FIXES["variable_creation"]
                if not outcome_known:
                    text += "; TF's log does not say whether this trace succeeded"
                    fix = FIXES["variable_creation_unknown"]
                r = Reason("", "variable_creation", VARIABLE_CREATION, NO_VARIABLE_CREATION, text, fix)
                return "variable_creation", p.index, [r], None
    same_scope = [p for p in previous if scope is None or p.scope in (None, scope)] or list(previous)
    ranked = _ranked_candidates(new, same_scope)
    nearest, reasons = ranked[0]
    runner_up = None
    if len(ranked) > 1 and reasons and len(ranked[1].reasons) == len(reasons):
        runner_up = ranked[1]
    if reduce_retracing:
        reasons = [dataclasses.replace(r, fix=FIXES_WITH_REDUCE_RETRACING.get(r.kind, r.fix))
                   for r in reasons]
    if not reasons:
        ctxs = list(previous_contexts or [])
        pos = list(previous).index(nearest)
        if context is not None and pos < len(ctxs) and ctxs[pos] is not None and ctxs[pos] != context:
            reasons = [_reason("", "context", ctxs[pos], context,
                               "same inputs, but called from a different FunctionContext "
                               "(device scope, outer graph or strategy)")]
        else:
            maybe_failed = "" if outcome_known else f", or trace #{nearest.index} raised"
            reasons = [_reason("", "unexplained", "", "",
                               f"same input TraceTypes as trace #{nearest.index}: TF could not reuse it "
                               f"(an argument object was garbage-collected, the cache was cleared"
                               f"{maybe_failed})")]
    return "retrace", nearest.index, reasons, runner_up


def _failure_reasons(auto_kind: str, reasons: list[Reason], error: str) -> list[Reason]:
    """The reasons of a trace that raised ``error`` (one line, ``Type: message``).

    The input changes that made TF trace are kept; "variable_creation" and
    "unexplained" are replaced, since the error is the real story there.
    """
    kept = [r for r in reasons if r.kind not in ("variable_creation", "unexplained")]
    if _SINGLETON_VARIABLE in error:
        if auto_kind == "variable_creation":
            text = ("raised ValueError because the function creates a tf.Variable on every trace: "
                    "after the first trace created one, TF traced again with variable creation "
                    f"disabled (TF: \"{_SINGLETON_VARIABLE}\")")
        else:
            text = ("raised ValueError because the function created a tf.Variable on a trace "
                    f"after the first call (TF: \"{_SINGLETON_VARIABLE}\")")
        return kept + [Reason("", "variable_per_trace", "", "ValueError", text,
                              FIXES["variable_per_trace"])]
    short = error if len(error) <= 200 else error[:197] + "..."
    return kept + [Reason("", "error", "", short.split(":", 1)[0], f"raised {short}", FIXES["error"])]


def make_trace(index: int, inputs: Sequence[tuple[str, str]], previous: Sequence[Trace], *,
               scope: str | None = None, traced_as: Sequence[tuple[str, str]] | None = None,
               call: int = 0, kind: str | None = None, context: str | None = None,
               previous_contexts: Sequence[str | None] | None = None,
               reduce_retracing: bool = False, outcome_known: bool = True,
               error: str | None = None) -> Trace:
    """Builds a `Trace` with its reasons from a FunctionType's (parameter, TraceType text) pairs.

    Args:
        error: for a trace that raised, the error as one line
            (``ValueError: …``); the trace's kind is then "failed" and its
            reasons end with what the error means.
        The others: as for `explain` and `Trace`.
    """
    auto_kind, compared, reasons, runner_up = _explain(
        inputs, previous, scope=scope, context=context, previous_contexts=previous_contexts,
        reduce_retracing=reduce_retracing, outcome_known=outcome_known)
    if error is not None:
        kind = "failed"
        reasons = _failure_reasons(auto_kind, reasons, error)
    elif kind == "concrete" and auto_kind != "variable_creation":
        reasons = [] if auto_kind == "first" else reasons
    else:
        kind = kind or auto_kind
    inputs = tuple((str(n), str(t)) for n, t in inputs)
    traced = tuple((str(n), str(t)) for n, t in traced_as) if traced_as else None
    return Trace(index=index, kind=kind, reasons=[r.text for r in reasons],
                 fixes=[r.fix for r in reasons], inputs=inputs, compared_with=compared,
                 scope=scope, traced_as=traced if traced and traced != inputs else None,
                 call=call, details=tuple(reasons),
                 runner_up=runner_up.trace.index if runner_up else None,
                 runner_up_reasons=tuple(r.text for r in runner_up.reasons) if runner_up else ())


def function_type_inputs(function_type: Any) -> tuple[tuple[str, str], ...]:
    """(parameter, TraceType repr) pairs of a TF FunctionType, as its repr prints them."""
    return tuple((p.name, repr(p.type_constraint)) for p in function_type.parameters.values())



def _short_name(qualname: str) -> str:
    """``test_x.<locals>.h`` -> ``h``: the enclosing function adds nothing for a reader."""
    return qualname.rsplit("<locals>.", 1)[-1]


# ---------------------------------------------------------------------------
# PerReplicaSpec: the TraceType of a tf.distribute dataset element
# ---------------------------------------------------------------------------

# What the reason engine tells the user to do when per-replica shapes change.
PER_REPLICA_FIX = ("give the tf.function input_signature=dist_dataset.element_spec (a PerReplicaSpec "
                   "with None batch dims: one trace for every batch), or batch the dataset with "
                   "drop_remainder=True so every step has the same per-replica shape")

_PER_REPLICA_PREFIX = "PerReplicaSpec("


def _per_replica_components(text: str) -> list | None:
    """The component TraceType nodes of a ``PerReplicaSpec(…)`` repr, or None."""
    text = text.strip()
    if not (text.startswith(_PER_REPLICA_PREFIX) and text.endswith(")")):
        return None
    return [parse_trace_type(t) for t in _split_top(text[len(_PER_REPLICA_PREFIX):-1])]


def _shapes_list(nodes: list) -> list:
    return [n.shape if n.kind == "tensor" else n.value for n in nodes]


def _shapes_text(nodes: list) -> str:
    shapes = [n.shape if n.kind == "tensor" else n.value for n in nodes]
    return shapes[0] if len(set(shapes)) == 1 else "[" + ", ".join(shapes) + "]"


def describe_per_replica(text: str) -> str:
    """A short label for a ``PerReplicaSpec`` TraceType: ``per-replica float32(2, 4) ×2``."""
    comps = _per_replica_components(text)
    if not comps:
        return text
    dtypes = sorted({c.dtype for c in comps if c.kind == "tensor"})
    return f"per-replica {'/'.join(dtypes)}{_shapes_text(comps)} ×{len(comps)}"


def diff_per_replica(path: str, old: str, new: str) -> list[Reason]:
    """Reasons for a change between two ``PerReplicaSpec`` TraceTypes of parameter ``path``.

    Returns:
        `Reason`s: ``x: per-replica shape (2, 4) -> (1, 4)`` (kind
        ``per_replica_shape``), a per-replica dtype change, or a change in the
        number of replicas; each fix names ``dist_dataset.element_spec`` or
        ``drop_remainder=True``.
    """
    a, b = _per_replica_components(old), _per_replica_components(new)
    if a is None or b is None:
        return [Reason(path, "kind", old, new, f"{path}: {old} -> {new}", PER_REPLICA_FIX)]
    if len(a) != len(b):
        return [Reason(path, "replicas", str(len(a)), str(len(b)),
                       f"{path}: {len(a)} replicas -> {len(b)}",
                       "call it under the same strategy (same number of replicas) every time")]
    out = []
    da = sorted({c.dtype for c in a})
    db = sorted({c.dtype for c in b})
    if da != db:
        out.append(Reason(path, "dtype", "/".join(da), "/".join(db),
                          f"{path}: per-replica dtype {'/'.join(da)} -> {'/'.join(db)}",
                          "cast the dataset to one dtype (dataset.map(lambda x: tf.cast(x, ...)))"))
    sa, sb = _shapes_text(a), _shapes_text(b)
    if sa != sb:
        changed = [(i, x, y) for i, (x, y) in enumerate(zip(_shapes_list(a), _shapes_list(b))) if x != y]
        if sa.startswith("[") or sb.startswith("["):
            # Not every replica has one shape: say which replicas changed, e.g. the last
            # replica of 3 gets the short remainder of a batch (2, 2, 1).
            what = "; ".join(f"replica {i} {x} -> {y}" for i, x, y in changed)
            text = f"{path}: per-replica shape {what} (of {len(a)} replicas)"
        else:
            text = f"{path}: per-replica shape {sa} -> {sb}"
        out.append(Reason(path, "per_replica_shape", sa, sb, text, PER_REPLICA_FIX))
    if not out:
        out.append(Reason(path, "kind", old, new, f"{path}: {old} -> {new}", PER_REPLICA_FIX))
    return out


# TraceType reprs the tree parser leaves as "other", explained by repr prefix.
# Another module may add an entry (a new TraceType it knows how to explain).
TRACE_TYPE_HOOKS: dict[str, TraceTypeHook] = {
    _PER_REPLICA_PREFIX: TraceTypeHook(describe_per_replica, diff_per_replica),
}
