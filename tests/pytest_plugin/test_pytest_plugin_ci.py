"""The pytest plugin on a peer's suite in CI: it never changes an outcome, owns by location, counts
whatever a test does to TF's logger, matches names as users write them, splits the seconds, sums
each function over the session, compares with a baseline, and writes its JSON by the CLI's rules.

Each mechanism has its handed case, a sibling the case does not name, and a healthy twin that must
not trigger it. Inner runs are in-process (``pytester.runpytest``): TF is imported once.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest

from tests.pytest_plugin.test_pytest_plugin import QUIET, plugin_args, section

pytest_plugins = ["pytester"]


def run(pytester, *args, quiet=QUIET):
    return pytester.runpytest(*plugin_args(), "-p", "no:cacheprovider", *quiet, *args)


def record(path) -> dict:
    doc = json.loads(path.read_text())
    return {t["nodeid"].split("::", 1)[1]: t for t in doc["tests"]} | {"__doc__": doc}


def counts(rec: dict) -> dict[str, int]:
    return {f["function"]: f["trace_count"] for f in rec["functions"]}


# ---------------------------------------------------------------------------
# 1. Never change an outcome: a test that hides TensorFlow, and the plugin's own failure
# ---------------------------------------------------------------------------

# A layout like keras-hub's: model tests before and after a library's "TF not installed" tests.
MODEL_TESTS = '''
import tensorflow as tf


@tf.function
def dense(x):
    return x * 2.0 + 1.0


def test_build():
    dense(tf.ones([2]))


def test_retrace():
    dense(tf.ones([3]))
    dense(tf.ones([4]))
'''

OPTIONAL_TF = '''
import sys
from unittest import mock

import pytest
import tensorflow as tf


def has_tf():
    try:
        import tensorflow  # noqa: F401
        return True
    except ImportError:
        return False


@tf.function
def double(x):
    return 2 * x


def test_with_tf():
    double(tf.ones([2]))


def test_without_tf_monkeypatch(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    assert not has_tf()


@pytest.fixture
def no_tf():
    with mock.patch.dict(sys.modules, {"tensorflow": None}):
        yield


def test_without_tf_fixture(no_tf):
    assert not has_tf()


def test_a_stand_in_tf(monkeypatch):  # not None: a stub module object
    monkeypatch.setitem(sys.modules, "tensorflow", mock.MagicMock(name="tensorflow"))
    import tensorflow
    assert isinstance(tensorflow, mock.MagicMock)


def test_hides_another_module(monkeypatch):  # healthy twin: TF stays visible
    monkeypatch.setitem(sys.modules, "no_such_optional_dependency", None)
    double(tf.ones([5]))
'''

AFTER = '''
import tensorflow as tf


@tf.function
def later(x):
    return x - 1.0


def test_after():
    later(tf.ones([2]))
    later(tf.ones([3]))
'''


def test_a_test_that_hides_tensorflow_changes_no_outcome_and_is_recorded_as_such(pytester, tmp_path):
    pytester.makepyfile(test_a_model=MODEL_TESTS, test_optional_tf=OPTIONAL_TF, test_z_after=AFTER)
    off = pytester.runpytest("-p", "no:cacheprovider", *QUIET, *(["-p", "no:tflab"] if not plugin_args() else []))
    out = tmp_path / "t.json"
    on = run(pytester, "--tflab-traces", f"--tflab-traces-json={out}")
    assert off.parseoutcomes() == on.parseoutcomes() == {"passed": 8}, (off.outlines, on.outlines)
    assert on.ret == off.ret == 0
    recs = record(out)
    for hidden in ("test_without_tf_monkeypatch", "test_without_tf_fixture", "test_a_stand_in_tf"):
        assert recs[hidden]["note"].startswith("TF hidden in this test"), recs[hidden]
    assert "note" not in recs["test_hides_another_module"], recs["test_hides_another_module"]
    assert counts(recs["test_hides_another_module"]) == {"double": 1}
    assert counts(recs["test_after"]) == {"later": 2}  # the tests after it are recorded as usual
    assert counts(recs["test_retrace"]) == {"dense": 2}
    assert not any("internal error" in ln for ln in on.outlines)


def test_the_plugin_s_own_failure_is_one_line_and_the_outcome_stays(pytester, monkeypatch):
    """A planted defect: the recording raises at every phase's start and end. Setup, teardown and the
    fixtures' finalizers still run, each test keeps its outcome, and one line per kind of failure says so."""
    import tflab.pytest_plugin as plugin

    class Broken(plugin._Live):  # the inner session's recordings only (an outer one keeps its own)
        def begin(self, *args):
            raise RuntimeError("planted")

        end = begin

    monkeypatch.setattr(plugin, "_Live", Broken)
    pytester.makepyfile(test_a_model=MODEL_TESTS, test_optional_tf=OPTIONAL_TF)
    result = run(pytester, "--tflab-traces")
    assert result.parseoutcomes() == {"passed": 7}, result.outlines
    problems = [ln for ln in result.outlines if ln.startswith("tflab traces: internal error")]
    assert problems and all("RuntimeError: planted" in ln and "the test's outcome is its own" in ln
                            for ln in problems), problems


# ---------------------------------------------------------------------------
# 2. Ownership by location; 3. counting whatever the test does to TF's logger
# ---------------------------------------------------------------------------

HELPERS_PKG = '''
import tensorflow as tf


@tf.function
def shift(x):
    return x + 1.0
'''

USER_NAMED_TENSORFLOW = '''
import logging
import unittest

import tensorflow as tf

from tensorflow_utils_pkg.steps import shift


@tf.function
def scale(x):
    return x * 2.0


def test_a_user_module_named_tensorflow_something():
    scale(tf.ones([2]))
    scale(tf.ones([3]))


def test_a_user_package_named_tensorflow_something():
    shift(tf.ones([2]))
    shift(tf.ones([3]))


class Net(tf.Module):
    def __init__(self):
        self.v = None

    @tf.function
    def step(self, x):
        if self.v is None:
            self.v = tf.Variable(1.0)
        return x * self.v


def test_tf_s_own_helper_is_not_counted():  # healthy twin: TF's variable initializer
    net = Net()
    net.step(tf.ones([2]))
    assert net.step.experimental_get_tracing_count() == 2


def test_keras_steps_are_the_model_s():  # healthy twin: Keras wraps its step in a wrapper from TF's folder
    import numpy as np
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.predict(np.ones((2, 4), "float32"), verbose=0)


def test_caplog_at_level(caplog):
    @tf.function
    def f(x):
        return x + 1

    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        for i in range(6):
            f(i)


class T(unittest.TestCase):
    def test_assert_logs(self):
        @tf.function
        def h(x):
            return x * 3

        with self.assertLogs("tensorflow", level="WARNING"):
            for i in range(6):
                h(i)


def test_a_disabled_logger():  # sibling: the logger switched off outright
    @tf.function
    def g(x):
        return x - 3

    logger = logging.getLogger("tensorflow")
    logger.disabled = True
    try:
        for i in range(4):
            g(i)
    finally:
        logger.disabled = False


def test_plain_logging():  # healthy twin: nothing done to the logger
    @tf.function
    def p(x):
        return x / 3

    for i in range(6):
        p(i)
'''


def test_ownership_by_location_and_counts_that_no_logger_setting_hides(pytester, tmp_path):
    pytester.mkpydir("tensorflow_utils_pkg")
    pytester.path.joinpath("tensorflow_utils_pkg", "steps.py").write_text(HELPERS_PKG)
    pytester.makepyfile(tensorflow_helpers_test=USER_NAMED_TENSORFLOW)
    out = tmp_path / "t.json"
    # pytest's logging plugin on (caplog): the plugin no longer touches the tensorflow logger
    result = run(pytester, f"--tflab-traces-json={out}", "tensorflow_helpers_test.py", quiet=QUIET[:2])
    assert result.parseoutcomes() == {"passed": 8}, result.outlines
    recs = record(out)
    assert counts(recs["test_keras_steps_are_the_model_s"]) == {"one_step_on_data_distributed": 1}
    assert counts(recs["test_a_user_module_named_tensorflow_something"]) == {"scale": 2}
    assert counts(recs["test_a_user_package_named_tensorflow_something"]) == {"shift": 2}
    assert counts(recs["test_tf_s_own_helper_is_not_counted"]) == {"Net.step": 2}
    assert counts(recs["test_caplog_at_level"]) == {"f": 6}
    assert counts(recs["T::test_assert_logs"]) == {"h": 6}
    assert counts(recs["test_a_disabled_logger"]) == {"g": 4}
    assert counts(recs["test_plain_logging"]) == {"p": 6}
    assert not any("note" in r for k, r in recs.items() if k != "__doc__")


# ---------------------------------------------------------------------------
# 4. Names as users write them; a malformed marker is one line
# ---------------------------------------------------------------------------

NAMES = '''
import pytest
import tensorflow as tf


class CausalLM(tf.Module):
    @tf.function
    def generate_step(self, x):
        return x * 2.0


class Trainer(tf.Module):
    @tf.function
    def step(self, x):
        return x + 1.0


lm = CausalLM()
trainer = Trainer()


@tf.function
def warm(x):
    return x * 3.0


def test_warms():
    warm(tf.ones([2]))
    trainer.step(tf.ones([2]))


@pytest.mark.tflab_max_traces(1, function="generate_step")  # the handed case: a method's short name
def test_short_name_over():
    lm.generate_step(tf.ones([1]))
    lm.generate_step(tf.ones([2]))


@pytest.mark.tflab_max_traces(1, function="CausalLM.generate_step")  # sibling: Class.method
def test_class_method_over():
    lm.generate_step(tf.ones([3]))
    lm.generate_step(tf.ones([4]))


@pytest.mark.tflab_max_traces(0, function="step")  # healthy twin: "step" is not "generate_step"
def test_a_name_is_whole_parts():
    lm.generate_step(tf.ones([5]))


@pytest.mark.tflab_max_traces(5, function="generate_stpe")  # misspelt: fails, naming what traced
def test_misspelt():
    lm.generate_step(tf.ones([6]))


@pytest.mark.tflab_max_traces(0, function="warm")  # healthy twin: traced earlier, cached now
def test_cached_name():
    warm(tf.ones([2]))


@pytest.mark.tflab_max_traces(0, function=trainer.step)  # healthy twin: an object that did not trace
def test_object_untraced():
    pass


def test_fixture_names(tflab_traces):
    lm.generate_step(tf.ones([7]))
    lm.generate_step(tf.ones([8]))
    trainer.step(tf.ones([7]))
    assert tflab_traces.count("generate_step") == 2
    assert tflab_traces.count("CausalLM.generate_step") == 2
    assert tflab_traces.count("test_names.CausalLM.generate_step") == 2
    assert tflab_traces.count(lm.generate_step) == 2
    assert tflab_traces.count("step") == 1  # Trainer.step, traced again for a new shape
    assert tflab_traces.count("erate_step") == 0


@pytest.mark.tflab_max_traces(1, function=123)
def test_bad_function():
    pass


@pytest.mark.tflab_max_traces("2")
def test_bad_n():
    pass
'''


def test_names_match_as_users_write_them_and_an_unmatched_name_fails(pytester):
    pytester.makepyfile(test_names=NAMES)
    result = run(pytester, "-p", "no:randomly")
    outcomes = {ln.split(" ", 1)[1].split(" - ")[0]: ln.split(" ", 1)[0] for ln in result.outlines
                if ln.startswith(("FAILED ", "ERROR "))}
    assert outcomes == {"test_names.py::test_short_name_over": "FAILED",
                        "test_names.py::test_class_method_over": "FAILED",
                        "test_names.py::test_misspelt": "FAILED",
                        "test_names.py::test_bad_function": "ERROR",
                        "test_names.py::test_bad_n": "ERROR"}, result.outlines
    text = "\n".join(result.outlines)
    assert "CausalLM.generate_step: 2 traces, over the budget of 1 (tflab_max_traces(1, function='generate_step'))" in text
    assert ("tflab_max_traces(function='generate_stpe'): no tf.function of that name traced in the test body or "
            "earlier in this session; traced in the test body: test_names.CausalLM.generate_step") in text
    assert "got n=1, function=123" in text and "got n='2'" in text
    assert "pytest_plugin.py" not in text  # one line, no tflab frames


# ---------------------------------------------------------------------------
# 5. Time split, nested traces once; 6. per-function summary, tf.data's own group
# ---------------------------------------------------------------------------

TIMES = '''
import time
import tensorflow as tf

PAUSE = 0.25


def slow_run(x):
    time.sleep(4 * PAUSE)
    return x


@tf.function
def builds_slowly(x):
    time.sleep(PAUSE)  # Python: runs while the graph is built
    return x + 1.0


@tf.function
def runs_slowly(x):
    return tf.py_function(slow_run, [x], tf.float32)  # runs at the first run, not while building


@tf.function
def inner(x):
    time.sleep(PAUSE)
    return x * 2.0


@tf.function
def outer(x):
    time.sleep(PAUSE)
    return inner(x) + 1.0


def test_split():
    builds_slowly(tf.ones([2]))
    runs_slowly(tf.ones([2]))


def test_nested():
    outer(tf.ones([2]))
    outer(tf.ones([3]))


def test_again():
    builds_slowly(tf.ones([3]))


def parse(x):
    return x * 2


def keep(x):
    return x > 1


def test_data():
    ds = tf.data.Dataset.range(4).map(parse).filter(keep)
    assert list(ds.as_numpy_iterator()) == [2, 4, 6]
    builds_slowly(tf.ones([4]))
'''


def test_seconds_are_split_and_counted_once_and_each_function_is_summed_over_the_session(pytester, tmp_path):
    pytester.makepyfile(test_times=TIMES)
    out = tmp_path / "t.json"
    result = run(pytester, "-p", "no:randomly", "--tflab-traces", f"--tflab-traces-json={out}")
    assert result.ret == 0, result.outlines
    recs = record(out)
    pause = 0.25
    fs = {f["function"]: f for f in recs["test_split"]["functions"]}
    # a sleep while building is building; a sleep in the first run (a py_function's, 1 s) is not
    assert fs["builds_slowly"]["build_seconds"] >= pause and fs["builds_slowly"]["compile_seconds"] < 4 * pause
    assert fs["runs_slowly"]["compile_seconds"] >= 4 * pause > fs["runs_slowly"]["build_seconds"]
    nested = {f["function"]: f for f in recs["test_nested"]["functions"]}
    assert nested["outer"]["seconds"] >= 4 * pause and nested["inner"]["seconds"] >= 2 * pause
    # inner's traces are inner's: outer's own seconds leave them out
    assert nested["outer"]["own_seconds"] == pytest.approx(nested["outer"]["seconds"] - nested["inner"]["seconds"])
    assert nested["outer"]["own_seconds"] >= 2 * pause
    totals = recs["__doc__"]["totals"]
    # counted once: the per-function list sums to the session's seconds
    assert sum(f["own_seconds"] for f in totals["functions"]) == pytest.approx(totals["seconds"], rel=1e-6)
    row = {f["function"]: f for f in totals["functions"]}["test_times.builds_slowly"]
    assert (row["trace_count"], row["tests"], row["first_test"]) == (3, 3, "test_times.py::test_split")
    assert (row["top_reason"], row["top_reason_count"], row["retraces"]) == ("x: shape", 2, 2), row
    assert row["top_reason_example"] == "x: shape (3,) -> (4,)"
    # tf.data's functions: their own group, not in the tests' tf.function counts
    data = {f["label"]: f["trace_count"] for f in recs["test_data"]["data_functions"]}
    assert data == {"Dataset.map: parse": 1, "Dataset.filter: keep": 1}, data
    assert counts(recs["test_data"]) == {"builds_slowly": 1}
    lines = section(result)
    assert any(ln.startswith("tf.data functions (map, filter, ...) across the session") for ln in lines), lines
    assert any(ln.strip() == "most common retrace reason (2 of 2 retraces): x: shape (latest: x: shape (3,) -> (4,))"
               for ln in lines), lines
    assert lines[-1] == f"trace record: {out}"
    assert lines[-2].startswith("session: 8 traces of 4 tf.functions in 4 of 4 recorded tests"), lines[-2]
    assert lines[-2].endswith("; 2 tf.data function traces"), lines[-2]


# ---------------------------------------------------------------------------
# 7. The baseline
# ---------------------------------------------------------------------------

BASE = '''
import tensorflow as tf


@tf.function
def step(x):
    return x + 1.0


@tf.function
def other(x):
    return x * 2.0


class Model(tf.Module):
    @tf.function
    def call(self, x):
        return x - 1.0


def test_a():
    step(tf.ones([2]))
    step(tf.ones([3]))


def test_b():
    Model().call(tf.ones([2]))
    Model().call(tf.ones([2]))
    other(tf.ones([5]))
'''


def strip_seconds(doc):
    if isinstance(doc, dict):
        return {k: strip_seconds(v) for k, v in doc.items() if "seconds" not in k}
    if isinstance(doc, list):
        return [strip_seconds(v) for v in doc]
    return doc


def test_a_baseline_catches_a_planted_extra_trace_and_passes_an_unchanged_run(pytester, tmp_path):
    base, again = tmp_path / "base.json", tmp_path / "again.json"
    pytester.makepyfile(test_base=BASE)
    assert run(pytester, f"--tflab-traces-json={base}").ret == 0
    text = base.read_text()
    assert "0x" not in text and str(pytester.path) not in text  # stable labels, relative sites
    labels = {f["label"] for t in json.loads(text)["tests"] for f in t["functions"]}
    assert labels == {"step", "Model.call (object 1)", "Model.call (object 2)", "other"}, labels

    unchanged = run(pytester, f"--tflab-traces-baseline={base}", "--tflab-traces-fail-on-increase",
                    f"--tflab-traces-json={again}")
    assert unchanged.ret == 0, unchanged.outlines
    assert any("no function traced more than in the baseline" in ln for ln in unchanged.outlines)
    assert strip_seconds(json.loads(again.read_text())) == strip_seconds(json.loads(text))  # diffable

    planted = BASE.replace("    step(tf.ones([3]))\n", "    step(tf.ones([3]))\n    step(tf.ones([4]))\n")
    planted = planted.replace("    other(tf.ones([5]))\n", "    other(tf.ones([5]))\n    step(tf.ones([9]))\n")
    planted += "\n\ndef test_new():\n    step(tf.ones([7]))\n"  # healthy twin: a new test is no increase
    pytester.makepyfile(test_base=planted)
    caught = run(pytester, f"--tflab-traces-baseline={base}", "--tflab-traces-fail-on-increase")
    assert caught.ret == 1, caught.outlines
    assert caught.parseoutcomes() == {"passed": 3}
    text = "\n".join(caught.outlines)
    assert "test_base.py::test_a: test_base.step: 2 -> 3 traces" in text
    assert re.search(r"retrace at test_base\.py:\d+: x: shape \(3,\) -> \(4,\)", text), text
    assert "test_base.py::test_b: test_base.step: 0 -> 1 traces" in text  # sibling: a function new in a test
    assert "test_new" not in text
    assert caught.outlines[-2].startswith("tflab traces: FAILED: 2 functions in 2 tests traced 2 times more than "
                                          "in the baseline") or any(
        ln.startswith("tflab traces: FAILED: 2 functions in 2 tests traced 2 times more") for ln in caught.outlines)


def test_a_bad_baseline_is_one_error_before_the_tests(pytester, tmp_path):
    pytester.makepyfile(test_base=BASE)
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    for args, words in (([f"--tflab-traces-baseline={tmp_path / 'none.json'}"], "no such file"),
                        ([f"--tflab-traces-baseline={notes}"], "not a trace record"),
                        (["--tflab-traces-fail-on-increase"], "add --tflab-traces-baseline")):
        result = run(pytester, *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR and any(words in ln for ln in result.errlines), \
            (args, result.errlines)


# ---------------------------------------------------------------------------
# 9. The JSON file follows the CLI's rules
# ---------------------------------------------------------------------------

ONE = '''
import tensorflow as tf


@tf.function
def f(x):
    return x + 1.0


def test_one():
    f(tf.ones([2]))
'''


def test_the_json_path_is_checked_before_the_tests_and_a_user_s_file_is_kept(pytester, tmp_path):
    pytester.makepyfile(test_one=ONE)
    notes = tmp_path / "notes.json"
    notes.write_text("my precious notes\n")
    refused = {"": "needs a file path", "/proc/tflab-t.json": "cannot create a file in /proc",
               str(notes): "exists and tflab did not write it", str(tmp_path / "no" / "t.json"): "does not exist"}
    for path, words in refused.items():
        result = run(pytester, f"--tflab-traces-json={path}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (path, result.outlines)
        assert any(words in ln for ln in result.errlines), (path, result.errlines)
        assert not any("test_one" in ln for ln in result.outlines)  # refused before any test ran
    assert notes.read_text() == "my precious notes\n"
    forced = run(pytester, f"--tflab-traces-json={notes}", "--tflab-traces-force")
    assert forced.ret == 0 and json.loads(notes.read_text())["tool"] == "tflab.pytest_plugin"
    again = run(pytester, f"--tflab-traces-json={notes}")  # healthy twin: tflab's own file is replaced
    assert again.ret == 0 and json.loads(notes.read_text())["tests"][0]["trace_count"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json"]  # no temporary file left


def test_a_slow_reader_of_a_pipe_gets_the_whole_document():
    """/dev/fd/N of a pipe whose reader starts late: every byte of a document larger than the pipe's buffer."""
    from tflab._pytest.output import write_json_atomically

    doc = {"tool": "tflab.pytest_plugin", "tests": [{"nodeid": f"t.py::test_{i}", "pad": "x" * 200}
                                                   for i in range(2000)]}
    r, w = os.pipe()
    got = bytearray()

    def slow_reader():
        time.sleep(0.3)
        with os.fdopen(r, "rb") as fh:
            while chunk := fh.read(4096):
                got.extend(chunk)
                time.sleep(0.001)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    try:
        write_json_atomically(f"/dev/fd/{w}", doc)
    finally:
        os.close(w)
        reader.join(30)
    assert json.loads(got) == json.loads(json.dumps(doc, default=str))


def test_two_wrappers_of_tf_s_trace_entry_point_each_see_every_trace():
    """A user's own counter of TF's entry point (or an outer pytest session's plugin) under the plugin's:
    each wrapper finds TF's tracing frame, and uninstalling in either order restores TF's function."""
    import tensorflow as tf

    from tflab._tf import function as _tf

    seen: dict[str, list] = {"outer": [], "inner": []}

    def hook(name):
        def start(frame):
            loc = _tf.tracing_locals(frame) if frame is not None else None
            seen[name].append(getattr(getattr(loc, "python_function", None), "__name__", None))
            return name

        return start, lambda token, ok: None

    @tf.function
    def twice(x):
        return x * 2.0

    module = __import__(_tf.TRACING_MODULE, fromlist=["x"])
    original = vars(module)[_tf.TRACE_ENTRY]
    outer = _tf.install_trace_entry(*hook("outer"))
    inner = _tf.install_trace_entry(*hook("inner"))
    try:
        twice(tf.ones([1]))
        twice(tf.ones([2]))
        twice(tf.ones([2]))  # cached: no trace
    finally:
        outer()  # out of order: the inner wrapper still calls through, the outer one passes through
        inner()
    assert seen == {"outer": ["twice", "twice"], "inner": ["twice", "twice"]}, seen
    twice(tf.ones([3]))
    assert len(seen["outer"]) == len(seen["inner"]) == 2  # uninstalled: no more calls
    inner_again = _tf.install_trace_entry(*hook("inner"))
    inner_again()
    left = vars(module)[_tf.TRACE_ENTRY]
    setattr(module, _tf.TRACE_ENTRY, original)  # this test's own leftover: the outer pass-through
    assert left.__wrapped__ is original
