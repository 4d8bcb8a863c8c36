"""Distribute's children wait in the one supervisor (`tflab.process.group.ChildGroup`).

`tflab.distribute.processes.run_children` had its own wait loop and its own
SIGTERM handler (without the sticky flag). Now the group bounds the wait, the
sticky handler of `tflab.errors` turns SIGTERM into `Terminated` (exit 143),
and the group stops and reaps every child on every exit path. The children
here are plain ``sleep`` processes (no TensorFlow): what is measured is the
supervision, which is the same for the lab and the workers.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from tflab.distribute import WorkerError
from tflab.distribute.processes import run_children

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_hanging_worker_is_killed_at_the_timeout_and_the_error_names_it():
    pids: list[int] = []
    quick = [sys.executable, "-c", "import os; from tflab.process.channel import send_result; "
             "send_result(os.environ['TFLAB_REPORT'], data={})"]
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as e:
        run_children([("worker 0", quick, {}), ("worker 1", SLEEP, {})], timeout=2, on_start=pids.extend)
    took = time.monotonic() - t0
    msg = str(e.value)
    # Worker 0 finished; only the hanging worker is named, with its pid, in one line.
    assert msg.startswith(f"worker 1 (pid {pids[1]}) still running after 2 s; stopped"), msg
    assert "worker 0" not in msg and "\n" not in msg
    assert not any(_alive(p) for p in pids)
    # Killed at the timeout, not waited for: the worker sleeps 600 s (a loose bound, not a speed goal).
    assert 2 <= took < 60, took


def test_a_failing_worker_stops_the_others_and_is_named_with_its_last_line():
    pids: list[int] = []
    fail = [sys.executable, "-c", "import sys; print('boom: bad TF_CONFIG', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(WorkerError) as e:
        run_children([("worker 0", SLEEP, {}), ("worker 1", fail, {})], timeout=60, on_start=pids.extend)
    assert str(e.value) == (f"worker 1 (pid {pids[1]}) exited with status 3: boom: bad TF_CONFIG; "
                            f"stopped worker 0")
    assert not any(_alive(p) for p in pids)


_RUNNER = ("import sys; from tflab.distribute.processes import run_children; "
           f"run_children([('worker 0', {SLEEP!r}, {{}}), ('worker 1', {SLEEP!r}, {{}})], timeout=120, "
           "on_start=lambda p: print(*p, flush=True))")


def _start_runner():
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready:
        proc.kill()
        proc.wait(5)
        pytest.fail("the runner printed no worker pids within 60 s")
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    return proc, pids


# An uncaught KeyboardInterrupt ends Python with SIGINT's own status (-2) since 3.8.
@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, None),
                                             (signal.SIGINT, -signal.SIGINT, "KeyboardInterrupt")],
                         ids=["sigterm", "sigint"])
def test_a_signal_to_the_parent_leaves_no_worker_behind(sig, code, word):
    """SIGTERM: the sticky handler raises Terminated (exit 143, no traceback); Ctrl-C: KeyboardInterrupt.
    Either way the group stops and reaps both workers before the parent exits."""
    proc, pids = _start_runner()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-2000:]
    if word is None:
        assert "Traceback" not in err, err[-2000:]
    else:
        assert word in err
    assert [p for p in pids if _alive(p)] == []


def test_the_group_restores_the_sigterm_handler_and_forgets_its_signal():
    from tflab.process.group import ChildGroup
    from tflab.errors import Terminated, raise_if_terminated, sigterm_handler_installed

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), ChildGroup() as group:
        assert sigterm_handler_installed()
        group.start(SLEEP)
        os.kill(os.getpid(), signal.SIGTERM)
        group.wait(30)
    assert signal.getsignal(signal.SIGTERM) is before and not sigterm_handler_installed()
    assert group.procs == []  # stopped and reaped
    raise_if_terminated()  # the group's SIGTERM is spent: later work in this process is not stopped
