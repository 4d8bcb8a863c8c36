"""A fork server: one helper imports TensorFlow once, and each worker is a fork of it.

Every fresh Python that imports TensorFlow spends about 5 s of CPU on it (its
shared libraries and its Python API modules), before any work. When tflab needs
several workers of one kind at once (the export's converter workers, one per
schedulable CPU), `ForkServer` pays that once: its process imports the listed
modules, runs nothing of TF (no op, no eager context, so no TF thread pool
exists), and forks a child per `ForkServer.spawn`. A child is a separate
process, as a fresh worker is: a crash in it (an ``abort()`` in the converter)
costs that child only.

Each child gets the pipes its caller made for its stdout and stderr (passed
over a Unix socket), ``/dev/null`` as stdin, the kernel's SIGKILL when the
server dies (``PR_SET_PDEATHSIG``), and ``$TFLAB_PARENT_PID`` set to the server
(for `tflab.process.watch.tie_to_parent`); the server watches the process that
started it, so a killed caller leaves neither. The caller reads a child as it reads a
``subprocess.Popen``: ``stdout``, ``stderr``, ``pid``, ``poll``, ``wait``,
``kill`` (`Forked`). A server that cannot start or has died makes `spawn` raise
`ForkUnavailable`; the caller then starts a fresh process as before.

Not ``multiprocessing``'s forkserver: its server lives as long as the process
that started it (a user's REPL would keep a TF-sized process after the export
ended), its preload list is process-wide state shared with the user's own
``multiprocessing``, and its children report through pickled objects, not the
exit status and pipes that tflab's worker protocol reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import warnings
from typing import Sequence

# Seconds a spawn waits for the server to have imported its modules (a loaded 2-core machine
# takes ~10 s for TensorFlow; past this the caller starts a fresh process instead).
READY_TIMEOUT_S = 120.0


class ForkUnavailable(RuntimeError):
    """The fork server is not running (it failed to start, or has died): start a fresh process."""


class Forked:
    """One forked child, read as a ``subprocess.Popen``.

    Attributes:
        pid: the child's pid.
        stdout, stderr: text streams of the child's stdout and stderr (pipes).
        returncode: None while it runs; its exit status after (negative: the signal that ended it).
    """

    def __init__(self, pid: int, conn: socket.socket, stdout, stderr, status: bytes = b"") -> None:
        self.pid, self._conn, self.stdout, self.stderr = pid, conn, stdout, stderr
        self._early = status  # the status, when it came with the pid
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def _status(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            data = self._early
            if not data:
                self._conn.settimeout(timeout)
                try:
                    data = self._conn.recv(64)
                except (socket.timeout, BlockingIOError):
                    return None
                except OSError:
                    data = b""
            if not data.strip():
                # No status: the server died (killed with its process group, or by the kernel with its
                # parent), taking the child with it. Its end is seen when it has left the process table
                # (or is a zombie: ended), so a caller that goes on finds no child of its running.
                _wait_gone(self.pid, 10.0 if timeout is None else max(timeout, 1.0))
            self.returncode = int(data.decode().strip() or -signal.SIGKILL)
            self._conn.close()
            return self.returncode

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)

    terminate = kill


class ForkServer:
    """A helper process that imports ``modules`` once; `spawn` forks a child of it that calls a function.

    Args:
        modules: module names the server imports before its first fork (e.g. ``["tensorflow"]``).
        env: the server's environment, which every child inherits (None: this process's).
        start: ``start(argv, env, **popen_kwargs) -> subprocess.Popen``, how the server process is
            started (a `tflab.process.group.ChildGroup`'s ``start``, so the group stops it and its
            children with the others); default `tflab.process.group.start_tied`.

    Use it from the thread that outlives its children (the server asks the kernel to end it with
    that thread), and `close` it when its work is done.

    Example:

    >>> server = ForkServer(["tensorflow", "tflab.distribute.child"])  # doctest: +SKIP
    >>> child = server.spawn("tflab.distribute.child", ["worker"], env=worker_env)  # doctest: +SKIP
    >>> child.wait(120), server.close()  # doctest: +SKIP
    (0, None)
    """

    def __init__(self, modules: Sequence[str], env: dict | None = None, start=None) -> None:
        from tflab.process.group import start_tied

        # Linux's abstract socket namespace: no file to leave behind when the server is killed. The
        # server takes requests from this process only (SO_PEERCRED).
        self.name = f"tflab-forks-{os.getpid()}-{secrets.token_hex(8)}"
        self.address = "\0" + self.name
        argv = [sys.executable, "-m", __name__, self.name, *modules]
        popen = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            self.proc = (start or (lambda a, e, **k: start_tied(a, env=e, **k)))(argv, env, **popen)
        except OSError:  # no process to be had (EMFILE, EAGAIN): each spawn says so, the caller starts its own
            self.proc = None
        self._ready: bool | None = None
        self._ready_lock = threading.Lock()

    def _wait_ready(self) -> None:
        if self.proc is None:
            raise ForkUnavailable("the fork server could not be started")
        with self._ready_lock:
            if self._ready is None:
                ready, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT_S)
                self._ready = bool(ready) and self.proc.stdout.readline().strip() == b"ready"
        if not self._ready or self.proc.poll() is not None:
            raise ForkUnavailable("the fork server did not start")

    def spawn(self, target: str, argv: Sequence[str], env: dict | None = None, stdout=None,
              stderr=None) -> Forked:
        """Forks a child that runs ``target``'s ``main(argv)`` (``"module"`` or ``"module:function"``).

        Args:
            target: ``"module"`` (its ``main``) or ``"module:function"``; called with ``argv``.
            argv: the list of strings the function gets.
            env: the child's whole environment (None: the server's). Set before the function runs,
                after TF's import: a variable TF reads when it loads (``TF_ENABLE_ONEDNN_OPTS``,
                the ISA caps) keeps the server's value.
            stdout, stderr: open files the child writes to (None: a pipe, read as ``child.stdout``).

        Returns:
            The child (`Forked`); its exit status is the function's return value (an int, 0 for None),
            1 after an uncaught exception (its traceback on the child's stderr).

        Raises:
            ForkUnavailable: the server did not start or has died.
        """
        request = json.dumps({"target": target, "argv": [str(a) for a in argv],
                              "env": None if env is None else _checked_env(env)}).encode()
        self._wait_ready()
        mine, given = [], []
        for f in (stdout, stderr):
            if f is None:
                r, w = os.pipe()
                mine.append(r)
                given.append(w)
            else:
                mine.append(None)
                given.append(os.dup(f.fileno()))
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.address)
            socket.send_fds(conn, [len(request).to_bytes(8, "big") + request], given)
            line, status = _read_line(conn)
            pid = int(line)
        except (OSError, ValueError) as e:
            conn.close()
            for fd in mine:
                if fd is not None:
                    os.close(fd)
            raise ForkUnavailable(f"the fork server did not fork: {e}") from e
        finally:
            for fd in given:
                os.close(fd)
        streams = [os.fdopen(fd, "r") if fd is not None else None for fd in mine]
        return Forked(pid, conn, streams[0], streams[1], status)

    def close(self, timeout: float = 10.0) -> None:
        """Ends the server once its children have ended (they keep running until then); removes its socket.

        The server is told in words, not by the end of its stdin: a child this process forks meanwhile
        (a check run apart, `tflab.process.apart`) holds a copy of that pipe, and would delay the end.
        """
        if self.proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(b"close\n")
            self.proc.stdin.flush()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdout.close()


    def kill(self) -> None:
        """Ends the server and every child it forked at once (SIGKILL to its process group when it leads
        one, as a `tflab.process.group.ChildGroup` starts it), and reaps the server."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(self.proc.pid) == self.proc.pid:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()


def _checked_env(env: dict) -> dict:
    """``env`` as the child will set it; refused here, in the caller, as ``subprocess.Popen`` refuses it."""
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"environment keys and values must be str, got {k!r}: {type(v).__name__}")
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise ValueError(f"illegal environment variable name or value: {k!r}")
    return dict(env)


def _wait_gone(pid: int, timeout: float) -> None:
    """Waits up to ``timeout`` s for ``pid`` (not this process's child) to be gone or a zombie."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                    return
        except (OSError, IndexError):
            return
        time.sleep(0.01)


def _read_line(conn: socket.socket) -> tuple[str, bytes]:
    """The first line (the pid) and what came after it (the exit status of a child that ended at once)."""
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(64)
        if not chunk:
            raise OSError("the fork server closed the connection")
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line.decode(), rest


# ---------------------------------------------------------------------------- the server's side

_EXIT = os._exit


def _child(sockets: list[socket.socket], request: dict, fds: list[int], prctl, server: int) -> None:
    """In the forked child: its pipes as stdout and stderr, its parent the server; runs the target.

    ``sockets``: the server's, closed here (a copy kept open would hide the server's death from a
    caller waiting for another child's status). ``server``: its pid, read before the fork (a server
    that died in between would make ``getppid()`` the reaper's, and the check below pass).
    ``sys.argv`` and ``__main__`` are the target's, as ``python -m MODULE ARGV…`` gives them.
    """
    import importlib
    import traceback

    code = 1
    try:
        for s in sockets:
            s.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (devnull, *fds):
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh Python: KeyboardInterrupt
        if prctl is not None:  # SIGKILL from the kernel when the server dies (resolved before the fork)
            prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != server:
            _EXIT(124)  # the server died before the tie was made
        if request.get("env") is not None:
            os.environ.clear()
            os.environ.update(request["env"])
        os.environ["TFLAB_PARENT_PID"] = str(server)
        module_name, _, name = request["target"].partition(":")
        module = importlib.import_module(module_name)
        sys.argv = [getattr(module, "__file__", None) or module_name, *request["argv"]]
        sys.orig_argv = [sys.executable, "-m", module_name, *request["argv"]]
        sys.modules["__main__"] = module
        result = getattr(module, name or "main")(request["argv"])
        code = result if isinstance(result, int) else 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child's failure is its exit status and its stderr
        traceback.print_exc()
    finally:
        # What a fresh Python does at its end, then the real end (never back into the server's loop).
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        _EXIT(code)  # the real one: the target may have wrapped os._exit (`tflab.distribute.child`)


def _serve(name: str, modules: Sequence[str]) -> int:
    import importlib

    from tflab.process.watch import die_with_parent

    from tflab.process.settings import get_int

    parent = get_int("TFLAB_PARENT_PID", os.getppid())
    die_with_parent(str(parent))
    prctl = None
    with contextlib.suppress(Exception):
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    for m in modules:
        importlib.import_module(m)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    me = os.getpid()
    listener.listen(16)
    os.write(1, b"ready\n")
    children: dict[int, socket.socket] = {}
    accepting = True
    while accepting or children:
        if os.getppid() != parent:
            return 124  # its parent is gone (its children watch this process in turn)
        watched = [listener, sys.stdin] if accepting else []
        ready, _, _ = select.select(watched, [], [], 0.2)
        if sys.stdin in ready and os.read(sys.stdin.fileno(), 4096) in (b"", b"close\n"):
            accepting = False  # `ForkServer.close`: end once the children have ended
        if listener in ready:
            conn, _ = listener.accept()
            peer_pid, peer_uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                        struct.calcsize("3i")))
            if (peer_pid, peer_uid) != (parent, os.getuid()):
                conn.close()  # not the process that started this server: nothing is read or forked for it
                continue
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, 2)
            size = int.from_bytes(msg[:8], "big") if len(msg) >= 8 else 0
            while 8 <= len(msg) < 8 + size:  # a large environment comes in several reads
                chunk = conn.recv(1 << 16)
                if not chunk:
                    break
                msg += chunk
            if len(fds) != 2 or len(msg) != 8 + size:
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            with warnings.catch_warnings():  # only this thread exists: the fork copies no other
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                _child([conn, listener, *children.values()], json.loads(msg[8:]), list(fds), prctl, me)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(str(os.waitstatus_to_exitcode(status)).encode())
                conn.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python -m tflab.process.forks NAME [MODULE ...] (internal)", file=sys.stderr)
        sys.exit(2)
    # os._exit: the interpreter's own shutdown with TensorFlow loaded takes seconds, and the server
    # has nothing to flush (it writes with os.write).
    os._exit(_serve(sys.argv[1], sys.argv[2:]))
