"""compare_precisions names the measured cause of a disagreement, and prints only fixes checked on the user's values.

Functions from tests/data/attribution/cases.py; each run uses one policy to keep it cheap.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tflab import compare_precisions
from tflab._user.target import load_module

CASES = os.path.join(os.path.dirname(__file__), "..", "data", "attribution", "cases.py")
c = load_module(CASES)
RNG = np.random.default_rng(0)


def _line(obj, text: str) -> str:
    import inspect

    lines, start = inspect.getsourcelines(obj)
    n = next(i for i, ln in enumerate(lines) if text in ln and not ln.lstrip().startswith(("def", '"')))
    return f"cases.py:{start + n}"


# ------------------------------------------------------------------ the reference's noise is not underflow


def test_softmax_gradient_is_exactly_zero_not_underflow():
    x = tf.constant(RNG.normal(size=(4, 8)).astype(np.float32))
    cmp = compare_precisions(c.softmax_head, x)
    assert cmp.flagged == ()
    for p in ("mixed_bfloat16", "mixed_float16"):
        r = cmp.policies[p]
        assert r.underflow == {} and r.cause is None and "underflow" not in r.verdict
        assert r.reference_noise_elements  # float32's ~1e-9 values were measured as its own noise


def test_cli_exits_0_for_a_plain_softmax(run_cli):
    code, out, _ = run_cli("precision", f"{CASES}:softmax_head", "--arg", "x=float32[4,8]")
    assert code == 0 and "underflows" not in out


# ------------------------------------------------------------------ tensorflow/tensorflow#47156: overflow inside a layer


@pytest.fixture(scope="module")
def instance_norm():
    x = tf.constant(RNG.normal(0, 300, (2, 16, 4)).astype(np.float32))
    return compare_precisions(c.make_instance_norm_model, x, policies="mixed_float16")


def test_variance_overflow_is_the_cause_not_underflow(instance_norm):
    r = instance_norm.policies["mixed_float16"]
    assert r.cause.kind == "overflow" and r.cause.op_type == "Square"
    assert r.cause.line == _line(c.InstanceNorm.call, "var =")
    assert "mixed_float16" in instance_norm.flagged  # outputs finite, yet the layer's values left the range
    assert "lost to rounding" not in r.verdict and "loss scale" not in r.verdict
    assert r.cause.line_text in r.verdict
    assert instance_norm.to_dict()["policies"]["mixed_float16"]["cause"]["kind"] == "overflow"


def test_the_layer_in_float32_is_the_checked_fix(instance_norm):
    fix = instance_norm.policies["mixed_float16"].fix.fix
    assert fix.checked and "InstanceNorm" in fix.what and "float32" in fix.what
    assert fix.measured["max_relative_error"] <= fix.measured["tolerance"]


def test_healthy_twin_of_the_instance_norm_has_no_cause():
    x = tf.constant(RNG.normal(0, 3, (2, 16, 4)).astype(np.float32))
    cmp = compare_precisions(c.make_instance_norm_model, x, policies="mixed_float16")
    assert cmp.policies["mixed_float16"].cause is None and cmp.flagged == ()


def test_sum_of_squares_overflow_names_its_line_and_no_fix_passes():
    # a sibling: a norm that divides by sqrt(sum(x*x)); computing that line in float32 and casting
    # back still gives inf, so the rewrite fails and is not printed as checked
    x = tf.constant(RNG.normal(0, 300, (2, 16)).astype(np.float32))
    r = compare_precisions(c.l2_normalize, x, policies="mixed_float16").policies["mixed_float16"]
    assert r.cause.kind == "overflow" and r.cause.line == _line(c.l2_normalize, "sq =")
    assert r.fix is not None and not (r.fix.fix is not None and r.fix.fix.checked)


# ------------------------------------------------------------------ a constant float16 rounds to 0


def test_epsilon_rounding_to_zero_is_a_constant_cause_with_a_checked_fix():
    x = tf.constant(np.float32([[1.0] * 8, [2.0] * 8]))  # constant rows: variance 0, then 0/sqrt(0 + 0)
    r = compare_precisions(c.eps_norm, x, policies="mixed_float16").policies["mixed_float16"]
    assert r.cause.kind == "constant" and r.cause.evidence["literal"] == "1e-12"
    assert r.cause.line == _line(c.eps_norm, "return")
    fix = r.fix.fix
    assert fix.checked and "0.001" in fix.change and "within" in fix.result


def test_guard_constant_rounding_to_zero_has_no_float16_fix():
    # x / (|x| + 1e-8) at x = 0: float32's gradient there is 1/1e-8 = 1e8, beyond float16's 65504, so
    # a larger guard changes the gradient (failed), and no float16 computation holds the true one
    r = compare_precisions(c.safe_ratio, tf.constant([0.0, 1.0, -2.0]),
                           policies="mixed_float16").policies["mixed_float16"]
    assert r.cause.kind == "constant" and r.cause.evidence["literal"] == "1e-8"
    assert all(not f.checked for f in r.fix.tried) and r.fix.tried[0].failed
    assert "no float16 fix exists" in r.verdict


def test_healthy_twin_of_the_epsilon_has_no_cause():
    x = tf.constant(np.float32([[1.0] * 8, [2.0] * 8]))
    r = compare_precisions(c.eps_norm_ok, x, policies="mixed_float16").policies["mixed_float16"]
    assert r.cause is None and not r.overflow


# ------------------------------------------------------------------ a gradient whose true value exceeds 65504


def test_no_float16_fix_is_said_plainly_when_the_true_gradient_exceeds_the_range():
    x = tf.constant(np.linspace(-1, 1, 64).astype(np.float32))
    r = compare_precisions(c.exp_sum, x, policies="mixed_float16").policies["mixed_float16"]
    assert r.cause.kind == "overflow" and r.cause.op_type == "Exp"
    assert not ("gone" in r.verdict and "still" in r.verdict)
    assert "no float16 fix exists" in r.verdict
    assert all(not f.checked for f in r.fix.tried)


# ------------------------------------------------------------------ one ULP, amplified


def test_one_ulp_amplified_is_ill_conditioned_and_a_failed_rewrite_is_not_printed_as_checked():
    x = tf.constant(np.arange(1, 9, dtype=np.float32) * 1e-2)  # cos(x) rounds to 1 in float16
    r = compare_precisions(c.one_minus_cos, x, policies="mixed_float16").policies["mixed_float16"]
    assert r.cause.kind == "ill-conditioned" and r.cause.op_type == "Sub"
    assert r.cause.line == _line(c.one_minus_cos, "return") and "error of Cos" in r.cause.detail
    assert r.fix.fix is None and r.fix.none_worked  # the cause's line alone in float32 still reads the rounded cos
