"""Processes and temporary outputs that outlived a run, the
report's stdout, and exit codes; each break with its reproducer.

The supervisor (`tflab.process.supervisor.run_child`) is driven with small Python children that open the
same `ChildChannel` the verbs' child opens, so nothing here loads TensorFlow and every wait is
bounded by what the child writes (its stderr line, a file), not by a sleep.
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


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _supervise(child_code: str, tmp_path: Path, reap: bool = True, stdout: str = "",
               timeout: float = 60) -> tuple[int, str, str]:
    """Runs ``child_code`` as a supervised child (as `tflab.cli.supervise` runs the verb), in a fresh
    process that is the supervisor (so ``reap_orphans`` kills only what that child left).

    Returns:
        (the supervisor's exit code, its stdout, its stderr); the supervisor exits with
        `describe_end`'s code and prints its line.
    """
    child = tmp_path / "child.py"
    child.write_text("from tflab.process.supervisor import ChildChannel\nchannel = ChildChannel.open()\n"
                     "channel.ready()\n" + textwrap.dedent(child_code))
    sup = textwrap.dedent(f"""
        import sys
        from tflab.process import supervisor as _subprocess
        import os
        target = {stdout!r}
        if target == "closed-pipe":  # `tflab … | head` after head exited
            r, fd = os.pipe()
            os.close(r)
        else:
            fd = 1 if target == "" else os.open(target, os.O_WRONLY)
        end = _subprocess.run_child([sys.executable, {str(child)!r}], reap_orphans={reap}, stdout_fd=fd)
        code, line = _subprocess.describe_end(end)
        if end.temp_removed:
            print("removed", *end.temp_removed, file=sys.stderr)
        if line:
            print(line, file=sys.stderr)
        sys.exit(code)
    """)
    p = subprocess.run([sys.executable, "-c", sup], env=ENV, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL, cwd=tmp_path)
    return p.returncode, p.stdout, p.stderr


# ------------------------------------------------------------------ what the user's code forked

def test_processes_forked_by_user_code_die_with_the_run(tmp_path):
    """`os.fork()` in a traced script, or `subprocess.Popen(["sleep", "1235"])`, left a process
    under init for ever: the child's group was killed only on signals. Now the group is killed at
    every end, and what left the group (setsid, a double fork) is re-parented to the supervisor
    (a child subreaper) and killed there."""
    code, out, err = _supervise(f"""
        import os, subprocess, sys
        same = subprocess.Popen(["sleep", "1235"])                       # the child's group
        away = subprocess.Popen(["sleep", "1236"], start_new_session=True)  # left the group
        pid = os.fork()
        if pid == 0:                                                   # a forked copy, then orphaned
            os.setsid()
            if os.fork() == 0:
                open({str(tmp_path / 'grandchild')!r}, "w").write(str(os.getpid()))
                import time; time.sleep(1237)
            os._exit(0)
        os.waitpid(pid, 0)
        while not os.path.exists({str(tmp_path / 'grandchild')!r}):
            pass
        open({str(tmp_path / 'pids')!r}, "w").write(f"{{same.pid}} {{away.pid}}")
        sys.stdout.write("report\\n")
        channel.finish(0, "inspect")
    """, tmp_path)
    assert code == 0 and out == "report\n", err
    pids = [int(x) for x in (tmp_path / "pids").read_text().split()]
    pids.append(int((tmp_path / "grandchild").read_text()))
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)], pids


# ------------------------------------------------------------------ the supervisor cleans up

def test_supervisor_removes_its_sigkilled_childs_temp_output(tmp_path):
    """The export child SIGKILLed (the OOM case) left o2/.e3.tmp-* though the supervisor lived."""
    code, out, err = _supervise(f"""
        import os, signal
        from tflab._io.paths import output_path, owned_temp_dir
        tmp = output_path({str(tmp_path / 'o2' / 'e3')!r}, "--out", folder=True, exclusive=True).temp_dir()
        (tmp / "saved_model").mkdir()
        lane = owned_temp_dir("tflab_tour_lane_", dir={str(tmp_path)!r})
        os.kill(os.getpid(), signal.SIGKILL)
    """, tmp_path)
    assert code == 70 and "SIGKILL" in err, err
    assert "removed" in err
    assert os.listdir(tmp_path / "o2") == []  # the .e3.tmp-* folder is gone
    assert not [n for n in os.listdir(tmp_path) if n.startswith("tflab_tour_lane_")]


# ------------------------------------------------------------------ stdout

def test_full_disk_on_stdout_is_named_not_a_closed_pipe(tmp_path):
    """`tflab env --json > /dev/full` exited 141 with no message, as if the reader had gone."""
    code, _, err = _supervise("""
        import sys
        sys.stdout.write("x" * 100000 + "\\n")
        channel.finish(0, "env")
    """, tmp_path, stdout="/dev/full")
    assert code == 2 and "the report could not be written to stdout: No space left on device" in err, err


def test_a_reader_that_went_away_is_still_quiet_141(tmp_path):
    """Healthy case for the fix: `tflab … | head` stays exit 141 with nothing on stderr."""
    code, _, err = _supervise("""
        import sys
        sys.stdout.write("x" * 100000 + "\\n")
        channel.finish(0, "env")
    """, tmp_path, stdout="closed-pipe")
    assert code == 141 and "could not be written" not in err, err


def test_dot_to_dev_stdout_lands_on_stdout(tmp_path):
    """`--dot /dev/stdout` landed on stderr: the child's fd 1 is the supervisor's stderr pipe."""
    code, out, err = _supervise("""
        import sys
        from tflab._io.paths import output_path
        output_path("/dev/stdout", "--dot").write("digraph f {}\\n")
        sys.stdout.write('{"json": 1}\\n')
        channel.finish(0, "inspect")
    """, tmp_path)
    assert code == 0 and out == 'digraph f {}\n{"json": 1}\n' and "digraph" not in err, (out, err)


# ------------------------------------------------------------------ a memory limit too small for TF

def test_rlimit_as_too_small_for_tensorflow_is_named(tmp_path):
    """`prlimit --as=1000000000 tflab env` printed TF's import traceback; the limit unnamed."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1_000_000_000, resource.RLIM_INFINITY))

    # Its own TMPDIR: a folder another run left in the shared one would add a "removed" line.
    p = subprocess.run([sys.executable, "-m", "tflab", "env"], env={**ENV, "TMPDIR": str(tmp_path)},
                       capture_output=True, text=True, timeout=60, preexec_fn=limit, cwd=tmp_path)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "RLIMIT_AS 0.93 GiB is too small for TensorFlow (needs about 1.4 GiB" in lines[0]
    assert "Traceback" not in p.stderr


def test_the_floor_is_below_what_tf_needs():
    """The refusal floor must never refuse a limit TF loads under: measured VmPeak of TF's import."""
    from tflab.process import memory as _memory

    assert _memory.TF_LOAD_FLOOR < 1_434_096 * 1024  # VmPeak after `import tensorflow` on TF 2.21
    assert _memory.tf_load_refusal() is None  # this machine: no such limit


# ------------------------------------------------------------------ the ULP step's copies

def test_ulp_step_copies_bound_the_measured_peak():
    """Compare's estimate left out `ulp_distance`'s int64/float64 copies, then numpy's
    MemoryError. The estimate must cover the measured peak (tracemalloc sees numpy's buffers), and
    stay close to it (a count of 5, the old estimate, fails the first assert)."""
    import tracemalloc

    import numpy as np

    from tflab.process.memory import ulp_step_copies
    from tflab._graph.numeric import ulp_distance

    for dtype in (np.float32, np.float64, np.float16):
        a = np.random.default_rng(0).standard_normal(200_000).astype(dtype)
        b = np.nextafter(a, np.inf).astype(dtype)
        tracemalloc.start()
        ulp_distance(a, b)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        copies = ulp_step_copies(a.itemsize)
        assert peak <= copies * a.nbytes * 1.05, (dtype, peak / a.nbytes, copies)
        assert peak >= (copies - 4) * a.nbytes, (dtype, peak / a.nbytes, copies)


# ------------------------------------------------------------------ children tied to parents

def test_start_tied_child_dies_with_its_parent(tmp_path):
    """The tour's second process, its background jobs and the suite's full tour start
    through `start_tied` (PR_SET_PDEATHSIG): SIGKILL of the parent leaves no orphan."""
    flag = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from tflab.process.group import start_tied
        p = start_tied([sys.executable, "-c", "import os, time; open({str(flag)!r}, 'w').write(str(os.getpid())); time.sleep(600)"])
        time.sleep(600)
    """)], env=ENV)
    deadline = time.monotonic() + 30
    while not (flag.exists() and flag.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(flag.read_text())
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_full_tour_fixture_goes_with_pytest_on_sigterm(tmp_path):
    """`kill <pytest pid>` left the suite's full tour under init with its folder. The
    fixture's tour is replaced by a stand-in that writes its pid and sleeps; SIGTERM of pytest must
    end it and remove its folder."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import os, sys, tempfile
        sys.path.insert(0, {str(REPO)!r})
        import tests.conftest as c
        from tflab.process.group import start_tied
        def fake_start():
            if not c._FULL_TOUR:
                root = tempfile.mkdtemp(prefix="tflab-test-full-tour-")
                proc = start_tied([sys.executable, "-c", "import os,time,sys; open(sys.argv[1],'w').write(str(os.getpid())); time.sleep(600)",
                                   os.path.join(root, "pid")])
                c._FULL_TOUR.update(proc=proc, root=root)
                c._stop_tour_on_sigterm()
            return c._FULL_TOUR
        def pytest_collection_finish(session):
            t = fake_start()
            open({str(tmp_path / 'root')!r}, "w").write(t["root"])
    """))
    (tmp_path / "test_wait.py").write_text("def test_wait():\n    import time\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_wait.py"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root_file = tmp_path / "root"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (root_file.exists() and root_file.read_text()
                                               and (Path(root_file.read_text()) / "pid").exists()
                                               and (Path(root_file.read_text()) / "pid").read_text()):
        time.sleep(0.05)
    root = Path(root_file.read_text())
    tour = int((root / "pid").read_text())
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while _alive(tour) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(tour) and not root.exists()


def test_a_tools_own_workers_die_with_tflab(tmp_path):
    """SIGKILL of `tflab build-op` left g++'s cc1plus compiling under init: the parent-death
    signal is per process and cleared in a fork. Here the "compiler" is a shell that forks a
    worker (as g++ forks cc1plus); tflab is SIGKILLed; the guard must take the worker down."""
    pidfile = tmp_path / "worker.pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, time
        from tflab.process.group import guarded
        subprocess.Popen(guarded(["sh", "-c", "sleep 1238 & echo $! > {pidfile}; wait"]))
        time.sleep(600)
    """)], env=ENV)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pidfile.read_text())
    assert _alive(worker)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker)


def test_guarded_tool_status_and_output(tmp_path):
    """Healthy case: the guard passes the tool's output and exit status through."""
    from tflab.process.group import guarded

    p = subprocess.run(guarded(["sh", "-c", "echo compiled; exit 3"]), env=ENV, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 3 and p.stdout == "compiled\n"


def test_distribute_names_the_users_os_exit_not_a_cuda_log_line():
    """`def exiting(x): os._exit(5)` gave "worker 0 … exited with status 5: E0000 … failed call
    to cuInit …": TF's log line quoted as the cause."""
    from tflab.distribute.processes import WorkerError, run_children

    code = ("import sys; from tflab.distribute.child import name_os_exit; name_os_exit(); "
            "sys.stderr.write('E0000 00:00:1764 123 cuda_platform.cc:52] failed call to cuInit: INTERNAL\\n'); "
            "import os; os._exit(5)")
    with pytest.raises(WorkerError) as info:
        run_children([("worker 0", [sys.executable, "-c", code], {})], timeout=60)
    text = str(info.value)
    assert "your code ended the process with os._exit(5)" in text and "cuInit" not in text, text
