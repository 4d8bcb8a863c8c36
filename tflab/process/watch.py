"""A child's own half of being tied to its parent: `die_with_parent` and `watch_parent`.

`tflab.process.group.start_tied` asks the kernel for SIGKILL when the parent
dies, but that signal follows the thread that started the child, and a child
started by other means (a ``ChildGroup`` session) has none. So the child
watches too: ``prctl(PR_SET_PDEATHSIG)`` from inside, plus a thread that
exits when the parent is gone or a deadline passes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time


def die_with_parent(parent: str | None) -> None:
    """Asks Linux for SIGKILL when the supervising parent dies (``prctl(PR_SET_PDEATHSIG)``)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        if parent and os.getppid() != int(parent):
            os.kill(os.getpid(), signal.SIGKILL)  # the parent died before prctl ran


def watch_parent(parent: int, deadline_s: float) -> None:
    """In a child process: exits (status 124) once ``parent`` is no longer its parent, or after ``deadline_s`` s.

    A daemon thread looks every 0.2 s, so a child whose parent was SIGKILLed is never an orphan
    (the distribute workers, the TFLite converter workers, the tour's lane and labs).

    Args:
        parent: the parent's pid (``os.getppid()`` at the child's start).
        deadline_s: seconds after which the child exits anyway.
    """
    die_with_parent(str(parent))  # and SIGKILL from the kernel the moment the parent dies
    end = time.monotonic() + deadline_s

    def loop():
        while os.getppid() == parent and time.monotonic() <= end:
            time.sleep(0.2)
        os._exit(124)

    threading.Thread(target=loop, daemon=True, name="tflab-parent-watch").start()


def tie_to_parent(default_deadline_s: float, margin_s: float = 0.0) -> int:
    """In a helper child, first thing: ends with the process that started it; returns that pid.

    The parent is ``$TFLAB_PARENT_PID`` (set by `tflab.process.group.start_tied` and
    ``ChildGroup.start``), else ``os.getppid()``: a parent that died before this line ran is
    noticed at once (this process is then re-parented, so its ``getppid()`` is another pid),
    never watched as init for the whole deadline.

    Args:
        default_deadline_s: seconds to live when ``$TFLAB_DEADLINE_S`` is unset.
        margin_s: added to the deadline (the parent's own timeout ends it first).
    """
    from tflab.process.settings import get_float, get_int

    parent = get_int("TFLAB_PARENT_PID", os.getppid())
    watch_parent(parent, get_float("TFLAB_DEADLINE_S", default_deadline_s) + margin_s)
    return parent

