"""Root cause of a LiteRT variant's difference from TF (`TFLiteCheck.cause`), and bounds that follow the recipe.

* The converter's default int8 recipe (float input and output, int8 ops inside, QUANTIZE/DEQUANTIZE
  at the edges) is judged against the quantization its tensors carry, as an int8-I/O model is; the
  same model with one weight ×1.1 still fails, and its cause is that op's constant.
* "cannot fail" is said only where a planted defect was measured not to move the output.
* NaN origins: one domain table (SQRT, RSQRT, POW, LOG, DIV ...) names class ``domain``.
* Kernel differences (tensorflow/tensorflow#118528: SELU of NaN is -1.758 with XNNPACK): the kernel
  that ran, the checked fix, and the branch a NaN takes, read from the builtin run's tensors.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings

import numpy as np
import pytest


def _module(fn, n: int, name: str = "x"):
    import tensorflow as tf

    m = tf.Module()
    m.serve = tf.function(fn, autograph=False, input_signature=[tf.TensorSpec([None, n], tf.float32, name=name)])
    return m


class _Dense:
    """Dense 12→20 relu → 6, outputs ``score`` and ``prob = softmax(score)``; ``factor`` scales the last kernel."""

    def __new__(cls, factor: float = 1.0):
        import tensorflow as tf

        r = np.random.default_rng(1)
        m = tf.Module()
        m.w1 = tf.Variable(r.standard_normal((12, 20)).astype(np.float32) / 3)
        m.b1 = tf.Variable(np.full(20, 0.1, np.float32))
        m.w2 = tf.Variable((r.standard_normal((20, 6)) / 4 * factor).astype(np.float32))
        m.b2 = tf.Variable(np.zeros(6, np.float32))

        def serve(inp):
            score = tf.nn.relu(inp @ m.w1 + m.b1) @ m.w2 + m.b2
            return {"score": score, "prob": tf.nn.softmax(score)}

        m.serve = tf.function(serve, input_signature=[tf.TensorSpec([None, 12], tf.float32, name="inp")])
        return m


@pytest.fixture(scope="module")
def default_int8(tmp_path_factory):
    """The default int8 recipe of the Dense model, and of the same model with its last kernel ×1.1."""
    import tensorflow as tf

    import tflab
    from tflab.litert.check import check_tflite

    d = tmp_path_factory.mktemp("default_int8")
    x = np.random.default_rng(0).standard_normal((10, 12)).astype(np.float32)

    def convert(path):
        c = tf.lite.TFLiteConverter.from_saved_model(path)
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = lambda: ([x[i:i + 1]] for i in range(10))
        return c.convert()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = tflab.save_and_reload(_Dense(), d / "sm", {"inp": x}).path
        planted_sm = tflab.save_and_reload(_Dense(1.1), d / "planted", {"inp": x}).path
        model, planted = convert(sm), convert(planted_sm)
        (d / "plain_int8.tflite").write_bytes(model)
        return {"x": x, "sm": sm, "path": d / "plain_int8.tflite", "model": model,
                "check": check_tflite(model, sm, {"inp": x}),
                "planted": check_tflite(planted, sm, {"inp": x})}


def test_default_int8_recipe_with_float_io_is_bounded_by_its_inner_int8_tensors(default_int8):
    from ai_edge_litert.interpreter import Interpreter

    c = default_int8["check"]
    assert c.quantization == "int8" and c.ok is True and c.within_bound is True, c.to_text()
    assert c.cause is None and "cause:" not in c.to_text()
    scales = {t["name"]: float(t["quantization"][0]) for t in
              Interpreter(model_content=default_int8["model"]).get_tensor_details()}
    for o in c.outputs.values():
        assert o.dtype == "float32" and o.quantization is None  # LiteRT returns floats
        scale, _, dtype, tensor = o.inner_quantization
        assert dtype == "int8" and scale == pytest.approx(scales[tensor])  # the tensor feeding the DEQUANTIZE
        # The final rounding alone is half that step: the bound is at least that (float32 bounds were 1e-5).
        assert o.worst_bound >= scale * (1 - 1e-9) and o.bound_ratio < 1.0
    assert c.to_dict()["outputs"]["score"]["inner_quantization"][2] == "int8"


def test_check_tflite_cli_exits_0_on_the_default_int8_model(default_int8):
    from tflab.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["check-tflite", str(default_int8["path"]), default_int8["sm"], "--json"])
    report = json.loads(buf.getvalue())
    assert code == 0 and report["ok"] is True and report["cause"] is None
    assert all(o["within_bound"] for o in report["outputs"].values())


def test_planted_weight_in_the_default_int8_model_fails_and_is_the_cause(default_int8):
    """One kernel ×1.1: the check must still fail, at that op, and name its constant, not rounding."""
    c = default_int8["planted"]
    assert c.ok is False
    outside = c.per_op.outside
    assert outside and outside[0].op_type == "FULLY_CONNECTED"
    cause = c.cause
    assert cause.kind == "constant" and cause.op_type == "FULLY_CONNECTED"
    assert cause.evidence["op_index"] == min(o.index for o in outside)
    assert "is not the float model's rounded" in cause.detail and "more than half a step" in cause.detail
    # The stored weight is 1.1× the float one (measured in the record, not assumed).
    k = cause.evidence["constant"]
    assert k["stored"] == pytest.approx(1.1 * k["value"], rel=0.02)
    assert any(s.startswith("SOFTMAX") for s in cause.carried_by)
    assert cause.line_text in c.to_text() and c.to_dict()["cause"]["kind"] == "constant"


def test_export_page_marks_the_cause_op(default_int8):
    from tflab.report.html.export import tflite_fragment

    page = tflite_fragment(default_int8["planted"])
    assert "◀ cause: constant" in page and "cause: constant at FULLY_CONNECTED" in page
    assert "◀ cause" not in tflite_fragment(default_int8["check"])


# ------------------------------------------------------------ the walk


def _graph(ops, dtypes, scales):
    from tflab.litert.flatbuffer_notes import Graph, Op

    n = len(dtypes)
    return Graph(0, "serving_default", tuple(Op(i, name, ins, outs) for i, (name, ins, outs) in enumerate(ops)),
                 (0,), tuple(f"t{i}" for i in range(n)), tuple(dtypes), tuple(scales),
                 tuple((0,) if s else () for s in scales), {"x": 0}, {}, frozenset(), {})


def test_carried_quantization_reads_through_reshape_after_dequantize():
    from tflab.litert.recipe import carried_quantization

    # x -QUANTIZE-> q(int8) -FC-> y(int8, 0.03) -DEQUANTIZE-> f -RESHAPE-> out
    g = _graph([("QUANTIZE", (0,), (1,)), ("FULLY_CONNECTED", (1,), (2,)), ("DEQUANTIZE", (2,), (3,)),
                ("RESHAPE", (3,), (4,))],
               ["float32", "int8", "int8", "float32", "float32"], [(), (0.02,), (0.03,), (), ()])
    out = carried_quantization(g, 4, "output")
    assert (out.scale, out.tensor, out.path) == (0.03, "t2", ("DEQUANTIZE #2", "RESHAPE #3"))
    inp = carried_quantization(g, 0, "input")
    assert (inp.scale, inp.tensor) == (0.02, "t1")


def test_a_float_path_carries_no_quantization():
    """A dynamic-range or float model: the output's writer computes in float; no step is borrowed."""
    from tflab.litert.recipe import carried_quantization

    g = _graph([("FULLY_CONNECTED", (0,), (1,)), ("RESHAPE", (1,), (2,))],
               ["float32", "float32", "float32"], [(), (), ()])
    assert carried_quantization(g, 2, "output") is None and carried_quantization(g, 0, "input") is None


# ------------------------------------------------------- "cannot fail"


def _note(got, want, bound, planted):
    from tflab.litert.vacuous import vacuous_note

    want = np.asarray(want, np.float64)
    finite = want[np.isfinite(want)]
    return vacuous_note("y", np.asarray(got, np.float64), want, np.asarray(bound, np.float64),
                        float(np.ptp(finite)) if finite.size else 0.0, None, lambda: planted)


def test_saturation_note_needs_more_than_a_handful_of_finite_elements_and_a_passing_check():
    """SELU of NaN: two finite values are each 'at an extreme', and the check failed on the NaN."""
    sat = np.array([0.0, 1.0] * 8)
    # two finite values and NaN where LiteRT has a number: no note at all
    assert _note([-1.758, 1.0, 2.0], [np.nan, 1.0, 2.0], [1e-6] * 3, None) == ("", False)
    assert _note([0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0], [1e-6] * 4, np.array([0, 1, 0, 1.0])) == ("", False)
    # a check that has just failed is no vacuous pass
    assert _note(sat + 0.1, sat, np.full(16, 1e-3), sat) == ("", False)


def test_cannot_fail_only_where_the_planted_defect_was_measured_not_to_move_the_output():
    sat = np.array([0.0, 1.0] * 8)
    note, vacuous = _note(sat, sat, np.full(16, 1e-3), sat.copy())
    assert vacuous and "cannot fail for y (measured)" in note and "×1.1" in note
    # the same saturated output, but the planted defect moves it: the check can fail, and says so
    note, vacuous = _note(sat, sat, np.full(16, 1e-3), sat + 0.01)
    assert not vacuous and "the check can fail" in note and "16 of 16 elements" in note
    # a spread output within a tight bound is no candidate at all
    spread = np.linspace(0, 1, 16)
    assert _note(spread, spread, np.full(16, 1e-3), spread) == ("", False)


# ------------------------------------------------------------ NaN causes


def _tflite(fn, n: int = 6) -> bytes:
    import tensorflow as tf

    m = _module(fn, n)
    return tf.lite.TFLiteConverter.from_concrete_functions([m.serve.get_concrete_function()], m).convert()


W = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
X = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)


@pytest.mark.parametrize("name, op, neg", [
    ("sqrt", "SQRT", "of a negative number is NaN"),  # the handed case: sqrt(x @ w)
    ("rsqrt", "RSQRT", "of a negative number is NaN"),
    ("pow", "POW", "of a negative base to a non-integer power is NaN"),
])
def test_nan_from_an_input_outside_the_ops_domain_is_named(name, op, neg):
    import tensorflow as tf

    from tflab.litert.nan import find_nan_origin

    fn = {"sqrt": lambda x: tf.math.sqrt(x @ W), "rsqrt": lambda x: tf.math.rsqrt(x @ W),
          "pow": lambda x: tf.pow(x @ W, 1.5)}[name]
    o = find_nan_origin(_tflite(fn), "serving_default", {"x": X})
    negative = int((X.astype(np.float64) @ W < 0).sum())
    assert o is not None and o.op == op and o.cause == "outside_domain", o
    assert f"{negative} negative value(s)" in o.why or f"{negative} element(s) with base < 0" in o.why, o.why
    assert neg in o.why and "FULLY_CONNECTED #0" in o.why and "unexplained" not in o.to_text()


def test_sqrt_of_non_negative_inputs_has_no_nan_origin():
    import tensorflow as tf

    from tflab.litert.nan import find_nan_origin

    assert find_nan_origin(_tflite(lambda x: tf.math.sqrt(tf.abs(x @ W))), "serving_default", {"x": X}) is None


@pytest.fixture(scope="module")
def selu(tmp_path_factory):
    import tensorflow as tf

    import tflab

    d = tmp_path_factory.mktemp("selu")
    x = np.array([[np.nan, 1.0, -1.0, 0.5], [0.2, np.nan, 2.0, -3.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = tflab.save_and_reload(_module(lambda x: {"y": tf.nn.selu(x)}, 4), d / "selu", {"x": x})
        return x, sm.path, tflab.tflite_roundtrip(sm.path, {"x": x}, "none")


def test_selu_of_nan_is_a_kernel_cause_with_the_branch_derived_from_measured_values(selu):
    """tensorflow/tensorflow#118528: XNNPACK gives -1.758 where TF's SELU of NaN is NaN."""
    from ai_edge_litert.interpreter import Interpreter

    x, _, c = selu
    assert c.ok is False and c.vacuous_outputs == ()
    assert not any("cannot fail" in n or "saturated" in n for n in c.notes), c.notes
    runner = Interpreter(model_content=c.model).get_signature_runner("serving_default")
    lite = np.asarray(runner(x=x)["y"])[np.isnan(x)]  # the value the default (XNNPACK) kernels give
    cause = c.cause
    assert cause.kind == "kernel" and cause.op_type.startswith("SELECT"), cause.to_text()
    assert "XNNPACK" in cause.detail and "GREATER #0 gives False at all 2 element(s)" in cause.detail
    assert "takes its third input there" in cause.detail and "EXP #" in cause.detail
    assert f"give {lite[0]:.4g} there" in cause.detail
    assert "BUILTIN_WITHOUT_DEFAULT_DELEGATES" in cause.to_text() and "(checked:" in cause.to_text()


def test_selu_on_finite_inputs_has_no_cause(selu):
    from tflab.litert.check import check_tflite

    _, path, c = selu
    ok = check_tflite(c.model, path, {"x": np.array([[0.3, 1.0, -1.0, 0.5]], np.float32)}, "none",
                      float_model=c.model)
    assert ok.ok is True and ok.cause is None


def test_a_where_with_exp_on_nan_is_the_same_kernel_cause(tmp_path):
    """A sibling the SELU report does not name: ``where(x > 0, x, 2·(exp(x) − 1))``, no SELU op."""
    import tensorflow as tf

    import tflab

    x = np.array([[np.nan, 1.0, -1.0, 0.5]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = tflab.save_and_reload(_module(lambda x: {"y": tf.where(x > 0, x, 2.0 * (tf.exp(x) - 1.0))}, 4),
                                   tmp_path / "elu", {"x": x})
        c = tflab.tflite_roundtrip(sm.path, {"x": x}, "none")
    from ai_edge_litert.interpreter import Interpreter

    lite = np.asarray(Interpreter(model_content=c.model).get_signature_runner()(x=x)["y"])[0, 0]
    assert c.cause.kind == "kernel" and f"give {lite:.4g} there" in c.cause.detail, c.cause.to_text()
    assert "gives False at all 1 element(s)" in c.cause.detail and "(checked:" in c.cause.to_text()


def test_sqrt_of_negatives_through_the_whole_check_is_a_domain_cause(tmp_path):
    import tensorflow as tf

    import tflab

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = tflab.save_and_reload(_module(lambda x: {"y": tf.math.sqrt(x @ W)}, 6), tmp_path / "sq", {"x": X})
        c = tflab.tflite_roundtrip(sm.path, {"x": X}, "none")
    negative = int((X.astype(np.float64) @ W < 0).sum())
    assert c.cause.kind == "domain" and c.cause.op_type == "SQRT", c.cause.to_text()
    assert f"{negative} negative value(s)" in c.cause.detail and "FULLY_CONNECTED #0" in c.cause.detail
    assert c.cause.detail.startswith("NaN/inf in TF and LiteRT alike")  # they match: the check passes
    assert not any("unexplained" in n for n in c.notes)


def test_an_op_over_its_bound_with_its_own_weights_is_rounding_not_constant(default_int8):
    """The healthy int8 model's weights are the float ones rounded: an op over its bound there is the
    quantization step (rounding), where the planted ×1.1 weight above is a constant."""
    import dataclasses

    from tflab.litert.cause import litert_cause
    from tflab.litert.check import float_reference

    c = default_int8["check"]
    fc = next(o for o in c.per_op.ops if o.op_type == "FULLY_CONNECTED" and o.float_index is not None)
    over = dataclasses.replace(fc, verdict="OUTSIDE", ratio=3.0)
    per_op = dataclasses.replace(c.per_op, ops=tuple(over if o is fc else o for o in c.per_op.ops))
    cause = litert_cause({"per_op": per_op, "outputs": c.outputs, "nan": []}, default_int8["model"],
                         float_reference(default_int8["sm"]), "int8")
    assert cause.kind == "rounding" and cause.op_type == "FULLY_CONNECTED" and "output step" in cause.detail


# ------------------------------------------------ constants the dtype cannot hold


def _rms_norm(eps: float):
    import tensorflow as tf

    return _module(lambda x: {"y": x * tf.math.rsqrt(tf.reduce_mean(x * x, -1, keepdims=True) + eps)}, 8)


@pytest.mark.parametrize("case", ["eps_1e-12", "scale_1e-8", "eps_2^-10"])
def test_a_literal_float16_cannot_hold_is_the_cause_and_a_representable_one_is_not(case, tmp_path):
    """variance_epsilon=1e-12 is 0 in float16: a zero row's rsqrt(0 + 0) is inf and 0·inf NaN (TF: 0).
    ``relu(x)·1e-8`` (a sibling without NaN) outputs 0. ε = 2^-10 ≈ 1e-3 is held exactly (the healthy
    twin: the end-to-end float16 bound counts the rounding of variables, not of literals, so a literal
    that float16 rounds would be judged against a bound that leaves it out)."""
    import tensorflow as tf

    import tflab

    model = {"eps_1e-12": lambda: _rms_norm(1e-12), "eps_2^-10": lambda: _rms_norm(2.0 ** -10),
             "scale_1e-8": lambda: _module(lambda x: {"y": tf.nn.relu(x) * 1e-8}, 8)}[case]()
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    x[1] = 0.0  # a row with zero variance
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = tflab.save_and_reload(model, tmp_path / "m", {"x": x})
        c = tflab.tflite_roundtrip(sm.path, {"x": x}, "float16")
    if case == "eps_2^-10":
        assert c.ok is True and c.cause is None, c.to_text()
        return
    literal = {"eps_1e-12": "1e-12", "scale_1e-8": "1e-08"}[case]
    assert c.ok is False and c.cause.kind == "constant", c.to_text()
    assert f"the constant {literal} underflows to 0 in float16" in c.cause.detail
    assert c.cause.evidence["constant"]["stored"] == 0.0
    if case == "eps_1e-12":  # the RSQRT that then divides by zero only carries it
        assert c.cause.op_type == "ADD" and any(s.startswith("RSQRT") for s in c.cause.carried_by)
