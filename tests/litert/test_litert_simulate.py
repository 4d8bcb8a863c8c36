"""The end-to-end check of a quantized variant: LiteRT against the float model with the variant's own
quantization simulated (`tflab.litert.simulate`).

Healthy int8 and dynamic-range conversions of a Dense MLP and a small CNN stay within the measured
bound; a weight's scale ×1.1 and a dropped bias, planted in the flatbuffer bytes, leave the simulation at
the op that holds them. The models have non-zero biases (Keras initializes them to zero, which would hide
a dropped bias). Every judged number comes from LiteRT's builtin integer kernels and the numpy
simulation; TF only exports the models, so no oneDNN marker is needed.
"""

from __future__ import annotations

import numpy as np
import pytest


def _nonzero_biases(model, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if "bias" in w.path:
            w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))


def _mlp():
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((32,), name="x")
    h = keras.layers.Dense(64, activation="relu")(x)
    h = keras.layers.Dense(64, activation="relu")(h)  # 4096 weights: dynamic-range quantizes it
    return keras.Model(x, keras.layers.Dense(10)(h))


def _cnn():
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3), name="x")
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    h = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(h)  # 2304 weights
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    return keras.Model(x, keras.layers.Dense(6, activation="softmax")(h))


def _centered_layernorm():
    """Dense → subtract its own mean → LayerNormalization → Dense: the LayerNorm's MEAN cancels to ~0 while
    its terms are ~1 (a ConvNeXt LayerNorm after a downsampling conv does the same)."""
    import keras

    class Center(keras.layers.Layer):
        def call(self, x):
            return x - keras.ops.mean(x, axis=-1, keepdims=True)

    keras.utils.set_random_seed(0)
    x = keras.Input((32,), name="x")
    h = keras.layers.Dense(64)(x)
    h = keras.layers.Dense(64)(h)  # 4096 weights: dynamic-range quantizes it
    h = keras.layers.LayerNormalization()(Center()(h))
    return keras.Model(x, keras.layers.Dense(64)(h))  # 4096 weights: the planted op


def plant(model: bytes, op_type: str, nth: int, defect: str) -> bytes:
    """``model`` with its ``nth`` ``op_type`` op's weight scales ×1.1 (``"scale_x1.1"``) or bias zeroed
    (``"bias_dropped"``), edited in the flatbuffer."""
    from tensorflow.lite.tools import flatbuffer_utils

    from tflab._tf.lite import schema

    fb = schema()
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(model))
    builtin = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    sg = m.subgraphs[0]
    ops = [o for o in sg.operators if builtin[max(m.operatorCodes[o.opcodeIndex].builtinCode,
                                                   m.operatorCodes[o.opcodeIndex].deprecatedBuiltinCode)] == op_type]
    op = ops[nth]
    if defect == "scale_x1.1":
        q = sg.tensors[op.inputs[1]].quantization
        q.scale = (np.asarray(q.scale) * 1.1).tolist()
    elif defect == "bias_dropped":
        buf = m.buffers[sg.tensors[op.inputs[2]].buffer]
        buf.data = np.zeros(len(buf.data), np.uint8)
    else:
        raise ValueError(defect)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from tflab.litert.conversion import convert
    from tflab.saved_model import save_and_reload

    out = {}
    for name, build, shape in (("mlp", _mlp, (32,)), ("cnn", _cnn, (12, 12, 3)), ("ln", _centered_layernorm, (32,))):
        model = build()
        _nonzero_biases(model)
        ex = [{"x": np.random.default_rng(3).standard_normal((8, *shape)).astype(np.float32)}]
        sm = save_and_reload(model, tmp_path_factory.mktemp(name) / "sm", ex)
        path = sm.path
        out[name] = ({"serving_default": list(sm.example_batches.feeds("serving_default"))},
                     {q: convert(path, q, sm.example_batches) for q in ("none", "int8", "dynamic")})
    return out


TARGET = {"mlp": ("FULLY_CONNECTED", 1), "cnn": ("CONV_2D", 1), "ln": ("FULLY_CONNECTED", 2)}
CASES = [(m, q) for m in ("mlp", "cnn", "ln") for q in ("int8", "dynamic")]


@pytest.mark.parametrize("name,q", CASES, ids=[f"{m}-{q}" for m, q in CASES])
def test_healthy_variant_stays_within_its_simulation(converted, name, q):
    """Rounding as the variant's own scales say explains LiteRT's tensors: nothing leaves its bound, and
    the quantized output is not the float one (the check compares rounded models, not float to float)."""
    from tflab.litert.simulate import simulation_check

    feeds, models = converted[name]
    sim = simulation_check(models[q], models["none"], feeds, q)
    assert sim.ok is True, sim.to_text()
    assert sim.outputs and all(t.bound_ratio <= 1.0 for t in sim.outputs)
    assert any(t.max_abs_error > 0 or t.step > 0 for t in sim.tensors)
    assert not sim.carried


PLANTED = [(m, q, d) for m in ("mlp", "cnn") for q in ("int8", "dynamic") for d in ("scale_x1.1", "bias_dropped")] \
    + [("ln", q, d) for q in ("int8", "dynamic") for d in ("scale_x1.1", "bias_dropped")]


@pytest.mark.parametrize("name,q,defect", PLANTED, ids=[f"{m}-{q}-{d}" for m, q, d in PLANTED])
def test_planted_defect_leaves_the_simulation_at_its_op(converted, name, q, defect):
    """A weight scale ×1.1 or a dropped bias changes what the op computes: LiteRT's tensor there is
    beyond its bound, and the first such tensor is that op's output."""
    from tflab.litert.ops import read_ops
    from tflab.litert.simulate import simulation_check

    feeds, models = converted[name]
    op_type, nth = TARGET[name]
    bad = plant(models[q], op_type, nth, defect)
    sim = simulation_check(bad, models["none"], feeds, q)
    assert sim.ok is False
    ops = [o for o in read_ops(bad).subgraphs[0] if o.op_type == op_type]
    assert sim.first_outside.index == ops[nth].index, sim.to_text()
    assert "beyond their bound" in sim.summary_line()


def test_a_float_op_after_a_dequantize_carries_its_source_step(converted):
    """The int8 LayerNorm keeps a float NEG between a DEQUANTIZE and a QUANTIZE (as ConvNeXt's head
    does): its value is the int8 MEAN's, so it is off wherever that MEAN is, by the steps the MEAN's own
    bound allowed. Its bound carries that step; with none, a healthy MEAN off by what its own bound
    allowed put the NEG beyond its bound and the variant was called OUTSIDE."""
    from tflab.litert.ops import read_ops
    from tflab.litert.simulate import simulation_check

    feeds, models = converted["ln"]
    ops = read_ops(models["int8"]).subgraphs[0]
    producer = {t.index: op for op in ops for t in op.outputs}
    chains = [(op, producer[op.inputs[0].index]) for op in ops
              if not op.outputs[0].quantized and op.op_type not in ("DEQUANTIZE", "QUANTIZE")
              and op.inputs[0].index in producer and producer[op.inputs[0].index].op_type == "DEQUANTIZE"]
    assert chains, [o.op_type for o in ops]  # the converter still keeps a float op there
    sim = simulation_check(models["int8"], models["none"], feeds, "int8")
    by_index = {t.index: t for t in sim.tensors}
    for op, deq in chains:
        source = float(deq.inputs[0].scale.max())
        assert source > 0
        assert by_index[op.index].step == pytest.approx(source), sim.to_text()
        assert by_index[op.index].bound >= 2.0 * source  # OUTPUT_STEPS of its source, as the source is allowed


def test_fake_quant_equals_tf_fake_quant_ops():
    """The rounding the simulation applies is TF's fake-quant op's for the same grid
    (tf.quantization.fake_quant_with_min_max_vars, 8 bits, min/max on the grid)."""
    import tensorflow as tf

    from tflab.litert.ops import TensorInfo
    from tflab.litert.simulate import fake_quant

    s, z = 0.05, -7
    t = TensorInfo(0, "t", "int8", (64,), np.array([s]), np.array([z]), 0, None)
    x = np.linspace(-8, 8, 64)
    lo, hi = (-128 - z) * s, (127 - z) * s
    want = tf.quantization.fake_quant_with_min_max_vars(tf.constant(x, tf.float32), lo, hi, num_bits=8).numpy()
    np.testing.assert_allclose(fake_quant(x, t), want, atol=1e-6)
    # Per channel along the quantized dimension: each column on its own grid.
    tc = TensorInfo(0, "w", "int8", (2, 3), np.array([0.1, 0.2, 0.4]), np.zeros(3, np.int64), 1, None)
    w = np.array([[0.26, 0.26, 0.26], [-13.0, 0.0, 0.0]])
    np.testing.assert_allclose(fake_quant(w, tc), [[0.3, 0.2, 0.4], [-12.8, 0.0, 0.0]])


def test_a_slip_carried_through_a_steep_softmax_is_no_false_alarm(tmp_path, monkeypatch):
    """A healthy int8 two-head model whose softmax head is peaked (its kernel ×8, as a trained one):
    LiteRT's logits are one step off the simulation (within their bound), and a logit step moves this
    softmax by many output steps. The SOFTMAX was 5.8× its bound (OUTSIDE, exit 1, no cause); with
    the carried effect of its input's measured deviation (`simulate.carry`) it is within it. Without
    the carry (planted: carry 0) the same tensors fail, so the check is what changed."""
    import keras
    from keras import layers

    from tflab.litert import simulate as S
    from tflab.litert.conversion import convert
    from tflab.litert.ops import read_ops

    keras.utils.set_random_seed(21)
    ids, num = keras.Input((8,), dtype="int32", name="ids"), keras.Input((5,), name="num")
    e = layers.GlobalAveragePooling1D()(layers.Embedding(30, 8)(ids))
    h = layers.Concatenate()([e, layers.Dense(8, activation="relu")(num)])  # layers made in this order
    h = layers.Dense(16, activation="relu")(h)
    cls = layers.Dense(4, activation="softmax", name="cls")(h)
    m = keras.Model({"ids": ids, "num": num}, {"cls": cls, "reg": layers.Dense(1, name="reg")(h)})
    head = m.get_layer("cls")
    k, b = head.get_weights()
    head.set_weights([k * 8, b])
    m.export(str(tmp_path / "sm"), verbose=False)
    rng = np.random.default_rng(8)
    ex = {"ids": rng.integers(0, 30, (32, 8)).astype(np.int32), "num": rng.normal(10, 3, (32, 5)).astype(np.float32)}
    q, f = convert(str(tmp_path / "sm"), "int8", [ex]), convert(str(tmp_path / "sm"), "none")
    feeds = {key: [ex] for key in read_ops(q).signatures}
    worst = max(S.simulation_check(q, f, feeds, "int8").tensors, key=lambda t: t.bound_ratio)
    assert worst.bound_ratio <= 1.0, worst
    monkeypatch.setattr(S, "carry", lambda sim, index: 0.0)
    before = max(S.simulation_check(q, f, feeds, "int8").tensors, key=lambda t: t.bound_ratio)
    assert before.op_type == "SOFTMAX" and before.bound_ratio > 2.0, before
