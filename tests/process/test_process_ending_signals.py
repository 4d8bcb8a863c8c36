"""SIGHUP, SIGQUIT and SIGUSR1 end a run as SIGTERM does; junk TFLAB_* values and unusable folders are one line.

The signal tests run the supervisor (`tflab.process.supervisor.run_child`) on a small child that
opens the channel and cleans up on SIGTERM like every verb, without TensorFlow (0.5 s each); one
runs the whole ``tflab inspect`` to show the verb's temporary folder goes too.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tflab.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tflab.errors import Terminated, install_sigterm_handler
    from tflab.process.supervisor import ChildChannel
    ch = ChildChannel.open()
    install_sigterm_handler()
    ch.ready()
    tmp = Path(sys.argv[1]) / "scratch"
    tmp.mkdir()
    try:  # "started" inside: the signal can come while touch() still runs
        (Path(sys.argv[1]) / "started").touch()
        time.sleep(30)
        code = 0
    except Terminated:
        import shutil
        shutil.rmtree(tmp)
        print("tflab x: terminated", file=sys.stderr)
        code = 143
    sys.exit(ch.finish(code, "x"))
""")
SUPERVISOR = textwrap.dedent("""
    import sys
    from tflab.process.supervisor import describe_end, run_child
    end = run_child([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    code, line = describe_end(end)
    if line:
        print("tflab x:", line, file=sys.stderr)
    sys.exit(code)
""")


def _supervised(tmp_path, sig):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    def default_dispositions():  # a shell's: an ignored signal is inherited across exec, and tflab keeps
        for s in (signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGTERM):  # it ignored (nohup)
            signal.signal(s, signal.SIG_DFL)

    p = subprocess.Popen([sys.executable, "-c", SUPERVISOR, CHILD, str(tmp_path)], env=env, text=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=default_dispositions)
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.02)
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    return p.returncode, err.splitlines()


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1], ids=["HUP", "QUIT", "USR1"])
def test_hangup_and_stray_signals_end_the_run_like_sigterm(tmp_path, sig):
    """SIGHUP/SIGQUIT/SIGUSR1 killed tflab by their default action: no line, temp folders left."""
    code, lines = _supervised(tmp_path, sig)
    assert code == 128 + sig and lines == ["tflab x: terminated"], (code, lines)
    assert not (tmp_path / "scratch").exists()  # the child cleaned up: it got SIGTERM, not the raw signal


def test_sigterm_twin_is_unchanged(tmp_path):
    code, lines = _supervised(tmp_path, signal.SIGTERM)
    assert code == 143 and lines == ["tflab x: terminated"] and not (tmp_path / "scratch").exists()


def test_in_process_hangup_raises_terminated_like_sigterm():
    """Without the supervisor (TFLAB_IN_PROCESS=1, a terminal's hang-up reaching the child) the verb's
    process maps the three signals to SIGTERM's handler; an ignored one (nohup) stays ignored."""
    code = textwrap.dedent("""
        import os, signal
        from tflab.cli import _end_like_sigterm
        from tflab.errors import Terminated, install_sigterm_handler
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)  # nohup-style: the caller asked not to be stopped
        install_sigterm_handler()
        _end_like_sigterm()
        os.kill(os.getpid(), signal.SIGQUIT)  # ignored: nothing happens
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            print("not raised")
        except Terminated as e:
            print("terminated", e.code)
    """)
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(REPO)),
                       capture_output=True, text=True, timeout=30)
    assert p.stdout.strip() == "terminated 143", (p.stdout, p.stderr)


# ------------------------------------------------------------------ TFLAB_* values and folders

@pytest.mark.parametrize("name, value", [("TFLAB_IN_PROCESS", "yes"), ("TFLAB_IN_PROCESS", "true"),
                                         ("TFLAB_TOUR_LANE", "banana"), ("TFLAB_CUSTOM_OPS_CUDA", "false")])
def test_junk_switch_value_is_refused_naming_the_accepted_values(name, value):
    """yes/true read as 0, banana as the default 1, false as 'not 0' (CUDA built)."""
    from tflab.process.settings import check_environment, get

    with pytest.raises(UsageError, match=rf"{name}='{value}' is not a value it takes: give 0 or 1"):
        check_environment({name: value})
    with pytest.raises(UsageError, match="give 0 or 1"):
        get(name, {name: value})


def test_switch_healthy_values_pass():
    from tflab.process.settings import check_environment, get

    env = {"TFLAB_IN_PROCESS": "0", "TFLAB_TOUR_LANE": "1", "TFLAB_CUSTOM_OPS_CUDA": "0", "TFLAB_REPORT": "any"}
    check_environment(env)
    assert get("TFLAB_TOUR_LANE", env) == "1" and get("TFLAB_TOUR_LANE", {}) == "1"


@pytest.mark.parametrize("name", ["TFLAB_CUSTOM_OPS_BUILD_DIR", "TFLAB_SYSTEM_TMPDIR"])
def test_unusable_tflab_folder_is_refused(name, tmp_path):
    """TFLAB_CUSTOM_OPS_BUILD_DIR=/proc was a traceback (os.access says yes to root); TFLAB_SYSTEM_TMPDIR=/proc too."""
    from tflab.process.settings import check_environment

    with pytest.raises(UsageError, match=rf"cannot use /proc as {name}: cannot create a folder in /proc"):
        check_environment({name: "/proc"})
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UsageError, match="is not a folder"):
        check_environment({name: str(tmp_path / "afile" / "sub")})
    check_environment({name: str(tmp_path / "new" / "cache")})  # healthy: a folder that can be created


def _cli(*argv, preexec=None, env=None):
    e = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    e.pop("TFLAB_IN_PROCESS", None)
    return subprocess.run([sys.executable, "-m", "tflab", *argv], env=e, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, preexec_fn=preexec)


def _no_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.parametrize("argv", [["env"], ["inspect", "nothere.py:f", "--arg", "x=float32[2]"]], ids=["env", "inspect"])
def test_no_usable_temporary_folder_is_one_line_naming_the_limit(argv):
    """`ulimit -f 0` printed tempfile's 16-line traceback (exit 1) for every verb."""
    p = _cli(*argv, preexec=_no_file_size)
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr)
    assert "no usable temporary folder" in lines[0] and "ulimit -f" in lines[0] and "Traceback" not in p.stderr


def test_temp_folder_healthy_twin():
    from tflab._io.paths import check_temp_dir

    assert os.path.isdir(check_temp_dir())


def test_junk_switch_from_the_cli_is_refused_before_the_verb():
    p = _cli("env", env={"TFLAB_TOUR_LANE": "banana"})
    assert p.returncode == 2 and p.stderr.startswith("tflab env: error: TFLAB_TOUR_LANE='banana'") and not p.stdout


# ------------------------------------------------------------------ a memory limit just above TF's floor

@pytest.mark.parametrize("rc, tail", [
    (127, "Fatal glibc error: cannot allocate memory for thread-local data: ABORT"),
    (-signal.SIGABRT, "terminate called after throwing an instance of 'std::bad_alloc'"),
    (1, "MemoryError"),
    (1, "F0000 env.cc:84] Check failed: ret == 0 (11 vs. 0) Thread tf_async_compiler_threads creation via "
        "pthread_create() failed."),
], ids=["glibc-127", "bad_alloc-abort", "MemoryError", "tf-thread-fatal"])
def test_running_out_of_memory_under_a_limit_names_the_limit(rc, tail):
    """RLIMIT_AS 2.2 GB let TF load, then glibc aborted (status 127): "the process ended with status
    127", the limit unnamed."""
    from tflab.process.supervisor import ChildEnd, describe_end

    code, line = describe_end(ChildEnd(returncode=rc, status=[], stderr_tail=f"...\n{tail}\n"), "RLIMIT_AS 2.0 GiB")
    assert code == 2 and "ran out of memory under the limit in force (RLIMIT_AS 2.0 GiB)" in line, line
    assert "prlimit --as" in line


def test_memory_limit_healthy_twins():
    """No limit set, or a crash whose output shows no allocation failure: the crash line, as before."""
    from tflab.process.supervisor import CRASH_EXIT, ChildEnd, describe_end

    oom = ChildEnd(returncode=127, status=[], stderr_tail="cannot allocate memory for thread-local data\n")
    other = ChildEnd(returncode=127, status=[], stderr_tail="Segment table corrupt\n")
    assert describe_end(oom, "no cgroup or RLIMIT_AS limit; MemAvailable now 3.0 GiB")[0] == CRASH_EXIT
    assert describe_end(other, "RLIMIT_AS 2.0 GiB")[0] == CRASH_EXIT


# ------------------------------------------------------------------ setsid escapees

ESCAPER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from tflab.process.supervisor import ChildChannel
    ch = ChildChannel.open()
    ch.ready()
    p = subprocess.Popen(["setsid", "sleep", "4391"])      # a new session: not in the child's group
    time.sleep(0.3)
    (Path(sys.argv[1]) / "pid").write_text(str(p.pid))
    time.sleep(30)
""")
REAPING_SUPERVISOR = textwrap.dedent("""
    import sys
    from tflab.process.supervisor import run_child
    run_child([sys.executable, "-c", sys.argv[1], sys.argv[2]], reap_orphans=True)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP], ids=["KILL", "HUP"])
def test_a_setsid_process_of_the_run_is_ended_when_tflab_is_killed(tmp_path, sig):
    """a `setsid` process the user's code started survived SIGKILL (or SIGHUP) of tflab: only the
    subreaper killed such processes, and it was the process that died. Every process of the run carries
    the run's mark (TFLAB_RUN); the guard ends the marked ones when the supervisor dies. (No cgroup here:
    creating one needs a delegated cgroup v2 tree, which an unprivileged run rarely has.)"""
    bystander = subprocess.Popen(["sleep", "4391"])  # healthy twin: the same command, not of the run
    try:
        p = subprocess.Popen([sys.executable, "-c", REAPING_SUPERVISOR, ESCAPER, str(tmp_path)],
                             env=dict(os.environ, PYTHONPATH=str(REPO)), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        pid_file = tmp_path / "pid"
        # the escaper creates the file, then writes: wait for the whole number (a loaded machine read "")
        while not (pid_file.exists() and pid_file.read_text().strip().isdigit()) and time.monotonic() < deadline:
            time.sleep(0.05)
        escapee = int(pid_file.read_text())
        assert _alive(escapee)
        p.send_signal(sig)
        p.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(escapee) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(escapee), "the setsid process outlived tflab"
        assert _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


def test_a_file_setting_must_name_a_regular_file(tmp_path):
    """TFLAB_WARP_SOFTMAX_SO=/missing.so let build-op report a library the op would not load: refused in
    one line, as is a folder or a FIFO (judged by stat, never opened); an existing file passes."""
    from tflab.process.settings import check_environment

    name = "TFLAB_WARP_SOFTMAX_SO"
    with pytest.raises(UsageError, match=rf"^cannot use /missing.so as {name}: no such file; set {name} to an "
                                         r"existing file, or unset it$"):
        check_environment({name: "/missing.so"})
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    for bad in (tmp_path, fifo):
        with pytest.raises(UsageError, match="not a regular file"):
            check_environment({name: str(bad)})
    good = tmp_path / "lib.so"
    good.write_bytes(b"\x7fELF")
    check_environment({name: str(good)})


def test_a_sigkill_is_blamed_on_memory_only_where_memory_could_be_why():
    """A process that SIGKILLed itself was "most likely" killed by the out-of-memory killer with 22 GiB
    free and no limit. With no limit and a peak resident size under half the machine, the line says it
    was not for memory; a limit in force, or a peak near the machine's memory, keeps the OOM line."""
    from tflab.process.memory import machine_total
    from tflab.process.supervisor import CRASH_EXIT, ChildEnd, describe_end

    total = machine_total()
    no_limit = "no cgroup or RLIMIT_AS limit; MemAvailable now 20.0 GiB"
    small = ChildEnd(returncode=-signal.SIGKILL, status=["ready"], stderr_tail="", peak_rss=300 << 20)
    code, line = describe_end(small, no_limit)
    assert code == CRASH_EXIT and "not for memory" in line and "0.3 GiB" in line and "out-of-memory" not in line
    big = ChildEnd(returncode=-signal.SIGKILL, status=["ready"], stderr_tail="", peak_rss=int(total * 0.9))
    assert "most likely by the kernel's out-of-memory killer" in describe_end(big, no_limit)[1]
    assert "memory limit in force: RLIMIT_AS 2.0 GiB" in describe_end(small, "RLIMIT_AS 2.0 GiB")[1]
    unknown = ChildEnd(returncode=-signal.SIGKILL, status=["ready"], stderr_tail="")
    assert "out-of-memory killer" in describe_end(unknown, no_limit)[1]


def test_a_self_sigkill_through_the_supervisor_is_not_blamed_on_memory(tmp_path):
    """End to end: a supervised child that SIGKILLs itself; the parent measures its peak (RUSAGE_CHILDREN)."""
    from tflab.process.memory import limit_text
    from tflab.process.supervisor import describe_end, run_child

    end = run_child([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert end.returncode == -signal.SIGKILL and end.peak_rss and end.peak_rss > 1 << 20
    line = describe_end(end, limit_text())[1]
    if limit_text().startswith("no cgroup"):
        assert "not for memory" in line, line
    else:  # a limit in force where the suite runs: the limit is named
        assert "memory limit in force" in line, line
