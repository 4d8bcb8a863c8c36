"""The records of the retrace package: `Reason`, `Trace` and the FIXES table.

A `Trace` is one FuncGraph TF traced for a tf.function, with the `Reason`s the
diff of its FunctionType against the nearest earlier trace gave
(`tflab.retrace.diff`). The records hold only text and numbers (and the
TraceType trees they were made from, for later diffs), so they are JSON-ready
and never print a raw TraceType repr in a reason or a fix.

The reports made from them live here too: `FunctionTraces` and `ScriptTraces`
(`tflab.retrace.log`, ``tflab retrace SCRIPT``), `TriggerResult` and
`RetracingDemo` (`tflab.retrace.demo`). ``ScriptTraces.groups`` is filled by
`tflab.retrace.log.trace_script` (this module imports nothing back up).

This is the bottom of the retrace package: it imports no tflab module but the report base
(`tflab.report.base`, `tflab.report.text`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tflab.report.base import Report, config_field
from tflab.report.text import seconds_text, table, trace_time_line
from tflab.report.html.dispatch import renders
from tflab.report.html.timeline import script_fragment

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


@dataclasses.dataclass(frozen=True)
class TriggerResult:
    """One retrace trigger, measured before and after its prevention.

    Attributes:
        trigger: what changes between calls ("new shape", "changed closure"…).
        calls: the calls made, in words.
        traces: traces counted by the probe's trace-time side effect.
        tf_tracing_count: TF's ``experimental_get_tracing_count()`` afterwards
            (differs from ``traces`` when a trace raised: failed traces are not cached).
        reasons: the probe's reason lines for the traces after the first.
        observed: what else was measured (a stale result, the error raised), or "".
        prevention: the change applied.
        traces_after: traces counted with the prevention, same calls.
        observed_after: what the prevention's calls gave, or "".
    """

    trigger: str
    calls: str
    traces: int
    tf_tracing_count: int
    reasons: tuple[str, ...]
    observed: str
    prevention: str
    traces_after: int
    observed_after: str = ""


@dataclasses.dataclass(frozen=True, repr=False)
class RetracingDemo(Report):
    """The measured retrace triggers of `demonstrate_retracing`.

    Attributes:
        tf_version: ``tf.__version__`` the numbers were measured on.
        results: one `TriggerResult` per trigger, in lab order.
        config: `tflab.runtime_config()` as a dict, filled in when the demo
            is made. The trace counts are the
            same on every configuration (tracing is Python-side); it is
            recorded so the report says what it ran on.
    """

    tf_version: str
    results: tuple[TriggerResult, ...]
    config: dict = config_field()

    def __getitem__(self, trigger: str) -> TriggerResult:
        for r in self.results:
            if r.trigger == trigger:
                return r
        raise KeyError(f"no trigger {trigger!r}; triggers: {', '.join(r.trigger for r in self.results)}")

    @property
    def counts(self) -> dict[str, tuple[int, int]]:
        """trigger -> (traces, traces after prevention)."""
        return {r.trigger: (r.traces, r.traces_after) for r in self.results}

    def to_text(self, compact: bool = False) -> str:
        """A table: trigger, traces, prevention, traces after; ``compact`` drops the details."""
        w = max(len(r.trigger) for r in self.results)
        rows = table([(r.trigger, r.traces, f"{r.prevention} -> {r.traces_after}") for r in self.results],
                     header=("trigger", "traces", "prevention -> traces"), rule=False).splitlines()
        lines = rows[:1]
        for r, row in zip(self.results, rows[1:]):
            lines.append(row)
            if not compact:
                lines.append(f"{'':<{w}}          calls: {r.calls}")
                for reason in r.reasons:
                    lines.append(f"{'':<{w}}          reason: {reason}")
                if r.observed:
                    lines.append(f"{'':<{w}}          observed: {r.observed}")
                if r.observed_after:
                    lines.append(f"{'':<{w}}          after prevention: {r.observed_after}")
        if not compact and self.config.get("one_line"):
            lines.append(f"measured on: {self.config['one_line']}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {"tf_version": self.tf_version,
                "results": [dataclasses.asdict(r) for r in self.results], "config": self.config}

    def summary_line(self) -> str:
        return ", ".join(f"{r.trigger}: {r.traces}->{r.traces_after}" for r in self.results)

    def __repr__(self) -> str:
        return f"<RetracingDemo TF {self.tf_version}: {self.summary_line()}>"


STALE_READ_NOTE = ("stale closure or global reads (a Python value changed without a retrace) are "
                   "detected by tflab.RetraceProbe only: TF's trace log carries no values")


@dataclasses.dataclass(frozen=True, repr=False)
class FunctionTraces(Report):
    """The traces of one tf.function object seen in a block or a script, with reasons.

    Attributes:
        function_name: the Python function's name (its qualified name without
            the enclosing function's ``<locals>`` prefix).
        traces: one `Trace` per trace TF started, oldest first.
        owner: what tells this tf.function object apart from others with the
            same name (``Net@0x7f…``: the instance of a method; ``@0x7f…``:
            the object's address), or "".
        label: the name printed: ``function_name``, plus ``of OWNER`` when
            another tf.function in the same report has the same name (and
            ``(object N at this address)`` when a freed object's address was
            given to a later one).
        calls: eager calls of this object counted while the script ran
            (`tflab._tf.function.count_eager_calls`), or None when not counted.
        side_effects: the body's Python side effects that ran only while
            tracing, one line each, worded as `tflab.RetraceProbe.side_effects`
            words them (empty when every call traced, or calls were not counted).
        config: `tflab.runtime_config()` as a dict, filled when the record is made.
        trace_seconds: each trace's seconds (`tflab.retrace.event.TraceEvent.seconds`:
            tracing plus the first run's instantiation), None where not timed; () when not measured.
        script_seconds: the wall seconds of the script (or block) the traces were made in, or None.
    """

    function_name: str
    traces: tuple[Trace, ...]
    owner: str = ""
    label: str = ""
    calls: int | None = None
    side_effects: tuple[str, ...] = ()
    # Lines of the body that rebind a tf.Variable's name (`tflab.retrace.statefix.Rebind.lines`).
    rebinds: tuple[str, ...] = ()
    # The Python function's full qualified name (``Net.run.<locals>.step``): where it is defined.
    qualname: str = ""
    config: dict = config_field()
    trace_seconds: tuple[float | None, ...] = ()
    script_seconds: float | None = None

    @property
    def seconds(self) -> float:
        """Seconds of all this function's timed traces."""
        return sum(s for s in self.trace_seconds if s is not None)

    @property
    def time_text(self) -> str | None:
        """``train_step: 3 traces, 18.4 s of the script's 25.0 s (74%)``, or None when not timed."""
        if not any(s is not None for s in self.trace_seconds):
            return None
        return trace_time_line(self.label or self.function_name, self.trace_count, self.seconds,
                               self.script_seconds, "the script's {}")

    def _time_lines(self) -> list[str]:
        if not any(s is not None for s in self.trace_seconds):
            return []
        per = ", ".join(f"#{t.index} {seconds_text(s)}" for t, s in zip(self.traces, self.trace_seconds))
        return [f"  trace time: {seconds_text(self.seconds)} ({per}; tracing plus the first run's instantiation)"]

    @property
    def trace_count(self) -> int:
        return len(self.traces)

    def summary_line(self) -> str:
        return f"{self.trace_count} trace(s)" + (f" in {self.calls} call(s)" if self.calls is not None else "")

    def to_text(self) -> str:
        calls = f" in {self.calls} call(s)" if self.calls is not None else ""
        lines = [f"{self.label or self.function_name}: {self.trace_count} trace(s){calls}"]
        lines += self._time_lines()
        for t in self.traces:
            lines.extend("  " + ln for ln in t.to_text().splitlines())
        lines.extend(f"  side effect: {e}" for e in self.side_effects)
        lines.extend(f"  {e}" for e in self.rebinds)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"function": self.function_name, "function_name": self.function_name,
                "label": self.label or self.function_name, "owner": self.owner,
                "trace_count": self.trace_count, "calls": self.calls,
                "traces": [t.to_dict() for t in self.traces],
                "side_effects": list(self.side_effects), "rebinds": list(self.rebinds), "config": self.config,
                "trace_seconds": list(self.trace_seconds), "seconds": self.seconds,
                "script_seconds": self.script_seconds}

    def __repr__(self) -> str:
        return f"<FunctionTraces {self.label or self.function_name}: {self.summary_line()}>"


@dataclasses.dataclass(frozen=True, repr=False)
class ScriptTraces(Report):
    """What ``tflab retrace SCRIPT.py`` found.

    Attributes:
        script: the script path.
        functions: one `FunctionTraces` per tf.function that traced, in first-trace order.
        error: None, or one line saying how the script failed and where.
        note: None, or why some traces may be missing (the script raised the
            ``tensorflow`` logger's level, which hides TF's level-1 records).
        config: `tflab.runtime_config()` as a dict, filled when the report is made.
        wall_seconds: the script's wall time (seconds), or None.
    """

    script: str
    functions: tuple[FunctionTraces, ...]
    error: str | None = None
    note: str | None = None
    # The `NameGroup`s found while the script's objects were alive (their fixes run); () when none.
    groups: tuple = ()
    config: dict = config_field()
    wall_seconds: float | None = None

    @property
    def time_lines(self) -> list[str]:
        """``trace time: train_step: 3 traces, 18.4 s of the script's 25.0 s (74%)``, most seconds first."""
        timed = [f for f in self.functions if f.time_text is not None]
        return [f"trace time: {f.time_text}" for f in sorted(timed, key=lambda f: -f.seconds)]

    @property
    def trace_count(self) -> int:
        return sum(f.trace_count for f in self.functions)

    @property
    def shared_names(self) -> tuple:
        """Names shared by several tf.function objects: the `tflab.retrace.log.NameGroup`s
        `trace_script` found with `tflab.retrace.log.name_groups` (their fixes run) and stored in ``groups``."""
        return tuple(self.groups)

    def to_text(self) -> str:
        if not self.functions:
            head = f"{self.script}: no tf.function traced" + (f" ({self.error})" if self.error else "")
        else:
            head = (f"{self.script}: {self.trace_count} trace(s) in {len(self.functions)} "
                    f"tf.function(s)")
        shared = [ln for g in self.shared_names for ln in g.lines()]
        tail = [f"note: {self.note}"] if self.note else []
        head = "\n".join([head] + self.time_lines)
        if self.functions:
            tail.append(f"note: {STALE_READ_NOTE}")
        return "\n".join([head] + shared + [f.to_text() for f in self.functions] + tail)

    def to_dict(self) -> dict:
        return {"script": self.script, "trace_count": self.trace_count,
                "functions": [f.to_dict() for f in self.functions], "error": self.error,
                "shared_names": [g.to_dict() for g in self.shared_names],
                "note": self.note, "config": self.config, "wall_seconds": self.wall_seconds}

    def __repr__(self) -> str:
        traced = ", ".join(f"{f.label or f.function_name}×{f.trace_count}" for f in self.functions)
        ended = f"; {self.error}" if self.error else ""
        return f"<ScriptTraces {self.script}: {traced or 'no tf.function traced'}{ended}>"


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(ScriptTraces)(script_fragment)
