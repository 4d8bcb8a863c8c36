"""Lab step 11 on the user's own step: ``tflab distribute FILE.py:STEP --arg …``.

``STEP`` is the user's *replica* function: what ``strategy.run(STEP, args=…)``
runs on each replica (the ``replica_step`` of the lab). tflab imports the
user's file inside ``strategy.scope()``, so the module-level ``tf.Variable``s
and Keras models it builds are ``MirroredVariable``s, and traces the step
``tf.function(lambda *a: strategy.run(STEP, args=a))`` over a distributed
dataset of seeded random values:

* ``--arg x=float32[8,4]`` gives the *global* batch (8 rows) per step. The
  dataset has two full global batches and one of half size plus one row less
  (rows ``2·B + B//2``), so the last step shows how a smaller batch is split
  across replicas and why the step traces again (``PerReplicaSpec`` shapes).
  When a replica gets 0 rows it is said outright (tensorflow/tensorflow#61231):
  a mean over its rows divides by 0.
* **mirrored** (``--replicas N``): one fresh process with N logical CPUs
  (``tf.config.set_logical_device_configuration``) and a MirroredStrategy
  over them; reports `DistributedRetraceProbe`'s traces, reasons and replica
  bodies, and `inspect_distributed`'s ops per device and MirroredVariables.
* **workers** (``--workers N``): N ``MultiWorkerMirroredStrategy`` worker
  processes on 127.0.0.1 (``TF_CONFIG`` on free ports, one CPU replica each),
  each with its own input pipeline (``distribute_datasets_from_function``,
  values seeded by ``input_pipeline_id``); per-worker traces and reasons.

The processes are run by `tflab.distribute.processes.run_children` (one
`tflab.process.group.ChildGroup`), which bounds every wait and stops every child
on every exit path.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import time
from typing import Any, Callable

from tflab.errors import UsageError

# Each worker is a process that imports TF (~0.5 GiB): a bound on what one machine runs.
MAX_WORKERS = 8
MAX_REPLICAS = 64
# One replica distributes nothing: TF's distributed dataset then yields the batch itself, not
# per-replica values, and there is no per-replica trace or all-reduce to show.
ONE_REPLICA = "one replica distributes nothing: the dataset gives the batch itself, not per-replica values"


@dataclasses.dataclass(frozen=True)
class UserStep:
    """What the parent checked before starting any process.

    Attributes:
        target: ``FILE.py:STEP`` as given (the file's absolute path).
        arg_items: the ``--arg NAME=SPEC`` strings, passed to each child as is.
        params: the step's parameter names, in order, that the specs bind to.
        global_batch: the rows of one global batch (every spec's dim 0).
    """

    target: str
    arg_items: tuple[str, ...]
    params: tuple[str, ...]
    global_batch: int


def check_user_step(target: str, arg_items: list[str] | None) -> UserStep:
    """Loads ``FILE.py:STEP`` here, checks it is a function and binds the ``--arg`` specs.

    Raises:
        UsageError: the target is missing or not a function; an ``--arg`` is not
            a TensorSpec with a static batch dim, or the dims 0 differ; a
            parameter has no ``--arg``.
    """
    import tensorflow as tf

    from tflab._user.target import check_target, load_target, parse_args

    named = parse_args(arg_items)
    path, _, name = target.rpartition(":")
    fn = load_target(target)
    if not callable(fn) or inspect.isclass(getattr(fn, "python_function", fn)):
        kind = "a class" if inspect.isclass(fn) else f"a {type(fn).__name__}"
        raise UsageError(f"{name} in {path} is {kind}, not a function: name the replica step "
                         f"function that strategy.run should run (def {name}(x, ...))")
    check_target(fn, name)
    if not named:
        raise UsageError(f"{name}: give its per-step global batch with --arg NAME=SPEC, "
                         f"e.g. --arg x=float32[8,4] (dim 0 is the global batch)")
    named = _in_parameter_order(fn, named)
    batches = set()
    for pname, spec in named.items():
        if not isinstance(spec, tf.TensorSpec) or spec.shape.rank in (None, 0) \
                or spec.shape[0] is None:
            raise UsageError(f"--arg {pname}: give a TensorSpec whose dim 0 is the global batch, "
                             f"e.g. {pname}=float32[8,4]; the dataset is split along dim 0")
        if not spec.shape.is_fully_defined():
            raise UsageError(f"--arg {pname}={spec.dtype.name}{spec.shape.as_list()}: every dim must "
                             f"be a number here (tflab makes random rows of that shape)")
        batches.add(int(spec.shape[0]))
    if len(batches) != 1:
        raise UsageError(f"the --arg specs have different dims 0 ({sorted(batches)}): each is one "
                         f"global batch, so they must have the same number of rows")
    return UserStep(target=f"{os.path.abspath(path)}:{name}", arg_items=tuple(arg_items or ()),
                    params=tuple(named), global_batch=batches.pop())


def _child_spec(step: UserStep, mode: str, extra: dict) -> tuple[list[str], dict]:
    from tflab.distribute.processes import worker_argv

    return worker_argv(mode), {"TFLAB_USER_STEP": step.target,
                               "TFLAB_USER_ARGS": json.dumps(list(step.arg_items)), **extra}


# --------------------------------------------------------------------------- in the child


def _load_in_scope(strategy) -> tuple[Callable, dict]:
    """The user's step, its module imported inside ``strategy.scope()``, and the parsed specs."""
    from tflab._user.target import load_target, parse_args

    from tflab.process.settings import get as setting

    named = parse_args(json.loads(setting("TFLAB_USER_ARGS")))
    with strategy.scope():
        fn = load_target(setting("TFLAB_USER_STEP"))
    return fn, _in_parameter_order(fn, named)


def _in_parameter_order(fn: Callable, named: dict) -> dict:
    """``named`` reordered as the step's parameters: the dataset's columns are passed
    to ``strategy.run(STEP, args=…)`` positionally."""
    from tflab._user.target import bind_args, python_signature

    bind_args(fn, named)  # every parameter has a value, no unknown name
    sig = python_signature(fn)
    order = [n for n in (sig.parameters if sig is not None else ()) if n in named]
    return {n: named[n] for n in order + [n for n in named if n not in order]}


def _rows(global_batch: int) -> int:
    return 2 * global_batch + global_batch // 2


def _dataset(named: dict, rows: int, batch: int, seed: int):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    cols = []
    for spec in named.values():
        shape = [rows] + spec.shape.as_list()[1:]
        if spec.dtype.is_floating:
            cols.append(rng.standard_normal(shape).astype(spec.dtype.as_numpy_dtype))
        elif spec.dtype.is_integer:
            cols.append(rng.integers(0, 10, size=shape).astype(spec.dtype.as_numpy_dtype))
        elif spec.dtype == tf.bool:
            cols.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            raise UsageError(f"cannot make random values of dtype {spec.dtype.name}")
    return tf.data.Dataset.from_tensor_slices(tuple(cols)).batch(batch)


def empty_batch_notes(per_replica_rows: list[list[int]]) -> list[str]:
    """One line per (step, replica) that received 0 rows (tensorflow/tensorflow#61231).

    Args:
        per_replica_rows: for each step, the rows each replica got.
    """
    out = []
    for s, rows in enumerate(per_replica_rows, 1):
        for r, n in enumerate(rows):
            if n == 0:
                out.append(f"step {s}: replica {r} received an empty batch (0 rows of "
                           f"{sum(rows)}): a mean over its rows (tf.reduce_mean of a per-example "
                           f"loss) divides by 0 and gives NaN; use "
                           f"tf.nn.compute_average_loss(loss, global_batch_size=…), or "
                           f"drop_remainder=True")
    return out


def _step_report(strategy, fn, params, dist, label: str) -> dict:
    from tflab.distribute.per_device import inspect_distributed
    from tflab.distribute.probe import DistributedRetraceProbe

    def step(*a):
        return strategy.run(fn, args=a)

    step.__name__ = step.__qualname__ = f"strategy.run({getattr(fn, '__name__', 'step')})"
    # The user's parameter names, so TF's FunctionType (and each retrace reason) says ``x``, not ``a_0``.
    step.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in params])
    probe = DistributedRetraceProbe(step)
    rows = []
    for batch in dist:
        rows.append([int(v.shape[0]) for v in strategy.experimental_local_results(batch[0])])
        probe(*batch)
    out = {"label": label, "replicas_in_sync": strategy.num_replicas_in_sync,
           "per_replica_rows": rows, "traces": probe.trace_count,
           "replica_runs": probe.replica_run_count, "replica_runs_per_trace": probe.replica_runs_per_trace,
           "replica_traces": probe.replica_traces, "replica_summary": probe.replica_summary,
           "reasons": [r for t in probe.traces for r in t.reasons],
           "empty_batches": empty_batch_notes(rows), "probe_text": probe.to_text()}
    import tensorflow as tf

    rep = inspect_distributed(tf.function(step), *dist.element_spec)
    out["inspect"] = rep.to_dict() | {"text": rep.to_text()}
    return out


def user_mirrored_main() -> dict:
    """The mirrored child of `run_user_step`: N logical CPUs, MirroredStrategy, the user's step."""
    from tflab.distribute.strategies import mirrored_strategy

    t0 = time.perf_counter()
    from tflab.process.settings import get_int

    n = get_int("TFLAB_REPLICAS", 2)
    strategy = mirrored_strategy(n)
    fn, named = _load_in_scope(strategy)
    batch = int(next(iter(named.values())).shape[0])
    dist = strategy.experimental_distribute_dataset(_dataset(named, _rows(batch), batch, seed=0))
    out = _step_report(strategy, fn, list(named), dist, f"MirroredStrategy over {n} logical CPUs")
    out["devices"] = list(strategy.extended.worker_devices)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def user_worker_main() -> dict:
    """A worker child of `run_user_step`: one MultiWorkerMirroredStrategy worker."""
    import tensorflow as tf

    from tflab.process.settings import get_float

    t0 = time.perf_counter()
    cfg = json.loads(os.environ["TF_CONFIG"])
    task = int(cfg["task"]["index"])
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=get_float("TFLAB_DEADLINE_S", 60.0))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    fn, named = _load_in_scope(strategy)
    global_batch = int(next(iter(named.values())).shape[0])

    def dataset_fn(ctx):
        per = ctx.get_per_replica_batch_size(global_batch)
        return _dataset(named, _rows(per), per, seed=ctx.input_pipeline_id)

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    out = _step_report(strategy, fn, list(named), dist, f"worker {task}")
    out.update(task=task, address=cfg["cluster"]["worker"][task], pid=os.getpid(),
               seconds=round(time.perf_counter() - t0, 2))
    return out


# --------------------------------------------------------------------------- text


def _part_text(r: dict, head: str) -> list[str]:
    rows = " ".join("/".join(map(str, step)) for step in r["per_replica_rows"])
    lines = [head, f"  rows per replica by step: {rows}",
             f"  {r['traces']} trace(s); {r['replica_summary']}"]
    lines += [f"  retrace: {reason}" for reason in r["reasons"]]
    lines += [f"  {note}" for note in r["empty_batches"]]
    lines += ["  " + ln for ln in r["inspect"]["text"].splitlines()]
    return lines


def user_text(result: dict) -> str:
    """The readable report of `run_user_step` (its mirrored part, its workers, or both)."""
    lines = []
    if "mirrored" in result:
        m = result["mirrored"]
        lines += _part_text(m, f"{m['label']} ({m['seconds']:.1f} s)")
    if "workers" in result:
        w = result["workers"]
        lines.append(f"MultiWorkerMirroredStrategy: {len(w['workers'])} worker(s) on 127.0.0.1 "
                     f"({w['seconds']:.1f} s)")
        for r in w["workers"]:
            lines += _part_text(r, f" worker {r['task']} at {r['address']} (pid {r['pid']})")
    return "\n".join(lines)


def check_counts(step: UserStep, replicas: int | None, workers: int | None) -> None:
    """Raises `UsageError` for a replica or worker count out of range, or a global
    batch the workers do not divide (each worker is one replica)."""
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool)
                                 or not 2 <= replicas <= MAX_REPLICAS):
        raise UsageError(f"--replicas must be 2..{MAX_REPLICAS}, got {replicas!r}"
                         + (f" ({ONE_REPLICA})" if replicas == 1 else ""))
    if workers is not None:
        if not isinstance(workers, int) or isinstance(workers, bool) or not 2 <= workers <= MAX_WORKERS:
            raise UsageError(f"--workers must be 2..{MAX_WORKERS} (each worker is a process with its "
                             f"own TF on this machine), got {workers!r}"
                             + (f" ({ONE_REPLICA})" if workers == 1 else ""))
        if step.global_batch % workers:
            raise UsageError(f"--workers {workers}: the global batch of {step.global_batch} rows does "
                             f"not split evenly over {workers} workers (one replica each; "
                             f"ctx.get_per_replica_batch_size); give a dim 0 that {workers} divides")


def run_user_step(step: UserStep, replicas: int | None = 2, workers: int | None = 2,
                  timeout: float = 60.0, progress: Callable[[str], None] | None = None,
                  on_start: Callable[[list[int]], None] | None = None) -> dict:
    """Both parts at once: the MirroredStrategy process and the worker processes start
    together (one `run_children`: one bound, one stop for all), so the wall time is
    the slowest part's, not the sum.

    Args:
        step: from `check_user_step`.
        replicas: logical CPUs of the mirrored part; None skips it.
        workers: worker processes; None skips that part.
        timeout: seconds for everything.
        progress: called as each process finishes.
        on_start: called with every child's pid once all have started.

    Returns:
        ``{"mirrored": …}`` and/or ``{"workers": {"workers": [...], "seconds": …}}``.

    Raises:
        UsageError: ``replicas``/``workers`` out of range, or a batch ``workers`` does not divide.
        WorkerError: a process failed or the run passed ``timeout``; every other one is stopped.
    """
    from tflab.distribute.processes import pick_free_ports, run_children, tf_config

    check_counts(step, replicas, workers)
    specs = []
    if replicas is not None:
        argv, extra = _child_spec(step, "user-mirrored", {"TFLAB_REPLICAS": replicas})
        specs.append(("mirrored step", argv, extra))
    if workers is not None:
        ports = pick_free_ports(workers)
        for i in range(workers):
            argv, extra = _child_spec(step, "user-worker", {"TF_CONFIG": json.dumps(tf_config(ports, i))})
            specs.append((f"worker {i}", argv, extra))
    t0 = time.perf_counter()
    reports = run_children(specs, timeout, progress, on_start)
    out: dict = {}
    if replicas is not None:
        out["mirrored"] = reports.pop(0)
    if workers is not None:
        out["workers"] = {"workers": sorted(reports, key=lambda r: r["task"]),
                          "seconds": round(time.perf_counter() - t0, 2)}
    return out
