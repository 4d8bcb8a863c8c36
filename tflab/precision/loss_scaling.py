"""Loss scaling measured on the tour's MobileNetV3Small training step (`tflab.demonstrate_loss_scaling`).

It lives in the tour package because it builds the tour's model
(`tflab.models`): the library module `tflab.precision` it runs on stays
below the tour. ``tflab.demonstrate_loss_scaling`` and ``tflab.LossScalingDemo``
are exported lazily from here; the records (`LossScalingRow`, `LossScalingDemo`) live in
`tflab.precision.records` and are re-exported here.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tflab.precision.policy import DEFAULT_POLICIES
from tflab.precision.records import LossScalingDemo, LossScalingRow, PolicyResult, PrecisionComparison
from tflab.errors import UsageError
from tflab.precision.api import PolicySubject, run_policies

__all__ = ["LossScalingRow", "LossScalingDemo", "demonstrate_loss_scaling"]


def demonstrate_loss_scaling(input_shape: tuple = (64, 64, 3), batch: int = 4, seed: int = 0,
                             progress: Callable[[str], None] | None = None,
                             attribute: bool = True) -> LossScalingDemo:
    """Loss scaling measured on the tour's MobileNetV3Small training step.

    Builds ``keras.applications.MobileNetV3Small(weights=None, input_shape,
    classes=10)`` under float32, mixed_bfloat16 and mixed_float16 (same
    weights), runs the tour's training-step forward pass (``training=True``,
    sparse categorical cross-entropy of the float32-cast softmax output, as
    `tflab.models.make_train_step` does) on a seeded batch of images in
    [0, 255], and takes the loss gradients wrt all trainable variables: in
    float16 once without scaling and once with Keras' dynamic loss scale.

    Args:
        input_shape: image shape (H, W, 3), H and W >= 32. The default 64×64×3 is
            smaller than the tour's 96×96×3 to fit the tour section's 20 s on 2 cores;
            the network and its layers are the same.
        batch: images per batch (>= 2: BatchNormalization in training mode).
        seed: weights and data seed.
        progress: called with a line per policy (e.g. the tour's progress line).
        attribute: judge every op of a policy that disagrees with float32 on the
            inputs it received (the cause, and the fixes planned from it), as
            `compare_precisions` does. False: the rows only, in about a third of
            the time (MobileNetV3Small at 32×32: the two per-op judgments were
            37 of 60 s).

    Returns:
        A `LossScalingDemo`: rows for float32, mixed_bfloat16, mixed_float16 and
        mixed_float16 + dynamic loss scale, each with the underflow fraction,
        the gradient error against float32 and the final loss scale, plus the
        configuration it ran on.

    Raises:
        UsageError: a bad input_shape, batch or attribute (each named, with its value).
    """
    import keras
    import tensorflow as tf

    from tflab.models import NUM_CLASSES, example_batch

    def whole(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if (not isinstance(input_shape, (tuple, list)) or len(input_shape) != 3 or not all(map(whole, input_shape))
            or input_shape[2] != 3 or min(input_shape[:2]) < 32):
        raise UsageError(f"input_shape must be (H, W, 3) with H, W ints >= 32, got {input_shape!r}")
    if not whole(batch) or batch < 2:
        raise UsageError(f"batch must be an int >= 2 (BatchNormalization in training mode), got {batch!r}")
    if not isinstance(attribute, bool):  # a truthy string ("no") would run the judgments it asks to skip
        raise UsageError(f"attribute must be True or False, got {attribute!r}")
    images = example_batch(tf.TensorSpec([None, *input_shape], tf.float32), batch, seed=seed)
    labels = tf.constant(np.arange(batch) % NUM_CLASSES)
    def factory():
        # The model the loss closes over: `PolicySubject` gives every build the first build's weights
        # (BN statistics included) and puts them back before every run (`held_layers`).
        model = keras.applications.MobileNetV3Small(weights=None, input_shape=tuple(input_shape),
                                                    classes=NUM_CLASSES)
        xent = keras.losses.SparseCategoricalCrossentropy()

        def train_step_loss(images, labels):
            # Keras computes losses in float32: cast the (float16/bfloat16) softmax first.
            return xent(labels, tf.cast(model(images, training=True), tf.float32))

        return train_step_loss

    subject = PolicySubject(factory, (images, labels), {}, True, seed)
    results, _, _ = run_policies(subject, DEFAULT_POLICIES, "dynamic", "MobileNetV3Small train step",
                                 progress, attribute=attribute)
    f16 = results["mixed_float16"]

    def row(label: str, r: PolicyResult) -> LossScalingRow:
        n = r.nonzero_gradient_elements or 1
        return LossScalingRow(label=label, underflow_fraction=r.underflow_count / n,
                              range_underflow_fraction=sum(r.underflow_below_normal.values()) / n,
                              gradient_error=r.gradient_error, gradient_error_median=r.gradient_error_median,
                              overflow=r.overflow_count, loss_scale=r.loss_scale,
                              loss_scale_history=r.loss_scale_history, seconds=r.seconds)

    rows = (row("float32", results["float32"]), row("mixed_bfloat16", results["mixed_bfloat16"]),
            row("mixed_float16", f16.unscaled), row("mixed_float16 + dynamic loss scale", f16))
    comparison = PrecisionComparison(function_name="MobileNetV3Small train step", kind="keras model factory",
                                     policies=results, loss_scale="dynamic",
                                     output_names=("loss",), gradient_names=tuple(f16.gradients),
                                     random_ops=tuple(sorted(set(subject.random_ops))))
    shape = "×".join(map(str, input_shape))
    return LossScalingDemo(
        function_name="MobileNetV3Small train step",
        model=f"MobileNetV3Small(weights=None, input_shape={tuple(input_shape)}, classes={NUM_CLASSES})",
        step=f"training=True, sparse categorical cross-entropy, batch {batch} of {shape} images in [0, 255]",
        rows=rows, keras_version=keras.__version__, input=f"{batch}×{shape}", comparison=comparison)
