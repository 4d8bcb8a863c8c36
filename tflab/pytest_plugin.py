"""pytest plugin: the tf.function traces of each test, with reasons, seconds and budgets.

Registered by the ``pytest11`` entry point ``tflab`` (so ``pip install tflab``
is enough; ``-p no:tflab`` turns it off). Importing it imports neither
TensorFlow nor the retrace package: those load when a test is recorded, i.e.
under ``--tflab-traces`` / ``--tflab-traces-json``, or for a test with the
``tflab_max_traces`` marker or the ``tflab_traces`` fixture.

What it records is the one TraceEvent pipeline of `tflab.retrace`: every trace
any tf.function starts while a test's setup, call or teardown runs
(`tflab.retrace.event.capture_trace_events`, TF's trace-time record read from
its tracing frame), explained as it starts by `tflab.retrace.log.LiveExplainer`
(the reasons `tflab.RetraceProbe` and ``tflab retrace`` give), and timed by
`tflab.retrace.event.TraceClock` (tracing plus the first run's instantiation).

* ``--tflab-traces``: a terminal summary section ``tflab traces``: per test, each
  tf.function that traced, its trace count, the reasons of each retrace and the
  seconds; then the most expensive functions (``--tflab-traces-top N``) and the
  session's totals. Reporting never changes the exit status.
* ``--tflab-traces-json PATH``: the same records as JSON, written atomically;
  under pytest-xdist the workers' records are merged on the controller.
  Each recorded test also gets the ``user_properties`` (``--junitxml``
  properties) ``tflab_traces`` and ``tflab_trace_seconds``.
* ``@pytest.mark.tflab_max_traces(N, function=None)``: the test body (its call
  phase) may trace each tf.function at most N times (summed over the
  tf.function objects that share a qualified name); over it, the test fails
  naming the function, its ``K traces`` and the reasons of each trace past N.
* fixture ``tflab_traces``: `TestTraces` of the running test (``count``,
  ``events``, ``explain``).

What is counted: one trace per FuncGraph TF starts building (TF's
``Creating new FuncGraph`` point in ``tracing_compilation._maybe_define_function``),
for the user's tf.functions (TF's own helpers, such as the variable
initializer, are left out). That equals the change in TF's own
``fn.experimental_get_tracing_count()`` (the trace cache's entries) over the test,
with one exception: a trace that raised is counted here and left no cache
entry. A function that creates tf.Variables traces twice on its first call
(kind ``variable_creation``), and both traces are counted, by TF and here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Iterable

import pytest

from tflab._pytest_summary import (  # noqa: F401 (re-exported)
    name_of, seconds_of_test, format_function, session_totals, summarize, write_json_atomically)

MARKER = "tflab_max_traces"
FIXTURE = "tflab_traces"
PLUGIN_NAME = "tflab-traces-recorder"
RECORD_VERSION = 1
_MARKER_HELP = (f"{MARKER}(n, function=None): fail the test when its body traces a tf.function more "
                f"than n times (each qualified name, or only `function`: a name or a tf.function); "
                f"the failure gives the reasons of every trace past n (tflab)")


# ---------------------------------------------------------------------------
# pytest hooks (module level: registered through the pytest11 entry point)
# ---------------------------------------------------------------------------


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("tflab", "tflab: tf.function traces per test")
    group.addoption("--tflab-traces", action="store_true", default=False,
                    help="report every tf.function traced while each test ran: counts, the reasons "
                         "of each retrace and the seconds tracing (terminal section 'tflab traces')")
    group.addoption("--tflab-traces-json", metavar="PATH", default=None,
                    help="write the per-test trace records to PATH as JSON (atomically; merged across "
                         "xdist workers); implies recording, not the terminal section")
    group.addoption("--tflab-traces-top", metavar="N", type=int, default=10,
                    help="how many of the most expensive tf.functions the section lists (default 10)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    top = config.getoption("--tflab-traces-top")
    if top is not None and top < 0:
        raise pytest.UsageError(f"--tflab-traces-top takes a count >= 0, got {top}")
    path = config.getoption("--tflab-traces-json")
    if path:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise pytest.UsageError(f"--tflab-traces-json {path}: the folder {parent} does not exist; "
                                    f"create it or give another path")
        if os.path.isdir(path):
            raise pytest.UsageError(f"--tflab-traces-json {path} is a folder; give a file path "
                                    f"(e.g. {os.path.join(path, 'traces.json')})")
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(TraceRecorder(config), PLUGIN_NAME)


@pytest.fixture
def tflab_traces(request: Any) -> "TestTraces":
    """The tf.function traces of the running test (since its setup began): `TestTraces`.

    Example:

    >>> def test_step(tflab_traces):
    ...     step(tf.ones([2])); step(tf.ones([3]))
    ...     assert tflab_traces.count(step) == 2
    ...     print(tflab_traces.explain(step))
    """
    recorder = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    live = recorder.live.get(request.node.nodeid) if recorder is not None else None
    if live is None:  # e.g. requested through getfixturevalue by a test not known as using it
        raise pytest.UsageError("tflab_traces: the tflab plugin is not recording this test; request the "
                                "fixture as a test argument")
    return TestTraces(live)


# ---------------------------------------------------------------------------
# One test's recording
# ---------------------------------------------------------------------------


class _Live:
    """The capture of one test: events in trace order, with their phase.

    The capture is opened for each phase (setup, call, teardown) inside
    pytest's own logging capture for that phase, and closed at its end: pytest
    attaches its handlers to every non-propagating logger when a phase starts,
    and `capture_trace_events` makes the ``tensorflow`` logger non-propagating
    while it runs, so opened earlier it would let TF's level-1 records into
    the test's captured log.
    """

    def __init__(self, nodeid: str) -> None:
        from tflab.retrace.event import ObjectSerials, TraceClock
        from tflab.retrace.log import LiveExplainer

        self.nodeid = nodeid
        self.phase = "setup"
        self.phases: dict[int, str] = {}
        self.clock = TraceClock()
        self.explainer = LiveExplainer(side_effects=False)  # the section reports no side effects
        self.identify = ObjectSerials()
        self.events: list = []
        self.timed = False
        self._stack: Any = None
        self.level_note: str | None = None
        self.unmatched: str | None = None  # a budget's function= that traced nothing in the test body

    def begin(self, phase: str) -> None:
        from contextlib import ExitStack

        from tflab.retrace.event import capture_trace_events

        self.phase = phase
        self._stack = ExitStack()
        if "tensorflow" in sys.modules:  # TF already imported: its calls can be watched
            self.timed = True
            self._stack.enter_context(self.clock.watching())
        self._stack.enter_context(capture_trace_events(on_event=self._on_event, identify=self.identify))

    def end(self) -> None:
        import logging

        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        level = logging.getLogger("tensorflow").level  # before the capture restores it
        stack.close()
        if level != 1 and self.level_note is None:
            self.level_note = (f"the test set the tensorflow logger to level {logging.getLevelName(level)}, "
                               f"which hides TF's level-1 trace records: traces after that are not listed")

    def _on_event(self, event: Any) -> None:
        self.events.append(event)
        self.phases[id(event)] = self.phase
        self.clock.on_event(event)
        reason_source().live_explain(self.explainer, event)

    def functions(self, phases: Iterable[str] | None = None) -> list[dict]:
        """Per tf.function object (first-trace order): its record (see `function_record`)."""
        wanted = None if phases is None else set(phases)
        events = [e for e in self.events if wanted is None or self.phases.get(id(e)) in wanted]
        return reason_source().group(self, events)


class _ReasonSource:
    """Where the plugin takes its traces' kinds and reasons from: `tflab.retrace.log`, nothing of its own.

    One object, so a test can plant a defect in it (drop a reason, lose a
    trace) and show that the plugin's checks catch it.
    """

    def live_explain(self, explainer: Any, event: Any) -> None:
        explainer(event)

    def group(self, live: _Live, events: list) -> list[dict]:
        from tflab.retrace.log import is_tf_internal, group_logged_traces

        events = [e for e in events if not is_tf_internal(e)]
        functions = group_logged_traces(events, effects=live.explainer.effects)
        by_key: dict[Any, list] = {}
        for e in events:
            by_key.setdefault(e.key if e.key is not None else ("name", e.function), []).append(e)
        out = []
        for f, evs in zip(functions, by_key.values()):
            out.append(function_record(f, evs, live))
        return out


_SOURCE = _ReasonSource()


def reason_source() -> _ReasonSource:
    return _SOURCE


def function_record(f: Any, events: list, live: _Live) -> dict:
    """The JSON-ready record of one tf.function object's traces in one test.

    Keys: ``function`` (the short name), ``qualname`` and ``module`` of the
    Python function, ``label`` and ``owner`` (as ``tflab retrace`` labels
    them), ``trace_count``, ``seconds`` (the sum of the timed traces),
    ``untimed`` (traces without a measured time) and ``traces``: per trace
    ``index`` (among this object's traces, counting those it held before the
    test), ``kind``, ``reasons``, ``seconds`` (None when untimed), ``nested``
    (it ran inside another trace, whose seconds include it), ``phase`` and ``site``.
    """
    traces = []
    for t, e in zip(f.traces, events):
        traces.append({"index": t.index, "kind": t.kind, "reasons": list(t.reasons),
                       "seconds": e.seconds, "nested": id(e) in live.clock.nested,
                       "phase": live.phases.get(id(e), "call"), "site": e.site})
    first = events[0] if events else None
    return {"function": f.function_name, "qualname": first.function if first else f.function_name,
            "module": first.module if first else "", "label": f.label or f.function_name,
            "owner": f.owner, "trace_count": len(traces),
            "seconds": sum(t["seconds"] or 0.0 for t in traces),
            "untimed": sum(t["seconds"] is None for t in traces), "traces": traces}


class TestTraces:
    """The traces of the running test, for the ``tflab_traces`` fixture.

    Counts and reasons are those of the plugin's summary (one pipeline):
    every FuncGraph TF started for the user's tf.functions since the test's
    setup began, up to the moment of the call.
    """

    __test__ = False  # not a test class for pytest's collector

    def __init__(self, live: _Live) -> None:
        self._live = live

    def _records(self) -> list[dict]:
        return self._live.functions()

    def _matching(self, fn: Any) -> list[dict]:
        return [r for r in self._records() if _matches(fn, r, self._live)]

    def count(self, fn: Any) -> int:
        """Traces TF started for ``fn`` during this test, an int.

        Args:
            fn: a tf.function (for a ``@tf.function`` method: ``obj.method`` for one
                instance, ``Class.method`` for all), or a name (the short name,
                ``Class.method`` or the qualified name).

        Returns:
            The number of FuncGraphs TF started for it: the change in its
            ``experimental_get_tracing_count()`` over the test, plus any trace
            that raised (TF caches none for it).
        """
        return sum(r["trace_count"] for r in self._matching(fn))

    @property
    def trace_count(self) -> int:
        """Traces of all the user's tf.functions during this test."""
        return sum(r["trace_count"] for r in self._records())

    @property
    def events(self) -> list["TraceRecord"]:
        """One `TraceRecord` per trace (qualified name, kind, reasons, seconds), in trace order."""
        out = []
        for r in self._records():
            for t in r["traces"]:
                out.append(TraceRecord(function=r["function"], qualname=r["qualname"], label=r["label"],
                                       index=t["index"], kind=t["kind"], reasons=tuple(t["reasons"]),
                                       seconds=t["seconds"], phase=t["phase"], site=t["site"]))
        return out

    def explain(self, fn: Any = None) -> str:
        """The text of ``fn``'s traces (all functions when None), as the terminal section prints them."""
        records = self._records() if fn is None else self._matching(fn)
        if not records:
            return f"{_describe(fn)}: no trace in this test"
        return "\n".join(format_function(r) for r in records)

    def __repr__(self) -> str:
        return f"<tflab_traces {self._live.nodeid}: {self.trace_count} trace(s)>"


class TraceRecord:
    """One trace in a test: ``function`` (short name), ``qualname``, ``label``, ``index``, ``kind``,
    ``reasons``, ``seconds`` (None when untimed), ``phase`` (setup/call/teardown), ``site``."""

    __slots__ = ("function", "qualname", "label", "index", "kind", "reasons", "seconds", "phase", "site")

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        why = f": {'; '.join(self.reasons)}" if self.reasons and self.kind == "retrace" else ""
        return f"<TraceRecord {self.label} #{self.index} {self.kind}{why}>"


def _describe(fn: Any) -> str:
    if isinstance(fn, str):
        return fn
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _matches(fn: Any, record: dict, live: _Live) -> bool:
    """``fn`` (a name or a tf.function) is the tf.function of ``record``."""
    if isinstance(fn, str):
        return fn in (record["function"], record["qualname"], record["label"], name_of(record))
    wanted = {id(fn)}
    try:
        from tflab._tf import function as _tf

        wanted |= {id(x) for x in _tf.method_instances(fn)}
    except Exception:
        pass
    for e in live.events:
        if e.function == record["qualname"] and (e.owner == record["owner"] or not record["owner"]):
            obj = e.function_object()
            if obj is not None and id(obj) in wanted:
                return True
            python_function = getattr(obj, "python_function", None)  # fn is the tf.function's Python function
            if python_function is not None and (python_function is fn or _unwrap(python_function) is fn):
                return True
    return False


def _unwrap(fn: Any) -> Any:
    try:
        from tflab._tf import function as _tf

        return _tf.unwrap(fn)
    except Exception:
        return fn


# ---------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------


def _budget(marker: Any) -> tuple[int, Any]:
    args, kwargs = list(marker.args), dict(marker.kwargs)
    n = args.pop(0) if args else kwargs.pop("n", None)
    function = args.pop(0) if args else kwargs.pop("function", None)
    if args or kwargs or isinstance(n, bool) or not isinstance(n, int) or n < 0:
        extra = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        raise pytest.UsageError(
            f"{MARKER} takes a trace budget n (an int >= 0) and an optional function= (a name or a "
            f"tf.function), e.g. @pytest.mark.{MARKER}(2, function='train_step'); got n={n!r}"
            + (f" and {extra}" if extra else ""))
    return n, function


def budget_failures(live: _Live, marker: Any) -> list[str]:
    """The over-budget lines of the test body (call phase), one block per qualified name."""
    n, function = _budget(marker)
    records = live.functions(phases=("call",))
    if function is not None:
        records = [r for r in records if _matches(function, r, live)]
        if not records:
            live.unmatched = _describe(function)
    by_name: dict[str, list[dict]] = {}
    for r in records:
        by_name.setdefault(r["qualname"], []).append(r)
    out = []
    for name, objs in by_name.items():
        traces = [t for r in objs for t in r["traces"]]
        if len(traces) <= n:
            continue
        label = objs[0]["label"] if len(objs) == 1 else objs[0]["function"]
        many = f" in {len(objs)} tf.function objects of this name" if len(objs) > 1 else ""
        lines = [f"{label}: {len(traces)} trace{'s' * (len(traces) != 1)}{many}, over the budget of {n} "
                 f"({MARKER}({n}{', function=' + repr(_describe(function)) if function is not None else ''}))"]
        for k, t in enumerate(traces[n:], start=n + 1):
            reasons = "; ".join(t["reasons"]) if t["reasons"] else f"its {t['kind']} trace (no earlier one to compare)"
            site = f" at {t['site']}" if t["site"] else ""
            lines.append(f"  trace {k} of {len(traces)} ({t['kind']} #{t['index']}{site}): {reasons}")
        out.append("\n".join(lines))
    return out


# ---------------------------------------------------------------------------
# The recorder (one per session, also on xdist workers)
# ---------------------------------------------------------------------------


class TraceRecorder:
    """Records the tests that use the plugin, reports them and merges xdist workers' records."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.show = bool(config.getoption("--tflab-traces"))
        self.json_path = config.getoption("--tflab-traces-json")
        self.on = self.show or bool(self.json_path)
        self.top = config.getoption("--tflab-traces-top")
        self.live: dict[str, _Live] = {}
        self.records: list[dict] = []
        self.wall: dict[str, float] = {}
        self.is_worker = hasattr(config, "workerinput")
        self.started = time.time()

    def _wanted(self, item: Any) -> bool:
        return self.on or item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(
            item, "fixturenames", ())

    # trylast: inside pytest's own per-phase logging capture (see `_Live`).
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: Any) -> Any:
        live = self.live.get(item.nodeid)
        if live is None and self._wanted(item):
            marker = item.get_closest_marker(MARKER)
            if marker is not None:
                _budget(marker)  # a malformed budget is an error before the test runs
            live = self.live[item.nodeid] = _Live(item.nodeid)
        if live is not None:
            live.begin("setup")
        try:
            return (yield)
        finally:
            if live is not None:
                live.end()

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        live = self.live.get(item.nodeid)
        if live is not None:
            live.begin("call")
        try:
            result = yield  # a failing test raises here: its own failure is the report
        finally:
            if live is not None:
                live.end()
        marker = item.get_closest_marker(MARKER)
        if live is not None and marker is not None:
            failures = budget_failures(live, marker)
            if live.unmatched is not None:  # within budget, but perhaps a misspelt name: say so
                item.warn(pytest.PytestWarning(
                    f"{MARKER}(function={live.unmatched!r}): no tf.function of that name traced in the test "
                    f"body, so the budget held trivially; check the name (short, Class.method or qualified)"))
            if failures:
                pytest.fail("\n".join(failures), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: Any) -> Any:
        live = self.live.get(item.nodeid)
        if live is not None:
            live.begin("teardown")
        try:
            return (yield)
        finally:
            if live is not None:
                live.end()
                self._finish(item, live)

    def _finish(self, item: Any, live: _Live) -> None:
        del self.live[item.nodeid]
        if not self.on:
            return
        functions = live.functions()
        rec = {"nodeid": item.nodeid, "trace_count": sum(f["trace_count"] for f in functions),
               "functions": functions, "timed": live.timed}
        rec["trace_seconds"] = seconds_of_test(rec)
        if live.level_note:
            rec["note"] = live.level_note
        if self.is_worker:
            rec["worker"] = self.config.workerinput.get("workerid")
        self.records.append(rec)
        item.user_properties.append(("tflab_traces", rec["trace_count"]))
        item.user_properties.append(("tflab_trace_seconds", round(rec["trace_seconds"], 6)))

    def pytest_runtest_logreport(self, report: Any) -> None:
        if self.on:
            self.wall[report.nodeid] = self.wall.get(report.nodeid, 0.0) + (report.duration or 0.0)

    # -- xdist ---------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Controller: a worker finished; its records come in ``workeroutput`` (pytest-xdist)."""
        data = getattr(node, "workeroutput", {}).get("tflab_traces")
        if data:
            self.records.extend(json.loads(data))

    def pytest_sessionfinish(self, session: Any) -> None:
        if not self.on:
            return
        if self.is_worker:
            self.config.workeroutput["tflab_traces"] = json.dumps(self.records)
            return
        if self.json_path:
            try:
                write_json_atomically(self.json_path, self.document())
            except OSError as e:  # a full disk, a FIFO with no reader: one line, the exit status unchanged
                self.json_error = f"could not write {self.json_path}: {e.strerror or e}"

    def document(self) -> dict:
        """The JSON record: version, per-test records (sorted by test id) and the session totals."""
        records = sorted(self.records, key=lambda r: r["nodeid"])
        return {"version": RECORD_VERSION, "tool": "tflab.pytest_plugin", "tests": records,
                "totals": session_totals(records), "test_seconds": sum(self.wall.values())}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if getattr(self, "json_error", None) and not self.is_worker and not self.show:
            terminalreporter.write_line(f"tflab traces: error: {self.json_error}", red=True)
        if not self.show or self.is_worker:
            return
        records = sorted(self.records, key=lambda r: r["nodeid"])
        terminalreporter.write_sep("=", "tflab traces")
        for line in summarize(records, self.top, sum(self.wall.values())):
            terminalreporter.write_line(line)
        if getattr(self, "json_error", None):
            terminalreporter.write_line(f"tflab traces: error: {self.json_error}", red=True)
        elif self.json_path:
            terminalreporter.write_line(f"trace record: {self.json_path}")


