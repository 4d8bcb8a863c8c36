"""What the pytest plugin records of one test: every trace TF starts, from TF's own trace entry point.

`EntryHook` (one per session) wraps TF's trace entry point once TensorFlow
is loaded (`tflab._tf.function.install_trace_entry`: one call per FuncGraph
TF builds, whatever a test does to the ``tensorflow`` logger), and hands each
trace to the `Live` of the test running then. `Live` makes the trace's
`TraceEvent` from TF's tracing frame (`tflab.retrace.event.event_from_frame`),
explains it as it starts (`tflab.retrace.log.LiveExplainer`), times it
(`TraceClock`: start to the return of its call) and measures its graph
building apart (the entry point's own duration: the rest is instantiation,
XLA compilation and the first run). Only a phase that began before
TensorFlow was imported reads TF's level-1 log record instead
(`capture_trace_events`), and says so in the test's note.

Ownership is by location (`tflab.retrace.live.is_tf_internal`, through
`tflab._user.usercode.library_of`): TF's own helpers are not counted; tf.data's
functions (``map``, ``filter``) are counted in their own group, under the
user's function's name. A test that hides TensorFlow (``sys.modules
["tensorflow"] = None`` or a stand-in) is recorded as such and nothing is
read from TF while it does.

Importing this module imports neither TensorFlow nor the retrace package.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any, Iterable

from tflab._pytest.summary import CAVEAT_UNKNOWN_OUTCOME, name_of, short_parts

_MISSING = object()
TRACING_MODULE = "tensorflow.python.eager.polymorphic_function.tracing_compilation"


class TFState:
    """Whether the real TensorFlow is loaded, absent, or hidden by the running test."""

    def __init__(self) -> None:
        self.real: Any = None

    def __call__(self) -> str:
        """"loaded", "absent" (not imported yet) or "hidden" (None or a stand-in in sys.modules)."""
        m = sys.modules.get("tensorflow", _MISSING)
        if m is _MISSING:
            return "absent"
        if self.real is not None:
            return "loaded" if m is self.real else "hidden"
        if isinstance(m, types.ModuleType) and isinstance(sys.modules.get(TRACING_MODULE), types.ModuleType):
            from tflab._user.usercode import library_of

            if library_of(getattr(m, "__file__", None) or "") == "tensorflow":
                self.real = m
                return "loaded"
        return "hidden"


class EntryHook:
    """TF's trace entry point, wrapped once per session; each trace goes to the live test, if any."""

    def __init__(self) -> None:
        self._uninstall: Any = None
        self.live: "Live | None" = None
        self._local = threading.local()
        self.seen: set[tuple[str, str]] = set()  # (module, qualname) of functions that traced while installed (a budget's name check)

    def ensure(self) -> bool:
        if self._uninstall is None:
            from tflab._tf import function as _tf

            self._uninstall = _tf.install_trace_entry(self._start, self._end)
        return self._uninstall is not None

    def uninstall(self) -> None:
        if self._uninstall is not None:
            self._uninstall()
            self._uninstall = None

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _start(self, frame: Any) -> Any:
        if frame is None:  # no tracing frame found: TF's internals moved
            return None
        live = self.live
        if live is None:
            self._note_name(frame)
            return None
        stack = self._stack()
        token = live.on_frame(frame, stack[-1][1] if stack else None)
        if token is not None:
            stack.append(token)
        return token

    def _end(self, token: Any, ok: bool) -> None:
        stack = self._stack()
        for i in range(len(stack) - 1, -1, -1):  # by identity: two events may compare equal
            if stack[i] is token:
                del stack[i]
                break
        token[0].on_built(token, ok)

    def _note_name(self, frame: Any) -> None:
        from tflab._tf import function as _tf

        loc = _tf.tracing_locals(frame)
        py = getattr(loc, "python_function", None)
        if py is not None:
            self.seen.add((getattr(py, "__module__", "") or "", getattr(py, "__qualname__", "") or ""))


class Live:
    """The capture of one test: events in trace order, with their phase, group and timings."""

    def __init__(self, nodeid: str, entry: EntryHook, tf_state: TFState) -> None:
        from tflab.retrace.event import ObjectSerials, TraceClock
        from tflab.retrace.log import LiveExplainer

        self.nodeid = nodeid
        self.entry = entry
        self.tf_state = tf_state
        self.phase = "setup"
        self.clock = TraceClock()
        self.explainer = LiveExplainer(side_effects=False)  # the section reports no side effects
        self.identify = ObjectSerials()
        self.events: list = []
        self.info: dict[int, dict] = {}  # id(event) -> phase, group, source, build seconds, outcome, parent
        self.timed = False
        self._stack: Any = None
        self._log_phase = False
        self.notes: list[str] = []
        self.hidden: list[str] = []  # phases that began with TensorFlow hidden
        self.unmatched: str | None = None

    # -- phases ------------------------------------------------------------------------
    def begin(self, phase: str) -> None:
        from contextlib import ExitStack

        self.phase = phase
        self._log_phase = False
        stack = self._stack = ExitStack()
        state = self.tf_state()
        if state == "hidden":  # the test hid TF: nothing is read from it in this phase
            self.hidden.append(phase)
            return
        if state == "loaded" and self.entry.ensure():
            self.timed = True
            stack.enter_context(self.clock.watching())
            self.entry.live = self
            stack.callback(self._release)
            return
        # TensorFlow not imported yet: its level-1 log record is the only trigger there is.
        from tflab.retrace.event import capture_trace_events

        self._log_phase = True
        stack.enter_context(capture_trace_events(on_event=self._on_log_event, identify=self.identify))

    def _release(self) -> None:
        if self.entry.live is self:
            self.entry.live = None

    def end(self) -> None:
        import logging

        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        level = logging.getLogger("tensorflow").level  # before the capture restores it
        stack.close()
        if self._log_phase and self.tf_state() == "loaded":  # imported during the phase
            note = (f"TensorFlow was imported during this test's {self.phase}, so its traces there were "
                    f"read from TF's log record, which a logger setting can hide")
            if level != 1:
                note += (f" (the test set the tensorflow logger to level {logging.getLevelName(level)}: "
                         f"traces after that are not listed)")
            if note not in self.notes:
                self.notes.append(note)

    # -- traces ------------------------------------------------------------------------
    def on_frame(self, frame: Any, parent: Any) -> Any:
        """TF's entry point started a trace in ``frame``: its token (self, event, start), or None."""
        from tflab.retrace.event import event_from_frame

        event = event_from_frame(frame, self.identify)
        if event is None or not self._add(event, frame, "entry", parent):
            return None
        return (self, event, time.perf_counter())

    def on_built(self, token: Any, ok: bool) -> None:
        _, event, started = token
        info = self.info.get(id(event))
        if info is not None:
            info["build"] = time.perf_counter() - started
            info["ok"] = ok

    def _on_log_event(self, event: Any) -> None:
        from tflab._tf import function as _tf

        self._add(event, _tf.tracing_frame(sys._getframe(1)), "log", None)

    def _add(self, event: Any, frame: Any, source: str, parent: Any) -> bool:
        from tflab._tf import function as _tf
        from tflab.retrace.live import is_tf_internal

        data = _tf.data_function(frame) if frame is not None and event.function.startswith(
            "StructuredFunctionWrapper.") else None
        if data is not None:
            group = "tf.data"
        elif is_tf_internal(event):
            return False  # TF's own helper (a variable initializer): not the user's trace
        else:
            group = "tf.function"
        self.entry.seen.add((event.module, event.function))
        self.events.append(event)
        self.info[id(event)] = {"phase": self.phase, "group": group, "source": source, "build": None,
                                "ok": None, "parent": id(parent) if parent is not None else None,
                                "data": data}
        self.clock.on_event(event)
        if group == "tf.function":
            reason_source().live_explain(self.explainer, event)
        return True

    def functions(self, phases: Iterable[str] | None = None, group: str = "tf.function") -> list[dict]:
        """Per tf.function object (first-trace order): its record (see `function_record`)."""
        wanted = None if phases is None else set(phases)
        events = [e for e in self.events if self.info[id(e)]["group"] == group
                  and (wanted is None or self.info[id(e)]["phase"] in wanted)]
        if group == "tf.data":
            return data_records(self, events)
        return stable_labels(reason_source().group(self, events))

    def all_functions(self, phases: Iterable[str] | None = None) -> list[dict]:
        return self.functions(phases) + self.functions(phases, "tf.data")


class ReasonSource:
    """Where the plugin takes its traces' kinds and reasons from: `tflab.retrace.log`, nothing of its own.

    One object, so a test can plant a defect in it (drop a reason, lose a
    trace) and show that the plugin's checks catch it.
    """

    def live_explain(self, explainer: Any, event: Any) -> None:
        explainer(event)

    def group(self, live: Live, events: list) -> list[dict]:
        from tflab.retrace.log import group_logged_traces

        functions = group_logged_traces(events, effects=live.explainer.effects)
        by_key: dict[Any, list] = {}
        for e in events:
            by_key.setdefault(e.key if e.key is not None else ("name", e.function), []).append(e)
        return [function_record(f, evs, live) for f, evs in zip(functions, by_key.values())]


SOURCE = ReasonSource()


def reason_source() -> ReasonSource:
    return SOURCE


def _timings(events: list, live: Live) -> list[dict]:
    """Per event: seconds, graph-building and the rest, own seconds (nested traces apart), nested, outcome."""
    children: dict[int, list] = {}
    for e in live.events:
        parent = live.info[id(e)]["parent"]
        if parent is not None:
            children.setdefault(parent, []).append(e)
    out = []
    for e in events:
        info = live.info[id(e)]
        total, build = e.seconds, info["build"]
        kids = children.get(id(e), [])
        own = None if total is None else max(0.0, total - sum(k.seconds or 0.0 for k in kids))
        own_build = None if build is None else max(
            0.0, build - sum(live.info[id(k)]["build"] or 0.0 for k in kids))
        out.append({"seconds": total, "build_seconds": build,
                    "compile_seconds": None if total is None or build is None else max(0.0, total - build),
                    "own_seconds": own, "own_build_seconds": own_build,
                    "nested": info["parent"] is not None or id(e) in live.clock.nested,
                    "outcome": {True: "built", False: "raised", None: "unknown"}[info["ok"]],
                    "phase": info["phase"]})
    return out


def function_record(f: Any, events: list, live: Live) -> dict:
    """The JSON-ready record of one tf.function object's traces in one test.

    Keys: ``function`` (the name as TF's qualified name ends, ``Net.step``),
    ``qualname`` and ``module`` of the Python function, ``label`` and
    ``owner`` (stable within the test: ``Net#1``, no addresses),
    ``group`` ("tf.function"), ``trace_count``, ``seconds`` (the sum of the
    timed traces, each including the traces nested in it), ``own_seconds``
    (nested traces counted once, in their own function), ``build_seconds``
    (graph building), ``compile_seconds`` (instantiation, XLA compilation and
    the first run), ``untimed`` and ``traces``: per trace ``index`` (among
    this object's traces, counting those it held before the test), ``kind``,
    ``reasons``, ``causes`` (each reason's parameter and kind, ``x: shape``), the seconds above, ``nested``, ``outcome`` ("built",
    "raised", or "unknown" when read from TF's log), ``phase`` and ``site``.
    """
    traces = []
    for t, e, timing in zip(f.traces, events, _timings(events, live)):
        # As explained when TF started it, against what the object's cache held then (traces an
        # earlier test made included): the grouping afterwards would number it from 1.
        t = e.explained[0] if e.explained else t
        reasons = [r.replace(CAVEAT_UNKNOWN_OUTCOME, "") for r in t.reasons]
        causes = [f"{d.parameter}: {d.kind}" if d.parameter else d.kind for d in getattr(t, "details", ())]
        traces.append({"index": t.index, "kind": t.kind, "reasons": reasons, "causes": causes, **timing,
                       "site": e.site})
    first = events[0] if events else None
    rec = {"function": f.function_name, "qualname": first.function if first else f.function_name,
           "module": first.module if first else "", "label": f.function_name,
           "owner": first.owner if first else "", "group": "tf.function"}
    return _totals(rec, traces)


def _totals(rec: dict, traces: list[dict]) -> dict:
    def total(key: str) -> float:
        return sum(t[key] or 0.0 for t in traces)

    rec.update({"trace_count": len(traces), "seconds": total("seconds"), "own_seconds": total("own_seconds"),
                "build_seconds": total("own_build_seconds"), "compile_seconds": total("compile_seconds"),
                "untimed": sum(t["seconds"] is None for t in traces), "traces": traces})
    return rec


def data_records(live: Live, events: list) -> list[dict]:
    """tf.data's functions (``map``, ``filter``, ...), one record per user function and transformation."""
    groups: dict[Any, list] = {}
    for e in events:
        func, transformation = live.info[id(e)]["data"]
        body = getattr(func, "__func__", func)
        key = (transformation, getattr(body, "__module__", "") or "",
               getattr(body, "__qualname__", None) or getattr(body, "__name__", None) or repr(type(func)))
        groups.setdefault(key, []).append(e)
    out = []
    for (transformation, module, qualname), evs in groups.items():
        traces = [{"index": k, "kind": "first" if k == 1 else "retrace", "reasons": [], **timing,
                   "site": e.site} for k, (e, timing) in enumerate(zip(evs, _timings(evs, live)), start=1)]
        rec = {"function": ".".join(short_parts(qualname)) or qualname, "qualname": qualname, "module": module,
               "label": f"{transformation.rstrip('()') or 'tf.data'}: {'.'.join(short_parts(qualname))}",
               "owner": "", "group": "tf.data", "transformation": transformation}
        out.append(_totals(rec, traces))
    return out


def stable_labels(records: list[dict]) -> list[dict]:
    """Labels and owners without memory addresses: the k-th object of one name in the test is ``object k``.

    Two runs of one suite give the same labels (``Model.call (object 2)``), so
    their JSON files diff; ``owner`` is ``Model#2`` where the method's
    instance is known, else ``object 2``.
    """
    names = [name_of(r) for r in records]
    seen: dict[str, int] = {}
    for r, name in zip(records, names):
        k = seen[name] = seen.get(name, 0) + 1
        owner = r.get("owner") or ""
        cls = owner.split("@", 1)[0] if "@" in owner else ""
        r["owner"] = f"{cls}#{k}" if cls else f"object {k}"
        if names.count(name) > 1:
            r["label"] = f"{r['function']} (object {k})"
    return records


# ---------------------------------------------------------------------------
# Names as users write them
# ---------------------------------------------------------------------------


def name_matches(name: str, record: dict) -> bool:
    """``name`` names the function of ``record``: its short name, ``Class.method``, or a qualified name.

    Compared by whole dotted parts from the end of the qualified name
    (``<locals>`` left out): ``generate_step`` and ``GPT2CausalLM.generate_step``
    match ``GPT2CausalLM.generate_step``; ``step`` does not match ``train_step``.
    The module-qualified name and the record's label match too.
    """
    if name in (record["function"], record["qualname"], record["label"], name_of(record)):
        return True
    want = [p for p in name.split(".") if p]
    parts = short_parts(record["qualname"])
    if record.get("module"):
        parts = record["module"].split(".") + parts
    return bool(want) and len(want) <= len(parts) and parts[-len(want):] == want


def describe(fn: Any) -> str:
    if isinstance(fn, str):
        return fn
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def matches(fn: Any, record: dict, live: Live) -> bool:
    """``fn`` (a name, a tf.function, its Python function, or a tf.data function) is the function of ``record``."""
    if isinstance(fn, str):
        return name_matches(fn, record)
    from tflab._tf import function as _tf

    wanted = {id(fn)}
    try:
        wanted |= {id(x) for x in _tf.method_instances(fn)}
    except Exception:
        pass
    bare = getattr(fn, "__func__", fn)
    for e in live.events:
        info = live.info[id(e)]
        if info["group"] == "tf.data":
            func = info["data"][0]
            if record["group"] == "tf.data" and (func is fn or getattr(func, "__func__", func) is bare) \
                    and getattr(bare, "__qualname__", None) == record["qualname"]:
                return True
            continue
        if record["group"] != "tf.function" or e.function != record["qualname"]:
            continue
        obj = e.function_object()
        if obj is not None and id(obj) in wanted:
            return True
        python_function = getattr(obj, "python_function", None)
        if python_function is not None and (python_function is fn or _unwrap(python_function) is fn):
            return True
    return False


def _unwrap(fn: Any) -> Any:
    try:
        from tflab._tf import function as _tf

        return _tf.unwrap(fn)
    except Exception:
        return fn
