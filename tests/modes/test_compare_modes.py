"""Lab step 6: eager vs graph vs XLA, GradientTape semantics, ULP distances.

Two kinds of claim are kept apart:

* facts that hold on every configuration, asserted exactly: graph == eager bit
  for bit when the same kernels run, the trace and fusion counts, the gradient
  semantics;
* values that depend on the configuration (XLA vs eager differences: XLA
  compiles its own dot and tanh for the host CPU, and TF's eager kernels are
  oneDNN's or Eigen's depending on the CPU and TF_ENABLE_ONEDNN_OPTS), asserted
  as bounds that follow from a stated reason, so they hold on any x86-64 CPU
  with oneDNN on or off. Those tests carry the ``onednn`` marker: ``make test``
  runs them under TF_ENABLE_ONEDNN_OPTS=0 and =1. The values measured on each
  configuration are in the README's table.

Error model used by the bounds (Higham, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., §3.1): a float32 dot product of length n, summed in any
order, with or without FMA, is within γ_n·Σ|a_k·b_k| of the exact value, where
γ_n = n·u/(1 − n·u) and u = 2⁻²⁴. Two implementations therefore differ by at
most 2·γ_n·(|a| @ |b|) elementwise. The small functions live in
tests/data/modes/fns.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tflab import ModeComparison, compare_modes
from tflab._user.target import load_module
from tflab.errors import UsageError
from tflab.modes import count_fusions, ulp_distance

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "modes")
FNS = os.path.join(DATA, "fns.py")
fns = load_module(FNS)  # by path: no sys.path entry, no module-name clash

X64 = tf.TensorSpec([64, 128], tf.float32)
U = 2.0 ** -24  # float32 unit roundoff


def gamma(n: int) -> float:
    """γ_n = n·u/(1 − n·u): the worst-case relative error of an n-term float32 dot."""
    return n * U / (1 - n * U)


def x64() -> np.ndarray:
    """The input compare_modes draws for X64 with seed 0 (one stream, as _prepare does)."""
    from tflab._user.target import materialize

    return materialize(X64, np.random.default_rng(0)).numpy()


# ---------------------------------------------------------------- ULP distance


@pytest.mark.parametrize("dtype, one_bits", [
    (np.float16, 0x3C00), (tf.bfloat16.as_numpy_dtype, 0x3F80),
    (np.float32, 0x3F80_0000), (np.float64, 0x3FF0_0000_0000_0000),
], ids=["float16", "bfloat16", "float32", "float64"])
def test_ulp_distance_on_the_integer_representation(dtype, one_bits):
    one = np.array([1.0], dtype)
    big = np.array([float(tf.as_dtype(dtype).max)], dtype)
    nan, inf = np.array([np.nan], dtype), np.array([np.inf], dtype)
    nxt = (one.view(one.dtype.newbyteorder("=")).view(f"u{one.itemsize}") + 1).view(dtype)
    # Adjacent floats are 1 apart; +0 and -0 are the same point.
    assert ulp_distance(one, nxt)[0] == 1
    assert ulp_distance(np.array([0.0], dtype), np.array([-0.0], dtype))[0] == 0
    # 1 and -1 lie on either side of zero: twice the bit pattern of 1.0 apart.
    assert ulp_distance(one, -one)[0] == 2 * one_bits
    # inf is one step past the largest finite float; NaN pairs agree, NaN vs number is inf.
    assert ulp_distance(big, inf)[0] == 1
    assert ulp_distance(nan, nan)[0] == 0 and ulp_distance(nan, one)[0] == np.inf


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, min_value=-2.0 ** 127, max_value=2.0 ** 127), st.integers(0, 1000))
def test_ulp_distance_counts_steps_of_nextafter(x, k):
    a = np.float32(x)
    b = a
    for _ in range(k):
        b = np.nextafter(b, np.float32(np.inf))
    # Walking k representable floats up is exactly k ULP, across zero too
    # (nextafter goes -tiny → -0.0 → +tiny, and -0.0 and +0.0 are one point,
    # but nextafter(-0.0, inf) is +tiny, so each call is still one step).
    assert ulp_distance(np.float32([a]), np.float32([b]))[0] == k
    assert ulp_distance(np.float32([b]), np.float32([a]))[0] == k


def test_ulp_distance_integers_and_dtype_mismatch():
    assert ulp_distance(np.int32([3, -2]), np.int32([5, -2])).tolist() == [2, 0]
    with pytest.raises(UsageError, match="one dtype"):
        ulp_distance(np.float32([1]), np.float64([1]))


# ---------------------------------------------------------------- modes


@pytest.fixture(scope="module")
def dense_cmp() -> ModeComparison:
    return compare_modes(fns.dense_tanh, X64, repeats=2)


def test_graph_matches_eager_bit_for_bit(dense_cmp):
    g = dense_cmp.modes["graph"]
    # Graph mode runs the same CPU kernels (MatMul, Tanh, Mul and their
    # gradients) on the same inputs; Grappler's rewrites do not touch this
    # arithmetic, so every output and gradient element is identical. This is a
    # fact on every configuration: oneDNN on or off changes which kernel both
    # modes run, not whether they run the same one.
    assert (g.ulp.outputs, g.ulp.gradients) == (0, 0), "same kernels, same bits"
    assert g.abs_error.overall == 0.0


@pytest.mark.onednn
def test_xla_is_close_but_not_bit_identical(dense_cmp):
    x, e = dense_cmp.modes["xla"], dense_cmp.modes["eager"]
    xin, w = x64(), fns.W.numpy()
    y, yx = e.outputs[0], x.outputs[0]
    # x64() is the input compare_modes drew: eager on it gives the same bits.
    np.testing.assert_array_equal(y, fns.dense_tanh(tf.constant(xin)).numpy())
    # y = tanh(x @ W) · 1. XLA compiles its own dot (its own summation order)
    # and its own tanh approximation (elemental_ir_emitter), so its bits differ
    # from TF's MatMul/Tanh kernels (Eigen or oneDNN). tanh is 1-Lipschitz, so
    # the dot's difference passes through at most unchanged; each tanh is within
    # a few ULP of exact (we allow 8 ULP each, 2⁻²³·|y| per ULP):
    #   |Δy| ≤ 2·γ₁₂₈·(|x| @ |W|) + 16·2⁻²³·|y|.
    # A bound in ULP alone would not hold: near y = 0 the dot's absolute error
    # is many ULP of y (measured 2320-3275 ULP on AVX-512 CPUs; see README).
    bound = 2 * gamma(128) * (np.abs(xin) @ np.abs(w)) + 16 * 2.0 ** -23 * np.abs(y)
    assert np.all(np.abs(y - yx) <= bound), "dot reordering through 1-Lipschitz tanh"
    # Not bit-identical: XLA's tanh differs from Eigen's on most inputs, and
    # 2048 outputs would all have to round alike for the bits to match.
    assert x.abs_error.outputs > 0
    # d tanh = 1 - y²: |Δ(1 - y²)| = |y₁ - y₂|·|y₁ + y₂| ≤ 2·max|Δy|, plus one
    # rounding of 1 - y² (2⁻²⁴ relative near 1), then the backward matmul with
    # Wᵀ (32 terms), whose own reordering adds 2·γ₃₂·Σ|g||W|. Near |y| → 1 the
    # gradient is tiny, so this small absolute error is many ULP: ULP alone is
    # the wrong yardstick there.
    out_abs = x.abs_error.outputs
    grad_x = np.abs(x.gradients["arg:x"] - e.gradients["arg:x"])
    w_rows = np.abs(w).sum(axis=1).max()  # arg:x gradient = (1-y²) @ Wᵀ, |1 - y²| ≤ 1
    assert grad_x.max() <= (2 * out_abs + 2.0 ** -23 + 2 * gamma(32)) * w_rows, \
        "gradient error bounded by 2·Δy through Wᵀ plus the backward dot's reordering"


def test_gradients_cover_float_args_and_trainable_variables_only(dense_cmp):
    # FROZEN is read but trainable=False, so the tape does not watch it.
    assert dense_cmp.gradient_names == ("arg:x", "var:w:0")
    e = dense_cmp.modes["eager"].gradients
    assert e["arg:x"].shape == (64, 128) and e["var:w:0"].shape == (128, 32)


def _softmax_bounds(x: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, float]:
    """Elementwise |Δp| bound for softmax(x @ xᵀ) between two implementations,
    and the bound on |gradient| of sum(softmax) (exactly 0) in any one of them."""
    # Logits z = x @ xᵀ: each implementation within γ₁₂₈·(|x| @ |x|ᵀ) of exact.
    dz = 2 * gamma(128) * (np.abs(x) @ np.abs(x).T).max(axis=1, keepdims=True)
    # dp_i/p_i = dz_i − Σ_j p_j·dz_j, so |Δp| ≤ p·(2·max|Δz| + r) where r covers
    # each implementation's own roundings, twice: its row sum S (γ₆₃ ≈ 63u), its
    # exp (we allow 4 ULP) and the division (1 ULP): r = 2·(63 + 4 + 1)·u.
    # Below 2⁻¹⁰⁰ the relative bound is not
    # asserted: TF's CPU threads flush subnormals to zero and oneDNN's exp
    # flushes results a few binades above FLT_MIN (1.2e-38) to 0, which Eigen
    # and XLA keep (measured: 0 vs 2.3e-38, 16.7 M ULP, oneDNN on).
    floor = 2.0 ** -100
    out_bound = np.maximum(p, floor) * (2 * dz + 2 * (63 + 4 + 1) * U)
    # TF's softmax gradient of sum(p) is G = (1 − fl(Σ_j p_j))·p
    # (nn_grad._SoftmaxGrad), 0 in exact arithmetic. Each computed p_j is within
    # (63 + 4 + 1)·u of its exact value relatively (row sum, exp, division), so
    # Σ p = 1 ± 68u, and TF's own sum adds γ₆₃: |G| ≤ (68 + 63 + 1)·u·p ≤ 132u·p.
    # The gradient w.r.t. x is G @ x + Gᵀ @ x (logits x @ xᵀ), one more dot
    # rounding (1 + γ₆₄): |∂x| ≤ 132u·max|x|·(max row sum + max column sum of p).
    rows, cols = p.sum(axis=1).max(), p.sum(axis=0).max()
    grad_bound = 132 * U * np.abs(x).max() * (rows + cols) * (1 + gamma(64))
    return out_bound, float(grad_bound)


@pytest.mark.onednn
def test_measured_xla_output_bounds():
    x = x64()
    # relu(x @ xᵀ)·2 + 1: relu is 1-Lipschitz and ·2 is exact, so XLA vs eager
    # differ by the dot's reordering bound times 2, plus one rounding of "+ 1".
    c = compare_modes(fns.relu_chain, X64, repeats=1, hlo=False)
    y, yx = c.modes["eager"].outputs[0], c.modes["xla"].outputs[0]
    bound = 2 * 2 * gamma(128) * (np.abs(x) @ np.abs(x).T) + 2.0 ** -23 * np.abs(y)
    assert np.all(np.abs(y - yx) <= bound)
    assert c.modes["graph"].ulp.overall == 0  # same kernels: a fact everywhere
    # softmax(x @ xᵀ): XLA's exp and division are its own emitted code.
    s = compare_modes(fns.softmax_matmul, X64, repeats=1, hlo=False)
    p, px = s.modes["eager"].outputs[0], s.modes["xla"].outputs[0]
    np.testing.assert_array_equal(p, fns.softmax_matmul(tf.constant(x)).numpy())
    out_bound, _ = _softmax_bounds(x, p)
    assert np.all(np.abs(p - px) <= out_bound), "relative bound above 2^-100"
    assert s.modes["graph"].ulp.overall == 0


@pytest.mark.onednn
def test_softmax_gradient_is_noise_and_not_a_finding():
    # The sum of a softmax row is 1 whatever x is, so d(sum)/dx is 0 in exact
    # arithmetic; each mode returns rounding noise around 0 (or exactly 0: with
    # oneDNN on, the rows here sum to exactly 1.0). Bounding the noise in each
    # mode bounds the difference; with atol at that bound, no finding.
    x = x64()
    p = fns.softmax_matmul(tf.constant(x)).numpy()  # eager: what compare_modes' eager gives
    _, grad_bound = _softmax_bounds(x, p)
    c = compare_modes(fns.softmax_matmul, X64, repeats=1, hlo=False, atol=2 * grad_bound)
    for m in ("eager", "graph", "xla"):
        assert np.abs(c.modes[m].gradients["arg:x"]).max() <= grad_bound, m
    assert c.modes["xla"].abs_error.gradients <= 2 * grad_bound
    # Outputs: above atol the relative bound of _softmax_bounds is far below
    # 4096 ULP, and below atol a difference is not a finding by definition.
    assert c.findings == ()


def test_fusion_count_and_probed_hlo_stages():
    c = compare_modes(fns.relu_chain, X64, repeats=1, gradients=False)
    # The probe reads TF's own list of stages; these two are text on every backend.
    assert {"hlo", "optimized_hlo"} <= set(c.hlo_stages)
    assert all(c.hlo[s].startswith("HloModule") for s in ("hlo", "optimized_hlo"))
    assert not any("serialized" in s for s in c.hlo)
    # Unoptimized HLO has relu (maximum), multiply and add as separate
    # instructions; XLA's instruction fusion merges the three into one kLoop
    # fusion after the dot.
    unfused = [ln for ln in c.hlo["hlo"].splitlines()
               if any(f" {op}(" in ln for op in ("maximum", "multiply", "add"))]
    assert len(unfused) >= 3
    assert (c.fusion_count, c.fusion_kinds) == (1, {"kLoop": 1})
    # With the backward pass the program has 3 kLoop fusions (measured).
    c2 = compare_modes(fns.relu_chain, X64, repeats=1, hlo=("optimized_hlo",))
    assert (c2.fusion_count, c2.fusion_kinds) == (3, {"kLoop": 3})
    assert set(c2.hlo) == {"optimized_hlo"}


def test_count_fusions_reads_instructions_not_computations():
    text = ("%fused_computation (p: f32[2]) -> f32[2] {\n  ROOT %a = f32[2] add(%p, %p)\n}\n"
            "ENTRY %e {\n  %f.1 = f32[2]{0} fusion(f32[2] %x), kind=kLoop, calls=%fused_computation\n"
            "  ROOT %f.2 = f32[2]{0} fusion(%f.1), kind=kOutput, calls=%fused_computation.1\n}\n")
    assert count_fusions(text) == (2, {"kLoop": 1, "kOutput": 1})


@pytest.mark.parametrize("fn, op_type", [
    (fns.with_py_function, "EagerPyFunc"),
    (fns.with_string_op, "AsString"),
], ids=["py_function", "string-op"])
def test_xla_uncompilable_op_is_reported_by_name(fn, op_type):
    c = compare_modes(fn, tf.TensorSpec([8]), repeats=1)
    err = c.modes["xla"].error
    assert err.startswith(f"XLA cannot compile {op_type} op '{op_type}': "
                          f"No registered '{op_type}' OpKernel for XLA_CPU_JIT")
    assert "fns.py:" in err  # where the op was created
    # The other modes still ran and agree.
    assert c.modes["graph"].error is None and c.modes["graph"].ulp.overall == 0
    assert c.findings == (f"xla did not run: {err}",)
    assert c.hlo == {} and c.fusion_count is None


@pytest.mark.slow
def test_custom_op_without_xla_kernel_is_reported_by_name():
    from _warp_build import load_warp_library_or_skip

    load_warp_library_or_skip()  # skips only without a C++ compiler; a build error fails
    c = compare_modes(fns.with_custom_op, tf.TensorSpec([4, 32]), repeats=1, hlo=False)
    # A custom op registers CPU/GPU kernels only; tf2xla has no kernel for it.
    assert c.modes["xla"].error.startswith(
        "XLA cannot compile WarpSoftmax op 'WarpSoftmax/WarpSoftmax': No registered 'WarpSoftmax' OpKernel")
    assert "warp_softmax_ops.py:" in c.modes["xla"].error
    assert c.modes["graph"].ulp.overall == 0


def test_stateful_random_op_is_a_random_stream_not_a_finding():
    c = compare_modes(fns.noisy, tf.TensorSpec([8]), repeats=1, hlo=False)
    # An unseeded tf.random.uniform (a stateful RandomUniform kernel) draws
    # different numbers in each mode, graph mode included: labelled, not a finding.
    assert c.random_ops == {"output": ("RandomUniform",)}
    for mode, where in (("graph", "in graph mode"), ("xla", "under XLA")):
        r = c.modes[mode]
        assert r.random_streams == ("output",)
        assert r.ulp_by_tensor["output"] > 4096  # measured, kept per tensor
        assert r.abs_error.outputs == 0 and r.ulp.outputs == 0  # not in the numeric columns
        assert any(n.startswith(f"{mode}: output is a different random stream {where} (not arithmetic)")
                   for n in c.notes)
    assert c.findings == ()
    # d(x + noise)/dx reads only the noise's shape: 1 in every mode, not random.
    assert "arg:x" not in c.random_ops and c.modes["xla"].ulp.gradients == 0


def _sum_of_term_magnitudes(fn, x):
    """max over elements of Σ|term| for the function's final sum (or product)."""
    h = x.numpy() @ fns.W16.numpy()
    if fn is fns.residual_sum:
        terms = [h / (1 + np.exp(-h)), x.numpy(), h]  # h·σ(h), x, h
        return np.max(sum(np.abs(t) for t in terms))
    return np.max(np.abs(h * np.clip(h + 3, 0, 6) / 6))


@pytest.mark.onednn
@pytest.mark.parametrize("fn, culprit", [
    (fns.residual_sum, "arithmetic_optimization"),
    (fns.hard_swish, "constant_folding"),
], ids=["residual-add", "hard-swish"])
def test_graph_differences_come_from_one_grappler_pass(fn, culprit):
    from tflab._user.target import materialize

    x = materialize(tf.TensorSpec([16, 16]), seed=0)
    on = compare_modes(fn, x, repeats=1, hlo=False, modes=("graph",))
    # With Grappler on, graph mode's outputs differ from eager (measured: 512 ULP
    # for the residual sum, 2 for hard-swish): the graph is rewritten before it
    # runs. Regrouping a sum, or turning "/ 6" into "* (1/6)", changes where
    # rounding happens: at most a couple of roundings of the terms' magnitudes.
    assert on.modes["graph"].ulp.outputs > 0, "Grappler rewrites change rounding"
    bound = 2 * 2.0 ** -23 * _sum_of_term_magnitudes(fn, x)
    assert on.modes["graph"].abs_error.outputs <= bound, "two roundings of Σ|terms|"
    # Turning off just the culprit pass, or the whole meta optimizer, gives the
    # eager bits back: the executor runs the same kernels as eager.
    for switch in ({culprit: False}, False):
        off = compare_modes(fn, x, repeats=1, hlo=False, modes=("graph",), grappler=switch)
        assert off.modes["graph"].ulp.overall == 0, f"{switch}: same kernels, same bits"
    # The switch is undone afterwards.
    assert tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer") is False


def test_report_repr_text_json(dense_cmp):
    assert repr(dense_cmp).startswith("<ModeComparison dense_tanh: eager: out 0 ULP, grad 0 ULP")
    text = dense_cmp.to_text()
    assert "graph vs eager:" in text and "xla vs graph:" in text
    payload = json.loads(json.dumps(dense_cmp.to_dict()))
    assert payload["modes"]["graph"]["ulp"] == {"outputs": 0, "gradients": 0}
    assert payload["modes"]["eager"]["gradients"] == {"arg:x": [64, 128], "var:w:0": [128, 32]}
    for m in ("eager", "graph", "xla"):
        r = dense_cmp.modes[m]
        assert r.first_call_seconds > 0 and r.median_seconds > 0


def test_bad_arguments():
    with pytest.raises(UsageError, match="unknown dims"):
        compare_modes(fns.dense_tanh, tf.TensorSpec([None, 128]))
    with pytest.raises(UsageError, match="unknown mode"):
        compare_modes(fns.dense_tanh, X64, modes=("jit",))
    with pytest.raises(UsageError, match=r"failed when run eagerly: InvalidArgumentError: .*Matrix size-incompatible"):
        compare_modes(fns.dense_tanh, tf.TensorSpec([4, 3]))


# ---------------------------------------------------------------- tape semantics


# Each test states the TF fact and then checks that compare_modes' own gradient path (one
# GradientTape per mode, the arguments watched, the sum of the outputs) gives that answer in
# every mode: a tflab regression (an argument not watched, one output dropped) fails here.

def _grads_by_mode(fn, x):
    c = compare_modes(fn, x, repeats=1, hlo=False)
    assert all(c.modes[m].error is None for m in ("eager", "graph", "xla")), c
    return {m: np.asarray(c.modes[m].gradients["arg:x"]).tolist() for m in ("eager", "graph", "xla")}


def test_persistent_tape_gives_two_gradients():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y2, y3 = x * x, x * x * x
    assert (float(tape.gradient(y2, x)), float(tape.gradient(y3, x))) == (6.0, 27.0)
    with tf.GradientTape() as once:
        once.watch(x)
        y = x * x
    once.gradient(y, x)
    with pytest.raises(RuntimeError, match="non-persistent"):
        once.gradient(y, x)  # a plain tape frees its records after one gradient()
    # compare_modes takes one gradient of the sum of both outputs (one tape, one call): 2x + 3x² = 33.
    assert _grads_by_mode(lambda x: (x * x, x * x * x), tf.constant([3.0])) == dict.fromkeys(
        ("eager", "graph", "xla"), [33.0])


# ---------------------------------------------------------------- CLI


# ---------------------------------------------------------------- tour


# ---------------------------------------------------------------- user-test findings


# ------------------------------------------------ random streams and labelled worsts


def _tensor_while(x):
    i = tf.constant(0)
    while i < 3:  # a tensor condition: a While op with no maximum_iterations
        x = tf.tanh(x) * 1.5
        i += 1
    return x


def _range_while(x):
    for _ in tf.range(3):  # AutoGraph gives this While op maximum_iterations=3
        x = tf.tanh(x) * 1.5
    return x


def test_gradients_that_are_none_are_not_shown_as_zero_ulp():
    """An output reached through a cast to int32 has no gradient (TF's tape gives None): the grad
    column says '-' and the header says none is connected, instead of '0' for a gradient never compared;
    a connected twin keeps its number."""
    import tensorflow as tf

    import tflab

    def through_int(x):
        return tf.reduce_sum(tf.cast(tf.cast(x * 3.0, tf.int32), tf.float32))

    r = tflab.compare_modes(through_int, tf.constant([0.5, 1.5, 2.5]), modes=("eager", "graph"))
    text = r.to_text()
    assert "none connected: TF's gradient is None for arg:x" in text, text
    graph_row = next(ln for ln in text.splitlines() if ln.startswith("graph "))
    assert graph_row.split()[2] == "-", graph_row
    twin = tflab.compare_modes(lambda x: tf.reduce_sum(x * 3.0), tf.constant([0.5, 1.5, 2.5]), modes=("eager", "graph"))
    assert "connected" not in twin.to_text()
    assert next(ln for ln in twin.to_text().splitlines() if ln.startswith("graph ")).split()[2] == "0"
