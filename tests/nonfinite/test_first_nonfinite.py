"""The first non-finite op of a TF graph (tflab.nonfinite) and the fixes compare_precisions runs for it.

huggingface/transformers#6915 (reports_s4 row 11): ``scores - 1e30 * (1.0 - mask)`` under
mixed_float16. The Python constant 1e30 is beyond float16's max 65504, so the Const the graph
holds is +inf, and inf * 0 = NaN where the mask keeps a position. Every assertion follows from
IEEE 754 float16/float32 arithmetic (values beyond 65504 round to inf; inf * 0 is NaN), which
every CPU kernel (oneDNN on or off) obeys; no measured error value from this CPU is asserted.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

# compare_precisions runs mixed_bfloat16 here: skipped where bfloat16 kernels cannot run (make test's
# capped pass on an AVX-512 CPU, where a bfloat16 MatMul is a SIGSEGV; tests/conftest.py).
pytestmark = pytest.mark.bfloat16
import tensorflow as tf

from tflab import compare_precisions
from tflab._user.target import load_module
from tflab.nonfinite import first_nonfinite

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "precision")
masking = load_module(os.path.join(DATA, "masking.py"))
MASK_LINE = next(i for i, ln in enumerate(open(os.path.join(DATA, "masking.py")), 1) if "scores = scores - 1e30" in ln)


def masked(scores, mask):
    return scores - 1e30 * (1.0 - mask)


MASKED_LINE = masked.__code__.co_firstlineno + 1
MASK = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


# ---------------------------------------------------------------- tflab.nonfinite on its own


def test_the_1e30_constant_is_the_first_nonfinite_op_and_inf_times_0_the_first_nan():
    r = first_nonfinite(masked, tf.zeros([2, 3], tf.float16), tf.constant(MASK, tf.float16))
    o = r.origin
    # 1e30 > 65504: the Const is +inf in float16, and it has no input (so none non-finite).
    assert (o.op_type, o.dtype, o.dtype_max, o.posinf, o.literal) == ("Const", "float16", 65504.0, 1, "1e30")
    assert o.where.endswith(f"test_first_nonfinite.py:{MASKED_LINE} in masked")
    assert "1e30 * (1.0 - mask)" in o.code
    # The first NaN: inf * (1 - 1) = inf * 0 in the Mul, at the first kept position.
    n = r.first_nan
    assert n.op_type == "Mul" and n.element == ("inf", "0") and n.nan == 3  # 3 kept positions
    assert "makes NaN from inf × 0" in r.cause_text and "65504" in r.cause_text
    assert not r.outputs_finite
    assert r.to_dict()["origin"]["literal"] == "1e30"


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16], ids=["float32", "bfloat16"])
def test_healthy_dtypes_hold_1e30_and_no_op_is_named(dtype):
    # float32 and bfloat16 share the 8-bit exponent: max ~3.4e38 > 1e30, and 1e30 * 0 = 0.
    r = first_nonfinite(masked, tf.zeros([2, 3], dtype), tf.constant(MASK, dtype))
    assert r.origin is None and r.first_nan is None and r.outputs_finite and r.cause_text == ""
    assert r.ops_run >= 4  # Const, Sub, Mul, Sub at least: the ops were really looked at
    assert "all finite" in repr(r)


def test_an_arithmetic_overflow_names_the_op_and_its_finite_inputs():
    r = first_nonfinite(masking.overflow_by_arithmetic, tf.ones([3], tf.float16))
    # 100 * 1000 = 1e5 > 65504: the Mul makes +inf from two finite inputs.
    assert (r.origin.op_type, r.origin.posinf, r.origin.literal) == ("Mul", 3, "")
    assert "overflows float16 max 65504" in r.origin.cause and "max |x| 1000" in r.origin.cause
    assert r.first_nan is None  # +inf only, never NaN
    healthy = first_nonfinite(masking.overflow_by_arithmetic, tf.ones([3], tf.float32))
    assert healthy.origin is None


# ---------------------------------------------------------------- compare_precisions, tensorflow/tensorflow#6915


@pytest.fixture(scope="module")
def attention():
    x, mask = masking.inputs()
    return compare_precisions(masking.attention, [x, mask])


@pytest.fixture(scope="module")
def healthy():
    x, mask = masking.inputs()
    return compare_precisions(masking.healthy_attention, [x, mask])


@pytest.mark.onednn
def test_6915_cause_is_the_1e30_constant_on_the_users_line(attention):
    f16 = attention.policies["mixed_float16"]
    n_out = f16.outputs["output"].size
    assert f16.overflow["output"] == n_out  # every output row has a kept position: all NaN
    o = f16.nonfinite.origin
    assert (o.op_type, o.literal, o.dtype_max) == ("Const", "1e30", 65504.0)
    assert o.where.endswith(f"masking.py:{MASK_LINE} in call")  # the layer's line, not Keras'
    assert f16.nonfinite.first_nan.op_type == "Mul" and f16.nonfinite.first_nan.element == ("inf", "0")
    assert "first non-finite op: Const" in f16.verdict and "the literal 1e30" in f16.verdict
    # bfloat16 holds 1e30 (max ~3.4e38): no overflow, no cause, no fix.
    bf16 = attention.policies["mixed_bfloat16"]
    assert bf16.overflow == {} and bf16.nonfinite is None and bf16.fix is None


@pytest.mark.onednn
def test_6915_loss_in_float32_is_tried_and_shown_failed_and_masking_in_float32_is_the_fix(attention, healthy):
    plan = attention.policies["mixed_float16"].fix
    first = plan.tried[0]
    # The old advice: the output is NaN before any cast, so casting it cannot help.
    assert first.description == "compute the loss in float32" and first.failed
    assert "already non-finite before any cast" in first.result
    fix = plan.fix
    assert fix.checked and fix.kind == "code" and plan.tried.index(fix) == 1
    assert "tf.cast(scores, tf.float32)" in fix.change and "scores.dtype" in fix.change
    assert fix.measured["output_nonfinite"] == 0 and fix.measured["variable_gradient_nonfinite"] == 0
    assert fix.result.startswith("NaN/inf gone")
    # Kept positions: scores - 0 is exact either way; masked ones give exp(...) = 0 exactly with
    # -inf (the fix) or -1e4 (the healthy twin): the same float16 arithmetic, so the same error.
    assert fix.measured["output_error"] == pytest.approx(healthy.policies["mixed_float16"].output_error)
    verdict = attention.policies["mixed_float16"].verdict
    assert "fix: compute masking.py" in verdict and "tried first: compute the loss in float32" in verdict
    assert "fix: compute the loss in float32" not in verdict  # a failed candidate is never the fix
    d = json.loads(json.dumps(attention.to_dict()))
    assert d["policies"]["mixed_float16"]["fix"]["fix"]["status"] == "checked"


@pytest.mark.onednn
def test_6915_healthy_mask_makes_no_first_nonfinite_claim(healthy):
    f16 = healthy.policies["mixed_float16"]
    # 1e4 < 65504: the Const is finite, 1e4 * 0 = 0, exp(-1e4) = 0: nothing overflows.
    assert f16.overflow == {} and f16.nonfinite is None and f16.fix is None
    assert "non-finite" not in f16.verdict and "fix:" not in f16.verdict


# ---------------------------------------------------------------- the other candidates, each planted


def penalty(x, m):
    y = x - 1e30 * m
    return y * 0.0 + x


def exp_overflow(x):
    y = tf.exp(x * 0.0 + 20.0)
    return y - y + x


@pytest.mark.onednn
def test_a_loss_computed_in_the_function_is_fixed_by_staying_in_float32():
    cmp = compare_precisions(masking.square_loss, tf.ones([4]))
    plan = cmp.policies["mixed_float16"].fix
    # square(300) = 9e4 > 65504. Cast back to float16 the sum is inf again: that candidate fails;
    # kept in float32 (max ~3.4e38) it is finite.
    assert [f.status for f in plan.tried] == ["failed", "failed", "checked"]
    assert plan.fix is plan.tried[2] and "keep the result float32" in plan.fix.description
    assert plan.tried[1].result.startswith("still 1 non-finite output")
    assert cmp.policies["mixed_float16"].nonfinite.origin.op_type == "Square"


@pytest.mark.onednn
def test_the_finite_literal_candidate_when_float32_on_the_line_cannot_help():
    x, m = tf.ones([4]), tf.ones([4])
    plan = compare_precisions(penalty, x, m).policies["mixed_float16"].fix
    # Cast back, -1e30 is -inf in float16 and -inf * 0 = NaN; kept float32, y * 0.0 + x mixes
    # float32 with float16 and TF refuses it; 1e4 is finite in float16: that one works.
    assert [f.status for f in plan.tried] == ["failed", "failed", "failed", "checked"]
    assert "raised" in plan.tried[2].result
    assert plan.fix.source.strip() == "y = x - 10000.0 * m" and "instead of 1e30" in plan.fix.description
    assert plan.fix.measured["output_nonfinite"] == 0


@pytest.mark.onednn
def test_when_no_candidate_works_none_is_printed_as_the_fix():
    cmp = compare_precisions(exp_overflow, tf.ones([4]))
    f16 = cmp.policies["mixed_float16"]
    plan = f16.fix
    # exp(20) = 4.9e8 > 65504; cast back it is inf again (inf - inf = NaN); kept float32 it
    # meets float16 x in the Add; no literal beyond the range: 3 candidates, none works.
    assert f16.nonfinite.origin.op_type == "Exp"
    assert plan.none_worked and plan.fix is None and len(plan.tried) == 3
    assert "none of the 3 candidate fix(es) worked" in f16.verdict


# ---------------------------------------------------------------- loss-scale advice, checked


def tiny(x):
    return tf.reduce_sum(x * 2.0 ** -12) * 2.0 ** -14


def far_too_tiny(x):
    return tf.reduce_sum(x * 2.0 ** -14) * 2.0 ** -14 * 2.0 ** -16


@pytest.mark.onednn
def test_loss_scale_advice_is_run_on_the_backward_pass():
    f16 = compare_precisions(tiny, tf.ones([8])).policies["mixed_float16"]
    # dL/dx = 2^-26 < 2^-25 rounds to 0 in float16; times 2^15 it is 2^-11, a normal.
    fix = f16.loss_scale_fix.fix
    assert fix.checked and fix.change == "loss_scale='dynamic'" and fix.measured["zeroed_below_normal_after"] == 0
    assert "fix: use a loss scale" in f16.verdict and "rescues all 8" in f16.verdict


@pytest.mark.onednn
def test_a_loss_scale_that_cannot_rescue_is_not_printed_as_the_fix():
    f16 = compare_precisions(far_too_tiny, tf.ones([8])).policies["mixed_float16"]
    # dL/dx = 2^-44; times 2^15 it is 2^-29, still below half of float16's smallest subnormal 2^-24.
    plan = f16.loss_scale_fix
    assert plan.none_worked and plan.tried[0].measured["zeroed_below_normal_after"] == 8
    assert "fix: use a loss scale" not in f16.verdict and "none of the 1 candidate" in f16.verdict


@pytest.mark.onednn
def test_the_rescued_gradient_error_is_measured_not_n_a():
    def p15(x):
        return tf.reduce_sum(x * 1e-4) * 1e-5  # dL/dx = 1e-9, below float16's range

    x = tf.ones([64])
    cmp = compare_precisions(p15, x, loss_scale="dynamic")
    scaled = cmp.policies["mixed_float16"]
    # Unscaled: 1e-9 < 2^-25, every element is 0 and nothing is measured (n/a).
    assert scaled.unscaled.underflow["arg:x"] == 64 and scaled.unscaled.gradient_error_elements == 0
    # Scaled by 2^15 the gradient is 3.3e-5: a float16 subnormal (< 2^-14), held with steps of
    # 2^-24, so its relative error is non-zero but a few such steps at most: well under 5%.
    assert scaled.underflow == {} and scaled.gradient_error_elements == 64
    assert 0 < scaled.gradient_error < 0.05
    assert scaled.gradient_error_floor == pytest.approx(2.0 ** -24 / 2.0 ** 15)
    row = next(ln for ln in cmp.to_text().splitlines()
               if ln.startswith("mixed_float16"))
    assert row.split()[3] != "n/a"


def test_tracing_the_judged_ops_again_and_again_logs_no_retrace_warning_for_tflabs_wrapper():
    """Each judgment traces tflab's own wrapper afresh; from the fifth, TF warned "5 out of the last 5
    calls to <function trace_op_values.<locals>.traced> triggered tf.function retracing", which points a
    user asking why their function retraced at tflab's code. The filter drops only that wrapper's
    warning, only while it runs: a user's function's warning passes it, and it is gone afterwards."""
    import logging

    from tflab.nonfinite import _OwnRetraceFilter, trace_op_values

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger, keep = logging.getLogger("tensorflow"), Keep()
    level, filters = logger.level, list(logger.filters)
    logger.setLevel(logging.WARNING)  # whatever an earlier test of this process set
    logger.addHandler(keep)
    try:
        x = tf.ones([3])
        for _ in range(7):
            trace_op_values(lambda s: s[0] * 2.0, [x])
        assert not [m for m in seen if "retracing" in m], seen
        assert logger.filters == filters
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)

    def record(message):
        return logging.LogRecord("tensorflow", logging.WARNING, __file__, 1, message, None, None)

    own = _OwnRetraceFilter()
    assert not own.filter(record("5 out of the last 5 calls to <function trace_op_values.<locals>.traced at 0x1> "
                                 "triggered tf.function retracing"))
    assert own.filter(record("5 out of the last 5 calls to <function users at 0x1> triggered tf.function retracing"))
