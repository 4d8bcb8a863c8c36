"""Work the tour starts early and collects later: the custom-op build, two labs in child processes.

Three sections need work that does not depend on anything the sections before
them do, and that runs in child processes:

* the custom-op section's WarpSoftmax build (``custom_ops.build.build``:
  two g++ compiles (nvcc too with CUDA) and a link, ~46 s of CPU on a cold cache; a hash
  and two ``--version`` calls on a warm one);
* step 10's loss-scaling demo (`tflab.precision.loss_scaling.demonstrate_loss_scaling`:
  three MobileNetV3Small builds and training steps of its own, in
  `tflab._tour.precision_child`);
* step 11's MirroredStrategy lab (`tflab.distribute.run_lab_subprocess`: a
  fresh Python process, since logical CPUs must be configured before TF
  initializes).

Started in a thread at the tour's start, their processes run on the other
core while the earlier sections trace in this one (tracing is Python under
the GIL: one core), and each section waits only for what is left.

The jobs run at a lower CPU priority (``nice`` 10): on a cold cache the op's
compilers (g++ twice, nvcc when CUDA is installed), and the two labs'
MobileNet builds and training steps, would otherwise take turns with the
tour's main thread and its second process (`tflab._tour.lane`), whose
sections are the tour's critical path, while the jobs' results are needed
only by the last three sections; they take the cores those leave idle. On
Linux the nice value is a thread's own and a forked child inherits its
thread's (sched(7), setpriority(2)), so it is set on the job's thread only.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any, Callable


class BackgroundJob:
    """``fn()`` running in a daemon thread; `result` waits for it.

    Args:
        name: what it is, for the progress line (``"custom-op build"``).
        fn: the work; its return value or exception is handed to `result`.
        nice: added to the job thread's nice value before ``fn`` runs (0: none);
            the processes ``fn`` starts inherit it (Linux; elsewhere ignored).

    Attributes:
        started: ``time.perf_counter()`` when the thread started.
        finished: ``time.perf_counter()`` when ``fn`` returned or raised; None before.
    """

    def __init__(self, name: str, fn: Callable[[], Any], nice: int = 0) -> None:
        self.name = name
        self.nice = nice
        self.future: Future = Future()
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name=f"tflab-{name}", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            if self.nice:
                _lower_this_threads_priority(self.nice)
            value = fn()
        except BaseException as e:  # handed to the section that waits for it
            self.finished = time.perf_counter()
            self.future.set_exception(e)
        else:
            self.finished = time.perf_counter()
            self.future.set_result(value)

    def done(self) -> bool:
        """True once ``fn`` returned or raised."""
        return self.future.done()

    def result(self) -> Any:
        """Waits for ``fn``; returns its value or raises its exception."""
        return self.future.result()

    @property
    def seconds(self) -> float | None:
        """Wall seconds ``fn`` ran; None while it runs."""
        return None if self.finished is None else self.finished - self.started


def _lower_this_threads_priority(increment: int) -> None:
    """Adds ``increment`` to the calling thread's nice value (Linux: per thread); elsewhere nothing.

    The processes this thread starts afterwards inherit it; the tour's main
    thread keeps its own.
    """
    import os

    native_id = getattr(threading, "get_native_id", None)
    if not hasattr(os, "setpriority") or native_id is None or not os.path.exists("/proc/self/task"):
        return
    try:
        tid = native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + increment, 19))
    except OSError:
        pass  # a priority is a hint: the build still runs


def build_custom_op():
    """``custom_ops.build.build()``: the cached WarpSoftmax library, built if missing."""
    from custom_ops.build import build

    return build()


# The lab's own limit is 90 s alone; started beside the tour's sections it
# shares the CPUs with them, so it gets more.
DISTRIBUTE_TIMEOUT = 300.0


def distribute_lab() -> dict:
    """`tflab.distribute.run_lab_subprocess` without the export (what step 11 shows)."""
    from tflab.distribute import run_lab_subprocess

    return run_lab_subprocess(export=False, timeout=DISTRIBUTE_TIMEOUT)


PRECISION_TIMEOUT = 300.0

# The module the loss-scaling child runs (``python -m``).
PRECISION_CHILD = "tflab._tour.precision_child"


def loss_scaling_demo():
    """Step 10's `demonstrate_loss_scaling` in a fresh process (`tflab._tour.precision_child`).

    Returns:
        The child's `tflab.precision.loss_scaling.LossScalingDemo`.

    Raises:
        RuntimeError: the child failed or ran past `PRECISION_TIMEOUT` (step 10
            then runs the demo itself).
    """
    import os
    import subprocess
    import sys
    import shutil

    from tflab._io.paths import owned_temp_dir
    from tflab.process.channel import ChannelError, receive_result, result_ready
    from tflab.process.group import start_tied

    tmp = str(owned_temp_dir("tflab_tour_precision_"))  # carries its owner: swept after a SIGKILL
    try:
        out = os.path.join(tmp, "demo.result")
        proc = start_tied([sys.executable, "-m", PRECISION_CHILD, out], waits=True,  # this thread waits
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                               "TFLAB_DEADLINE_S": str(PRECISION_TIMEOUT)})
        try:
            _, err = proc.communicate(timeout=PRECISION_TIMEOUT)
        finally:
            if proc.poll() is None:  # timed out, or the tour is stopping: do not leave it running
                proc.kill()
                proc.wait()
        if proc.returncode != 0 or not result_ready(out):
            last = [ln for ln in (err or "").splitlines() if ln.strip()][-1:] or [""]
            raise RuntimeError(f"loss-scaling child exited {proc.returncode}: {last[0][:200]}")
        try:
            return receive_result(out).objects  # the one channel (tflab.process.channel)
        except ChannelError as e:
            raise RuntimeError(f"loss-scaling child: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# section module -> (key in TourContext.shared, name, work, default model only, nice increment)
JOBS = {
    "s09_custom_op": ("custom_op_build", "custom-op build", build_custom_op, False, 10),
    "s10_precision": ("loss_scaling_demo", "loss-scaling demo", loss_scaling_demo, True, 10),
    "s11_distribute": ("distribute_lab", "distribute lab", distribute_lab, False, 10),
}


def start_jobs(sections: list[str], default_model: bool = True) -> dict[str, BackgroundJob]:
    """Starts the background job of each of ``sections`` that has one; returns them by shared key.

    Args:
        sections: the section modules the tour runs (``"s09_custom_op"`` …).
        default_model: the tour runs on its own MobileNetV3Small (step 10's
            demo runs only then).
    """
    return {key: BackgroundJob(name, fn, nice) for mod, (key, name, fn, default_only, nice) in JOBS.items()
            if mod in sections and (default_model or not default_only)}
