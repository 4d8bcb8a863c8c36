"""TFLite conversions in worker processes: a converter crash costs one variant, not the export.

The MLIR converter can abort the whole process (LLVM fatal errors call
``abort()``), so `tflab.export` converts each variant in a child process,
``python -m tflab.litert.workers SAVED_MODEL OUTDIR Q1,Q2 EXAMPLES.npz``, that
prints one JSON line per event (start, done, error, unsupported). A dead worker
is reported as crashed for the variant it was converting, and a fresh worker
takes the rest. The children are one `tflab.process.group.ChildGroup`, killed on
every exit path (`stop_workers`); `tflab.litert.pool` runs several at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from tflab.errors import TflabError
from tflab.examples import load_examples

# Fault injection for the crash-isolation test: the worker aborts (like an
# LLVM fatal error) when it starts converting this variant.
CRASH_ENV = "TFLAB_EXPORT_WORKER_CRASH"


def _worker_main(argv: Sequence[str]) -> int:
    """``python -m tflab.litert.workers --worker SAVED_MODEL OUTDIR Q1,Q2 EXAMPLES.npz [--keep-calibration]``:
    convert, one JSON line each; with ``--keep-calibration`` the int8 conversion's calibrated model is
    written beside it (`CALIBRATED_FILE`) for QuantizationDebugger (`tflab.litert.attribution`)."""
    import logging

    saved_model, outdir, quants, examples_path = argv[:4]
    keep_calibration = "--keep-calibration" in argv[4:]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tflab.process.settings import get as setting
    from tflab.process.watch import tie_to_parent

    # Its own session (tflab.process.group.ChildGroup), so a group kill does not reach it: it ends
    # itself when its parent is gone (a SIGKILLed export or tour lane), instead of converting on.
    tie_to_parent(86400.0)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    from tflab.errors import TflabError as _Err
    from tflab.litert.conversion import UnsupportedOpsError, convert, examples_digest, recorded_calibration

    batches = load_examples(examples_path)
    debug_from = None
    for q in quants.split(","):
        print(json.dumps({"event": "start", "quantization": q}), flush=True)
        if setting(CRASH_ENV) == q:
            os.abort()
        t0 = time.perf_counter()
        try:
            model = convert(saved_model, q, batches, keep_calibration=keep_calibration)
        except UnsupportedOpsError as e:
            print(json.dumps({"event": "unsupported", "quantization": q, "error": str(e), "ops": list(e.ops),
                              "kind": e.kind, "signatures": e.signatures}),
                  flush=True)
            return 0
        except Exception as e:  # a converter failure costs this variant only
            msg = str(e) if isinstance(e, _Err) else f"TFLite {q} conversion failed: {type(e).__name__}: " + (
                (str(e).strip().splitlines() or [""])[0][:300])
            failure = getattr(e, "failure", None)  # the converter's cause, op and node (ConversionFailed)
            print(json.dumps({"event": "error", "quantization": q, "error": msg, "seconds": time.perf_counter() - t0,
                              "failure": failure.to_dict() if failure is not None else None}), flush=True)
            continue
        seconds = time.perf_counter() - t0
        final = os.path.join(outdir, f"model_{q}.tflite")
        part = final + ".part"
        with open(part, "wb") as f:
            f.write(model)
        os.replace(part, final)
        done = {"event": "done", "quantization": q, "file": os.path.basename(final), "seconds": seconds,
                "bytes": len(model)}
        calibrated = recorded_calibration(saved_model, batches) if keep_calibration and q == "int8" else None
        if calibrated is not None:
            with open(os.path.join(outdir, CALIBRATED_FILE), "wb") as f:
                f.write(calibrated)
            done.update(calibrated=CALIBRATED_FILE, examples_digest=examples_digest(batches), debugger_pending=True)
            debug_from = calibrated
        print(json.dumps(done), flush=True)
    if debug_from is not None:
        _debugger_models(debug_from, outdir)
    return 0


def _debugger_models(calibrated: bytes, outdir: str) -> None:
    """After this worker's conversions: QuantizationDebugger's first two quantizations of the int8
    calibration (seconds each on a CNN; they do not depend on the per-op check), made here while the
    export checks the variants, written beside them and named in a ``debugger`` event."""
    print(json.dumps({"event": "note", "quantization": "int8", "text": "int8: quantizing QuantizationDebugger's "
                      "instrumented and plain models from the calibration (for the kept-float fix)"}), flush=True)
    try:
        from tflab._tf.calibration import debugger_models

        models = debugger_models(calibrated)
    except Exception:  # noqa: BLE001 - an optimization: the export quantizes them itself
        models = {}
    for kind, data in models.items():
        part = os.path.join(outdir, DEBUGGER_FILES[kind])
        with open(part + ".tmp", "wb") as f:
            f.write(data)
        os.replace(part + ".tmp", part)
    print(json.dumps({"event": "debugger", "quantization": "int8", "files": {k: DEBUGGER_FILES[k] for k in models}}),
          flush=True)


# The int8 conversion's calibrated model, written by a worker with --keep-calibration; the export
# reads it (`take_calibration`) and removes it before publishing.
CALIBRATED_FILE = "int8.calibrated.tflite.part"
# ...and QuantizationDebugger's models quantized from it (`tflab._tf.calibration.debugger_models`).
DEBUGGER_FILES = {"debug": "int8.debug.tflite.part", "nondebug": "int8.nondebug.tflite.part"}


def take_calibration(saved_model: str, outdir: str, msg: dict, batches,
                     debugger: Callable[[], dict | None] | None = None) -> None:
    """Keeps the calibrated model a worker wrote for ``msg`` (`tflab.litert.conversion.remember_calibration`)
    when it was calibrated on these ``batches``, and removes its file.

    ``debugger``: waits for the worker's ``debugger`` event (None when the worker ended without one);
    kept with the calibration, so QuantizationDebugger's models are read from the worker's files when
    the kept-float fix needs them (`debugger_files`).
    """
    from tflab.litert.conversion import examples_digest, remember_calibration

    name = msg.get("calibrated")
    if not name:
        return
    path = os.path.join(outdir, name)
    try:
        data = Path(path).read_bytes()
    except OSError:
        return
    finally:
        if os.path.exists(path):
            os.remove(path)
    if msg.get("examples_digest") == examples_digest(batches):
        later = None
        if debugger is not None and msg.get("debugger_pending"):
            later = lambda: debugger_files(outdir, debugger())  # noqa: E731
        remember_calibration(saved_model, msg["examples_digest"], data, later=later)


def debugger_files(outdir: str, event: dict | None) -> dict[str, bytes]:
    """The models a worker's ``debugger`` event names (``{"debug": bytes, "nondebug": bytes}``), files removed;
    ``{}`` without an event or when one is missing."""
    got: dict[str, bytes] = {}
    for kind, file in ((event or {}).get("files") or {}).items():
        path = os.path.join(outdir, os.path.basename(str(file)))
        try:
            got[str(kind)] = Path(path).read_bytes()
        except OSError:
            pass
    remove_debugger_files(outdir)
    return got if set(got) == set(DEBUGGER_FILES) else {}


def remove_debugger_files(outdir: str, pool=None) -> None:
    """Removes what a worker's debugger step left in ``outdir`` (before the export publishes it), after
    ``pool``'s workers ended (`tflab.litert.pool.ConversionPool.join`) when one is given."""
    if pool is not None:
        pool.join()
    for file in DEBUGGER_FILES.values():
        for path in (os.path.join(outdir, file), os.path.join(outdir, file + ".tmp")):
            if os.path.exists(path):
                os.remove(path)


def save_examples(batches: list[dict[str, np.ndarray]], path: str) -> None:
    def plain(a: np.ndarray) -> np.ndarray:
        # Object arrays of bytes need pickle to load; fixed-width bytes do not.
        return a.astype(bytes) if a.dtype.kind == "O" else a

    np.savez(path, **{f"{i}/{k}": plain(a) for i, b in enumerate(batches) for k, a in b.items()})


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def convert_isolated(saved_model: str, outdir: str, quants: list[str], examples_npz: str,
                      progress: Callable[[str], None],
                      on_result: Callable[[str, dict], None] | None = None,
                      keep_calibration: bool = False, forks: "_SharedForks | None" = None) -> dict[str, dict]:
    """Converts variants in worker processes; a crash costs only the variant it was converting.
    ``on_result(q, message)`` hears of each variant as soon as it is done (`tflab.litert.pool`);
    ``keep_calibration``: the int8 message names the calibrated model's file (`take_calibration`);
    ``forks``: the workers are forks of its server (`convert_in_pool`), released when this returns."""
    try:
        return _convert_isolated(saved_model, outdir, quants, examples_npz, progress, on_result, keep_calibration,
                                 forks)
    finally:
        if forks is not None:
            forks.release()


def _convert_isolated(saved_model, outdir, quants, examples_npz, progress, on_result, keep_calibration,
                      forks) -> dict[str, dict]:
    results: dict[str, dict] = {}
    pending = list(quants)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    while pending and not _ABANDONED.is_set():
        args = [saved_model, outdir, ",".join(pending), examples_npz] + ["--keep-calibration"] * keep_calibration
        proc = forks.spawn(args) if forks is not None else None
        if proc is None:  # a fresh process (one worker, or no fork server)
            proc = _workers().start([sys.executable, "-m", "tflab.litert.workers", "--worker", *args], env,
                                    waits=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        current = None
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # the converter's own prints
            q = msg.get("quantization")
            if msg["event"] == "note":  # a step within the worker's work
                getattr(progress, "note", progress)(str(msg.get("text", "")))
            elif msg["event"] == "debugger":  # after its conversions: `take_calibration`'s models
                if on_result is not None:
                    on_result(f"{q}/debugger", msg)
            elif msg["event"] == "start":
                current = q
                progress(f"converting {q}")
            else:
                results[q] = msg
                pending.remove(q)
                current = None
                if on_result is not None:
                    on_result(q, msg)
                if msg["event"] == "unsupported":
                    pending = []
        stderr = proc.stderr.read() if proc.stderr else ""
        code = proc.wait()
        _workers().forget(proc)
        if current is not None:
            # The worker died inside the converter: report it, drop its partial file, go on.
            from tflab.process.stderr import cause_line  # TF's import-time log lines are not the cause

            tail = cause_line(stderr, 200)
            how = _signal_name(code) if code < 0 else f"exit code {code}"
            last = f"last stderr line: {tail}" if tail else "no stderr output of its own"
            results[current] = {"event": "crashed", "quantization": current,
                                "error": f"converter process died ({how}) converting {current}: TF's converter "
                                         f"crashed in its own process, the other variants went on; {last}; "
                                         f"--quantize without {current} leaves it out"}
            pending.remove(current)
            part = os.path.join(outdir, f"model_{current}.tflite.part")
            if os.path.exists(part):
                os.remove(part)
            if on_result is not None:
                on_result(current, results[current])
        elif pending:
            raise TflabError(f"converter worker exited ({code}) before converting {pending}: "
                             f"{stderr.strip().splitlines()[-1:] or ''}")
    return results


def convert_inprocess(saved_model: str, outdir: str, quants: list[str], batches,
                       progress: Callable[[str], None], keep_calibration: bool = False) -> dict[str, dict]:
    from tflab.litert.conversion import UnsupportedOpsError, convert

    results: dict[str, dict] = {}
    for q in quants:
        progress(f"converting {q}")
        t0 = time.perf_counter()
        try:
            model = convert(saved_model, q, batches, keep_calibration=keep_calibration)
        except UnsupportedOpsError as e:
            results[q] = {"event": "unsupported", "quantization": q, "error": str(e), "ops": list(e.ops),
                          "kind": e.kind, "signatures": e.signatures}
            break
        except TflabError as e:
            failure = getattr(e, "failure", None)
            results[q] = {"event": "error", "quantization": q, "error": str(e), "seconds": time.perf_counter() - t0,
                          "failure": failure.to_dict() if failure is not None else None}
            continue
        path = os.path.join(outdir, f"model_{q}.tflite")
        Path(path).write_bytes(model)
        results[q] = {"event": "done", "quantization": q, "file": os.path.basename(path),
                      "seconds": time.perf_counter() - t0, "bytes": len(model)}
    return results


def convert_in_pool(saved_model: str, outdir: str, quants: list[str], examples_npz: str,
                    progress: Callable[[str], None], keep_calibration: bool = False):
    """`convert_isolated` on each worker's share of ``quants``, in a `tflab.litert.pool.ConversionPool`.

    With more than one worker (on Linux), each worker process is a fork of one `tflab.process.forks.ForkServer`
    that imported TensorFlow and its converter once (~5 s of CPU saved per worker beyond the first),
    started here, in the caller's thread, and ended when the last worker's share is done. A server
    that fails costs nothing but that saving: the workers are then fresh processes, as with one
    worker or ``TFLAB_FORK_WORKERS=0``.

    Returns:
        The `ConversionPool` (``pool[q]``: variant ``q``'s message, waited for).
    """
    from tflab.litert.pool import ConversionPool, schedulable_cpus
    from tflab.process.settings import get as setting

    workers = max(1, min(len(quants), schedulable_cpus()))
    fork = workers > 1 and sys.platform.startswith("linux") and setting("TFLAB_FORK_WORKERS") != "0"
    forks = _SharedForks(workers) if fork else None
    try:
        return ConversionPool(quants, lambda subset, on_result: convert_isolated(
            saved_model, outdir, subset, examples_npz, progress, on_result, keep_calibration, forks),
            progress, workers=workers)
    except BaseException:
        if forks is not None:
            forks.server.close(timeout=0)
        raise


# What the fork server imports before its first fork: TF, its converter and the worker's own code.
FORK_PRELOAD = ("tensorflow", "tensorflow.lite.python.lite", "tflab.litert.conversion", "tflab.litert.workers")


class _SharedForks:
    """One `ForkServer` shared by ``users`` `convert_isolated` calls; closed when the last one releases it."""

    def __init__(self, users: int) -> None:
        from tflab.process.forks import ForkServer

        self.users, self._lock = users, threading.Lock()
        self.server = ForkServer(FORK_PRELOAD, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), start=_workers().start)

    def spawn(self, args: list[str]):
        """A worker forked from the server (registered with the other workers), or None: start a fresh one."""
        from tflab.process.forks import ForkUnavailable

        try:
            proc = self.server.spawn("tflab.litert.workers:_worker_main", args)
        except ForkUnavailable:
            return None
        _workers().procs.append(proc)
        return proc

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            last = self.users == 0
        if last:
            self.server.close()
            _workers().forget(self.server.proc)


_WORKERS = None  # the converter workers: a tflab.process.group.ChildGroup, made on first use
_ABANDONED = threading.Event()


def _workers():
    global _WORKERS

    if _WORKERS is None:
        from tflab.process.group import ChildGroup

        _WORKERS = ChildGroup()
    return _WORKERS


def stop_workers() -> None:
    """Kills converter workers still running and reaps them (the export is being abandoned)."""
    _ABANDONED.set()
    _workers().stop(grace=0)  # no grace: a converter has nothing to clean up


def reset_workers() -> None:
    """Clears the abandoned flag `stop_workers` set (a new export starts)."""
    _ABANDONED.clear()


if __name__ == "__main__":
    if len(sys.argv) in (6, 7) and sys.argv[1] == "--worker":
        sys.exit(_worker_main(sys.argv[2:]))
    print("usage: python -m tflab.litert.workers --worker SAVED_MODEL OUTDIR Q1,Q2 EXAMPLES.npz (internal; "
          "use `tflab export`)", file=sys.stderr)
    sys.exit(2)
