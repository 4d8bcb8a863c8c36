"""The records of the retrace package: `Reason`, `Trace` and the FIXES table.

A `Trace` is one FuncGraph TF traced for a tf.function, with the `Reason`s the
diff of its FunctionType against the nearest earlier trace gave
(`tflab.retrace.diff`). The records hold only text and numbers (and the
TraceType trees they were made from, for later diffs), so they are JSON-ready
and never print a raw TraceType repr in a reason or a fix.

This is the bottom of the retrace package: it imports no tflab module but the report base.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tflab.report.base import Report

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
    "function": "define the function once, outside the loop, and pass that same object every call: "
                "TF matches a function argument by identity (it keeps a weak reference), so a new "
                "lambda, closure or functools.partial per call traces again each time",
    "object_value": "TF matches a hashable Python object by == while it is alive: each new value "
                    "traces once; pass the fields that vary as tensors, or give the class "
                    "__tf_tracing_type__ to key it by the fields that matter",
    "collected": "keep the object alive and pass that same one (TF holds only a weak reference, so "
                 "the trace of a garbage-collected argument can never match again), or give its class "
                 "__tf_tracing_type__ (a TraceType by value), or pass its numbers as tensors",
    "string": "a Python str is part of the TraceType (one trace per distinct string): keep it to a "
              "few fixed values, or pass tf.constant(s), a tf.string tensor, if it varies",
    "none": "None and a value are different TraceTypes (one trace per form): pass the same type "
            "every call (e.g. a default tensor instead of None)",
    "ragged_shape": "give the tf.function input_signature=[tf.RaggedTensorSpec([None, ...], ...)] "
                    "with None for the dims that vary, or use reduce_retracing=True",
    "sparse_shape": "give the tf.function input_signature=[tf.SparseTensorSpec([None, ...], ...)] "
                    "with None for the dims that vary, or use reduce_retracing=True",
    "spec": "give the tf.function an input_signature with this TypeSpec, relaxed (None) where it "
            "varies, or use reduce_retracing=True",
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
_RR_ON = ("reduce_retracing is already on: TF traced this call with the dims that differ "
          "relaxed to None (see 'traced as'), so later calls that fit it reuse it and need no "
          "retrace; to skip this trace too, give the tf.function an input_signature with None "
          "for the dims that vary ")
FIXES_WITH_REDUCE_RETRACING = {
    "shape": _RR_ON + "(tf.TensorSpec([None, ...]))",
    "ragged_shape": _RR_ON + "(tf.RaggedTensorSpec([None, ...], ...))",
    "sparse_shape": _RR_ON + "(tf.SparseTensorSpec([None, ...], ...))",
    "spec": _RR_ON + "(the TypeSpec with None dims)",
}

# TF 2.21 polymorphic_function.Function._initialize: the error of a trace that
# creates a tf.Variable once variable creation is disabled.
SINGLETON_VARIABLE = "tf.function only supports singleton tf.Variables created on the first call"


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why one parameter made TF trace again.

    Attributes:
        parameter: the parameter's name, with a path into containers
            (``x``, ``cfg[0]``, ``batch['image']``); "" for reasons not tied
            to a parameter (TF's variable-creation re-trace).
        kind: "shape", "ragged_shape", "sparse_shape", "spec" (another
            TypeSpec field), "dtype", "value" (a Python number), "string",
            "none" (None <-> a value), "flag", "function" (a new function
            object), "bound_method", "object" (a new object, not ==),
            "object_value" (a live object with another value), "collected"
            (the earlier object was garbage-collected), "per_replica_shape",
            "replicas", "length", "keys", "kind", "signature", "variable_creation",
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
    # How TF traced the new value: "exact", or "relaxed" with ``relaxed`` the
    # spec it made (reduce_retracing); "" when not known (a failed trace).
    traced: str = ""
    relaxed: str = ""
    # The `tflab.fix.FixPlan` behind ``fix`` once the fix was run on the recorded
    # calls (`tflab.retrace.check.plan_fixes`): ``fix`` is then its Fix's line
    # without the ``fix: `` label; None while not yet checked.
    plan: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.text

    @property
    def fix_record(self) -> Any:
        """The `tflab.fix.Fix` printed for this reason (None before the check, or when every candidate failed)."""
        return self.plan.fix if self.plan is not None else None

    def to_dict(self) -> dict:
        """JSON-ready: the reason's fields, the printed Fix's fields and every candidate tried."""
        d = {k: getattr(self, k) for k in ("parameter", "kind", "old", "new", "text", "fix", "traced", "relaxed")}
        d["fix_record"] = self.plan.fix.to_dict() if self.plan is not None and self.plan.fix is not None else None
        d["fix_tried"] = [f.to_dict() for f in self.plan.tried] if self.plan is not None else []
        return d


@dataclasses.dataclass(frozen=True)
class Trace(Report):
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
            f"{n}={t}" for n, t in self.labels)
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
            return f"{head}: " + ", ".join(f"{n}={t}" for n, t in self.labels)
        if self.kind == "concrete" and not self.details:
            return f"{head}: get_concrete_function(" + ", ".join(
                f"{n}={t}" for n, t in self.labels) + ")"
        head += self.versus
        lines, pad = [], " " * (len(head) + 2)
        for i, r in enumerate(self.details):
            lines.append(f"{head}: {r.text}" if i == 0 else f"{pad}{r.text}")
            if i + 1 == len(self.details) or self.details[i + 1].fix != r.fix:
                shown = r.plan.lines() if r.plan is not None and r.plan.lines() else [f"fix: {r.fix}"]
                if r.plan is not None and r.plan.fix is not None:  # other candidates that also worked
                    shown += [f"also: {f.what} ({f.check_text})" for f in r.plan.tried
                              if f.checked and f is not r.plan.fix]
                lines.extend(pad + ln for ln in shown)  # once per run of equal fixes
        if self.runner_up is not None:
            n = len(self.runner_up_reasons)
            lines.append(f"{pad}runner-up vs #{self.runner_up} (also {n} change{'s' * (n != 1)}): "
                         + "; ".join(self.runner_up_reasons))
        if self.traced_as:
            lines.append(f"{pad}traced as: " + ", ".join(
                f"{n}={t}" for n, t in self.traced_labels))
        if self.diagnosis is not None:
            lines = lines or [head]
            lines.append(f"{pad}diagnosis: {self.diagnosis.headline}")
        return "\n".join(lines) if lines else head

    def to_dict(self) -> dict:
        """JSON-ready dict (inputs as a name → TraceType text mapping)."""
        return {"index": self.index, "kind": self.kind, "call": self.call,
                "reasons": list(self.reasons), "fixes": list(self.fixes),
                "compared_with": self.compared_with, "scope": self.scope,
                "runner_up": self.runner_up, "runner_up_reasons": list(self.runner_up_reasons),
                "inputs": dict(self.inputs),
                "traced_as": dict(self.traced_as) if self.traced_as else None,
                "labels": dict(self.labels),
                "traced_labels": dict(self.traced_labels) if self.traced_as else None,
                "site": self.site or None, "options": dict(self.options) if self.options else None,
                "details": [r.to_dict() for r in self.details],
                "diagnosis": self.diagnosis.to_dict() if self.diagnosis is not None else None}

    # Why the trace, or the call that made it, raised: a tflab.diagnosis.Diagnosis
    # (set by tflab.diagnosis.probe_diagnosis), else None.
    diagnosis: Any = None
    # Readable (parameter, label) pairs of ``inputs`` / ``traced_as``
    # (``float32(3,)``, ``lambda at demo.py:4``), as to_text prints them.
    labels: tuple = ()
    traced_labels: tuple = ()
    # The TraceType trees (`tflab.retrace.diff.Node`) of the lookup and the
    # traced FunctionType: later traces are diffed against ``traced_nodes``
    # (what TF cached), without re-reading any text.
    nodes: Any = dataclasses.field(default=None, repr=False, compare=False)
    traced_nodes: Any = dataclasses.field(default=None, repr=False, compare=False)
    # The options in force (reduce_retracing, input_signature, jit_compile)
    # and the user's call site (file:line) from the `TraceEvent`, when known.
    options: Any = dataclasses.field(default=None, repr=False, compare=False)
    site: str = ""


def short_name(qualname: str) -> str:
    """``test_x.<locals>.h`` -> ``h``: the enclosing function adds nothing for a reader."""
    return qualname.rsplit("<locals>.", 1)[-1]
