"""Lab step 8, NaN origin: the first TFLite op that makes a NaN/inf, its cause, and a fix that works.

Every model is built in code (tests/data/nan/models.py). Each cause has a
defective model whose note must name the op and cause, and a fixed one
whose check must carry no such note and no NaN/inf.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from tflab._user.target import load_module

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "nan", "models.py")


@pytest.fixture(scope="module")
def models():
    return load_module(MODELS)


def _roundtrip(model, path, ex, q="none"):
    import tflab

    sm = tflab.save_and_reload(model, path, ex)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm, tflab.tflite_roundtrip(sm.path, ex, q)


def _nan_notes(check):
    return [n for n in check.notes if "element(s) are NaN/inf" in n]


def _lite_finite(check):
    return all(np.isfinite(o.max_abs_error) for o in check.outputs.values())


# ------------------------------------------------------ the snippet


@pytest.fixture(scope="module")
def snippet(models, tmp_path_factory):
    """The issue's exact steps: tf.saved_model.save of the tf.Module, then TFLiteConverter.from_saved_model."""
    import tensorflow as tf

    mm = models.keras_in_module()
    d = str(tmp_path_factory.mktemp("nan") / "snippet")
    tf.saved_model.save(mm, d, signatures={"serving_default": mm.serve})
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    return mm, d, {"x": x}


def test_snippet_roundtrip_warns_before_running_and_names_read_variable(snippet):
    import tflab
    from tflab.litert.flatbuffer_notes import ConversionWarning

    mm, d, ex = snippet
    with pytest.warns(ConversionWarning, match=r"tflite_roundtrip none: READ_VARIABLE .*uninitialized "
                                                          r"resource variable"):
        c = tflab.tflite_roundtrip(d, ex, "none")
    assert c.op_counts == {"ADD": 2, "BATCH_MATMUL": 2, "READ_VARIABLE": 4, "VAR_HANDLE": 4}
    named = [n for n in c.notes if n.startswith("READ_VARIABLE")]
    assert len(named) == 1, c.notes  # one line naming it, with the fix
    assert "uninitialized resource variable" in named[0] and "model.export(DIR)" in named[0]
    # Keras numbers its names per process (sequential_3/dense_7/...): name the model's own paths.
    assert all(w.path in named[0] for w in mm.m.weights), named[0]
    # The outputs are whatever memory XNNPACK read: never within the bound of a correct model.
    assert c.within_bound is False
    # No note names a cause that was not measured (the old generic int8 explanation).
    assert not any("quantize a NaN input" in n for n in c.notes)
    for n in _nan_notes(c):
        assert "READ_VARIABLE" in n and "uninitialized variable" in n, n


def test_snippet_per_op_origin_is_the_first_read_variable(snippet):
    from tflab.litert.conversion import convert
    from tflab.litert.flatbuffer_notes import uninitialized_variables
    from tflab.litert.nan import find_nan_origin

    mm, d, ex = snippet
    model = convert(d, "none")
    found = uninitialized_variables(model)
    # The VAR_HANDLE shared names are the Keras variables' paths: all four weights, nothing else.
    assert {v.variable for v in found} == {w.path for w in mm.m.weights} and len(found) == 4
    origin = find_nan_origin(model, "serving_default", ex)
    # The builtin READ_VARIABLE kernel refuses the unset variable: the origin is that op, the first read.
    assert (origin.op, origin.cause, origin.op_index) == ("READ_VARIABLE", "uninitialized_variable",
                                                          min(v.op_index for v in found))


def _lite_run(model: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=model,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    if it.get_signature_list():
        key = next(iter(it.get_signature_list()))
        run = it.get_signature_runner(key)
        (name,) = it.get_signature_list()[key]["inputs"]
        return next(iter(run(**{name: x}).values()))
    it.resize_tensor_input(0, x.shape)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@pytest.mark.parametrize("fix", ["keras_export", "freeze", "track_tf_variables", "disable_resource_variables"])
def test_each_fix_the_note_gives_is_checked_on_the_snippet(models, snippet, tmp_path, fix):
    """Each fix the READ_VARIABLE note names converts to plain weights that match Keras; the one it
    says does not help (experimental_enable_resource_variables=False) really keeps the variables."""
    import tensorflow as tf

    from tflab._tf.lite import frozen_function  # convert_variables_to_constants_v2
    from tflab.litert.flatbuffer_notes import VARIABLE_FIX, uninitialized_variables

    mm, d, ex = snippet
    # Why the note blames the wrapper: tf.Module lists no keras.Variable, only tf.Variables.
    assert len(mm.variables) == 0 and len(models.keras_in_module_tracked().variables) == 4
    if fix == "keras_export":
        mm.m.export(str(tmp_path / "k"), verbose=False)
        model = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "k")).convert()
    elif fix == "freeze":
        frozen = frozen_function(mm.serve.get_concrete_function())
        model = tf.lite.TFLiteConverter.from_concrete_functions([frozen]).convert()
    elif fix == "track_tf_variables":
        tracked = models.keras_in_module_tracked()
        tf.saved_model.save(tracked, str(tmp_path / "t"), signatures={"serving_default": tracked.serve})
        model = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "t")).convert()
    else:
        conv = tf.lite.TFLiteConverter.from_saved_model(d)
        conv.experimental_enable_resource_variables = False
        model = conv.convert()
        assert len(uninitialized_variables(model)) == 4  # as the note says: the variables stay
        assert "experimental_enable_resource_variables=False does not help" in VARIABLE_FIX
        return
    assert uninitialized_variables(model) == ()
    x = ex["x"]
    want = mm.m(x).numpy()
    got = _lite_run(model, x)
    # Both compute relu(x + b1) + b2 in float32 in some summation order (FMA or not). Each is
    # within Higham's γ_n·Σ|terms| of the exact value per sum, and relu is 1-Lipschitz, so the two
    # differ by at most twice that bound, propagated (holds on every ISA and kernel path):
    (w1, b1), (w2, b2) = [(np.abs(la.kernel.numpy().astype(np.float64)), np.abs(la.bias.numpy()))
                          for la in mm.m.layers]
    gamma = lambda n: n * 2.0 ** -24 / (1 - n * 2.0 ** -24)  # noqa: E731
    dh = gamma(w1.shape[0] + 1) * (np.abs(x) @ w1 + b1)
    h = np.maximum(np.abs(x).astype(np.float64) @ w1 + b1, 0)
    bound = 2 * (dh @ w2 + gamma(w2.shape[0] + 1) * (h @ w2 + b2))
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound), float(np.max(np.abs(got - want) / bound))


def test_tracked_variables_fix_makes_the_check_pass(models, tmp_path):
    ex = {"x": np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)}
    _, c = _roundtrip(models.keras_in_module_tracked(), tmp_path / "sm", ex)
    assert c.within_bound is True and "READ_VARIABLE" not in c.op_counts
    assert not any("READ_VARIABLE" in n for n in c.notes)


def test_written_variable_gets_an_initializer_and_no_note(models, tmp_path):
    """Healthy resource variables: a signature that assigns one converts with a CALL_ONCE initializer."""
    import tensorflow as tf

    from tflab.litert.conversion import analyze_flatbuffer, convert
    from tflab.litert.flatbuffer_notes import conversion_notes

    c = models.Counter()
    tf.saved_model.save(c, str(tmp_path), signatures={"serving_default": c.serve})
    model = convert(str(tmp_path), "none")
    assert {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"} <= set(analyze_flatbuffer(model).op_counts)
    assert conversion_notes(model) == ()


def test_export_cli_names_read_variable_before_checking_and_fix_passes(run_cli, tmp_path):
    code, out, err = run_cli("export", f"{MODELS}:keras_in_module", "--out", str(tmp_path / "bad"),
                             "--quantize", "none")
    assert code == 1
    warned = [ln for ln in err.splitlines() if "warning: TFLite none: READ_VARIABLE" in ln]
    checking = [i for i, ln in enumerate(err.splitlines()) if "checking none with LiteRT" in ln]
    assert len(warned) == 1 and checking  # said once, right after conversion
    noted = [ln for ln in out.splitlines() if ln.strip().startswith("note: READ_VARIABLE")]
    assert len(noted) == 1 and "uninitialized resource variable" in noted[0] and "model.export" in noted[0]
    code, out, err = run_cli("export", f"{MODELS}:keras_in_module_tracked", "--out", str(tmp_path / "good"),
                             "--quantize", "none")
    assert code == 0, out + err
    assert "READ_VARIABLE" not in out + err


# ------------------------------------------------------------ other causes


def test_division_by_zero_is_named_and_divide_no_nan_removes_it(models, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = rng.standard_normal((4, 8)).astype(np.float32)
    y[1, 2] = 0.0
    _, c = _roundtrip(models.ratio(), tmp_path / "a", {"x": x, "y": y})
    (note,) = _nan_notes(c)
    # LiteRT's builtin DIV clamps x/0 to -3.4e38 (its activation range), so the origin is found only
    # because that clamp counts as an infinity.
    assert "op 0 DIV" in note and "division by zero" in note and "1 zero(s)" in note, note
    _, fixed = _roundtrip(models.ratio_guarded(), tmp_path / "b", {"x": x, "y": y})
    assert _nan_notes(fixed) == [] and fixed.within_bound is True


def test_log_of_zero_is_named_and_epsilon_removes_it(models, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    _, c = _roundtrip(models.log_relu(), tmp_path / "a", {"x": x})
    (note,) = _nan_notes(c)
    zeros = int((x <= 0).sum())  # relu(x) == 0 exactly where x <= 0
    assert "LOG" in note and "log of zero" in note and f"{zeros} zero(s)" in note, note
    _, fixed = _roundtrip(models.log_relu_eps(), tmp_path / "b", {"x": x})
    assert _nan_notes(fixed) == [] and _lite_finite(fixed)


def test_float16_overflow_is_named_and_scaling_removes_it(models, tmp_path):
    x = np.ones((2, 8), np.float32)
    _, c = _roundtrip(models.half_overflow(), tmp_path / "a", {"x": x})
    (note,) = _nan_notes(c)
    assert "CAST" in note and "float16 overflow" in note and "100000" in note and "65504" in note, note
    _, fixed = _roundtrip(models.half_scaled(), tmp_path / "b", {"x": x})
    assert _nan_notes(fixed) == []


def test_nonfinite_input_is_named_and_clean_input_removes_it(models, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = rng.standard_normal((4, 8)).astype(np.float32) + 5.0  # no zero divisor
    x[2, 3] = np.nan
    _, c = _roundtrip(models.ratio(), tmp_path / "a", {"x": x, "y": y})
    (note,) = _nan_notes(c)
    assert "nonfinite input" in note and "'serving_default_x:0' already holds 1 NaN" in note, note
    # The examples' NaN is the one cause named (a kernel's error on what it became only carries it).
    assert c.cause.kind == "domain" and "already holds 1 NaN" in c.cause.detail, c.cause
    _, fixed = _roundtrip(models.ratio(), tmp_path / "b", {"x": np.nan_to_num(x), "y": y})
    assert _nan_notes(fixed) == [] and fixed.cause is None


def test_int8_input_swallows_nan_and_is_named(models, tmp_path):
    """TF keeps the NaN, the int8 model cannot: the note names the int8 input, not a guess."""
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    xn = x.copy()
    xn[0, 3] = np.nan
    _, c = _roundtrip(models.big_weight_folded(), tmp_path / "a", {"x": xn}, "int8")
    (note,) = _nan_notes(c)
    assert "TF only 32" in note and "NaN/inf lost at op 0 FULLY_CONNECTED" in note, note
    assert "int8 nonfinite input" in note and "model input 'x' is int8" in note
    _, fixed = _roundtrip(models.big_weight_folded(), tmp_path / "b", {"x": x}, "int8")
    assert _nan_notes(fixed) == []


def test_dynamic_range_kernel_swallows_nan_and_is_named(models, tmp_path):
    """The 32×32 weight (1024 elements, at the dynamic-range threshold) is int8; the input stays float."""
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    x[0, 3] = np.nan
    _, c = _roundtrip(models.big_weight_folded(), tmp_path / "a", {"x": x}, "dynamic")
    (note,) = _nan_notes(c)
    assert "TF only 32" in note and "NaN/inf lost at op 0 FULLY_CONNECTED" in note, note
    assert "dynamic-range kernel quantizes its float input" in note
    _, fixed = _roundtrip(models.big_weight_folded(), tmp_path / "b", {"x": np.nan_to_num(x)}, "dynamic")
    assert _nan_notes(fixed) == []


def test_int8_zero_scale_is_named_and_the_calibrated_model_has_none(models, tmp_path):
    """A planted defect: one int8 tensor's scale set to 0 in the flatbuffer."""
    import flatbuffers
    from tflab._tf.lite import schema
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import convert
    from tflab.litert.flatbuffer_notes import conversion_notes

    fb = schema()  # the flatbuffer schema's generated classes (tensorflow/lite/python/schema_py_generated.py)
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    sm, good = _roundtrip(models.big_weight_folded(), tmp_path / "a", {"x": x}, "int8")
    model = convert(sm.path, "int8", {"x": x})
    assert conversion_notes(model) == () and good.within_bound is True
    mt = fb.ModelT.InitFromPackedBuf(bytearray(model), 0)
    sg = mt.subgraphs[0]
    first = sg.operators[0]
    sg.tensors[first.outputs[0]].quantization.scale = np.zeros(1, np.float32)
    b = flatbuffers.Builder(1024)
    b.Finish(mt.Pack(b), file_identifier=b"TFL3")
    bad = bytes(b.Output())
    c = check_tflite(bad, sm.path, {"x": x}, "int8")
    (note,) = [n for n in c.notes if "scale 0" in n]
    assert "written by op 0 FULLY_CONNECTED" in note, note


def test_no_note_without_nonfinite_values(models, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    _, c = _roundtrip(models.ratio(), tmp_path / "a", {"x": x, "y": x + 10.0})
    assert _nan_notes(c) == [] and c.within_bound is True


def test_float16_recipe_saturates_a_big_weight_and_the_note_says_so(models, tmp_path):
    """TF 2.21 stores a weight beyond 65504 as ±65504 (not inf): a wrong answer, named, not a NaN."""
    from tflab.litert.conversion import convert
    from tflab.litert.flatbuffer_notes import read_graphs

    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    sm, c = _roundtrip(models.big_weight(), tmp_path / "a", {"x": x}, "float16")
    (w16,) = [v for v in read_graphs(convert(sm.path, "float16"))[0].constants.values() if v.size == 1024]
    assert np.isfinite(w16).all() and np.abs(w16.astype(np.float32)).max() == 65504.0
    (note,) = [n for n in c.notes if n.startswith("float16 weight(s) at ±65504")]
    assert c.within_bound is False and _nan_notes(c) == []
    # The root cause: the op holding that constant, class constant (the dtype cannot hold it).
    assert c.cause.kind == "constant" and "past float16's largest finite value 65504" in c.cause.detail, c.cause
    _, fixed = _roundtrip(models.big_weight_folded(), tmp_path / "b", {"x": x}, "float16")
    assert fixed.within_bound is True and not any(n.startswith("float16 weight") for n in fixed.notes)
    assert fixed.cause is None


def test_nonfinite_weight_is_named_and_a_clean_weight_removes_it(models, tmp_path):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    _, c = _roundtrip(models.nan_weight(), tmp_path / "a", {"x": x})
    (note,) = _nan_notes(c)
    # Column 5 of x @ w is NaN in every row, in TF and in LiteRT alike: 4 elements.
    assert "4 element(s) are NaN/inf in LiteRT and in TF alike" in note and "nonfinite weight" in note, note
    assert "FULLY_CONNECTED" in note and "already holds 1 NaN" in note
    _, fixed = _roundtrip(models.clean_weight(), tmp_path / "b", {"x": x})
    assert _nan_notes(fixed) == [] and fixed.within_bound is True


def test_a_finite_input_made_inf_is_named_overflow_from_the_measured_values(models, tmp_path):
    """exp(100) overflows float32: finite input, +inf out, no NaN, inside EXP's domain: overflow, measured
    (its op and input range named); the other elements (exp(0), exp(1), exp(-1)) are no cause."""
    x = np.array([[0.0, 1.0, 100.0, -1.0]], np.float32)
    _, c = _roundtrip(models.Exp(), tmp_path / "a", {"x": x})
    (note,) = _nan_notes(c)
    assert "op 0 EXP" in note and "'serving_default'): overflow: " in note, note
    assert "largest |input| 100" in note and "0 NaN, 1 +inf" in note
    from tflab.litert.nan import CAUSES

    # The cause label follows the op's "(tensor …, signature …): "; no other label is claimed.
    assert [c for c in CAUSES if f"'serving_default'): {c.replace('_', ' ')}: " in note] == ["overflow"]
    assert c.cause.kind == "overflow" and c.cause.op_type == "EXP", c.cause
    # The healthy twin: the same op on inputs whose exp is finite has no NaN/inf note and no cause.
    _, ok = _roundtrip(models.Exp(), tmp_path / "b", {"x": np.array([[0.0, 1.0, 80.0, -1.0]], np.float32)})
    assert _nan_notes(ok) == [] and ok.cause is None
