"""A quantized variant judged on the whole model, and the int8 bound of weights that pass through unrequantized.

Two ways the int8 checks disagreed with what LiteRT computes:

* A variant can compute its quantized model faithfully (LiteRT within the simulation's bound) while its
  quantization destroys the outputs: one outlier in the calibration examples (or one huge weight in a
  per-tensor table) sets a tensor's range, the other values fall on a few steps, and LiteRT's top class
  is the float model's on a third of the rows. The verdict is not ok, the cause is ``quantization-range``
  at that tensor, with its measured range use. Handed case: an outlier input value in the examples;
  sibling: an outlier weight in an Embedding table; twins: the Embedding models without the outlier.
* An int8 model whose only weights are small (an Embedding table and a small Dense kernel, under the
  dynamic-range recipe's 1024 elements) had no weight term in its end-to-end bound, so LiteRT computing
  the quantized model correctly was over it: GATHER passes the table's int8 rows on with the table's own
  scale, and their rounding reached the output unbounded. Handed case: Embedding → average pooling →
  Dense; sibling: Embedding → Flatten (RESHAPE) → Dense. A table defect (its codes ×1.1) is now caught
  at the GATHER by the per-op check and the simulation, which carried LiteRT's GATHER output before.

Every judged number comes from LiteRT's builtin integer kernels, numpy and TF's gradients of a Dense/
Embedding model (no oneDNN-dependent op in the verdicts).
"""

from __future__ import annotations

import numpy as np
import pytest


def _mlp():
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((16,), name="x")
    h = keras.layers.Dense(32, activation="relu")(x)
    m = keras.Model(x, keras.layers.Dense(10)(h))
    rng = np.random.default_rng(1)
    for w in m.weights:
        if "bias" in w.path:
            w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))
    return m


def _embedding(flatten: bool = False, outlier: float | None = None, classes: int = 10):
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((6,), dtype="int32", name="ids")
    emb = keras.layers.Embedding(20, 8)
    h = emb(x)
    h = keras.layers.Flatten()(h) if flatten else keras.layers.GlobalAveragePooling1D()(h)
    m = keras.Model(x, keras.layers.Dense(classes)(h))
    if outlier is not None:
        t = emb.embeddings.numpy()
        t[7, 2] = outlier  # one entry of a per-tensor table sets the table's scale
        emb.embeddings.assign(t)
    return m


CASES = {
    # name: (builder, examples)
    "mlp_input_outlier": (_mlp, "x_outlier"),
    "embedding": (_embedding, "ids"),
    "embedding_weight_outlier": (lambda: _embedding(outlier=50.0), "ids"),
    "embedding_flatten": (lambda: _embedding(flatten=True, classes=4), "ids"),
}


def _examples(kind: str) -> dict:
    rng = np.random.default_rng(3)
    if kind == "ids":
        return {"ids": rng.integers(0, 20, (16, 6)).astype(np.int32)}
    x = rng.standard_normal((16, 16)).astype(np.float32)
    if kind == "x_outlier":
        # One value in the calibration examples: the input's int8 step becomes 2000/127 ≈ 16, so every
        # other input (|x| < 5) rounds to 0 and the outputs no longer depend on the input.
        x[5, 2] = 2000.0
    return {"x": x}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    from tflab.examples import Examples
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import convert

    out = {}
    for name, (build, kind) in CASES.items():
        # Keras' own export (a quarter of save_and_reload's time; its round-trip check is not needed here).
        path = str(tmp_path_factory.mktemp(name) / "sm")
        build().export(path, verbose=False)
        sm = _Saved(path, Examples.of([_examples(kind)]))
        none = convert(sm.path, "none")
        int8 = convert(sm.path, "int8", sm.example_batches)
        out[name] = (sm, none, int8, check_tflite(int8, sm.path, sm.example_batches, "int8", float_model=none))
    return out


class _Saved:
    def __init__(self, path: str, example_batches):
        self.path, self.example_batches = path, example_batches


@pytest.mark.parametrize("name,role", [("mlp_input_outlier", "input"), ("embedding_weight_outlier", "weight")])
def test_quantization_that_destroys_the_outputs_is_not_ok(checked, name, role):
    """LiteRT is its quantized model (simulation within bound), but a third of the rows or fewer keep the
    float model's class: not ok, cause ``quantization-range`` at the outlier-set tensor, its range use
    measured (the 99.9th percentile of its magnitudes uses under 1/16 of the range's reach)."""
    from tflab.litert.whole_model import MIN_TOP1_AGREEMENT, OUTLIER_RANGE_USE

    c = checked[name][3]
    assert c.simulation.ok is True, c.to_text()
    assert c.within_bound is True, c.to_text()  # the bounds are not what catches it
    (effect,) = c.whole_model
    assert effect.top1_agreement < MIN_TOP1_AGREEMENT and effect.crossed, effect.text
    assert c.ok is False
    assert c.cause is not None and c.cause.kind == "quantization-range", c.to_text()
    assert c.cause.evidence["role"] == role and c.cause.evidence["range_used"] < OUTLIER_RANGE_USE
    assert "destroys the outputs" in c.cause.line_text and "set by outliers" in c.cause.line_text
    assert "whole model vs TF" in c.to_text() and "CROSSED" in c.to_text()


@pytest.mark.parametrize("name", ["embedding", "embedding_flatten"])
def test_healthy_twin_stays_ok(checked, name):
    """The Embedding model without the outlier (and its Flatten sibling): most rows keep their class,
    every range is well used, ok."""
    from tflab.litert.whole_model import OUTLIER_RANGE_USE

    c = checked[name][3]
    (effect,) = c.whole_model
    assert not effect.crossed and effect.top1_agreement >= 0.9, effect.text
    assert c.ok is True and c.cause is None, c.to_text()
    assert all(r.range_used > OUTLIER_RANGE_USE for r in c.simulation.ranges), c.simulation.ranges


def test_range_use_measures_an_outlier_set_grid():
    """`range_use` on a hand-made grid: 999 values within ±1 on a grid reaching ±127 use 1/127 of it; the
    same values on a grid reaching ±1.27 use most of it; per channel, the median channel's share."""
    from tflab.litert.ops import TensorInfo
    from tflab.litert.whole_model import range_use

    x = np.concatenate([np.linspace(-1, 1, 999), [127.0]])
    coarse = TensorInfo(0, "t", "int8", (1000,), np.array([1.0]), np.array([0]), 0, None)
    fine = TensorInfo(0, "t", "int8", (1000,), np.array([0.01]), np.array([0]), 0, None)
    share, bulk = range_use(x, coarse)
    assert bulk == pytest.approx(1.0, abs=0.01) and share == pytest.approx(1 / 127, rel=0.02)
    assert range_use(x[:999], fine)[0] == pytest.approx(1 / 1.27, rel=0.02)
    per_channel = TensorInfo(0, "w", "int8", (3, 4), np.array([1.0, 0.01, 0.01]), np.zeros(3, int), 0, None)
    w = np.array([[1.0] * 4, [1.0] * 4, [1.0] * 4])
    assert range_use(w, per_channel)[0] == pytest.approx(1 / 1.27, rel=0.02)


@pytest.mark.parametrize("name", ["embedding", "embedding_flatten"])
def test_int8_bound_counts_weights_passed_through_unrequantized(checked, name):
    """LiteRT computes the int8 model faithfully and is within the end-to-end bound; with the old rule
    (only weights of ≥ 1024 elements counted) the same bound is below LiteRT's measured error."""
    from tflab.litert.bounds import MIN_WEIGHT_ELEMENTS, float_variable_sizes, output_bounds, sensitivity
    from tflab.saved_model import load_saved_model, signature_inputs

    sm, _, _, c = checked[name]
    assert c.simulation.ok is True and c.ok is True, c.to_text()
    (o,) = c.outputs.values()
    assert o.within_bound, c.to_text()
    loaded = load_saved_model(sm.path)
    batches = sm.example_batches.check({k: signature_inputs(f) for k, f in loaded.signatures.items()})
    sens = sensitivity(sm.path, loaded, batches)
    assert max(float_variable_sizes(loaded)) < MIN_WEIGHT_ELEMENTS  # every weight is a small one
    key = f"serving_default/{o.name}"
    fn = loaded.signatures["serving_default"]
    want = np.concatenate([fn(**feed)[o.name].numpy().ravel() for feed in batches.feeds("serving_default")])
    old = output_bounds("int8", key, want, sens, False, {}, o.step)
    assert old.max() < o.max_abs_error, (old.max(), o.max_abs_error)


def _table_codes_x(model: bytes, factor: float) -> bytes:
    """``model`` with the int8 codes of the table its GATHER reads multiplied by ``factor`` (clipped)."""
    from tensorflow.lite.tools import flatbuffer_utils

    from tflab.litert.ops import read_ops

    gather = next(op for op in read_ops(model).subgraphs[0] if op.op_type == "GATHER")
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(model))
    buf = m.buffers[m.subgraphs[0].tensors[gather.inputs[0].index].buffer]
    codes = np.frombuffer(bytes(bytearray(buf.data)), np.int8).astype(np.float64)
    buf.data = np.clip(np.round(codes * factor), -127, 127).astype(np.int8).view(np.uint8)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


def test_table_defect_is_caught_at_the_gather(checked):
    """A table whose codes are ×1.1 is caught at the GATHER that reads it, by the per-op check and by the
    simulation (which used to carry LiteRT's GATHER output as is); the healthy table passes both."""
    from tflab.litert.check import check_tflite

    sm, none, int8, healthy = checked["embedding"]
    gather = [op for op in healthy.ops if op.op_type == "GATHER"]
    assert gather and gather[0].verdict == "ok", healthy.per_op.to_text()
    bad = check_tflite(_table_codes_x(int8, 1.1), sm.path, sm.example_batches, "int8", float_model=none)
    assert bad.ok is False
    first = min(bad.per_op.outside, key=lambda o: o.index)
    assert first.op_type == "GATHER", bad.per_op.to_text()
    assert bad.simulation.first_outside is not None and bad.simulation.first_outside.op_type == "GATHER", \
        bad.simulation.to_text()


def test_output_effect_judges_rows_with_one_tf_class_and_the_range_share():
    """Rows where TF ties its top classes have no class to keep (not judged); a class flipped on most of
    the other rows crosses the threshold; a regression-shaped output is judged by its range share."""
    from tflab.litert.records import OutputError
    from tflab.litert.whole_model import MAX_RANGE_SHARE, output_effect

    def out(share):
        return OutputError("y", "float32", (-1, 3), share, 0.0, 0, 1.0, 0.1, None, 1.0, (0.01, 0))

    tied = [np.array([[1.0, 1.0, 1.0]] * 4)]
    e = output_effect(out(0.01), [np.array([[0.0, 2.0, 1.0]] * 4)], tied)
    assert e.rows == 0 and e.top1_agreement is None and not e.crossed
    want = [np.array([[3.0, 1.0, 0.0]] * 4)]
    flipped = [np.array([[0.0, 2.0, 1.0]] * 3 + [[3.0, 1.0, 0.0]])]
    e = output_effect(out(0.01), flipped, want)
    assert e.rows == 4 and e.top1_agreement == 0.25 and e.crossed
    assert not output_effect(out(0.01), want, want).crossed
    column = [np.array([[0.5], [1.5]])]
    assert output_effect(out(MAX_RANGE_SHARE * 1.2), column, column).crossed
    assert not output_effect(out(MAX_RANGE_SHARE * 0.8), column, column).crossed
    # class scores are judged by their class: every row kept, a worst element past the range share is
    # reported, not a verdict; the same share on a regression output (above) crosses
    kept = output_effect(out(MAX_RANGE_SHARE * 1.2), want, want)
    assert kept.top1_agreement == 1.0 and not kept.crossed and "CROSSED" not in kept.text
    # tied rows only: no class judged, so the range share decides again
    assert output_effect(out(MAX_RANGE_SHARE * 1.2), tied, tied).crossed


def test_an_output_tf_itself_leaves_flat_at_int8_resolution_is_not_judged_unless_far_from_its_values():
    """A random-weight classifier's softmax at 0.1 ± 1e-9: no int8 output keeps that order, so top-1
    and the range share (max|Δ| 0.0016 is 2·10^7 % of a 7e-9 range) say nothing of the variant; a
    variant far from TF's values themselves is still judged, and a healthy spread output still is."""
    from tflab.litert.records import OutputError
    from tflab.litert.whole_model import MAX_RANGE_SHARE, flat_output, output_effect

    def out(max_abs, tf_range):
        return OutputError("y", "float32", (-1, 10), max_abs, 0.0, 0, 1.0, 0.1, None, tf_range, (1 / 256, -128))

    rng = np.random.default_rng(0)
    flat = [0.1 + rng.uniform(-4e-9, 4e-9, (5, 10))]
    tied_lite = [np.full((5, 10), 0.1015625)]  # int8 softmax output: one step (1/256) for every class
    e = output_effect(out(0.0016, 8e-9), tied_lite, flat)
    assert e.not_judged.startswith("TF's output varies by") and not e.crossed and "not judged" in e.text
    # the same flat TF output read back as zeros: max|Δ| is the whole value, judged and crossed
    far = output_effect(out(0.1, 8e-9), [np.zeros((5, 10))], flat)
    assert not far.not_judged and far.crossed
    # a spread output (one step of its int8 grid is well inside its range) is judged as before
    spread = [rng.uniform(0.0, 1.0, (5, 10))]
    assert flat_output(spread, 0.01) == "" and not output_effect(out(0.01, 1.0), spread, spread).not_judged
    assert flat_output(flat, MAX_RANGE_SHARE * 0.1 * 1.01) == ""


def test_an_output_on_a_kernel_fixed_grid_is_flat_below_four_of_its_steps():
    """An int8 SOFTMAX writes steps of 1/256 whatever the calibration: a random-weight softmax at
    0.198-0.202 (1.2 of those steps) made the variant CROSSED on top-1 over 0 decisive rows and on a
    41.8% range share, while LiteRT was half a step off, as close as int8 gets. With the fixed step it
    is not judged; the same values on a calibrated grid (an outlier can coarsen that one: a destroyed
    variant) are judged as before; a softmax spread over 16 of its steps is judged; a variant far from
    TF's values is judged."""
    from tflab.litert.records import OutputError
    from tflab.litert.recipe import fixed_output_step
    from tflab.litert.whole_model import flat_output, output_effect

    step = fixed_output_step("SOFTMAX #7")
    assert step == 1 / 256 and fixed_output_step("FULLY_CONNECTED #3") is None and fixed_output_step("") is None

    def out(max_abs, tf_range):
        return OutputError("y", "int8", (-1, 5), max_abs, 0.0, 0, 1.0, 0.1, None, tf_range, (step, -128))

    rng = np.random.default_rng(1)
    tf_ = [0.2 + rng.uniform(-0.0023, 0.0023, (16, 5))]
    lite = [np.round(tf_[0] * 256 + 0.5) / 256]  # the int8 grid's values, up to half a step (and a bit) off
    err = float(np.abs(lite[0] - tf_[0]).max())
    e = output_effect(out(err, float(np.ptp(tf_[0]))), lite, tf_, step)
    assert "less than 4 steps of the int8 grid its op's kernel fixes" in e.not_judged and not e.crossed
    calibrated = output_effect(out(err, float(np.ptp(tf_[0]))), lite, tf_)
    assert not calibrated.not_judged and calibrated.crossed  # as before: the range share alone crosses
    spread = [0.2 + rng.uniform(-8 * step, 8 * step, (16, 5))]
    assert flat_output(spread, 0.5 * step, step) == ""
    assert flat_output(tf_, 0.2, step) == ""  # far from TF's values: judged


@pytest.mark.parametrize("name,status", [("mlp_input_outlier", "CROSSED"), ("embedding_weight_outlier", "CROSSED"),
                                         ("embedding", "ok"), ("embedding_flatten", "ok")])
def test_export_status_is_never_ok_when_the_check_is_not(checked, name, status):
    """The export table's status comes from the same check: a variant whose whole-model effect crosses
    its threshold reads CROSSED (it read "ok" beside a failed check and exit 1); the healthy twins ok.
    The line marks the threshold that was crossed, not the one beside it."""
    from tflab.export import variant_status

    c = checked[name][3]
    assert variant_status(c) == status and (status == "ok") == bool(c.ok)
    for effect in c.whole_model:
        for bit in effect.text.split(", "):
            crossed = "CROSSED" in bit
            if bit.lstrip().startswith("max|Δ|") or ": max|Δ|" in bit:
                assert not crossed  # class scores: judged by top-1, the range share only reported
            elif "top-1 agreement" in bit:
                assert crossed == (effect.top1_agreement < effect.min_top1_agreement)


def _table_x(model: bytes, factor: float) -> bytes:
    """``model`` with the float16 table its GATHER reads (through DEQUANTIZE) multiplied by ``factor``."""
    from tensorflow.lite.tools import flatbuffer_utils

    m = flatbuffer_utils.read_model_from_bytearray(bytearray(model))
    g = m.subgraphs[0]
    names = {i: c.builtinCode if c.builtinCode else c.deprecatedBuiltinCode for i, c in enumerate(m.operatorCodes)}
    gather = next(op for op in g.operators if names[op.opcodeIndex] == flatbuffer_utils.schema_fb.BuiltinOperator.GATHER)
    deq = next(op for op in g.operators if list(op.outputs) == [gather.inputs[0]])
    buf = m.buffers[g.tensors[deq.inputs[0]].buffer]
    table = np.frombuffer(bytes(bytearray(buf.data)), np.float16)
    buf.data = (table * np.float16(factor)).astype(np.float16).view(np.uint8)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


def test_float16_table_rounding_is_within_the_gathers_bound_and_a_scaled_table_is_not(tmp_path):
    """A float16 conversion stores the Embedding table in float16; GATHER passes its rows on, each
    off from the float32 weight by its own float16 rounding (≤ 2^-11 relative): within the GATHER's
    bound. The same table ×1.1 is outside it, at the GATHER."""
    from tflab.examples import Examples
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import convert

    path = str(tmp_path / "sm")
    _embedding().export(path, verbose=False)
    sm = _Saved(path, Examples.of([_examples("ids")]))
    none, f16 = convert(sm.path, "none"), convert(sm.path, "float16")
    ok = check_tflite(f16, sm.path, sm.example_batches, "float16", float_model=none)
    gather = [op for op in ok.ops if op.op_type == "GATHER"]
    assert gather and all(op.verdict == "ok" for op in gather), ok.per_op.to_text()
    assert ok.ok, ok.to_text()
    bad = check_tflite(_table_x(f16, 1.1), sm.path, sm.example_batches, "float16", float_model=none)
    first = min(bad.per_op.outside, key=lambda o: o.index)
    assert bad.ok is False and first.op_type == "GATHER", bad.per_op.to_text()


def _bias_left_out(model: bytes) -> bytes:
    """``model`` with its first FULLY_CONNECTED's bias input left out (index -1), as the converter does
    for a bias that is all zeros in the model it converts."""
    from tensorflow.lite.tools import flatbuffer_utils

    m = flatbuffer_utils.read_model_from_bytearray(bytearray(model))
    g = m.subgraphs[0]
    names = {i: c.builtinCode if c.builtinCode else c.deprecatedBuiltinCode for i, c in enumerate(m.operatorCodes)}
    fc = next(op for op in g.operators
              if names[op.opcodeIndex] == flatbuffer_utils.schema_fb.BuiltinOperator.FULLY_CONNECTED)
    fc.inputs = np.array([fc.inputs[0], fc.inputs[1], -1], np.int32)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


@pytest.mark.parametrize("quantization", ["none", "dynamic"])
def test_a_bias_left_out_of_the_flatbuffer_is_caught_at_its_op_and_named(tmp_path, quantization):
    """The float model's op has a bias the checked op left out: the op is judged against the float
    model's op with its bias (a reference without it would pass the op and leave the output error
    'unexplained', or blame the dynamic variant's rounding), and the cause names the missing
    constant. The same conversion with its bias passes."""
    from tflab.examples import Examples
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import convert

    path = str(tmp_path / "sm")
    _mlp().export(path, verbose=False)
    sm = _Saved(path, Examples.of([_examples("x")]))
    none = convert(sm.path, "none")
    model = convert(sm.path, quantization) if quantization != "none" else none
    ok = check_tflite(model, sm.path, sm.example_batches, quantization, float_model=none)
    assert ok.ok, ok.to_text()
    bad = check_tflite(_bias_left_out(model), sm.path, sm.example_batches, quantization, float_model=none)
    first = min(bad.per_op.outside, key=lambda o: o.index)
    assert bad.ok is False and first.op_type == "FULLY_CONNECTED" and first.index == 0, bad.per_op.to_text()
    assert bad.cause is not None and bad.cause.kind == "constant" and "no input" in bad.cause.detail, \
        bad.cause.line_text


class _Scaled:
    """``y = x · w`` for one weight vector ``w`` of 4 elements, saved as a SavedModel."""

    @staticmethod
    def save(w, path):
        import tensorflow as tf

        class M(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = tf.Variable(np.asarray(w, np.float32))

            @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
            def serve(self, x):
                return {"y": x * self.w}

        m = M()
        tf.saved_model.save(m, path, signatures={"serving_default": m.serve})


@pytest.mark.parametrize("w", [
    [3e38, -3e38, 1.0, 0.0],   # x·w past float32's largest value: ±inf in TF and LiteRT alike
    [1e-45, 1e-40, 1.0, 0.0],  # subnormal products: an absolute rounding error, not a relative one
    [np.nan, 1.0, 1.0, 0.0],   # a NaN weight: NaN where it reaches, and a finite bound elsewhere
], ids=["overflow", "subnormal", "nan_weight"])
def test_float32_limits_are_not_errors_and_the_bound_stays_finite(tmp_path, w):
    """Where float32 itself rounds to ±inf or to a subnormal, the op that gives exactly that is within
    its bound, and a NaN weight leaves the end-to-end bound finite. The same model with its weight
    ×1.1 in the flatbuffer is still outside at the MUL."""
    from tensorflow.lite.tools import flatbuffer_utils

    from tflab.examples import Examples
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import convert

    path = str(tmp_path / "sm")
    _Scaled.save(w, path)
    ex = Examples.of([{"x": np.array([[1.5, 1.5, 1.0, 1.0], [0.5, 0.25, -2.0, 3.0]], np.float32)}])
    none = convert(path, "none")
    ok = check_tflite(none, path, ex, "none", float_model=none)
    assert ok.per_op.checked and not ok.per_op.outside, ok.per_op.to_text()
    assert all(np.isfinite(o.bound) for o in ok.outputs.values()), ok.to_text()
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(none))
    for buf in m.buffers:  # the one float weight vector (4 float32 values)
        if buf.data is not None and len(buf.data) == 16:
            v = np.frombuffer(bytes(bytearray(buf.data)), np.float32)
            if np.array_equal(v, np.asarray(w, np.float32), equal_nan=True):
                buf.data = np.where(np.isfinite(v) & (np.abs(v) < 1e30), v * np.float32(1.1), v).view(np.uint8)
    bad = check_tflite(bytes(flatbuffer_utils.convert_object_to_bytearray(m)), path, ex, "none", float_model=none)
    assert [o.op_type for o in bad.per_op.outside] == ["MUL"], bad.per_op.to_text()


def test_int8_calibration_with_inf_is_one_usage_error_before_converting(tmp_path):
    """An example row holding +inf would crash TF's int8 converter (SIGSEGV): refused as one line
    naming the input, batch and row, before any conversion; the same rows without inf pass the check."""
    from tflab.errors import UsageError
    from tflab.examples import Examples
    from tflab.export import export_model
    from tflab.litert.conversion import refuse_infinite_calibration

    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    bad = x.copy()
    bad[2, 5] = np.inf
    with pytest.raises(UsageError, match=r"'x' holds ±inf \(batch 0, row 2\)"):
        export_model(_mlp(), tmp_path / "bad", examples=[{"x": bad}], quantize=["int8"])
    assert not (tmp_path / "bad").exists()
    assert refuse_infinite_calibration(Examples.of([{"x": x}, {"x": np.where(np.isnan(bad), 0, np.nan)}])) is None


def test_a_model_whose_every_op_is_unchecked_is_judged_by_its_end_to_end_bound(tmp_path):
    """``y = |x| ** w``: ABS and POW have no per-op reference, so no op is checked; the verdict is the
    end-to-end bound's (ok here), the variant is not OUTSIDE, and the per-op line says why. The same
    model with its exponents ×1.1 in the flatbuffer is beyond that bound."""
    import tensorflow as tf
    from tensorflow.lite.tools import flatbuffer_utils

    from tflab.examples import Examples
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import convert
    from tflab.litert.records.check import variant_status

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.array([0.5, 2.0, 3.0, 1.5], np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.pow(tf.abs(x), self.w)}

    path = str(tmp_path / "sm")
    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    ex = Examples.of([{"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32) + 2.0}])
    none = convert(path, "none")
    ok = check_tflite(none, path, ex, "none", float_model=none)
    assert ok.per_op.checked == 0 and ok.ok is True and variant_status(ok) == "ok", ok.to_text()
    assert "end-to-end bound is the verdict" in ok.per_op.summary_line()
    fb = flatbuffer_utils.read_model_from_bytearray(bytearray(none))
    for buf in fb.buffers:
        if buf.data is not None and len(buf.data) == 16:
            buf.data = (np.frombuffer(bytes(bytearray(buf.data)), np.float32) * np.float32(1.1)).view(np.uint8)
    bad = check_tflite(bytes(flatbuffer_utils.convert_object_to_bytearray(fb)), path, ex, "none", float_model=none)
    assert bad.ok is False and variant_status(bad) == "EXCEEDED", bad.to_text()
