"""Lab step 11: tracing under tf.distribute, on one machine and on two workers.

A training step that calls ``strategy.run(replica_fn, args=(x, y))`` inside a
`tf.function` is still one tf.function with one trace cache, but three things
change (TF 2.21, ``tensorflow/python/distribute/``):

* Its arguments are ``PerReplica`` values (``values.py``), whose TraceType is a
  ``PerReplicaSpec`` holding one `tf.TensorSpec` per replica. The last, smaller
  batch of a dataset changes the per-replica shapes, so the step traces again.
  ``dist_dataset.element_spec`` is a ``PerReplicaSpec`` with ``None`` batch dims:
  as the ``input_signature`` it gives one trace (``input_lib.py``).
* ``MirroredStrategy.run`` calls the replica function once per replica while
  tracing (``mirrored_run.call_for_each_replica``: one thread per device, ops
  named ``replica_1/…`` and placed on each device), so a Python side effect in
  the replica function fires N× per trace: once per replica.
* Variables created under ``strategy.scope()`` are ``MirroredVariable``s: one
  component per device. The FuncGraph captures every component's resource
  handle, and ``all_reduce`` becomes ``CollectiveReduceV2`` ops (one per
  device; ``cross_device_utils.CollectiveReplicaLauncher``).

This module measures those facts with the tools of steps 1–4:
`DistributedRetraceProbe` (a `RetraceProbe` that also counts replica-function
bodies), `inspect_distributed` (a `TraceReport` per device), hooks that let
`RetraceProbe`/`expect_traces` name per-replica shapes and let `stabilize`
infer ``PerReplicaSpec`` signatures, `mirrored_lab` (the whole single-machine
lesson, with an export after distributed training), and `run_workers`: two
real ``MultiWorkerMirroredStrategy`` worker processes on ``127.0.0.1``.

Logical devices must be configured before TF initializes its context, so the
single-machine lab and each worker run in a fresh Python process
(``python -m tflab._distribute_worker``); `run_lab_subprocess` and
`run_workers` start, bound and always stop those processes.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterator, Sequence

from tflab.errors import Terminated, TflabError, UsageError
from tflab.retrace.probe import RetraceProbe
from tflab.retrace.diff import PER_REPLICA_FIX, describe_per_replica, diff_per_replica  # noqa: F401
# Per-replica input_signature relaxing lives in tflab.signatures (step 4 sits below this module).
from tflab.signatures import is_per_replica_spec, relax_spec  # noqa: F401


# Cross-replica communication ops TF 2.21 emits: CollectiveReduceV2 on CPU and for
# MultiWorkerMirroredStrategy, NcclAllReduce for MirroredStrategy on GPUs.
CROSS_REPLICA_OP = re.compile(r"^(Collective\w*|Nccl\w*)$")


# ---------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------


def configure_logical_cpus(n: int = 2) -> list[str]:
    """Splits the first physical CPU into ``n`` logical devices: ``/cpu:0`` … ``/cpu:{n-1}``.

    Args:
        n: number of logical CPU devices (>= 1).

    Returns:
        The logical device names, e.g. ``["/cpu:0", "/cpu:1"]``.

    Raises:
        UsageError: ``n`` < 1, or TF's context is already initialized (any op
            ran), so devices can no longer change: call this first thing in a
            fresh process (``tf.config.set_logical_device_configuration``).
    """
    import tensorflow as tf

    if not isinstance(n, int) or n < 1:
        raise UsageError(f"configure_logical_cpus: n must be an int >= 1, got {n!r}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    want = [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
    try:
        tf.config.set_logical_device_configuration(cpu, want)
    except RuntimeError as e:
        have = len(tf.config.list_logical_devices("CPU"))
        if have == n:
            return [f"/cpu:{i}" for i in range(n)]
        raise UsageError(f"TF is already initialized with {have} logical CPU(s), so {n} cannot be "
                         f"configured now ({e}); call configure_logical_cpus({n}) before any TF op, "
                         f"or run in a fresh process (tflab.distribute.run_lab_subprocess)") from None
    return [f"/cpu:{i}" for i in range(n)]


def mirrored_strategy(n: int = 2):
    """A ``MirroredStrategy`` over ``n`` logical CPUs (configured first; see `configure_logical_cpus`).

    Returns:
        ``tf.distribute.MirroredStrategy(["/cpu:0", …])`` with ``n`` replicas in sync.
    """
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(configure_logical_cpus(n))


# Per-replica reasons live in tflab.retrace.diff (the reason engine explains a
# PerReplicaSpec TraceType itself); the names here stay for compatibility.
describe_trace_type = describe_per_replica
diff_trace_type = diff_per_replica


# ---------------------------------------------------------------------------
# Counting replica-function bodies
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReplicaRun:
    """One run of a replica function's Python body (it runs while TF traces the step).

    Attributes:
        trace: the index of the outer trace it ran in (1-based; 0 outside a probe trace).
        replica: ``replica_id_in_sync_group`` (global over workers), or None when not static.
        function: the replica function's name.
    """

    trace: int
    replica: int | None
    function: str


_patch_lock = threading.Lock()
_sinks: list[Callable[[ReplicaRun], None]] = []
_original_run: Any = None


def _replica_id() -> int | None:
    import tensorflow as tf

    try:
        rid = tf.distribute.get_replica_context().replica_id_in_sync_group
        value = tf.get_static_value(rid)
        return None if value is None else int(value)
    except Exception:  # outside a replica context, or not a constant
        return None


def _counting_run(self, fn, args=(), kwargs=None, options=None):
    from tensorflow.python.util import tf_decorator

    name = getattr(fn, "__name__", type(fn).__name__)

    def replica_body(*a, **k):
        run = ReplicaRun(trace=0, replica=_replica_id(), function=name)
        for sink in list(_sinks):
            sink(run)
        return replica_body.__wrapped__(*a, **k)

    # A tf_decorator, so strategy.run's AutoGraph conversion unwraps it and
    # converts fn itself (as tflab.signatures.count_traces does).
    wrapped = tf_decorator.make_decorator(fn, replica_body, decorator_name="count_replica_runs")
    return _original_run(self, wrapped, args=args, kwargs=kwargs, options=options)


@contextlib.contextmanager
def count_replica_runs(sink: Callable[[ReplicaRun], None]) -> Iterator[None]:
    """Calls ``sink(ReplicaRun)`` each time ``strategy.run`` runs a replica function's body.

    ``tf.distribute.Strategy.run`` (``distribute_lib.StrategyBase.run``) is
    wrapped for the block only: each replica function it receives is wrapped
    by a `tf_decorator` that reports the call, then runs the function. Inside a
    `tf.function` this happens while TF traces, so the count is "bodies per
    trace"; eager ``strategy.run`` calls are counted too.

    Args:
        sink: called from the replica threads (MirroredStrategy runs each
            replica in its own thread while tracing); must be thread-safe
            (``list.append`` is).
    """
    global _original_run
    from tensorflow.python.distribute import distribute_lib

    with _patch_lock:
        if not _sinks:
            _original_run = distribute_lib.StrategyBase.run
            distribute_lib.StrategyBase.run = _counting_run
        _sinks.append(sink)
    try:
        yield
    finally:
        with _patch_lock:
            _sinks.remove(sink)
            if not _sinks:
                distribute_lib.StrategyBase.run = _original_run


class DistributedRetraceProbe(RetraceProbe):
    """A `RetraceProbe` for a step that calls ``strategy.run``: also counts replica bodies.

    Outer traces are counted and explained as by `RetraceProbe` (a
    ``PerReplica`` argument's reason reads ``x: per-replica shape (2, 4) ->
    (1, 4)``, with a fix naming ``dist_dataset.element_spec`` or
    ``drop_remainder=True``). The replica function's Python body is
    counted separately, per trace: under a strategy with N local replicas
    it runs N× per trace, once per replica, so a Python side effect there
    is not a trace count.

    Args:
        fn: the step (a `tf.function` or Python function calling ``strategy.run``).
        **kwargs: as for `RetraceProbe`.

    Attributes:
        replica_runs: one `ReplicaRun` per replica-body run, in order.

    Example (2 logical CPUs, batches 4, 4, 2 of a distributed dataset):

    >>> probe = DistributedRetraceProbe(step)
    >>> for x, y in dist_dataset:
    ...     probe(x, y)
    >>> probe.trace_count, probe.replica_run_count, probe.runs_per_trace()
    (2, 4, {1: 2, 2: 2})
    >>> probe.traces[1].reasons[0]
    'x: per-replica shape (2, 4) -> (1, 4)'
    """

    def __init__(self, fn: Callable, **kwargs: Any):
        super().__init__(fn, **kwargs)
        self.replica_runs: list[ReplicaRun] = []

    def _sink(self, run: ReplicaRun) -> None:
        self.replica_runs.append(dataclasses.replace(run, trace=self.trace_count))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with count_replica_runs(self._sink):
            return super().__call__(*args, **kwargs)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Any:
        with count_replica_runs(self._sink):
            return super().get_concrete_function(*args, **kwargs)

    @property
    def replica_run_count(self) -> int:
        """Replica-function bodies run (all traces)."""
        return len(self.replica_runs)

    def runs_per_trace(self) -> dict[int, int]:
        """Trace index -> replica-body runs in that trace."""
        return dict(collections.Counter(r.trace for r in self.replica_runs))

    def replica_summary(self) -> str:
        """``replica_step ran 4× in 2 trace(s): 2× per trace, once per replica (replicas 0, 1)``."""
        if not self.replica_runs:
            return "no strategy.run replica function ran"
        names = sorted({r.function for r in self.replica_runs})
        per = sorted(set(self.runs_per_trace().values()))
        ids = sorted({r.replica for r in self.replica_runs if r.replica is not None})
        per_text = f"{per[0]}× per trace" if len(per) == 1 else f"{'/'.join(map(str, per))}× per trace"
        once = ", once per replica" if len(per) == 1 and ids and per[0] == len(ids) else ""
        return (f"{', '.join(names)} ran {self.replica_run_count}× in {self.trace_count} trace(s): "
                f"{per_text}{once}" + (f" (replicas {', '.join(map(str, ids))})" if ids else ""))

    def to_text(self) -> str:
        head, _, rest = super().to_text().partition("\n")
        return "\n".join([head, "  " + self.replica_summary()] + ([rest] if rest else []))

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["replica_runs"] = self.replica_run_count
        d["replica_runs_per_trace"] = self.runs_per_trace()
        d["replica_summary"] = self.replica_summary()
        return d

    def __repr__(self) -> str:
        return (super().__repr__()[:-1] + f", replica bodies: {self.replica_run_count}>")


# ---------------------------------------------------------------------------
# trace_and_inspect for a distributed step
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MirroredVariableInfo:
    """One distributed variable the step captured, listed once (not per replica).

    Attributes:
        name: the variable's name (its primary component's, e.g. ``"Variable:0"``).
        type: ``"MirroredVariable"``, ``"SyncOnReadVariable"``, …
        dtype: dtype name.
        shape: shape as a list.
        devices: the device of each component the FuncGraph captured a handle of.
    """

    name: str
    type: str
    dtype: str
    shape: Any
    devices: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DistributedTraceReport:
    """`trace_and_inspect` of a step that calls ``strategy.run``, read per device.

    Attributes:
        report: the step's `tflab.TraceReport` (every op, capture, signature).
        replicas: the devices ops were placed on, one per replica
            (``/job:localhost/replica:0/task:0/device:CPU:1``).
        ops_per_device: device -> op count; ``""`` holds the unplaced
            function inputs/outputs (placeholders, identities).
        mirrored_variables: each distributed variable captured, once.
        component_handles: resource handles of variable components the
            FuncGraph captured (one per replica per variable).
        cross_replica_ops: op type -> count for the collective/NCCL ops.
    """

    report: Any = dataclasses.field(repr=False)
    replicas: tuple[str, ...]
    ops_per_device: dict
    mirrored_variables: tuple[MirroredVariableInfo, ...]
    component_handles: int
    cross_replica_ops: dict

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        cross = ", ".join(f"{t}×{n}" for t, n in self.cross_replica_ops.items()) or "none"
        return (f"DistributedTraceReport({self.report.function_name}: {len(self.replicas)} replicas, "
                f"{len(self.report.ops)} ops, {len(self.mirrored_variables)} mirrored variables "
                f"({self.component_handles} component handles), cross-replica ops: {cross})")

    def to_text(self) -> str:
        lines = [f"distributed FuncGraph of {self.report.function_name}: {len(self.report.ops)} ops, "
                 f"{len(self.replicas)} replica(s)"]
        for dev in self.replicas:
            lines.append(f"  {dev}: {self.ops_per_device.get(dev, 0)} ops")
        if self.ops_per_device.get(""):
            lines.append(f"  (unplaced inputs/outputs): {self.ops_per_device['']} ops")
        lines.append(f"  captured {len(self.mirrored_variables)} distributed variable(s) once each, as "
                     f"{self.component_handles} component handles (one per replica):")
        for v in self.mirrored_variables:
            lines.append(f"    {v.type} {v.name}: {v.dtype}{list(v.shape)} on {len(v.devices)} devices")
        cross = ", ".join(f"{t}×{n}" for t, n in self.cross_replica_ops.items()) or "none"
        lines.append(f"  cross-replica ops: {cross}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"function": self.report.function_name, "op_count": len(self.report.ops),
                "replicas": list(self.replicas), "ops_per_device": dict(self.ops_per_device),
                "mirrored_variables": [dataclasses.asdict(v) for v in self.mirrored_variables],
                "component_handles": self.component_handles,
                "cross_replica_ops": dict(self.cross_replica_ops)}


def inspect_distributed(fn: Callable, *args: Any, **kwargs: Any) -> DistributedTraceReport:
    """Traces a step that calls ``strategy.run`` once and reports it per device.

    Args:
        fn: the step (`tf.function` or Python function); see `tflab.trace_and_inspect`.
        *args: ``PerReplica`` values (a batch of a distributed dataset) or
            ``dist_dataset.element_spec``'s ``PerReplicaSpec``s.
        **kwargs: the same, by keyword.

    Returns:
        A `DistributedTraceReport`: replicas (devices), ops per device, the
        distributed variables captured (once each; the graph holds one handle
        per component, ``values.DistributedVariable._values``), and the
        cross-replica ops counted (on TF 2.21 CPU, ``CollectiveReduceV2``:
        one per device per all-reduce).

    Raises:
        UsageError, TraceError: as `tflab.trace_and_inspect`.

    Example (a step that all-reduces ``x @ w``, ``w`` made in ``strategy.scope()``):

    >>> r = inspect_distributed(step, *dist_dataset.element_spec)
    >>> r.mirrored_variables[0].type, r.component_handles, r.cross_replica_ops
    ('MirroredVariable', 2, {'CollectiveReduceV2': 2})
    """
    from tflab.tracing import trace_and_inspect

    report = trace_and_inspect(fn, *args, **kwargs)
    graph = report.func_graph
    per_device = collections.Counter(op.device for op in graph.get_operations())
    replicas = tuple(sorted(d for d in per_device if d))
    cross = collections.Counter(op.type for op in graph.get_operations()
                                if CROSS_REPLICA_OP.match(op.type))
    groups: dict[int, tuple[Any, list[str]]] = {}
    handles = 0
    for v in report.concrete_function.variables:
        # values.DistributedVariable.__init__ sets a weakref to itself on each
        # component's handle (on the component itself when it has no handle).
        container = (getattr(getattr(v, "handle", None), "_distributed_container", None)
                     or getattr(v, "_distributed_container", None))
        owner = container() if callable(container) else None
        if owner is None:
            continue
        handles += 1
        groups.setdefault(id(owner), (owner, []))[1].append(v.device)
    infos = tuple(MirroredVariableInfo(name=o.name, type=type(o).__name__, dtype=o.dtype.name,
                                       shape=o.shape.as_list(), devices=tuple(devs))
                  for o, devs in groups.values())
    return DistributedTraceReport(report=report, replicas=replicas,
                                  ops_per_device=dict(per_device.most_common()),
                                  mirrored_variables=infos, component_handles=handles,
                                  cross_replica_ops=dict(cross.most_common()))


# ---------------------------------------------------------------------------
# stabilize: the PerReplicaSpec hook of tflab.signatures
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Process management: every child is bounded, and stopped on every exit path
# ---------------------------------------------------------------------------


class WorkerError(TflabError):
    """A worker process crashed, failed or ran past its timeout; the message names the worker."""


def pick_free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` now (bound to port 0, then released).

    Another process may take a port between this call and the worker's
    bind; the worker then fails to start and `run_workers` names it.
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return ""
    # TF's C++ log lines (I0000 …, W0000 …) are noise next to the Python error.
    py = [ln for ln in lines if not re.match(r"^[IWEF]\d{4} ", ln) and not ln.startswith("WARNING: All log")]
    return (py or lines or [""])[-1][:300]


def _Children():
    """The worker processes of one run: `tflab._subprocess.ChildGroup` (the one supervisor)."""
    from tflab._subprocess import ChildGroup

    return ChildGroup()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turns SIGTERM into `tflab.errors.Terminated` for the block (main thread only), so cleanup runs.

    Terminated, not KeyboardInterrupt: the CLI's contract is exit 143 and
    "terminated" for SIGTERM (130 and "interrupted" are Ctrl-C's).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(128 + signal.SIGTERM)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _child_env(extra: dict) -> dict:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("TF_CONFIG", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run_children(specs: Sequence[tuple[str, list[str], dict]], timeout: float,
                  progress: Callable[[str], None] | None = None,
                  on_start: Callable[[list[int]], None] | None = None) -> list[dict]:
    """Runs child processes to completion; returns each one's JSON report.

    Each spec is (label, argv, env extras); the child writes its JSON report
    to ``$TFLAB_REPORT``. Every wait is bounded by ``timeout`` (seconds, wall
    clock, all children together). On a crash (non-zero exit), a timeout,
    Ctrl-C or any other exception, every child still running is stopped and
    reaped before this returns or raises.

    Raises:
        WorkerError: a child exited non-zero (one line naming it, with its
            last stderr line) or ran past ``timeout``.
        KeyboardInterrupt: re-raised after the children are stopped (Ctrl-C).
        Terminated: SIGTERM, re-raised after the children are stopped (exit 143).
    """
    children = _Children()
    tmp = tempfile.mkdtemp(prefix="tflab_distribute_")
    files = []
    try:
        with _sigterm_as_interrupt():
            for label, argv, extra in specs:
                report = os.path.join(tmp, f"{len(files)}.json")
                err_path = os.path.join(tmp, f"{len(files)}.stderr")
                err = open(err_path, "w")
                try:
                    p = children.start(argv, _child_env({**extra, "TFLAB_REPORT": report,
                                                         "TFLAB_PARENT_PID": os.getpid(),
                                                         "TFLAB_DEADLINE_S": timeout}),
                                       stdout=err, stderr=err)
                finally:
                    err.close()
                files.append((label, p, report, err_path))
            if on_start is not None:
                on_start([p.pid for _, p, _, _ in files])
            deadline = time.monotonic() + timeout
            pending = list(files)
            while pending:
                for item in list(pending):
                    label, p, report, err_path = item
                    code = p.poll()
                    if code is None:
                        continue
                    pending.remove(item)
                    if code != 0:
                        how = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"
                        last = _last_line(err_path)
                        others = [lbl for lbl, q, _, _ in files if q.poll() is None]
                        raise WorkerError(
                            f"{label} (pid {p.pid}) {how}" + (f": {last}" if last and code > 0 else "")
                            + (f"; stopped {', '.join(others)}" if others else ""))
                    if progress:
                        progress(f"{label} finished")
                if pending and time.monotonic() > deadline:
                    names = ", ".join(f"{lbl} (pid {q.pid})" for lbl, q, _, _ in pending)
                    raise WorkerError(f"{names} still running after {timeout:g} s; stopped "
                                      f"(raise --timeout, or look for a worker blocked on a peer)")
                time.sleep(0.05)
        reports = []
        for label, p, report, err_path in files:
            try:
                with open(report) as f:
                    reports.append(json.load(f))
            except (OSError, ValueError):
                raise WorkerError(f"{label} (pid {p.pid}) exited 0 without its report: "
                                  f"{_last_line(err_path)}") from None
        return reports
    finally:
        children.stop()
        for name in os.listdir(tmp):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(tmp, name))
        with contextlib.suppress(OSError):
            os.rmdir(tmp)


# ---------------------------------------------------------------------------
# The single-machine lab (runs in a fresh process)
# ---------------------------------------------------------------------------


def run_lab_subprocess(export: bool = True, timeout: float = 120.0,
                       progress: Callable[[str], None] | None = None) -> dict:
    """Runs `mirrored_lab` in a fresh Python process (2 logical CPUs) and returns its report.

    Args:
        export: also train, save and round-trip a model (SavedModel and TFLite).
        timeout: seconds; the process is stopped past it.
        progress: called with one line when the lab finishes.

    Returns:
        `mirrored_lab`'s JSON-ready dict.

    Raises:
        WorkerError: the lab process crashed or ran past ``timeout``.
    """
    argv = [sys.executable, "-m", "tflab._distribute_worker", "mirrored"]
    return _run_children([("mirrored lab", argv, {"TFLAB_LAB_EXPORT": int(bool(export))})],
                         timeout, progress)[0]


def _lab_dataset(n: int = 10, batch: int = 4, width: int = 4, drop_remainder: bool = False):
    import numpy as np
    import tensorflow as tf

    x = np.arange(n * width, dtype=np.float32).reshape(n, width) / (n * width)
    y = np.arange(n, dtype=np.float32) / n
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=drop_remainder)


def mirrored_lab(export_dir: str | None = None) -> dict:
    """The single-machine lesson, measured: call it in a fresh process (it configures 2 logical CPUs).

    Setup (the issue's): ``MirroredStrategy(["/cpu:0", "/cpu:1"])`` and a step
    ``@tf.function def step(x, y): return strategy.run(replica_step, args=(x, y))``
    over ``strategy.experimental_distribute_dataset(ds.batch(4))`` with 10
    examples: global batches 4, 4, 2, per replica 2, 2, 1.

    Args:
        export_dir: when given, a Keras model trained under the strategy is
            saved there with `tflab.save_and_reload` and converted with
            `tflab.tflite_roundtrip` (float), and the SavedModel's op types are
            searched for distribution ops.

    Returns:
        A JSON-ready dict: ``plain`` (traces, replica bodies, per-trace
        counts, reasons, probe text), ``element_spec`` (the same with
        ``input_signature=dist_dataset.element_spec``), ``stabilize``,
        ``inspect``, ``drop_remainder``, and ``export`` when asked.
    """
    import numpy as np

    strategy = mirrored_strategy(2)
    import tensorflow as tf

    from tflab.retrace.expect import expect_traces
    from tflab.signatures import stabilize

    Probe = DistributedRetraceProbe
    with strategy.scope():
        w = tf.Variable(tf.ones([4, 1]), name="w")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)[:, 0] - y))
        grad = tf.distribute.get_replica_context().all_reduce("SUM", tape.gradient(loss, w))
        w.assign_sub(0.01 * grad)
        return loss

    def step(x, y):
        return strategy.run(replica_step, args=(x, y))

    dist = strategy.experimental_distribute_dataset(_lab_dataset())
    out: dict = {"replicas_in_sync": strategy.num_replicas_in_sync,
                 "devices": list(strategy.extended.worker_devices)}

    # 1. plain: one trace per per-replica shape.
    probe = Probe(step)
    per_replica_shapes = []
    for x, y in dist:
        per_replica_shapes.append([list(v.shape) for v in x.values])
        probe(x, y)
    out["per_replica_shapes"] = per_replica_shapes
    out["plain"] = probe.to_dict() | {"text": probe.to_text(),
                                     "reason_kinds": [r.kind for t in probe.traces for r in t.details]}

    # 2. input_signature=dist_dataset.element_spec: one trace, one body per replica.
    sig_probe = Probe(tf.function(step, input_signature=dist.element_spec))
    with expect_traces(sig_probe, at_most=1) as seen:
        for x, y in dist:
            sig_probe(x, y)
    out["element_spec"] = sig_probe.to_dict() | {
        "text": sig_probe.to_text(), "spec": repr(dist.element_spec), "expect_traces_count": seen.count,
        "component_specs": [[list(s.shape) for s in spec._value_specs] for spec in dist.element_spec]}

    # 3. stabilize(examples=dist_dataset): infers the PerReplicaSpec signature.
    stable = stabilize(step, examples=dist)
    # A given PerReplicaSpec signature is checked against distributed examples too.
    given = stabilize(step, input_signature=list(dist.element_spec), examples=dist)
    st_probe = Probe(stable)
    for x, y in dist:
        st_probe(x, y)
    out["stabilize"] = {"input_signature": repr(stable.input_signature),
                        "equals_element_spec": tuple(stable.input_signature) == tuple(dist.element_spec),
                        "given_signature_accepted": tuple(given.input_signature) == tuple(dist.element_spec),
                        "traces": st_probe.trace_count, "replica_runs": st_probe.replica_run_count}

    # 4. expect_traces fails on the plain step, naming per-replica shapes.
    fresh = Probe(step)
    try:
        with expect_traces(fresh, at_most=1):
            for x, y in dist:
                fresh(x, y)
        out["expect_traces_error"] = None
    except AssertionError as e:
        out["expect_traces_error"] = str(e)

    # expect_traces on the tf.function itself reads TF's trace log: same reasons.
    plain_fn = tf.function(step)
    try:
        with expect_traces(plain_fn, at_most=1):
            for x, y in dist:
                plain_fn(x, y)
        out["expect_traces_tf_function_error"] = None
    except AssertionError as e:
        out["expect_traces_tf_function_error"] = str(e)

    # 5. drop_remainder=True: the last partial batch is dropped, so one shape, one trace.
    dr_probe = Probe(step)
    for x, y in strategy.experimental_distribute_dataset(_lab_dataset(drop_remainder=True)):
        dr_probe(x, y)
    out["drop_remainder"] = {"traces": dr_probe.trace_count, "replica_runs": dr_probe.replica_run_count}

    # 6. trace_and_inspect per device.
    rep = inspect_distributed(tf.function(step), *dist.element_spec)
    out["inspect"] = rep.to_dict() | {"text": rep.to_text()}
    out["weights_after_training"] = [float(v) for v in np.asarray(w.values[0]).ravel()]
    out["weights_mirrored_equal"] = all(np.array_equal(w.values[0].numpy(), c.numpy()) for c in w.values)

    if export_dir is not None:
        out["export"] = export_after_distributed_training(strategy, export_dir)
    return out


# ---------------------------------------------------------------------------
# Export after distributed training
# ---------------------------------------------------------------------------


def saved_model_op_types(path: str) -> dict[str, int]:
    """Op type -> count over a SavedModel's graph and every function in its library.

    Reads ``saved_model.pb`` directly (``saved_model_pb2.SavedModel``): what
    a serving binary would load, without running anything.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    counts: collections.Counter = collections.Counter()
    for mg in sm.meta_graphs:
        counts.update(n.op for n in mg.graph_def.node)
        for fn in mg.graph_def.library.function:
            counts.update(n.op for n in fn.node_def)
    return dict(counts.most_common())


def saved_model_devices(path: str) -> list[str]:
    """Device strings on nodes of a SavedModel (TF clears them on save unless asked to keep them)."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    devs = set()
    for mg in sm.meta_graphs:
        devs.update(n.device for n in mg.graph_def.node if n.device)
        for fn in mg.graph_def.library.function:
            devs.update(n.device for n in fn.node_def if n.device)
    return sorted(devs)


def export_after_distributed_training(strategy: Any, export_dir: str) -> dict:
    """Trains a small Keras model under ``strategy``, then saves and round-trips it.

    The model (Dense(8, relu) -> Dense(3) on 4 features) is built in
    ``strategy.scope()``, so its weights are MirroredVariables, and trained
    with ``model.fit`` for 2 steps (each an all-reduce); its variables stay
    MirroredVariables when it is saved. `tflab.save_and_reload` checks the
    SavedModel bit by bit against the in-process model; `tflab.tflite_roundtrip` converts it (float) and
    checks LiteRT within its bound. TF saves only the primary component of
    each distributed variable and no replica structure
    (``values.DistributedVariable._export_to_saved_model_graph``), so the
    SavedModel holds no collective ops and no replica devices.

    Returns:
        ``{"saved_model_bit_exact", "tflite_within_bound", "tflite_max_abs_error",
        "tflite_bound", "distribution_ops", "replica_devices", "op_types"}``.
    """
    import keras
    import numpy as np

    from tflab.litert.check import tflite_roundtrip
    from tflab.saved_model import save_and_reload

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    with strategy.scope():
        inputs = keras.Input((4,), name="x")
        h = keras.layers.Dense(8, activation="relu")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(3)(h))
        model.compile(optimizer=keras.optimizers.SGD(0.1),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        variable_types = sorted({type(v.value).__name__ if hasattr(v, "value") else type(v).__name__
                                 for v in model.weights})
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # 2 steps of global batch 8
    path = os.path.join(export_dir, "saved_model")
    examples = {"x": x[:4]}
    # Outside the scope: save_and_reload also reloads, and a SavedModel loaded inside
    # the scope gets distributed variables whose functions must then be called through
    # strategy.run (TF 2.21 saved_model/load.py, _unused_handle asserts otherwise).
    sm = save_and_reload(model, path, examples)
    lite = tflite_roundtrip(path, examples, "none")
    ops = saved_model_op_types(path)
    dist_ops = {t: n for t, n in ops.items() if CROSS_REPLICA_OP.match(t)}
    replica_devices = [d for d in saved_model_devices(path) if re.search(r"CPU:[1-9]|GPU:|replica_", d)]
    import tensorflow as tf

    tf.random.set_seed(None)
    return {"variable_types": variable_types, "saved_model_bit_exact": bool(sm.bit_exact),
            "tflite_bit_exact": lite.bit_exact, "tflite_within_bound": lite.within_bound,
            "tflite_max_abs_error": lite.max_abs_error, "tflite_bound": lite.bound,
            "distribution_ops": dist_ops, "replica_devices": replica_devices, "op_types": ops,
            "path": path}


# ---------------------------------------------------------------------------
# Two workers: MultiWorkerMirroredStrategy on 127.0.0.1
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerRow:
    """What one worker measured.

    Attributes:
        task: its ``TF_CONFIG`` task index (0 is the chief).
        address: its ``127.0.0.1:PORT``.
        pid: its process id.
        replicas_in_sync: replicas over all workers (1 CPU each: 2).
        step_traces: traces of the training step (`DistributedRetraceProbe`).
        replica_runs: its replica-function bodies run (its local replicas × traces).
        step_reasons: the step's retrace reasons.
        summary_traces: traces of the worker-local ``write_summary`` tf.function.
        summary_reasons: its retrace reasons (a worker-dependent Python flag).
        local_batches: this worker's per-step batch sizes.
        local_data_sum: the sum of this worker's input features over all
            steps (each worker's pipeline reads its own examples).
        reduced: ``strategy.reduce(SUM, …)`` of each step: examples over all workers.
        weights: the trained MirroredVariable after the last step.
        seconds: the worker's wall time, seconds.
    """

    task: int
    address: str
    pid: int
    replicas_in_sync: int
    step_traces: int
    replica_runs: int
    step_reasons: tuple[str, ...]
    summary_traces: int
    summary_reasons: tuple[str, ...]
    local_batches: tuple[int, ...]
    local_data_sum: float
    reduced: tuple[float, ...]
    weights: tuple[float, ...]
    seconds: float


# Fields compared across workers for the "same / differs" lines.
_COMPARED = ("replicas_in_sync", "step_traces", "replica_runs", "step_reasons", "summary_traces",
             "summary_reasons", "local_batches", "local_data_sum", "reduced", "weights")


@dataclasses.dataclass(frozen=True)
class MultiWorkerReport:
    """`run_workers`' merged report: one row per worker.

    Attributes:
        rows: one `WorkerRow` per worker, by task index.
        same: fields equal on every worker.
        differs: fields that differ between workers.
        seconds: wall time of the whole run, seconds.
    """

    rows: tuple[WorkerRow, ...]
    same: tuple[str, ...]
    differs: tuple[str, ...]
    seconds: float

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        traces = ", ".join(f"worker {r.task}: {r.step_traces}" for r in self.rows)
        return (f"MultiWorkerReport({len(self.rows)} workers; step traces {traces}; "
                f"differs: {', '.join(self.differs) or 'nothing'})")

    def to_text(self) -> str:
        lines = [f"MultiWorkerMirroredStrategy: {len(self.rows)} workers on 127.0.0.1, "
                 f"{self.rows[0].replicas_in_sync if self.rows else 0} replicas in sync ({self.seconds:.1f} s)",
                 "  worker  address          batches   step traces  replica bodies  summary traces  "
                 "reduce(SUM) per step"]
        for r in self.rows:
            lines.append(f"  {r.task:<6}  {r.address:<15}  {','.join(map(str, r.local_batches)):<8}  "
                         f"{r.step_traces:<11}  {r.replica_runs:<14}  {r.summary_traces:<14}  "
                         f"{', '.join(f'{v:g}' for v in r.reduced)}")
        for r in self.rows:
            for reason in r.step_reasons:
                lines.append(f"  worker {r.task} step {reason}")
            for reason in r.summary_reasons:
                lines.append(f"  worker {r.task} write_summary {reason}")
        lines.append(f"  same on every worker: {', '.join(self.same) or 'nothing'}")
        lines.append(f"  differs: {', '.join(self.differs) or 'nothing'}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"rows": [dataclasses.asdict(r) for r in self.rows], "same": list(self.same),
                "differs": list(self.differs), "seconds": self.seconds}


def tf_config(ports: Sequence[int], index: int, host: str = "127.0.0.1") -> dict:
    """The ``TF_CONFIG`` of worker ``index`` in a cluster of ``len(ports)`` workers on ``host``."""
    return {"cluster": {"worker": [f"{host}:{p}" for p in ports]},
            "task": {"type": "worker", "index": index}}


def run_workers(n: int = 2, timeout: float = 60.0, crash_worker: int | None = None,
                progress: Callable[[str], None] | None = None,
                on_start: Callable[[list[int]], None] | None = None) -> MultiWorkerReport:
    """Starts ``n`` MultiWorkerMirroredStrategy workers on 127.0.0.1 and merges their reports.

    Each worker is a fresh ``python -m tflab._distribute_worker worker``
    process with ``TF_CONFIG`` naming every worker at a port picked free on
    127.0.0.1 (`pick_free_ports`). Each runs the same training step over its
    own batches 4, 4, 2 (`worker_main`) and reports its traces and reasons.

    Every wait is bounded by ``timeout``; each worker also exits on its own
    past that deadline or when this process disappears. The workers are
    stopped (SIGTERM, then SIGKILL) and reaped on every exit path: normal
    return, a worker crash, the timeout, Ctrl-C (SIGINT) or SIGTERM.

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
    if not timeout or timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {timeout!r}")
    t0 = time.perf_counter()
    ports = pick_free_ports(n)
    specs = []
    for i in range(n):
        extra = {"TF_CONFIG": json.dumps(tf_config(ports, i)), "TFLAB_WORKER_INDEX": i}
        if crash_worker == i:
            extra["TFLAB_WORKER_CRASH_AFTER"] = 1
        specs.append((f"worker {i}", [sys.executable, "-m", "tflab._distribute_worker", "worker"], extra))
    reports = _run_children(specs, timeout, progress, on_start)
    rows = tuple(sorted((WorkerRow(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in r.items()})
                         for r in reports), key=lambda r: r.task))
    same = tuple(f for f in _COMPARED if len({json.dumps(getattr(r, f)) for r in rows}) == 1)
    differs = tuple(f for f in _COMPARED if f not in same)
    return MultiWorkerReport(rows=rows, same=same, differs=differs,
                             seconds=round(time.perf_counter() - t0, 2))


def _watch_parent(parent: int, deadline_s: float) -> None:
    """Exits this worker when its parent is gone or past its deadline: never an orphan."""
    end = time.monotonic() + deadline_s

    def loop():
        while True:
            if os.getppid() != parent or time.monotonic() > end:
                os._exit(124)
            time.sleep(0.2)

    threading.Thread(target=loop, daemon=True, name="tflab-parent-watch").start()


def worker_main() -> dict:
    """One MultiWorkerMirroredStrategy worker (run by `run_workers` with ``TF_CONFIG`` set).

    The step is the lab's: ``strategy.run(replica_step)`` with an all-reduced
    gradient of a MirroredVariable, over this worker's batches 4, 4, 2
    (``distribute_datasets_from_function``: each worker builds its own
    pipeline; its examples depend on ``input_pipeline_id``). After each step
    a worker-local tf.function ``write_summary(loss, verbose)`` runs with a
    worker-dependent Python flag: the chief (task 0) turns ``verbose`` on at
    the last step, so it retraces there and the other workers do not. That
    function has no collective op, so one worker retracing alone is safe; a
    retrace of the step itself on one worker only would build its
    collectives out of step with its peers.

    Returns:
        The `WorkerRow` fields as a dict.
    """
    t0 = time.perf_counter()
    import numpy as np
    import tensorflow as tf

    Probe = DistributedRetraceProbe
    task = int(json.loads(os.environ["TF_CONFIG"])["task"]["index"])
    address = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][task]
    crash_after = int(os.environ.get("TFLAB_WORKER_CRASH_AFTER", "0"))
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=float(os.environ.get("TFLAB_DEADLINE_S", "60")))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    with strategy.scope():
        w = tf.Variable(tf.zeros([4, 1]), name="w")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)[:, 0] - y))
        grad = tf.distribute.get_replica_context().all_reduce("SUM", tape.gradient(loss, w))
        w.assign_sub(0.01 * grad)
        return tf.cast(tf.shape(x)[0], tf.float32)

    def step(x, y):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    def write_summary(count, verbose):
        return count * 2.0 if verbose else count

    def dataset_fn(ctx):
        ds = _lab_dataset()
        return ds.map(lambda x, y: (x + float(ctx.input_pipeline_id), y))

    probe = Probe(step)
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
            "weights": [float(v) for v in np.asarray(w.values[0]).ravel()],
            "seconds": round(time.perf_counter() - t0, 2)}


def lab_text(report: dict) -> str:
    """The readable form of `mirrored_lab`'s report (as `run_lab_subprocess` returns it)."""
    shapes = " ".join("/".join(str(tuple(s)) for s in step) for step in report["per_replica_shapes"])
    lines = [f"MirroredStrategy over {report['replicas_in_sync']} logical CPUs; per-replica x shapes "
             f"by step: {shapes}",
             "plain @tf.function step:"]
    lines += ["  " + ln for ln in report["plain"]["text"].splitlines()]
    es = report["element_spec"]
    lines.append(f"input_signature=dist_dataset.element_spec: {es['trace_count']} trace, "
                 f"{es['replica_runs']} replica bodies ({es['replica_summary']})")
    st = report["stabilize"]
    lines.append(f"stabilize(step, examples=dist_dataset): {st['traces']} trace, signature "
                 f"{'== element_spec' if st['equals_element_spec'] else st['input_signature']}")
    lines.append(f"drop_remainder=True: {report['drop_remainder']['traces']} trace")
    lines += report["inspect"]["text"].splitlines()
    ex = report.get("export")
    if ex:
        dist_ops = ", ".join(ex["distribution_ops"]) or "none"
        lines.append(f"export after training ({'/'.join(ex['variable_types'])} weights): SavedModel "
                     f"{'bit-exact' if ex['saved_model_bit_exact'] else 'NOT bit-exact'}; TFLite max |Δ| "
                     f"{ex['tflite_max_abs_error']:.3g} {'<=' if ex['tflite_within_bound'] else '>'} "
                     f"bound {ex['tflite_bound']:.3g}; distribution ops in the SavedModel: {dist_ops}")
    return "\n".join(lines)
