"""The pytest plugin in fresh interpreters: its import loads no TensorFlow, the ``pytest11`` entry point
registers it (``-p no:tflab`` removes it), it is off by default, and pytest-xdist workers' records merge
into one summary and one JSON file.

The entry point is the one pyproject.toml declares, installed for the subprocess as a dist-info folder
on its path (what ``pip install`` of the wheel writes), so no ``-p`` option is needed, as for a user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest

pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def declared_entry_point() -> tuple[str, str]:
    """(name, module) of the ``pytest11`` entry point in pyproject.toml."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        eps = tomllib.load(fh)["project"]["entry-points"]["pytest11"]
    assert len(eps) == 1, eps
    return next(iter(eps.items()))


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A dist-info with pyproject's pytest11 entry point on the subprocesses' path, and this tree's tflab."""
    name, module = declared_entry_point()
    dist = tmp_path / "site" / "tflab_plugin_check-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tflab-plugin-check\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\n{name} = {module}\n")
    path = os.pathsep.join([str(tmp_path / "site"), ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    return name


def test_importing_the_plugin_imports_no_tensorflow():
    code = ("import sys, tflab.pytest_plugin; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras') "
            "or m.startswith('tflab.retrace')); assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert proc.returncode == 0, proc.stderr


# A suite without TensorFlow, and a conftest that says whether TF got imported anyway.
NO_TF = '''
def test_plain():
    assert sum([1, 2]) == 3
'''
SAYS_IF_TF = '''
import sys

def pytest_sessionfinish(session):
    with open("tf-imported.txt", "w") as fh:
        fh.write(str("tensorflow" in sys.modules))
'''


def test_the_entry_point_registers_it_and_it_is_off_by_default(pytester, installed):
    pytester.makepyfile(test_plain=NO_TF)
    pytester.makeconftest(SAYS_IF_TF)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    assert not any("tflab traces" in ln for ln in result.outlines)  # off by default: no section
    assert (pytester.path / "tf-imported.txt").read_text() == "False"
    # Registered by the entry point: its option and marker exist without -p.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tflab-traces")
    assert result.ret == 0
    assert any("tflab traces" in ln for ln in result.outlines)
    assert "tflab traces: no test imported TensorFlow, so there were no tf.function traces to record" in result.outlines
    assert (pytester.path / "tf-imported.txt").read_text() == "False"  # on, but nothing used TF
    result = pytester.runpytest_subprocess("--markers")
    assert any(ln.startswith("@pytest.mark.tflab_max_traces(") for ln in result.outlines)
    # -p no:NAME (the entry point's name) removes it: the option is unknown.
    result = pytester.runpytest_subprocess("-p", f"no:{installed}", "--tflab-traces")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any("unrecognized arguments: --tflab-traces" in ln for ln in result.errlines)


WORKER_A = '''
import tensorflow as tf

@tf.function
def fa(x, k):
    return x * k

def test_a1():
    fa(tf.ones([1]), 1)
    fa(tf.ones([2]), 1)

def test_a2():
    fa(tf.ones([2]), 2)
'''
WORKER_B = '''
import tensorflow as tf

@tf.function
def fb(x):
    return x + 1

def test_b1():
    fb(tf.ones([3]))
    fb(tf.ones([4]))
    fb(tf.ones([5]))
'''


def test_xdist_workers_merge_into_one_summary_and_one_file(pytester, installed, tmp_path):
    pytester.makepyfile(test_wa=WORKER_A, test_wb=WORKER_B)
    out = tmp_path / "merged.json"
    result = pytester.runpytest_subprocess("-p", "xdist", "-n", "2",
                                           "-p", "no:cacheprovider", "--tflab-traces",
                                           f"--tflab-traces-json={out}", timeout=600)
    assert result.ret == 0, result.outlines
    result.assert_outcomes(passed=3)
    record = json.loads(out.read_text())
    tests = {t["nodeid"]: t for t in record["tests"]}
    assert sorted(tests) == ["test_wa.py::test_a1", "test_wa.py::test_a2", "test_wb.py::test_b1"]
    assert [t["reasons"] for t in tests["test_wb.py::test_b1"]["functions"][0]["traces"]] == [
        [], ["x: shape (3,) -> (4,)"], ["x: shape (4,) -> (5,)"]]
    # Which worker ran test_a2 is xdist's choice: in test_a1's it is fa's third trace, else its first.
    a2 = tests["test_wa.py::test_a2"]["functions"][0]["traces"]
    assert [t["reasons"] for t in a2] in ([["k: 1 -> 2"]], [[]]), a2
    assert {t["worker"] for t in tests.values()} == {"gw0", "gw1"}  # both workers' records are here
    assert record["totals"]["trace_count"] == 6
    lines = result.outlines
    assert sum(ln.startswith("session: 6 traces of 2 tf.functions in 3 of 3 recorded tests") for ln in lines) == 1
    assert "test_wb.py::test_b1: 3 traces" in "\n".join(lines)


LOGGED = '''
import logging
import tensorflow as tf

@tf.function
def h(x):
    return x + 1

def test_logs_and_fails():
    logging.getLogger("tensorflow").warning("a warning of the test's own")
    h(tf.ones([1]))
    h(tf.ones([2]))
    assert False
'''


def test_a_recorded_test_s_captured_log_holds_no_tf_trace_record(pytester, installed):
    """pytest attaches its log handlers to non-propagating loggers per phase: the capture opens inside."""
    pytester.makepyfile(test_logged=LOGGED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tflab-traces", timeout=600)
    result.assert_outcomes(failed=1)
    text = "\n".join(result.outlines)
    assert "a warning of the test's own" in text.split("Captured log call", 1)[1]  # still forwarded
    assert "Creating new FuncGraph" not in text and "Level 1" not in text
    assert "h: 2 traces" in text


# TensorFlow imported inside the first test: that phase can only read TF's log record, and says so.
LATE_IMPORT = '''
def test_imports_tf_late():
    import tensorflow as tf

    class Net(tf.Module):
        def __init__(self):
            self.v = None

        @tf.function
        def step(self, x):
            if self.v is None:
                self.v = tf.Variable(1.0)
            return x * self.v

    nets = [Net() for _ in range(3)]  # three objects: three variable-creation re-traces
    for net in nets:
        net.step(tf.ones([2]))


def test_after_import():
    import tensorflow as tf

    @tf.function
    def g(x):
        return x + 1

    g(tf.ones([1]))
    g(tf.ones([2]))
'''


def test_a_phase_that_imports_tf_says_its_traces_came_from_the_log_and_each_caveat_once(pytester, installed):
    pytester.makepyfile(test_late=LATE_IMPORT)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--tflab-traces",
                                           timeout=600)
    result.assert_outcomes(passed=2)
    text = "\n".join(result.outlines)
    assert "test_late.py::test_imports_tf_late: 6 traces" in text, text
    assert ("note: TensorFlow was imported during this test's call, so its traces there were read from TF's "
            "log record, which a logger setting can hide") in text, text
    assert text.count("does not say whether") == 1, text  # the caveat once, not per trace
    lines = result.outlines
    start = lines.index(next(ln for ln in lines if ln.startswith("test_late.py::test_after_import:")))
    after = [lines[start]] + [ln for ln in lines[start + 1:start + 20]][:next(
        i for i, ln in enumerate(lines[start + 1:]) if not ln.startswith(" "))]
    assert after[0].startswith("test_late.py::test_after_import: 2 traces"), after
    assert not any("note:" in ln for ln in after), after  # TF's entry point from then on


# A machine without TensorFlow: a finder that refuses it, as an uninstalled package would.
NO_TF_CONFTEST = '''
import sys


class NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError("No module named 'tensorflow'", name=name)
        return None


sys.meta_path.insert(0, NoTensorFlow())
'''


def test_no_importable_tensorflow_is_said_in_one_line(pytester, installed):
    pytester.makeconftest(NO_TF_CONFTEST)
    pytester.makepyfile(test_plain=NO_TF)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tflab-traces", timeout=300)
    result.assert_outcomes(passed=1)
    body = result.outlines[next(i for i, ln in enumerate(result.outlines) if "tflab traces" in ln and "=" in ln) + 1:]
    assert body[0] == ("tflab traces: TensorFlow cannot be imported here (no module named 'tensorflow'), so there "
                       "are no tf.function traces to record"), body
    assert not any(ln.startswith("session:") for ln in result.outlines)
