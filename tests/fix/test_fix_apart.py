"""Every candidate fix runs apart from the user's process (`tflab.fix.attempt`): retrace and diagnose inherit it.

A re-trace or run that tflab makes to check a fix may block, loop, exit, raise
SystemExit or KeyboardInterrupt, or change the user's objects and files. The
report still comes out, that candidate alone is "failed" or "not checked", and the
user's objects are as their own run left them. Each hostile body has a sibling
that fails the same way by another route, and a healthy twin whose fix is still
"checked" with the same text as when checks ran in the user's process.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import tflab.fix as fx

LIMIT_S = "1"  # hostile bodies: short; a healthy check is given `HEALTHY_S`
HEALTHY_S = "30"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _time_limit(monkeypatch):
    """A body that ends on its own gets a generous limit (a loaded CI machine); a blocking one gets `LIMIT_S`."""
    monkeypatch.setenv("TFLAB_FIX_TIMEOUT_S", HEALTHY_S)


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setenv("TFLAB_FIX_TIMEOUT_S", LIMIT_S)


def test_a_healthy_check_gives_the_same_line_as_in_the_users_process():
    f = fx.attempt("input_signature", "tf.TensorSpec(None, tf.int32)", "give add an input_signature",
                   lambda: (True, "1 trace for your 3 calls", {"traces": 1}))
    assert f.line() == ("fix: give add an input_signature: tf.TensorSpec(None, tf.int32) "
                        "(checked: 1 trace for your 3 calls)")
    assert f.measured == {"traces": 1}


@pytest.mark.parametrize("body,status,text", [
    (lambda: time.sleep(1e9), fx.NOT_CHECKED, "not checked: the candidate did not finish in 1 s"),
    (lambda: os._exit(3), fx.FAILED, "failed: your code ended its process with os._exit(3) under this fix"),
    (lambda: sys.exit(4), fx.FAILED, "failed: your code called sys.exit(4) under this fix"),
], ids=["sleeps", "os_exit", "sys_exit"])
def test_a_check_that_blocks_or_ends_its_process_fails_that_candidate_only(body, status, text, monkeypatch):
    if status == fx.NOT_CHECKED:
        monkeypatch.setenv("TFLAB_FIX_TIMEOUT_S", LIMIT_S)
    f = fx.attempt("code", "x", "change x", body)
    assert (f.status, f.check_text) == (status, text)
    plan = fx.first_working([lambda: f, lambda: fx.attempt("code", "y", "change y", lambda: (True, "ran"))])
    if status == fx.NOT_CHECKED:  # a body that does not finish: the next candidate would spend its limit too
        assert plan.tried[1].check_text == "not checked: an earlier candidate did not finish in 1 s"
    else:
        assert plan.fix.change == "y" and plan.fix.checked  # the next candidate is still tried


# --------------------------------------------------------------------------- retrace: the probe's report


def _probe_three_calls(step):
    import tensorflow as tf

    import tflab

    p = tflab.RetraceProbe(step)
    for n in (1, 2, 3):
        p(tf.ones([n]))
    return p


def _fix_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("fix:")]


def test_retrace_a_body_that_blocks_on_a_queue_when_re_traced_is_not_checked_and_the_report_comes_out(short_limit):
    import tensorflow as tf

    q: queue.Queue = queue.Queue()

    @tf.function
    def step(x):
        return x * q.get()  # trace-time config handed over by the caller's loop

    import tflab

    p = tflab.RetraceProbe(step)
    for n in (1, 2, 3):
        q.put(2.0)
        p(tf.ones([n]))
    start = time.monotonic()
    lines = _fix_lines(p.to_text())
    assert lines and all("not checked: the candidate did not finish in 1 s" in ln for ln in lines)
    assert time.monotonic() - start < 15  # one time limit for the body, not one per candidate and retrace


def test_retrace_a_body_that_waits_on_a_semaphore_when_re_traced_is_not_checked(short_limit):
    import tensorflow as tf

    gate = threading.Semaphore(0)

    @tf.function
    def step(x):
        gate.acquire()  # released once per call by the user's loop
        return x * 2.0

    import tflab

    p = tflab.RetraceProbe(step)
    for n in (1, 2, 3):
        gate.release()
        p(tf.ones([n]))
    assert all("did not finish in 1 s" in ln for ln in _fix_lines(p.to_text()))


def _guarded_step(action):
    """A step whose 4th trace (reached only by tflab's re-trace) runs ``action``; its count in a list."""
    import tensorflow as tf

    count = [0]

    @tf.function
    def step(x):
        count[0] += 1
        if count[0] > 3:
            action()
        return x * 2.0

    return step, count


@pytest.mark.parametrize("action,text", [
    (lambda: os._exit(7), "your code ended its process with os._exit(7) under this fix"),
    (lambda: sys.exit("guard"), "your code called sys.exit('guard') under this fix"),
    (lambda: (_ for _ in ()).throw(KeyboardInterrupt()), "your code raised KeyboardInterrupt under this fix"),
], ids=["os_exit", "sys_exit", "keyboard_interrupt"])
def test_retrace_a_guard_only_tflabs_re_trace_reaches_fails_the_candidate_not_the_report(action, text):
    step, count = _guarded_step(action)
    p = _probe_three_calls(step)
    report = p.to_text()  # no exit, no KeyboardInterrupt out of tflab's check
    assert "3 trace(s) in 3 call(s)" in report
    assert text in report and "checked: 1 trace" not in report
    assert count == [3]  # the user's counter is where the user's run left it


def test_retrace_checks_leave_the_users_list_iterator_and_trace_log_as_the_run_left_them(tmp_path):
    import tensorflow as tf

    log = tmp_path / "traces.log"
    created: list = []
    it = iter(range(100))

    @tf.function
    def step(x):
        with open(log, "a") as f:
            f.write(f"trace {x.shape}\n")
        created.append(next(it))
        return x * 2.0

    p = _probe_three_calls(step)
    report = p.to_text()
    # the healthy twin: the fix is still measured on the user's calls, traces and values
    assert "(checked: 1 trace for your 3 calls, instead of 3; outputs equal eager's on your 3 calls" in report
    assert log.read_text().count("trace") == 3
    assert created == [0, 1, 2] and next(it) == 3


# --------------------------------------------------------------------------- diagnose: the rewritten copy's run


_LOOPS = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf

    def loops(x):
        i = tf.constant(0)
        while i >= 0:                    # a server-style loop: runs until stopped
            i = i + 1
        return np.sum(x) * 2.0           # numpy call on a symbolic tensor: fails to trace

    def waits(x):
        tf.print("waiting")
        y = tf.numpy_function(lambda v: (__import__("time").sleep(1e9), v)[1], [x], tf.float32)
        return np.sum(y) * 2.0

    def writes(x):
        open(LOG, "a").write("ran\\n")
        created.append(next(IT))
        return np.sum(x) * 2.0
""")


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    import importlib.util

    path = tmp_path_factory.mktemp("diag") / "diag_user.py"
    path.write_text(_LOOPS)
    spec = importlib.util.spec_from_file_location("diag_user", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.LOG = str(path.with_name("diag_side.log"))
    mod.created = []
    mod.IT = iter(range(100))
    return mod


@pytest.mark.parametrize("name", ["loops", "waits"])
def test_diagnose_a_rewrite_whose_run_never_ends_is_not_checked_and_the_diagnosis_comes_out(user_module, name,
                                                                                          short_limit):
    import tensorflow as tf

    import tflab

    start = time.monotonic()
    d = tflab.diagnose(getattr(user_module, name), tf.TensorSpec([4], tf.float32))
    text = d.to_text()
    assert "numpy" in text.lower() and "did not finish in 1 s" in text
    assert time.monotonic() - start < 60


def test_diagnose_checks_leave_the_users_file_list_and_iterator_to_the_diagnosing_trace(user_module):
    import tensorflow as tf

    import tflab

    d = tflab.diagnose(user_module.writes, tf.TensorSpec([4], tf.float32))
    assert "tf.reduce_sum" in d.to_text()
    # one trace is the diagnosis itself; the candidates' traces and runs stayed in their children
    assert Path(user_module.LOG).read_text().count("ran") == 1
    assert user_module.created == [0] and next(user_module.IT) == 1


# --------------------------------------------------------------------------- the CLI verb: report and exit code


def test_tflab_retrace_script_whose_re_trace_exits_or_blocks_prints_its_report_with_the_normal_exit_code(tmp_path):
    script = tmp_path / "retr_hostile.py"
    script.write_text(textwrap.dedent("""
        import os, queue
        import tensorflow as tf
        count = [0]
        q = queue.Queue()

        @tf.function
        def guarded(x):
            count[0] += 1
            if count[0] > 3:
                os._exit(7)
            return x * 2.0

        @tf.function
        def blocking(x):
            return x * q.get()

        for n in (1, 2, 3):
            guarded(tf.ones([n]))
            q.put(2.0)
            blocking(tf.ones([n]))
        print("done", count[0])
    """))
    env = {**os.environ, "PYTHONPATH": str(REPO), "TFLAB_FIX_TIMEOUT_S": LIMIT_S}
    out = subprocess.run([sys.executable, "-m", "tflab", "retrace", script.name], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "done 3" in out.stdout
    assert "guarded: 3 trace(s)" in out.stdout and "blocking: 3 trace(s)" in out.stdout
    assert "os._exit(7) under this fix" in out.stdout
    assert "the candidate did not finish in 1 s" in out.stdout
    assert "before tflab wrote its report" not in out.stdout + out.stderr


def test_a_check_that_cannot_fork_runs_here_with_the_same_verdicts():
    """``apart=False``: the XLA checks (XLA's compiler does not survive fork once it ran here)."""
    from tflab import fix as fx

    seen = []
    ok = fx.attempt("option", "x", "d", lambda: (seen.append(1) or True, "fine", {"n": 1}), apart=False)
    assert ok.checked and ok.result == "fine" and ok.measured == {"n": 1} and seen == [1]   # ran here
    bad = fx.attempt("option", "x", "d", lambda: (_ for _ in ()).throw(ValueError("no")), apart=False)
    assert bad.failed and bad.result == "raised ValueError: no"
    gone = fx.attempt("option", "x", "d", lambda: (_ for _ in ()).throw(SystemExit(3)), apart=False)
    assert gone.failed and gone.result == "your code called sys.exit(3) under this fix"


def test_after_a_candidate_that_did_not_finish_the_next_ones_of_that_problem_are_not_run(short_limit, tmp_path):
    ran = tmp_path / "later_check_ran"

    def later_check():
        ran.write_text("ran")  # os-level evidence: a check run apart still leaves a file it writes with write_text
        return True, "ran"

    start = time.monotonic()
    plan = fx.first_working([
        lambda: fx.attempt("code", "x", "change x", lambda: time.sleep(1e9)),
        lambda: fx.attempt("code", "y", "change y", later_check),
        lambda: fx.attempt("code", "z", "change z", lambda: time.sleep(1e9)),
        fx.Fix("note", "", "keep these values in float32", status=fx.NOT_CHECKED, why="beyond float16's max"),
    ])
    assert time.monotonic() - start < 2 * float(LIMIT_S)  # one time limit, not one per candidate
    assert [f.check_text for f in plan.tried] == [
        "not checked: the candidate did not finish in 1 s",
        "not checked: an earlier candidate did not finish in 1 s",
        "not checked: an earlier candidate did not finish in 1 s",
        "not checked: beyond float16's max"]
    assert [f.description for f in plan.tried[:3]] == ["change x", "change y", "change z"]
    assert not ran.exists()
    # a candidate that failed fast (not a time limit) does not stop the next ones: the healthy twin
    plan = fx.first_working([lambda: fx.attempt("code", "x", "change x", lambda: sys.exit(1)),
                             lambda: fx.attempt("code", "y", "change y", lambda: (True, "ran"))])
    assert plan.fix.description == "change y" and plan.fix.checked
    # and the next problem's candidates run again
    assert fx.first_working([lambda: fx.attempt("code", "y", "change y", lambda: (True, "ran"))]).fix.checked


def test_a_process_the_check_starts_does_not_outlive_it_and_a_grandchild_does_not_delay_it():
    def starts_sleep():
        import subprocess

        return True, str(subprocess.Popen(["sleep", "25"]).pid)

    def forks_sleep():
        if os.fork() == 0:
            time.sleep(25)
            os._exit(0)
        return True, "forked"

    f = fx.attempt("code", "x", "change x", starts_sleep)
    pid = int(f.result)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as st:
                if st.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"the sleep the check started ({pid}) still runs")
    start = time.monotonic()
    f = fx.attempt("code", "y", "change y", forks_sleep)
    assert f.checked and time.monotonic() - start < 10


def test_a_check_whose_exit_argument_would_run_code_when_unpickled_fails_with_its_repr(tmp_path):
    planted = tmp_path / "written_in_the_users_process"

    class Arg:
        def __reduce__(self):
            return (open, (str(planted), "w"))

        def __repr__(self):
            return "Arg()"

    arg = Arg()
    f = fx.attempt("code", "x", "change x", lambda: sys.exit(arg))
    assert f.check_text == "failed: your code called sys.exit(Arg()) under this fix"
    assert not planted.exists()


def test_what_the_body_prints_in_the_child_never_reaches_a_stdout_on_another_descriptor(monkeypatch):
    """Under ``tflab VERB`` ``sys.stdout`` is the report pipe on a high descriptor, not fd 1: the child
    silences Python's streams too, so a print of the body there does not reach the user's stdout. The
    healthy twin: the same print in this process does reach it."""
    from tflab.process.apart import RETURNED, run_apart

    r, w = os.pipe()
    stream = os.fdopen(w, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setattr(sys, "stderr", stream)

    def body():
        print("BODY PRINT")
        print("BODY ERR", file=sys.stderr)
        return 7

    ran = run_apart(body, 30)
    print("PARENT PRINT")
    stream.close()
    got = os.read(r, 4096).decode()
    os.close(r)
    assert ran.status == RETURNED and ran.value == 7
    assert got == "PARENT PRINT\n", got
