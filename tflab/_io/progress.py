"""A progress line on stderr for long work (tour, export, benchmarks)."""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from typing import Callable, Iterator


class Progress:
    """Prints ``[label i/n] message`` lines to stderr with elapsed seconds.

    Args:
        label: prefix, e.g. ``"tour"``.
        total: number of steps, or None when unknown.
        enabled: False silences it (``--json`` runs, tests).
    """

    def __init__(self, label: str, total: int | None = None, enabled: bool = True):
        self.label = label
        self.total = total
        self.enabled = enabled
        self.step = 0
        self.t0 = time.perf_counter()

    def __call__(self, message: str) -> None:
        """Starts the next step and prints its line."""
        self.step += 1
        if self.total and self.step > self.total:  # an uncounted step: never print "7/6"
            self.total = self.step
        self.note(message)

    def note(self, message: str) -> None:
        """Prints a line within the current step, without advancing the count."""
        if not self.enabled:
            return
        count = f"{self.step}/{self.total}" if self.total else f"{self.step}"
        elapsed = time.perf_counter() - self.t0
        print(f"[{self.label} {count} +{elapsed:5.1f}s] {message}", file=sys.stderr, flush=True)


# The progress line of the work in hand, for steps deep inside it (a check's per-op pass, a
# conversion) that take seconds on a large model and have no progress argument of their own.
_CURRENT: "contextvars.ContextVar" = contextvars.ContextVar("tflab_progress_note", default=None)


@contextlib.contextmanager
def reporting(note: Callable[[str], None] | None) -> Iterator[None]:
    """For the block, `step_note` lines go to ``note`` (e.g. a `Progress`'s ``note``); None silences them."""
    token = _CURRENT.set(note)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def step_note(message: str) -> None:
    """One progress line through the `reporting` block around the caller, if any (else nothing)."""
    note = _CURRENT.get()
    if note is not None:
        note(message)
