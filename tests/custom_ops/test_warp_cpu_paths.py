"""WarpSoftmax CPU paths (scalar, AVX2+FMA, AVX-512), each against a float64 reference.

Every path is compiled into the library (function target attributes) and can
be called directly in this process through `softmax_rows_with_isa` (ctypes,
float32), so the paths are compared side by side without one process per path.
A path this CPU lacks is skipped. `$TFLAB_WARP_SOFTMAX_ISA` (read once when
the library loads) is tested in subprocesses.

The bounds follow from the kernel's arithmetic (custom_ops/README.md, "CPU
kernel"), relative to the IEEE reference `ieee_softmax` (float32 x - max as
every float32 kernel rounds it, then exp and sum in float64), in units of
u = 2^-24 (float32 unit roundoff):
* exp: Cody-Waite reduction (n * ln2_hi exact) and a fitted degree-6
  polynomial on |r| <= ln2/2: at most 2 ULP, i.e. 4u relative (measured 1.01 ULP;
  `test_each_path_exp_within_2_ulp` asserts the 2 ULP on the exp alone);
* the row sum: 16 float32 lanes each add at most kSumBlock / 16 = 32 terms
  before a block goes to double: <= 32u relative (scalar path: in double,
  ~0), plus u for rounding the double total to float32;
* 1 / sum and e * (1 / sum): 2u.
So <= 4 + 32 + 1 + 2 = 39u on the vector paths (asserted: 40u = 2.4e-6)
and <= 4 + 1 + 2 = 7u on the scalar path (asserted: 8u = 4.8e-7), wherever
the reference is a normal float32; outputs below FLT_MIN may be flushed to 0
(absolute 2e-38). These hold on any x86-64 CPU: the paths use no TF kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from custom_ops.opcheck import ieee_softmax

U = 2.0 ** -24
BOUND = {"scalar": 8 * U, "avx2": 40 * U, "avx512": 40 * U}
COLS = [1, 7, 15, 16, 17, 31, 33, 100, 513, 1024, 1025, 4097, 50257, 70000]


@pytest.fixture(scope="module")
def ops():
    from custom_ops.python.ops import warp_softmax_ops

    warp_softmax_ops.load_library()
    return warp_softmax_ops


def _need(ops, isa):
    if not ops.cpu_has(isa):
        pytest.skip(f"this CPU lacks the {isa} path")


def _inputs(cols: int) -> np.ndarray:
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((3, cols)) * np.array([[1.0], [4.0], [30.0]])
    return x.astype(np.float32)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_each_path_within_its_derived_bound_of_the_float64_reference(ops, isa):
    _need(ops, isa)
    tiny = np.finfo(np.float32).tiny
    worst = 0.0
    for cols in COLS:
        x = _inputs(cols)
        got = ops.softmax_rows_with_isa(x, isa)
        ref = ieee_softmax(x).astype(np.float64)
        normal = ref >= tiny
        rel = np.abs(got - ref)[normal] / ref[normal]
        worst = max(worst, float(rel.max()))
        assert rel.max() <= BOUND[isa], (cols, float(rel.max()) / U)
        assert np.all(np.abs(got - ref)[~normal] <= 2e-38), cols
    # A bound that cannot fail is no test: the paths do round (more than 0.5u somewhere).
    assert worst > 0.5 * U


EXP_ULP_BOUND = 2.0  # the exp term of the derived bound above (4u relative)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_each_path_exp_within_2_ulp(ops, isa):
    """The exp alone, through the kernel: a row [0, x] with x <= -18 has max 0 and a float32 sum
    of exactly 1 (exp(x) < 2^-25), so y[1] is the kernel's exp(x) itself. Swept over 2^18 points
    of [-87.3, -18], which covers the whole reduced range |r| <= ln2/2 many times over (the
    polynomial sees only r; 2^n is exact), and judged in ULPs of the float64 exp (measured: 1.01).
    Planted: the AVX2 polynomial without its r^6 term is 41 ULP off and fails here; the 40u
    softmax bound alone would let an exp of 3 ULP pass."""
    _need(ops, isa)
    xs = np.linspace(-87.3, -18.0, 1 << 18).astype(np.float32)
    rows = np.stack([np.zeros_like(xs), xs], axis=1)
    got = ops.softmax_rows_with_isa(rows, isa)[:, 1].astype(np.float64)
    want = np.exp(xs.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    err = np.abs(got - want) / ulp
    assert err.max() <= EXP_ULP_BOUND, (isa, float(err.max()), float(xs[err.argmax()]))
    assert np.all(ops.softmax_rows_with_isa(rows, isa)[:, 0] == 1.0)  # the premise: sum == 1


@pytest.mark.parametrize("stream", [False, True], ids=["cached", "streamed"])
def test_avx512_gives_the_avx2_bits(ops, stream):
    """Same polynomial, same op order, the same 16 partial sums per block: the same bits."""
    _need(ops, "avx512")
    for cols in COLS:
        x = _inputs(cols)
        np.testing.assert_array_equal(ops.softmax_rows_with_isa(x, "avx512", stream),
                                      ops.softmax_rows_with_isa(x, "avx2", stream), err_msg=str(cols))


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_each_path_special_rows_follow_the_ieee_formula(ops, isa):
    _need(ops, isa)
    inf, nan = np.inf, np.nan
    for n in (7, 40, 70000):  # tail only, 16-lane body + masked tail, online (long-row) pass
        x = np.tile(np.linspace(-2, 2, n, dtype=np.float32), (6, 1))
        x[0, n // 2] = inf
        x[1, -1] = nan
        x[2, :] = -inf
        x[3, 0] = -inf
        x[4, : n - 3] = -inf
        x[5, ::2] = 1e30
        got = ops.softmax_rows_with_isa(x, isa)
        ref = ieee_softmax(x)
        assert np.isnan(got[:3]).all() and not np.isnan(got[3:]).any()
        np.testing.assert_allclose(got[3:], ref[3:], rtol=BOUND[isa], atol=2e-38)


def test_unknown_path_is_a_usage_error(ops):
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match=r"isa 'sse' is not a CPU path; use one of scalar, avx2, avx512"):
        ops.softmax_rows_with_isa(np.zeros((1, 4), np.float32), "sse")


def _run(env_isa: str, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TFLAB_WARP_SOFTMAX_ISA=env_isa, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TFLAB_WARP_SOFTMAX_SCALAR", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)


def test_bad_isa_variable_is_one_usage_error_line(ops):
    code = """
import tensorflow as tf
from custom_ops import warp_softmax
from tflab.errors import UsageError
try:
    warp_softmax(tf.zeros([2, 3]))
except UsageError as e:
    print("ERR", str(e).replace(chr(10), "|"))
"""
    out = _run("avx9", code)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("ERR ")]
    assert lines == ["ERR TFLAB_WARP_SOFTMAX_ISA=avx9 is not a CPU path; use scalar, avx2 or avx512, "
                     "or unset it to take the best path this CPU has"], out.stderr[-2000:]


def test_isa_variable_forces_the_path_the_op_and_report_name(ops, tmp_path):
    """TFLAB_WARP_SOFTMAX_ISA=avx2 on any CPU with AVX2 (else skipped): the op reports avx2+fma and
    gives the avx2 path's bits, for float32, float16 and bfloat16 (the 16-bit loads, tails and
    rounding of the AVX2 path run only there when this CPU has AVX-512). Where this process runs the
    AVX-512 path, its outputs must be the same bits (same arithmetic, same rounding)."""
    import tensorflow as tf

    from custom_ops.opcheck import compare

    _need(ops, "avx2")
    out = tmp_path / "avx2.npz"
    code = f"""
import numpy as np, tensorflow as tf
from custom_ops import warp_softmax
from custom_ops.python.ops import warp_softmax_ops as o
x = np.random.default_rng(1).normal(size=(64, 1000)).astype(np.float32) * 4
same = np.array_equal(warp_softmax(tf.constant(x)).numpy(), o.softmax_rows_with_isa(x, "avx2"))
res = {{d: tf.cast(warp_softmax(tf.cast(x[:, :37 + i], d)), tf.float32).numpy()
        for i, d in enumerate(("float32", "float16", "bfloat16"))}}
np.savez({str(out)!r}, **res)
print("ISA", o.cpu_isa(), same)
"""
    proc = _run("avx2", code)
    assert "ISA avx2+fma True" in proc.stdout, proc.stderr[-2000:]
    x = (np.random.default_rng(1).normal(size=(64, 1000)).astype(np.float32) * 4)
    from custom_ops import warp_softmax

    got = np.load(out)
    for i, d in enumerate(("float32", "float16", "bfloat16")):
        xd = tf.cast(x[:, :37 + i], d)
        ref = ieee_softmax(tf.cast(xd, tf.float32).numpy())
        ok, _, _, detail = compare(got[d], ref, tf.as_dtype(d))
        assert ok, (d, detail)
        if ops.cpu_isa() == "avx512":
            np.testing.assert_array_equal(got[d], tf.cast(warp_softmax(xd), tf.float32).numpy(), err_msg=d)


def test_planned_path_matches_the_loaded_library_and_the_rule(ops):
    """`tflab env` names the path from the CPU flags (no library load); the library agrees."""
    assert ops.planned_cpu_path() == ops.cpu_isa()
    full = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
    assert ops.planned_cpu_path(full, {}) == "avx512"
    assert ops.planned_cpu_path(full - {"avx512vl"}, {}) == "avx2+fma"
    assert ops.planned_cpu_path({"sse4_2"}, {}) == "scalar"
    assert ops.planned_cpu_path(full, {"TFLAB_WARP_SOFTMAX_ISA": "avx2"}) == "avx2+fma"
    assert ops.planned_cpu_path(full, {"TFLAB_WARP_SOFTMAX_SCALAR": "1"}) == "scalar"
    assert ops.planned_cpu_path({"avx2", "fma", "f16c"}, {"TFLAB_WARP_SOFTMAX_ISA": "avx512"}).startswith(
        "invalid: TFLAB_WARP_SOFTMAX_ISA=avx512: this CPU lacks it")
    assert ops.planned_cpu_path(full, {"TFLAB_WARP_SOFTMAX_ISA": "sse"}).startswith("invalid")


def test_tflab_env_names_the_warp_softmax_path(ops, run_cli):
    import json

    code, out, _ = run_cli("env", "--json")
    assert code == 0 and json.loads(out)["warp_softmax_cpu_path"] == ops.cpu_isa()
    code, out, _ = run_cli("env")
    assert code == 0 and f"WarpSoftmax CPU path: {ops.cpu_isa()}" in out
