"""LiteRT: every cause measured on the kernel that ran, every fix printed a fix that was run.

Rows: tensorflow#120299 (XNNPACK's EXP and NaN), tensorflow#53278 (a full-integer uint8 model and its
saturated output), (signature outputs matched by name), (a recipe the
tensors contradict). The export rows are in tests/litert/test_litert_export_causes.py.
Models: tests/data/causes/models.py.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from tflab._user.target import load_module

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "causes", "models.py")


@pytest.fixture(scope="module")
def models():
    return load_module(MODELS)


def _lite(model: bytes, feed: dict, builtin: bool) -> dict:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES} if builtin else {}
    return Interpreter(model_content=model, **kw).get_signature_runner()(**feed)


# ------------------------------------------------- tensorflow#120299: which EXP kernel


@pytest.fixture(scope="module")
def exp_model(models, tmp_path_factory):
    import tflab

    x = np.array([[np.nan, 1.0, 0.5, -1.0], [np.nan, 0.0, 2.0, 3.0]], np.float32)
    sm = tflab.save_and_reload(models.ExpNet(), str(tmp_path_factory.mktemp("exp") / "sm"), {"x": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tflab.tflite_roundtrip(sm.path, {"x": x}, "none")
    return sm, x, c


def test_exp_nan_names_xnnpack_and_the_builtin_kernel_and_checks_the_delegate_fix(exp_model):
    sm, x, c = exp_model
    # Ground truth from our own runs: XNNPACK (the default) gives 0 at the NaN, the builtin EXP keeps it.
    xnn, builtin = _lite(c.model, {"x": x}, False)["y"], _lite(c.model, {"x": x}, True)["y"]
    nan = np.isnan(x)
    assert (xnn[nan] == 0).all() and np.isnan(builtin[nan]).all()
    assert "XNNPACK" in c.runtime and c.ok is False and c.within_bound is False
    (note,) = [n for n in c.notes if "NaN/inf on one side only" in n]
    assert "XNNPACK's EXP maps NaN to 0; the builtin EXP kernel keeps it" in note, note
    assert f"differs from TF at {int(nan.sum())} element(s)" in note and "without the default delegate, at 0" in note
    # The fix printed is the one that was run: the builtin resolver, checked on the same examples.
    assert ("fix: run without the default delegate if NaN must propagate: Interpreter(model_content=..., "
            "experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES) (checked: the "
            f"builtin kernels have NaN/inf at the same {int(nan.sum())} element(s) as TF)") in note, note
    # Where the NaN enters is said of the builtin kernels, which is where it was measured.
    assert "per-op rerun with the builtin kernels: first non-finite value at op 0 EXP" in note
    assert "clean the examples" not in note.split("fix:")[1]  # the second candidate is not printed as the fix


def test_exp_finite_input_both_kernels_agree_and_no_note(exp_model):
    import tflab

    sm, x, _ = exp_model
    clean = np.nan_to_num(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tflab.tflite_roundtrip(sm.path, {"x": clean}, "none")
    xnn, builtin = _lite(c.model, {"x": clean}, False)["y"], _lite(c.model, {"x": clean}, True)["y"]
    assert np.isfinite(xnn).all() and np.isfinite(builtin).all()
    assert c.within_bound is True and not [n for n in c.notes if "NaN" in n], c.notes


def test_delegate_fix_that_fails_is_not_printed_as_the_fix():
    """A planted failing candidate: the builtin kernels lose the NaN too; the next candidate is printed."""
    from tflab.fix import first_working, unchecked
    from tflab.litert.nan import delegate_fix

    want = np.array([np.nan, 1.0, np.nan, 2.0])
    xnn = np.array([0.0, 1.0, 0.0, 2.0])
    good = delegate_fix(xnn, np.array([np.nan, 1.0, np.nan, 2.0]), want)
    bad = delegate_fix(xnn, np.array([np.nan, 1.0, 0.0, 2.0]), want)  # one NaN still lost
    assert good.checked and good.measured["differ_from_tf"] == 0
    assert bad.failed and bad.measured["differ_from_tf"] == 1 and "still differ from TF at 1" in bad.result
    other = unchecked("code", "", "feed finite inputs", "changes your data")
    plan = first_working([bad, other])
    assert plan.fix is other
    text = "\n".join(plan.lines())
    assert text.startswith("fix: feed finite inputs (not checked") and "run without the default" not in \
        text.splitlines()[0]
    assert first_working([bad]).fix is None and "none of the 1 candidate" in first_working([bad]).lines()[0]


# --------------------------------------------------- tensorflow#53278: full-integer uint8


def _uint8_model(sm_dir: str, calibration: np.ndarray) -> bytes:
    """The reporter's recipe: full-integer, uint8 inputs and outputs, calibrated on ``calibration``."""
    import tensorflow as tf

    conv = tf.lite.TFLiteConverter.from_saved_model(sm_dir)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([calibration[i:i + 1]] for i in range(len(calibration)))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.uint8
    conv.inference_output_type = tf.uint8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return conv.convert()


@pytest.fixture(scope="module")
def uint8_linear(models, tmp_path_factory):
    import tflab

    rng = np.random.default_rng(3)
    calib = rng.uniform(0, 1, (64, 16)).astype(np.float32)
    sm = tflab.save_and_reload(models.Linear(), str(tmp_path_factory.mktemp("u8") / "sm"), {"x": calib[:4]})
    return sm.path, _uint8_model(sm.path, calib), calib


def test_uint8_full_integer_is_read_as_int8_and_fed_as_q(uint8_linear):
    from tflab.litert.check import check_tflite
    from tflab.litert.ops import variant_of
    from tflab.litert.recipe import read_recipe

    sm_dir, model, calib = uint8_linear
    r = read_recipe(model)
    assert variant_of(model) == r.name == "int8" and r.integer_io == ("uint8",) and r.float_kernels == ()
    like = calib[8:16]  # rows of the representative dataset: inside the calibrated range
    c = check_tflite(model, sm_dir, {"x": like})
    assert c.quantization == "int8" and c.ok is True and c.within_bound is True, c.to_text()
    assert not [n for n in c.notes if "saturates" in n], c.notes
    scale, zp = c.signatures["serving_default"]["inputs"]["x"]["quantization"]
    (fed,) = [n for n in c.notes if n.startswith("quantized input(s)")]
    assert f"q = np.clip(np.round(x / {scale:.6g} + {zp}), 0, 255).astype(np.uint8)" in fed, fed
    # What tflab fed is that q: LiteRT on our own quantized feed gives the same output.
    q = np.clip(np.round(like / scale + zp), 0, 255).astype(np.uint8)
    out = _lite(model, {"x": q}, False)["y"]
    oscale, ozp = c.signatures["serving_default"]["outputs"]["y"]["quantization"]
    import tensorflow as tf
    from tflab.saved_model import load_saved_model

    want = load_saved_model(sm_dir).signatures["serving_default"](x=tf.constant(like))["y"].numpy()
    assert np.abs((out.astype(np.float64) - ozp) * oscale - want).max() == pytest.approx(
        c.outputs["y"].max_abs_error, rel=1e-5)  # tflab dequantizes in float32


def test_uint8_output_saturates_on_all_ones_outside_the_calibration_range(uint8_linear):
    from tflab.litert.check import check_tflite

    sm_dir, model, _ = uint8_linear
    ones = np.ones((4, 16), np.float32)
    c = check_tflite(model, sm_dir, {"x": ones})
    scale, zp = c.signatures["serving_default"]["outputs"]["y"]["quantization"]
    q = np.clip(np.round(ones / c.signatures["serving_default"]["inputs"]["x"]["quantization"][0]), 0, 255)
    codes = _lite(model, {"x": q.astype(np.uint8)}, False)["y"]
    assert set(np.unique(codes)) == {0, 255}  # our own run: every code at an end
    (sat,) = [n for n in c.notes if "saturates" in n]
    at0, at255 = int((codes == 0).sum()), int((codes == 255).sum())
    assert f"100% of its codes are at qmin or qmax ({at0} at 0, {at255} at 255, of {codes.size})" in sat, sat
    assert "FULLY_CONNECTED #" in sat and "calibrate on data like your inputs (representative dataset)" in sat
    assert c.within_bound is False and c.ok is False


def test_output_scale_off_by_ten_percent_is_flagged_on_the_calibration_rows(uint8_linear):
    """A planted defect: the output tensor's scale ×0.9 in the flatbuffer. The calibration rows (no
    saturation with the real scale) now reach past what the output can represent."""
    import flatbuffers
    from tflab._tf.lite import schema
    from tflab.litert.check import check_tflite

    fb = schema()  # the flatbuffer schema's generated classes (tensorflow/lite/python/schema_py_generated.py)
    sm_dir, model, calib = uint8_linear
    healthy = check_tflite(model, sm_dir, {"x": calib})
    assert not [n for n in healthy.notes if "saturates" in n], healthy.notes
    mt = fb.ModelT.InitFromPackedBuf(bytearray(model), 0)
    sg = mt.subgraphs[0]
    out = sg.tensors[sg.outputs[0]]
    out.quantization.scale = (np.asarray(out.quantization.scale, np.float32) * 0.9).astype(np.float32)
    b = flatbuffers.Builder(1024)
    b.Finish(mt.Pack(b), file_identifier=b"TFL3")
    bad = check_tflite(bytes(b.Output()), sm_dir, {"x": calib})
    (sat,) = [n for n in bad.notes if "saturates" in n]
    assert "calibrate on data like your inputs" in sat and bad.within_bound is False, sat


def test_recipe_the_tensors_contradict_is_refused(uint8_linear, models, tmp_path, run_cli):
    """--quantization int8 on a float32 flatbuffer (and none on the uint8 one) is exit 2, naming both."""
    import tflab
    from tflab.errors import UsageError
    from tflab.litert.check import check_tflite
    from tflab.litert.recipe import recipe_mismatch

    sm_dir, model, _ = uint8_linear
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flt = tflab.tflite_roundtrip(sm_dir, {"x": np.zeros((2, 16), np.float32)}, "none").model
    assert recipe_mismatch(flt, "none") == "" and recipe_mismatch(model, "int8") == ""
    with pytest.raises(UsageError, match=r"recipe given \(int8\) disagrees .* show a none model"):
        check_tflite(flt, sm_dir, {"x": np.zeros((2, 16), np.float32)}, "int8")
    path = tmp_path / "float.tflite"
    path.write_bytes(flt)
    code, out, err = run_cli("check-tflite", str(path), sm_dir, "--quantization", "int8")
    assert code == 2 and "--quantization int8" in err and "show a none model" in err and not out, (code, err)
    upath = tmp_path / "u8.tflite"
    upath.write_bytes(model)
    code, out, err = run_cli("check-tflite", str(upath), sm_dir, "--quantization", "none")
    assert code == 2 and "show a int8 model" in err and "uint8" in err, err


# ------------------------------------------------------ outputs matched by name


@pytest.fixture(scope="module")
def two_heads(models, tmp_path_factory):
    import tflab

    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    d = tmp_path_factory.mktemp("p8")
    sm = tflab.save_and_reload(models.TwoHeads(), str(d / "sm"), {"x": x})
    return sm.path, x, d


def test_softmax_output_is_compared_with_tfs_softmax_not_the_logits(two_heads):
    import tensorflow as tf
    import tflab

    sm_dir, x, _ = two_heads
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tflab.tflite_roundtrip(sm_dir, {"x": x}, "none")
    t = c.tf_tensors
    by_type = {m.op_type: m for m in t.matched}
    assert set(by_type) == {"FULLY_CONNECTED", "SOFTMAX"} and sum(t.unmatched.values()) == 0, t.to_text()
    soft = by_type["SOFTMAX"]
    assert soft.name.startswith("StatefulPartitionedCall:") and soft.max_abs_error < 1e-5, t.to_text()
    assert t.worst.max_abs_error < 1e-5 and c.outputs["p"].max_abs_error < 1e-5
    # The wrong match saw would be |p - logits|: far larger.
    from tflab.saved_model import load_saved_model

    out = load_saved_model(sm_dir).signatures["serving_default"](x=tf.constant(x))
    assert float(np.abs(out["p"].numpy() - out["logits"].numpy()).max()) > 0.5


def test_tensor_names_keep_the_output_index_and_refuse_an_ambiguous_suffix():
    from tflab.litert.float_tensors import name_candidates

    nodes = ["StatefulPartitionedCall/a/Relu", "StatefulPartitionedCall/b/Relu", "Split", "c/MatMul"]
    assert name_candidates("Relu", nodes) == []  # ends two nodes' names: ambiguous, not guessed
    assert name_candidates("a/Relu", nodes) == [("StatefulPartitionedCall/a/Relu", 0)]
    assert name_candidates("Split:1", nodes) == [("Split", 1)]  # the node's second output, not its first
    assert name_candidates("c/MatMul;Relu;a/Relu", nodes) == [("c/MatMul", 0), ("StatefulPartitionedCall/a/Relu", 0)]


def test_dropped_bias_shows_at_the_matched_outputs(two_heads, models):
    """A planted defect: the flatbuffer of the same model with its biases dropped, against the SavedModel."""
    import tflab
    from tflab.litert.float_tensors import compare_float_tensors

    sm_dir, x, d = two_heads
    nob = tflab.save_and_reload(models.TwoHeads(bias=False), str(d / "nobias"), {"x": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = tflab.tflite_roundtrip(nob.path, {"x": x}, "none").model
    t = compare_float_tensors(bad, sm_dir, {"x": x})
    by_type = {m.op_type: m for m in t.matched}
    assert by_type["SOFTMAX"].max_abs_error > 1e-3 and t.worst.relative > 1e-2, t.to_text()



# ------------------------------------------- a NaN in the examples: the clean-examples fix, run


@pytest.mark.parametrize("zero_divisor", [False, True])
def test_clean_examples_fix_is_run_and_a_failing_one_is_not_printed(tmp_path, zero_divisor):
    """x / y with a NaN in x: cleaning the examples is checked by rerunning LiteRT on them. Planted
    failing candidate: y also holds a 0, so the cleaned examples still give NaN/inf."""
    import tflab

    nan_models = load_module(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "nan", "models.py"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = rng.standard_normal((4, 8)).astype(np.float32) + 5.0
    x[2, 3] = np.nan
    if zero_divisor:
        y[0, 0] = 0.0
    ex = {"x": x, "y": y}
    sm = tflab.save_and_reload(nan_models.ratio(), str(tmp_path / "sm"), ex)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tflab.tflite_roundtrip(sm.path, ex, "none")
    (note,) = [n for n in c.notes if "element(s) are NaN/inf" in n]
    assert "nonfinite input" in note, note
    # Our own rerun of the cleaned examples with the default interpreter.
    out = _lite(c.model, {"x": np.nan_to_num(x), "y": y}, False)
    still = int(sum((~np.isfinite(np.asarray(v))).sum() for v in out.values()))
    assert (still > 0) == zero_divisor
    if zero_divisor:
        assert ("fix: none of the 1 candidate fix(es) worked on your case: clean the examples" in note
                and f"(failed: LiteRT still gives {still} NaN/inf of 32 output element(s)" in note), note
        assert "(checked" not in note
    else:
        assert ("fix: clean the examples (np.nan_to_num, or drop the rows) before feeding them: np.nan_to_num(x) "
                "(checked: LiteRT's 32 output element(s) are all finite on the cleaned examples)") in note, note


def test_max_pool_dropping_a_nan_is_named_the_other_way_round(tmp_path):
    """TF's and the builtin MaxPool drop a NaN in their window (std::max from float's lowest); XNNPACK's
    carries it. The cause names that direction and a fix that gives TF's numbers, and MAX_POOL_2D is not
    outside its bound (the reference drops the NaN as the kernel does)."""
    import keras

    import tflab

    keras.utils.set_random_seed(0)
    i = keras.Input((8, 8, 2), name="img")
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(i)
    model = keras.Model(i, keras.layers.Dense(3)(keras.layers.Flatten()(keras.layers.MaxPooling2D(2)(h))))
    x = np.random.default_rng(5).normal(size=(2, 8, 8, 2)).astype(np.float32)
    x[1, 0, 0, 0] = np.nan
    sm = tflab.save_and_reload(model, str(tmp_path / "sm"), {"img": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tflab.tflite_roundtrip(sm.path, {"img": x}, "none")
    tf_out = np.asarray(keras.ops.convert_to_numpy(model(x)))
    xnn, builtin = _lite(c.model, {"img": x}, False), _lite(c.model, {"img": x}, True)
    (name,) = xnn
    assert np.isfinite(tf_out).all() and np.isfinite(builtin[name]).all() and np.isnan(xnn[name]).any()
    (note,) = [n for n in c.notes if "NaN/inf on one side only" in n]
    assert "carry NaN/inf where TF and the builtin kernels give numbers" in note and "maps NaN/inf to ;" not in note
    assert "fix: run without the default delegate to get TF's numbers where XNNPACK gives NaN/inf" in note, note
    pools = [op for op in c.per_op.ops if op.op_type == "MAX_POOL_2D"]
    assert pools and all(op.verdict == "ok" for op in pools), c.per_op.to_text()


@pytest.mark.parametrize("op,fixed", [("SOFTMAX #25", True), ("LOGISTIC #3", True), ("TANH #2", True),
                                      ("FULLY_CONNECTED #7", False)])
def test_a_saturating_output_whose_grid_the_op_fixes_is_not_sent_back_to_calibration(op, fixed):
    """TFLite's int8 SOFTMAX always writes scale 1/256, zero point -128: a probability of 1.0 is past its
    last code whatever the representative dataset, so "calibrate on data like your inputs" (said to a
    user whose examples were the calibration data) was wrong advice there; a calibrated op keeps it."""
    from tflab.litert.recipe import saturation_note

    s = dict(clipped=3, at_qmin=0, at_qmax=3, total=12, qmin=-128, qmax=127, low=0.0, high=255 / 256,
             tf_min=0.01, tf_max=1.0)
    note = saturation_note("probs", op, s)
    assert note.startswith("probs: the output saturates: 25% of its codes")
    assert ("always writes" in note and "calibrate on data like your inputs" not in note) is fixed, note
    assert ("calibrate on data like your inputs" in note) is not fixed
