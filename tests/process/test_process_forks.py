"""`tflab.process.forks`: workers forked from one server that imported the slow modules once.

The server here preloads only a small helper module (TensorFlow's import is what the export's
converter workers save; `tests/litert/test_tflite_roundtrip.py` runs the export through it). What
is checked is what a caller of a fresh process relies on: each child's own stdout, stderr and exit
status (a return value, an uncaught exception, a signal), the child watching the server, the
server ending when closed and leaving no process, and `ForkUnavailable` when it cannot start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server: Linux only")

HELPER = textwrap.dedent("""
    import os, sys, time

    def main(argv):
        print("argv", argv, "parent", os.getppid(), "tied to", os.environ.get("TFLAB_PARENT_PID"), flush=True)
        print("to stderr", file=sys.stderr)
        return int(argv[0])

    def raises(argv):
        raise ValueError("bad " + argv[0])

    def aborts(argv):
        os.abort()

    def argv_seen(argv):
        import __main__
        print(sys.argv, __main__.__name__ == __name__, flush=True)
        return 0

    def env_size(argv):
        return len(os.environ["FORKS_TEST_VAR"]) % 256

    def sleeps(argv):
        print("sleeping", flush=True)
        time.sleep(60)
""")


@pytest.fixture
def helper_env(tmp_path):
    (tmp_path / "forks_helper.py").write_text(HELPER)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))


def test_each_child_has_its_own_pipes_and_exit_status(helper_env):
    from tflab.process.forks import ForkServer

    server = ForkServer(["forks_helper"], helper_env)
    try:
        a = server.spawn("forks_helper", ["3", "x"])
        b = server.spawn("forks_helper:main", ["0"])
        assert a.pid != b.pid
        out_a, err_a = a.stdout.read(), a.stderr.read()
        assert a.wait(30) == 3 and b.wait(30) == 0 and a.returncode == 3
        # The child's parent is the server, and it watches the server ($TFLAB_PARENT_PID).
        assert out_a == f"argv ['3', 'x'] parent {server.proc.pid} tied to {server.proc.pid}\n"
        assert err_a == "to stderr\n" and b.stdout.read().startswith("argv ['0']")

        raised = server.spawn("forks_helper:raises", ["input"])
        assert raised.wait(30) == 1 and "ValueError: bad input" in raised.stderr.read()
        aborted = server.spawn("forks_helper:aborts", [])
        assert aborted.wait(30) == -signal.SIGABRT  # as Popen says a signal: negative
    finally:
        server.close()
    assert server.proc.returncode == 0


def test_a_child_still_running_is_polled_killed_and_the_server_then_ends(helper_env):
    from tflab.process.forks import ForkServer

    server = ForkServer(["forks_helper"], helper_env)
    child = server.spawn("forks_helper:sleeps", [])
    assert child.stdout.readline() == "sleeping\n"
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.2)
    child.kill()
    assert child.wait(30) == -signal.SIGKILL
    t = time.monotonic()
    server.close()
    assert server.proc.returncode == 0 and time.monotonic() - t < 5
    with pytest.raises(ProcessLookupError):
        os.kill(child.pid, 0)


def test_a_server_that_cannot_start_says_so_and_the_caller_starts_a_fresh_process(helper_env):
    from tflab.process.forks import ForkServer, ForkUnavailable

    server = ForkServer(["no_such_module_for_the_fork_server"], helper_env)
    with pytest.raises(ForkUnavailable, match="did not start"):
        server.spawn("forks_helper", ["0"])
    server.close()
    assert server.proc.returncode not in (None, 0)


def test_the_server_ends_with_the_process_that_started_it(tmp_path, helper_env):
    """A SIGKILLed caller (an export killed mid-conversion) leaves neither the server nor its children."""
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent("""
        import sys
        from tflab.process.forks import ForkServer
        s = ForkServer(["forks_helper"])
        c = s.spawn("forks_helper:sleeps", [])
        c.stdout.readline()
        print(s.proc.pid, c.pid, flush=True)
        import time; time.sleep(60)
    """))
    caller = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=helper_env)
    pids = [int(p) for p in caller.stdout.readline().split()]
    assert len(pids) == 2
    caller.kill()
    caller.wait()
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        time.sleep(0.1)
    assert not alive


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_another_process_gets_nothing_forked(helper_env):
    """The server's socket has no file; it forks only for the process that started it (SO_PEERCRED)."""
    from tflab.process.forks import ForkServer

    server = ForkServer(["forks_helper"], helper_env)
    try:
        server.spawn("forks_helper", ["0"]).wait(30)  # ready
        other = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import json, os, socket
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect({server.address!r})
            r, w = os.pipe()
            request = json.dumps({{"target": "forks_helper", "argv": ["0"], "env": None}}).encode()
            try:
                socket.send_fds(c, [len(request).to_bytes(8, "big") + request], [w, w])
                print("answered", repr(c.recv(64)))
            except (ConnectionResetError, BrokenPipeError):  # closed before it read the request
                print("answered b''")
        """)], capture_output=True, text=True, timeout=60, env=helper_env)
        assert other.stdout.strip() == "answered b''", other.stderr  # closed without a pid
        assert server.spawn("forks_helper", ["5"]).wait(30) == 5  # and it still serves its own process
    finally:
        server.close()


def test_a_child_gets_the_environment_and_files_its_caller_gives(helper_env, tmp_path):
    from tflab.process.forks import ForkServer

    server = ForkServer(["forks_helper"], helper_env)
    try:
        log = tmp_path / "child.log"
        with open(log, "w") as f:
            child = server.spawn("forks_helper", ["0"], env={**helper_env, "FORKS_TEST_VAR": "x" * 200_000},
                                 stdout=f, stderr=f)
        assert child.stdout is None and child.wait(30) == 0
        assert log.read_text().startswith("argv ['0'] parent") and "to stderr" in log.read_text()
        env_child = server.spawn("forks_helper:env_size", [], env={**helper_env, "FORKS_TEST_VAR": "x" * 200_000})
        assert env_child.wait(30) == 200_000 % 256
    finally:
        server.close()


def test_the_child_sees_its_own_command_line_not_the_servers(helper_env):
    """``sys.argv`` and ``__main__`` as ``python -m MODULE ARGV…`` gives them (a user's step may parse them)."""
    from tflab.process.forks import ForkServer

    server = ForkServer(["forks_helper"], helper_env)
    try:
        child = server.spawn("forks_helper:argv_seen", ["user-worker", "--flag"])
        out = child.stdout.read()
        assert child.wait(30) == 0
        assert out.endswith("forks_helper.py', 'user-worker', '--flag'] True\n") and "tflab-forks" not in out, out
    finally:
        server.close()


def test_a_child_forked_as_its_server_dies_does_not_outlive_it(helper_env):
    """The server's pid is read before the fork: a server killed right after it leaves no orphan behind."""
    from tflab.process.forks import ForkServer

    children = []
    for _ in range(5):
        server = ForkServer(["forks_helper"], helper_env)
        children.append(server.spawn("forks_helper:sleeps", []))
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(c.pid) for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [c.pid for c in children if _alive(c.pid)]


def test_an_environment_the_child_could_not_take_is_refused_in_the_caller(helper_env):
    from tflab.process.forks import ForkServer

    server = ForkServer(["forks_helper"], helper_env)
    try:
        fds = len(os.listdir("/proc/self/fd"))
        for bad, error in (({"A": object()}, TypeError), ({"A=B": "1"}, ValueError), ({"A": "x\0y"}, ValueError)):
            with pytest.raises(error):
                server.spawn("forks_helper", ["0"], env={**helper_env, **bad})
        assert len(os.listdir("/proc/self/fd")) == fds  # no pipe left open by a refused spawn
    finally:
        server.close()
