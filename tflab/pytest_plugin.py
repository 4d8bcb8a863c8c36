"""pytest plugin: the tf.function traces of each test, with reasons, seconds, budgets and a baseline.

Registered by the ``pytest11`` entry point ``tflab`` (so ``pip install tflab``
is enough; ``-p no:tflab`` turns it off). Importing it imports neither
TensorFlow nor the retrace package: those load when a test is recorded, i.e.
under ``--tflab-traces`` / ``--tflab-traces-json`` / ``--tflab-traces-baseline``,
or for a test with the ``tflab_max_traces`` marker or the ``tflab_traces`` fixture.

What it records (`tflab._pytest.capture`) is the one TraceEvent pipeline of
`tflab.retrace`: every trace any tf.function starts while a test's setup, call
or teardown runs, taken at TF's own trace entry point
(`tflab._tf.function.install_trace_entry`, so no logger setting of the test
hides one), made into a `TraceEvent` from TF's tracing frame, explained as it
starts by `tflab.retrace.log.LiveExplainer` (the reasons `tflab.RetraceProbe`
and ``tflab retrace`` give), and timed: graph building apart from
instantiation, compilation and the first run.

* ``--tflab-traces``: a terminal summary section ``tflab traces``: per test, each
  tf.function that traced, its trace count, the reasons of each retrace and the
  seconds; then each function across the session (traces, tests, first test,
  seconds, most common retrace reason; tf.data's functions in their own group)
  and the session's totals (`tflab._pytest.summary`).
* ``--tflab-traces-json PATH``: the same records as JSON (`tflab._pytest.output`:
  checked at session start, never over a file tflab did not write unless
  ``--tflab-traces-force``, written atomically with the umask's mode; a
  symlink is refused, and with ``--tflab-traces-force`` written through to its
  target, the link kept); under pytest-xdist the workers'
  records are merged on the controller. Each recorded test also gets the
  ``user_properties`` (``--junitxml`` properties) ``tflab_traces`` and
  ``tflab_trace_seconds``.
* ``--tflab-traces-baseline OLD.json`` (``--tflab-traces-fail-on-increase``):
  each function that traces more than in a stored record, with the new traces'
  reasons and call sites (a failed session with the flag). The stored record
  is read as a regular file only and its schema checked at session start.
* ``@pytest.mark.tflab_max_traces(N, function=None)``: the test body (its call
  phase) may trace each tf.function at most N times (summed over the
  tf.function objects that share a qualified name); over it, the test fails
  naming the function, its ``K traces`` and the reasons of each trace past N.
  ``function=`` is a name as users write it or the object; a name that matches
  nothing that traced fails the test.
* fixture ``tflab_traces``: `TestTraces` of the running test (``count``,
  ``events``, ``explain``).

The plugin never changes a test's outcome by its own failure: each hook runs
its work guarded (`TraceRecorder._safe`), and pytest's own phase always runs.
What is counted: one trace per FuncGraph TF builds for the user's tf.functions
(TF's own helpers, judged by their code's location, are left out). That equals
the change in TF's own ``fn.experimental_get_tracing_count()`` over the test,
with one exception: a trace that raised is counted here and left no cache entry.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from tflab._pytest.capture import (  # noqa: F401 (re-exported)
    SOURCE, EntryHook, Live, ReasonSource, TFState, describe, function_record, matches, name_matches,
    reason_source)
from tflab._pytest.output import (  # noqa: F401 (write_json_atomically re-exported)
    RECORD_VERSION, OutputError, check_json_path, compare_with_baseline, increase_lines, increase_summary,
    load_baseline, write_json_atomically)
from tflab._pytest.summary import (  # noqa: F401 (re-exported)
    name_of, seconds_of_test, format_function, session_totals, summarize)

# The names a test plants a defect through (the recorder makes each test's capture with `_Live`).
_Live = Live
_SOURCE = SOURCE

MARKER = "tflab_max_traces"
FIXTURE = "tflab_traces"
PLUGIN_NAME = "tflab-traces-recorder"
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
                         "of each retrace and the seconds (graph building apart from compile and first "
                         "run), then each function across the session (terminal section 'tflab traces')")
    group.addoption("--tflab-traces-json", metavar="PATH", default=None,
                    help="write the per-test trace records to PATH as JSON (checked at start, written "
                         "atomically, merged across xdist workers; labels and paths are stable, so two "
                         "files diff); implies recording, not the terminal section")
    group.addoption("--tflab-traces-force", action="store_true", default=False,
                    help="let --tflab-traces-json replace an existing file that tflab did not write, "
                         "or write through a symlink to its target")
    group.addoption("--tflab-traces-top", metavar="N", type=int, default=10,
                    help="how many tf.functions the per-function list shows (default 10)")
    group.addoption("--tflab-traces-baseline", metavar="OLD.json", default=None,
                    help="compare each test's trace count per function with a stored --tflab-traces-json "
                         "file and list every increase with the new traces' reasons and call sites "
                         "(as pytest-benchmark's --benchmark-compare); implies recording")
    group.addoption("--tflab-traces-fail-on-increase", action="store_true", default=False,
                    help="with --tflab-traces-baseline: fail the session (exit status 1) when any "
                         "function traces more than in the baseline (as --benchmark-compare-fail)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)
    top = config.getoption("--tflab-traces-top")
    if top is not None and top < 0:
        raise pytest.UsageError(f"--tflab-traces-top takes a count >= 0, got {top}")
    path = config.getoption("--tflab-traces-json")
    baseline = config.getoption("--tflab-traces-baseline")
    if config.getoption("--tflab-traces-fail-on-increase") and not baseline:
        raise pytest.UsageError("--tflab-traces-fail-on-increase compares with a stored record: add "
                                "--tflab-traces-baseline OLD.json (written by --tflab-traces-json)")
    worker = hasattr(config, "workerinput")
    try:
        if path is not None and not worker:  # the controller writes it; a worker only sends records
            check_json_path(path, force=config.getoption("--tflab-traces-force"))
        loaded = load_baseline(baseline) if baseline is not None and not worker else None
    except OutputError as e:
        raise pytest.UsageError(str(e)) from None
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        recorder = TraceRecorder(config)
        recorder.baseline = loaded
        config.pluginmanager.register(recorder, PLUGIN_NAME)


def pytest_unconfigure(config: Any) -> None:
    recorder = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if recorder is not None:
        recorder.entry.uninstall()


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
# The running test's traces (the fixture's object)
# ---------------------------------------------------------------------------


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
        return self._live.all_functions()

    def _matching(self, fn: Any) -> list[dict]:
        return [r for r in self._records() if matches(fn, r, self._live)]

    def count(self, fn: Any) -> int:
        """Traces TF started for ``fn`` during this test, an int.

        Args:
            fn: a tf.function (for a ``@tf.function`` method: ``obj.method`` for one
                instance, ``Class.method`` for all), its Python function, a tf.data
                function (``ds.map(fn)``'s ``fn``), or a name as you write it: the
                short name (``generate_step``), ``Class.method`` or the qualified name.

        Returns:
            The number of FuncGraphs TF started for it: the change in its
            ``experimental_get_tracing_count()`` over the test, plus any trace
            that raised (TF caches none for it).
        """
        return sum(r["trace_count"] for r in self._matching(fn))

    @property
    def trace_count(self) -> int:
        """Traces of all the user's tf.functions during this test (tf.data's functions apart)."""
        return sum(r["trace_count"] for r in self._live.functions())

    @property
    def events(self) -> list["TraceRecord"]:
        """One `TraceRecord` per trace (qualified name, kind, reasons, seconds), in trace order."""
        out = []
        for r in self._records():
            for t in r["traces"]:
                out.append(TraceRecord(function=r["function"], qualname=r["qualname"], label=r["label"],
                                       index=t["index"], kind=t["kind"], reasons=tuple(t["reasons"]),
                                       seconds=t["seconds"], phase=t["phase"], site=t["site"],
                                       build_seconds=t["build_seconds"], group=r["group"]))
        return out

    def explain(self, fn: Any = None) -> str:
        """The text of ``fn``'s traces (all functions when None), as the terminal section prints them."""
        records = self._records() if fn is None else self._matching(fn)
        if not records:
            return f"{describe(fn)}: no trace in this test"
        return "\n".join(format_function(r) for r in records)

    def __repr__(self) -> str:
        return f"<tflab_traces {self._live.nodeid}: {self.trace_count} trace(s)>"


class TraceRecord:
    """One trace in a test: ``function`` (short name), ``qualname``, ``label``, ``index``, ``kind``,
    ``reasons``, ``seconds`` (None when untimed), ``build_seconds`` (graph building), ``phase``
    (setup/call/teardown), ``site``, ``group`` ("tf.function" or "tf.data")."""

    __slots__ = ("function", "qualname", "label", "index", "kind", "reasons", "seconds", "phase", "site",
                 "build_seconds", "group")

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        why = f": {'; '.join(self.reasons)}" if self.reasons and self.kind == "retrace" else ""
        return f"<TraceRecord {self.label} #{self.index} {self.kind}{why}>"


# ---------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------


class MarkerError(Exception):
    """A malformed ``tflab_max_traces`` marker: the test fails with this one line."""


def _budget(marker: Any) -> tuple[int, Any]:
    args, kwargs = list(marker.args), dict(marker.kwargs)
    n = args.pop(0) if args else kwargs.pop("n", None)
    function = args.pop(0) if args else kwargs.pop("function", None)
    bad_function = function is not None and not (isinstance(function, str) and function.strip()) and not callable(function)
    if args or kwargs or isinstance(n, bool) or not isinstance(n, int) or n < 0 or bad_function:
        extra = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        raise MarkerError(
            f"{MARKER} takes a trace budget n (an int >= 0) and an optional function= (a name or a "
            f"tf.function), e.g. @pytest.mark.{MARKER}(2, function='train_step'); got n={n!r}"
            + (f", function={function!r}" if function is not None else "")
            + (f" and {extra}" if extra else ""))
    return n, function


def _one_budget(item: Any) -> None:
    """Refuses two different ``tflab_max_traces`` markers stacked on one test function.

    pytest's ``get_closest_marker`` takes one of them without a word: with ``(1)`` over ``(5)``, two
    traces passed. A marker on the class or module under one on the test is an override, not this.
    """
    own = [m for m in getattr(item, "own_markers", ()) if m.name == MARKER]
    given = list(dict.fromkeys(f"{MARKER}({', '.join([repr(a) for a in m.args] + [f'{k}={v!r}' for k, v in m.kwargs.items()])})"
                               for m in own))
    if len(given) > 1:
        raise MarkerError(f"{len(given)} budgets on one test: {' and '.join(given)}; pytest would keep one of them "
                          f"without a word: keep the one you mean")


def budget_failures(live: _Live, marker: Any, seen: set | None = None) -> list[str]:
    """The over-budget lines of the test body (call phase), one block per qualified name.

    A ``function=`` name that matches no function traced in the test body,
    nor any that traced earlier in this session (``seen``: (module, qualname)
    pairs), fails the test with the names that did trace: a misspelt or
    wrongly shortened name would otherwise hold any budget. A tf.function
    object that did not trace is within any budget.
    """
    n, function = _budget(marker)
    records = live.all_functions(phases=("call",))
    traced = records
    if function is not None:
        records = [r for r in records if matches(function, r, live)]
        if not records and isinstance(function, str):
            known = [{"function": q.rsplit(".", 1)[-1], "qualname": q, "label": q, "module": m}
                     for m, q in (seen or ())]
            if not any(name_matches(function, r) for r in known):
                names = sorted({r["label"] if r["group"] == "tf.data" else name_of(r) for r in traced})
                return [f"{MARKER}(function={function!r}): no tf.function of that name traced in the test "
                        f"body or earlier in this session; traced in the test body: "
                        f"{', '.join(names) if names else 'none'} (a name matches as written: short, "
                        f"Class.method or module-qualified, or pass the tf.function itself)"]
    if function is None:
        records = [r for r in records if r["group"] == "tf.function"]
    by_name: dict[str, list[dict]] = {}
    for r in records:
        by_name.setdefault(name_of(r), []).append(r)
    out = []
    for name, objs in by_name.items():
        traces = [t for r in objs for t in r["traces"]]
        if len(traces) <= n:
            continue
        label = objs[0]["label"] if len(objs) == 1 else objs[0]["function"]
        many = f" in {len(objs)} tf.function objects of this name" if len(objs) > 1 else ""
        lines = [f"{label}: {len(traces)} trace{'s' * (len(traces) != 1)}{many}, over the budget of {n} "
                 f"({MARKER}({n}{', function=' + repr(describe(function)) if function is not None else ''}))"]
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
    """Records the tests that use the plugin, reports them and merges xdist workers' records.

    Every hook runs the plugin's own work through `_safe`: what it raises
    becomes one line of the section (``tflab traces: internal error ...``), the
    phase itself (pytest's fixtures, their finalizers, monkeypatch's undo) always
    runs, and the test's outcome is its own. Only a budget the test exceeds, or
    a malformed ``tflab_max_traces`` marker, fails a test.
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self.show = bool(config.getoption("--tflab-traces"))
        self.json_path = config.getoption("--tflab-traces-json")
        self.baseline_path = config.getoption("--tflab-traces-baseline")
        self.baseline: dict | None = None
        self.fail_on_increase = bool(config.getoption("--tflab-traces-fail-on-increase"))
        self.on = self.show or self.json_path is not None or self.baseline_path is not None
        self.top = config.getoption("--tflab-traces-top")
        self.live: dict[str, _Live] = {}
        self.records: list[dict] = []
        self.wall: dict[str, float] = {}
        self.is_worker = hasattr(config, "workerinput")
        self.entry = EntryHook()
        self.tf_state = TFState()
        self.problems: dict[str, int] = {}
        self.increases: list[dict] = []
        self.json_error: str | None = None
        self.started = time.time()

    def _wanted(self, item: Any) -> bool:
        return self.on or item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(
            item, "fixturenames", ())

    def _safe(self, where: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # the plugin's own failure: one line, never the test's outcome
            line = f"{where}: {type(e).__name__}: {e}"
            self.problems[line] = self.problems.get(line, 0) + 1
            return None

    def pytest_collection_modifyitems(self, items: list) -> None:
        # A budget's function= name is checked against every function that traced in the session.
        self.budgets = any(item.get_closest_marker(MARKER) is not None for item in items)

    def _begin(self, item: Any, phase: str) -> "_Live | None":
        if getattr(self, "budgets", False) and self.tf_state() == "loaded":
            self.entry.ensure()
        live = self.live.get(item.nodeid)
        if live is None and phase == "setup" and self._wanted(item):
            live = self.live[item.nodeid] = _Live(item.nodeid, self.entry, self.tf_state)
            live.order = len(self.records) + len(self.live)
        if live is not None:
            live.begin(phase)
        return live

    # trylast: inside pytest's own per-phase logging capture (a phase that reads TF's log, see `_Live`).
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: Any) -> Any:
        live = self._safe(f"setup of {item.nodeid}", self._begin, item, "setup")
        try:
            result = yield
        finally:
            if live is not None:
                self._safe(f"setup of {item.nodeid}", live.end)
        marker = item.get_closest_marker(MARKER)
        if marker is not None:
            try:
                _budget(marker)
                _one_budget(item)
            except MarkerError as e:  # the user's marker, one line (no tflab frames)
                pytest.fail(str(e), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        live = self._safe(f"call of {item.nodeid}", self._begin, item, "call")
        try:
            result = yield  # a failing test raises here: its own failure is the report
        finally:
            if live is not None:
                self._safe(f"call of {item.nodeid}", live.end)
        marker = item.get_closest_marker(MARKER)
        if live is not None and marker is not None:
            failures = self._safe(f"budget of {item.nodeid}", budget_failures, live, marker, self.entry.seen)
            if failures:
                pytest.fail("\n".join(failures), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: Any) -> Any:
        live = self._safe(f"teardown of {item.nodeid}", self._begin, item, "teardown")
        try:
            return (yield)
        finally:
            live = self.live.pop(item.nodeid, live)
            if live is not None:
                self._safe(f"teardown of {item.nodeid}", live.end)
                self._safe(f"record of {item.nodeid}", self._finish, item, live)

    def _finish(self, item: Any, live: _Live) -> None:
        if not self.on:
            return
        functions = [self._relative(f) for f in live.functions()]
        data = [self._relative(f) for f in live.functions(group="tf.data")]
        rec = {"nodeid": item.nodeid, "trace_count": sum(f["trace_count"] for f in functions),
               "functions": functions, "data_trace_count": sum(f["trace_count"] for f in data),
               "data_functions": data, "timed": live.timed, "order": getattr(live, "order", 0),
               "tf_loaded": self.tf_state.real is not None}
        rec["trace_seconds"] = seconds_of_test(rec)
        notes = list(live.notes)
        if live.hidden:
            notes.insert(0, f"TF hidden in this test (sys.modules['tensorflow'] was None or a stand-in when its "
                            f"{' and '.join(dict.fromkeys(live.hidden))} began): nothing was read from "
                            f"TensorFlow then, and the tests after it are recorded as usual")
        if notes:
            rec["note"] = "; ".join(notes)
        if self.is_worker:
            rec["worker"] = self.config.workerinput.get("workerid")
        self.records.append(rec)
        item.user_properties.append(("tflab_traces", rec["trace_count"]))
        item.user_properties.append(("tflab_trace_seconds", round(rec["trace_seconds"], 6)))

    def _relative(self, f: dict) -> dict:
        """Call sites relative to the rootdir (two runs' files diff line by line)."""
        root = str(self.config.rootpath) + os.sep
        for t in f["traces"]:
            if t["site"].startswith(root):
                t["site"] = t["site"][len(root):]
        return f

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
        if self.baseline is not None:
            self.increases = self._safe("baseline", compare_with_baseline, self.baseline, self.records) or []
            if self.fail_on_increase and self.increases and session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.json_path is not None:
            try:
                write_json_atomically(self.json_path, self.document())
            except OSError as e:  # a full disk, a FIFO that lost its reader: one line, and a failed run
                self.json_error = f"could not write {self.json_path}: {e.strerror or e}"
                if session.exitstatus == 0:
                    session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def document(self) -> dict:
        """The JSON record: version, tool, per-test records (sorted by test id) and the session totals."""
        records = sorted(self.records, key=lambda r: r["nodeid"])
        totals = session_totals(records)
        for key in ("functions", "data_functions"):  # by name, not seconds: two runs' files diff
            totals[key].sort(key=lambda f: f["function"])
        return {"version": RECORD_VERSION, "tool": "tflab.pytest_plugin", "tests": records,
                "totals": totals, "test_seconds": sum(self.wall.values())}

    def _no_tf_line(self) -> str | None:
        if self.tf_state.real is not None or any(r.get("tf_loaded") for r in self.records):
            return None
        import importlib.util

        try:
            found = importlib.util.find_spec("tensorflow") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return ("tflab traces: TensorFlow cannot be imported here (no module named 'tensorflow'), "
                    "so there are no tf.function traces to record")
        return "tflab traces: no test imported TensorFlow, so there were no tf.function traces to record"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        write = terminalreporter.write_line
        if self.show:
            terminalreporter.write_sep("=", "tflab traces")
            no_tf = self._no_tf_line()
            if no_tf:
                write(no_tf)
            else:
                records = sorted(self.records, key=lambda r: r["nodeid"])
                for line in self._safe("summary", summarize, records, self.top, sum(self.wall.values())) or []:
                    write(line)
            if self.json_path and not self.json_error:
                write(f"trace record: {self.json_path}")
        if self.baseline is not None:
            if self.increases:
                for line in increase_lines(self.increases, self.baseline_path):
                    write(line)
                verdict = "FAILED" if self.fail_on_increase else "note"
                write(f"tflab traces: {verdict}: {increase_summary(self.increases, self.baseline_path)}",
                      red=self.fail_on_increase)
            else:
                write(f"tflab traces: no function traced more than in the baseline {self.baseline_path}")
        if self.json_error:
            write(f"tflab traces: error: {self.json_error}", red=True)
        for line, count in self.problems.items():
            write(f"tflab traces: internal error in {line}" + (f" ({count} times)" if count > 1 else "")
                  + " (the test's outcome is its own)", yellow=True)
