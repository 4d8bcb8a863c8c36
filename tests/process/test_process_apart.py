"""A candidate fix's check runs in a forked child with a time limit: the user's process is never changed.

Each way a re-run of the user's code can go wrong (it blocks, loops, exits, raises
SystemExit or KeyboardInterrupt, is killed by a signal, mutates the user's objects,
writes the user's files) ends the child only and comes back as an `Apart` the fix
line can print; a healthy callable's value comes back as it was.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

from tflab.errors import UsageError
from tflab.process import apart
from tflab.process.apart import run_apart

LIMIT = 2.0


def test_a_healthy_callable_returns_its_value_numpy_arrays_included():
    got = run_apart(lambda: {"out": np.arange(4, dtype=np.float32), "n": 3}, LIMIT)
    assert got.status == apart.RETURNED
    np.testing.assert_array_equal(got.value["out"], np.arange(4, dtype=np.float32))
    assert got.value["n"] == 3 and got.text == ""


@pytest.mark.parametrize("body", [
    lambda: __import__("queue").Queue().get(),  # blocks on an empty queue
    lambda: threading.Event().wait(),  # waits on an event no one sets
    lambda: time.sleep(1e9),
    lambda: [None for _ in itertools.count()],  # loops for ever in Python
], ids=["queue_get", "event_wait", "sleep", "endless_loop"])
def test_a_body_that_never_finishes_is_stopped_at_the_time_limit(body):
    start = time.monotonic()
    got = run_apart(body, 0.5)
    assert got.status == apart.TIMED_OUT
    assert got.text == "the candidate did not finish in 0.5 s"
    assert time.monotonic() - start < 10


def _exit_3():
    os._exit(3)


def _sigkill_self():
    os.kill(os.getpid(), signal.SIGKILL)


def _segv():
    os.kill(os.getpid(), signal.SIGSEGV)


def _raise(e):
    def body():
        raise e
    return body


@pytest.mark.parametrize("body,status,text", [
    (_exit_3, apart.EXITED, "your code ended its process with os._exit(3) under this fix"),
    (_raise(SystemExit(5)), apart.RAISED, "your code called sys.exit(5) under this fix"),
    (_raise(KeyboardInterrupt()), apart.RAISED, "your code raised KeyboardInterrupt under this fix"),
    (_sigkill_self, apart.KILLED, "the candidate's process was killed by SIGKILL"),
    (_segv, apart.KILLED, "the candidate's process was killed by SIGSEGV"),
    (_raise(ValueError("bad shape\nmore")), apart.RAISED, "raised ValueError: bad shape"),
], ids=["os_exit", "sys_exit", "keyboard_interrupt", "sigkill", "sigsegv", "value_error"])
def test_an_ending_or_raising_body_ends_the_child_only(body, status, text):
    got = run_apart(body, LIMIT)
    assert (got.status, got.text) == (status, text)
    assert run_apart(lambda: "still here", LIMIT).value == "still here"  # this process goes on


def test_the_users_objects_in_this_process_are_untouched():
    created: list = []
    counter = {"n": 0}
    it = iter(range(100))
    next(it)

    def body():
        created.append("v")
        counter["n"] += 1
        return next(it), len(created)

    got = run_apart(body, LIMIT)
    assert got.value == (1, 1)  # the child saw the user's objects as they were
    assert created == [] and counter == {"n": 0} and next(it) == 1


def test_a_file_opened_for_writing_is_written_apart_and_a_sibling_read_sees_the_copy(tmp_path):
    log = tmp_path / "traces.log"
    log.write_text("trace 1\ntrace 2\n")
    fresh = tmp_path / "new.txt"

    def body():
        with open(log, "a") as f:
            f.write("trace 3\n")
        fresh.write_text("made by the body")
        return open(log).read().count("trace")

    got = run_apart(body, LIMIT)
    assert got.value == 3  # the body read back its own write
    assert log.read_text().count("trace") == 2 and not fresh.exists()
    assert set(got.files_kept_apart) == {str(log), str(fresh)}


def test_a_result_that_does_not_pickle_is_lost_with_its_reason():
    got = run_apart(lambda: threading.Lock(), LIMIT)
    assert got.status == apart.LOST and "could not be sent back" in got.text


def test_ctrl_c_in_this_process_kills_the_child_and_is_raised(tmp_path):
    marker = tmp_path / "child_pid"

    def body():
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT)  # os.open: not kept apart, so this process reads it
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(1e9)

    def press_ctrl_c():
        while not marker.exists() or not marker.read_text():
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_apart(body, 30)
    start = time.monotonic()
    pid = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped before the KeyboardInterrupt reached this test
    assert time.monotonic() - start < 1


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "soon", "abc", "1e400", "1e-300", "0x10", "86401"])
def test_a_junk_time_limit_is_one_usage_error(monkeypatch, raw):
    monkeypatch.setenv("TFLAB_FIX_TIMEOUT_S", raw)
    with pytest.raises(UsageError, match="TFLAB_FIX_TIMEOUT_S"):
        apart.default_timeout_s()


def test_the_time_limit_setting_is_read(monkeypatch):
    monkeypatch.setenv("TFLAB_FIX_TIMEOUT_S", "0.5")
    assert apart.default_timeout_s() == 0.5
    assert run_apart(lambda: time.sleep(1e9)).text == "the candidate did not finish in 0.5 s"


def test_tf_runs_in_the_child_and_its_variable_writes_stay_there():
    """After fork TF's thread pools have no threads: the child's fresh eager context must run
    a tf.function traced before the fork (and one nested in it), a new one, an op big enough
    to be split over the intra-op pool, and a Keras layer; a variable made before the fork and
    assigned there reads back the new value there, and this process's is as it was."""
    import tensorflow as tf

    @tf.function
    def f(a):
        return tf.reduce_sum(tf.matmul(a, a))

    @tf.function
    def nested(a):
        return f(a) + 1.0

    big = tf.fill([256, 256], 0.5)  # each sum is 2**22: the nested +1 stays exact in float32
    v = tf.Variable(tf.ones([3]))
    layer = tf.keras.layers.Dense(2, kernel_initializer="ones")
    layer(tf.ones([1, 3]))
    expected = float(f(big))
    nested(big)

    def body():
        v.assign([5.0, 5.0, 5.0])  # TF's assign would make a new variable in the child's context, unseen
        return (float(f(big)), float(nested(big)), float(tf.function(lambda a: tf.reduce_sum(a * v))(tf.ones([3]))),
                float(tf.reduce_sum(tf.matmul(big, big))), layer(tf.ones([1, 3])).numpy().tolist())

    got = run_apart(body, 60)
    assert got.status == apart.RETURNED, got.text
    assert got.value == (expected, expected + 1.0, 15.0, expected, [[3.0, 3.0]])
    assert v.numpy().tolist() == [1.0, 1.0, 1.0]


def test_assigns_to_variables_made_before_the_fork_take_effect_in_the_child():
    import tensorflow as tf

    s = tf.Variable(1.0)
    flags = tf.Variable([True, False])
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    made_here = [tf.Variable(0.0)]

    def body():
        tf.function(lambda: [s.assign(7.0), None][1])()  # in a traced function
        flags.assign([False, True])
        model.set_weights([w * 0 + 2 for w in model.get_weights()])
        made_here.append(tf.Variable([1.0, 2.0]))  # a variable made in the child is initialized by the same op
        made_here[-1].assign([3.0, 4.0])
        return (float(s.numpy()), flags.numpy().tolist(), float(sum(w.sum() for w in model.get_weights())),
                made_here[-1].numpy().tolist())

    got = run_apart(body, 60)
    assert got.value == (7.0, [False, True], 16.0, [3.0, 4.0]), got.text
    assert float(s.numpy()) == 1.0 and flags.numpy().tolist() == [True, False] and len(made_here) == 1


class _ExitArgument:
    """A ``sys.exit`` argument whose unpickling would write a file: it must never be unpickled here."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))

    def __repr__(self):
        return "<exit argument>"


@pytest.mark.parametrize("arg,shown", [("obj", "<exit argument>"), ([1, 2], "[1, 2]"), (None, "None"), ("bye", "'bye'")],
                         ids=["object_with_reduce", "list", "none", "str"])
def test_a_sys_exit_argument_comes_back_as_its_repr_never_as_the_object(tmp_path, arg, shown):
    planted = tmp_path / "written_by_unpickling"
    value = _ExitArgument(str(planted)) if arg == "obj" else arg

    def body():
        sys.exit(value)

    got = run_apart(body, LIMIT)
    assert got.text == f"your code called sys.exit({shown}) under this fix"
    assert not planted.exists()


def _gone(pid):
    """True when ``pid`` no longer runs (ended, or a zombie waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_process_the_body_starts_is_ended_with_the_check(tmp_path):
    import subprocess

    def popen_sleep():
        return subprocess.Popen(["sleep", "25"]).pid

    def fork_sleep():
        pid = os.fork()
        if pid == 0:
            time.sleep(25)  # holds the result pipe; never answers
            os._exit(0)
        return pid

    for body in (popen_sleep, fork_sleep):
        start = time.monotonic()
        got = run_apart(body, LIMIT)
        assert got.status == apart.RETURNED and time.monotonic() - start < LIMIT
        deadline = time.monotonic() + 2
        while not _gone(got.value) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gone(got.value)


def test_a_fork_that_does_not_exit_leaves_the_childs_own_result():
    def body():
        os.fork()  # both processes return here; only the child tflab made answers
        return "one answer"

    got = run_apart(body, LIMIT)
    assert (got.status, got.value) == (apart.RETURNED, "one answer")


def test_a_body_that_signals_its_process_group_ends_its_check_only():
    got = run_apart(lambda: os.killpg(0, signal.SIGTERM), LIMIT)
    assert got.text == "the candidate's process was killed by SIGTERM"
    assert run_apart(lambda: "still here", LIMIT).value == "still here"


@pytest.mark.parametrize("body", [lambda: os.closerange(3, 4096), lambda: [os.closerange(3, 4096), os.open(os.devnull, os.O_WRONLY)]],
                         ids=["closed", "closed_and_reopened"])
def test_a_body_that_closes_tflabs_pipe_is_not_blamed_for_an_exit(body):
    got = run_apart(body, LIMIT)
    assert (got.status, got.text) == (apart.LOST, "the check's result could not be sent back (the candidate "
                                                  "closed tflab's pipe)")
    assert run_apart(lambda: os._exit(70), LIMIT).text == "your code ended its process with os._exit(70) under this fix"
