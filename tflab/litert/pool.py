"""TFLite conversions in parallel worker processes, each variant handed on as soon as it is done.

The TFLite converter (MLIR passes, then FlatBuffer export; for ``int8`` also
calibration over the representative dataset) runs on one core for seconds
per variant. `ConversionPool` splits the variants over
``min(len(variants), schedulable CPUs)`` workers, each one
`tflab.litert.workers.convert_isolated` call (its own child processes, so a
converter abort still costs one variant only), round-robin in the given
order so the first variants finish first. The caller reads each variant's
result with ``pool[q]``, which waits for that variant only: the LiteRT check
of a finished variant runs while the other workers still convert.

"Schedulable CPUs" is ``os.sched_getaffinity(0)`` (the CPUs this process
may run on: a container's or ``taskset``'s limit, not the host's count).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Sequence

from tflab.errors import TflabError


def schedulable_cpus() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count()`` where absent)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


class ConversionPool:
    """Converts ``quants`` in parallel worker threads, each driving its own converter processes.

    Args:
        quants: variant names in check order (``"none"`` first: the others'
            size ratios need its size).
        convert: ``convert(subset, on_result)`` converts the variants of
            ``subset`` in order and calls ``on_result(q, message)`` for each
            as soon as it is done (message: the worker's JSON event, e.g.
            ``{"event": "done", "file": …, "seconds": …, "bytes": …}``).
        progress: a progress-line callable (``"converting dynamic"`` lines
            come from ``convert``; this adds the worker count).
        workers: cap on parallel workers; default `schedulable_cpus()`.

    Example:

    >>> pool = ConversionPool(["none", "dynamic"], lambda qs, done: [done(q, {"event": "done"}) for q in qs])
    >>> pool.workers, pool["dynamic"]["event"]
    (2, 'done')
    """

    def __init__(self, quants: Sequence[str], convert: Callable[[list[str], Callable[[str, dict], None]], object],
                 progress: Callable[[str], None] | None = None, workers: int | None = None) -> None:
        self.quants = list(quants)
        self.workers = max(1, min(len(self.quants), workers or schedulable_cpus()))
        self._results: dict[str, dict] = {}  # variant, or "<variant>/<event>" for a worker's later event
        self._errors: dict[str, BaseException] = {}
        self._finished: set[str] = set()  # variants whose worker has ended
        self._cond = threading.Condition()
        if progress is not None and self.workers > 1:
            # a line within the current step, not a step: the total counts each variant's conversion
            getattr(progress, "note", progress)(
                f"converting {len(self.quants)} TFLite variants in {self.workers} worker processes "
                f"({schedulable_cpus()} schedulable CPUs)")
        self._threads = []
        for i in range(self.workers):
            subset = self.quants[i::self.workers]
            t = threading.Thread(target=self._run, args=(convert, subset), name=f"tflab-convert-{i}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, convert, subset: list[str]) -> None:
        def on_result(q: str, msg: dict) -> None:
            with self._cond:
                self._results[q] = msg
                self._cond.notify_all()
        try:
            convert(subset, on_result)
        except BaseException as e:  # handed to whoever waits for these variants
            with self._cond:
                for q in subset:
                    self._errors.setdefault(q, e)
                self._cond.notify_all()
        finally:
            with self._cond:  # a variant the worker never reported (it stopped early)
                for q in subset:
                    if q not in self._results and q not in self._errors:
                        self._errors[q] = _NotConverted(q)
                self._finished.update(subset)
                self._cond.notify_all()

    def __getitem__(self, q: str) -> dict:
        """Waits for variant ``q``; returns its message.

        Raises:
            KeyError: ``q`` is not one of the pool's variants.
            TflabError: its worker failed before converting it (the worker's own error).
        """
        if q not in self.quants:
            raise KeyError(q)
        with self._cond:
            self._cond.wait_for(lambda: q in self._results or q in self._errors)
            if q in self._results:
                return self._results[q]
            raise self._errors[q]

    def get(self, q: str, default=None):
        """``pool[q]`` for a variant of the pool, else ``default`` (waits like ``pool[q]``)."""
        return self[q] if q in self.quants else default

    def event(self, q: str, name: str) -> dict | None:
        """Waits for the ``name`` event the worker converting ``q`` reports after its conversions
        (``"debugger"``: `tflab.litert.workers.take_calibration`); None when that worker ended without one."""
        key = f"{q}/{name}"
        with self._cond:
            self._cond.wait_for(lambda: key in self._results or q in self._finished or q not in self.quants)
            return self._results.get(key)

    def pending(self) -> int:
        """Variants not yet converted (nor failed)."""
        with self._cond:
            return sum(q not in self._results and q not in self._errors for q in self.quants)

    def join(self) -> None:
        """Waits for every worker thread."""
        for t in self._threads:
            t.join()


class _NotConverted(TflabError):
    def __init__(self, q: str) -> None:
        super().__init__(f"the converter worker stopped before converting {q}")
