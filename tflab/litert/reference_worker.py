"""The float reference converted in a worker process while this one computes the end-to-end bound.

``check_tflite`` needs two long pieces of work that do not depend on each other: the float
(``"none"``) conversion of the SavedModel, whose weights are the per-op check's reference, and the
gradients behind the end-to-end bound (`tflab.litert.bounds.sensitivity`). `FloatReferenceWorker`
starts the conversion in a `tflab.litert.workers` process (the same worker ``tflab export`` uses,
so a converter abort costs the reference, not the check), the caller computes the bound, and
`FloatReferenceWorker.result` then waits for the bytes. The conversion is the same
`tflab.litert.conversion.convert` call made in-process otherwise, so the bytes are the same.

A worker costs a fresh Python with TF imported (seconds); it pays back only when the conversion
does too. `worth_a_worker` says when: the SavedModel's variables hold at least
`WORKER_MIN_VARIABLE_BYTES`, the size from which the conversion (freezing, constant folding and
serializing those weights) takes longer than that start-up.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

# 1 MiB of variables: MobileNetV2 (alpha 0.35) has ~6 MiB and converts in ~7 s on an idle core,
# a tiny test model a few KiB and converts in well under the ~3 s a worker takes to import TF.
WORKER_MIN_VARIABLE_BYTES = 1 << 20


def variable_bytes(saved_model_dir: str | os.PathLike) -> int:
    """Bytes of the SavedModel's variable shards (``variables/variables.data-*``), 0 where there are none."""
    folder = os.path.join(os.fspath(saved_model_dir), "variables")
    try:
        return sum(e.stat().st_size for e in os.scandir(folder) if e.name.startswith("variables.data-"))
    except OSError:
        return 0


def worth_a_worker(saved_model_dir: str | os.PathLike) -> bool:
    """Whether converting in a worker beside the bound is expected to save time (`WORKER_MIN_VARIABLE_BYTES`)."""
    return variable_bytes(saved_model_dir) >= WORKER_MIN_VARIABLE_BYTES


class FloatReferenceWorker:
    """Converts ``saved_model_dir`` with the ``"none"`` recipe in a worker process, started at once.

    Args:
        saved_model_dir: the SavedModel folder.
        batches: the example batches (`tflab.examples.Examples` or a list of dicts); the float
            recipe does not calibrate, the worker only reads them as `tflab.export` passes them.
        say: a progress-line callable for the worker's lines, or None.

    Use ``with FloatReferenceWorker(...) as w: ...; data = w.result()``: leaving the block stops a
    worker still running and removes its folder.
    """

    def __init__(self, saved_model_dir: str, batches, say: Callable[[str], None] | None = None) -> None:
        from tflab.litert.pool import ConversionPool
        from tflab.litert.workers import convert_isolated, reset_workers, save_examples

        self._tmp = tempfile.TemporaryDirectory(prefix="tflab_reference_")
        self._pool = None
        say = say or (lambda msg: None)
        try:
            npz = os.path.join(self._tmp.name, "examples.npz")
            save_examples(list(batches), npz)
            reset_workers()
            self._pool = ConversionPool(["none"], lambda subset, done: convert_isolated(
                os.fspath(saved_model_dir), self._tmp.name, subset, npz, say, done))
        except BaseException:
            self.close()
            raise

    def result(self, say: Callable[[str], None] | None = None) -> bytes | None:
        """Waits for the worker: the float flatbuffer, or None when it did not convert (the caller then
        converts in-process and says what fails). ``say`` hears a line when it still has to wait."""
        if say is not None and self._pool.pending():
            say("waiting for the float reference's conversion")
        try:
            msg = self._pool["none"]
        except Exception:  # noqa: BLE001 - the worker died before converting: converted in-process instead
            return None
        if msg.get("event") != "done":
            return None
        return (Path(self._tmp.name) / msg["file"]).read_bytes()

    def close(self, abandon: bool = False) -> None:
        """Stops the worker when ``abandon`` (the check is being given up) and removes its folder."""
        from tflab.litert.workers import stop_workers

        if abandon and self._pool is not None and self._pool.pending():
            stop_workers()
        self._tmp.cleanup()

    def __enter__(self) -> "FloatReferenceWorker":
        return self

    def __exit__(self, kind, value, tb) -> None:
        self.close(abandon=kind is not None or (self._pool is not None and bool(self._pool.pending())))


def reference_beside_bounds(saved_model_dir: str, batches, isolate: bool | None,
                            say: Callable[[str], None]) -> FloatReferenceWorker | None:
    """A `FloatReferenceWorker` started beside the bound's gradients, or None: ``isolate`` False, the
    gradients already cached (nothing to overlap), a SavedModel below `WORKER_MIN_VARIABLE_BYTES`
    with ``isolate`` None, or a worker that could not start (the reference then converts in-process)."""
    from tflab.litert.bounds import sensitivity_cached

    if isolate is False or sensitivity_cached(saved_model_dir, batches):
        return None
    if isolate is None and not worth_a_worker(saved_model_dir):
        return None
    say("converting the float reference in a worker process while the end-to-end bound is computed")
    try:
        return FloatReferenceWorker(saved_model_dir, batches, say)
    except Exception:  # noqa: BLE001 - no worker: the reference converts in-process, as without one
        return None
