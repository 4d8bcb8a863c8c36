"""Tour step 5: what AutoGraph makes of a training step's Python control flow."""

from __future__ import annotations

import keras
import tensorflow as tf


def make_clipped_step(model, classifier: bool):
    """A training step with data-dependent control flow, for `autograph_diff` to read.

    Gradients are rescaled only when their global norm exceeds ``threshold`` (a
    tensor condition: an If op), the learning rate decays over ``warmup`` steps
    (a ``tf.range`` loop: a While op), and the SGD update walks the Python list
    of variables (unrolled once per variable).
    """
    xent = keras.losses.SparseCategoricalCrossentropy()

    def clipped_step(x, y, threshold, warmup):
        with tf.GradientTape() as tape:
            out = model(x, training=False)
            loss = xent(y, out) if classifier else _mean_square(out)
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        norm = tf.linalg.global_norm(grads)
        if norm > threshold:
            grads = [g * (threshold / norm) for g in grads]
        lr = tf.constant(0.1)
        for _ in tf.range(warmup):
            lr = lr * 0.5
        for v, g in zip(variables, grads):
            v.assign_sub(lr * g)
        return loss, norm

    return clipped_step


def running_sums(x, steps):
    """A common mistake for `diagnose` to read: a Python list filled inside a
    ``tf.range`` loop (a While op), so the appended tensors cannot leave it."""
    sums = []
    total = tf.zeros_like(x)
    for _ in tf.range(steps):
        total += x
        sums.append(total)
    return tf.stack(sums)


def run(ctx) -> None:
    from tflab.autograph import autograph_diff
    from tflab.models import model_input_spec

    spec = ctx.shared.get("input_spec") or model_input_spec(ctx.model)
    outputs = getattr(ctx.model, "outputs", None) or []
    classifier = len(outputs) == 1 and len(outputs[0].shape) == 2
    step = make_clipped_step(ctx.model, classifier)
    # Traced only (get_concrete_function), never run: the weights stay untouched.
    d = autograph_diff(step, spec, tf.TensorSpec([None], tf.int32, name="y"),
                       tf.TensorSpec([], tf.float32, name="threshold"),
                       tf.TensorSpec([], tf.int32, name="warmup"))
    for s in d.statements:
        what = (f"{s.op_type} {s.op!r}" if s.outcome == "graph"
                else f"Python, unrolled ×{s.unrolled}" if s.unrolled is not None else "Python")
        ctx.line(f"line {s.lineno:<4d} {s.source:<36s} → {what}")
    rewritten = [ln for ln in d.unified_diff.splitlines()
                 if ln.startswith("+") and ("ag__.if_stmt(" in ln or "ag__.for_stmt(" in ln)]
    for ln in rewritten[:2]:
        ctx.line(ln if len(ln) <= 100 else ln[:99] + "…")
    ctx.line(f"diff: {len(d.unified_diff.splitlines())} lines (tflab autograph FILE.py:FUNC prints it)")
    from tflab.diagnosis import diagnose

    bad = diagnose(running_sums, tf.TensorSpec([4], tf.float32), tf.TensorSpec([], tf.int32))
    ctx.line(f"diagnose(running_sums): line {bad.line} `{bad.statement}` -> {bad.kind}")
    ctx.line(f"  fix: {bad.fix}")
    ctx.report["diagnosis"] = bad.to_dict()
    ctx.report["autograph"] = {
        "function": d.function_name,
        "statements": [{"lineno": s.lineno, "kind": s.kind, "outcome": s.outcome, "op": s.op,
                        "op_type": s.op_type, "unrolled": s.unrolled, "source": s.source}
                       for s in d.statements],
        "diff_lines": len(d.unified_diff.splitlines()),
        "warnings": list(d.warnings),
    }


def _mean_square(out):
    """A differentiable scalar for models that are not a (batch, classes)
    classifier, e.g. a SavedModel's TFSMLayer returning a dict of outputs."""
    import tensorflow as tf

    return tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32))) for t in tf.nest.flatten(out)])
