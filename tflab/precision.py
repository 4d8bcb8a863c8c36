"""Lab step 10: one function under float32, mixed_bfloat16 and mixed_float16, measured.

Mixed precision computes in a 16-bit float and keeps variables in float32
(Keras' ``DTypePolicy``: ``keras/src/dtype_policies/dtype_policy.py``). The
two 16-bit formats trade differently (IEEE 754 binary16 and Google's brain
float; values from `float_info`, which reads numpy / ml_dtypes):

* float16 has 11 significand bits (eps 2^-10) but 5 exponent bits: its
  largest finite value is 65504 and its smallest subnormal 2^-24, so small
  gradients *underflow* to 0 and large activations *overflow* to inf;
* bfloat16 has float32's 8 exponent bits (smallest normal 2^-126, max ~3.4e38)
  but only 8 significand bits (eps 2^-7): no range problem, more rounding.

Loss scaling is float16's fix: multiply the loss by S before the backward
pass, so every intermediate gradient is S times larger (above 2^-24), and
divide the gradients by S in float32 afterwards. Keras wraps the optimizer of
a ``mixed_float16`` model in ``LossScaleOptimizer`` (``keras/src/trainers/
trainer.py``, ``compile``), whose dynamic rule starts at S = 2^15 and halves S
on every step whose gradients hold inf or NaN (``keras/src/optimizers/
loss_scale_optimizer.py``); tf_keras' version never goes below 1
(``tf_keras/src/mixed_precision/loss_scale_optimizer.py``).

`compare_precisions` runs a function (or a Keras model built by a factory
under each policy) forward and backward with a `tf.GradientTape` and measures,
against float32: the relative error of outputs and gradients, the gradient
elements that underflow to 0, the elements that overflow to inf/NaN, and what
a loss scale changes. `demonstrate_loss_scaling` does it on the tour's
MobileNetV3Small training step.

What tests/test_10_precision.py measures on TF 2.21 (CPU, oneDNN on and off):
for ``reduce_sum(x @ w) * 2^-20`` with ``x = ones[8, 64]``, ``w = 2^-8``
(shape [64, 4]), dL/dx is 2^-26: 0 in float16 for all 512 elements, exact in
bfloat16, and 2^-26 again in float16 with a loss scale of 2^15 (fixed or
dynamic); ``100 * 1000`` overflows in float16 and not in bfloat16; on a
well-scaled MLP float16's output error is below bfloat16's (11 vs 8
significand bits). On the MobileNetV3Small training step (64×64×3, batch 4,
``training=True``), bfloat16 zeroes some gradient elements too (0.1–0.4 % here),
but none by range: sums that round to exactly 0 with 8 significand bits, which
no loss scale changes. float16 zeroes a similar share, about half of it below its
range, and Keras' dynamic loss scale (2^15 overflows the cross-entropy's
gradient, so 2^14) rescues most of that part. That is the measured answer to
"why does bfloat16 need no loss scaling": it has float32's exponent range.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import sys
import time
from typing import Any, Callable

import numpy as np

from tflab._usercode import user_entry
from tflab.errors import UsageError

# Keras policy name -> (compute dtype, variable dtype), as DTypePolicy parses them.
POLICIES = {
    "float32": ("float32", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "mixed_float16": ("float16", "float32"),
    "bfloat16": ("bfloat16", "bfloat16"),
    "float16": ("float16", "float16"),
}
DEFAULT_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
REFERENCE = "float32"

# Keras 3 LossScaleOptimizer(initial_scale=2.0**15); tf_keras: _DEFAULT_INITIAL_SCALE = 2**15.
INITIAL_LOSS_SCALE = 2.0 ** 15
# tf_keras' dynamic rule: new_scale = maximum(scale / 2, 1). Below 1 a scale adds
# underflow instead of preventing it.
MIN_LOSS_SCALE = 1.0

# The three dtypes of the mixed-precision policies, in FloatInfo.to_text()'s table.
TABLE_DTYPES = ("float32", "bfloat16", "float16")


# --------------------------------------------------------------------------- float_info


def _pow2(x: float) -> str:
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
                f"bits, {self.nexp} exponent bits, eps={_pow2(self.eps)}, max={self.max:.6g}, "
                f"smallest_normal={_pow2(self.smallest_normal)}, "
                f"smallest_subnormal={_pow2(self.smallest_subnormal)})")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["significand_bits"] = self.significand_bits
        return d

    def to_text(self) -> str:
        """A table of float32, bfloat16 and float16 (and this dtype if it is another), this one marked."""
        names = list(TABLE_DTYPES) + ([self.dtype] if self.dtype not in TABLE_DTYPES else [])
        infos = [self if n == self.dtype else float_info(n) for n in names]
        rows = [("dtype", "bits", "significand", "exponent", "eps", "max", "smallest normal",
                 "smallest subnormal")]
        for fi in infos:
            rows.append(((">" if fi.dtype == self.dtype else " ") + fi.dtype, str(fi.bits),
                         str(fi.significand_bits), str(fi.nexp), _pow2(fi.eps), f"{fi.max:.6g}",
                         _pow2(fi.smallest_normal), _pow2(fi.smallest_subnormal)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in rows]
        lines.append("significand bits include the implicit leading 1; values from numpy / ml_dtypes finfo")
        return "\n".join(lines)


def _numpy_dtype(dtype: Any) -> np.dtype:
    """``"float16"``, `tf.bfloat16`, `np.float32`, ``ml_dtypes.bfloat16`` … → a numpy dtype.

    Raises:
        UsageError: not a dtype, or not a floating-point one.
    """
    import tensorflow as tf

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


# --------------------------------------------------------------------------- results


def _fmt_err(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return "0" if x == 0 else f"{x:.2g}"


def _fmt_scale(s: float | None) -> str:
    return "-" if s is None else _pow2(s)


@dataclasses.dataclass(frozen=True, repr=False)
class PolicyResult:
    """One policy's forward and backward pass, measured against float32.

    Attributes:
        policy: the Keras policy name (``"mixed_float16"``, …).
        compute_dtype: the dtype the arithmetic ran in.
        variable_dtype: the dtype of the variables (float32 in the ``mixed_*`` policies).
        outputs: output name → float32 numpy array (cast back from the compute dtype).
        gradients: gradient name (``"arg:x"``, ``"var:dense/kernel"``) → float32 numpy
            array, divided back by the loss scale in float32; None where not connected.
        output_error: the maximum relative error |p - r| / |r| against float32 over the
            output elements whose float32 magnitude |r| is at least the compute dtype's
            ``smallest_normal`` (inf where the policy gave inf/NaN there); None
            when no element was measured (``output_error_elements`` 0 or None):
            nothing measured is not "no error".
        gradient_error: the same over the gradient elements (None likewise).
        gradient_error_median: the median of those relative errors (the maximum is often
            one nearly-cancelled element); None likewise.
        underflow: gradient name → number of elements non-zero in float32 and 0 here
            (only names with some).
        underflow_below_normal: of those, the elements whose float32 magnitude is below the
            compute dtype's ``smallest_normal``: lost to range, which a loss scale fixes;
            the rest were lost to rounding (a sum that cancels to exactly 0).
        overflow: output or gradient name → number of elements inf/NaN here and finite in
            float32 (only names with some).
        loss_scale: the loss scale the gradients were taken with (the last one for dynamic
            scaling); None when none was applied.
        loss_scale_history: every scale tried, in order (dynamic: 2^15, 2^14, … until the
            gradients were finite or the scale reached 1).
        seconds: forward plus backward pass(es), loss-scale retries included; wall seconds.
        unscaled: for a loss-scaled run, the same forward pass's gradients without
            scaling (a `PolicyResult`), else None.
        nonzero_gradient_elements: gradient elements non-zero in float32 (the underflow
            denominator).
        output_error_elements: how many output elements ``output_error`` was measured
            over (|float32 value| >= smallest normal); 0 means every non-zero float32
            value is below that, so it measured nothing, and the tables print
            ``n/a``, not 0. None when there is no non-zero float value at all
            (integer outputs; tables print ``-``).
        gradient_error_elements: the same for ``gradient_error``.
    """

    policy: str
    compute_dtype: str
    variable_dtype: str
    outputs: dict
    gradients: dict
    output_error: float | None
    gradient_error: float | None
    gradient_error_median: float | None
    underflow: dict
    underflow_below_normal: dict
    overflow: dict
    loss_scale: float | None
    loss_scale_history: tuple
    seconds: float
    nonzero_gradient_elements: int
    unscaled: "PolicyResult | None" = None
    output_error_elements: int | None = None
    gradient_error_elements: int | None = None
    _nonzero_by_name: dict = dataclasses.field(default_factory=dict)

    def _err_text(self, which: str) -> str:
        """``output_error``/``gradient_error`` as a table cell: ``n/a`` when no element was measured."""
        n = getattr(self, f"{which}_error_elements")
        return "n/a" if n == 0 else "-" if n is None else _fmt_err(getattr(self, f"{which}_error"))

    @property
    def underflow_count(self) -> int:
        return sum(self.underflow.values())

    @property
    def overflow_count(self) -> int:
        return sum(self.overflow.values())

    @property
    def underflow_fraction(self) -> float:
        """underflow_count / nonzero_gradient_elements (0 when there are none)."""
        return self.underflow_count / self.nonzero_gradient_elements if self.nonzero_gradient_elements else 0.0

    @property
    def verdict(self) -> str:
        """One line: what underflowed or overflowed, and what the loss scale changed."""
        if self.policy == REFERENCE:
            return "reference"
        dt = self.compute_dtype
        parts = []
        base = self.unscaled if self.unscaled is not None else self
        if base.underflow:
            parts.append(f"{dt} underflows {self._where(base)}")
            if self.unscaled is not None:
                rescued = base.underflow_count - self.underflow_count
                scale = f"loss scale {_pow2(self.loss_scale)}"
                parts.append(f"{scale} rescues them" if not self.underflow else
                             f"{scale} rescues {max(rescued, 0)} ({self.underflow_count} left)")
            elif dt == "float16" and sum(base.underflow_below_normal.values()):
                parts.append("a loss scale may rescue them (loss_scale='dynamic')")
            lost = self.underflow_count - sum(self.underflow_below_normal.values())
            if self.underflow and lost:
                parts.append(f"{lost} of the {self.underflow_count} zeroed are >= {dt}'s smallest "
                             "normal in float32: lost to rounding, not range")
        if self.overflow:
            out = sum(v for k, v in self.overflow.items() if k in self.outputs)
            grad = self.overflow_count - out
            what = " and ".join(s for s in (f"{out} output" if out else "",
                                            f"{grad} gradient" if grad else "") if s)
            parts.append(f"{dt} overflows {what} element(s) to inf/NaN (float32 finite; "
                         f"{dt} max {float_info(dt).max:.6g})")
            if out and dt == "float16":  # tensorflow/tensorflow#38357: the loss itself overflowed
                parts.append("fix: compute the loss in float32 (tf.cast the model's output to "
                             "tf.float32 before the loss, or give the last layer dtype='float32'); "
                             "a loss scale cannot help a forward value that is already inf")
        if len(self.loss_scale_history) > 1:
            parts.append(f"dynamic loss scale halved {len(self.loss_scale_history) - 1}× to "
                         f"{_pow2(self.loss_scale)} on inf/NaN gradients")
        return "; ".join(parts) or "no underflow or overflow"

    def _where(self, r: "PolicyResult") -> str:
        worst = max(r.underflow, key=r.underflow.get)
        name = worst.split(":", 1)[-1]
        if len(r.underflow) == 1:
            return f"{r.underflow[worst]}/{r._nonzero_by_name.get(worst, '?')} gradient elements of {name}"
        return (f"{r.underflow_count}/{r.nonzero_gradient_elements} gradient elements in "
                f"{len(r.underflow)} tensors (most in {name}: {r.underflow[worst]}/"
                f"{r._nonzero_by_name.get(worst, '?')})")

    def __repr__(self) -> str:
        return (f"<{self.policy}: output_error={_fmt_err(self.output_error)} "
                f"gradient_error={_fmt_err(self.gradient_error)} underflow={self.underflow_count}/"
                f"{self.nonzero_gradient_elements} overflow={self.overflow_count} "
                f"loss_scale={_fmt_scale(self.loss_scale)} {self.seconds:.3g}s>")

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """JSON-ready dict; ``arrays=False`` gives output and gradient shapes, not values."""
        from tflab._jsonutil import to_jsonable

        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name.startswith("_"):
                continue
            v = getattr(self, f.name)
            if f.name in ("outputs", "gradients") and not arrays:
                v = {k: (None if a is None else list(np.shape(a))) for k, a in v.items()}
            elif f.name == "unscaled" and v is not None:
                v = v.to_dict(arrays)
            out[f.name] = to_jsonable(v)
        out["underflow_count"] = self.underflow_count
        out["overflow_count"] = self.overflow_count
        out["verdict"] = self.verdict
        return out


@dataclasses.dataclass(frozen=True, repr=False)
class PrecisionComparison:
    """float32 vs mixed_bfloat16 vs mixed_float16 (or other policies) for one function.

    Attributes:
        function: the function's (or factory's) name.
        kind: ``"function"`` or ``"keras model factory"``.
        policies: policy name → `PolicyResult`; float32 first (the reference).
        loss_scale: the setting: None, a number, or ``"dynamic"`` (applied to the
            policies that compute in float16, as Keras' ``compile`` does).
        output_names: the flattened outputs' names.
        gradient_names: the gradient sources: ``"arg:NAME"`` float arguments,
            ``"var:PATH"`` trainable variables.
        device: the device the float32 outputs are on.
    """

    function: str
    kind: str
    policies: dict
    loss_scale: Any
    output_names: tuple
    gradient_names: tuple
    device: str = ""

    @property
    def flagged(self) -> tuple[str, ...]:
        """Policies with underflow or overflow (after loss scaling, where applied)."""
        return tuple(p for p, r in self.policies.items() if r.underflow or r.overflow)

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        parts = [f"{p}: out {r._err_text('output')}, grad {r._err_text('gradient')}, "
                 f"underflow {r.underflow_count}, overflow {r.overflow_count}"
                 for p, r in self.policies.items() if p != REFERENCE]
        return f"PrecisionComparison({self.function}: " + "; ".join(parts) + ")"

    def to_text(self) -> str:
        """A table, one row per policy, ending with its verdict."""
        setting = ("none" if self.loss_scale is None else
                   "dynamic (from 2^15, halved on inf/NaN; float16 policies)" if self.loss_scale == "dynamic"
                   else f"{_pow2(self.loss_scale)} (float16 policies)")
        lines = [f"{self.function} ({self.kind}): gradients of sum(outputs) wrt "
                 f"{len(self.gradient_names)} source(s); loss scale: {setting}"]
        rows = [("policy", "compute", "out err", "grad err", "underflow", "overflow", "loss scale",
                 "seconds", "verdict")]
        for p, r in self.policies.items():
            rows.append((p, r.compute_dtype, r._err_text("output"), r._err_text("gradient"),
                         f"{r.underflow_count}/{r.nonzero_gradient_elements}", str(r.overflow_count),
                         _fmt_scale(r.loss_scale), f"{r.seconds:.3f}", r.verdict))
        widths = [max(len(r[i]) for r in rows) for i in range(8)]
        lines += ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r[:8], widths)))
                  + "  " + r[8] for r in rows]
        lines.append("err: max relative error vs float32 over elements with |float32 value| >= the "
                     "compute dtype's smallest normal; underflow: non-zero in float32, 0 here")
        unmeasured = sorted({f"{r.compute_dtype} {_pow2(float_info(r.compute_dtype).smallest_normal)}"
                             for r in self.policies.values()
                             if 0 in (r.output_error_elements, r.gradient_error_elements)})
        if unmeasured:
            lines.append("n/a: every float32 value is below the compute dtype's smallest normal ("
                         + ", ".join(unmeasured) + "), so no relative error was measured: the values "
                         "there are subnormal or 0, not exact")
        return "\n".join(lines)

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """JSON-ready dict (``arrays=False``: shapes instead of values)."""
        from tflab._jsonutil import to_jsonable

        return {"function": self.function, "kind": self.kind, "loss_scale": to_jsonable(self.loss_scale),
                "output_names": list(self.output_names), "gradient_names": list(self.gradient_names),
                "device": self.device, "flagged": list(self.flagged),
                "policies": {p: r.to_dict(arrays) for p, r in self.policies.items()}}


# --------------------------------------------------------------------------- Keras policies


def _keras_modules() -> list:
    """The Keras packages already imported (Keras 3 and/or tf_keras)."""
    return [sys.modules[n] for n in ("keras", "tf_keras") if n in sys.modules]


def _get_policy(mod):
    mp = mod.mixed_precision
    return mp.dtype_policy() if hasattr(mp, "dtype_policy") else mp.global_policy()


def _set_policy(mod, policy) -> None:
    mp = mod.mixed_precision
    (mp.set_dtype_policy if hasattr(mp, "set_dtype_policy") else mp.set_global_policy)(policy)


@contextlib.contextmanager
def global_policy(name: str, seed: int | None = None):
    """Sets the Keras global dtype policy (Keras 3 and tf_keras, where imported) and
    restores the previous one on exit, also on error.

    Args:
        name: a Keras policy name (``"mixed_float16"``, …).
        seed: when given, Keras' ``set_random_seed(seed)`` too, so builds draw the same
            initial weights; Python's, numpy's and TF's global seeds are put back on exit.
    """
    saved = []
    py_state, np_state = random.getstate(), np.random.get_state()
    tf_seed = _tf_global_seed()
    try:
        for mod in _keras_modules():
            saved.append((mod, _get_policy(mod)))
            _set_policy(mod, name)
            if seed is not None:
                mod.utils.set_random_seed(seed)
        yield
    finally:
        for mod, old in reversed(saved):
            _set_policy(mod, old)
        if seed is not None:
            import tensorflow as tf

            random.setstate(py_state)
            np.random.set_state(np_state)
            tf.random.set_seed(tf_seed)


def _tf_global_seed():
    try:
        from tensorflow.python.eager import context

        return context.global_seed()
    except (ImportError, AttributeError):  # private API: unseeded is the safe fallback
        return None


def _is_keras_layer(obj: Any) -> bool:
    return any(c.__name__ == "Layer" and c.__module__.split(".")[0] in ("keras", "tf_keras")
               for c in type(obj).__mro__)


def _takes_no_parameters(fn: Callable) -> bool:
    from tflab._target import python_signature

    sig = python_signature(fn)
    return sig is not None and not sig.parameters


# --------------------------------------------------------------------------- running


@dataclasses.dataclass
class _Run:
    """What one policy's forward pass left: outputs and a persistent tape."""

    outputs: list
    output_names: list
    grad_fn: Callable  # scale -> (float32 numpy arrays, None where unconnected; seconds)
    forward_seconds: float
    variables: list


# The ops that carry a policy's arithmetic: what a compute dtype is for.
_COMPUTE_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D",
                          "Conv3D", "DepthwiseConv2dNative", "Conv", "Conv2DBackpropInput",
                          "Conv3DBackpropInputV2"})


@contextlib.contextmanager
def _record_compute_ops():
    """Records (op type, output dtype name) of every `_COMPUTE_OPS` op run in the block.

    Uses TF's op callbacks (``tensorflow/python/framework/op_callbacks.py``), which
    see each eager op and each op created while tracing.
    """
    from tensorflow.python.framework import op_callbacks

    seen: list[tuple[str, str]] = []

    def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        op_type = op_type.decode() if isinstance(op_type, bytes) else op_type
        if op_type in _COMPUTE_OPS and outputs:
            seen.append((op_type, outputs[0].dtype.name))
        return None

    op_callbacks.add_op_callback(callback)
    try:
        yield seen
    finally:
        op_callbacks.remove_op_callback(callback)


def _forward(call: Callable, sources: list, compute: str, variables: list | None,
             compute_ops: list | None = None):
    """Runs ``call`` under a persistent tape; the target is sum(float outputs) in float32.

    ``compute_ops``, when a list, receives (op type, output dtype) of the
    MatMul/Conv-class ops the forward pass ran (`_record_compute_ops`).
    """
    import tensorflow as tf

    t0 = time.perf_counter()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(sources)
        if compute_ops is None:
            structure = call(sources)
        else:
            with _record_compute_ops() as seen:
                structure = call(sources)
            compute_ops.extend(seen)
        outputs = tf.nest.flatten(structure)
        outputs = [tf.convert_to_tensor(o) if not isinstance(o, tf.Tensor) else o for o in outputs]
        floats = [tf.cast(o, tf.float32) if o.dtype.is_floating else o for o in outputs]
        targets = [tf.reduce_sum(o) for o in floats if o.dtype == tf.float32]
        total = tf.add_n(targets) if targets else None
    if variables is None:
        variables = [v for v in tape.watched_variables() if v.trainable]
    srcs = list(sources) + list(variables)
    out_np = [o.numpy() for o in floats]
    seconds = time.perf_counter() - t0

    def grads(scale: float) -> tuple[list, float]:
        t = time.perf_counter()
        if total is None:
            return [None] * len(srcs), 0.0
        g = tape.gradient(total, srcs, output_gradients=tf.constant(scale, tf.float32),
                          unconnected_gradients=tf.UnconnectedGradients.NONE)
        # "divided back in float32": the division happens after the cast, as Keras'
        # LossScaleOptimizer divides float32 gradients (variables are float32).
        arrs = [None if x is None else (tf.convert_to_tensor(x).numpy().astype(np.float32) / np.float32(scale))
                for x in g]
        return arrs, time.perf_counter() - t

    from tflab.modes import _output_names

    return _Run(outputs=out_np, output_names=_output_names(structure), grad_fn=grads,
                forward_seconds=seconds, variables=list(variables))


def _rel_errors(ref: np.ndarray, got: np.ndarray, floor: float) -> np.ndarray:
    """|got - ref| / |ref| on elements with finite |ref| >= floor (inf where got is not finite)."""
    r = ref.astype(np.float64).ravel()
    g = got.astype(np.float64).ravel()
    keep = np.isfinite(r) & (np.abs(r) >= floor)
    r, g = r[keep], g[keep]
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.abs(g - r) / np.abs(r)
    return np.where(np.isfinite(g), e, np.inf)


def _measured(errors: np.ndarray, refs: list) -> int | None:
    """How many elements an error was measured over; None when no float32 value was non-zero."""
    if not any(np.count_nonzero(np.isfinite(r) & (r != 0)) for r in refs):
        return None
    return int(errors.size)


def _measure(policy: str, ref_out: list, ref_grads: list, out: list, grads: list,
             output_names, grad_names, loss_scale, history, seconds, unscaled=None) -> PolicyResult:
    compute, variable = POLICIES[policy]
    floor = float_info(compute).smallest_normal
    out_err = [_rel_errors(r, o, floor) for r, o in zip(ref_out, out) if r.dtype.kind == "f"]
    grad_err = [_rel_errors(r, g, floor) for r, g in zip(ref_grads, grads)
                if r is not None and g is not None]
    out_all = np.concatenate(out_err) if out_err else np.zeros(0)
    grad_all = np.concatenate(grad_err) if grad_err else np.zeros(0)
    underflow, below, overflow, nonzero = {}, {}, {}, {}
    for name, r, g in zip(grad_names, ref_grads, grads):
        if r is None or g is None:
            continue
        nz = r != 0
        nonzero[name] = int(nz.sum())
        zero = nz & (g == 0)
        if zero.any():
            underflow[name] = int(zero.sum())
            n_below = int((zero & (np.abs(r) < floor)).sum())
            if n_below:
                below[name] = n_below
    for name, r, g in list(zip(output_names, ref_out, out)) + list(zip(grad_names, ref_grads, grads)):
        if r is None or g is None or r.dtype.kind != "f":
            continue
        bad = np.isfinite(r) & ~np.isfinite(g)
        if bad.any():
            overflow[name] = int(bad.sum())
    # Nothing measured (no float32 element at or above the smallest normal): None, not 0.0,
    # which would read as "no error" (case M8).
    out_n = _measured(out_all, [r for r in ref_out if r.dtype.kind == "f"])
    grad_n = _measured(grad_all, [r for r, g in zip(ref_grads, grads) if r is not None and g is not None])
    return PolicyResult(
        policy=policy, compute_dtype=compute, variable_dtype=variable,
        outputs=dict(zip(output_names, out)), gradients=dict(zip(grad_names, grads)),
        output_error=float(out_all.max()) if out_n else None,
        gradient_error=float(grad_all.max()) if grad_n else None,
        gradient_error_median=float(np.median(grad_all)) if grad_n else None,
        underflow=underflow, underflow_below_normal=below, overflow=overflow,
        loss_scale=loss_scale, loss_scale_history=tuple(history), seconds=seconds,
        nonzero_gradient_elements=sum(nonzero.values()), unscaled=unscaled,
        output_error_elements=out_n, gradient_error_elements=grad_n,
        _nonzero_by_name=nonzero)


def _parse_loss_scale(loss_scale: Any) -> Any:
    if loss_scale is None or loss_scale == "dynamic":
        return loss_scale
    bad = isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float))
    if not bad:
        try:
            value = float(loss_scale)  # an int past float's range (10**400) is refused, not an OverflowError
        except OverflowError:
            bad = True
        else:
            bad = not math.isfinite(value) or value <= 0
    if bad:
        shown = repr(loss_scale) if len(repr(loss_scale)) <= 40 else repr(loss_scale)[:37] + "..."
        raise UsageError(f"loss_scale must be None, a positive number or 'dynamic' (a float; at most "
                         f"{sys.float_info.max:.3g}), got {shown}")
    return value


def parse_policies(policies: Any) -> tuple[str, ...]:
    """Validates policy names; float32 (the reference) is put first, duplicates dropped.

    Raises:
        UsageError: an unknown name (the message lists the known ones).
    """
    if isinstance(policies, str):
        policies = [p for p in policies.split(",")]
    names = [str(p).strip() for p in policies]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise UsageError(f"unknown policy {', '.join(map(repr, unknown)) or '(none given)'}; "
                         f"choose from {', '.join(POLICIES)}")
    return tuple(dict.fromkeys([REFERENCE] + names))


class _Subject:
    """A plain function (args cast to the compute dtype) or a Keras factory (built per policy)."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, factory: bool, seed: int):
        from tflab.modes import _flatten_sources

        self.fn, self.args, self.kwargs, self.factory, self.seed = fn, args, kwargs, factory, seed
        self.python_fn = getattr(fn, "python_function", fn)
        self._flatten = _flatten_sources
        self.reference_model = None
        self.sources, self.source_names, self.rebuild = _flatten_sources(self.python_fn, args, kwargs)

    def build(self, policy: str):
        """The callable for ``policy``: the plain function, or what the factory builds under it."""
        if not self.factory:
            return self.python_fn
        before = {m.__name__ for m in _keras_modules()}
        with global_policy(policy, seed=self.seed):
            obj = self.fn()
        if {m.__name__ for m in _keras_modules()} - before:
            # The factory imported Keras itself: build again with its policy set.
            with global_policy(policy, seed=self.seed):
                obj = self.fn()
        if not callable(obj):
            raise UsageError(f"the factory {getattr(self.fn, '__name__', self.fn)!r} returned "
                             f"{type(obj).__name__}; it must return a Keras model or a callable")
        if _is_keras_layer(obj):
            if not obj.weights:  # a subclassed model builds its weights on the first call
                obj(*self.args, **self.kwargs)
            if self.reference_model is None:
                self.reference_model = obj
            elif obj is not self.reference_model:
                # Same starting weights in every policy (float32 values; exact in mixed policies).
                obj.set_weights(self.reference_model.get_weights())
        return obj

    def call(self, obj: Callable, compute: str):
        import tensorflow as tf

        def run(sources):
            if self.factory:  # Keras casts inputs to its compute dtype itself
                a, k = self.rebuild(list(sources))
            else:
                a, k = self.rebuild([tf.cast(s, compute) for s in sources])
            return obj(*a, **k)

        return run

    def variables_of(self, obj) -> list | None:
        return list(obj.trainable_variables) if _is_keras_layer(obj) else None


def _source_labels(subject: _Subject, obj) -> list[str]:
    """``arg:NAME`` labels: the function's parameter names, or the built model's/callable's."""
    if not subject.factory:
        return list(subject.source_names)
    _, names, _ = subject._flatten(obj, subject.args, subject.kwargs)
    return names


def _var_name(v) -> str:
    return f"var:{getattr(v, 'path', None) or v.name}"


def _run_policies(subject: _Subject, policies: tuple, loss_scale: Any, name: str,
                  progress: Callable[[str], None] | None = None):
    """float32 first, then each policy; returns (results, output_names, gradient_names)."""
    from tflab._target import error_summary, user_frame

    results: dict[str, PolicyResult] = {}
    ref = None
    for policy in policies:
        compute, _ = POLICIES[policy]
        if progress:
            progress(f"{policy}: build, forward and backward in {compute}")
        compute_ops: list = []
        try:
            obj = subject.build(policy)
            run = _forward(subject.call(obj, compute), subject.sources, compute,
                           subject.variables_of(obj), compute_ops)
        except UsageError:
            raise
        except Exception as e:
            where = user_frame(e)
            hint = ("; only the arguments are cast: if it mixes them with float32 tf.Variables or "
                    "tensors, cast them (tf.cast(v, x.dtype)) or use Keras layers"
                    if not subject.factory and policy != REFERENCE else "")
            raise UsageError(f"{name} failed under {policy}: {error_summary(e)[:300]}"
                             + (f" (at {where})" if where else "") + hint) from e
        if not subject.factory and compute != "float32" and compute_ops \
                and not any(dt == compute for _, dt in compute_ops):
            # Only the arguments were cast, and every MatMul/Conv still ran in another dtype:
            # typically a Keras model built earlier, whose layers keep the float32 policy
            # they were built with and cast the inputs back (Keras autocasting).
            kinds = ", ".join(sorted({f"{op} in {dt}" for op, dt in compute_ops}))
            raise UsageError(
                f"{name} under {policy}: none of its {len(compute_ops)} MatMul/Conv op(s) ran in {compute} "
                f"({kinds}): only the arguments are cast, and a Keras layer built earlier keeps its "
                "dtype policy and casts them back, so this would measure float32 arithmetic; pass a "
                "zero-argument factory that builds the model (it is built once per policy), or cast "
                "the weights inside the function")
        scaled = compute == "float16" and loss_scale is not None
        if ref is None:
            grads, t = run.grad_fn(1.0)
            out_names = tuple(run.output_names)
            grad_names = tuple(_source_labels(subject, obj) + [_var_name(v) for v in run.variables])
            ref = (run.outputs, grads, [np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                                        for v in run.variables])
            results[policy] = _measure(policy, ref[0], ref[1], run.outputs, grads, out_names,
                                       grad_names, None, (), run.forward_seconds + t)
            continue
        if len(run.variables) != len(ref[2]) or any(
                tuple(v.shape) != r.shape for v, r in zip(run.variables, ref[2])):
            raise UsageError(f"{name} has {len(run.variables)} trainable variable(s) under {policy} "
                             f"but {len(ref[2])} under float32; the factory must build the same model")
        if subject.factory and subject.variables_of(obj) is None:
            _check_same_weights(run.variables, ref[2], policy, name)
        unscaled = None
        grads, t = run.grad_fn(1.0)
        total = run.forward_seconds + t
        history: list[float] = []
        if scaled:
            unscaled = _measure(policy, ref[0], ref[1], run.outputs, grads, out_names, grad_names,
                                None, (), total)
            scale = INITIAL_LOSS_SCALE if loss_scale == "dynamic" else loss_scale
            while True:
                history.append(scale)
                grads, t = run.grad_fn(scale)
                total += t
                finite = all(g is None or np.isfinite(g).all() for g in grads)
                if loss_scale != "dynamic" or finite or scale <= MIN_LOSS_SCALE:
                    break
                scale = max(scale / 2, MIN_LOSS_SCALE)
        results[policy] = _measure(policy, ref[0], ref[1], run.outputs, grads, out_names, grad_names,
                                   history[-1] if history else None, history, total, unscaled)
    return results, out_names, grad_names


def _check_same_weights(variables: list, ref_values: list, policy: str, name: str) -> None:
    """A factory returning a callable (not a model) must draw the same initial weights."""
    for v, r in zip(variables, ref_values):
        got = np.asarray(v.numpy()).astype(np.float32)
        if not np.array_equal(got, r.astype(got.dtype).astype(np.float32)) and \
                not np.array_equal(got, r.astype(np.dtype(v.dtype.as_numpy_dtype)).astype(np.float32)):
            raise UsageError(f"{name} built different initial weights under {policy} than under float32 "
                             f"({_var_name(v)}); seed its initializers, or return the Keras model itself "
                             "so its weights can be copied")


@user_entry("while running under each dtype policy")
def compare_precisions(fn: Callable, *args: Any,
                       policies: Any = DEFAULT_POLICIES, loss_scale: Any = None,
                       seed: int = 0, **kwargs: Any) -> PrecisionComparison:
    """Runs ``fn`` forward and backward under each dtype policy and measures it against float32.

    A plain function (or `tf.function`: its Python function runs eagerly, so
    its dtypes can change) gets its float tensor arguments cast to the
    policy's compute dtype; its outputs are cast back to float32. A Keras
    model must be given as a zero-argument **factory**: Keras fixes a layer's
    dtype policy when the layer is built, so each policy is set globally
    (``keras.mixed_precision.set_dtype_policy``; tf_keras'
    ``set_global_policy``) before the factory runs, and the previous policy is
    restored afterwards, also on error. A factory returning a Keras model gets
    the float32 build's weights copied in; one returning another callable (a
    loss closure over layers it built) must draw the same initial weights:
    Keras is seeded with ``seed`` before each build, and the weights are checked.

    Gradients are those of ``sum(reduce_sum(o) for o in float outputs)``
    (float32) with respect to the float tensor arguments and the trainable
    variables, from a `tf.GradientTape`. With a loss scale S the backward pass
    starts from S (``output_gradients``: the same arithmetic as multiplying
    the float32 loss by S) and the gradients are divided by S in float32.

    Args:
        fn: a function of tensors, a `tf.function`, or a zero-argument factory
            returning a Keras 3 / tf_keras model (or a callable using layers it
            built). A built Keras model is refused: it is too late to set its policy.
        *args, **kwargs: the arguments (model inputs for a factory). A fully
            defined `tf.TensorSpec` becomes a seeded standard-normal tensor.
        policies: Keras policy names, a sequence or a comma-separated string;
            float32 always runs first as the reference.
        loss_scale: None, a positive number, or ``"dynamic"`` (Keras'
            LossScaleOptimizer: start at 2^15, halve while a gradient is inf or
            NaN; stop at 1 as tf_keras does). Applied to the policies that
            compute in float16, as Keras' ``Model.compile`` wraps only
            ``mixed_float16``'s optimizer; their `PolicyResult.unscaled` holds
            the same forward pass without scaling.
        seed: seeds the random tensors made from TensorSpecs and Keras' initializers.

    Returns:
        A `PrecisionComparison`; ``.policies[name]`` is a `PolicyResult` with
        outputs, gradients, output_error, gradient_error (relative, dimensionless),
        underflow, overflow (element counts), loss_scale and seconds.

    Raises:
        UsageError: an unknown policy, a bad loss_scale, a built Keras model
            instead of a factory, a plain function none of whose MatMul/Conv ops
            ran in the policy's compute dtype (it calls a Keras model built
            earlier, which casts the arguments back to float32: seen through TF's
            op callbacks), or ``fn`` failing under a policy (the message
            names the policy and the user's line).

    Example:
        >>> x, w = tf.ones([8, 64]), tf.fill([64, 4], 2.0 ** -8)
        >>> cmp = tflab.compare_precisions(lambda x, w: tf.reduce_sum(x @ w) * 2.0 ** -20, x, w)
        >>> cmp.policies["mixed_float16"].underflow["arg:x"], cmp.policies["mixed_bfloat16"].underflow
        (512, {})
    """
    import tensorflow as tf

    from tflab.modes import _check_target, _function_name, _prepare, signature_args

    policies = parse_policies(policies)
    loss_scale = _parse_loss_scale(loss_scale)
    if _is_keras_layer(fn):
        raise UsageError(f"{type(fn).__name__} is an already-built Keras model: its dtype policy is fixed; "
                         "pass a zero-argument factory instead, e.g. lambda: build_model()")
    if not callable(fn):
        raise UsageError(f"compare_precisions needs a callable, got {type(fn).__name__}")
    name = _function_name(fn)
    _check_target(fn, name)
    factory = bool(args or kwargs) and _takes_no_parameters(fn)
    if not factory:
        args, kwargs = signature_args(fn, args, kwargs)
    if any(isinstance(v, tf.TensorSpec) and not v.shape.is_fully_defined()
           for v in tf.nest.flatten((args, kwargs))):
        raise UsageError(f"{name}: pass tensors or TensorSpecs with every dim given, e.g. float32[4,8]")
    args, kwargs = _prepare(args, kwargs, seed)
    subject = _Subject(fn, args, kwargs, factory, seed)
    results, out_names, grad_names = _run_policies(subject, policies, loss_scale, name)
    return PrecisionComparison(function=name, kind="keras model factory" if factory else "function",
                               policies=results, loss_scale=loss_scale, output_names=out_names,
                               gradient_names=grad_names,
                               device=next((getattr(s, "device", "") for s in subject.sources), ""))


# --------------------------------------------------------------------------- the demonstration


@dataclasses.dataclass(frozen=True, repr=False)
class LossScalingRow:
    """One row of `demonstrate_loss_scaling`.

    Attributes:
        label: ``"float32"``, ``"mixed_bfloat16"``, ``"mixed_float16"``,
            ``"mixed_float16 + dynamic loss scale"``.
        underflow_fraction: gradient elements non-zero in float32 and 0 here, over
            the non-zero ones (0..1).
        range_underflow_fraction: the part of those below the compute dtype's smallest
            normal in float32 magnitude (range, which a loss scale fixes), same denominator.
        gradient_error: maximum relative gradient error against float32.
        gradient_error_median: median relative gradient error against float32.
        overflow: gradient/output elements inf/NaN here and finite in float32.
        loss_scale: the final loss scale (None: no scaling).
        loss_scale_history: the scales tried.
        seconds: forward + backward pass(es), seconds.
    """

    label: str
    underflow_fraction: float
    range_underflow_fraction: float
    gradient_error: float
    gradient_error_median: float
    overflow: int
    loss_scale: float | None
    loss_scale_history: tuple
    seconds: float

    def __repr__(self) -> str:
        return (f"<{self.label}: underflow {self.underflow_fraction:.3%} (range "
                f"{self.range_underflow_fraction:.3%}), grad err max {_fmt_err(self.gradient_error)} "
                f"median {_fmt_err(self.gradient_error_median)}, loss scale {_fmt_scale(self.loss_scale)}>")

    def to_dict(self) -> dict[str, Any]:
        from tflab._jsonutil import to_jsonable

        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, repr=False)
class LossScalingDemo:
    """Measured: why mixed_float16 needs loss scaling and mixed_bfloat16 does not.

    Attributes:
        model: what ran (``MobileNetV3Small(weights=None, input_shape=…, classes=10)``).
        step: the training step's forward and loss.
        rows: `LossScalingRow` per configuration, float32 first.
        configuration: `tflab.runtime_config()`'s dict (TF build, CPU ISA, oneDNN on/off
            and why, allocator, threads) plus ``keras_version`` and ``input`` (batch×H×W×C).
        comparison: the underlying `PrecisionComparison` (arrays included).
    """

    model: str
    step: str
    rows: tuple
    configuration: dict
    comparison: PrecisionComparison

    def row(self, label: str) -> LossScalingRow:
        return next(r for r in self.rows if r.label == label)

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        return "LossScalingDemo(" + "; ".join(
            f"{r.label}: underflow {r.underflow_fraction:.2%}, scale {_fmt_scale(r.loss_scale)}"
            for r in self.rows) + ")"

    def to_text(self) -> str:
        rows = [("configuration", "underflow", "of it: range", "grad err max", "grad err median",
                 "overflow", "loss scale")]
        for r in self.rows:
            scale = _fmt_scale(r.loss_scale)
            if len(r.loss_scale_history) > 1:
                scale += f" (from {_pow2(r.loss_scale_history[0])})"
            rows.append((r.label, f"{r.underflow_fraction:.3%}", f"{r.range_underflow_fraction:.3%}",
                         _fmt_err(r.gradient_error), _fmt_err(r.gradient_error_median),
                         str(r.overflow), scale))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"{self.model}, {self.step}"]
        lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                  for r in rows]
        lines.append("underflow: gradient elements non-zero in float32 and 0 (share of the non-zero ones); "
                     "range: of those, |float32 value| below the compute dtype's smallest normal")
        c = self.configuration
        lines.append(f"ran on: {c.get('one_line', '?')} · Keras {c.get('keras_version', '?')} · "
                     f"input {c.get('input', '?')}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        from tflab._jsonutil import to_jsonable

        return {"model": self.model, "step": self.step, "rows": [r.to_dict() for r in self.rows],
                "configuration": to_jsonable(self.configuration)}


def runtime_configuration(**extra: Any) -> dict[str, Any]:
    """`tflab.runtime_config()` as a dict (TF build, CPU ISA, oneDNN on/off and why,
    allocator, threads), plus Keras' version and ``extra`` (e.g. the input shape)."""
    import keras

    from tflab.runtime import runtime_config

    return {**runtime_config().to_dict(), "keras_version": keras.__version__, **extra}


def demonstrate_loss_scaling(input_shape: tuple = (64, 64, 3), batch: int = 4, seed: int = 0,
                             progress: Callable[[str], None] | None = None) -> LossScalingDemo:
    """Loss scaling measured on the tour's MobileNetV3Small training step.

    Builds ``keras.applications.MobileNetV3Small(weights=None, input_shape,
    classes=10)`` under float32, mixed_bfloat16 and mixed_float16 (same
    weights), runs the tour's training-step forward pass (``training=True``,
    sparse categorical cross-entropy of the float32-cast softmax output, as
    `tflab._tour.model.make_train_step` does) on a seeded batch of images in
    [0, 255], and takes the loss gradients wrt all trainable variables: in
    float16 once without scaling and once with Keras' dynamic loss scale.

    Args:
        input_shape: image shape (H, W, 3), H and W >= 32. The default 64×64×3 is
            smaller than the tour's 96×96×3 to fit the tour section's 20 s on 2 cores;
            the network and its layers are the same.
        batch: images per batch (>= 2: BatchNormalization in training mode).
        seed: weights and data seed.
        progress: called with a line per policy (e.g. the tour's progress line).

    Returns:
        A `LossScalingDemo`: rows for float32, mixed_bfloat16, mixed_float16 and
        mixed_float16 + dynamic loss scale, each with the underflow fraction,
        the gradient error against float32 and the final loss scale, plus the
        configuration it ran on.

    Raises:
        UsageError: a bad input_shape or batch.
    """
    import keras
    import tensorflow as tf

    from tflab._tour.model import NUM_CLASSES, example_batch

    if len(input_shape) != 3 or input_shape[2] != 3 or min(input_shape[:2]) < 32:
        raise UsageError(f"input_shape must be (H, W, 3) with H, W >= 32, got {input_shape}")
    if batch < 2:
        raise UsageError(f"batch must be >= 2 (BatchNormalization in training mode), got {batch}")
    images = example_batch(tf.TensorSpec([None, *input_shape], tf.float32), batch, seed=seed)
    labels = tf.constant(np.arange(batch) % NUM_CLASSES)
    models = []

    def factory():
        model = keras.applications.MobileNetV3Small(weights=None, input_shape=tuple(input_shape),
                                                    classes=NUM_CLASSES)
        if models:  # the float32 build's weights (and BN statistics): one starting point
            model.set_weights(models[0].get_weights())
        models.append(model)
        xent = keras.losses.SparseCategoricalCrossentropy()

        def train_step_loss(images, labels):
            # Keras computes losses in float32: cast the (float16/bfloat16) softmax first.
            return xent(labels, tf.cast(model(images, training=True), tf.float32))

        return train_step_loss

    subject = _Subject(factory, (images, labels), {}, True, seed)
    results, _, _ = _run_policies(subject, DEFAULT_POLICIES, "dynamic", "MobileNetV3Small train step",
                                     progress)
    f16 = results["mixed_float16"]

    def row(label: str, r: PolicyResult) -> LossScalingRow:
        n = r.nonzero_gradient_elements or 1
        return LossScalingRow(label=label, underflow_fraction=r.underflow_count / n,
                              range_underflow_fraction=sum(r.underflow_below_normal.values()) / n,
                              gradient_error=r.gradient_error, gradient_error_median=r.gradient_error_median,
                              overflow=r.overflow_count, loss_scale=r.loss_scale,
                              loss_scale_history=r.loss_scale_history, seconds=r.seconds)

    rows = (row("float32", results["float32"]), row("mixed_bfloat16", results["mixed_bfloat16"]),
            row("mixed_float16", f16.unscaled), row("mixed_float16 + dynamic loss scale", f16))
    comparison = PrecisionComparison(function="MobileNetV3Small train step", kind="keras model factory",
                                     policies=results, loss_scale="dynamic",
                                     output_names=("loss",), gradient_names=tuple(f16.gradients))
    shape = "×".join(map(str, input_shape))
    return LossScalingDemo(
        model=f"MobileNetV3Small(weights=None, input_shape={tuple(input_shape)}, classes={NUM_CLASSES})",
        step=f"training=True, sparse categorical cross-entropy, batch {batch} of {shape} images in [0, 255]",
        rows=rows, configuration=runtime_configuration(input=f"{batch}×{shape}"),
        comparison=comparison)
