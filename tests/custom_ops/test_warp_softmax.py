"""Custom op WarpSoftmax: cases S1–S5 (shared/cases/softmax.md), bad input, fuzzing, bounds.

Finite rows are bounded against the exact (float64) IEEE softmax by our
kernel's own derived bound (`custom_ops.opcheck.EXACT_TOLERANCES`), and
against `tf.nn.softmax` by that bound plus tf.nn.softmax's measured distance
from the exact answer: its exp differs between Eigen and oneDNN's AVX2 and
AVX-512 code, so no accuracy of it is assumed (custom_ops/README.md, "Error
bounds", says why each bound holds). Rows with NaN, +inf or only -inf are compared against the
IEEE formula (`custom_ops.opcheck.ieee_softmax`: all NaN), never against
tf.nn.softmax, whose result there depends on TF's CPU path (oneDNN gives
[0, NaN, 0, 0] for [1, inf, 2, 0], Eigen all NaN; corrected case S2). Tests
whose reference runs a TF CPU kernel that differs between oneDNN and Eigen
carry the `onednn` marker, so `make test` runs them under both settings.
The first test to need the op builds it (cached under custom_ops/_build/).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from custom_ops.opcheck import compare, ieee_softmax, reference_with_ieee_specials

INF, NAN = float("inf"), float("nan")


@pytest.fixture(scope="module")
def ws():
    """The wrapper, with the library built and loaded once for this module."""
    from custom_ops import load_library, warp_softmax

    load_library()
    return warp_softmax


def assert_matches(ours, ref, dtype=tf.float32, x=None, axis=-1):
    """`compare` ours with ``ref``; with the input ``x``, against the exact answer too.

    Given ``x``, ours is bounded against the IEEE formula in float64 (our kernel's own
    derived bound, `EXACT_TOLERANCES`) and against ``ref`` by that bound plus ``ref``'s
    measured distance from the exact answer: tf.nn.softmax's exp differs between Eigen
    and oneDNN's AVX2 and AVX-512 code, so its accuracy is measured, never assumed.
    """
    exact = None
    if x is not None:
        exact = ieee_softmax(tf.cast(x, tf.float32).numpy(), axis, np.float64)
    ok, max_abs, max_rel, detail = compare(np.asarray(ours), np.asarray(ref), dtype, exact=exact)
    assert ok, detail
    return max_abs, max_rel


def onednn_on() -> bool:
    """Whether TF runs its oneDNN CPU kernels in this process (TF_ENABLE_ONEDNN_OPTS, or TF's
    default for this CPU): `tflab._tf.runtime.onednn_enabled` (``IsMklEnabled``)."""
    from tflab._tf.runtime import onednn_enabled

    return onednn_enabled()


def truth(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax in float64 of the (float32-representable) input: the exact answer."""
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ULP distance between non-negative float32 arrays (softmax outputs)."""
    ai = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    bi = np.asarray(b, np.float32).view(np.int32).astype(np.int64)
    return np.abs(ai - bi)


# ---------------------------------------------------------------- S1 shapes

S1_SHAPES = [(1, 1), (3, 1), (2, 31), (2, 32), (2, 33), (5, 1024), (5, 1025), (3, 4097),
             (2, 50257), (7, 3, 129), (0, 16), (4, 0)]


@pytest.mark.onednn
@pytest.mark.parametrize("shape", S1_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_shapes_match_tf_softmax(ws, shape):
    x = tf.random.stateless_normal(shape, seed=[1, len(shape) + sum(shape)]) * 3.0
    y = ws(x)
    assert y.shape == x.shape and y.dtype == tf.float32
    assert_matches(y, tf.nn.softmax(x), x=x)
    if x.shape.num_elements() and shape[-1]:
        # Rows sum to 1 up to float32 summation error (n * 2^-24 worst case).
        sums = tf.reduce_sum(tf.cast(y, tf.float64), axis=-1).numpy()
        assert np.max(np.abs(sums - 1.0)) <= shape[-1] * 2.0 ** -24 + 1e-7


@pytest.mark.onednn
def test_rows_longer_than_the_in_cache_limit_use_the_online_path(ws):
    # 70000 > kInCacheCols (65536): the online (max, sum) pass of the CPU kernel.
    x = tf.random.stateless_normal([2, 70000], seed=[3, 4]) * 5.0
    assert_matches(ws(x), tf.nn.softmax(x), x=x)


# --------------------------------------------------------- S2 special values

def _row(n: int, values: dict[int, float]) -> np.ndarray:
    r = np.linspace(-2.0, 2.0, n, dtype=np.float32)
    for i, v in values.items():
        r[i] = v
    return r[None, :]


# Row lengths: 7 (a vector tail only), 1000 (body + tail), 70000 (online path).
LENGTHS = [7, 1000, 70000]
SPECIALS = {
    "one_+inf": lambda n: _row(n, {n // 2: INF}),
    "all_-inf": lambda n: np.full((1, n), -INF, np.float32),
    "one_nan": lambda n: _row(n, {n - 1: NAN}),
    "one_-inf": lambda n: _row(n, {0: -INF}),
    "pm_1e30": lambda n: np.where(np.arange(n) % 2 == 0, 1e30, -1e30).astype(np.float32)[None, :],
    "leading_-inf_then_finite": lambda n: np.concatenate(
        [np.full((1, n - 3), -INF, np.float32), np.array([[1.0, 2.0, 3.0]], np.float32)], axis=1),
}


@pytest.mark.parametrize("n", LENGTHS, ids=lambda n: f"n{n}")
@pytest.mark.parametrize("case", list(SPECIALS), ids=str)
def test_special_values_match_ieee_reference(ws, case, n):
    """Against the IEEE formula exp(x - max) / sum (case S2), which does not depend on TF's CPU path."""
    x_np = SPECIALS[case](n)
    ref = ieee_softmax(x_np)
    ours = ws(tf.constant(x_np)).numpy()
    assert_matches(ours, ref)  # includes: NaN exactly where the reference has NaN
    # The behaviour the case file names, checked on the reference itself too.
    if case in ("one_+inf", "all_-inf", "one_nan"):
        assert np.isnan(ref).all() and np.isnan(ours).all()
    else:
        assert np.isfinite(ours).all()
        assert abs(float(ours.sum()) - 1.0) < 1e-4


@pytest.mark.onednn
@pytest.mark.parametrize("bad", [INF, NAN], ids=["+inf", "nan"])
def test_tf_softmax_special_row_depends_on_the_cpu_path_ours_does_not(ws, bad):
    """What the docs show: tf.nn.softmax([1, bad, 2, 0]) is all NaN under Eigen, and under oneDNN
    NaN at the bad element and not the IEEE formula's all-NaN row (portability.md); WarpSoftmax
    is all NaN either way, at widths 4 and 64.

    oneDNN's exact pattern depends on the ISA its JIT targets (measured on TF 2.21, oneDNN 3.7):
    AVX2 and AVX-512 code gives [0, NaN, 0, 0] for +inf and for NaN; SSE4.1 code
    (ONEDNN_MAX_CPU_ISA=SSE41) gives [0, NaN, NaN, 0] for NaN, since SSE's maxps returns its second
    operand when either is NaN. So only what holds on every ISA is asserted: NaN at the bad element,
    zeros wherever the output is not NaN, and not all NaN."""
    for width in (4, 64):
        row = np.zeros((1, width), np.float32)
        row[0, :4] = [1.0, bad, 2.0, 0.0]
        x = tf.constant(row)
        tf_out = tf.nn.softmax(x).numpy()
        if onednn_on():
            nan = np.isnan(tf_out)
            assert nan[0, 1] and not nan.all()
            np.testing.assert_array_equal(tf_out[~nan], 0.0)
        else:
            assert np.isnan(tf_out).all()
        assert np.isnan(ws(x).numpy()).all()
        assert np.isnan(tf.function(ws)(x).numpy()).all()


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("n", [7, 40, 70000], ids=lambda n: f"n{n}")
def test_special_rows_in_16bit_dtypes(ws, dtype, n):
    """NaN rows survive the 16-bit stores (NaN stays NaN, quiet bit set) on every row length:
    vector tail only, body + masked tail, and the online pass."""
    x = np.tile(np.linspace(-2, 2, n, dtype=np.float32), (5, 1))
    x[0, n // 2], x[1, -1], x[2, :], x[3, : n - 3] = INF, NAN, -INF, -INF
    y = tf.cast(ws(tf.cast(tf.constant(x), dtype)), tf.float32).numpy()
    ref = ieee_softmax(tf.cast(tf.cast(x, dtype), tf.float32).numpy())
    assert np.isnan(y[:3]).all() and not np.isnan(y[3:]).any()
    assert_matches(y, ref, dtype)


def test_all_equal_row_is_uniform(ws):
    for n in (1, 33, 4097):
        y = ws(tf.fill([2, n], 7.5)).numpy()
        np.testing.assert_array_equal(y, np.full((2, n), np.float32(1.0) / np.float32(n)))


# -------------------------------------------------------------- S3 dtypes

@pytest.mark.onednn
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("cols", [37, 1024, 5000], ids=lambda n: f"n{n}")
def test_16bit_dtypes_are_computed_in_float32(ws, dtype, cols):
    x = tf.cast(tf.random.stateless_normal([16, cols], seed=[5, cols]) * 4.0, dtype)
    y = ws(x)
    assert y.dtype == dtype
    x32 = tf.cast(x, tf.float32)
    assert_matches(tf.cast(y, tf.float32), tf.nn.softmax(x32), dtype, x=x32)
    # Rounded once from float32: within half a unit in the last place of the 16-bit
    # value (round to nearest) plus the float32 kernel's 40u of the exact softmax, a
    # bound from our arithmetic alone. (How close tf.nn.softmax run in 16 bits comes
    # depends on its kernel: Eigen keeps 16-bit intermediates, oneDNN with AVX-512 BF16
    # computes in float32; it is not a bound for ours.)
    exact = ieee_softmax(x32.numpy(), dtype=np.float64)
    ours = tf.cast(y, tf.float64).numpy()
    eps = float(np.finfo(dtype.as_numpy_dtype).eps) if dtype == tf.float16 else 2.0 ** -7
    tiny = float(np.finfo(np.float16).tiny) if dtype == tf.float16 else 2.0 ** -126
    # The spacing where the float32 result was rounded: the larger of exact and ours
    # (a float32 result just past a power of two rounds on the coarser side).
    mag = np.maximum(np.maximum(exact, ours), tiny)
    half_ulp = 0.5 * eps * 2.0 ** np.floor(np.log2(mag))
    if dtype == tf.float16:  # subnormal float16 outputs: absolute spacing 2^-24
        half_ulp = np.maximum(half_ulp, 2.0 ** -25)
    bound = half_ulp + 40 * 2.0 ** -24 * exact
    assert np.all(np.abs(ours - exact) <= bound * (1 + 2.0 ** -20))


def test_int32_raises_invalid_argument_naming_allowed_dtypes(ws):
    with pytest.raises(tf.errors.InvalidArgumentError, match="float16, bfloat16, float32"):
        ws(tf.constant([[1, 2, 3]]))


def test_raw_op_rejects_int32_naming_allowed_dtypes(ws):
    from custom_ops import load_library

    # Eager: the attr check of the op schema (InvalidArgumentError);
    # in a graph: the generated wrapper's TypeError. Both list the dtypes.
    with pytest.raises(tf.errors.InvalidArgumentError, match="half, bfloat16, float"):
        load_library().warp_softmax(tf.constant([[1, 2, 3]]))
    f = tf.function(lambda t: load_library().warp_softmax(t))
    with pytest.raises(TypeError, match="float16, bfloat16, float32"):
        f.get_concrete_function(tf.TensorSpec([2, 3], tf.int32))


# ------------------------------------------------------------ S4 gradient

def test_gradient_matches_finite_differences(ws):
    x = tf.random.stateless_normal([4, 37], seed=[6, 7])
    theoretical, numerical = tf.test.compute_gradient(ws, [x], delta=1e-3)
    err = np.max(np.abs(theoretical[0] - numerical[0]))
    assert err <= 1e-3, err  # float32 central differences: ~delta^2 + eps/delta


@pytest.mark.onednn
def test_gradient_matches_tf_softmax_gradient(ws):
    x = tf.random.stateless_normal([4, 37], seed=[8, 9])
    w = tf.random.stateless_normal([4, 37], seed=[10, 11])
    grads = []
    for fn in (ws, tf.nn.softmax):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x) * w)
        grads.append(tape.gradient(loss, x).numpy())
    assert np.max(np.abs(grads[0] - grads[1])) <= 1e-6


@pytest.mark.parametrize("shape", [(3, 5), (2, 1500), (2, 70000)], ids=lambda s: f"n{s[1]}")
def test_gradient_kernel_matches_formula_for_every_path(ws, shape):
    from custom_ops import load_library

    y = tf.nn.softmax(tf.random.stateless_normal(shape, seed=[1, 1]))
    dy = tf.random.stateless_normal(shape, seed=[2, 2])
    got = load_library().warp_softmax_grad(y, dy).numpy()
    y64, dy64 = y.numpy().astype(np.float64), dy.numpy().astype(np.float64)
    want = y64 * (dy64 - np.sum(dy64 * y64, axis=-1, keepdims=True))
    # The dot product's rounding (n terms) times y, plus one rounding of the product.
    assert np.max(np.abs(got - want)) <= 1e-6


def test_second_order_gradient_matches_tf_softmax(ws):
    x = tf.random.stateless_normal([3, 11], seed=[12, 13])
    hess = []
    for fn in (ws, tf.nn.softmax):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(fn(x) * tf.range(11.0))
            g = inner.gradient(loss, x)
            gsum = tf.reduce_sum(g * g)
        hess.append(outer.gradient(gsum, x).numpy())
    assert np.max(np.abs(hess[0] - hess[1])) <= 1e-5


# ------------------------------------------------------------- S5 axes

@pytest.mark.onednn
def test_axis0_matches_tf_softmax(ws):
    x = tf.random.stateless_normal([5, 7], seed=[14, 15])
    assert_matches(ws(x, axis=0), tf.nn.softmax(x, axis=0), x=x, axis=0)


@pytest.mark.parametrize("axis", [0, 1, -2, 2, -1], ids=lambda a: f"axis{a}")
def test_any_axis_of_rank3_matches_tf_softmax(ws, axis):
    x = tf.random.stateless_normal([3, 4, 5], seed=[16, 17])
    assert_matches(ws(x, axis=axis), tf.nn.softmax(x, axis=axis), x=x, axis=axis)


def test_axis_with_unknown_rank_inside_tf_function(ws):
    f = tf.function(lambda t: ws(t, axis=1), input_signature=[tf.TensorSpec(None, tf.float32)])
    x = tf.random.stateless_normal([2, 3, 4], seed=[18, 19])
    assert_matches(f(x), tf.nn.softmax(x, axis=1), x=x, axis=1)


# ------------------------------------------------------------- bad input

@pytest.mark.parametrize("call,match", [
    (lambda ws: ws(tf.constant(1.0)), "rank >= 1"),
    (lambda ws: ws(tf.zeros([2, 3]), axis=2), r"axis 2 is out of range .* \[-2, 2\)"),
    (lambda ws: ws(tf.zeros([2, 3]), axis=-3), r"axis -3 is out of range"),
], ids=["rank0", "axis2", "axis-3"])
def test_bad_input_raises_invalid_argument(ws, call, match):
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        call(ws)


def test_raw_op_rank0_is_rejected_by_the_kernel_not_a_crash(ws):
    from custom_ops import load_library

    with pytest.raises(tf.errors.InvalidArgumentError, match="rank >= 1"):
        load_library().warp_softmax(tf.constant(1.0))


def test_raw_op_rank0_is_rejected_by_the_shape_function_in_a_graph(ws):
    from custom_ops import load_library

    f = tf.function(lambda t: load_library().warp_softmax(t))
    with pytest.raises(ValueError, match="at least rank 1"):
        f.get_concrete_function(tf.TensorSpec([], tf.float32))


def test_grad_op_rejects_mismatched_shapes(ws):
    from custom_ops import load_library

    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        load_library().warp_softmax_grad(tf.zeros([2, 3]), tf.zeros([2, 4]))


# ----------------------------------------------------------------- fuzzing

_special = st.sampled_from([INF, -INF, NAN, 1e30, -1e30, 3e38, -3e38, 1e-38, -1e-38, 0.0, 88.0, -104.0])
_normal = st.floats(-50.0, 50.0, width=32)


@st.composite
def _logits(draw):
    rank = draw(st.integers(1, 3))
    lead = [draw(st.integers(0, 4)) for _ in range(rank - 1)]
    cols = draw(st.one_of(st.integers(0, 70), st.sampled_from([127, 1024, 1025, 2100])))
    shape = lead + [cols]
    n = int(np.prod(shape))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31)))
    scale = draw(st.sampled_from([1e-30, 1.0, 10.0, 1e4]))
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    # Sprinkle a few special values (or none).
    for _ in range(draw(st.integers(0, 3))):
        if n:
            x[draw(st.integers(0, n - 1))] = draw(st.one_of(_special, _normal))
    return x.reshape(shape)


@pytest.mark.onednn
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=_logits())
def test_fuzz_matches_tf_softmax_and_ieee_special_rows(ws, x):
    """Finite rows against tf.nn.softmax (either CPU path), special rows against the IEEE formula."""
    ref = reference_with_ieee_specials(tf.nn.softmax(tf.constant(x)).numpy(), x)
    assert_matches(ws(tf.constant(x)), ref, x=x)


# --------------------------------------------------------- measured bounds

@pytest.mark.onednn
def test_measured_float32_bounds_vs_tf_softmax_and_exact(ws, capsys):
    """The numbers in custom_ops/README.md "Error bounds", measured on this TF build.

    Every assertion follows from our kernel's arithmetic, never from tf.nn.softmax's
    accuracy: its exp differs between Eigen, oneDNN's AVX2 code and oneDNN's AVX-512
    code (on an AVX2-only EPYC with oneDNN forced on it is 4.3e-6 from ours at 50257
    columns, past the 2^-18 an earlier version assumed).

    * Against the IEEE formula (float32 x - max, then float64): our vector paths'
      derived bound, 40u (tests/custom_ops/test_warp_cpu_paths.py).
    * Against the exact softmax of the float32 input (float64 throughout): the 40u,
      plus rounding x - max to float32, which both kernels do. d_i = x_i - max is off
      by at most |d_i| u, which moves exp(d_i) by that relative amount and the row sum
      by at most max_j |d_j| u: (|d_i| + max_j |d_j|) u per element.
    * Against tf.nn.softmax: per element, our bound against the exact softmax plus
      tf.nn.softmax's own measured distance from it (`compare` with ``exact``).
    """
    u = 2.0 ** -24
    rows = []
    for cols in (7, 128, 1024, 5000, 50257):
        x = tf.random.stateless_normal([64, cols], seed=[20, cols]) * 4.0
        ours, ref = ws(x).numpy().astype(np.float64), tf.nn.softmax(x).numpy().astype(np.float64)
        x64 = x.numpy().astype(np.float64)
        exact = truth(x.numpy())
        ieee = ieee_softmax(x.numpy(), dtype=np.float64)
        normal = exact >= np.finfo(np.float32).tiny
        d = np.abs(x64 - x64.max(axis=-1, keepdims=True))
        rounding = (d + d.max(axis=-1, keepdims=True)) * u  # x - max rounded to float32
        own_exact_bound = (40 * u + rounding * (1 + 1e-3)) * exact
        ref_err = np.abs(ref - exact)
        assert np.all(np.abs(ours - ieee)[normal] <= 40 * u * ieee[normal])
        assert np.all(np.abs(ours - exact)[normal] <= own_exact_bound[normal])
        assert np.all(np.abs(ours - ref)[normal] <= (own_exact_bound + ref_err)[normal])
        rel = lambda a, b: float(np.max(np.abs(a - b)[normal] / b[normal]))  # noqa: E731
        rows.append((cols, rel(ours, ref), int(np.max(ulp_distance(ours, ref)[normal])),
                     rel(ours, exact), rel(ref, exact), rel(ours, ieee), rel(ref, ieee)))
    with capsys.disabled():
        print("\n  cols  rel(ours,tf)  ULP(ours,tf)  rel(ours,exact)  rel(tf,exact)  rel(ours,ieee)"
              "  rel(tf,ieee)")
        for r in rows:
            print(f"  {r[0]:>5}  {r[1]:.3g}  {r[2]:>5}  {r[3]:.3g}  {r[4]:.3g}  {r[5]:.3g}  {r[6]:.3g}")
    # Ours rounds: more than 1u off the IEEE answer somewhere (a check of the measurement).
    assert max(r[5] for r in rows) > u


if __name__ == "__main__":  # the Bazel py_test in BUILD runs this file directly
    import sys

    sys.exit(pytest.main([__file__, "-q"]))


# ------------------------------------------- large outputs, ragged, scalars

@pytest.mark.onednn
@pytest.mark.parametrize("shape", [(2100, 1001), (2048, 1024)], ids=["unaligned-rows", "aligned-rows"])
def test_streamed_large_output_equals_small_output_bit_for_bit(ws, shape):
    """Outputs >= 8 MiB are written with non-temporal stores (kStreamOutputBytes); rows of a
    small input take the cached-store path. Both must give the same bits, row for row,
    including rows whose start is not 32-byte aligned (1001 columns)."""
    x = tf.random.stateless_normal(shape, seed=[31, 32]) * 3.0
    assert x.shape.num_elements() * 4 >= 8 << 20
    big = ws(x).numpy()
    rows = [0, 1, 2, shape[0] // 2, shape[0] - 1]
    small = ws(tf.gather(x, rows)).numpy()  # 5 rows: far below the threshold
    np.testing.assert_array_equal(big[rows], small)
    assert_matches(big, tf.nn.softmax(x), x=x)


def test_ragged_input_is_a_clear_type_error(ws):
    with pytest.raises(TypeError, match=r"^warp_softmax: RaggedTensor input is not supported.*tf\.nn\.softmax"):
        ws(tf.ragged.constant([[1.0, 2.0], [3.0]]))


@pytest.mark.parametrize("axis", [0, 1, -1], ids=lambda a: f"axis{a}")
def test_scalar_with_unknown_rank_says_rank_not_axis(ws, axis):
    """Inside a tf.function with TensorSpec(None) the rank is known only at run time: the
    rank check (or the kernel's own, for the last axis) fires before any axis check."""
    f = tf.function(lambda t: ws(t, axis=axis), input_signature=[tf.TensorSpec(None, tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"rank >= 1") as e:
        f(tf.constant(1.0))
    assert "out of range" not in str(e.value)


# ------------------------------------------- opcheck on special rows

@pytest.mark.onednn
def test_opcheck_compares_special_rows_with_the_ieee_formula(ws):
    """opcheck passes on rows with +inf / NaN / all -inf whichever tf.nn.softmax kernel runs, and
    says how it compared them."""
    from custom_ops import opcheck

    x = np.tile(np.array([1.0, 2.0, 0.0, -1.0], np.float32), (4, 1))
    x[0, 1], x[1, 2], x[2, :] = INF, NAN, -INF
    report = opcheck(ws, tf.constant(x))
    check = report.check("cpu_vs_reference")
    assert check.status == "pass"
    tf_out = tf.nn.softmax(tf.constant(x)).numpy()
    tf_nan = int(np.isnan(tf_out).sum())
    # oneDNN: NaN at the +inf and at the NaN, but not the whole row (portability.md; SSE4.1 code
    # makes one more NaN in the NaN row, see the test above); an all -inf row is all NaN on both
    # paths (-inf - -inf); the finite row has none. Eigen: the IEEE formula, all NaN.
    per_row = np.isnan(tf_out).sum(axis=1).tolist()
    if onednn_on():
        assert 1 <= per_row[0] < 4 and 1 <= per_row[1] < 4 and per_row[2:] == [4, 0], per_row
    else:
        assert per_row == [4, 4, 4, 0]
    assert (f"12 elements in slices with NaN/+inf/all -inf compared with the IEEE formula (all NaN), "
            f"where the reference op gave NaN at {tf_nan}") in check.detail


def test_ieee_reference_follows_the_formula():
    """The reference itself (case S2): NaN/+inf/all -inf rows all NaN, ±1e30 finite, uniform rows."""
    x = np.array([[1, INF, 2, 0], [1, NAN, 2, 0], [-INF] * 4, [1e30, -1e30, 1e30, -1e30],
                  [7.5] * 4, [-INF, 0, 0, -INF]], np.float32)
    y = ieee_softmax(x)
    assert np.isnan(y[:3]).all()
    np.testing.assert_array_equal(y[3], [0.5, 0, 0.5, 0])
    np.testing.assert_array_equal(y[4], [0.25] * 4)
    np.testing.assert_array_equal(y[5], [0, 0.5, 0.5, 0])
    np.testing.assert_array_equal(ieee_softmax(x.T, axis=0), y.T)


# --------------------------------------- the exact-aware bound can fail

def test_exact_aware_compare_catches_planted_errors_whatever_the_reference_runs(ws):
    """`compare(..., exact=)` bounds ours by our own derived bound against the exact answer,
    and against the reference by that bound plus the reference's measured error. Planted: a
    reference 16x less accurate than our bound (as a different exp or sum order would make it)
    must not fail ours, while ours off by 64u, or one element off by 1%, must fail."""
    u = 2.0 ** -24
    x = tf.random.stateless_normal([8, 5000], seed=[40, 41]) * 4.0
    ours, ref = ws(x).numpy(), tf.nn.softmax(x).numpy()
    exact = ieee_softmax(x.numpy(), dtype=np.float64)
    assert compare(ours, ref, tf.float32, exact=exact)[0]
    sign = np.where(np.arange(ref.size).reshape(ref.shape) % 2 == 0, 1.0, -1.0)
    worse_ref = (ref * (1 + 640 * u * sign)).astype(np.float32)
    assert compare(ours, worse_ref, tf.float32, exact=exact)[0]
    # The old rule (the reference assumed accurate to 2^-18) fails ours on that reference:
    # the failure met with oneDNN's AVX2 softmax.
    assert not compare(ours, worse_ref, tf.float32)[0]
    off = (ours.astype(np.float64) * (1 + 64 * u)).astype(np.float32)
    ok, _, _, detail = compare(off, ref, tf.float32, exact=exact)
    assert not ok, detail
    one = ours.copy()
    one[3, 1234] *= 1.01
    assert not compare(one, ref, tf.float32, exact=exact)[0]
