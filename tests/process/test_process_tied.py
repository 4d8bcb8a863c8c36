"""The tour's second process and its background jobs' processes die with the tour.

A stand-in tour (a fresh Python process) starts the real children the tour
starts: the second process (`tflab._tour.lane.Lane`, from the main thread),
step 10's loss-scaling child and step 11's distribute lab child (each from a
background job's thread, `tflab._tour.background.start_jobs`). It is
SIGKILLed, which no cleanup can catch; every child must be gone within
seconds, not at its own deadline (300 s to 30 min). The kill comes at two
moments: while every child is still in Python's start-up, before its own
watch on the parent runs (a ``sitecustomize`` holds each child there for 60 s,
so the moment is certain, not a race), and once each watches its parent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
MODULES = ("tflab._tour.lane", "tflab._tour.precision_child", "tflab.distribute.child")

TOUR = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from tflab._tour.background import start_jobs
    from tflab._tour.lane import Lane

    lane = Lane(["s06_modes"], Path(sys.argv[1]), None, None)
    jobs = start_jobs(["s10_precision", "s11_distribute"])
    print("started", flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _children_by_module(parent: int) -> dict[str, int]:
    """The pids whose parent is ``parent``, by the tflab module they run (``python -m MODULE``)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[-1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent:
            for m in MODULES:
                if m in argv:
                    found[m] = int(name)
    return found


def _threads(pid: int) -> int:
    """Threads of ``pid``: a second one is its parent watch (each child starts it before TF loads)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


# Holds the tour's children in Python's start-up (before their first line) for 60 s.
SLOW_START = textwrap.dedent("""
    import sys, time
    if any(m in sys.orig_argv for m in %r):
        time.sleep(60)
""" % (MODULES,))


@pytest.mark.parametrize("moment", ["at-start-up", "once-working"])
def test_the_tours_children_die_with_a_sigkilled_tour(tmp_path, moment):
    env = dict(ENV)
    if moment == "at-start-up":
        (tmp_path / "site").mkdir()
        (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_START)
        env["PYTHONPATH"] = f"{tmp_path / 'site'}{os.pathsep}{REPO}"
    t0 = time.monotonic()
    tour = subprocess.Popen([sys.executable, "-c", TOUR, str(tmp_path / "out")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert tour.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        kids: dict[str, int] = {}
        while time.monotonic() < deadline:
            kids = _children_by_module(tour.pid)
            if len(kids) == len(MODULES) and (moment == "at-start-up" or all(
                    _threads(p) >= 2 for p in kids.values())):
                break
            time.sleep(0.01)
        assert sorted(kids) == sorted(MODULES), kids
        if moment == "at-start-up":
            assert all(_threads(p) == 1 for p in kids.values()), {m: _threads(p) for m, p in kids.items()}  # none has run a line of its own yet
        else:
            assert all(_threads(p) >= 2 for p in kids.values())  # each watches its parent
    finally:
        tour.kill()
        tour.wait()
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in kids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = {m: p for m, p in kids.items() if _alive(p)}
    for p in left.values():  # do not leave them to the next test
        os.kill(p, signal.SIGKILL)
    assert left == {}, f"children still running 15 s after the tour was SIGKILLed: {left}"


def test_tie_names_the_parent_and_asks_for_the_kernels_signal_only_where_a_thread_waits():
    """PDEATHSIG follows the forking thread: from a thread that returns before its child it would kill
    the child early, so it is asked for from the main thread or a thread that says it waits."""
    import threading

    from tflab.process.group import pdeathsig_preexec, tie

    main = tie({"env": {"A": "1"}})
    assert main["env"] == {"A": "1", "TFLAB_PARENT_PID": str(os.getpid())}
    assert main["preexec_fn"] is pdeathsig_preexec
    seen = {}
    worker = threading.Thread(target=lambda: seen.update(bare=tie({}), waits=tie({}, waits=True)))
    worker.start()
    worker.join()
    assert "preexec_fn" not in seen["bare"] and seen["bare"]["env"]["TFLAB_PARENT_PID"] == str(os.getpid())
    assert seen["waits"]["preexec_fn"] is pdeathsig_preexec


@pytest.mark.parametrize("parent, deadline, code", [("1", "60", -signal.SIGKILL), ("self", "0.5", 124)],
                         ids=["parent-already-gone", "own-parent-until-the-deadline"])
def test_a_tied_child_ends_at_once_when_its_parent_is_gone_and_at_its_deadline(parent, deadline, code):
    """$TFLAB_PARENT_PID names another pid than the child's parent (its parent died before the child's
    first line, so it was re-parented): it ends at once. Named right, it lives to its deadline."""
    env = {**ENV, "TFLAB_DEADLINE_S": deadline,
           "TFLAB_PARENT_PID": str(os.getpid()) if parent == "self" else parent}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", "from tflab.process.watch import tie_to_parent\n"
                        "tie_to_parent(600.0)\nimport time\ntime.sleep(60)\n"], env=env, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == code
    assert took < 30  # not the 60 s sleep (a loose bound, not a speed goal)
