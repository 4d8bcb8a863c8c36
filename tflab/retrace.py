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
  TF logs a trace as it starts, so this path cannot tell a trace that raised,
  and it has no values, so it cannot see stale reads.
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

from tflab.errors import UsageError

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

    def __repr__(self) -> str:
        why = "; ".join(self.reasons) if self.reasons else ", ".join(
            f"{n}={_short_type(t)}" for n, t in self.inputs)
        return f"<Trace #{self.index} {self.kind}: {why}>"

    def to_text(self) -> str:
        """One line per reason: ``#2 retrace  x: shape (3,) -> (4,)  fix: …``."""
        head = f"#{self.index} {self.kind}"
        if self.kind == "first":
            return f"{head}: " + ", ".join(f"{n}={_short_type(t)}" for n, t in self.inputs)
        if self.kind == "concrete" and not self.details:
            return f"{head}: get_concrete_function(" + ", ".join(
                f"{n}={_short_type(t)}" for n, t in self.inputs) + ")"
        lines, pad = [], " " * (len(head) + 2)
        for i, r in enumerate(self.details):
            lines.append(f"{head}: {r.text}" if i == 0 else f"{pad}{r.text}")
            if i + 1 == len(self.details) or self.details[i + 1].fix != r.fix:
                lines.append(f"{pad}fix: {r.fix}")  # once per run of equal fixes
        if self.traced_as:
            lines.append(f"{pad}traced as: " + ", ".join(
                f"{n}={_short_type(t)}" for n, t in self.traced_as))
        return "\n".join(lines) if lines else head

    def to_dict(self) -> dict:
        """JSON-ready dict (inputs as a name → TraceType text mapping)."""
        return {"index": self.index, "kind": self.kind, "call": self.call,
                "reasons": list(self.reasons), "fixes": list(self.fixes),
                "compared_with": self.compared_with, "scope": self.scope,
                "inputs": dict(self.inputs),
                "traced_as": dict(self.traced_as) if self.traced_as else None}


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


def _describe(node: _Node) -> str:
    """A short human label for a TraceType tree (used for kind changes and first traces)."""
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


def explain(inputs: Sequence[tuple[str, str]], previous: Sequence[Trace], *,
            scope: str | None = None, context: str | None = None,
            previous_contexts: Sequence[str | None] | None = None,
            reduce_retracing: bool = False,
            outcome_known: bool = True) -> tuple[str, int | None, list[Reason]]:
    """Explains a new trace against the earlier ones of the same function.

    Compares the new FunctionType's inputs with each earlier trace's and keeps
    the nearest (fewest changes, counting a tensor's dtype and shape
    separately; the latest on a tie), as TF's dispatch would have used the
    closest cached type had it matched.

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
    if not previous:
        return "first", None, []
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
                return "variable_creation", p.index, [r]
    same_scope = [p for p in previous if scope is None or p.scope in (None, scope)] or list(previous)
    best: tuple[int, int, list[Reason], Trace] | None = None
    for p in same_scope:
        reasons = _param_reasons(dict(p.inputs), new)
        key = (len(reasons), -p.index)
        if best is None or key < best[:2]:
            best = (key[0], key[1], reasons, p)
    assert best is not None
    _, _, reasons, nearest = best
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
    return "retrace", nearest.index, reasons


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
    auto_kind, compared, reasons = explain(inputs, previous, scope=scope, context=context,
                                           previous_contexts=previous_contexts,
                                           reduce_retracing=reduce_retracing,
                                           outcome_known=outcome_known)
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
                 call=call, details=tuple(reasons))


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
    own trace cache: traces made through the original tf.function are not seen.

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
        function: the wrapped `tf.function` that calls go through.
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
        else:
            self.function = tf.function(wrapper, **tf_function_kwargs)
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
    def reasons(self) -> list[str]:
        """Every reason line of every trace after the first, as ``#N reason``."""
        return [f"#{t.index} {r}" for t in self.traces for r in t.reasons]

    def to_text(self) -> str:
        """A readable report: counts, one block per trace, then stale reads."""
        tf_count = self.tf_tracing_count
        failed = sum(t.kind == "failed" for t in self.traces)
        note = f" ({failed} trace(s) raised, and TF caches only traces that succeed)" if failed else ""
        lines = [f"RetraceProbe({self.name}): {self.trace_count} trace(s) in {self.calls} call(s); "
                 f"TF's experimental_get_tracing_count() = {tf_count}{note}"]
        for t in self.traces:
            lines.extend("  " + ln for ln in t.to_text().splitlines())
        for s in self.stale:
            lines.append(f"  stale: {s.text}\n      fix: {s.fix}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready dict of the counts, traces and stale reads."""
        return {"function": self.name, "trace_count": self.trace_count,
                "tf_tracing_count": self.tf_tracing_count, "calls": self.calls,
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
_FUNC_REPR = re.compile(r"^<(?:function|bound method) (\S+?)(?: at 0x| of )")
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
    """

    function: str
    module: str
    scope: str | None
    context: str | None
    inputs: tuple[tuple[str, str], ...]


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
    return LoggedTrace(function=function, module="", scope=sm.group(1) if sm else None,
                       context=cm.group(1) if cm else None, inputs=tuple(inputs))


def _logged_trace_from_record(record: logging.LogRecord) -> LoggedTrace | None:
    if not isinstance(record.msg, str) or not record.msg.startswith(_LOG_PREFIX):
        return None
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) == 3 and hasattr(args[2], "parameters"):
        # In-process: the record carries the real FunctionContext and FunctionType.
        fn, key, ftype = args
        scope = getattr(getattr(key, "scope_type", None), "name", None)
        return LoggedTrace(function=getattr(fn, "__qualname__", None) or repr(fn),
                           module=getattr(fn, "__module__", "") or "", scope=scope,
                           context=repr(getattr(key, "context", None)),
                           inputs=function_type_inputs(ftype))
    return parse_trace_log_message(record.getMessage())


class _TraceLogHandler(logging.Handler):
    def __init__(self, sink: list[LoggedTrace]):
        super().__init__(level=1)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            t = _logged_trace_from_record(record)
        except Exception:  # a log handler must never break the user's program
            return
        if t is not None:
            self.sink.append(t)


@contextlib.contextmanager
def capture_trace_log() -> Iterator[list[LoggedTrace]]:
    """Collects every "Creating new FuncGraph …" record logged inside the block.

    Lowers the ``tensorflow`` logger to level 1 for the block and keeps its
    existing handlers at their previous threshold, so nothing extra is printed.
    TF itself is not patched.

    Yields:
        A list that fills with `LoggedTrace` records, in trace order.
    """
    logger = logging.getLogger("tensorflow")
    sink: list[LoggedTrace] = []
    handler = _TraceLogHandler(sink)
    old_level = logger.level
    threshold = logger.getEffectiveLevel()
    old_handlers = [(h, h.level) for h in logger.handlers]
    for h, lvl in old_handlers:
        h.setLevel(max(lvl, threshold))
    logger.addHandler(handler)
    logger.setLevel(1)
    try:
        yield sink
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        for h, lvl in old_handlers:
            h.setLevel(lvl)


@dataclasses.dataclass(frozen=True)
class FunctionTraces:
    """The traces of one tf.function seen in a log, with reasons.

    Attributes:
        function: the Python function's name (its qualified name without the
            enclosing function's ``<locals>`` prefix).
        traces: one `Trace` per "Creating new FuncGraph" record, oldest first.
    """

    function: str
    traces: tuple[Trace, ...]

    @property
    def trace_count(self) -> int:
        return len(self.traces)

    def to_text(self) -> str:
        lines = [f"{self.function}: {self.trace_count} trace(s)"]
        for t in self.traces:
            lines.extend("  " + ln for ln in t.to_text().splitlines())
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"function": self.function, "trace_count": self.trace_count,
                "traces": [t.to_dict() for t in self.traces]}

    def __repr__(self) -> str:
        return f"<FunctionTraces {self.function}: {self.trace_count} trace(s)>"


def _is_tf_internal(t: LoggedTrace) -> bool:
    # TF's own helpers (variable initializers, tf.data wrappers) are not the user's functions.
    return t.module.startswith("tensorflow") or t.function.startswith(
        ("Function._initialize_uninitialized_variables", "StructuredFunctionWrapper."))


def group_logged_traces(logged: Sequence[LoggedTrace], include_internal: bool = False,
                        reduce_retracing: bool = False) -> tuple[FunctionTraces, ...]:
    """Groups logged traces by function and explains each one with `explain`.

    TF logs a trace when it starts, so a logged trace may have raised: the
    reasons never claim it succeeded (TF's variable-creation re-trace names
    both outcomes).

    Functions are grouped by qualified name: the two records TF writes for one
    tf.function's first call (VARIABLE_CREATION, then NO_VARIABLE_CREATION)
    name different wrapper objects, but the same function. Two tf.functions
    with the same qualified name are therefore counted together.

    Args:
        logged: records from `capture_trace_log`, in trace order.
        include_internal: keep TF's own helper functions (variable
            initializers, tf.data wrappers).
        reduce_retracing: the functions have ``reduce_retracing=True`` (the
            log does not say; known when the tf.function object is at hand).

    Returns:
        One `FunctionTraces` per function, in first-trace order.
    """
    by_name: dict[str, list[LoggedTrace]] = {}
    for t in logged:
        if include_internal or not _is_tf_internal(t):
            by_name.setdefault(t.function, []).append(t)
    out = []
    for qualname, records in by_name.items():
        traces: list[Trace] = []
        contexts: list[str | None] = []
        for rec in records:
            traces.append(make_trace(len(traces) + 1, rec.inputs, traces, scope=rec.scope,
                                     context=rec.context, previous_contexts=contexts,
                                     reduce_retracing=reduce_retracing, outcome_known=False))
            contexts.append(rec.context)
        out.append(FunctionTraces(function=_short_name(qualname), traces=tuple(traces)))
    return tuple(out)


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
            f"{f.function}×{f.trace_count}" for f in self.functions) + ">")


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
            runpy.run_path(path, run_name="__main__")
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
        traces: their `Trace` records with reasons.
    """

    def __init__(self) -> None:
        self.count = 0
        self.traces: list[Trace] = []

    def __repr__(self) -> str:
        return f"<TraceExpectation {self.count} trace(s)>"


@contextlib.contextmanager
def expect_traces(fn_or_probe: Any, at_most: int) -> Iterator[TraceExpectation]:
    """Asserts that a tf.function traces at most ``at_most`` times inside the block.

    Args:
        fn_or_probe: a `RetraceProbe` (its traces inside the block are
            counted) or a `tf.function` (counted with
            ``experimental_get_tracing_count()``, reasons read from TF's
            "Creating new FuncGraph" log records).
        at_most: the most traces allowed inside the block (>= 0).

    Yields:
        A `TraceExpectation` whose ``count`` and ``traces`` are set on exit.

    Raises:
        RetraceError: more traces than ``at_most``; the message lists each
            trace's reasons and fixes.
        UsageError: ``fn_or_probe`` is neither a probe nor a tf.function, or
            ``at_most`` is negative.

    Example:

    >>> probe = RetraceProbe(lambda x: x * 2)
    >>> with expect_traces(probe, at_most=1):
    ...     _ = probe(tf.ones([4]))
    ...     _ = probe(tf.ones([4]))
    """
    if not isinstance(at_most, int) or at_most < 0:
        raise UsageError(f"expect_traces: at_most must be an int >= 0, got {at_most!r}")
    result = TraceExpectation()
    if isinstance(fn_or_probe, RetraceProbe):
        before = len(fn_or_probe.traces)
        count_before = fn_or_probe.trace_count
        try:
            yield result
        finally:
            result.count = fn_or_probe.trace_count - count_before
            result.traces = fn_or_probe.traces[before:]
        name = fn_or_probe.name
    elif hasattr(fn_or_probe, "experimental_get_tracing_count"):
        target = _innermost_python_function(fn_or_probe)
        qualname = getattr(target, "__qualname__", None) or getattr(fn_or_probe, "__name__", "function")
        name = _short_name(qualname)
        count_before = fn_or_probe.experimental_get_tracing_count()
        with capture_trace_log() as logged:
            try:
                yield result
            finally:
                result.count = fn_or_probe.experimental_get_tracing_count() - count_before
                mine = [t for t in logged if t.function == qualname]
                groups = group_logged_traces(
                    mine, reduce_retracing=bool(getattr(fn_or_probe, "_reduce_retracing", False)))
                result.traces = list(groups[0].traces) if groups else []
    else:
        raise UsageError(f"expect_traces needs a tf.function or a RetraceProbe, got "
                         f"{type(fn_or_probe).__name__}; wrap a plain function: RetraceProbe(fn)")
    if result.count > at_most:
        lines = [f"{name} traced {result.count} time(s) in the block, expected at most {at_most}:"]
        for t in result.traces:
            if t.kind == "first" and not t.reasons:
                lines.append(f"  #{t.index} first trace in the block")
            for r, fix in zip(t.reasons, t.fixes):
                lines.append(f"  #{t.index} {r}  (fix: {fix})")
        raise RetraceError("\n".join(lines), result.traces, result.count, at_most)
