"""The rounding bound an op's own arithmetic may contribute, in its output dtype.

Pure arithmetic, no TF. The bounds follow Higham, *Accuracy and Stability of
Numerical Algorithms* (§2.2, §3.1), written with the unit roundoff ``u`` of the
dtype the op computed in (``u = 2**-p`` for ``p`` significand bits: float16
2^-11, bfloat16 2^-8, float32 2^-24, float64 2^-53):

* **elementwise** (``Add``, ``Mul``, ``Exp``, ``Rsqrt``, ``Cast``, data
  movement): ``ELEMENTWISE_ULPS`` ULP of the output dtype at the reference
  value, ``ulp(|ref|)``: one correctly rounded operation is half an ULP; the
  rest allows a float32 kernel's own error before its result is rounded to
  float16 (``exp``/``tanh`` are a few float32 ULP, far below one float16 ULP).
  Below the smallest normal an ULP is the subnormal spacing, so flushing a
  value smaller than that spacing to 0 is within this bound: it is named as
  an *underflow*, a range event, not by the bound (see `tflab.attribution.engine`).
* **sums and contractions** (``Sum``, ``Mean``, ``MatMul``, ``Conv2D``,
  ``Einsum``): ``γ_K · Σ|x||w| + ulp(|ref|)``, ``γ_K = K·u / (1 − K·u)``, with
  ``Σ|x||w|`` the same op applied to the absolute values of its inputs and ``K``
  the number of terms per output element; any summation order or blocking
  stays within it, so a cancelling output cannot shrink it. The same
  arithmetic as the LiteRT per-op check (`tflab.litert.per_op`), with the unit
  roundoff of the dtype that ran instead of float32's.

The **noise floor** of a reference value is the same bound evaluated for the
reference's own dtype: ``γ_K(u_ref)·Σ|terms|`` (float64: about 1e-16 of the
terms). A reference element at or below it is rounding noise of the reference
itself (the gradient of ``sum(softmax(x))`` is exactly 0; float32 gives values
of ~1e-9), so it is never counted as a value that was lost.
"""

from __future__ import annotations

import numpy as np

__all__ = ["unit_roundoff", "gamma", "ulp", "np_dtype", "ELEMENTWISE_ULPS", "CONTRACTIONS", "REDUCTIONS", "terms_per_output",
           "elementwise_bound", "sum_bound"]

ELEMENTWISE_ULPS = 2.0

# Ops whose output element is a sum of products of input elements (linear in each input), and
# reductions over axes given by their second input: Σ|x||w| is the op applied to |inputs|.
CONTRACTIONS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D",
                          "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput", "Conv2DBackpropFilter",
                          "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"})
REDUCTIONS = frozenset({"Sum", "Mean", "AddN", "BiasAddGrad", "UnsortedSegmentSum", "SegmentSum"})

_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def unit_roundoff(dtype: str) -> float:
    """``2**-p`` for the dtype's ``p`` significand bits (float16 2^-11, bfloat16 2^-8, float32 2^-24)."""
    return 2.0 ** -_BITS.get(str(dtype), 24)


def gamma(k: float, u: float) -> float:
    """``γ_K = K·u / (1 − K·u)``; inf once ``K·u >= 1`` (the bound says nothing then)."""
    ku = float(k) * u
    return ku / (1.0 - ku) if ku < 1.0 else float("inf")


def np_dtype(dtype: str):
    """The numpy dtype of a float dtype name (``"bfloat16"``: ml_dtypes')."""
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def ulp(ref: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype`` at ``|ref|`` (float64 array; the subnormal spacing below the smallest normal)."""
    dt = np_dtype(dtype)
    info = _info(dtype)
    a = np.abs(np.asarray(ref, np.float64))
    a = np.where(np.isfinite(a), np.minimum(a, info[0]), info[0])
    with np.errstate(over="ignore", invalid="ignore"):
        r = a.astype(dt)
    # the spacing at the value rounded into the dtype: 2^(exponent - p + 1), never below the subnormal step
    mant, exp = np.frexp(r.astype(np.float64))
    step = np.ldexp(1.0, (exp - _BITS.get(str(dtype), 24)).astype(np.int64))
    return np.maximum(np.where(r == 0, info[1], step), info[1])


def _info(dtype: str) -> tuple[float, float]:
    """(max, smallest subnormal) of a float dtype."""
    from tflab.precision.float_formats import float_info

    fi = float_info(str(dtype))
    return float(fi.max), float(fi.smallest_subnormal)


def terms_per_output(op_type: str, attrs: dict, inputs: list, output: np.ndarray) -> int:
    """``K``: how many input terms each output element of a sum or contraction adds up.

    Read from the shapes: a reduction's input size over its output size; a
    matmul's inner dimension (after ``transpose_a``/``adj_x``); a convolution's
    filter size over its output channels; an ``Einsum`` or anything else: the
    largest input size over the output size, at least 1.
    """
    sizes = [int(np.size(a)) for a in inputs if a is not None]
    out_n = max(int(np.size(output)), 1)
    if op_type in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3") and inputs and inputs[0] is not None:
        a = np.shape(inputs[0])
        trans = bool(attrs.get("transpose_a") or attrs.get("adj_x"))
        return max(int(a[-2] if trans else a[-1]), 1) if len(a) >= 2 else 1
    if op_type.startswith(("Conv", "DepthwiseConv")) and len(inputs) > 1 and inputs[1] is not None:
        f = np.shape(inputs[1])
        return max(int(np.prod(f[:-1])) if op_type.startswith("Conv") else int(np.prod(f[:-2])), 1)
    if op_type == "AddN":
        return max(len(inputs), 1)
    return max(max(sizes, default=1) // out_n, 1)


def elementwise_bound(ref: np.ndarray, dtype: str, ulps: float = ELEMENTWISE_ULPS) -> np.ndarray:
    """``ulps`` ULP of ``dtype`` at each reference value (float64 array)."""
    return ulps * ulp(ref, dtype)


def sum_bound(ref: np.ndarray, abs_terms: np.ndarray, k: int, dtype: str) -> np.ndarray:
    """``γ_K(u)·Σ|terms| + ulp(|ref|)`` elementwise, ``u`` the unit roundoff of ``dtype``."""
    g = gamma(k + 1, unit_roundoff(dtype))
    return g * np.abs(np.asarray(abs_terms, np.float64)) + ulp(ref, dtype)
