"""`inspect_distributed`: `trace_and_inspect` of a step that calls ``strategy.run``, read per device.

Variables created under ``strategy.scope()`` are ``MirroredVariable``s: one
component per device. The FuncGraph captures every component's resource
handle, and ``all_reduce`` becomes ``CollectiveReduceV2`` ops (one per device;
``cross_device_utils.CollectiveReplicaLauncher``). `DistributedTraceReport`
lists each distributed variable once, with the devices of its components.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

from tflab.report.base import Report, config_field
from tflab._tf.distribute import distributed_container
from tflab.report.text import table
from tflab.distribute.strategies import CROSS_REPLICA_OP
from tflab.report.html.dispatch import renders
from tflab.report.html.lab import distributed_trace_fragment


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


@dataclasses.dataclass(repr=False)
class DistributedTraceReport(Report):
    """`trace_and_inspect` of a step that calls ``strategy.run``, read per device.

    Attributes:
        function_name: the step's name.
        report: the step's `tflab.TraceReport` (every op, capture, signature).
        replicas: the devices ops were placed on, one per replica
            (``/job:localhost/replica:0/task:0/device:CPU:1``).
        ops_per_device: device -> op count; ``""`` holds the unplaced
            function inputs/outputs (placeholders, identities).
        mirrored_variables: each distributed variable captured, once.
        component_handles: resource handles of variable components the
            FuncGraph captured (one per replica per variable).
        cross_replica_ops: op type -> count for the collective/NCCL ops.
        op_count: ops in the FuncGraph (a property).
        config: `tflab.runtime_config()` of the process that traced it.
    """

    function_name: str
    report: Any = dataclasses.field(metadata={"dict": False})
    replicas: tuple[str, ...]
    ops_per_device: dict
    mirrored_variables: tuple[MirroredVariableInfo, ...]
    component_handles: int
    cross_replica_ops: dict
    config: dict = config_field()

    DICT_PROPERTIES = ("op_count",)

    @property
    def op_count(self) -> int:
        """Ops in the step's FuncGraph."""
        return len(self.report.ops)

    def _cross_text(self) -> str:
        return ", ".join(f"{t}×{n}" for t, n in self.cross_replica_ops.items()) or "none"

    def summary_line(self) -> str:
        return (f"{len(self.replicas)} replicas, {self.op_count} ops, {len(self.mirrored_variables)} "
                f"mirrored variables ({self.component_handles} component handles), "
                f"cross-replica ops: {self._cross_text()}")

    def to_text(self) -> str:
        rows = [(dev, self.ops_per_device.get(dev, 0)) for dev in self.replicas]
        if self.ops_per_device.get(""):
            rows.append(("(unplaced inputs/outputs)", self.ops_per_device[""]))
        lines = [f"distributed FuncGraph of {self.function_name}: {self.op_count} ops, "
                 f"{len(self.replicas)} replica(s)",
                 table(rows, header=("device", "ops"), indent="  "),
                 f"  captured {len(self.mirrored_variables)} distributed variable(s) once each, as "
                 f"{self.component_handles} component handles (one per replica):"]
        for v in self.mirrored_variables:
            lines.append(f"    {v.type} {v.name}: {v.dtype}{list(v.shape)} on {len(v.devices)} devices")
        lines.append(f"  cross-replica ops: {self._cross_text()}")
        return "\n".join(lines)


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
    from tflab._argcheck import check_per_replica  # issue 33 B24: plain TensorSpecs gave "0 replicas"

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
renders(DistributedTraceReport)(distributed_trace_fragment)
