"""The records of lab step 11: `DistributedTraceReport` (`inspect_distributed`) and `MultiWorkerReport` (`run_workers`).

`MirroredVariableInfo` is one distributed variable the step captured,
`WorkerRow` what one worker measured. Each report follows the report
convention of `tflab.report.base` and registers its HTML fragment here, beside
its class (`tflab.report.html.dispatch.renders`). This module imports no TF:
the parent process of `run_workers` builds a `MultiWorkerReport` from the
workers' JSON without it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tflab.report.base import Report, config_field
from tflab.report.text import table
from tflab.report.html.dispatch import renders
from tflab.report.html.lab import distributed_trace_fragment, multi_worker_fragment

__all__ = ["MirroredVariableInfo", "DistributedTraceReport", "WorkerRow", "MultiWorkerReport"]


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


@dataclasses.dataclass(repr=False)
class MultiWorkerReport(Report):
    """`run_workers`' merged report: one row per worker.

    Attributes:
        rows: one `WorkerRow` per worker, by task index.
        same: fields equal on every worker.
        differs: fields that differ between workers.
        seconds: wall time of the whole run, seconds.
        function_name: the training step every worker traced (``step``).
        config: `tflab.runtime_config()` of the chief worker's process (where TF ran).
    """

    rows: tuple[WorkerRow, ...]
    same: tuple[str, ...]
    differs: tuple[str, ...]
    seconds: float
    function_name: str = "step"  # the chief's probe names it
    config: dict = config_field()

    def to_dict(self) -> dict:
        """The fields as JSON data, built without importing TF (the parent process never does)."""
        return {"rows": [dataclasses.asdict(r) for r in self.rows], "same": list(self.same),
                "differs": list(self.differs), "seconds": self.seconds, "function_name": self.function_name,
                "config": dict(self.config)}

    def summary_line(self) -> str:
        traces = ", ".join(f"worker {r.task}: {r.step_traces}" for r in self.rows)
        return (f"{len(self.rows)} workers; step traces {traces}; "
                f"differs: {', '.join(self.differs) or 'nothing'}")

    def to_text(self) -> str:
        lines = [f"MultiWorkerMirroredStrategy: {len(self.rows)} workers on 127.0.0.1, "
                 f"{self.rows[0].replicas_in_sync if self.rows else 0} replicas in sync ({self.seconds:.1f} s)",
                 table([(r.task, r.address, ",".join(map(str, r.local_batches)), r.step_traces, r.replica_runs,
                         r.summary_traces, ", ".join(f"{v:g}" for v in r.reduced)) for r in self.rows],
                       header=("worker", "address", "batches", "step traces", "replica bodies",
                               "summary traces", "reduce(SUM) per step"), align="<<<>>><", indent="  ")]
        for r in self.rows:
            for reason in r.step_reasons:
                lines.append(f"  worker {r.task} step {reason}")
            for reason in r.summary_reasons:
                lines.append(f"  worker {r.task} write_summary {reason}")
        lines.append(f"  same on every worker: {', '.join(self.same) or 'nothing'}")
        lines.append(f"  differs: {', '.join(self.differs) or 'nothing'}")
        return "\n".join(lines)


# Their HTML fragments (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(DistributedTraceReport)(distributed_trace_fragment)
renders(MultiWorkerReport)(multi_worker_fragment)
