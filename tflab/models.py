"""The tour's default model and the batches, dataset and training step its sections share.

`tflab.tour` and every section under `tflab._tour` import these from here
(not from `tflab.tour`, which imports every section).
"""

from __future__ import annotations

from typing import Any

IMAGE_SHAPE = (96, 96, 3)
NUM_CLASSES = 10


def build_default_model(seed: int = 0):
    """Keras 3 ``MobileNetV3Small`` with random weights, 96×96×3 → 10 classes.

    Args:
        seed: seeds Keras' weight initializers, so two tours build the same weights.

    Returns:
        An uncompiled `keras.Model` taking float32 ``(batch, 96, 96, 3)`` in [0, 255]
        and returning ``(batch, 10)`` softmax probabilities that depend on the input.

    Freshly initialized, its BatchNormalization layers hold Keras' default
    statistics (moving mean 0, variance 1), so at inference nothing is
    normalized and the signal shrinks through the blocks to logits of ~1e-10:
    the softmax is exactly 0.1 for every class and every input (measured on
    TF 2.21 / Keras 3), which would make every output comparison of the tour
    (XLA vs eager, SavedModel, TFLite argmax) compare a constant. One
    training-mode pass over a seeded batch with ``momentum=0`` sets each
    layer's moving statistics to that batch's (Keras ``BatchNormalization``:
    ``moving = moving * momentum + batch * (1 - momentum)``); no weight is
    trained.
    """
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.applications.MobileNetV3Small(
        weights=None, input_shape=IMAGE_SHAPE, classes=NUM_CLASSES)
    calibrate_batch_norm(model, example_batch(model_input_spec(model), 16, seed=seed))
    return model


def calibrate_batch_norm(model, batch) -> None:
    """Sets every BatchNormalization layer's moving mean/variance to ``batch``'s statistics.

    Args:
        model: a built Keras model.
        batch: one input batch (at least 2 rows), e.g. `example_batch`.
    """
    import keras

    layers = [layer for layer in _nested_layers(model) if isinstance(layer, keras.layers.BatchNormalization)]
    saved = [layer.momentum for layer in layers]
    try:
        for layer in layers:
            layer.momentum = 0.0
        model(batch, training=True)
    finally:
        for layer, momentum in zip(layers, saved):
            layer.momentum = momentum


def _nested_layers(model) -> list:
    """Every layer under ``model`` through the public ``.layers`` lists, depth first, each once.

    A functional model such as MobileNetV3Small lists all its layers at the top;
    a nested model (a Sequential inside a functional one) lists its own.
    """
    seen: dict[int, Any] = {}
    stack = list(reversed(getattr(model, "layers", None) or []))
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen[id(layer)] = layer
        stack.extend(reversed(getattr(layer, "layers", None) or []))
    return list(seen.values())


def model_input_spec(model) -> Any:
    """The model's input as a `tf.TensorSpec` with batch dim None.

    Works for Keras models (``model.inputs``) and `keras.layers.TFSMLayer`
    (the SavedModel signature's input). Multi-input models return a list.
    """
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if inputs:
        specs = [tf.TensorSpec([None] + list(t.shape[1:]), t.dtype, name=getattr(t, "name", None))
                 for t in inputs]
        return specs[0] if len(specs) == 1 else specs
    sig = getattr(model, "call_endpoint_fn", None)  # keras.layers.TFSMLayer's loaded signature
    if sig is not None and hasattr(sig, "structured_input_signature"):
        _, kwargs = sig.structured_input_signature
        specs = [tf.TensorSpec([None] + s.shape.as_list()[1:], s.dtype, name=n) for n, s in kwargs.items()]
        return specs[0] if len(specs) == 1 else specs
    raise ValueError("cannot tell the model's input shape")


def example_batch(spec, batch: int, seed: int = 0):
    """A seeded random batch for ``spec`` (floats uniform in [0, 255], like images)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    shape = [batch] + spec.shape.as_list()[1:]
    if spec.dtype.is_floating:
        return tf.constant(rng.uniform(0, 255, shape).astype(spec.dtype.as_numpy_dtype))
    return tf.constant(rng.integers(0, 10, shape), dtype=spec.dtype)


def tour_dataset(spec, num_classes: int, n: int = 10, batch: int = 4, seed: int = 0):
    """``n`` seeded (image, label) pairs batched by ``batch``: sizes 4, 4, 2 by default.

    The smaller last batch is the classic retrace trigger studied in steps 2 and 4.
    """
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = example_batch(spec, n, seed)
    y = rng.integers(0, max(num_classes, 1), n)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def step4_extra_batch(spec, num_classes: int):
    """Step 4's last training batch, of a size the dataset never yields (3 rows, seed 1)."""
    return next(iter(tour_dataset(spec, num_classes, n=3, batch=3, seed=1)))


def tour_optimizer():
    """The optimizer of the tour's training step (steps 2 and 4): ``keras.optimizers.SGD(momentum=0.9)``.

    Like Adam it creates slot variables (one momentum per trainable variable,
    142 for MobileNetV3Small) on its first ``apply_gradients``, so inside a
    tf.function TF traces the first call twice (the variable-creation re-trace
    step 2 explains). Its Python update per variable is smaller than Adam's: on
    a loaded 2-CPU machine a retrace of the tour's training step and its run
    took 7.6 CPU-s against Adam's 12.5–15.8, the first call (two traces and a
    run) 17.9 against 23.1–36.2 (``benchmarks/bench_tour.py
    --optimizers`` measures the candidates). Plain ``SGD()`` creates no
    variable, so its first call traces once: the re-trace would be lost.
    """
    import keras

    return keras.optimizers.SGD(momentum=0.9)


def make_train_step(model, optimizer=None):
    """A real training step for ``model``: forward, loss, GradientTape, optimizer update.

    The loss is sparse categorical cross-entropy on the model's probabilities
    when its output is ``(batch, classes)`` and the default model's softmax
    head; for other models, the mean squared output (any differentiable scalar
    exercises the same tape and optimizer machinery).

    Args:
        model: a Keras model.
        optimizer: default `tour_optimizer` (SGD with momentum), whose slot
            variables are created on the first call: inside a tf.function that
            makes TF trace the first call twice. A reloaded SavedModel (`keras.layers.TFSMLayer`)
            is updated by plain SGD instead.

    Returns:
        The plain Python function ``train_step(x, y) -> loss`` (float32 scalar),
        not yet wrapped in `tf.function`.
    """
    import keras
    import tensorflow as tf

    optimizer = optimizer or tour_optimizer()
    # A reloaded SavedModel (TFSMLayer) holds tf.Variables named "…:0", which
    # Keras 3 optimizers reject as slot-variable scope names: update those by
    # plain SGD (no slot variables, so no variable-creation re-trace).
    plain_sgd = isinstance(model, keras.layers.TFSMLayer)
    xent = keras.losses.SparseCategoricalCrossentropy()
    classifier = len(getattr(model, "outputs", []) or []) == 1 and len(model.outputs[0].shape) == 2

    def train_step(x, y):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            if classifier:
                loss = xent(y, out)
            else:  # a SavedModel's TFSMLayer returns a dict of outputs
                loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32)))
                                 for t in tf.nest.flatten(out)])
        variables = model.trainable_variables
        if variables:
            grads = tape.gradient(loss, variables)
            if plain_sgd:
                for v, g in zip(variables, grads):
                    if g is not None:
                        v.assign_sub(1e-3 * g)
            else:
                optimizer.apply_gradients(zip(grads, variables))
        return loss

    return train_step
