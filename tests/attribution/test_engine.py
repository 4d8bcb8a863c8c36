"""The attribution engine: each cause class planted, with a sibling the first case does not name and a healthy twin.

Every function lives in tests/data/attribution/cases.py; each run is float16 (or
bfloat16) against float32, every op of the forward and backward graph judged on
the inputs it received against a float64 evaluation of the same op.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tflab._user.target import load_module
from tflab.attribution.engine import attribute, attribute_runs
from tflab.attribution.judge import noise_mask

CASES = os.path.join(os.path.dirname(__file__), "..", "data", "attribution", "cases.py")
c = load_module(CASES)
RNG = np.random.default_rng(0)
BIG = tf.constant(RNG.normal(0, 300, (2, 16)).astype(np.float32))
SMALL = tf.constant(RNG.normal(0, 3, (2, 16)).astype(np.float32))
ROWS = tf.constant(np.float32([[1.0] * 8, [2.0] * 8]))
LIN = tf.constant(np.linspace(0, 1, 8).astype(np.float32))


def _line(fn_name: str, text: str) -> str:
    """``cases.py:N`` of the first line of ``fn_name``'s body that contains ``text``."""
    import inspect

    lines, start = inspect.getsourcelines(getattr(c, fn_name))
    n = next(i for i, ln in enumerate(lines) if text in ln and not ln.lstrip().startswith(("def", '"')))
    return f"cases.py:{start + n}"


# ------------------------------------------------------------------ overflow inside a layer, outputs finite


@pytest.mark.parametrize("fn, op_type, text", [("instance_norm", "Square", "var ="),  # tensorflow/tensorflow#47156's kind
                                               ("l2_normalize", "Mul", "sq =")],      # a norm that then divides
                         ids=["variance", "sum-of-squares"])
def test_overflow_inside_the_graph_with_finite_outputs(fn, op_type, text):
    a = attribute(getattr(c, fn), BIG)
    assert a.cause.kind == "overflow" and a.cause.op_type == op_type
    assert a.cause.line == _line(fn, text)
    assert "beyond float16's max 65504" in a.cause.detail and "outputs stay finite" in a.cause.detail
    assert a.cause.carried_by  # the ops after it only carry it


@pytest.mark.parametrize("fn", ["instance_norm", "l2_normalize"])
def test_healthy_twin_of_overflow_has_no_cause(fn):
    assert attribute(getattr(c, fn), SMALL).cause is None


# ------------------------------------------------------------------ constants the dtype cannot hold


@pytest.mark.parametrize("fn, args, literal, became", [
    ("eps_norm", (ROWS,), "1e-12", "is 0 in float16"),               # variance_epsilon rounds to 0
    ("safe_ratio", (tf.constant([0.0, 1.0, -2.0]),), "1e-8", "is 0 in float16"),  # a guard that vanishes
    ("masked", (tf.zeros([2, 3]), tf.constant([[1., 1., 0.]] * 2)), "1e30", "is inf in float16"),
], ids=["epsilon-1e-12", "guard-1e-8", "mask-1e30"])
def test_constant_the_dtype_cannot_hold(fn, args, literal, became):
    a = attribute(getattr(c, fn), *args)
    assert a.cause.kind == "constant" and a.cause.op_type == "Const"
    assert a.cause.evidence["literal"] == literal and became in a.cause.detail
    assert a.cause.line.startswith("cases.py:")


def test_healthy_twin_of_constant_epsilon_has_no_cause():
    assert attribute(c.eps_norm_ok, ROWS).cause is None


# ------------------------------------------------------------------ underflow below the smallest subnormal


def test_underflow_in_the_forward_pass():
    a = attribute(c.tiny_square, tf.constant(np.linspace(1, 2, 8).astype(np.float32)))
    assert a.cause.kind == "underflow" and a.cause.op_type == "Mul" and a.cause.line == _line("tiny_square", "p =")
    assert "became 0 in float16" in a.cause.detail


def test_underflow_in_the_backward_pass_names_the_forward_line():
    a = attribute(c.tiny_grad, tf.ones([8, 64]), tf.fill([64, 4], 2.0 ** -8))
    assert a.cause.kind == "underflow" and a.cause.op_type == "MatMul"
    assert a.cause.line == _line("tiny_grad", "return") and "backward pass of MatMul" in a.cause.detail


def test_a_zero_far_above_the_normal_range_is_rounding_not_underflow():
    """bfloat16 has float32's exponent range: its Conv2DBackpropInput giving 0 for 2^-9 rounded a sum of
    [1, 2^-9, -1] in an 8-bit significand. Not an underflow (loss scaling cannot help); within the op's bound."""
    a = attribute(c.cancelling_filter, tf.ones([1, 2, 2, 1]), dtype="bfloat16")
    bp = [j for j in a.judgements if j.op_type == "Conv2DBackpropInput"]
    # Eigen's bfloat16 kernel gives 0 (error 2^-9); a kernel that adds in float32 (oneDNN) gives 2^-9 exactly.
    assert bp and all(j.local_error in (0.0, 2.0 ** -9) and not j.over_bound for j in bp), [j.text for j in bp]
    # Not an underflow: a cancelling sum (named ill-conditioned where the 0 happens), or no cause at all.
    assert a.cause is None or a.cause.kind == "ill-conditioned", a.cause.detail


def test_healthy_twin_of_underflow_has_no_cause():
    assert attribute(c.tiny_square, tf.constant(np.linspace(100, 200, 8).astype(np.float32))).cause is None


# ------------------------------------------------------------------ ill-conditioned: one ULP amplified


@pytest.mark.parametrize("fn, args, upstream", [
    ("one_minus_cos", (tf.constant(np.arange(1, 9, dtype=np.float32) * 1e-2),), "Cos"),
    ("near_difference", (tf.constant(np.linspace(1, 2, 8).astype(np.float32)),) * 2, "Mul"),
], ids=["1-cos(x)", "a-b-then-divide"])
def test_ill_conditioned_op_amplifies_an_upstream_rounding(fn, args, upstream):
    a = attribute(getattr(c, fn), *args)
    assert a.cause.kind == "ill-conditioned" and a.cause.op_type == "Sub"
    assert a.cause.evidence["condition_number"] > 1e3  # measured by nudging one element at a time
    assert f"error of {upstream}" in a.cause.detail
    assert a.cause.local_error <= a.cause.bound  # the op itself is exact to its bound


def test_healthy_twin_of_ill_conditioning_has_no_cause():
    assert attribute(c.one_minus_cos, tf.constant(np.linspace(1, 2, 8).astype(np.float32))).cause is None


# ------------------------------------------------------------------ domain: NaN is the right answer


@pytest.mark.parametrize("fn, op_type", [("sqrt_shift", "Sqrt"), ("log_shift", "Log")])
def test_domain_nan_is_the_right_answer(fn, op_type):
    a = attribute(getattr(c, fn), LIN)
    assert a.cause.kind == "domain" and a.cause.op_type == op_type
    assert "smallest input -0.5" in a.cause.detail


def test_healthy_twin_of_domain_has_no_cause():
    assert attribute(c.healthy_sqrt, LIN).cause is None


# ------------------------------------------------------------------ rounding: an op over its own bound


def _runs(fn, *args):
    from tflab.nonfinite import trace_op_values

    def call(dt):
        return lambda s: fn(*s), [tf.cast(a, dt) for a in args]

    test_ops, _ = trace_op_values(*call(tf.float16))
    ref_ops, _ = trace_op_values(*call(tf.float32))
    return test_ops, ref_ops


@pytest.mark.parametrize("op_type", ["Mul", "Sum"], ids=["elementwise", "reduction"])
def test_rounding_a_planted_kernel_error_over_the_bound(op_type):
    test_ops, ref_ops = _runs(lambda x, y: tf.reduce_sum(x * y, axis=-1) + 1.0, SMALL, SMALL)
    healthy = attribute_runs(test_ops, ref_ops, "f", "float32 vs float16")
    assert healthy.cause is None  # the healthy twin: every op within its bound
    op = next(o for o in test_ops if o.op_type == op_type)
    op.outputs[0] = (op.outputs[0].astype(np.float32) * 1.5).astype(np.float16)  # a kernel 50% off
    a = attribute_runs(test_ops, ref_ops, "f", "float32 vs float16")
    assert a.cause.kind == "rounding" and a.cause.op_name == op.name
    assert a.cause.local_error > a.cause.bound


# ------------------------------------------------------------------ the reference's own noise floor


def test_softmax_gradient_is_noise_not_underflow():
    x = tf.constant(RNG.normal(size=(4, 8)).astype(np.float32))
    for dt in ("float16", "bfloat16"):
        assert attribute(c.softmax_head, x, dtype=dt).cause is None


def test_noise_mask_drops_float32_noise_and_keeps_values():
    ref = np.array([3.8e-8, 0.0, 1.0, -2.0], np.float32)
    higher = np.array([1e-17, 0.0, 1.0 + 1e-8, -2.0])
    assert noise_mask(ref, higher).tolist() == [False, False, True, True]


def test_package_root_loads_the_engine_on_first_use():
    import tflab.attribution as attribution

    assert attribution.attribute is attribute and "Cause" in attribution.__all__
