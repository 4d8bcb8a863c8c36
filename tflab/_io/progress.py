"""A progress line on stderr for long work (tour, export, benchmarks)."""

from __future__ import annotations

import sys
import time


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
