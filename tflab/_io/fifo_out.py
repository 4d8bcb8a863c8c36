"""Output paths that are an existing device or FIFO: written in place, and a FIFO held open from the
check on (`tflab._io.paths.output_path` calls `claim_fifo`; `OutputPath.write` calls `write_in_place`).

A FIFO output with no reader was found only when the verb wrote it, after its whole work; an
``open(FIFO, "w")`` waits for a reader for ever. Here the FIFO is opened without blocking when its
path is checked (before TF loads), held, and written through the same descriptor at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

from tflab.errors import UsageError

__all__ = ["FIFO_READER_GRACE_S", "claim_fifo", "release_fifos", "write_in_place"]

FIFO_READER_GRACE_S = 2.0
"""How long a write to a FIFO waits for its first reader before it is refused, in seconds."""


# FIFO outputs opened for writing by `claim_fifo`, by real path, until `write_in_place` or `release_fifos`.
_HELD_FIFOS: dict[str, int] = {}


def _open_fifo_writer(path: Path, flag: str) -> int:
    """``path`` opened for writing without blocking, once a reader has it open (``FIFO_READER_GRACE_S``)."""
    import errno as _errno
    import time as _time

    deadline = _time.monotonic() + FIFO_READER_GRACE_S
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            if e.errno == _errno.ENXIO and _time.monotonic() < deadline:
                _time.sleep(0.02)  # a reader started beside tflab (cmd & cat FIFO) may open it a moment later
                continue
            error = e
        if error.errno == _errno.ENXIO:
            raise UsageError(f"{flag} {path}: is a FIFO that no process reads, so the write would wait for "
                             f"ever; start its reader first (e.g. cat {path} &), or give a file path") from None
        raise UsageError(f"{flag} {path}: cannot write it: {error.strerror or error}") from None


def claim_fifo(path: Path, flag: str) -> None:
    """Opens a FIFO output for writing now, before the verb's work, and holds it until it is written.

    ``--html FIFO`` (any file output given a FIFO) with no reader was found only after the whole
    work, when the page was written. It is opened here, as every output path is checked up front
    (`output_path`): no reader within ``FIFO_READER_GRACE_S`` is one line now. The descriptor is
    held, not closed: closing a FIFO's only writer is an end of file for its reader (``cat`` would
    end before the page is written). `write_in_place` writes through it and closes it; a process
    that never writes (the supervisor, whose child writes) closes it when it ends, after the child.

    Raises:
        UsageError: no process reads the FIFO, or it cannot be opened (the OS's words).
    """
    key = os.path.realpath(path)
    if key not in _HELD_FIFOS:
        _HELD_FIFOS[key] = _open_fifo_writer(path, flag)


def release_fifos() -> None:
    """Closes the FIFO outputs held by `claim_fifo` and not written (a verb that failed): their readers
    see the end of the file (`tflab.cli.main` calls it as a verb ends)."""
    while _HELD_FIFOS:
        _, fd = _HELD_FIFOS.popitem()
        try:
            os.close(fd)
        except OSError:
            pass


def write_in_place(path: Path, payload: bytes, flag: str) -> None:
    """Writes ``payload`` into an existing device or FIFO, never blocking on a FIFO nobody reads.

    ``open(FIFO, "w")`` waits for a reader for ever (open(2)), after the whole verb's work. The
    path is opened with ``O_NONBLOCK``: a FIFO with no reader fails at once with ENXIO (fifo(7)) and
    is one line after a short grace (``FIFO_READER_GRACE_S``) for a reader started beside tflab;
    with a reader, blocking writes resume so a reader that drains slowly gets it all.

    Raises:
        UsageError: no process reads the FIFO, or the write failed (the OS's words).
    """
    fd = _HELD_FIFOS.pop(os.path.realpath(path), None)  # opened up front by `claim_fifo`
    if fd is None:
        fd = _open_fifo_writer(path, flag)
    try:
        os.set_blocking(fd, True)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write it: {e.strerror or e}") from None
    finally:
        os.close(fd)
