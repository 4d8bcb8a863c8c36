"""Lab step 2: why did a tf.function trace again? `RetraceProbe`, with reasons.

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

Two ways to get the FunctionTypes, one reason engine:

* `RetraceProbe` wraps a function and counts traces by a Python side effect in
  the traced body (it runs only while TF traces), cross-checked with TF's own
  ``experimental_get_tracing_count()``. It also notices a stale closure or
  global: a Python number read at trace time that changed later without a
  retrace (on TF 2.21 the graph keeps the old value).
* `capture_trace_log` / `trace_script` (``tflab retrace SCRIPT.py``) read the
  "Creating new FuncGraph …" record TF logs at level 1 on the ``tensorflow``
  logger for every trace, so any script can be explained without patching TF.
  Traces are keyed by the tf.function OBJECT that made them (found on the call
  stack in-process, or by the address in the log text), so two instances of a
  class with a ``@tf.function`` method, or two closures from one factory, are
  explained apart. TF logs a trace as it starts, so this path cannot tell a
  trace that raised, and it has no values, so it cannot see stale reads.
* `expect_traces(tf_function)` reads the same records for one object and
  compares them with the traces already in its cache (``cached_traces``), so
  a function warmed up before the block gets the real reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import re
import runpy
import sys
import types
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from tflab.errors import Terminated, UsageError

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


@dataclasses.dataclass(frozen=True)
class StaleRead:
    """A closure variable or global read at trace time that changed later, without a retrace.

    On TF 2.21 a Python number read by the traced body is baked into the
    FuncGraph as a constant and is not part of the FunctionType, so changing it
    does not retrace: the graph keeps computing with the traced value. The same
    holds when the name is rebound to a new eager tensor or tf.Variable (the
    graph captured the old one); ``.assign()`` on the same variable is seen.

    Attributes:
        name: the variable's name.
        scope: "closure" (a cell of the function) or "global".
        traced: repr of the value the FuncGraph was traced with.
        current: repr of the value it has now.
        trace: index of the trace that baked in ``traced``.
        call: 1-based number of the call that first saw the change.
    """

    name: str
    scope: str
    traced: str
    current: str
    trace: int
    call: int

    @property
    def text(self) -> str:
        return (f"{self.scope} {self.name!r} was {self.traced} at trace #{self.trace}, now "
                f"{self.current}: no retrace, the graph still uses {self.traced}")

    @property
    def fix(self) -> str:
        return (f"pass {self.name} as an argument (a tensor, so changing it needs no retrace) "
                f"or keep it in a tf.Variable and .assign() new values")


class RetraceError(AssertionError):
    """`expect_traces` saw more traces than allowed; the message lists the reasons.

    A subclass of AssertionError so pytest shows it as a test failure.

    Attributes:
        traces: the `Trace` records made inside the ``with`` block.
        count: how many traces TF made inside the block.
        at_most: the limit that was exceeded.
    """

    def __init__(self, message: str, traces: Sequence[Trace], count: int, at_most: int):
        super().__init__(message)
        self.traces = list(traces)
        self.count = count
        self.at_most = at_most


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


# TraceType reprs another tflab module explains, by repr prefix: the module has
# diff_trace_type(path, old, new) -> list[Reason] and describe_trace_type(text) -> str.
TRACE_TYPE_HOOKS = {"PerReplicaSpec(": "tflab.distribute"}


def _hook(node: _Node):
    if node.kind == "other":
        for prefix, module in TRACE_TYPE_HOOKS.items():
            if node.value.startswith(prefix):
                import importlib

                return importlib.import_module(module)
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


# ---------------------------------------------------------------------------
# RetraceProbe
# ---------------------------------------------------------------------------

# Values whose staleness we can judge: they are baked into the FuncGraph as
# constants when read at trace time. Containers, modules and functions are not.
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MISSING = object()


# Rebinding a name to a new eager tensor or tf.Variable is stale too: the
# FuncGraph captured the old one (by value for a tensor, by handle for a
# variable). .assign() on the same variable is not: the handle is unchanged.
_BY_IDENTITY = ("EagerTensor", "ResourceVariable", "UninitializedVariable")


def _is_watchable(value: Any) -> bool:
    if isinstance(value, _SCALARS):
        return True
    mod = type(value).__module__ or ""
    return (mod == "numpy" and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0) or \
        type(value).__name__ in _BY_IDENTITY


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a).__name__ in _BY_IDENTITY or type(b).__name__ in _BY_IDENTITY:
        return False
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # an odd __eq__: treat as changed
        return False


def _innermost_python_function(fn: Any) -> Any:
    """The user's own function under tf.function / tf_decorator / functools.wraps layers."""
    from tensorflow.python.util import tf_decorator

    seen = 0
    while seen < 20:
        seen += 1
        fn = getattr(fn, "python_function", fn)
        _, target = tf_decorator.unwrap(fn)
        if target is not fn:
            fn = target
            continue
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
            continue
        if hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
            continue
        break
    if not hasattr(fn, "__code__") and callable(fn) and hasattr(type(fn), "__call__"):
        fn = getattr(type(fn).__call__, "__func__", type(fn).__call__)
    return fn


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:  # nested lambdas / comprehensions read globals too
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _closure_cells(fn: Any) -> list[tuple[str, Any]]:
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    return list(zip(code.co_freevars, cells)) if code is not None else []


class RetraceProbe:
    """Wraps a function, counts its traces and explains each one.

    The wrapper calls a Python side effect inside the traced body: it runs
    while TF traces a new FuncGraph and never on a cached call, so the count is
    exact. Each trace gets the FunctionType TF looked up (TF 2.21
    ``function_type_utils.make_canonicalized_monomorphic_type``, the same type
    the "Creating new FuncGraph" log prints) and the FunctionContext scope of
    the cache entry it added, and `explain` turns the difference with the
    nearest earlier trace into reasons.

    A `tf.function` is re-wrapped with all its options (input_signature,
    reduce_retracing, jit_compile, autograph…) through TF's own
    ``Function._clone``, the same path TF uses to copy a Function onto a new
    Python function; the side-effect wrapper is a ``tf_decorator`` so AutoGraph
    still converts the user's function (``autograph_util.py_func_from_autograph``
    unwraps decorators and converts the innermost target). The probe has its
    own trace cache: calls of the original tf.function itself are not seen
    (`expect_traces` on the tf.function itself needs no probe).

    Args:
        fn: a `tf.function` (options kept) or a plain Python callable (wrapped
            in ``tf.function(**tf_function_kwargs)``).
        watch_stale: record the closure cells and globals the Python function
            reads (its own code and nested lambdas/comprehensions; not the
            functions it calls, nor object attributes like ``self.rate``) that
            hold numbers, strings, bools, eager tensors or tf.Variables at
            trace time, and
            report in `stale` when one changed without a retrace. The per-call
            check compares identities only.
        **tf_function_kwargs: options for ``tf.function`` when ``fn`` is a plain
            callable (e.g. ``reduce_retracing=True``); not allowed with a tf.function.

    Attributes:
        function: the wrapped `tf.function` that calls go through (the
            probe's own copy when ``fn`` is a tf.function).
        original: ``fn`` when it is a tf.function, else None.
        trace_count: traces counted by the side effect (includes failed traces).
        traces: one `Trace` per trace, oldest first.
        stale: `StaleRead` records, oldest first.
        calls: number of calls made through the probe.

    Raises:
        UsageError: ``fn`` is not callable, or tf.function options were given
            for a function that already is a tf.function.

    Example:

    >>> probe = RetraceProbe(lambda x, n: x * n)
    >>> for n in (1, 2, 3):
    ...     _ = probe(tf.constant([1.0]), n)
    >>> probe.trace_count
    3
    >>> probe.traces[1].reasons
    ['n: 1 -> 2']
    """

    def __init__(self, fn: Callable, *, watch_stale: bool = True, **tf_function_kwargs: Any):
        import tensorflow as tf
        from tensorflow.python.util import tf_decorator

        if not callable(fn):
            raise UsageError(f"RetraceProbe needs a callable (a tf.function or a Python function), "
                             f"got {type(fn).__name__}")
        self._count = 0
        self.calls = 0
        self.traces: list[Trace] = []
        self.stale: list[StaleRead] = []
        self._traced_values: list[dict[str, Any]] = []   # per trace: name -> value read
        self._gwatch: list[list] = []   # [globals dict, name, last seen value]
        self._cwatch: list[list] = []   # [name, cell, last seen value]
        self._watch_stale = watch_stale
        self._cache_len = 0
        self._pending_kind: str | None = None

        is_tf_function = isinstance(fn, tf.types.experimental.PolymorphicFunction) or hasattr(fn, "_clone")
        python_fn = fn.python_function if is_tf_function else fn
        self._user_fn = _innermost_python_function(python_fn)
        if not is_tf_function and not hasattr(fn, "__qualname__"):
            self.name = type(fn).__name__  # a callable object, e.g. a Keras model
        else:
            self.name = _short_name(getattr(self._user_fn, "__qualname__", None)
                                    or getattr(fn, "__name__", type(fn).__name__))

        probe = self

        def traced_body(*args, **kwargs):
            probe._on_trace()
            # tf_decorator.rewrap swaps __wrapped__ for the AutoGraph-converted
            # target, so the call must go through the attribute.
            return traced_body.__wrapped__(*args, **kwargs)

        wrapper = tf_decorator.make_decorator(python_fn, traced_body, decorator_name="RetraceProbe")
        if is_tf_function:
            if tf_function_kwargs:
                raise UsageError("RetraceProbe: tf.function options (" + ", ".join(tf_function_kwargs)
                                 + ") only apply to a plain callable; this is already a tf.function, "
                                 "so its own options are kept")
            self.function = fn._clone(python_function=wrapper)
            self.original = fn
        else:
            self.function = tf.function(wrapper, **tf_function_kwargs)
            self.original = None
        self._watch_names = self._stale_candidates() if watch_stale else ([], [])

    # -- trace-time side effect --------------------------------------------
    def _stale_candidates(self) -> tuple[list[str], list[tuple[str, Any]]]:
        fn = self._user_fn
        code = getattr(fn, "__code__", None)
        if code is None:
            return [], []
        globs = getattr(fn, "__globals__", {})
        gnames = sorted(n for n in _code_names(code) if n in globs)
        return gnames, _closure_cells(fn)

    def _on_trace(self) -> None:
        self._count += 1
        if not self._watch_stale:
            return
        gnames, cells = self._watch_names
        globs = getattr(self._user_fn, "__globals__", {})
        snapshot: dict[str, Any] = {}
        gwatch, cwatch = [], []
        for n in gnames:
            v = globs.get(n, _MISSING)
            if v is not _MISSING and _is_watchable(v):
                snapshot[n] = v
                gwatch.append([globs, n, v])
        for n, cell in cells:
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if _is_watchable(v):
                snapshot[n] = v
                cwatch.append([n, cell, v])
        self._traced_values.append(snapshot)
        self._gwatch, self._cwatch = gwatch, cwatch

    # -- calls ----------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped tf.function; records any traces it made.

        Raises:
            UsageError: an argument has no TraceType (e.g. a non-frozen
                dataclass): the message names the parameter and the fixes.
            Whatever the function raises while tracing or running.
        """
        self.calls += 1
        before = self._count
        try:
            out = self.function(*args, **kwargs)
        except TypeError as e:
            if "Could not generate a generic TraceType" in str(e):
                raise self._no_trace_type_error(args, kwargs, e) from e
            self._record(before, args, kwargs, error=e)
            raise
        except Exception as e:
            self._record(before, args, kwargs, error=e)
            raise
        if self._count != before:
            self._record(before, args, kwargs)
        elif self._gwatch or self._cwatch:
            self._check_stale()
        return out

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Any:
        """``get_concrete_function`` of the wrapped tf.function; a trace it makes is recorded.

        Returns:
            The `ConcreteFunction` for these arguments / `tf.TensorSpec`s.
        """
        before = self._count
        try:
            cf = self.function.get_concrete_function(*args, **kwargs)
        except Exception as e:
            self._record(before, args, kwargs, kind="concrete", error=e)
            raise
        self._record(before, args, kwargs, kind="concrete")
        return cf

    def _check_stale(self) -> None:
        # Hot path of a cached call: identity checks only, the slow compare
        # runs only when an identity changed.
        for w in self._gwatch:
            cur = w[0].get(w[1], _MISSING)
            if cur is not w[2]:
                self._note_change(w[1], "global", w, cur)
        for w in self._cwatch:
            try:
                cur = w[1].cell_contents
            except ValueError:
                cur = _MISSING
            if cur is not w[2]:
                self._note_change(w[0], "closure", w, cur)

    def _note_change(self, name: str, scope: str, w: list, cur: Any) -> None:
        w[-1] = cur
        last = len(self._traced_values)
        traced = self._traced_values[-1].get(name, _MISSING) if last else _MISSING
        if traced is _MISSING or _same(traced, cur):
            return
        self.stale.append(StaleRead(name=name, scope=scope, traced=_value_repr(traced),
                                    current=_value_repr(cur), trace=last, call=self.calls))

    def _record(self, before: int, args: tuple, kwargs: dict, kind: str | None = None,
                error: BaseException | None = None) -> None:
        from tflab._target import error_summary

        n_new = self._count - before
        if n_new <= 0:
            return
        entries = self._new_cache_entries()
        lookup = self._lookup_inputs(args, kwargs)
        reduce_retracing = bool(getattr(self.function, "_reduce_retracing", False))
        for j in range(n_new):
            entry = entries[j] if j < len(entries) else None
            if entry is not None:
                scope = getattr(getattr(entry[0], "scope_type", None), "name", None)
            else:
                # A failed trace left no cache entry. Once the first call has
                # created tf.Variables, TF traces only with variable creation
                # disabled (polymorphic_function.Function._call).
                scope = NO_VARIABLE_CREATION if getattr(self.function, "_created_variables", None) else None
            inputs = lookup if lookup is not None else (
                function_type_inputs(entry[1]) if entry else ())
            traced_as = function_type_inputs(entry[1]) if entry else None
            failed = None
            if entry is None:  # the trace raised: the last one of this call is the one
                failed = error_summary(error) if error is not None else "an error (not seen by the probe)"
                failed = failed.split(". Make sure", 1)[0]  # TF's advice follows; ours is the fix
            t = make_trace(len(self.traces) + 1, inputs, [p for p in self.traces if p.kind != "failed"],
                           scope=scope, traced_as=traced_as, call=self.calls if kind is None else 0,
                           kind=kind, reduce_retracing=reduce_retracing, error=failed)
            if error is not None and j == n_new - 1:  # this trace or its call raised: why
                from tflab.diagnosis import probe_diagnosis

                t = probe_diagnosis(self, t, error, entry)
            self.traces.append(t)

    def _new_cache_entries(self) -> list[tuple[Any, Any]]:
        # The FunctionCache is an ordered map (FunctionContext, FunctionType) ->
        # ConcreteFunction; experimental_get_tracing_count() is its length.
        cache = getattr(self.function, "_function_cache", None)
        primary = getattr(cache, "_primary", None)
        if primary is None:
            return []
        keys = list(primary.keys())
        new = keys[self._cache_len:]
        self._cache_len = len(keys)
        return new

    def _lookup_inputs(self, args: tuple, kwargs: dict) -> tuple[tuple[str, str], ...] | None:
        """The FunctionType TF looked up for this call (before reduce_retracing relaxes it)."""
        try:
            from tensorflow.python.eager.polymorphic_function import function_type_utils as ftu

            f = self.function
            bound = ftu.canonicalize_function_inputs(args, kwargs, f._function_type,
                                                     f._default_values, f._is_pure)
            a, k = bound.args, bound.kwargs
            if f.input_signature is not None:
                a = (*f.input_signature, *a[len(f.input_signature):])
            ftype, _ = ftu.make_canonicalized_monomorphic_type(a, k, {}, f._function_type)
            return function_type_inputs(ftype)
        except Exception:  # private TF API moved: fall back to the cache entry's type
            return None

    def _no_trace_type_error(self, args: tuple, kwargs: dict, err: Exception) -> UsageError:
        from tensorflow.core.function import trace_type

        culprit, value = None, None
        try:
            sig = inspect.signature(self._user_fn)
            bound = sig.bind_partial(*args, **kwargs) if not isinstance(self._user_fn, types.MethodType) else None
            items = list(bound.arguments.items()) if bound else list(kwargs.items())
        except (TypeError, ValueError):
            items = [(f"argument {i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        for name, v in items:
            try:
                trace_type.from_value(v)
            except TypeError:
                culprit, value = name, v
                break
        what = f"argument {culprit!r} ({type(value).__name__})" if culprit else "an argument"
        # Measured (tests/test_cases_tracing.py T4): frozen=True alone makes it
        # hashable, so TF traces it as a Weakref TraceType matched by == while
        # alive; a fresh instance per call retraces once the previous is freed.
        return UsageError(
            f"{self.name}: {what} has no TraceType: it is mutable or unhashable (a non-frozen "
            f"dataclass?), so tf.function cannot key its cache on it; @dataclass(frozen=True) "
            f"makes it traceable (TF keeps a weak reference and matches equal live instances), "
            f"add __tf_tracing_type__ to trace it by value and avoid a retrace per new instance, "
            f"or pass its numbers as tensors")

    # -- reports ------------------------------------------------------------------
    @property
    def trace_count(self) -> int:
        """Traces counted by the trace-time side effect (failed traces included)."""
        return self._count

    @property
    def tf_tracing_count(self) -> int:
        """TF's own count: ``experimental_get_tracing_count()``, the number of cache entries."""
        return int(self.function.experimental_get_tracing_count())

    @property
    def original_tracing_count(self) -> int | None:
        """``experimental_get_tracing_count()`` of the tf.function given (its own calls), or None."""
        if self.original is None:
            return None
        return int(self.original.experimental_get_tracing_count())

    @property
    def reasons(self) -> list[str]:
        """Every reason line of every trace after the first, as ``#N reason``."""
        return [f"#{t.index} {r}" for t in self.traces for r in t.reasons]

    def to_text(self) -> str:
        """A readable report: counts, one block per trace, then stale reads."""
        tf_count = self.tf_tracing_count
        failed = sum(t.kind == "failed" for t in self.traces)
        note = f" ({failed} trace(s) raised, and TF caches only traces that succeed)" if failed else ""
        whose = "the probe's copy of the tf.function" if self.original is not None else "the probe's tf.function"
        lines = [f"RetraceProbe({self.name}): {self.trace_count} trace(s) in {self.calls} call(s) "
                 f"through the probe; TF's experimental_get_tracing_count() on {whose} = {tf_count}{note}"]
        if self.original is not None:
            lines.append(f"  {self.name} itself (calls not made through the probe are not seen): "
                         f"experimental_get_tracing_count() = {self.original_tracing_count}")
        for t in self.traces:
            lines.extend("  " + ln for ln in t.to_text().splitlines())
        for s in self.stale:
            lines.append(f"  stale: {s.text}\n      fix: {s.fix}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready dict of the counts, traces and stale reads."""
        return {"function": self.name, "trace_count": self.trace_count,
                "tf_tracing_count": self.tf_tracing_count, "calls": self.calls,
                "original_tracing_count": self.original_tracing_count,
                "traces": [t.to_dict() for t in self.traces],
                "stale": [dataclasses.asdict(s) | {"text": s.text, "fix": s.fix} for s in self.stale]}

    def __repr__(self) -> str:
        last = next((t for t in reversed(self.traces) if t.reasons), None)
        why = f", last reason: {last.reasons[0]!r}" if last else ""
        stale = f", {len(self.stale)} stale" if self.stale else ""
        return (f"<RetraceProbe {self.name}: {self.trace_count} trace(s) in {self.calls} call(s)"
                f"{why}{stale}>")


def _short_name(qualname: str) -> str:
    """``test_x.<locals>.h`` -> ``h``: the enclosing function adds nothing for a reader."""
    return qualname.rsplit("<locals>.", 1)[-1]


def _value_repr(v: Any) -> str:
    if v is _MISSING:
        return "<deleted>"
    if type(v).__name__ == "EagerTensor":
        return f"<tf.Tensor {v.dtype.name}{tuple(v.shape)} at {id(v):#x}>"
    if type(v).__name__ in _BY_IDENTITY:
        return f"<tf.Variable {v.name!r} {v.dtype.name}{tuple(v.shape)} at {id(v):#x}>"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------
# The "Creating new FuncGraph" log record
# ---------------------------------------------------------------------------

_LOG_PREFIX = "Creating new FuncGraph for Python function "
_FUNC_REPR = re.compile(r"^<(?:function|bound method) (\S+?)(?: at (0x[0-9a-fA-F]+)| of )")
_PARAM_LINE = re.compile(r"^  (\S+) \((\w+)\): (.*)$")
_SCOPE_RE = re.compile(r"scope_type=<ScopeType\.(\w+)")
_CONTEXT_RE = re.compile(r"FunctionContext\(context=(.*), scope_type=")


@dataclasses.dataclass(frozen=True)
class LoggedTrace:
    """One parsed "Creating new FuncGraph …" record.

    Attributes:
        function: the Python function's qualified name (``step``, ``Model.call``).
        module: its module when known ("" from text), used to hide TF's own helpers.
        scope: the FunctionContext scope_type name.
        context: the FunctionContext ``context`` text (eager context, device scope…).
        inputs: (parameter, TraceType text) pairs of the FunctionType TF looked up.
        key: which tf.function object traced: ``("object", n)`` in-process
            (the n-th distinct live `tf.function` seen), ``("address",
            qualname, "0x…")`` from the log text (the address TF prints is
            that of the traced wrapper, one per object and FunctionContext
            scope), or None when unknown (grouped by name).
        function_id: ``id()`` of the tf.function object in-process, else None.
        owner: a label that tells objects with one qualified name apart: the
            instance a method is bound to (``Net@0x7f…``), else the
            tf.function's address (``@0x7f…``); "" when unknown.
    """

    function: str
    module: str
    scope: str | None
    context: str | None
    inputs: tuple[tuple[str, str], ...]
    key: Any = None
    function_id: int | None = None
    owner: str = ""


def parse_trace_log_message(message: str) -> LoggedTrace | None:
    """Parses the text of TF 2.21's level-1 "Creating new FuncGraph …" log message.

    The record comes from ``tracing_compilation._maybe_define_function``:
    ``"Creating new FuncGraph for Python function %r (key: %r, %r)"`` with the
    Python function, its FunctionContext and the FunctionType TF looked up.

    Returns:
        A `LoggedTrace`, or None when ``message`` is another record.
    """
    if not message.startswith(_LOG_PREFIX):
        return None
    rest = message[len(_LOG_PREFIX):]
    fm = _FUNC_REPR.match(rest)
    function = fm.group(1) if fm else rest.split(" (key: ", 1)[0]
    sm = _SCOPE_RE.search(rest)
    cm = _CONTEXT_RE.search(rest)
    inputs = []
    in_params = False
    for line in rest.splitlines():
        if line.rstrip().endswith("Input Parameters:"):
            in_params = True
            continue
        if line.startswith("Output Type:"):
            break
        if in_params:
            pm = _PARAM_LINE.match(line)
            if pm:
                inputs.append((pm.group(1), pm.group(3)))
    address = fm.group(2) if fm and fm.group(2) else None
    return LoggedTrace(function=function, module="", scope=sm.group(1) if sm else None,
                       context=cm.group(1) if cm else None, inputs=tuple(inputs),
                       key=("address", function, address) if address else None,
                       owner=f"@{address}" if address else "")


def _tracing_function_object() -> Any:
    """The `tf.function` object whose trace is being logged, found on the call stack.

    TF 2.21 logs the wrapper it traces (``TracingOptions.python_function``, a
    new one per object and per FunctionContext scope), not the Function. The
    Function is ``self`` in the nearest frame of
    ``polymorphic_function.py`` (``Function._call``, ``_initialize``,
    ``get_concrete_function``…); the nearest one, so a tf.function called
    while another traces is told apart from its caller.

    Returns:
        The `Function`, or None when no such frame is found.
    """
    from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf

    frame = sys._getframe(1)
    for _ in range(80):
        if frame is None:
            return None
        if frame.f_code.co_filename.endswith("polymorphic_function.py"):
            obj = frame.f_locals.get("self")
            if isinstance(obj, pf.Function):
                return obj
        frame = frame.f_back
    return None


def _function_owner(fn: Any) -> str:
    """``Net@0x7f…`` for a tf.function method bound to an instance, else ``@0x7f…`` (the Function's id)."""
    from tensorflow.python.util import tf_decorator

    try:
        _, target = tf_decorator.unwrap(getattr(fn, "_python_function", None))
        holder = getattr(target, "__self__", None)
        # A method decorated in its class: TF binds it to a TfMethodTarget
        # holding a weak reference to the instance (class_method_to_instance_method).
        instance = holder.target if type(holder).__name__ == "TfMethodTarget" else holder
    except Exception:
        instance = None
    if instance is not None and not isinstance(instance, (type, types.ModuleType)):
        return f"{type(instance).__name__}@{id(instance):#x}"
    return f"@{id(fn):#x}"


def _logged_trace_from_record(record: logging.LogRecord,
                              identify: Callable[[Any], Any] | None = None) -> LoggedTrace | None:
    if not isinstance(record.msg, str) or not record.msg.startswith(_LOG_PREFIX):
        return None
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) == 3 and hasattr(args[2], "parameters"):
        # In-process: the record carries the real FunctionContext and FunctionType,
        # and the traced tf.function object is on the stack.
        fn, key, ftype = args
        scope = getattr(getattr(key, "scope_type", None), "name", None)
        owner = _tracing_function_object()
        return LoggedTrace(function=getattr(fn, "__qualname__", None) or repr(fn),
                           module=getattr(fn, "__module__", "") or "", scope=scope,
                           context=repr(getattr(key, "context", None)),
                           inputs=function_type_inputs(ftype),
                           key=identify(owner) if (owner is not None and identify) else None,
                           function_id=id(owner) if owner is not None else None,
                           owner=_function_owner(owner) if owner is not None else "")
    return parse_trace_log_message(record.getMessage())


class _TraceLogHandler(logging.Handler):
    def __init__(self, sink: list[LoggedTrace]):
        super().__init__(level=1)
        self.sink = sink
        # id -> (weak reference, serial): an id is reused once its object is
        # freed, so a key is a serial number per distinct live object.
        self._seen: dict[int, tuple[Any, int]] = {}
        self._serial = 0

    def _identify(self, obj: Any) -> tuple[str, int]:
        import weakref

        known = self._seen.get(id(obj))
        if known is not None and known[0]() is obj:
            return ("object", known[1])
        self._serial += 1
        self._seen[id(obj)] = (weakref.ref(obj), self._serial)
        return ("object", self._serial)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            t = _logged_trace_from_record(record, self._identify)
        except Exception:  # a log handler must never break the user's program
            return
        if t is not None:
            self.sink.append(t)


@contextlib.contextmanager
def capture_trace_log() -> Iterator[list[LoggedTrace]]:
    """Collects every "Creating new FuncGraph …" record logged inside the block.

    Lowers the ``tensorflow`` logger to level 1 for the block and keeps its
    existing handlers at their previous threshold, so nothing extra is printed.
    Records below that threshold do not propagate to the parent loggers'
    handlers either (pytest's log capture would show every trace record, with
    the tensors TF logs at level 2, under a failing test). TF itself is not
    patched.

    Yields:
        A list that fills with `LoggedTrace` records, in trace order.
    """
    logger = logging.getLogger("tensorflow")
    sink: list[LoggedTrace] = []
    handler = _TraceLogHandler(sink)
    old_level = logger.level
    threshold = logger.getEffectiveLevel()
    old_handlers = [(h, h.level) for h in logger.handlers]
    old_propagate = logger.propagate
    forward = _PropagateFrom(logger, threshold) if old_propagate else None
    for h, lvl in old_handlers:
        h.setLevel(max(lvl, threshold))
    logger.addHandler(handler)
    if forward is not None:
        logger.addHandler(forward)
        logger.propagate = False
    logger.setLevel(1)
    try:
        yield sink
    finally:
        logger.removeHandler(handler)
        if forward is not None:
            logger.removeHandler(forward)
            logger.propagate = old_propagate
        logger.setLevel(old_level)
        for h, lvl in old_handlers:
            h.setLevel(lvl)


class _PropagateFrom(logging.Handler):
    """Propagates records at or above ``level`` to the parent loggers' handlers.

    Does what ``Logger.callHandlers`` does past the logger itself, for the
    records that would have passed the logger's own level before
    `capture_trace_log` lowered it.
    """

    def __init__(self, logger: logging.Logger, level: int):
        super().__init__(level=level)
        self.logger = logger

    def handle(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return False
        parent = self.logger.parent
        while parent is not None:
            for h in parent.handlers:
                if record.levelno >= h.level:
                    h.handle(record)
            if not parent.propagate:
                break
            parent = parent.parent
        return True

    def emit(self, record: logging.LogRecord) -> None:  # handle() does the work
        pass


@dataclasses.dataclass(frozen=True)
class FunctionTraces:
    """The traces of one tf.function seen in a log, with reasons.

    Attributes:
        function: the Python function's name (its qualified name without the
            enclosing function's ``<locals>`` prefix).
        traces: one `Trace` per "Creating new FuncGraph" record, oldest first.
        owner: what tells this tf.function object apart from others with the
            same name (``Net@0x7f…``: the instance of a method; ``@0x7f…``:
            the object's address), or "".
        label: the name printed: ``function``, plus ``of OWNER`` when
            another tf.function in the same report has the same name.
    """

    function: str
    traces: tuple[Trace, ...]
    owner: str = ""
    label: str = ""

    @property
    def trace_count(self) -> int:
        return len(self.traces)

    def to_text(self) -> str:
        lines = [f"{self.label or self.function}: {self.trace_count} trace(s)"]
        for t in self.traces:
            lines.extend("  " + ln for ln in t.to_text().splitlines())
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"function": self.function, "label": self.label or self.function,
                "owner": self.owner, "trace_count": self.trace_count,
                "traces": [t.to_dict() for t in self.traces]}

    def __repr__(self) -> str:
        return f"<FunctionTraces {self.label or self.function}: {self.trace_count} trace(s)>"


def _is_tf_internal(t: LoggedTrace) -> bool:
    # TF's own helpers (variable initializers, tf.data wrappers) are not the user's functions.
    return t.module.startswith("tensorflow") or t.function.startswith(
        ("Function._initialize_uninitialized_variables", "StructuredFunctionWrapper."))


def _group_key(t: LoggedTrace, aliases: dict, groups: dict) -> Any:
    """The tf.function object a record belongs to (see `group_logged_traces`)."""
    if t.key is None:
        return ("name", t.function)
    if t.key[0] != "address" or t.key in groups:
        return aliases.get(t.key, t.key)
    if t.key in aliases:
        return aliases[t.key]
    # From the log text: TF logs a new wrapper (a new address) for the first
    # trace with variable creation disabled. It belongs to the latest object
    # of that name whose variable-creation trace had the same inputs.
    if t.scope == NO_VARIABLE_CREATION:
        for key in reversed(list(groups)):
            recs = groups[key]
            if (key[0] == "address" and recs[0].function == t.function
                    and not any(r.scope == NO_VARIABLE_CREATION for r in recs)
                    and any(r.scope == VARIABLE_CREATION and r.inputs == t.inputs for r in recs)):
                aliases[t.key] = key
                return key
    return t.key


def explain_records(records: Sequence[LoggedTrace], prior: Sequence[Trace] = (),
                    prior_contexts: Sequence[str | None] = (),
                    reduce_retracing: bool = False) -> list[Trace]:
    """Explains the logged traces of ONE tf.function object, after its ``prior`` traces.

    Args:
        records: that object's records, in trace order.
        prior: traces the object made before the records (`cached_traces`);
            the new traces are numbered after them and compared with them too.
        prior_contexts: the FunctionContext ``context`` text of each prior trace.
        reduce_retracing: the function has ``reduce_retracing=True``.

    Returns:
        One `Trace` per record (the prior ones are not repeated).
    """
    traces: list[Trace] = list(prior)
    contexts: list[str | None] = list(prior_contexts) + [None] * (len(prior) - len(prior_contexts))
    for rec in records:
        traces.append(make_trace(len(traces) + 1, rec.inputs, traces, scope=rec.scope,
                                 context=rec.context, previous_contexts=contexts,
                                 reduce_retracing=reduce_retracing, outcome_known=False))
        contexts.append(rec.context)
    return traces[len(prior):]


def group_logged_traces(logged: Sequence[LoggedTrace], include_internal: bool = False,
                        reduce_retracing: bool = False) -> tuple[FunctionTraces, ...]:
    """Groups logged traces by tf.function object and explains each one with `explain`.

    TF logs a trace when it starts, so a logged trace may have raised: the
    reasons never claim it succeeded (TF's variable-creation re-trace names
    both outcomes).

    Records are grouped by the tf.function OBJECT that traced (``key``), so
    two instances of a class with a ``@tf.function`` method, or two closures
    made by one factory, are two functions, each compared with its own
    traces only. Records without a key are grouped by qualified name.

    Args:
        logged: records from `capture_trace_log`, in trace order.
        include_internal: keep TF's own helper functions (variable
            initializers, tf.data wrappers).
        reduce_retracing: the functions have ``reduce_retracing=True`` (the
            log does not say; known when the tf.function object is at hand).

    Returns:
        One `FunctionTraces` per tf.function object, in first-trace order;
        objects that share a name are labelled ``NAME of OWNER``.
    """
    groups: dict[Any, list[LoggedTrace]] = {}
    aliases: dict[Any, Any] = {}
    for t in logged:
        if include_internal or not _is_tf_internal(t):
            groups.setdefault(_group_key(t, aliases, groups), []).append(t)
    names = [_short_name(recs[0].function) for recs in groups.values()]
    out = []
    for name, records in zip(names, groups.values()):
        owner = records[0].owner
        label = f"{name} of {owner}" if owner and names.count(name) > 1 else name
        out.append(FunctionTraces(function=name, owner=owner, label=label,
                                  traces=tuple(explain_records(records,
                                                               reduce_retracing=reduce_retracing))))
    return tuple(out)


def _cache_keys(fn: Any) -> list[tuple[Any, Any]]:
    """The (FunctionContext, FunctionType) keys of a tf.function's trace cache, oldest first."""
    primary = getattr(getattr(fn, "_function_cache", None), "_primary", None)
    try:
        return list(primary.keys()) if primary is not None else []
    except Exception:  # private TF API moved: no earlier traces to compare with
        return []


def cached_traces(fn: Any, keys: Sequence[tuple[Any, Any]] | None = None) -> tuple[list[Trace], list[str]]:
    """The traces a tf.function already holds in its trace cache, as `Trace` records.

    TF 2.21's ``FunctionCache`` (``tensorflow/core/function/polymorphism/
    function_cache.py``) is an ordered map ``(FunctionContext, FunctionType)
    -> ConcreteFunction``; ``experimental_get_tracing_count()`` is its length.
    The FunctionTypes are the ones TF traced (relaxed by
    ``reduce_retracing``), oldest first; traces that raised are not cached.
    The records are the baseline later traces are compared with: their kind
    is "cached" and they carry no reasons of their own.

    Args:
        fn: a `tf.function`.
        keys: the cache keys read earlier (``_cache_keys``); read now when None.

    Returns:
        (traces numbered from 1, the FunctionContext ``context`` text of each).
        Both empty when the cache cannot be read.
    """
    traces: list[Trace] = []
    contexts: list[str] = []
    for ctx, ftype in (_cache_keys(fn) if keys is None else keys):
        scope = getattr(getattr(ctx, "scope_type", None), "name", None)
        traces.append(Trace(index=len(traces) + 1, kind="cached", reasons=[], fixes=[],
                            inputs=function_type_inputs(ftype), scope=scope))
        contexts.append(repr(getattr(ctx, "context", None)))
    return traces, contexts


# What the log-based report cannot show (also in ``tflab retrace --help``).
STALE_READ_NOTE = ("stale closure or global reads (a Python value changed without a retrace) are "
                   "detected by tflab.RetraceProbe only: TF's trace log carries no values")


@dataclasses.dataclass(frozen=True)
class ScriptTraces:
    """What ``tflab retrace SCRIPT.py`` found.

    Attributes:
        script: the script path.
        functions: one `FunctionTraces` per tf.function that traced, in first-trace order.
        error: None, or one line saying how the script failed and where.
        note: None, or why some traces may be missing (the script raised the
            ``tensorflow`` logger's level, which hides TF's level-1 records).
    """

    script: str
    functions: tuple[FunctionTraces, ...]
    error: str | None = None
    note: str | None = None

    @property
    def trace_count(self) -> int:
        return sum(f.trace_count for f in self.functions)

    def to_text(self) -> str:
        if not self.functions:
            head = f"{self.script}: no tf.function traced"
        else:
            head = (f"{self.script}: {self.trace_count} trace(s) in {len(self.functions)} "
                    f"tf.function(s)")
        tail = [f"note: {self.note}"] if self.note else []
        if self.functions:
            tail.append(f"note: {STALE_READ_NOTE}")
        return "\n".join([head] + [f.to_text() for f in self.functions] + tail)

    def to_dict(self) -> dict:
        return {"script": self.script, "trace_count": self.trace_count,
                "functions": [f.to_dict() for f in self.functions], "error": self.error,
                "note": self.note}

    def __repr__(self) -> str:
        return (f"<ScriptTraces {self.script}: " + ", ".join(
            f"{f.label or f.function}×{f.trace_count}" for f in self.functions) + ">")


def trace_script(path: str, argv: Sequence[str] = (), include_internal: bool = False) -> ScriptTraces:
    """Runs a Python script as ``__main__`` and explains every tf.function trace it made.

    Args:
        path: the script (``.py``).
        argv: its command-line arguments (``sys.argv[1:]`` inside the script).
        include_internal: also list TF's own helper functions.

    Returns:
        A `ScriptTraces`; when the script raised or exited non-zero, ``error``
        says so in one line (the traces up to then are still listed).

    Raises:
        UsageError: ``path`` does not exist or is not a ``.py`` file.
    """
    from tflab._target import user_frame
    from tflab._usercode import process_guard

    if not os.path.exists(path):
        raise UsageError(f"script {path!r} does not exist; give a path to a .py file")
    if os.path.isdir(path) or not path.endswith(".py"):
        raise UsageError(f"script {path!r} is not a .py file")
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    error = note = None
    with capture_trace_log() as logged:
        try:
            with process_guard():  # a fork()ed child ends here; the script's chdir is undone
                runpy.run_path(path, run_name="__main__")
        except Terminated:  # SIGTERM (the CLI's handler), not the script's sys.exit: exit 143
            raise
        except SystemExit as e:
            if e.code not in (None, 0):
                error = f"{path} exited with status {e.code}"
        except SyntaxError as e:  # raised by runpy's compile: the place is in the error itself
            where = f"{e.filename or path}:{e.lineno}" if e.lineno else ""
            error = f"{path} raised SyntaxError: {e.msg}" + (f" (at {where})" if where else "")
        except Exception as e:  # the user's script failed: one line, their frame
            where = user_frame(e)
            first = (str(e).strip().splitlines() or [""])[0]
            error = (f"{path} raised {type(e).__name__}: {first}" + (f" (at {where})" if where else ""))
        except BaseException as e:  # e.g. raise BaseException("x"): one line too; Ctrl-C still interrupts
            if isinstance(e, (KeyboardInterrupt, GeneratorExit)):
                raise
            from tflab._usercode import describe

            error = describe(e, path, "while running")
        finally:
            sys.argv, sys.path[:] = old_argv, old_path
        level = logging.getLogger("tensorflow").level
        if level != 1:
            note = (f"the script set the tensorflow logger to level {logging.getLevelName(level)}, "
                    f"which hides TF's level-1 trace records: traces after that are not listed")
    return ScriptTraces(script=path, functions=group_logged_traces(logged, include_internal),
                        error=error, note=note)


# ---------------------------------------------------------------------------
# expect_traces
# ---------------------------------------------------------------------------


class TraceExpectation:
    """What `expect_traces` measured inside its block (filled in on exit).

    Attributes:
        count: traces made inside the block.
        traces: their `Trace` records with reasons, numbered after the
            traces the function made before the block.
        before: traces the function had made before the block (for a
            tf.function: its cache entries, which the block's traces are
            compared with).
    """

    def __init__(self) -> None:
        self.count = 0
        self.traces: list[Trace] = []
        self.before = 0

    def __repr__(self) -> str:
        return f"<TraceExpectation {self.count} trace(s)>"


def _method_instances(fn: Any) -> list[Any]:
    """The per-instance tf.functions TF made for a ``@tf.function`` method so far.

    ``Function.__get__`` gives each instance its own Function (own cache),
    kept in ``Function._descriptor_cache`` (TF 2.21 polymorphic_function.py),
    so ``Net.__call__`` taken from the class never traces itself.
    """
    cache = getattr(fn, "_descriptor_cache", None)
    try:
        return [f for f in list(cache.values()) if hasattr(f, "experimental_get_tracing_count")]
    except Exception:
        return []


class _FunctionWatch:
    """Counts and explains the traces of one tf.function (and its per-instance copies) in a block."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.counts = {id(f): (f, f.experimental_get_tracing_count()) for f in [fn, *_method_instances(fn)]}
        # The keys only (cheap); they become Trace records for the objects that trace again.
        self.prior_keys = {i: _cache_keys(f) for i, (f, _) in self.counts.items()}
        self._log = capture_trace_log()
        self.logged = self._log.__enter__()

    def finish(self, result: TraceExpectation) -> list[tuple[str, list[Trace]]]:
        """Stops reading the log; fills ``result``; returns (label, traces) per object that traced."""
        self._log.__exit__(None, None, None)
        members = {id(f): f for f in [self.fn, *_method_instances(self.fn)]}
        result.count = sum(f.experimental_get_tracing_count() - self.counts.get(i, (f, 0))[1]
                           for i, f in members.items())
        result.before = sum(len(self.prior_keys.get(i, ())) for i in members)
        by_object = any(t.function_id is not None for t in self.logged)
        target = _innermost_python_function(self.fn)
        qualname = getattr(target, "__qualname__", None) or getattr(self.fn, "__name__", "function")
        reduce_retracing = bool(getattr(self.fn, "_reduce_retracing", False))
        out = []
        for i, f in members.items():
            if by_object:
                mine = [t for t in self.logged if t.function_id == i and not _is_tf_internal(t)]
            else:  # the log records carry no object (TF internals moved): match the name
                mine = [t for t in self.logged if t.function == qualname] if f is self.fn else []
            if not mine:
                continue
            prior, contexts = cached_traces(f, self.prior_keys.get(i, []))
            traces = explain_records(mine, prior, contexts, reduce_retracing)
            out.append((_function_owner(f) if f is not self.fn else "", traces))
            result.traces.extend(traces)
        return out


class _ExpectTraces:
    """The context manager `expect_traces` returns (see there)."""

    def __init__(self, fn_or_probe: Any, at_most: int):
        if not isinstance(at_most, int) or at_most < 0:
            raise UsageError(f"expect_traces: at_most must be an int >= 0, got {at_most!r}")
        if not isinstance(fn_or_probe, RetraceProbe) and not hasattr(fn_or_probe,
                                                                    "experimental_get_tracing_count"):
            raise UsageError(f"expect_traces needs a tf.function or a RetraceProbe, got "
                             f"{type(fn_or_probe).__name__}; wrap a plain function: RetraceProbe(fn)")
        self.target = fn_or_probe
        self.at_most = at_most
        self.result = TraceExpectation()
        self._watch: _FunctionWatch | None = None

    def __enter__(self) -> TraceExpectation:
        t = self.target
        if isinstance(t, RetraceProbe):
            self._before = (len(t.traces), t.trace_count, t.calls, t.original_tracing_count)
            self.result.before = len(t.traces)
        else:
            self._watch = _FunctionWatch(t)
        return self.result

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True  # pytest shows the user's block, not this frame
        t, result = self.target, self.result
        no_probe_call = None
        if self._watch is not None:
            groups = self._watch.finish(result)
            target = _innermost_python_function(t)
            name = _short_name(getattr(target, "__qualname__", None) or getattr(t, "__name__", "function"))
        else:
            n_traces, count, calls, original = self._before
            result.count = t.trace_count - count
            result.traces = t.traces[n_traces:]
            groups = [("", result.traces)]
            name = t.name
            if t.calls == calls and t.trace_count == count:
                no_probe_call = _no_probe_call_error(t, original)
        if exc_type is not None:
            return False  # the block raised: that error is the story
        if no_probe_call is not None:
            raise no_probe_call
        if result.count > self.at_most:
            raise RetraceError(_retrace_message(name, result, self.at_most, groups),
                               result.traces, result.count, self.at_most)
        return False


def _no_probe_call_error(probe: RetraceProbe, original_before: int | None) -> UsageError:
    traced = ""
    if probe.original is not None and original_before is not None:
        n = probe.original_tracing_count - original_before
        traced = f" ({probe.name} itself traced {n} time(s) there, unseen by the probe)"
    return UsageError(
        f"expect_traces: no call went through RetraceProbe({probe.name}) inside the block"
        f"{traced}, so nothing was counted: the probe sees only calls made through it; call "
        f"probe(...) in the block, or pass the tf.function itself: "
        f"expect_traces({probe.name}, at_most=...)")


def _retrace_message(name: str, result: TraceExpectation, at_most: int,
                     groups: Sequence[tuple[str, Sequence[Trace]]]) -> str:
    before = ""
    if result.before:
        before = (f" (#1-#{result.before} were traced before the block)" if result.before > 1
                  else " (#1 was traced before the block)")
    lines = [f"{name} traced {result.count} time(s) in the block, expected at most {at_most}{before}:"]
    for owner, traces in groups:
        tag = f"{owner} " if owner and len(groups) > 1 else ""
        for tr in traces:
            head = f"  {tag}#{tr.index}{tr.versus}"
            if tr.kind == "first" and not tr.reasons:
                lines.append(f"{head} first trace" + (" of this object" if tag else ""))
            for r, fix in zip(tr.reasons, tr.fixes):
                lines.append(f"{head}: {r}  (fix: {fix})")
            if tr.runner_up is not None:
                lines.append(f"{' ' * len(head)}  runner-up vs #{tr.runner_up}: "
                             + "; ".join(tr.runner_up_reasons))
    return "\n".join(lines)


def expect_traces(fn_or_probe: Any, at_most: int) -> _ExpectTraces:
    """Asserts that a tf.function traces at most ``at_most`` times inside the ``with`` block.

    For a tf.function, the traces are TF's own: ``experimental_get_tracing_count()``
    counts them, TF's "Creating new FuncGraph" log records (matched to this
    tf.function OBJECT, not to its name) give their FunctionTypes, and each is
    compared with the traces the function made BEFORE the block too (its
    trace cache, `cached_traces`), so a function warmed up before the block
    gets the real reason (``x: shape (32, 4) -> (6, 4)``), not "first trace".
    A ``@tf.function`` method taken from the class (``Net.__call__``) counts
    the traces of every instance's copy together.

    Frames of this module are hidden from pytest's traceback
    (``__tracebackhide__``), so a failure shows the user's block and the reasons.

    Args:
        fn_or_probe: a `tf.function` (no probe needed), or a `RetraceProbe`
            (only calls made through the probe are seen).
        at_most: the most traces allowed inside the block (>= 0).

    Returns:
        A context manager; ``with expect_traces(...) as seen:`` gives a
        `TraceExpectation` whose ``count`` and ``traces`` are set on exit.

    Raises:
        RetraceError: more traces than ``at_most``; the message lists each
            trace's reasons, the trace it is compared with (``vs #N``) and fixes.
        UsageError: ``fn_or_probe`` is neither a probe nor a tf.function,
            ``at_most`` is negative, or no call went through the probe
            inside the block (a probe counts only its own calls).

    Example:

    >>> @tf.function
    ... def step(x):
    ...     return x * 2.0
    >>> _ = step(tf.ones([32, 4]))          # warmed up before the block
    >>> with expect_traces(step, at_most=0):
    ...     _ = step(tf.ones([6, 4]))
    Traceback (most recent call last):
    RetraceError: step traced 1 time(s) in the block, expected at most 0 (#1 was traced before the block):
      #2 vs #1: x: shape (32, 4) -> (6, 4) (dim 0: 32 -> 6)  (fix: …)
    """
    return _ExpectTraces(fn_or_probe, at_most)
