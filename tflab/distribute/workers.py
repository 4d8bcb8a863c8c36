"""Two ``MultiWorkerMirroredStrategy`` workers on 127.0.0.1: `run_workers` and the worker's own `worker_main`.

Each worker is a fresh ``python -m tflab.distribute.child worker`` process
with ``TF_CONFIG`` naming every worker at a port picked free on 127.0.0.1. Each
runs the lab's training step over its own batches 4, 4, 2 and reports its
traces and reasons; `MultiWorkerReport` puts the rows side by side and names
what is the same on every worker and what differs.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Callable

from tflab.distribute.probe import DistributedRetraceProbe
from tflab.distribute.processes import pick_free_ports, run_children, tf_config, worker_argv
from tflab.distribute.strategies import lab_dataset, make_replica_step
from tflab.errors import UsageError
from tflab.distribute.records import MultiWorkerReport, WorkerRow  # noqa: F401  (the records live there)
from tflab.retrace.probe import RetraceProbe


# Fields compared across workers for the "same / differs" lines.
_COMPARED = ("replicas_in_sync", "step_traces", "replica_runs", "step_reasons", "summary_traces",
             "summary_reasons", "local_batches", "local_data_sum", "reduced", "weights")


def run_workers(n: int = 2, timeout: float = 60.0, crash_worker: int | None = None,
                progress: Callable[[str], None] | None = None,
                on_start: Callable[[list[int]], None] | None = None) -> MultiWorkerReport:
    """Starts ``n`` MultiWorkerMirroredStrategy workers on 127.0.0.1 and merges their reports.

    Each worker is a fresh ``python -m tflab.distribute.child worker``
    process with ``TF_CONFIG`` naming every worker at a port picked free on
    127.0.0.1 (`pick_free_ports`). Each runs the same training step over its
    own batches 4, 4, 2 (`worker_main`) and reports its traces and reasons.

    Every wait is bounded by ``timeout``; each worker also exits on its own
    past that deadline or when this process disappears. The workers are
    stopped (SIGTERM, then SIGKILL) and reaped on every exit path: normal
    return, a worker crash, the timeout, Ctrl-C (SIGINT) or SIGTERM
    (`tflab.distribute.processes.run_children`, `tflab.process.group.ChildGroup`).

    Args:
        n: number of workers: 2 (each is one replica on its CPU).
        timeout: seconds for the whole run.
        crash_worker: for demonstrations and tests: that worker kills itself
            with SIGKILL after its first step (its peer then blocks in the
            next all-reduce until it is stopped).
        progress: called with a line as each worker finishes.
        on_start: called with the worker pids once all have started.

    Returns:
        A `MultiWorkerReport`, one row per worker.

    Raises:
        WorkerError: a worker crashed or the run passed ``timeout``: one line
            naming the worker (task index and pid); the others were stopped.
        UsageError: ``n`` is not 2, or ``crash_worker`` is not a worker index.
        KeyboardInterrupt: after stopping the workers.

    Example:

    >>> report = run_workers(2, timeout=60)
    >>> [(r.task, r.step_traces, r.replica_runs) for r in report.rows]
    [(0, 2, 2), (1, 2, 2)]
    >>> report.differs
    ('summary_traces', 'summary_reasons', 'local_data_sum')
    """
    if n != 2:
        raise UsageError(f"n must be 2 (the two-worker run is the one measured by the tests), got {n!r}")
    if crash_worker is not None and not (isinstance(crash_worker, int) and 0 <= crash_worker < n):
        raise UsageError(f"--crash-worker must be a worker index 0..{n - 1}, got {crash_worker!r}")
    from tflab._api.argcheck import check_float

    timeout = check_float(timeout, "timeout", "run_workers", minimum=0)  # nan: the deadline passed at once
    t0 = time.perf_counter()
    ports = pick_free_ports(n)
    specs = []
    for i in range(n):
        extra = {"TF_CONFIG": json.dumps(tf_config(ports, i)), "TFLAB_WORKER_INDEX": i}
        if crash_worker == i:
            extra["TFLAB_WORKER_CRASH_AFTER"] = 1
        specs.append((f"worker {i}", worker_argv("worker"), extra))
    reports = run_children(specs, timeout, progress, on_start)
    chief = min(reports, key=lambda r: r["task"])
    config, name = chief["config"], chief["function_name"]
    for r in reports:
        del r["config"], r["function_name"]
    rows = tuple(sorted((WorkerRow(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in r.items()})
                         for r in reports), key=lambda r: r.task))
    same = tuple(f for f in _COMPARED if len({json.dumps(getattr(r, f)) for r in rows}) == 1)
    differs = tuple(f for f in _COMPARED if f not in same)
    return MultiWorkerReport(rows=rows, same=same, differs=differs,
                             seconds=round(time.perf_counter() - t0, 2), function_name=name, config=config)


def worker_main() -> dict:
    """One MultiWorkerMirroredStrategy worker (run by `run_workers` with ``TF_CONFIG`` set).

    The step is the lab's (`tflab.distribute.strategies.make_replica_step`: an
    all-reduced gradient of a MirroredVariable), returning the replica's batch
    size so that ``strategy.reduce(SUM)`` counts the examples of all workers,
    over this worker's batches 4, 4, 2 (``distribute_datasets_from_function``:
    each worker builds its own pipeline; its examples depend on
    ``input_pipeline_id``). After each step a worker-local tf.function
    ``write_summary(loss, verbose)`` runs with a worker-dependent Python flag:
    the chief (task 0) turns ``verbose`` on at the last step, so it retraces
    there and the other workers do not. That function has no collective op,
    so one worker retracing alone is safe; a retrace of the step itself on one
    worker only would build its collectives out of step with its peers.

    Returns:
        The `WorkerRow` fields as a dict, the step's ``function_name`` and ``config``
        (`tflab.runtime_config()` in this worker).
    """
    from tflab.report.base import current_config

    t0 = time.perf_counter()
    import numpy as np
    import tensorflow as tf

    cfg = json.loads(os.environ["TF_CONFIG"])
    task = int(cfg["task"]["index"])
    address = cfg["cluster"]["worker"][task]
    from tflab.process.settings import get_float, get_int

    crash_after = get_int("TFLAB_WORKER_CRASH_AFTER", 0)
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=get_float("TFLAB_DEADLINE_S", 60.0))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    with strategy.scope():
        w = tf.Variable(tf.zeros([4, 1]), name="w")
    train = make_replica_step(w)

    def replica_step(x, y):
        train(x, y)
        return tf.cast(tf.shape(x)[0], tf.float32)

    def step(x, y):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    def write_summary(count, verbose):
        return count * 2.0 if verbose else count

    def dataset_fn(ctx):
        return lab_dataset().map(lambda x, y: (x + float(ctx.input_pipeline_id), y))

    probe = DistributedRetraceProbe(step)
    summary = RetraceProbe(write_summary)
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    batches, reduced, data_sum = [], [], 0.0
    elements = list(dist)
    for i, (x, y) in enumerate(elements):
        local = strategy.experimental_local_results(x)[0]
        batches.append(int(local.shape[0]))
        data_sum += float(np.sum(local.numpy(), dtype=np.float64))
        total = probe(x, y)
        reduced.append(float(total))
        summary(total, verbose=(task == 0 and i == len(elements) - 1))
        if crash_after and i + 1 >= crash_after:
            os.kill(os.getpid(), signal.SIGKILL)
    return {"task": task, "address": address, "pid": os.getpid(),
            "replicas_in_sync": strategy.num_replicas_in_sync, "step_traces": probe.trace_count,
            "replica_runs": probe.replica_run_count,
            "step_reasons": [r for t in probe.traces for r in t.reasons],
            "summary_traces": summary.trace_count,
            "summary_reasons": [r for t in summary.traces for r in t.reasons],
            "local_batches": batches, "local_data_sum": data_sum, "reduced": reduced,
            "weights": [float(v) for v in np.asarray(strategy.experimental_local_results(w)[0]).ravel()],
            "seconds": round(time.perf_counter() - t0, 2), "function_name": probe.function_name,
            "config": current_config()}


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
