"""The child's end of the supervisor's protocol: `ChildChannel` (the parent's end: `tflab.process.supervisor`).

The verb's child runs the user's code, which may do anything to the process's
file descriptors. tflab's own pipes are kept out of its way:

* **High numbers.** The report, status and notice descriptors are moved to
  the top of the process's descriptor range (``F_DUPFD_CLOEXEC`` from near
  ``RLIMIT_NOFILE``), so a loop that closes "the other" descriptors
  (``for fd in range(3, 50): os.close(fd)``) does not reach them, and a
  subprocess the user starts does not inherit them.
* **Identity, not numbers.** Each is remembered by its ``(st_dev, st_ino)``;
  before tflab writes the report or a status line it checks that the number
  still names the same pipe. Code that closed every descriptor
  (``os.closerange(3, 65536)``) and opened a file of its own on that number
  never gets tflab's report written into its file: the report is lost
  (`ReportLost`, one line), and when the status pipe is gone too the child
  ends with `CHANNEL_LOST_EXIT`, which the parent names as the user's doing.
* **tflab's error lines.** ``sys.stderr`` falls back to a high copy of fd 2
  when the user's code closed fd 2 (``os.close(2)``), so the one line that
  says what went wrong still reaches the terminal.
* **Who sent a SIGINT.** The parent writes each signal it receives to the
  notice file (a temporary file both share). A ``KeyboardInterrupt`` that
  follows a SIGINT the parent never received came from inside the run (the
  user's code signalled its own process): `sigint_reached_parent` tells a
  real Ctrl-C (the terminal signals the whole foreground process group, the
  parent included; a ``kill -INT`` names the parent) from that.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import time

from tflab.errors import TflabError, error_line

#: The environment variable that hands the child its descriptors:
#: "report,status,quiet,out_tty,err_tty[,notice]".
ENV = "TFLAB_CHILD_FDS"
#: The child's exit code when the user's code closed (or replaced) both tflab's report and status pipes:
#: nothing can be said on them, so the code itself says it (`tflab.process.supervisor.describe_end`).
CHANNEL_LOST_EXIT = 197
#: How long a child waits for its parent's notice of a SIGINT before it calls the interrupt the user's code's.
NOTICE_WAIT_S = 2.0


class ReportLost(TflabError):
    """The user's code closed or replaced the pipe tflab's report travels on; the report is lost."""


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _high(fd: int) -> int:
    """``fd`` moved near the top of the descriptor range (close-on-exec); ``fd`` itself when that fails."""
    import fcntl
    import resource

    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        top = 1 << 16 if soft == resource.RLIM_INFINITY else min(soft, 1 << 16)
        new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(3, top - 64))
    except (OSError, ValueError):
        return fd
    if new != fd:
        with contextlib.suppress(OSError):
            os.close(fd)
    return new


class _Stream(io.TextIOBase):
    """A text stream in the child that user code cannot close, and that reports the parent's tty.

    Args:
        raw: the stream written to.
        tty: what ``isatty()`` answers (the parent's stream's).
        guard: ``(fd, identity)`` of the report pipe: a write raises `ReportLost` once that number
            no longer names the pipe (closed, or reused by a file of the user's code).
        fallback: a stream to switch to when ``raw``'s descriptor was closed (fd 2's high copy).
    """

    def __init__(self, raw: io.TextIOBase, tty: bool, guard: tuple | None = None, fallback=None):
        self._raw, self._tty, self._guard, self._fallback = raw, tty, guard, fallback
        self.written = 0
        self.lost = False

    def _check(self) -> None:
        if self._guard is not None and _identity(self._guard[0]) != self._guard[1]:
            self.lost = True
            raise ReportLost(f"your code closed the pipe tflab's report travels on (fd {self._guard[0]}, which "
                             f"it did not open), so the report is lost; close only the file descriptors your "
                             f"code opened")

    def repointed(self) -> None:
        """tflab itself pointed the report's descriptor elsewhere (``/dev/null`` once the reader left)."""
        if self._guard is not None:
            self._guard = (self._guard[0], _identity(self._guard[0]))

    def _do(self, op):
        self._check()
        try:
            return op(self._raw)
        except OSError as e:
            if e.errno != errno.EBADF or self._fallback is None:
                raise
            self._raw, self._fallback = self._fallback, None  # fd 2 closed by the user's code: tflab's copy
            return op(self._raw)

    def write(self, text: str) -> int:
        self.written += len(text)
        return self._do(lambda raw: raw.write(text))

    def flush(self) -> None:
        self._do(lambda raw: raw.flush())

    def close(self) -> None:  # the user's sys.stdout.close() must not lose tflab's report
        with contextlib.suppress(Exception):
            self.flush()

    @property
    def closed(self) -> bool:
        return False

    def isatty(self) -> bool:
        return self._tty

    def fileno(self) -> int:
        return self._raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return self._raw.encoding

    @property
    def errors(self):
        return self._raw.errors

    @property
    def buffer(self):
        return self._raw.buffer


_CHANNEL: "ChildChannel | None" = None  # this process's channel to its supervisor, once opened


def announce_temp(path) -> None:
    """Tells the supervisor (if any) about a temporary folder this process made (``tmp PATH``).

    The supervisor removes it when this process ends without removing it itself (SIGKILL).
    """
    if _CHANNEL is not None and os.getpid() == _CHANNEL._pid:
        _CHANNEL._send(f"tmp {os.path.abspath(os.fspath(path))}")


def supervised() -> bool:
    """True in a child that opened its `ChildChannel` (the verb's child of the ``tflab`` supervisor)."""
    return _CHANNEL is not None


def report_stream():
    """The stream that reaches the supervisor's stdout (the report pipe), or None outside a channel."""
    return _CHANNEL.report if _CHANNEL is not None and os.getpid() == _CHANNEL._pid else None


class ChildChannel:
    """The child's end of the protocol (see `tflab.process.supervisor`); `open` it first thing.

    Attributes:
        quiet_fd: the parent's file for TF's start-up lines, or None.
        report: the report stream (installed as ``sys.stdout``).
    """

    def __init__(self, report_fd: int, status_fd: int, quiet_fd: int, out_tty: bool, err_tty: bool,
                 notice_fd: int | None = None):
        self._status_fd = _high(status_fd)
        self._status_id = _identity(self._status_fd)
        self._notice_fd = None if notice_fd is None else _high(notice_fd)
        self._notice_id = None if notice_fd is None else _identity(self._notice_fd)
        self.quiet_fd = quiet_fd
        self._pid = os.getpid()
        enc = getattr(sys.stdout, "encoding", None) or "utf-8"
        report_fd = _high(report_fd)
        raw = io.TextIOWrapper(io.FileIO(report_fd, "w", closefd=True), encoding=enc,
                               errors="backslashreplace", line_buffering=True)
        self.report = _Stream(raw, out_tty, guard=(report_fd, _identity(report_fd)))
        sys.stdout = self.report
        if sys.stderr is not None:
            fallback = None
            with contextlib.suppress(OSError, ValueError, AttributeError):
                fallback = io.TextIOWrapper(io.FileIO(_high(os.dup(sys.stderr.fileno())), "w", closefd=True),
                                            encoding=sys.stderr.encoding or "utf-8", errors="backslashreplace",
                                            line_buffering=True)
            sys.stderr = _Stream(sys.stderr, err_tty, fallback=fallback)
        real_exit = os._exit

        def _exit(n):  # the user's os._exit(n): say so to the parent before the process ends
            if os.getpid() == self._pid:
                self._send(f"os_exit {int(n) if isinstance(n, int) else n}")
            real_exit(n)

        self._real_exit = real_exit
        os._exit = _exit
        global _CHANNEL
        _CHANNEL = self
        from tflab._io import paths as _paths
        from tflab.errors import set_sigint_witness

        _paths.announce_hook, _paths.report_hook = announce_temp, report_stream
        set_sigint_witness(self.sigint_reached_parent)

    @classmethod
    def open(cls) -> ChildChannel | None:
        """The channel the supervisor passed in the environment, or None (not run under `run_child`)."""
        from tflab.process.settings import pop
        from tflab.process.watch import die_with_parent

        spec = pop(ENV)
        parent = pop("TFLAB_SUPERVISOR_PID")
        if not spec:
            return None
        fields = [int(x) for x in spec.split(",")]
        report, status, quiet, out_tty, err_tty = fields[:5]
        die_with_parent(parent)
        return cls(report, status, quiet, bool(out_tty), bool(err_tty), fields[5] if len(fields) > 5 else None)

    def _send(self, line: str) -> None:
        if _identity(self._status_fd) != self._status_id:
            return  # closed by the user's code, or its number now names a file of theirs
        with contextlib.suppress(OSError):
            # A path is bytes to the OS: one that is not UTF-8 (surrogate-escaped in Python) goes as its bytes.
            os.write(self._status_fd, f"{line}\n".encode("utf-8", "surrogateescape"))

    def sigint_reached_parent(self, wait_s: float | None = None) -> bool:
        """True when the supervisor received a SIGINT (a Ctrl-C, a ``kill -INT`` of tflab), waiting up to ``wait_s`` s.

        False means the SIGINT this process got came from inside the run: the user's code (or a process
        it started) signalled it. With no notice file (an older parent) or one the user's code closed,
        True: tflab cannot tell, and a Ctrl-C is never taken for the user's exception.
        """
        import signal

        fd = self._notice_fd
        if fd is None or _identity(fd) != self._notice_id:
            return True
        deadline = time.monotonic() + (NOTICE_WAIT_S if wait_s is None else wait_s)
        while True:
            with contextlib.suppress(OSError):
                if str(int(signal.SIGINT)) in os.pread(fd, 4096, 0).decode(errors="replace").split():
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def ready(self) -> None:
        """Turns Ctrl-C into KeyboardInterrupt again and says so: a signal now is forwarded, not a kill."""
        import threading

        if threading.current_thread() is threading.main_thread():
            from tflab.errors import install_sigint_handler

            install_sigint_handler()  # records that a SIGINT really came (exit 130), then KeyboardInterrupt
        self._send("ready")

    def finish(self, code: int, verb: str) -> int:
        """Flushes the report and sends ``exit CODE``; a report that could not be written is not a 0.

        Returns:
            ``code``; 141 when the parent's stdout went away; 2 when the verb
            returned 0 without writing any report (the user's code replaced
            ``sys.stdout``) or when the user's code closed the report's pipe.
            When it closed the status pipe too, the process ends here with
            `CHANNEL_LOST_EXIT` (the parent names it).
        """
        said = self.report.lost  # the verb already ended on it: its line is out
        try:
            self.report.flush()
        except BrokenPipeError:
            code = 141
        except ReportLost as e:
            if not said:
                with contextlib.suppress(Exception):
                    print(error_line(verb, e), file=sys.stderr)
            code = 2
        except OSError as e:
            print(f"tflab {verb}: error: the report could not be written: {e.strerror or e}", file=sys.stderr)
            code = 2
        if code == 0 and self.report.written == 0:
            print(f"tflab {verb}: error: no report was written (did your code replace sys.stdout?)",
                  file=sys.stderr)
            code = 2
        if _identity(self._status_fd) != self._status_id:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            self._real_exit(CHANNEL_LOST_EXIT)
        self._send(f"exit {code}")
        return code
