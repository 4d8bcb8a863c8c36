"""ULP distance and bit comparison: the one numeric comparison every lab step uses.

One NaN policy everywhere (modes, SavedModel round trips, TFLite checks):

* two NaNs are 0 ULP apart (a NaN reproduced is reproduced), a NaN against a
  number is ``inf`` ULP apart;
* ``-0.0`` and ``+0.0`` are 0 ULP apart (`ulp_distance`) but differ in bits
  (`compare_bits`, which compares bytes);
* ``±inf`` is one step past the largest finite float of its sign.

The distance is taken on the integer images of the IEEE bit patterns, ordered
like the floats (adjacent floats are adjacent integers), and the float64 case
subtracts on uint64 so the whole range [-max, +max] cannot overflow.
"""

from __future__ import annotations

import numpy as np

from tflab.errors import UsageError

__all__ = ["ulp_distance", "max_ulp", "compare_bits"]


def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """IEEE sign-magnitude bit patterns -> int64 values ordered like the floats.

    A positive float keeps its pattern; a negative float with magnitude bits m
    maps to -m, so -0.0 and +0.0 both become 0 and adjacent floats differ by 1.
    """
    if width == 64:
        signed = bits.view(np.int64)
        negative = signed < 0
        mag = signed & np.int64(0x7FFF_FFFF_FFFF_FFFF)
    else:
        signed = bits.astype(np.int64)
        negative = signed >= (1 << (width - 1))
        mag = signed & ((1 << (width - 1)) - 1)
    return np.where(negative, -mag, mag)


def ulp_distance(a, b) -> np.ndarray:
    """Element-wise distance between two arrays of one dtype in units in the last place.

    float16 and bfloat16 are read as 16-bit patterns, float32 as 32-bit, float64 as
    64-bit. Integer and bool arrays give ``|a - b|``; complex arrays give the larger
    of the real and imaginary distances. NaN policy: see the module docstring.

    Args:
        a: array-like, any shape, a float, integer, bool or complex dtype.
        b: array-like of the same shape (broadcastable) and the same dtype as ``a``.

    Returns:
        float64 array of ULP counts, the broadcast shape of ``a`` and ``b``: exact up
        to 2**53, ``inf`` where exactly one of the two is NaN.

    Raises:
        tflab.errors.UsageError: ``a`` and ``b`` have different dtypes.

    Example:
        >>> one = np.float32([1.0])
        >>> ulp_distance(one, np.nextafter(one, np.float32(2)))
        array([1.])
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise UsageError(f"ULP distance needs one dtype, got {a.dtype} and {b.dtype}")
    if np.iscomplexobj(a):
        return np.maximum(ulp_distance(a.real, b.real), ulp_distance(a.imag, b.imag))
    if a.dtype.kind in "iub":
        return np.abs(a.astype(np.float64) - b.astype(np.float64))
    width = a.dtype.itemsize * 8
    uint = {16: np.uint16, 32: np.uint32, 64: np.uint64}[width]
    ia = _ordered(np.ascontiguousarray(a).view(uint), width)
    ib = _ordered(np.ascontiguousarray(b).view(uint), width)
    if width == 64:
        ua = ia.astype(np.uint64) ^ np.uint64(1 << 63)
        ub = ib.astype(np.uint64) ^ np.uint64(1 << 63)
        dist = np.where(ua >= ub, ua - ub, ub - ua).astype(np.float64)
    else:
        dist = np.abs(ia - ib).astype(np.float64)
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    na, nb = np.isnan(fa), np.isnan(fb)
    dist = np.where(na & nb, 0.0, dist)
    return np.where(na ^ nb, np.inf, dist)


def max_ulp(a, b) -> float:
    """The largest `ulp_distance` over all elements (0.0 for empty arrays).

    Args:
        a, b: as for `ulp_distance`.

    Returns:
        float: the maximum ULP count, ``inf`` if one side has a NaN the other lacks.
    """
    d = ulp_distance(a, b)
    return float(d.max()) if d.size else 0.0


def compare_bits(a, b) -> tuple[int, float, int | float]:
    """Compares two arrays byte for byte, so ``-0.0`` differs from ``0.0`` and NaN payloads count.

    Args:
        a, b: numpy arrays (any dtype, strings and objects included).

    Returns:
        ``(mismatched elements, max |a - b| over elements that are finite on both sides,
        max ULP over the mismatched elements)``; the ULP is an int, or ``inf`` when a NaN
        meets a number. A shape or dtype mismatch gives ``(max(a.size, b.size), inf, 0)``.
        Non-float dtypes give a ULP of 0.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return max(a.size, b.size), float("inf"), 0
    if a.dtype.kind in "OSU":
        neq = np.array([x != y for x, y in zip(a.ravel(), b.ravel())], dtype=bool)
        return int(neq.sum()), 0.0, 0
    width = a.dtype.itemsize
    av = np.ascontiguousarray(a).view(np.uint8).reshape(-1, width)
    bv = np.ascontiguousarray(b).view(np.uint8).reshape(-1, width)
    neq = (av != bv).any(axis=1)
    n = int(neq.sum())
    if n == 0:
        return 0, 0.0, 0
    if a.dtype.kind == "f":
        fin = ~(np.isnan(a) | np.isnan(b)).ravel()
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).ravel()[fin]
        ulps = ulp_distance(a, b).ravel()[neq]
        worst = float(ulps.max())
        return n, float(diff.max()) if diff.size else 0.0, int(worst) if np.isfinite(worst) else worst
    if a.dtype.kind in "iub":
        return n, float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()), 0
    return n, 0.0, 0
