"""`inspect_distributed`: `trace_and_inspect` of a step that calls ``strategy.run``, read per device.

Variables created under ``strategy.scope()`` are ``MirroredVariable``s: one
component per device. The FuncGraph captures every component's resource
handle, and ``all_reduce`` becomes ``CollectiveReduceV2`` ops (one per device;
``cross_device_utils.CollectiveReplicaLauncher``). `DistributedTraceReport`
lists each distributed variable once, with the devices of its components.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from tflab._tf.distribute import distributed_container
from tflab.distribute.strategies import CROSS_REPLICA_OP
from tflab.distribute.records import DistributedTraceReport, MirroredVariableInfo  # noqa: F401  (the records live there)


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
    from tflab._api.argcheck import check_callable, check_per_replica  # plain TensorSpecs gave "0 replicas"

    check_callable(fn, "fn", "inspect_distributed", allow_none=False)  # first: the arguments' words misled
    check_per_replica(args, kwargs, "inspect_distributed")
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
        owner = distributed_container(v)
        if owner is None:
            continue
        handles += 1
        groups.setdefault(id(owner), (owner, []))[1].append(v.device)
    infos = tuple(MirroredVariableInfo(name=o.name, type=type(o).__name__, dtype=o.dtype.name,
                                       shape=o.shape.as_list(), devices=tuple(devs))
                  for o, devs in groups.values())
    return DistributedTraceReport(function_name=report.function_name, report=report, replicas=replicas,
                                  ops_per_device=dict(per_device.most_common()),
                                  mirrored_variables=infos, component_handles=handles,
                                  cross_replica_ops=dict(cross.most_common()))


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
