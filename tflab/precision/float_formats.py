"""Float formats: float32, bfloat16, float16 (and float64) limits, read from numpy / ml_dtypes.

`float_info` returns a `FloatInfo` with `numpy.finfo`'s field names and a table
of the three mixed-precision dtypes (``to_text()``); `tflab.precision` uses it for
the smallest normal value below which an error is not measured and underflow is
a range loss. (The module is not named ``float_info``: ``tflab.float_info`` is the
function, and a submodule of that name would replace it on the package.)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tflab.report.text import table
from tflab.errors import UsageError

__all__ = ["FloatInfo", "float_info", "TABLE_DTYPES", "pow2_text"]

# The three dtypes of the mixed-precision policies, in FloatInfo.to_text()'s table.
TABLE_DTYPES = ("float32", "bfloat16", "float16")


def pow2_text(x: float) -> str:
    """``2^k`` when x is an exact power of two, else ``%.4g``."""
    x = float(x)
    if x > 0 and math.isfinite(x):
        m, e = math.frexp(x)
        if m == 0.5:
            return f"2^{e - 1}"
    return f"{x:.6g}"


@dataclasses.dataclass(frozen=True, repr=False)
class FloatInfo:
    """A float format's limits, with `numpy.finfo`'s field names.

    Attributes:
        dtype: the dtype's name (``"float16"``, ``"bfloat16"``, …).
        bits: storage size in bits.
        nmant: stored significand (mantissa) bits, without the implicit leading 1.
        nexp: exponent bits.
        eps: the gap between 1.0 and the next float: 2^-nmant.
        max: the largest finite value.
        smallest_normal: the smallest positive normal value, 2^minexp.
        smallest_subnormal: the smallest positive value, 2^(minexp - nmant).
        minexp: the exponent of ``smallest_normal``.
        maxexp: the exponent that overflows (``max`` < 2^maxexp).
        precision: approximate number of exact decimal digits.
    """

    dtype: str
    bits: int
    nmant: int
    nexp: int
    eps: float
    max: float
    smallest_normal: float
    smallest_subnormal: float
    minexp: int
    maxexp: int
    precision: int

    @property
    def significand_bits(self) -> int:
        """Significand bits including the implicit leading 1 (float16 11, bfloat16 8)."""
        return self.nmant + 1

    def ulp(self, x: Any) -> Any:
        """The unit in the last place at ``x``: the gap from |x| to the next float up.

        ``x`` is first rounded to this dtype; at ``max`` the gap below is given
        (there is no finite float above it); inf and NaN give NaN.

        Args:
            x: a number or array.

        Returns:
            A float (for a scalar) or float64 array, in the units of ``x``.

        Example:
            >>> tflab.float_info("float16").ulp(1.0), tflab.float_info("bfloat16").ulp(1.0)
            (0.0009765625, 0.0078125)
        """
        dt = _numpy_dtype(self.dtype)
        a = np.abs(np.asarray(x, dtype=np.float64).astype(dt))
        with np.errstate(over="ignore", invalid="ignore"):
            up = np.spacing(a).astype(np.float64)
            down = (a - np.nextafter(a, np.zeros_like(a))).astype(np.float64)
        out = np.where(np.isfinite(a.astype(np.float64)),
                       np.where(a.astype(np.float64) == self.max, down, up), np.nan)
        return float(out) if out.ndim == 0 else out

    def __repr__(self) -> str:
        return (f"FloatInfo({self.dtype}: {self.bits} bits, {self.significand_bits} significand "
                f"bits, {self.nexp} exponent bits, eps={pow2_text(self.eps)}, max={self.max:.6g}, "
                f"smallest_normal={pow2_text(self.smallest_normal)}, "
                f"smallest_subnormal={pow2_text(self.smallest_subnormal)})")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["significand_bits"] = self.significand_bits
        return d

    def to_text(self) -> str:
        """A table of float32, bfloat16 and float16 (and this dtype if it is another), this one marked."""
        names = list(TABLE_DTYPES) + ([self.dtype] if self.dtype not in TABLE_DTYPES else [])
        infos = [self if n == self.dtype else float_info(n) for n in names]
        header = ("dtype", "bits", "significand", "exponent", "eps", "max", "smallest normal",
                  "smallest subnormal")
        rows = [((">" if fi.dtype == self.dtype else " ") + fi.dtype, str(fi.bits), str(fi.significand_bits),
                 str(fi.nexp), pow2_text(fi.eps), f"{fi.max:.6g}", pow2_text(fi.smallest_normal),
                 pow2_text(fi.smallest_subnormal)) for fi in infos]
        lines = [table(rows, header, align="<>>>>>>>", rule=False)]
        lines.append("significand bits include the implicit leading 1; values from numpy / ml_dtypes finfo")
        return "\n".join(lines)


def _numpy_dtype(dtype: Any) -> np.dtype:
    """``"float16"``, `tf.bfloat16`, `np.float32`, ``ml_dtypes.bfloat16`` … → a numpy dtype.

    Raises:
        UsageError: not a dtype, or not a floating-point one.
    """
    import tensorflow as tf

    if isinstance(dtype, (bool, int, float)):  # tf.dtypes.as_dtype reads an int as a DataType enum value
        raise UsageError(f"{dtype!r} is not a dtype; give a float dtype such as "
                         "'float16', 'bfloat16', 'float32', tf.bfloat16 or np.float16")
    try:
        tf_dtype = tf.dtypes.as_dtype(dtype)
    except TypeError:
        raise UsageError(f"{dtype!r} is not a dtype; give a float dtype such as "
                         "'float16', 'bfloat16', 'float32', tf.bfloat16 or np.float16") from None
    if not tf_dtype.is_floating:
        raise UsageError(f"{tf_dtype.name} is not a floating-point dtype; give float16, bfloat16, "
                         "float32 or float64")
    return np.dtype(tf_dtype.as_numpy_dtype)


def float_info(dtype: Any) -> FloatInfo:
    """The limits of a float dtype, read from numpy / ml_dtypes (`ml_dtypes.finfo`).

    Args:
        dtype: a name (``"float16"``, ``"bfloat16"``), a `tf.DType`, a numpy
            type or an ``ml_dtypes`` type.

    Returns:
        A `FloatInfo` (frozen); ``.to_text()`` tables float32, bfloat16 and float16.

    Raises:
        UsageError: ``dtype`` is not a floating-point dtype.

    Example:
        >>> tflab.float_info("float16")
        FloatInfo(float16: 16 bits, 11 significand bits, 5 exponent bits, eps=2^-10, max=65504, smallest_normal=2^-14, smallest_subnormal=2^-24)
        >>> tflab.float_info(tf.bfloat16).smallest_normal == 2.0 ** -126
        True
    """
    import ml_dtypes

    dt = _numpy_dtype(dtype)
    fi = ml_dtypes.finfo(dt)
    return FloatInfo(dtype=dt.name, bits=int(fi.bits), nmant=int(fi.nmant), nexp=int(fi.nexp),
                     eps=float(fi.eps), max=float(fi.max), smallest_normal=float(fi.smallest_normal),
                     smallest_subnormal=float(fi.smallest_subnormal), minexp=int(fi.minexp),
                     maxexp=int(fi.maxexp), precision=int(fi.precision))

