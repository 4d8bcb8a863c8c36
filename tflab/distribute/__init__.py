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

The package, one concern per module (each imports only those above it):

* `tflab.distribute.strategies`: logical CPUs, the MirroredStrategy, the lab's
  replica step and data;
* `tflab.distribute.probe`: `DistributedRetraceProbe` (outer traces are
  `tflab.retrace.TraceEvent`s; replica bodies are counted per TraceEvent);
* `tflab.distribute.records`: the records, `DistributedTraceReport`, `MirroredVariableInfo`,
  `MultiWorkerReport`, `WorkerRow` (no TF);
* `tflab.distribute.per_device`: `inspect_distributed`;
* `tflab.distribute.processes`: the child processes (`run_children` on
  `tflab.process.group.ChildGroup`), free ports, ``TF_CONFIG``;
* `tflab.distribute.export`: export after distributed training;
* `tflab.distribute.lab`: `mirrored_lab` and `run_lab_subprocess`;
* `tflab.distribute.workers`: `run_workers`, `worker_main`;
* `tflab.distribute.user`: the same on the user's own replica step
  (``tflab distribute FILE.py:STEP``).

Logical devices must be configured before TF initializes its context, so the
single-machine lab and each worker run in a fresh Python process
(``python -m tflab.distribute.child``). Importing this package imports
nothing (names load on first use, as in `tflab.retrace`).
"""

from __future__ import annotations

import importlib

from tflab._api.lazy import lazy_exports

# Public name -> the submodule that defines it (PEP 562 module __getattr__).
_EXPORTS = {
    **dict.fromkeys(("CROSS_REPLICA_OP", "configure_logical_cpus", "lab_dataset", "make_replica_step",
                     "mirrored_strategy"), "strategies"),
    **dict.fromkeys(("DistributedRetraceProbe", "ReplicaRun", "count_replica_runs"), "probe"),
    **dict.fromkeys(("DistributedTraceReport", "MirroredVariableInfo", "MultiWorkerReport", "WorkerRow"), "records"),
    **dict.fromkeys(("inspect_distributed",), "per_device"),
    **dict.fromkeys(("WorkerError", "pick_free_ports", "run_children", "tf_config", "watch_parent",
                     "worker_argv"),
                    "processes"),
    **dict.fromkeys(("export_after_distributed_training", "saved_model_devices", "saved_model_op_types"),
                    "export"),
    **dict.fromkeys(("lab_text", "mirrored_lab", "run_lab_subprocess"), "lab"),
    **dict.fromkeys(("run_workers", "worker_main"), "workers"),
    **dict.fromkeys(("MAX_REPLICAS", "MAX_WORKERS", "UserStep", "check_counts", "check_user_step",
                     "empty_batch_notes", "run_user_step", "user_text"), "user"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.distribute.{part}"))
