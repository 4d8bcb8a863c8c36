"""`DistributedRetraceProbe`: the traces of a step that calls ``strategy.run``, and its replica bodies.

A training step that calls ``strategy.run(replica_fn, args=(x, y))`` inside a
`tf.function` is one tf.function with one trace cache. Its arguments are
``PerReplica`` values whose TraceType is a ``PerReplicaSpec`` (one
`tf.TensorSpec` per replica, ``tensorflow/python/distribute/values.py``), and
``MirroredStrategy.run`` calls the replica function once per replica while TF
traces the step (``mirrored_run.call_for_each_replica``: one thread per device),
so a Python side effect in the replica function fires N× per trace.

The outer traces are `RetraceProbe`'s: each is one `tflab.retrace.TraceEvent`,
made from TF's tracing frame. Each replica-body run is attributed to the
TraceEvent of the trace in progress and carries it, seen from the replica
context it ran in (``TraceEvent.replica``: ``MirroredStrategy replica 1``), so
the per-replica trace count is a count of TraceEvents.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from typing import Any, Callable, Iterator

from tflab._api.deprecations import deprecated_fields
from tflab._tf.distribute import wrapping_strategy_run
from tflab.retrace.event import TraceEvent
from tflab.retrace.probe import RetraceProbe
from tflab.report.html.dispatch import renders
from tflab.report.html.timeline import probe_text_fragment


@deprecated_fields  # its old field names: tflab/_api/deprecations.py
@dataclasses.dataclass(frozen=True)
class ReplicaRun:
    """One run of a replica function's Python body (it runs while TF traces the step).

    Attributes:
        trace: the index of the outer trace it ran in (1-based; 0 outside a probe trace).
        replica: ``replica_id_in_sync_group`` (global over workers), or None when not static.
        function_name: the replica function's name.
        event: the `TraceEvent` of the outer trace it ran in, with ``replica`` set to
            the replica context of this run (``MirroredStrategy replica 1``); None
            outside a probe trace (an eager ``strategy.run``).
    """

    trace: int
    replica: int | None
    function_name: str
    event: TraceEvent | None = dataclasses.field(default=None, repr=False, compare=False)


def _replica_context() -> tuple[int | None, str | None]:
    """(``replica_id_in_sync_group`` when static, ``"<Strategy> replica N"``) of the running replica."""
    import tensorflow as tf

    try:
        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            return None, f"{type(tf.distribute.get_strategy()).__name__} cross-replica"
        value = tf.get_static_value(ctx.replica_id_in_sync_group)
        rid = None if value is None else int(value)
        return rid, f"{type(ctx.strategy).__name__} replica {rid if rid is not None else '?'}"
    except Exception:  # outside a strategy, or a replica id that is not a constant
        return None, None


@contextlib.contextmanager
def count_replica_runs(sink: Callable[[ReplicaRun], None]) -> Iterator[None]:
    """Calls ``sink(ReplicaRun)`` each time ``strategy.run`` runs a replica function's body.

    Each replica function ``strategy.run`` receives in the block is wrapped by
    a ``tf.__internal__.decorator`` decorator that reports the call, then runs
    the function (AutoGraph unwraps it and converts the function itself); the
    hook is `tflab._tf.distribute.wrapping_strategy_run`, undone when the block
    ends, also on error. Inside a `tf.function` the body runs while TF traces,
    so the count is "bodies per trace"; eager ``strategy.run`` calls are
    counted too. The runs passed have ``trace=0`` and no event
    (`DistributedRetraceProbe` fills both).

    Args:
        sink: called from the replica threads (MirroredStrategy runs each
            replica in its own thread while tracing); must be thread-safe
            (``list.append`` is).

    Example:
        >>> runs = []
        >>> with count_replica_runs(runs.append):
        ...     strategy.run(replica_fn, args=(x,))
        >>> [r.replica for r in runs]
        [0, 1]
    """
    import tensorflow as tf

    make_decorator = tf.__internal__.decorator.make_decorator

    def wrap(fn: Callable) -> Callable:
        name = getattr(fn, "__name__", type(fn).__name__)

        def replica_body(*a, **k):
            rid, _ = _replica_context()
            sink(ReplicaRun(trace=0, replica=rid, function_name=name))
            # AutoGraph swaps __wrapped__ for the converted target: call through the attribute.
            return replica_body.__wrapped__(*a, **k)

        return make_decorator(fn, replica_body, decorator_name="count_replica_runs")

    with wrapping_strategy_run(wrap):
        yield


class DistributedRetraceProbe(RetraceProbe):
    """A `RetraceProbe` for a step that calls ``strategy.run``: also counts replica bodies.

    Outer traces are counted and explained as by `RetraceProbe` (a
    ``PerReplica`` argument's reason reads ``x: per-replica shape (2, 4) ->
    (1, 4)``, with a fix naming ``dist_dataset.element_spec`` or
    ``drop_remainder=True``). The replica function's Python body is counted
    separately, per trace: under a strategy with N local replicas it runs N×
    per trace, once per replica, so a Python side effect there is not a trace
    count. Each run is attributed to the trace's `TraceEvent` (`probe.events`).

    Args:
        fn: the step (a `tf.function` or Python function calling ``strategy.run``).
        **kwargs: as for `RetraceProbe`.

    Attributes:
        replica_runs: one `ReplicaRun` per replica-body run, in order.

    Example (2 logical CPUs, batches 4, 4, 2 of a distributed dataset):

    >>> probe = DistributedRetraceProbe(step)
    >>> for x, y in dist_dataset:
    ...     probe(x, y)
    >>> probe.trace_count, probe.replica_run_count, probe.replica_runs_per_trace
    (2, 4, {1: 2, 2: 2})
    >>> probe.replica_traces  # TraceEvents each replica's body ran in: TF's count
    {0: 2, 1: 2}
    >>> probe.traces[1].reasons[0]
    'x: per-replica shape (2, 4) -> (1, 4)'
    """

    def __init__(self, fn: Callable, **kwargs: Any):
        super().__init__(fn, **kwargs)
        self.replica_runs: list[ReplicaRun] = []

    def _sink(self, run: ReplicaRun) -> None:
        import tensorflow as tf

        events = self.events
        if not events or tf.executing_eagerly():  # not inside one of this probe's traces
            self.replica_runs.append(run)
            return
        event = events[-1]  # the trace in progress: its TraceEvent was made as it started
        if event is not None:
            event = dataclasses.replace(event, replica=_replica_context()[1])
        self.replica_runs.append(dataclasses.replace(run, trace=len(events), event=event))

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

    @property
    def replica_runs_per_trace(self) -> dict[int, int]:
        """Trace index -> replica-body runs in that trace."""
        return dict(collections.Counter(r.trace for r in self.replica_runs))

    @property
    def replica_traces(self) -> dict[int, int]:
        """Replica id -> the number of TraceEvents (outer traces) its body ran in.

        Counted from the `TraceEvent` each run carries; with every trace
        running every replica it equals TF's ``experimental_get_tracing_count()``.
        """
        seen: dict[int, set] = collections.defaultdict(set)
        for r in self.replica_runs:
            if r.event is not None and r.replica is not None:
                seen[r.replica].add(r.trace)
        return {rid: len(traces) for rid, traces in sorted(seen.items())}

    @property
    def replica_summary(self) -> str:
        """``replica_step ran 4× in 2 trace(s): 2× per trace, once per replica (replicas 0, 1)``."""
        if not self.replica_runs:
            return "no strategy.run replica function ran"
        names = sorted({r.function_name for r in self.replica_runs})
        per = sorted(set(self.replica_runs_per_trace.values()))
        ids = sorted({r.replica for r in self.replica_runs if r.replica is not None})
        per_text = f"{per[0]}× per trace" if len(per) == 1 else f"{'/'.join(map(str, per))}× per trace"
        once = ", once per replica" if len(per) == 1 and ids and per[0] == len(ids) else ""
        return (f"{', '.join(names)} ran {self.replica_run_count}× in {self.trace_count} trace(s): "
                f"{per_text}{once}" + (f" (replicas {', '.join(map(str, ids))})" if ids else ""))

    def to_text(self) -> str:
        head, _, rest = super().to_text().partition("\n")
        return "\n".join([head, "  " + self.replica_summary] + ([rest] if rest else []))

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["replica_runs"] = self.replica_run_count
        d["replica_runs_per_trace"] = self.replica_runs_per_trace
        d["replica_traces"] = self.replica_traces
        d["replica_summary"] = self.replica_summary
        return d

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", replica bodies: {self.replica_run_count}>"


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(DistributedRetraceProbe)(probe_text_fragment)
