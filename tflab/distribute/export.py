"""Export after distributed training: what a SavedModel keeps of a MirroredStrategy model.

TF saves only the primary component of each distributed variable and no
replica structure (``values.DistributedVariable._export_to_saved_model_graph``),
so the SavedModel holds no collective ops and no replica devices. The op types
and devices are read from ``saved_model.pb`` itself (`tflab._tf.distribute.read_saved_model_proto`):
what a serving binary would load, without running anything.
"""

from __future__ import annotations

import collections
import os
import re
from typing import Any

from tflab._tf.distribute import read_saved_model_proto
from tflab.distribute.strategies import CROSS_REPLICA_OP


def _nodes(path: str):
    sm = read_saved_model_proto(path)
    for mg in sm.meta_graphs:
        yield from mg.graph_def.node
        for fn in mg.graph_def.library.function:
            yield from fn.node_def


def saved_model_op_types(path: str) -> dict[str, int]:
    """Op type -> count over a SavedModel's graph and every function in its library.

    Args:
        path: the SavedModel folder (holding ``saved_model.pb``).

    Returns:
        ``{"MatMul": 2, …}``, most common first.
    """
    return dict(collections.Counter(n.op for n in _nodes(path)).most_common())


def saved_model_devices(path: str) -> list[str]:
    """Device strings on nodes of a SavedModel (TF clears them on save unless asked to keep them)."""
    return sorted({n.device for n in _nodes(path) if n.device})


def export_after_distributed_training(strategy: Any, export_dir: str) -> dict:
    """Trains a small Keras model under ``strategy``, then saves and round-trips it.

    The model (Dense(8, relu) -> Dense(3) on 4 features) is built in
    ``strategy.scope()``, so its weights are MirroredVariables, and trained
    with ``model.fit`` for 2 steps (each an all-reduce); its variables stay
    MirroredVariables when it is saved. `tflab.save_and_reload` checks the
    SavedModel bit by bit against the in-process model; `tflab.tflite_roundtrip`
    converts it (float) and checks LiteRT within its bound.

    Args:
        strategy: the ``MirroredStrategy`` to train under.
        export_dir: a folder; the SavedModel goes to ``export_dir/saved_model``.

    Returns:
        ``{"variable_types", "saved_model_bit_exact", "tflite_bit_exact", "tflite_within_bound",
        "tflite_max_abs_error", "tflite_bound", "distribution_ops", "replica_devices",
        "op_types", "path"}``.
    """
    import keras
    import numpy as np

    # Through tflab's public names: where the round trips live is their packages' business.
    from tflab import save_and_reload, tflite_roundtrip

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
