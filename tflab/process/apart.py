"""Runs one candidate fix's check in a forked child with a time limit: the user's process is never changed.

Every printed fix is applied to the user's own case first (`tflab.fix.attempt`),
and applying it runs the user's Python again: a re-trace runs the body, a
rewritten copy runs its loop. That run is tflab's, not the user's, so it happens
in a child made by ``os.fork()``:

* the child inherits the user's objects as they are (functions defined in a
  REPL, closures, Keras models, recorded calls): nothing is pickled on the way in;
* what the body does there stays there: a global list it appends to, an iterator
  it advances, a counter, a ``tf.Variable`` it assigns, a module it imports are
  the child's copies; the user's process sees them unchanged. A file the body
  opens for writing with Python's ``open()`` (``io.open``, ``pathlib``, ``np.save``)
  is written in a scratch folder instead (a copy where the file existed; later
  reads in the child see the copy), removed when the child ends; its path comes
  back in ``Apart.files_kept_apart``. Writes that bypass ``open()`` (``os.open``,
  TF's C++ file system: ``tf.io.write_file``, checkpoints) reach the disk. The
  user's open file objects and iterators in the parent are not moved;
* the child's stdin is /dev/null and its stdout/stderr go to /dev/null (what
  the body prints while tflab re-runs it is not the user's output), and a
  terminal's Ctrl-C is the parent's to handle (the child ignores SIGINT);
* only the check's small result crosses back: pickled over a pipe, at most
  `MAX_RESULT_BYTES` (numpy arrays included);
* the time limit (``timeout_s``, default ``TFLAB_FIX_TIMEOUT_S``) ends a body
  that blocks on a queue or loops for ever: the child is killed with SIGKILL;
* the child runs in its own process group: when the check ends (its result
  read, the time limit, or the child's end) the whole group is killed, so a
  process the body starts (``subprocess.Popen``, ``os.fork``) does not outlive
  the check, and a signal the body sends to its group (``os.killpg(0, ...)``)
  reaches the check only. Only the child's own length-prefixed message counts:
  a grandchild holding the pipe open does not delay it, and a forked copy that
  returns into tflab's code sends nothing;
* a ``sys.exit`` argument that is not an int, str or None comes back as its
  ``repr()`` text, never as the object (unpickling it here could run its code);
* a body that closes or replaces tflab's pipe (``os.closerange``) is reported
  as a result that could not be sent back, not as an ``os._exit`` of its own;
* ``sys.exit``, ``os._exit``, a ``KeyboardInterrupt`` the body raises, or a
  signal that kills the child end the child only, and come back as an
  `Apart` whose ``status`` says which; a Ctrl-C of the user (SIGINT in the
  parent) kills the child and is raised in the parent as usual.

TensorFlow in a forked child (measured on TF 2.21, x86-64, 2 cores, with
``TF_ENABLE_ONEDNN_OPTS=0`` and ``=1`` alike, after the parent ran eager ops,
tf.functions and a Keras layer):

* tracing a new tf.function (``get_concrete_function``) works as is (0.09 s);
* an op small enough to run in one shard works; calling any tf.function hangs:
  the eager context's inter-op pool has no threads after fork, and
  ``ProcessFunctionLibraryRuntime::RunSync`` waits for ever. So does an op big
  enough to be split over the intra-op pool (a 300x300 MatMul), which is one
  pool for the whole process unless ``TF_OVERRIDE_GLOBAL_THREADPOOL=1`` was set
  before TF's first op (then each context's devices own theirs);
* with a fresh eager context in the child (`tflab._tf.fork.fresh_eager_context`)
  and ``TF_OVERRIDE_GLOBAL_THREADPOOL=1`` in the parent: new tf.functions trace
  and run, tf.functions traced before the fork run (rebound to the new
  context), a 300x300 MatMul, a while_loop, a Keras layer and ``model.predict``
  all run, parent's tf.Variables read. ``tflab`` sets
  ``TF_OVERRIDE_GLOBAL_THREADPOOL=1`` before TF loads (``import tflab`` does it
  too, where TF has not started yet); where TF started without it, a candidate
  whose ops are split over threads does not finish and says so.
* ``v.assign(x)`` on a tf.Variable made before the fork was lost in the child
  (a later read gave the old value; ``assign_add`` worked): TF's assign looks
  the variable up in the new device's resource manager and makes a new one.
  `tflab._tf.fork.keep_assigns` routes it through a full-range strided-slice
  assign; measured: eager, in a tf.function, scalar, bool and Keras
  ``set_weights`` assigns all read back in the child, the parent's unchanged.

Cost (best of 5, 2 shared cores, TF's oneDNN off / on): a check that never
crosses into TF 0.10 s (fork, the child's exit, the pipe); one that traces a
tf.function 0.23 / 0.25 s (in the user's process: 0.011 / 0.016 s); one that
traces and runs one 0.28 / 0.38 s (in process: 0.016 / 0.047 s). The first
trace in the child's fresh context is most of the difference. Without
``gc.freeze()`` before the context reset, TF's ``gc.collect()`` over the
inherited heap cost 0.7 s more per candidate. A spawned child handed the
recorded calls would cost a TF import (seconds) per candidate and could not
see a function defined in a REPL.

On a GPU machine the child runs on CPU (a CUDA context does not survive fork).

Example:
    >>> from tflab.process.apart import run_apart
    >>> run_apart(lambda: 6 * 7, timeout_s=5).value
    42
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import select
import signal
import sys
import time
from typing import Any, Callable

__all__ = ["Apart", "run_apart", "default_timeout_s", "MAX_RESULT_BYTES", "RETURNED", "RAISED", "TIMED_OUT",
           "EXITED", "KILLED", "LOST"]

# A child without a safe copy of TF's thread pools hangs on a big op (see the module's docstring):
# ask TF for pools per context, read once when TF builds its first device.
os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")

RETURNED, RAISED, TIMED_OUT, EXITED, KILLED, LOST = "returned", "raised", "timed out", "exited", "killed", "lost"
#: The largest result a check may send back (pickled), in bytes.
MAX_RESULT_BYTES = 64 << 20
_DEFAULT_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class Apart:
    """What one run in a child gave.

    Attributes:
        status: `RETURNED` (``value`` is what the callable returned), `RAISED`
            (``error_type``/``error`` say what; ``exit_code`` for SystemExit),
            `TIMED_OUT` (killed at ``timeout_s``), `EXITED` (the process ended,
            ``os._exit(exit_code)``, without returning), `KILLED` (a signal,
            ``signal_name``) or `LOST` (the result could not come back: ``error``).
        value: the callable's return value (status `RETURNED`).
        error_type: the exception's class name (status `RAISED`).
        error: the exception's first line, or why the result was lost.
        exit_code: the code of a SystemExit or of the child's exit.
        signal_name: e.g. "SIGSEGV" (status `KILLED`).
        timeout_s: the time limit applied, in seconds.
        seconds: wall time from fork to the child's end, in seconds.
        files_kept_apart: the paths the child opened for writing, written in
            its scratch folder instead (status `RETURNED` or `RAISED`).
    """

    status: str
    value: Any = None
    error_type: str = ""
    error: str = ""
    exit_code: Any = None
    signal_name: str = ""
    timeout_s: float = 0.0
    seconds: float = 0.0
    files_kept_apart: tuple = ()

    @property
    def text(self) -> str:
        """What happened, as a phrase for a fix line (empty for `RETURNED`)."""
        if self.status == RAISED:
            if self.error_type == "SystemExit":
                return f"your code called sys.exit({self.exit_code!r}) under this fix"
            if self.error_type == "KeyboardInterrupt":
                return "your code raised KeyboardInterrupt under this fix"
            return f"raised {self.error_type}: {self.error}" if self.error else f"raised {self.error_type}"
        if self.status == TIMED_OUT:
            return f"the candidate did not finish in {self.timeout_s:g} s"
        if self.status == EXITED:
            return f"your code ended its process with os._exit({self.exit_code}) under this fix"
        if self.status == KILLED:
            return f"the candidate's process was killed by {self.signal_name}"
        if self.status == LOST:
            return self.error
        return ""


def default_timeout_s() -> float:
    """``TFLAB_FIX_TIMEOUT_S`` as seconds (default 60).

    Raises:
        tflab.errors.UsageError: the value is not a number of seconds from 0.1 to 86400
            (`tflab.process.settings.seconds_value`).
    """
    from tflab.process.settings import get, seconds_value

    raw = get("TFLAB_FIX_TIMEOUT_S")
    if raw in (None, ""):
        return _DEFAULT_TIMEOUT_S
    return seconds_value("TFLAB_FIX_TIMEOUT_S", raw)


def _first_line(text: str, limit: int = 200) -> str:
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _keep_files_apart(scratch: str) -> dict:
    """In the child: ``open()`` for writing goes to ``scratch``; returns the map path -> scratch copy."""
    import builtins
    import io

    real_open = builtins.open
    moved: dict[str, str] = {}

    def open_apart(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and isinstance(mode, str):
            path = os.path.abspath(os.fsdecode(file))
            if any(c in mode for c in "wax+") and path not in moved:
                copy = os.path.join(scratch, f"{len(moved)}_{os.path.basename(path) or 'file'}")
                if not any(c in mode for c in "wx") and os.path.isfile(path):
                    with real_open(path, "rb") as src, real_open(copy, "wb") as dst:
                        dst.write(src.read())
                moved[path] = copy
            file = moved.get(path, file)
        return real_open(file, mode, *args, **kwargs)

    builtins.open = io.open = open_apart
    return moved


_IN_CHILD = False


def in_child() -> bool:
    """True inside a child `run_apart` forked (what it computes there never reaches the parent's memory)."""
    return _IN_CHILD


#: The child's exit code when the check's result could not be written to tflab's pipe (the body closed or
#: replaced its file descriptor): reported as `LOST`, not as the body's own ``os._exit``.
_SEND_FAILED = 198
#: The child's exit code when tflab's own side of the child failed before the result was sent.
_CHILD_FAILED = 199


class _Shown(str):
    """A ``sys.exit`` argument that is not an int, str or None, as its ``repr()`` text (made in the child).

    The object itself never crosses back: unpickling a user's object in the user's process could run its
    code (``__reduce__``) or fail there. This class is tflab's, so the parent unpickles only a string.
    """

    def __repr__(self) -> str:
        return str(self)


def _exit_code(e: SystemExit) -> Any:
    code = e.code
    if code is None or type(code) in (int, str, bool):
        return code
    try:
        return _Shown(repr(code))
    except BaseException:  # noqa: BLE001 - a repr that raises still says what kind of object it was
        return _Shown(f"<{type(code).__name__} object>")


def _child(fn: Callable[[], Any], w: int, parent: int, scratch: str) -> None:
    """The child's side: run ``fn``, send what happened, leave without atexit handlers or thread joins."""
    global _IN_CHILD
    _IN_CHILD = True
    code = _CHILD_FAILED
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # its own process group: the parent ends it and whatever it starts in one kill
    me = os.getpid()
    try:
        with contextlib.suppress(ValueError):  # forked from a thread that is not the main one
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        import faulthandler

        faulthandler.disable()  # a crash of the body is reported from its exit status, not dumped on the user's tty
        from tflab.process.watch import die_with_parent

        die_with_parent(str(parent))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # Python's streams too: under `tflab VERB` sys.stdout is the report pipe on another descriptor
        # (`tflab.process.child_end`), and a print of the body would reach the user's stdout through it.
        sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - the child's until it exits
        if "tensorflow" in sys.modules:
            _fresh_tf()
        pipe = os.fstat(w)
        moved = _keep_files_apart(scratch)
        try:
            message: tuple = (RETURNED, fn(), tuple(moved))
        except BaseException as e:  # noqa: BLE001 - the user's code under a fix may raise anything; it is sent back
            message = (RAISED, type(e).__name__, _first_line(e), _exit_code(e) if isinstance(e, SystemExit) else None,
                       tuple(moved))
        if os.getpid() != me:  # a process the body forked came back here: only the child itself answers
            code = 0
            return
        try:
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - a result that does not pickle is reported, not raised
            data = pickle.dumps((LOST, f"the check's result could not be sent back: {_first_line(e)}"))
        if len(data) > MAX_RESULT_BYTES:
            data = pickle.dumps((LOST, f"the check's result is {len(data):,} bytes, over the "
                                       f"{MAX_RESULT_BYTES:,}-byte limit for a result sent back"))
        code = _SEND_FAILED
        now = os.fstat(w)  # the body may have closed tflab's pipe, or opened a file of its own on that number
        if (now.st_dev, now.st_ino) != (pipe.st_dev, pipe.st_ino):
            return
        view = memoryview(data)
        os.write(w, len(data).to_bytes(8, "little"))
        while view:
            view = view[os.write(w, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - nothing may escape the child into the parent's code
        pass
    finally:
        os._exit(code)


def _fresh_tf() -> None:
    import tensorflow as tf

    from tflab._tf.fork import fresh_eager_context

    fresh_eager_context()
    try:
        tf.config.set_visible_devices([], "GPU")  # a CUDA context does not survive fork
    except Exception:  # noqa: BLE001 - no GPU, or none listed: nothing to hide
        pass


def run_apart(fn: Callable[[], Any], timeout_s: float | None = None) -> Apart:
    """Runs ``fn()`` in a forked child and returns what happened, within ``timeout_s``.

    Args:
        fn: a zero-argument callable; it sees the caller's objects as they are at
            the call (fork), and its changes to them stay in the child.
        timeout_s: seconds before the child is killed (SIGKILL); default
            `default_timeout_s` (``TFLAB_FIX_TIMEOUT_S``, 60 s).

    Returns:
        An `Apart`; ``value`` is ``fn()``'s return value when it returned (it
        must pickle, at most `MAX_RESULT_BYTES`).

    Raises:
        KeyboardInterrupt: the user pressed Ctrl-C (SIGINT in this process):
            the child is killed first. A SIGINT that came from inside the run
            (the candidate signalled this process; tflab's supervisor received
            none: `tflab.errors.own_interrupt`) is the candidate's, `RAISED`.
    """
    from tflab.errors import own_interrupt

    limit = default_timeout_s() if timeout_s is None else float(timeout_s)
    sys.stdout.flush()
    sys.stderr.flush()
    import shutil
    import tempfile

    scratch = tempfile.mkdtemp(prefix="tflab_apart_")
    r, w = os.pipe()
    start = time.monotonic()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side is measured through what it sends back
        os.close(r)
        _child(fn, w, parent, scratch)
    os.close(w)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # as the child does first: whichever runs first, the group exists before the body
    data = bytearray()
    timed_out = False
    status = None
    try:
        deadline = start + limit
        eof = False
        while not _complete(data):
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([] if eof else [r], [], [], min(left, 0.05))
            if ready:
                chunk = os.read(r, 1 << 20)
                if chunk:
                    data += chunk
                    continue
                eof = True  # no writer is left; the child may still run (its body closed the pipe)
            if status is not None:
                break  # the child ended and what it wrote is read; a grandchild may still hold the pipe open
            done, st = _poll(pid)
            if done:
                status = st  # one more pass reads what it wrote before it ended
        _kill_group(pid, reaped=status is not None)
        if status is None:
            status = _reap(pid)
    except BaseException as e:  # a Ctrl-C (or anything else) in the parent: the child goes first
        _kill_group(pid, reaped=status is not None)
        if status is None:
            _reap(pid)
        if isinstance(e, KeyboardInterrupt) and own_interrupt():  # the candidate signalled tflab's process
            return Apart(RAISED, error_type="KeyboardInterrupt", timeout_s=limit,
                         error="a SIGINT from inside the run (no Ctrl-C reached tflab)",
                         seconds=time.monotonic() - start)
        raise
    finally:
        os.close(r)
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.monotonic() - start
    if timed_out:
        return Apart(TIMED_OUT, timeout_s=limit, seconds=seconds)
    if _complete(data):
        message = pickle.loads(bytes(data[8:8 + int.from_bytes(data[:8], "little")]))
        if message[0] == RETURNED:
            return Apart(RETURNED, value=message[1], timeout_s=limit, seconds=seconds, files_kept_apart=message[2])
        if message[0] == RAISED:
            return Apart(RAISED, error_type=message[1], error=message[2], exit_code=message[3], timeout_s=limit,
                         seconds=seconds, files_kept_apart=message[4])
        return Apart(LOST, error=message[1], timeout_s=limit, seconds=seconds)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return Apart(KILLED, signal_name=name, timeout_s=limit, seconds=seconds)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    if code == _SEND_FAILED and not data:
        return Apart(LOST, error="the check's result could not be sent back (the candidate closed tflab's pipe)",
                     exit_code=code, timeout_s=limit, seconds=seconds)
    if data:
        return Apart(LOST, error=f"the candidate's process ended with code {code} while sending its result",
                     exit_code=code, timeout_s=limit, seconds=seconds)
    return Apart(EXITED, exit_code=code, timeout_s=limit, seconds=seconds)


def _complete(data: bytes) -> bool:
    """True once ``data`` holds the child's whole length-prefixed message."""
    return len(data) >= 8 and len(data) - 8 >= int.from_bytes(data[:8], "little")


def _poll(pid: int) -> tuple[bool, int]:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True, 0
    return done == pid, status


def _kill_group(pid: int, reaped: bool) -> None:
    """Ends every process the child started (its process group, which outlives a reaped child while a member
    is left), and the child itself by pid while it is not reaped (a reaped pid may be another process's)."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    if not reaped:
        _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0
