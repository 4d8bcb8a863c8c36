"""Logical CPUs, the MirroredStrategy over them, and the lab's one training step.

Logical devices can only be configured before TF initializes its context
(``tf.config.set_logical_device_configuration``), so the lab and each worker
run in a fresh process (`tflab.distribute.lab`, `tflab.distribute.workers`).
The replica step `make_replica_step` builds is the one the lab, the workers
and ``tests/data/distribute_step.py`` run: a squared loss of ``x @ w``, its
gradient all-reduced across replicas (``ReplicaContext.all_reduce``), one SGD
step on the ``MirroredVariable`` ``w``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from tflab.errors import UsageError

# Cross-replica communication ops TF 2.21 emits: CollectiveReduceV2 on CPU and for
# MultiWorkerMirroredStrategy, NcclAllReduce for MirroredStrategy on GPUs.
CROSS_REPLICA_OP = re.compile(r"^(Collective\w*|Nccl\w*)$")


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

    Example:
        >>> configure_logical_cpus(2)
        ['/cpu:0', '/cpu:1']
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


def make_replica_step(w: Any, learning_rate: float = 0.01) -> Callable:
    """The lab's replica function: one SGD step of ``mean((x @ w)[:, 0] - y)²`` with an all-reduced gradient.

    Args:
        w: a ``tf.Variable`` of shape ``[features, 1]`` made in ``strategy.scope()``
            (a ``MirroredVariable``: one component per replica).
        learning_rate: the SGD step.

    Returns:
        ``replica_step(x, y) -> loss`` for ``strategy.run(replica_step, args=(x, y))``:
        ``x`` float32 ``[batch, features]``, ``y`` float32 ``[batch]``; the loss is
        this replica's (a float32 scalar). ``all_reduce("SUM", …)`` becomes one
        ``CollectiveReduceV2`` per device on CPU.
    """
    import tensorflow as tf

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)[:, 0] - y))
        grad = tf.distribute.get_replica_context().all_reduce("SUM", tape.gradient(loss, w))
        w.assign_sub(learning_rate * grad)
        return loss

    return replica_step


def lab_dataset(n: int = 10, batch: int = 4, width: int = 4, drop_remainder: bool = False):
    """The lab's data: ``n`` rows of ``width`` float32 features and a float32 target, batched by ``batch``.

    With the defaults the global batches are 4, 4, 2 (per replica over 2 CPUs: 2, 2, 1).
    """
    import numpy as np
    import tensorflow as tf

    x = np.arange(n * width, dtype=np.float32).reshape(n, width) / (n * width)
    y = np.arange(n, dtype=np.float32) / n
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=drop_remainder)
