"""The one supervisor of tflab's child processes: start, watch, forward signals, kill on every exit path.

The ``tflab`` console script (`tflab.cli.supervise`) parses its arguments
without TensorFlow, then runs the verb in ONE child Python process through
`run_child` and judges how it ended (`describe_end`). The child is where
TensorFlow and the user's code run; whatever they do to the process
(``os._exit(7)``, closing fd 1, writing to ``sys.__stdout__``, a C++
``LOG(FATAL)``, a segfault, the OOM killer's SIGKILL) ends or corrupts the
child only, and the parent, which never imported TF, says in one line what
happened.

The protocol between the two ends (this module and `tflab.process.child_end`, the child's end):

* **report fd**: the child writes its report (text or JSON) to a pipe the
  parent copies to its own stdout. The child's fd 1 and fd 2 both go to a
  second pipe that the parent copies to its stderr, so nothing the user's
  code writes at the fd level can corrupt the report (``--json | jq`` stays
  valid). A closed or broken stdout of the parent is exit 141, quietly.
* **status fd**: the child writes ``ready`` once its handlers are installed,
  ``exit N`` when tflab itself returns N, and ``os_exit N`` when the user's
  code calls ``os._exit(N)`` (`ChildChannel` wraps ``os._exit`` for the
  child's own pid). A child that ends without ``exit N`` did not end through
  tflab: that is what `describe_end` names.
* **quiet fd**: a temporary file the parent owns. The child points its fd 2
  there while TF loads (TF's wheel prints cuInit noise through absl before
  logging is set up); when TF stops the process during that import (a bad
  ``TF_XLA_FLAGS`` is a ``LOG(QFATAL)``: exit 1, its ``F…`` line), the
  parent still reads the line from the file and quotes it.

Signals: the child starts with SIGINT ignored and turns Ctrl-C into
``KeyboardInterrupt`` when it says ``ready`` (inside tflab's ``try``), so a
Ctrl-C during Python's start-up cannot print a traceback. When this process
runs in the terminal's foreground (stdin a tty), the child shares its process
group, so the terminal's Ctrl-C and Ctrl-Z reach both and ``pdb`` or
``input()`` in the user's code can read the terminal; the parent then does not
forward a SIGINT the child got itself. Otherwise (scripts, CI, ``kill PID``)
the child gets its own process group and the parent forwards exactly one
SIGINT or SIGTERM. Before the child said ``ready`` (nothing written yet) it
is killed at once; after, it gets ``grace`` seconds to clean up, then SIGKILL
(its whole process group when it has its own). A second signal is not lost:
the parent records every signal (sticky) and the result carries the first.
The child asks the kernel for SIGKILL when the parent dies
(``PR_SET_PDEATHSIG``), so a parent killed with SIGKILL leaves no orphan.

Helpers tied to their parent (`start_tied`, `ChildGroup`, `guarded`) live in
`tflab.process.group`, the child's watch in `tflab.process.watch`, and the
one way a helper hands a result back in `tflab.process.channel` (the report
pipe here is the verb's live output stream, not a result). The Python API
does not come here: it runs in the caller's process, where ``os._exit`` in
user code cannot be caught (it ends the caller's process too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time

# The child's end of the protocol lives in `tflab.process.child_end`; its names are re-exported here.
from tflab.process.child_end import ENV as CHILD_FDS_ENV
from tflab.process.child_end import (  # noqa: F401
    CHANNEL_LOST_EXIT, ChildChannel, announce_temp, report_stream, supervised)
from tflab.process.group import end_marked_run, kill_orphans, mark_run, set_subreaper
from tflab.process.watch import die_with_parent

#: Exit code for a child that crashed: segfault, a native abort, SIGKILL
#: (out of memory), or an end tflab cannot explain. ``sysexits.h``'s
#: EX_SOFTWARE, "an internal software error has been detected".
CRASH_EXIT = 70

FATAL_LINE = re.compile(r"^F\d{4} [^\n]*\]\s*(?P<msg>[^\n]*)$", re.M)  # glog: F0000 00:00:… file.cc:234] msg
_TAIL = 64 * 1024


@dataclasses.dataclass
class ChildEnd:
    """How a supervised child ended.

    Attributes:
        returncode: the child's exit status; negative for a signal (``-9``).
        status: the lines the child wrote on the status fd (``ready``,
            ``exit 0``, ``os_exit 7``).
        stderr_tail: the last 64 KiB the child wrote to its fd 1 and 2, plus
            what the quiet fd caught while TF loaded.
        signal_received: the first SIGINT/SIGTERM the parent received and
            forwarded, or None.
        killed: True when the parent had to SIGKILL the child (no ``ready``
            yet, the grace period ran out, or the timeout).
        timed_out: True when ``timeout`` ran out.
        stdout_broken: True when the parent's stdout was closed or its reader
            went away (exit 141).
    """

    returncode: int
    status: list[str]
    stderr_tail: str
    signal_received: int | None = None
    killed: bool = False
    timed_out: bool = False
    stdout_broken: bool = False
    stdout_error: str | None = None  # the OS's words for a stdout that failed otherwise (ENOSPC, EIO)
    temp_removed: list[str] = dataclasses.field(default_factory=list)
    peak_rss: int | None = None  # bytes: the largest resident size of a reaped child (RUSAGE_CHILDREN)

    def exit_status(self) -> int | None:
        """The N of the child's ``exit N`` line: tflab returned N. None when the child ended otherwise."""
        for line in reversed(self.status):
            if line.startswith("exit "):
                return int(line.split()[1])
        return None

    def os_exit(self) -> int | None:
        """The N of ``os._exit(N)`` called by the user's code in the child, or None."""
        for line in self.status:
            if line.startswith("os_exit "):
                return int(line.split()[1])
        return None

    def fatal_line(self) -> str | None:
        """The last ``F…`` line of TF's or XLA's logging (``LOG(FATAL)``) the child printed, or None."""
        found = list(FATAL_LINE.finditer(self.stderr_tail))
        return found[-1].group(0).strip() if found else None


def announced_temps(status: list[str]) -> list[str]:
    """The temporary folders the child announced (``tmp PATH`` lines, `announce_temp`)."""
    return [line[4:] for line in status if line.startswith("tmp ")]


def remove_announced(status: list[str]) -> list[str]:
    """Removes the announced temporary folders that still exist and whose owner is gone; returns them.

    The supervisor survives its child's SIGKILL (the OOM killer), which no cleanup in the child can
    catch: the child's ``.OUT.tmp-*`` and ``$TMPDIR/tflab_*`` folders are removed here.
    """
    import shutil
    from pathlib import Path

    from tflab._io.paths import owner_gone

    removed = []
    for text in announced_temps(status):
        p = Path(text)
        if p.is_dir() and not p.is_symlink() and owner_gone(p) is not None:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(text)
    return removed


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


#: Signals that end a run as SIGTERM does (forwarded as SIGTERM; exit 128 + the signal): by their default
#: action a hang-up, SIGQUIT and SIGUSR1 killed tflab with no line and its temporary folders left.
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def run_child(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
              grace: float = 10.0, stdout_fd: int = 1, stderr_fd: int = 2,
              forward_signals: bool = True, reap_orphans: bool = False) -> ChildEnd:
    """Runs ``cmd`` (a Python child that opens a `ChildChannel`) to its end; see the module docstring.

    Args:
        cmd: the argv; ``sys.executable`` and a module that calls
            `ChildChannel.open`.
        env: the child's environment (default: this process's).
        timeout: seconds of wall clock before the child is killed
            (`ChildEnd.timed_out`); None waits for ever.
        grace: seconds a signalled child gets to clean up before SIGKILL.
        stdout_fd: where the report is copied (this process's stdout).
        stderr_fd: where the child's fd 1 and 2 are copied.
        forward_signals: install SIGINT/SIGTERM handlers that forward to the
            child (only possible in the main thread; elsewhere skipped).
        reap_orphans: make this process a child subreaper and kill, when the
            child has ended, every process its code left behind (forked,
            spawned, daemonized). Only for a process whose sole child this is
            (the ``tflab`` supervisor): it kills every child of this process.

    Returns:
        A `ChildEnd`. The child and its process group are gone when this
        returns or raises.
    """
    report_r, report_w = os.pipe()
    status_r, status_w = os.pipe()
    err_r, err_w = os.pipe()
    quiet = tempfile.TemporaryFile()
    notice = tempfile.TemporaryFile()  # each signal this process receives, for the child to read (child_end)
    tty = f"{int(os.isatty(stdout_fd))},{int(os.isatty(stderr_fd))}"
    child_env = dict(os.environ if env is None else env)
    child_env[CHILD_FDS_ENV] = f"{report_w},{status_w},{quiet.fileno()},{tty},{notice.fileno()}"
    child_env["TFLAB_SUPERVISOR_PID"] = str(os.getpid())
    received: list[int] = []
    state = {"ready": False, "deadline": None, "killed": False}
    proc = None
    same_group = _terminal_foreground()
    marked = None
    if reap_orphans:
        reap_orphans = set_subreaper()
        marked = mark_run(child_env)  # a process that left its group and session (setsid) is still ended

    def kill_group() -> None:
        state["killed"] = True
        if not same_group:  # never killpg our own group: it holds this process (and the shell's job)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            proc.kill()

    def on_signal(signum, frame):
        received.append(signum)  # sticky: judged after the child is gone
        with contextlib.suppress(OSError):  # a SIGINT the child gets and this process does not is its code's
            os.write(notice.fileno(), f"{int(signum)}\n".encode())
        if proc is None or proc.poll() is not None:
            return
        if len(received) > 1:
            return  # one forward; the grace deadline is already running
        with contextlib.suppress(OSError):  # "ready" may be in the pipe, not read by the loop yet
            if not state["ready"] and not os.get_blocking(status_r):  # (blocking: the loop has not begun)
                status_buf.extend(os.read(status_r, 65536))
                state["ready"] = b"ready\n" in status_buf
        if not state["ready"]:
            kill_group()  # Python start-up: nothing written yet, nothing to clean
            return
        if not (same_group and signum == signal.SIGINT):  # the terminal's Ctrl-C reached the child too
            with contextlib.suppress(OSError):  # SIGHUP/SIGQUIT/SIGUSR1: the child cleans up as for SIGTERM
                os.kill(proc.pid, signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
        state["deadline"] = time.monotonic() + grace

    previous = {}
    if forward_signals:
        import threading

        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, *ENDING_SIGNALS):
                if signal.getsignal(s) is signal.SIG_IGN:
                    continue  # nohup, a background job of a script: the caller asked not to be stopped
                previous[s] = signal.signal(s, on_signal)
    stdout_broken = False
    stdout_error = None
    tail = bytearray()
    status_buf = bytearray()
    timed_out = False
    try:
        def child_setup():  # runs in the forked child before exec
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # kept across exec; ChildChannel.ready undoes it
            if not same_group:
                os.setpgrp()

        proc = subprocess.Popen(cmd, env=child_env, stdin=None, stdout=err_w, stderr=err_w,
                                pass_fds=(report_w, status_w, quiet.fileno(), notice.fileno()),
                                preexec_fn=child_setup)
        if received:  # a signal that came while Popen ran (``proc`` unset) is forwarded now, not dropped
            on_signal(received.pop(0), None)
        for fd in (report_w, status_w, err_w):
            os.close(fd)
        report_w = status_w = err_w = -1
        start = time.monotonic()
        sel = selectors.DefaultSelector()
        for fd in (report_r, status_r, err_r):
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        open_fds = {report_r, status_r, err_r}
        while True:
            for key, _ in sel.select(0.05):
                fd = key.fd
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                    open_fds.discard(fd)
                    continue
                if fd == report_r:
                    if not stdout_broken:
                        try:
                            _write_all(stdout_fd, data)
                        except (BrokenPipeError, OSError) as e:
                            stdout_broken = True
                            if not isinstance(e, BrokenPipeError):  # ENOSPC, EIO: not a reader that left
                                stdout_error = e.strerror or str(e)
                            # The child's next report write gets EPIPE: it ends quietly with 141.
                            sel.unregister(fd)
                            open_fds.discard(fd)
                            os.close(fd)
                            report_r = -1
                elif fd == err_r:
                    tail += data
                    del tail[:-_TAIL]
                    with contextlib.suppress(OSError):
                        _write_all(stderr_fd, data)
                else:
                    status_buf += data
                    if b"ready\n" in status_buf:
                        state["ready"] = True
            if proc.poll() is not None:
                ended = state.setdefault("ended", time.monotonic())
                if report_r not in open_fds and status_r not in open_fds:
                    break
                if time.monotonic() - ended > 0.5:
                    break  # a process the child forked holds a pipe open; the child itself is gone
            now = time.monotonic()
            if state["deadline"] is not None and now > state["deadline"] and proc.poll() is None:
                kill_group()
            if timeout is not None and now - start > timeout and proc.poll() is None:
                timed_out = True
                kill_group()
        # Drain what is left without waiting for grandchildren.
        for fd in list(open_fds):
            with contextlib.suppress(OSError):
                while data := os.read(fd, 65536):
                    if fd == err_r:
                        tail += data
                        with contextlib.suppress(OSError):
                            _write_all(stderr_fd, data)
                    elif fd == status_r:
                        status_buf += data
                    elif not stdout_broken:
                        try:
                            _write_all(stdout_fd, data)
                        except OSError as e:
                            stdout_broken = True
                            if not isinstance(e, BrokenPipeError):
                                stdout_error = e.strerror or str(e)
        sel.close()
    finally:
        if proc is not None and proc.poll() is None:
            kill_group()
        if proc is not None:
            proc.wait()
            if not same_group:  # on every end, not only signals: what the user's code forked
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)  # what the child started in its group
            if reap_orphans:
                kill_orphans()  # what left the group (setsid, double fork): re-parented here
        if marked is not None:
            end_marked_run(*marked)  # what left and was re-parented elsewhere (a setsid -f, a daemon)
        for fd in (report_r, status_r, err_r, report_w, status_w, err_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for s, h in previous.items():
            signal.signal(s, h)
    quiet.seek(0)
    quiet_text = quiet.read()[-_TAIL:].decode(errors="replace")
    quiet.close()
    notice.close()
    status_lines = status_buf.decode("utf-8", "surrogateescape").splitlines()  # a tmp path's own bytes back
    peak = None
    with contextlib.suppress(Exception):
        import resource

        peak = int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024  # Linux reports KiB
    return ChildEnd(returncode=proc.returncode, peak_rss=peak or None,
                    status=status_lines, temp_removed=remove_announced(status_lines),
                    stdout_error=stdout_error,
                    stderr_tail=quiet_text + tail.decode(errors="replace"),
                    signal_received=received[0] if received else None,
                    killed=state["killed"], timed_out=timed_out, stdout_broken=stdout_broken)


def _terminal_foreground() -> bool:
    """True when stdin is a terminal whose foreground process group is this process's."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _signal_name(num: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(num).name
    return f"signal {num}"


def describe_end(end: ChildEnd, memory_limit: str | None = None) -> tuple[int, str | None]:
    """The exit code and the one line (or None: nothing to add) for how a child ended.

    Args:
        end: from `run_child`.
        memory_limit: words for the memory limit in force, named for a SIGKILL
            (`tflab.process.memory.limit_text`).

    Returns:
        ``(code, line)``: the child's own code when tflab returned it (it
        printed its own line); 141 for a broken stdout; 130/143 with
        "interrupted"/"terminated" for a signal; 2 with a cause for the
        user's ``os._exit`` or a fatal flag error in ``XLA_FLAGS`` /
        ``TF_XLA_FLAGS``; `CRASH_EXIT` for a crash.
    """
    if end.stdout_error is not None:  # a full disk is not a reader that went away
        return 2, f"error: the report could not be written to stdout: {end.stdout_error}"
    if end.stdout_broken:
        return 141, None
    own = end.exit_status()
    if own is not None:
        if own == 128 + signal.SIGTERM and end.signal_received in ENDING_SIGNALS:
            return 128 + end.signal_received, None  # SIGHUP forwarded as SIGTERM: the shell's 129, not 143
        return own, None
    if end.signal_received is not None:
        code = 128 + end.signal_received
        word = ("interrupted" if end.signal_received == signal.SIGINT else "terminated"
                + ("" if end.signal_received == signal.SIGTERM else f" ({_signal_name(end.signal_received)})"))
        if end.killed and "ready" in end.status:
            word += " (it did not stop within the grace period and was killed)"
        return code, word
    if end.timed_out:
        return CRASH_EXIT, "error: it ran past its time limit and was killed"
    if end.returncode == CHANNEL_LOST_EXIT:
        said = "closed the pipe tflab's report travels on" in end.stderr_tail
        return 2, (None if said else
                   "error: your code closed the file descriptors tflab's report and status travel on (ones it "
                   "did not open), so the report is lost; close only the file descriptors your code opened")
    n = end.os_exit()
    if n is not None:
        return 2, (f"error: your code ended the process with os._exit({n}) before tflab wrote its report; "
                   f"return or raise instead (tflab cannot report on a process that was ended under it)")
    from tflab.process.memory import out_of_memory_line  # before TF's fatal check, which may be its symptom

    limited = out_of_memory_line(end.stderr_tail, memory_limit)
    if limited is not None:
        return 2, limited
    fatal = end.fatal_line()
    if fatal is not None:
        flags = [v for v in ("XLA_FLAGS", "TF_XLA_FLAGS") if re.search(rf"\b{v}\b", fatal)]
        if not flags:  # the line may not name the variable: a set variable whose flag it quotes
            flags = [v for v in ("TF_XLA_FLAGS", "XLA_FLAGS")
                     if os.environ.get(v, "").strip() and any(
                         tok.split("=")[0] in fatal for tok in os.environ[v].split() if tok.startswith("--"))]
        if flags:
            v = flags[0]
            return 2, (f"error: TensorFlow stopped on a bad {v}: {fatal!r}; fix or unset {v} "
                       f"(now {os.environ.get(v, '')!r})")
        return CRASH_EXIT, f"error: TensorFlow stopped the process (a fatal check): {fatal!r}"
    rc = end.returncode
    if rc == -signal.SIGKILL:
        from tflab.process.memory import NO_LIMIT, machine_total

        total = machine_total()
        if (memory_limit or "").startswith(NO_LIMIT) and end.peak_rss and total and end.peak_rss < total / 2:
            # Measured: the out-of-memory killer takes the largest process when memory runs out; this one
            # never held half the machine, and no limit of its own was set.
            return CRASH_EXIT, (f"error: the process was killed with SIGKILL, not for memory: no cgroup or "
                                f"RLIMIT_AS limit is set and its peak resident memory was {_gib(end.peak_rss)} "
                                f"of the machine's {_gib(total)}; something sent it SIGKILL (your code, another "
                                f"process, a job scheduler's time limit)")
        limit = f" (memory limit in force: {memory_limit})" if memory_limit else ""
        return CRASH_EXIT, ("error: the process was killed with SIGKILL, most likely by the kernel's "
                            f"out-of-memory killer{limit}; use smaller inputs or give it more memory")
    cause = None
    if rc in (-signal.SIGSEGV, -signal.SIGABRT) and os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip():
        # Measured, not guessed: a child tries bfloat16 under the same cap (oneDNN segfaults on a
        # bfloat16 MatMul, and aborts with dnnl::error elsewhere; tflab.process.bfloat16_probe).
        from tflab.process.bfloat16_probe import bfloat16_failure

        with contextlib.suppress(Exception):
            cause = bfloat16_failure(ask_tf=False)
    measured = f"; measured after it: {cause}" if cause else ""
    if rc == -signal.SIGSEGV:
        return CRASH_EXIT, ("error: the process crashed with a segmentation fault (SIGSEGV) in native "
                            "code (TensorFlow, a custom op or an extension your code loaded)" + measured)
    if rc < 0:
        return CRASH_EXIT, f"error: the process was killed by {_signal_name(-rc)}" + measured
    last = next((ln for ln in reversed(end.stderr_tail.splitlines()) if ln.strip()), "")
    return CRASH_EXIT, (f"error: the process ended with status {rc} before tflab wrote its report"
                        + (f"; its last line: {last.strip()[:300]!r}" if last else ""))



def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"
