"""Every tf.function a block or a script traced: `group_logged_traces`, `trace_script`.

The traces are `TraceEvent`s from `tflab.retrace.event.capture_trace_events`
(TF's trace-time record, read from TF's own tracing frame), so any script can
be explained without patching TF (``tflab retrace SCRIPT.py``). Traces are
keyed by the tf.function OBJECT that made them, so two instances of a class
with a ``@tf.function`` method, or two closures from one factory, are
explained apart; objects that share a qualified name are then grouped again
(`NameGroup`): many objects that each traced once is "a new tf.function each
time", the first cause in TF's retracing warning. TF's record comes before
the trace, so this path cannot tell a trace that raised, and it has no
values, so it cannot see stale reads (only `tflab.RetraceProbe` can).
`cached_traces` reads a tf.function's trace cache, the baseline later traces
are compared with. The reasons come from `tflab.retrace.diff`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import runpy
import sys
import time
from typing import Any, Sequence

from tflab._api.deprecations import deprecated_fields
from tflab._tf import function as _tf
from tflab.errors import Terminated, UsageError
from tflab.retrace.event import ObjectSerials, TraceClock, TraceEvent, capture_trace_events
from tflab.retrace.records import NO_VARIABLE_CREATION, VARIABLE_CREATION, Trace, short_name
from tflab.retrace.records import FunctionTraces, ScriptTraces, STALE_READ_NOTE  # noqa: F401 (re-exported)
from tflab.retrace.live import (  # noqa: F401 (re-exported)
    LiveExplainer, cached_traces, capture_explained, explain_records, is_tf_internal, trace_from_event)


def _group_key(t: TraceEvent, aliases: dict, groups: dict) -> Any:
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


def group_logged_traces(logged: Sequence[TraceEvent], include_internal: bool = False,
                        reduce_retracing: bool = False, *, calls: dict | None = None,
                        effects: dict | None = None, bodies: dict | None = None) -> tuple[FunctionTraces, ...]:
    """Groups logged traces by tf.function object and explains each one with `explain`.

    TF logs a trace when it starts, so a logged trace may have raised: the
    reasons never claim it succeeded (TF's variable-creation re-trace names
    both outcomes).

    Records are grouped by the tf.function OBJECT that traced (``key``), so
    two instances of a class with a ``@tf.function`` method, or two closures
    made by one factory, are two functions, each compared with its own
    traces only. Records without a key are grouped by qualified name.

    Args:
        logged: events from `capture_trace_events`, in trace order.
        include_internal: keep TF's own helper functions (variable
            initializers, tf.data wrappers).
        reduce_retracing: the functions have ``reduce_retracing=True`` (the
            log does not say; known when the tf.function object is at hand).
        calls: ``{event key: eager calls}`` of each object, when counted.
        effects: ``{event key: [SideEffect]}`` of each object's body (`LiveExplainer.effects`).
        bodies: ``{event key: Python function}`` (`LiveExplainer.bodies`): each fix
            is run on a fresh tf.function of it over the object's recorded calls
            (`tflab.retrace.check`); without one a fix is "not checked".

    Returns:
        One `FunctionTraces` per tf.function object, in first-trace order;
        objects that share a name are labelled ``NAME of OWNER``.
    """
    groups: dict[Any, list[TraceEvent]] = {}
    aliases: dict[Any, Any] = {}
    for t in logged:
        if include_internal or not is_tf_internal(t):
            groups.setdefault(_group_key(t, aliases, groups), []).append(t)
    names = [short_name(recs[0].function) for recs in groups.values()]
    labels = [f"{name} of {recs[0].owner}" if recs[0].owner and names.count(name) > 1 else name
              for name, recs in zip(names, groups.values())]
    # CPython gives a freed object's address to the next object: two tf.functions alive one
    # after the other can share "@0x…"; number them so no two objects share a label.
    labels = [f"{lab} (object {labels[:i].count(lab) + 1} at this address)" if labels.count(lab) > 1
              and "@" in lab else lab for i, lab in enumerate(labels)]
    calls = calls or {}
    effects = effects or {}
    out = []
    for name, label, (key, records) in zip(names, labels, groups.items()):
        n_calls = calls.get(key)
        traces = tuple(explain_records(records, reduce_retracing=reduce_retracing))
        traces = tuple(_checked(traces, (bodies or {}).get(key), n_calls, records[0]))
        lines: tuple[str, ...] = ()
        if n_calls is not None and 0 < len(traces) < n_calls:  # the probe's rule: some call skipped the body
            lines = tuple(e.text(len(traces), n_calls) for e in effects.get(key, ()))
        body = (bodies or {}).get(key)
        rebinds: tuple[str, ...] = ()
        if body is not None:
            from tflab.retrace.statefix import static_rebinds

            rebinds = tuple(ln for rb in static_rebinds(body) for ln in rb.lines())
        out.append(FunctionTraces(function_name=name, owner=records[0].owner, label=label,
                                  traces=traces, calls=n_calls, side_effects=lines,
                                  qualname=records[0].function, rebinds=rebinds))
    return tuple(out)


def _checked(traces: Sequence[Trace], body: Any, n_calls: int | None, event: TraceEvent) -> list[Trace]:
    """The traces with each fix run on a fresh tf.function of ``body`` (`tflab.retrace.check`)."""
    from tflab.retrace.check import Bench, plan_fixes, recorded_calls

    if not any(t.details for t in traces):
        return list(traces)
    opts = dict(event.options or {})
    bench = Bench(body, recorded_calls(traces), n_calls or 0,
                  sum(t.kind != "failed" for t in traces), opts)
    if body is None:
        bench.body = None
    return plan_fixes(traces, bench)


# What the log-based report cannot show (also in ``tflab retrace --help``).

NEW_FUNCTION_FIX = ("build it once, outside the loop, and reuse it (the model, layer or tf.function); "
                    "for a Keras model call model(x) or model.predict_on_batch(x) in a loop rather than "
                    "building a model, or calling predict/fit, per step")


@deprecated_fields  # its old field names: tflab/_api/deprecations.py
@dataclasses.dataclass(frozen=True)
class NameGroup:
    """tf.function objects that share a qualified name (a new model, layer or closure per call).

    Attributes:
        function_name: the shared name.
        objects: how many tf.function objects had it.
        traces: their traces, all together.
        retraced: how many of the objects traced again for their own inputs
            (traces other than the first and TF's variable-creation re-trace).
        text: the finding, e.g. ``predict_function: 6 tf.function objects … a
            new tf.function each time``, or, for instances (or closures)
            configured with different values, that each needs its own traces.
        fix: the printed fix's line without the ``fix: `` label.
        configured: the objects are instances or closures with different
            attribute / closure values (each needs its own graph: nothing to fix across them).
        plan: the `tflab.fix.FixPlan` behind ``fix``.
    """

    function_name: str
    objects: int
    traces: int
    retraced: int
    text: str
    fix: str = NEW_FUNCTION_FIX
    configured: bool = False
    plan: Any = dataclasses.field(default=None, compare=False, repr=False)

    def lines(self) -> list[str]:
        return [self.text] + ["  " + ln for ln in (self.plan.lines() if self.plan is not None
                                                   else [f"fix: {self.fix}"])]

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("function_name", "objects", "traces", "retraced", "text", "fix",
                                           "configured")}
        d["fix_record"] = self.plan.fix.to_dict() if self.plan is not None and self.plan.fix else None
        return {"function": self.function_name, **d}


def _differing(configs: Sequence[tuple[str, dict]]) -> dict[str, list[str]]:
    keys = sorted(set().union(*(c[1] for c in configs)))
    out = {}
    for k in keys:
        values = [c[1].get(k, "<unset>") for c in configs]
        if len(set(values)) > 1:
            out[k] = list(dict.fromkeys(values))
    return out


def _group_fix(name: str, objs: Sequence[FunctionTraces], body: Any, n_traces: int) -> Any:
    """The "build it once" Fix for a name many objects share: where to build it, run on their calls."""
    from tflab import fix as fx
    from tflab.retrace.check import Bench, enclosing_scope, measured_fix, recorded_calls, traces_text

    qualname = objs[0].qualname or name
    scope = enclosing_scope(qualname)
    owner = objs[0].owner.split("@", 1)[0] if objs[0].owner and not objs[0].owner.startswith("@") else ""
    if scope is not None and not qualname.startswith(("TensorFlowTrainer", "Trainer", "Model")):
        desc = (f"`{name}` is defined inside `{scope[0]}`, so each call of it makes a new tf.function: create "
                f"it once, {scope[1]}, and reuse it")
    elif owner:
        desc = (f"each new {owner} makes its own tf.function `{name}`: build the {owner} once, outside the loop, "
                f"and reuse it")
    else:
        desc = NEW_FUNCTION_FIX
    calls = []
    n_calls = 0
    for f in objs:
        calls.extend(recorded_calls(f.traces))
        n_calls += f.calls if f.calls is not None else len(f.traces)
    bench = Bench(body, calls, n_calls, n_traces)
    if body is None:
        return fx.first_working([fx.unchecked("move", "", desc, "the tf.function objects were freed before "
                                              "tflab could trace one of them again")])
    return fx.first_working([lambda: measured_fix(
        "move", "", desc, bench, "one-object", calls, goal=lambda o: o.traces < n_traces,
        how=f"traced one tf.function of the latest `{name}` on the {len(calls)} call signature(s) of all "
            f"{len(objs)} objects", summary=lambda o: traces_text(o, bench))])


def name_groups(functions: Sequence[FunctionTraces], configs: Sequence[tuple[str, dict]] | None = None,
                bodies: dict | None = None) -> tuple[NameGroup, ...]:
    """Groups per-object `FunctionTraces` by name; a name shared by 2+ objects is a `NameGroup`.

    TF's retracing warning counts calls that traced, over all objects of one
    Python function; its first cause is "creating @tf.function repeatedly in
    a loop". Many objects of one name, each tracing once, is that cause, and
    no retrace of any one object; its fix names where the tf.function is made
    (the enclosing function of a ``<locals>`` qualname) and is run: one
    tf.function of the latest object traced on every object's recorded calls.
    Objects configured differently (instances with other attribute values,
    closures over other values) are not that cause: each needs its own graph.

    Args:
        functions: per-object records, as `group_logged_traces` gives them.
        configs: per record, ``("instance" | "closure", {name: repr})``
            (`LiveExplainer.configs`), or None when unknown.
        bodies: ``{qualname: Python function}`` of the latest object of each name.
    """
    by_name: dict[str, list[tuple[FunctionTraces, Any]]] = {}
    configs = list(configs) if configs is not None else [None] * len(functions)
    for f, c in zip(functions, configs):
        by_name.setdefault(f.function_name, []).append((f, c))
    out = []
    for name, pairs in by_name.items():
        objs = [f for f, _ in pairs]
        if len(objs) < 2:
            continue
        n_traces = sum(f.trace_count for f in objs)
        retraced = sum(any(t.kind not in ("first", "variable_creation", "cached") for t in f.traces)
                       for f in objs)
        cfgs = [c for _, c in pairs]
        differ = _differing(cfgs) if all(c and c[0] for c in cfgs) else {}
        if differ:
            from tflab import fix as fx

            what = "instances" if cfgs[0][0] == "instance" else "closures"
            vals = "; ".join(f"{k}: {', '.join(v)}" for k, v in differ.items())
            which = ("none of them retraced" if retraced == 0 else
                     f"{retraced} of them retraced for their own inputs: only those retraces are fixable "
                     "(listed below)")
            text = (f"{name}: {len(objs)} tf.function objects of this name made {n_traces} trace(s): {len(objs)} "
                    f"{what} configured with different values ({vals}), each with its own tf.function and "
                    f"trace cache (TF makes one per {what[:-1]}, by design); {which}")
            plan = fx.first_working([fx.unchecked(
                "none", "", "nothing to change across them: each configured " + what[:-1] + " needs its own trace",
                f"one shared tf.function would compute with one {what[:-1]}'s values ({vals})")])
            out.append(NameGroup(name, len(objs), n_traces, retraced, text, _line(plan), True, plan))
            continue
        which = ("none of them retraced" if retraced == 0 else
                 f"{retraced} of them also retraced for their own inputs (listed below)")
        text = (f"{name}: {len(objs)} tf.function objects of this name made {n_traces} trace(s): "
                f"a new tf.function each time (a new model, layer or closure per call), the first "
                f"cause TF's retracing warning names; {which}")
        plan = _group_fix(name, objs, (bodies or {}).get(objs[0].qualname), n_traces)
        out.append(NameGroup(name, len(objs), n_traces, retraced, text, _line(plan), False, plan))
    return tuple(out)


def _line(plan: Any) -> str:
    lines = plan.lines()
    return lines[0][len("fix: "):] if lines and lines[0].startswith("fix: ") else (lines[0] if lines else "")


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
    from tflab._api.argcheck import check_input_file, check_str_sequence
    from tflab._user.target import user_frame
    from tflab._user.usercode import process_guard

    argv = check_str_sequence(argv, "argv", "trace_script")
    check_input_file(path, "script", "trace_script")
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"trace_script takes the path of a .py file, got {type(path).__name__} {path!r}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise UsageError(f"script {path!r} does not exist; give a path to a .py file")
    if os.path.isdir(path) or not path.endswith(".py"):
        raise UsageError(f"script {path!r} is not a .py file")
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    error = note = None
    identify = ObjectSerials()
    clock = TraceClock()
    calls: dict[Any, int] = {}
    explainer = LiveExplainer(calls)

    def count(fn: Any) -> None:
        key = identify(fn)
        calls[key] = calls.get(key, 0) + 1

    def on_event(event: TraceEvent) -> None:
        clock.on_event(event)
        explainer(event)

    began = time.perf_counter()
    with clock.watching(), capture_trace_events(on_event, identify) as logged, _tf.count_eager_calls(count):
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
            from tflab._user.usercode import describe

            error = describe(e, path, "while running")
        finally:
            sys.argv, sys.path[:] = old_argv, old_path
        level = logging.getLogger("tensorflow").level
        if level != 1:
            note = (f"the script set the tensorflow logger to level {logging.getLevelName(level)}, "
                    f"which hides TF's level-1 trace records: traces after that are not listed")
    wall = time.perf_counter() - began
    functions = group_logged_traces(logged, include_internal, calls=calls, effects=explainer.effects,
                                    bodies=explainer.bodies)
    functions = tuple(dataclasses.replace(f, trace_seconds=s, script_seconds=wall)
                      for f, s in zip(functions, _seconds_by_group(logged, include_internal)))
    keys = _object_keys(logged, include_internal)
    groups = name_groups(functions, [explainer.configs.get(k) for k in keys], explainer.latest)
    return ScriptTraces(script=path, functions=functions, error=error, note=note, groups=groups,
                        wall_seconds=wall)


def _grouped_events(logged: Sequence[TraceEvent], include_internal: bool) -> dict:
    """{group key: its events}, by `group_logged_traces`'s own grouping rule and in its order."""
    groups: dict[Any, list] = {}
    aliases: dict[Any, Any] = {}
    for t in logged:
        if include_internal or not is_tf_internal(t):
            groups.setdefault(_group_key(t, aliases, groups), []).append(t)
    return groups


def _object_keys(logged: Sequence[TraceEvent], include_internal: bool) -> list:
    """The group key of each `FunctionTraces` `group_logged_traces` makes, in its order."""
    return list(_grouped_events(logged, include_internal))


def _seconds_by_group(logged: Sequence[TraceEvent], include_internal: bool) -> list[tuple]:
    """Each `group_logged_traces` group's trace seconds, in its order."""
    return [tuple(e.seconds for e in events) for events in _grouped_events(logged, include_internal).values()]


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
