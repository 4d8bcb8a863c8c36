"""The pytest plugin through pytester: the ``tflab traces`` section, budgets, the fixture,
the JSON record and junit properties, and planted defects the checks must catch.

Each inner run is in-process (``pytester.runpytest``: TF is imported once); the runs that need a
fresh interpreter (off by default, xdist, the entry point) are in tests/pytest_plugin/test_pytest_plugin_process.py.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest

import tflab.pytest_plugin as plugin

pytest_plugins = ["pytester"]


def plugin_args() -> list[str]:
    """``-p tflab.pytest_plugin`` unless the ``pytest11`` entry point already loads it (installed)."""
    from importlib.metadata import distributions

    # Every distribution, as pluggy's load_setuptools_entrypoints walks them: entry_points(group=)
    # keeps one distribution per name, and a stale tflab.egg-info in the working folder (an older
    # editable install) would hide the installed one's pytest11 entry point.
    installed = any(ep.group == "pytest11" and ep.value == "tflab.pytest_plugin"
                    for dist in distributions() for ep in dist.entry_points)
    return [] if installed else ["-p", "tflab.pytest_plugin"]


SUITE = '''
import time
import pytest
import tensorflow as tf


@tf.function
def f(x, k):
    return x * k


class Net(tf.Module):
    def __init__(self):
        self.v = None

    @tf.function
    def step(self, x):
        if self.v is None:
            self.v = tf.Variable(2.0)
        return x * self.v


def test_retraces():
    f(tf.ones([1]), 1)
    f(tf.ones([2]), 1)
    f(tf.ones([2]), 2)
    f(tf.ones([2]), 2)  # cached: no trace


def test_quiet():
    assert 1 + 1 == 2


def test_fixture(tflab_traces):
    net = Net()
    before = f.experimental_get_tracing_count()
    f(tf.ones([7]), 1)
    f(tf.ones([7]), 1)
    net.step(tf.ones([1]))
    net.step(tf.ones([3]))
    assert tflab_traces.count(f) == f.experimental_get_tracing_count() - before == 1
    assert tflab_traces.count(net.step) == net.step.experimental_get_tracing_count() == 3
    assert tflab_traces.count("Net.step") == 3
    kinds = [e.kind for e in tflab_traces.events if e.function == "Net.step"]
    assert kinds == ["first", "variable_creation", "retrace"], kinds
    last = [e for e in tflab_traces.events if e.function == "Net.step"][-1]
    assert last.reasons == ("x: shape (1,) -> (3,)",), last.reasons
    assert all(e.seconds is not None and e.seconds > 0 for e in tflab_traces.events)
    text = tflab_traces.explain(net.step)
    assert "Net.step: 3 traces" in text and "x: shape (1,) -> (3,)" in text, text
'''


def run(pytester, *args, suite: str = SUITE, name: str = "test_suite"):
    pytester.makepyfile(**{name: suite})
    return pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", *QUIET, *args)


# In-process runs import the plugin module the outer session already imported; and pytest's logging
# plugin is off in them: when this outer run records traces too (make test), its capture makes the
# tensorflow logger non-propagating during this test, and the inner pytest would attach its log
# handlers to it. That a recorded test's captured log holds no TF trace record is checked in a fresh
# process (tests/pytest_plugin/test_pytest_plugin_process.py).
QUIET = ("-W", "ignore::pytest.PytestAssertRewriteWarning", "-p", "no:logging")


def section(result) -> list[str]:
    lines = result.outlines
    start = next(i for i, ln in enumerate(lines) if re.match(r"=+ tflab traces =+$", ln))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[start + 1:end]


def block_of(lines: list[str], nodeid: str) -> list[str]:
    """The section's lines of one test (its header through the line before the next test)."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith(nodeid + ":"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]




def check_retraces_block(block: list[str]) -> None:
    """What test_retraces traced: f three times, with the reasons of each retrace and seconds."""
    assert block[0].startswith("test_suite.py::test_retraces: 3 traces, "), block
    assert block[1].startswith("  f: 3 traces, "), block
    assert re.fullmatch(r"    #1 first, \d+\.\d+ s", block[2]), block
    assert re.fullmatch(r"    #2 retrace, \d+\.\d+ s: x: shape \(1,\) -> \(2,\)", block[3]), block
    assert re.fullmatch(r"    #3 retrace, \d+\.\d+ s: k: 1 -> 2", block[4]), block
    assert len(block) == 5, block


# ---------------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------------


def test_the_section_lists_each_test_s_traces_with_reasons_and_seconds(pytester):
    result = run(pytester, "--tflab-traces")
    assert result.ret == 0, result.outlines
    lines = section(result)
    check_retraces_block(block_of(lines, "test_suite.py::test_retraces"))
    assert not any(ln.startswith("test_suite.py::test_quiet") for ln in lines)  # traced nothing
    fixture = block_of(lines, "test_suite.py::test_fixture")
    assert any(ln.startswith("  Net.step: 3 traces") for ln in fixture), fixture
    assert any("#2 variable_creation" in ln for ln in fixture), fixture
    title = next(ln for ln in lines if ln.startswith("per tf.function across the session"))
    assert title.startswith("per tf.function across the session (top 2 by own seconds"), title
    tail = lines[-1]
    assert re.match(r"session: 7 traces of 2 tf\.functions in 2 of 3 recorded tests, \d+\.\d+ s \(building "
                    r"\d+\.\d+ s, compile and first run \d+\.\d+ s\) of the tests' \d+\.\d+ s \(\d+%\)$", tail), tail


def test_reporting_never_changes_the_exit_status(pytester):
    failing = SUITE + "\n\ndef test_fails():\n    f(tf.ones([9]), 3)\n    assert False\n"
    with_plugin = run(pytester, "--tflab-traces", suite=failing)
    without = pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", *QUIET)
    assert with_plugin.ret == without.ret == pytest.ExitCode.TESTS_FAILED
    with_plugin.assert_outcomes(passed=3, failed=1)
    assert any(ln.startswith("test_suite.py::test_fails: 1 trace") for ln in section(with_plugin))


def test_the_reasons_are_retrace_probe_s(pytester, tmp_path):
    """One pipeline: the plugin's reasons for f's calls equal RetraceProbe's on the same calls."""
    import tensorflow as tf

    from tflab.retrace.probe import RetraceProbe

    out = tmp_path / "traces.json"
    run(pytester, f"--tflab-traces-json={out}")
    record = json.loads(out.read_text())
    rec = next(t for t in record["tests"] if t["nodeid"].endswith("test_retraces"))
    got = [t["reasons"] for t in rec["functions"][0]["traces"]]

    def g(x, k):
        return x * k

    probe = RetraceProbe(g)
    for x, k in ((tf.ones([1]), 1), (tf.ones([2]), 1), (tf.ones([2]), 2), (tf.ones([2]), 2)):
        probe(x, k)
    assert got == [list(t.reasons) for t in probe.traces] == [[], ["x: shape (1,) -> (2,)"], ["k: 1 -> 2"]]


# ---------------------------------------------------------------------------
# Trace time: measured, per trace
# ---------------------------------------------------------------------------

SLOW = '''
import time
import tensorflow as tf

PAUSE = 0.3


@tf.function
def slow(x):
    time.sleep(PAUSE)  # Python: runs only while TF traces
    return x + 1


@tf.function
def inner(x):
    time.sleep(PAUSE)
    return x * 2


@tf.function
def outer(x):
    time.sleep(PAUSE)
    return inner(x) + 1


class Var(tf.Module):
    def __init__(self):
        self.v = None

    @tf.function
    def step(self, x):
        time.sleep(PAUSE)
        if self.v is None:
            self.v = tf.Variable(1.0)
        return x * self.v


def test_slow():
    for _ in range(5):
        slow(tf.ones([2]))
    slow(tf.ones([3]))


def test_nested():
    outer(tf.ones([2]))


def test_variable_creation():
    m = Var()
    m.step(tf.ones([2]))
'''


def test_trace_seconds_are_measured_per_trace(pytester, tmp_path):
    """A body that sleeps 0.3 s while tracing: each trace is >= 0.3 s, cached calls add nothing, the
    variable-creation re-trace is timed apart from the first trace, a nested trace is inside its
    caller's and not counted twice in the test's total."""
    out = tmp_path / "t.json"
    result = run(pytester, f"--tflab-traces-json={out}", suite=SLOW, name="test_slow")
    assert result.ret == 0, result.outlines
    tests = {t["nodeid"].split("::")[1]: t for t in json.loads(out.read_text())["tests"]}
    pause = 0.3
    slow = tests["test_slow"]["functions"][0]
    assert [t["kind"] for t in slow["traces"]] == ["first", "retrace"]
    assert all(pause <= t["seconds"] < pause + 5 for t in slow["traces"]), slow
    # 5 calls, 1 trace: the 4 cached calls are not trace time (each would add >= 0 s, the trace 0.3 s)
    assert tests["test_slow"]["trace_seconds"] == pytest.approx(sum(t["seconds"] for t in slow["traces"]))

    by_name = {f["function"]: f for f in tests["test_nested"]["functions"]}
    o, i = by_name["outer"]["traces"], by_name["inner"]["traces"]
    assert [t["nested"] for t in o] == [False] and [t["nested"] for t in i] == [True]
    assert o[0]["seconds"] >= 2 * pause  # its own sleep and inner's trace
    assert i[0]["seconds"] >= pause
    assert tests["test_nested"]["trace_seconds"] == pytest.approx(o[0]["seconds"])

    step = tests["test_variable_creation"]["functions"][0]["traces"]
    assert [t["kind"] for t in step] == ["first", "variable_creation"]
    assert all(t["seconds"] >= pause for t in step), step  # each trace sleeps once


# ---------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------

BUDGETS = '''
import pytest
import tensorflow as tf


@tf.function
def f(x, k):
    return x * k


@tf.function
def g(x):
    return x + 1


@pytest.mark.tflab_max_traces(1, function="f")
def test_over():
    f(tf.ones([1]), 1)
    f(tf.ones([2]), 1)
    f(tf.ones([2]), 2)
    g(tf.ones([1]))
    g(tf.ones([2]))  # g is not budgeted here


@pytest.mark.tflab_max_traces(2, function=g)
def test_within():
    g(tf.ones([5]))
    g(tf.ones([6]))


@pytest.mark.tflab_max_traces(1)
def test_each_function():
    g(tf.ones([7]))
    g(tf.ones([8]))
    f(tf.ones([7]), 1)
'''


def check_budget_failure(result) -> None:
    result.assert_outcomes(passed=1, failed=2)
    text = "\n".join(result.outlines)
    over = text.split("_ test_over _", 1)[1].split("_ test_each_function _", 1)[0]
    assert "f: 3 traces, over the budget of 1 (tflab_max_traces(1, function='f'))" in over, over
    assert re.search(r"trace 2 of 3 \(retrace #2 at \S+test_budgets\.py:\d+\): x: shape \(1,\) -> \(2,\)", over)
    assert re.search(r"trace 3 of 3 \(retrace #3 at \S+\): k: 1 -> 2", over), over
    assert "trace 1 of 3" not in over and "g:" not in over
    each = text.split("_ test_each_function _", 1)[1].split("short test summary", 1)[0]
    assert "g: 2 traces, over the budget of 1 (tflab_max_traces(1))" in each, each
    assert "x: shape (7,) -> (8,)" in each and "f:" not in each


def test_a_test_over_its_budget_fails_with_the_reasons(pytester):
    result = run(pytester, suite=BUDGETS, name="test_budgets")  # no option: the marker works alone
    check_budget_failure(result)
    assert not any("tflab traces" in ln for ln in result.outlines)


def test_the_marker_is_listed_and_a_bad_budget_says_what_to_write(pytester):
    result = pytester.runpytest(*plugin_args(), *QUIET, "--markers")
    assert any(ln.startswith("@pytest.mark.tflab_max_traces(n, function=None):") for ln in result.outlines)
    bad = "import pytest\n\n@pytest.mark.tflab_max_traces('two')\ndef test_x():\n    pass\n"
    result = run(pytester, suite=bad, name="test_bad")
    result.assert_outcomes(errors=1)
    assert any("tflab_max_traces takes a trace budget n (an int >= 0)" in ln and "got n='two'" in ln
               for ln in result.outlines), result.outlines


# ---------------------------------------------------------------------------
# JSON and junit
# ---------------------------------------------------------------------------


def test_the_json_record_is_written_atomically_with_per_test_records(pytester, tmp_path):
    out = tmp_path / "traces.json"
    out.write_text('{"version": 1, "tool": "tflab.pytest_plugin", "tests": []}\n')  # an earlier record: replaced
    result = run(pytester, f"--tflab-traces-json={out}")
    assert result.ret == 0
    assert not any("tflab traces" in ln for ln in result.outlines)  # JSON only: no section
    record = json.loads(out.read_text())
    assert sorted(os.listdir(tmp_path)) == ["traces.json"]  # no temporary file left
    assert record["version"] == 1
    tests = {t["nodeid"]: t for t in record["tests"]}
    assert set(tests) == {f"test_suite.py::test_{n}" for n in ("retraces", "quiet", "fixture")}
    assert tests["test_suite.py::test_quiet"]["trace_count"] == 0
    f = tests["test_suite.py::test_retraces"]["functions"][0]
    assert (f["function"], f["qualname"], f["module"], f["trace_count"]) == ("f", "f", "test_suite", 3)
    assert [t["reasons"] for t in f["traces"]] == [[], ["x: shape (1,) -> (2,)"], ["k: 1 -> 2"]]
    assert all(t["seconds"] > 0 and t["phase"] == "call" for t in f["traces"])
    assert record["totals"]["trace_count"] == 7


def test_a_missing_json_folder_is_one_clear_error(pytester, tmp_path):
    result = run(pytester, f"--tflab-traces-json={tmp_path}/no/such/t.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any("the folder" in ln and "does not exist" in ln for ln in result.errlines + result.outlines)


def test_junit_gets_the_trace_properties(pytester, tmp_path):
    xml = tmp_path / "junit.xml"
    run(pytester, "--tflab-traces", f"--junitxml={xml}")
    props = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        props[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["test_retraces"]["tflab_traces"] == "3"
    assert props["test_quiet"] == {"tflab_traces": "0", "tflab_trace_seconds": "0"}
    assert float(props["test_fixture"]["tflab_trace_seconds"]) > 0


# ---------------------------------------------------------------------------
# Planted defects: a reason dropped, a trace lost; the checks above must catch them
# ---------------------------------------------------------------------------


@pytest.fixture
def drop_a_reason(monkeypatch):
    """The plugin's reason source drops the last reason of every retrace (a planted defect)."""
    original = plugin._SOURCE.group

    def group(live, events):
        out = original(live, events)
        for f in out:
            for t in f["traces"]:
                t["reasons"] = t["reasons"][:-1]
        return out

    monkeypatch.setattr(plugin._SOURCE, "group", group)


@pytest.fixture
def lose_a_trace(monkeypatch):
    """The plugin's reason source loses the last trace of every function (count off by one)."""
    original = plugin._SOURCE.group

    def group(live, events):
        out = original(live, events)
        for f in out:
            f["traces"] = f["traces"][:-1]
            f["trace_count"] = len(f["traces"])
        return out

    monkeypatch.setattr(plugin._SOURCE, "group", group)


def test_a_dropped_reason_fails_the_section_check(pytester, drop_a_reason):
    result = run(pytester, "--tflab-traces")
    with pytest.raises(AssertionError):
        check_retraces_block(block_of(section(result), "test_suite.py::test_retraces"))


def test_a_dropped_reason_fails_the_budget_check(pytester, drop_a_reason):
    with pytest.raises(AssertionError):
        check_budget_failure(run(pytester, suite=BUDGETS, name="test_budgets"))


def test_a_lost_trace_fails_the_fixture_s_own_count_check(pytester, lose_a_trace):
    """The inner test compares tflab_traces.count with TF's experimental_get_tracing_count: off by one fails."""
    result = run(pytester, "--tflab-traces")
    result.assert_outcomes(passed=2, failed=1)
    assert any("FAILED test_suite.py::test_fixture" in ln for ln in result.outlines)
    with pytest.raises(AssertionError):
        check_retraces_block(block_of(section(result), "test_suite.py::test_retraces"))


# ---------------------------------------------------------------------------
# A budget on a Python function, a misspelt name, a test that silences TF's logger
# ---------------------------------------------------------------------------

EDGES = '''
import logging
import pytest
import tensorflow as tf


def body(x):
    return x * 3


h = tf.function(body)


@pytest.mark.tflab_max_traces(1, function=body)  # the Python function of the tf.function h
def test_python_function_budget():
    h(tf.ones([1]))
    h(tf.ones([2]))


@pytest.mark.tflab_max_traces(1, function="trian_step")
def test_misspelt():
    h(tf.ones([4]))
    h(tf.ones([5]))


def test_silences_tf():
    h(tf.ones([6]))
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    h(tf.ones([7]))  # not seen: TF no longer emits its level-1 record
'''


def test_budget_edges_and_a_silenced_logger(pytester):
    """A misspelt function= fails the test naming what traced; a test that silences TF's logger hides
    nothing, since traces are counted at TF's trace entry point."""
    result = run(pytester, "--tflab-traces", suite=EDGES, name="test_edges")
    result.assert_outcomes(passed=1, failed=2)
    text = "\n".join(result.outlines)
    assert "FAILED test_edges.py::test_python_function_budget" in text
    assert "body: 2 traces, over the budget of 1" in text
    assert re.search(r"tflab_max_traces\(function='trian_step'\): no tf\.function of that name traced in the "
                     r"test body or earlier in this session; traced in the test body: test_edges\.body", text), text
    block = block_of(section(result), "test_edges.py::test_silences_tf")
    assert block[0].startswith("test_edges.py::test_silences_tf: 2 traces,"), block
    assert not any("note:" in ln for ln in block), block


def test_the_json_record_never_replaces_a_device_or_fifo_and_a_folder_is_refused(pytester, tmp_path):
    """os.replace over /dev/full would turn the machine's device into a file; a named FIFO is refused
    before any test runs (it would take a reader to write it), a folder too."""
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = run(pytester, "--tflab-traces-json", str(fifo))
    assert result.ret == pytest.ExitCode.USAGE_ERROR and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert any("is a named FIFO" in ln for ln in result.errlines), result.errlines
    folder = tmp_path / "d"
    folder.mkdir()
    result = run(pytester, "--tflab-traces-json", str(folder))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any("is a folder; give a file path" in ln for ln in result.errlines), result.errlines
