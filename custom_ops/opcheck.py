"""`opcheck`: validates a custom op end to end, TF's counterpart of ``torch.library.opcheck``.

TensorFlow has no such tool; this one checks what can go wrong between a
custom op's schema, its kernels and the TF machinery around them:

* **shape_fn**: the shape function (REGISTER_OP ... SetShapeFn) against the
  real output shape: with every dim unknown inside a `tf.function` (the
  FuncGraph's static output shape must keep the rank and claim nothing
  false), with the exact input shape, and with unknown rank.
* **cpu_vs_reference**: the CPU kernel against the op's reference
  (``op.reference``, `tf.nn.softmax` for `warp_softmax`), within the bound
  for the dtype (`TOLERANCES`), NaN where the reference has NaN. An op that
  computes the IEEE softmax (``ieee_specials``) is bounded against the exact
  answer instead (`EXACT_TOLERANCES`), and against the reference by that bound
  plus the reference's own measured error (`compare`), so no accuracy of
  tf.nn.softmax's exp (which differs by CPU path and ISA) is assumed. For an op
  with ``op.ieee_specials = True`` (`warp_softmax`), slices holding NaN,
  +inf or only -inf are compared with the IEEE formula instead (all NaN,
  `ieee_softmax`), since tf.nn.softmax's oneDNN CPU kernel gives other values
  there; the detail line says what the reference op gave.
* **gpu_vs_cpu**: the GPU kernel against the CPU kernel (skipped without GPU).
* **gradient**: `tf.test.compute_gradient` (theoretical vs finite
  differences, float32) and the registered gradient against the reference's
  gradient.
* **tf_function**: the op inside a `tf.function` gives the eager result bit
  for bit (same kernel, same inputs).
* **saved_model**: a SavedModel calling the op saves, reloads (the library
  being loaded, as a user must do) and gives the same bits.
* **xla**: under ``tf.function(jit_compile=True)``. XLA compiles only ops it
  has a lowering for, and a custom op has none, so TF 2.21 raises
  "No registered 'WarpSoftmax' OpKernel for XLA_CPU_JIT devices". That is
  reported as ``unsupported`` (not a failure) with the fallback to use under
  XLA: the reference op, which is run under jit_compile to show it works.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from typing import Any, Callable

import numpy as np
import tensorflow as tf

# Bounds vs the reference per storage dtype: |ours - ref| <= atol + rtol*|ref|,
# as (rtol, atol). Measured in tests/custom_ops/test_warp_softmax.py; README.md,
# "Error bounds", gives the numbers and the reasons:
# * float32: ours and tf.nn.softmax subtract the same max (same rounding),
#   then differ by each one's exp (1-2 ULP) and the order of the row sum
#   (grows with row length): measured < 1e-6 relative; the bound is 2^-18.
#   atol covers outputs near FLT_MIN that one side flushes to zero: ours (and
#   Eigen, TF runs kernels with flush-to-zero) flush below FLT_MIN = 2^-126,
#   TF's oneDNN softmax below 2^-125 (measured on TF 2.21: a softmax output of
#   2^-126 comes out 0, one of 2^-125 is kept; its exp seemingly builds
#   2^(n-1) then doubles). atol = 2^-124 is twice the larger threshold.
# * float16/bfloat16: the reference is tf.nn.softmax on the input cast to
#   float32 (we compute in float32 and round once); the bound is one unit
#   roundoff 2^-p of the storage type, doubled for the float32 error, plus
#   the subnormal spacing as atol. tf.nn.softmax run in 16 bits keeps
#   16-bit intermediates and is much further from the true softmax; opcheck
#   reports that distance too.
TOLERANCES = {
    tf.float32: (2.0 ** -18, 2.0 ** -124),
    tf.float16: (2.0 ** -10, 2.0 ** -24),
    tf.bfloat16: (2.0 ** -7, 2.0 ** -124),
}

# Bounds of OURS against an exact answer (for warp_softmax: `ieee_softmax` in float64),
# as (rtol, atol), used by `compare(..., exact=...)`. They follow from our kernel's
# arithmetic alone, never from the other side's exp (which differs between Eigen and
# oneDNN, and between oneDNN's AVX2 and AVX-512 code: on an AVX2-only EPYC with oneDNN
# forced on, tf.nn.softmax is 4.3e-6 from ours at 50257 columns, past the 2^-18 above):
# * float32: 40u = 40 * 2^-24 = 2.4e-6, the vector paths' derived bound (exp 4u, the
#   blocked row sum 32u + u, the division 2u; tests/custom_ops/test_warp_cpu_paths.py derives it
#   and the scalar path's 8u); atol as above (outputs near FLT_MIN flushed to zero).
# * float16/bfloat16: one unit roundoff of the storage type for rounding the float32
#   result once, plus the float32 bound (< one more unit): the same 2 units as above.
EXACT_TOLERANCES = {
    tf.float32: (40 * 2.0 ** -24, 2.0 ** -124),
    tf.float16: (2.0 ** -10, 2.0 ** -24),
    tf.bfloat16: (2.0 ** -7, 2.0 ** -124),
}
GRAD_FD_BOUND = 1e-3      # finite differences in float32 (case S4)
GRAD_REF_BOUND = 1e-6     # analytic gradient vs the reference's (case S4)
GRAD_MAX_ELEMENTS = 2048  # compute_gradient costs 2 op calls per element


class OpcheckError(AssertionError):
    """At least one check failed; ``.report`` holds every check's result."""

    def __init__(self, report: "OpcheckReport"):
        failed = [c for c in report.checks if c.status == "fail"]
        super().__init__(f"opcheck {report.op} {report.inputs}: " + "; ".join(
            f"{c.name}: {c.detail}" for c in failed))
        self.report = report


@dataclasses.dataclass(frozen=True)
class Check:
    """One opcheck result.

    Attributes:
        name: shape_fn, cpu_vs_reference, gpu_vs_cpu, gradient, tf_function,
            saved_model or xla.
        status: "pass", "fail", "skip" (not applicable here, e.g. no GPU) or
            "unsupported" (a known limitation, reported, not a failure).
        detail: one line: what was compared and the measured numbers.
        measured: the main measured error (absolute, in output units), if any.
        bound: the bound it was held to, if any.
    """

    name: str
    status: str
    detail: str
    measured: float | None = None
    bound: float | None = None


@dataclasses.dataclass(frozen=True)
class OpcheckReport:
    """Every check of one `opcheck` call.

    Attributes:
        op: the op's type name, e.g. "WarpSoftmax".
        inputs: the inputs as "dtype[shape]" strings.
        kwargs: the keyword arguments passed to the op (repr strings).
        checks: the `Check` results, in the order run.
        xla_fallback: what to call under jit_compile=True, e.g. "tf.nn.softmax".
        cpu_path: the CPU kernel's code path in this process (``op.cpu_path()``, e.g.
            "avx512", "avx2+fma" or "scalar" for `warp_softmax`), or None.
        config: `tflab.runtime_config()` as a dict: the CPU ISA and TF CPU path
            (oneDNN or Eigen) the reference ran on.
    """

    op: str
    inputs: tuple[str, ...]
    kwargs: tuple[str, ...]
    checks: tuple[Check, ...]
    xla_fallback: str
    cpu_path: str | None = None
    config: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def check(self, name: str) -> Check:
        """The `Check` called ``name``; KeyError if it was not run."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def __repr__(self) -> str:
        counts = {s: sum(c.status == s for c in self.checks)
                  for s in ("pass", "fail", "skip", "unsupported")}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        path = f"; CPU kernel path {self.cpu_path}" if self.cpu_path else ""
        return f"OpcheckReport({self.op} {', '.join(self.inputs)}: {summary}{path})\n" + "\n".join(
            f"  {c.status:<11} {c.name:<17} {c.detail}" for c in self.checks) + (
            f"\n  measured on: {self.config['one_line']}" if self.config.get("one_line") else "")

    def to_text(self) -> str:
        return repr(self)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _runtime_config_dict() -> dict:
    from tflab.runtime import runtime_config

    return runtime_config().to_dict()


def _describe(t: tf.Tensor) -> str:
    return f"{t.dtype.name}{t.shape.as_list()}"


def compare(ours: np.ndarray, ref: np.ndarray, dtype: tf.DType,
            exact: np.ndarray | None = None) -> tuple[bool, float, float, str]:
    """Compares our output with a reference op's output, in float32.

    Without ``exact``, the bound is `TOLERANCES[dtype]`: ``|ours - ref| <= atol +
    rtol * |ref|``, which assumes the reference is itself that accurate.

    With ``exact`` (an exact answer for the same input, e.g. ``ieee_softmax(x,
    dtype=np.float64)``), no accuracy of the reference is assumed. Per element:

    * ours against the exact answer: ``|ours - exact| <= atol + rtol * |exact|``
      with ``(rtol, atol) = EXACT_TOLERANCES[dtype]``, a bound that follows from
      our kernel's arithmetic (this is the check that fails on a wrong kernel);
    * ours against the reference: ``|ours - ref| <= atol + rtol * |exact| +
      |ref - exact|``, our own bound plus the reference's measured distance from
      the exact answer. tf.nn.softmax runs a different exp under Eigen, oneDNN's
      AVX2 code and oneDNN's AVX-512 code; its error is measured, not assumed.

    Args:
        ours: the op's output, any float dtype, shape S.
        ref: the reference op's output, shape S.
        dtype: the op's storage dtype (selects the bound).
        exact: optional exact answer of shape S (float64 preferred); NaN where
            the answer is NaN.

    Returns:
        (ok, max abs error vs ref, max relative error vs ref where |ref| is a
        normal number of the dtype, detail line). NaNs must sit at the same
        places (in ref, and in exact when given); they are excluded from the
        errors.
    """
    a = np.asarray(ours, np.float32)
    b = np.asarray(ref, np.float32)
    rtol, atol = TOLERANCES[dtype] if exact is None else EXACT_TOLERANCES[dtype]
    if a.shape != b.shape:
        return False, float("inf"), float("inf"), f"shape {a.shape} != reference {b.shape}"
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return False, float("inf"), float("inf"), (
            f"NaN at {int((nan_a & ~nan_b).sum())} places where the reference has none, "
            f"missing at {int((nan_b & ~nan_a).sum())}")
    ok_mask = ~nan_b
    diff = np.abs(a - b)[ok_mask]
    refv = np.abs(b)[ok_mask]
    max_abs = float(diff.max()) if diff.size else 0.0
    # Relative error only where the reference is a normal number of the dtype.
    big = refv >= (np.finfo(np.float16).tiny if dtype == tf.float16 else np.finfo(np.float32).tiny)
    max_rel = float((diff[big] / refv[big]).max()) if big.any() else 0.0
    if exact is None:
        ok = bool(np.all(diff <= atol + rtol * refv))
        return ok, max_abs, max_rel, (f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g} "
                                      f"(bound {rtol:.3g} rel + {atol:.3g} abs; "
                                      f"{int(nan_b.sum())} NaN as in the reference)")
    e = np.asarray(exact, np.float64)
    if e.shape != a.shape:
        return False, float("inf"), float("inf"), f"shape {a.shape} != exact answer {e.shape}"
    nan_e = np.isnan(e)
    if not np.array_equal(nan_a, nan_e):
        return False, float("inf"), float("inf"), (
            f"NaN at {int((nan_a & ~nan_e).sum())} places where the exact answer has none, "
            f"missing at {int((nan_e & ~nan_a).sum())}")
    ev = np.abs(e[ok_mask])
    own = np.abs(a[ok_mask].astype(np.float64) - e[ok_mask])       # ours vs exact
    ref_err = np.abs(b[ok_mask].astype(np.float64) - e[ok_mask])   # the reference's own error
    own_bound = atol + rtol * ev
    ok = bool(np.all(own <= own_bound) and np.all(diff <= own_bound + ref_err))
    normal = ev >= np.finfo(np.float32).tiny
    own_rel = float((own[normal] / ev[normal]).max()) if normal.any() else 0.0
    ref_rel = float((ref_err[normal] / ev[normal]).max()) if normal.any() else 0.0
    return ok, max_abs, max_rel, (
        f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g} vs the reference, which is itself "
        f"{ref_rel:.3g} (rel) from the exact answer; ours is {own_rel:.3g} from it "
        f"(bound {rtol:.3g} rel + {atol:.3g} abs; {int(nan_b.sum())} NaN as in the reference)")


def ieee_softmax(x: np.ndarray, axis: int = -1, dtype=np.float32) -> np.ndarray:
    """The IEEE formula exp(x - max) / sum(exp(x - max)), in float64 after a float32 ``x - max``.

    This is the special-value reference (case S2 of shared/cases/softmax.md): a
    slice holding NaN or +inf (inf - inf = NaN), or only -inf (-inf - -inf =
    NaN), is all NaN. TF's Eigen CPU kernel (tensorflow/core/kernels/
    softmax_op_functor.h), its GPU kernel and XLA compute this formula, so they
    give all NaN; TF's oneDNN CPU kernel (on by default on CPUs with AVX-512
    VNNI/BF16 or AMX) gives ``[0, NaN, 0, 0]`` for ``[1, +inf, 2, 0]`` instead,
    which is why special rows are never compared against `tf.nn.softmax`.
    ``x - max`` is rounded to float32 as every float32 kernel rounds it; exp and
    the sum run in float64, so the result is the float32 kernels' answer
    without their exp or summation error.

    Args:
        x: float array (any float dtype; 16-bit values are widened exactly).
        axis: the axis to normalize.
        dtype: the result's dtype: float32 (default), or float64 for the unrounded
            answer (`compare`'s ``exact``).

    Returns:
        array of x's shape and ``dtype``.
    """
    x32 = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        # np.max propagates NaN, as the formula does; initial=-inf lets a zero-length axis
        # through (an empty result, as the op gives).
        d = (x32 - np.max(x32, axis=axis, keepdims=True, initial=-np.inf)).astype(np.float64)
        e = np.exp(d)
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(dtype)


def special_slices(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Boolean mask of x's shape: True on every element of a slice along ``axis`` that holds
    NaN or +inf, or only -inf (the slices the IEEE formula makes all NaN)."""
    x32 = np.asarray(x, np.float32)
    if x32.size == 0:
        return np.zeros(x32.shape, bool)
    bad = np.any(np.isnan(x32) | (x32 == np.inf), axis=axis, keepdims=True)
    bad |= np.all(x32 == -np.inf, axis=axis, keepdims=True)
    return np.broadcast_to(bad, x32.shape)


def reference_with_ieee_specials(ref: np.ndarray, x: np.ndarray, axis: int = -1) -> np.ndarray:
    """``ref`` (e.g. `tf.nn.softmax`'s output) with every special slice replaced by the IEEE
    formula's all-NaN slice (`ieee_softmax`): the reference is then the same whichever CPU
    kernel (oneDNN or Eigen) tf.nn.softmax ran."""
    mask = special_slices(x, axis)
    out = np.array(ref, np.float32, copy=True)
    out[mask] = np.nan
    return out


def _first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"


def opcheck(op: Callable[..., tf.Tensor], *args: Any, **kwargs: Any) -> OpcheckReport:
    """Runs every check on ``op(*args, **kwargs)`` and returns the report.

    Args:
        op: a custom op wrapper with a ``reference`` attribute (the TF op it
            must match, e.g. `warp_softmax.reference` is `tf.nn.softmax`), an
            ``op_type`` attribute (its REGISTER_OP name) and optionally
            ``xla_fallback`` (the name to report for jit_compile=True),
            ``ieee_specials`` (compare NaN/+inf/all -inf slices with
            `ieee_softmax`) and ``cpu_path`` (a callable naming the CPU code path).
        *args: the op's tensor inputs (the first one is differentiated).
        **kwargs: non-tensor arguments passed to both op and reference (e.g. axis=0).

    Returns:
        An `OpcheckReport`; ``report.ok`` is True (else it raises).

    Raises:
        OpcheckError: a check failed; ``err.report`` has all results.
        tflab.errors.UsageError: ``op`` has no ``reference`` or no tensor input was given.

    Example:
        >>> from custom_ops import opcheck, warp_softmax
        >>> opcheck(warp_softmax, tf.random.normal([4, 37])).ok  # doctest: +SKIP
        True
    """
    from tflab.errors import UsageError

    reference = getattr(op, "reference", None)
    if reference is None:
        raise UsageError(f"opcheck: {getattr(op, '__name__', op)!r} has no `reference` attribute; "
                         "set op.reference to the TF function it must match")
    if not args:
        raise UsageError("opcheck: give at least one tensor input, e.g. opcheck(op, tf.zeros([4, 8]))")
    op_type = getattr(op, "op_type", getattr(op, "__name__", "op"))
    fallback = getattr(op, "xla_fallback", getattr(reference, "__name__", repr(reference)))
    inputs = [tf.convert_to_tensor(a) for a in args]
    x = inputs[0]
    dtype = x.dtype
    call = lambda *t: op(*t, **kwargs)  # noqa: E731
    ref_call = lambda *t: reference(*t, **kwargs)  # noqa: E731
    checks: list[Check] = []

    wide = dtype in (tf.float16, tf.bfloat16)
    with tf.device("/CPU:0"):
        ours_cpu = call(*inputs).numpy()
        ref_native = ref_call(*inputs).numpy()
        # 16-bit inputs: the reference computes in float32, as the op does.
        ref_cpu = ref_call(*[tf.cast(t, tf.float32) for t in inputs]).numpy() if wide else ref_native

    # shape_fn: static shapes the FuncGraph sees, against the real shape.
    real = list(ours_cpu.shape)
    try:
        static = {}
        for label, shape in (("unknown dims", [None] * x.shape.rank), ("exact", x.shape.as_list()),
                             ("unknown rank", None)):
            specs = [tf.TensorSpec(shape if i == 0 else t.shape, t.dtype) for i, t in enumerate(inputs)]
            cf = tf.function(call).get_concrete_function(*specs)
            static[label] = cf.structured_outputs.shape
        problems = []
        if static["unknown dims"].rank != len(real):
            problems.append(f"unknown dims: rank {static['unknown dims'].rank} != {len(real)}")
        for label, s in static.items():
            if not s.is_compatible_with(real):
                problems.append(f"{label}: static {s} incompatible with real {real}")
        if static["exact"].as_list() != real:
            problems.append(f"exact input shape: static {static['exact']} != real {real}")
        checks.append(Check("shape_fn", "fail" if problems else "pass", "; ".join(problems) or (
            f"real {real}; static with unknown dims {static['unknown dims']}, with exact "
            f"shape {static['exact']}, with unknown rank {static['unknown rank']}")))
    except Exception as e:  # a shape function that raises is itself a failure
        checks.append(Check("shape_fn", "fail", _first_line(e)))

    # Special slices (NaN, +inf, all -inf) against the IEEE formula, never against whichever
    # tf.nn.softmax kernel this CPU runs (oneDNN gives [0, NaN, 0, 0] for [1, inf, 2, 0]).
    x_np = tf.cast(x, tf.float32).numpy()
    axis = kwargs.get("axis", -1)
    special = (special_slices(x_np, axis) if getattr(op, "ieee_specials", False)
               else np.zeros(ours_cpu.shape, bool))
    special_note = ""
    if special.any():
        tf_nan = int(np.isnan(np.asarray(ref_cpu, np.float32))[special].sum())
        ref_cpu = reference_with_ieee_specials(ref_cpu, x_np, axis)
        special_note = (f"; {int(special.sum())} elements in slices with NaN/+inf/all -inf compared "
                        f"with the IEEE formula (all NaN), where the reference op gave NaN at {tf_nan}")
    # The exact answer of an op that computes the IEEE softmax formula (float64 after the
    # float32 x - max): ours is bounded against it, the reference's own error is measured.
    exact = ieee_softmax(x_np, axis, np.float64) if getattr(op, "ieee_specials", False) else None
    ok, max_abs, _, detail = compare(ours_cpu, ref_cpu, dtype, exact=exact)
    detail += special_note
    if wide:
        native_err = float(np.nanmax(np.abs(ref_native.astype(np.float32) - ref_cpu), initial=0.0))
        detail = (f"vs reference in float32: {detail}; the reference run in {dtype.name} is "
                  f"{native_err:.3g} (max abs) from its float32 result")
    checks.append(Check("cpu_vs_reference", "pass" if ok else "fail", detail, max_abs,
                        (TOLERANCES if exact is None else EXACT_TOLERANCES)[dtype][0]))

    if tf.config.list_physical_devices("GPU"):
        with tf.device("/GPU:0"):
            ours_gpu = call(*[tf.identity(t) for t in inputs]).numpy()
        ok, max_abs, _, detail = compare(ours_gpu, ours_cpu, dtype)
        checks.append(Check("gpu_vs_cpu", "pass" if ok else "fail", "GPU vs CPU kernel: " + detail,
                            max_abs, TOLERANCES[dtype][0]))
    else:
        checks.append(Check("gpu_vs_cpu", "skip", "no GPU visible to TensorFlow"))

    checks.append(_gradient_check(call, ref_call, x))

    with tf.device("/CPU:0"):
        graph_out = tf.function(call)(*inputs).numpy()
    same = np.array_equal(graph_out, ours_cpu, equal_nan=True)
    checks.append(Check("tf_function", "pass" if same else "fail",
                        "tf.function output equals eager bit for bit" if same else
                        f"tf.function differs from eager by {np.nanmax(np.abs(graph_out - ours_cpu)):.3g}"))

    checks.append(_saved_model_check(call, inputs, ours_cpu, op_type))
    checks.append(_xla_check(call, ref_call, inputs, ref_cpu, op_type, fallback, dtype))

    report = OpcheckReport(op=op_type, inputs=tuple(_describe(t) for t in inputs),
                           kwargs=tuple(f"{k}={v!r}" for k, v in kwargs.items()),
                           checks=tuple(checks), xla_fallback=fallback,
                           cpu_path=op.cpu_path() if callable(getattr(op, "cpu_path", None)) else None,
                           config=_runtime_config_dict())
    if not report.ok:
        raise OpcheckError(report)
    return report


def _gradient_check(call, ref_call, x: tf.Tensor) -> Check:
    x32 = tf.cast(x, tf.float32)
    note = ""
    if x32.shape.num_elements() > GRAD_MAX_ELEMENTS and x32.shape.rank >= 1:
        per_row = max(1, x32.shape.num_elements() // max(1, x32.shape[0]))
        k = max(1, GRAD_MAX_ELEMENTS // per_row)
        x32 = x32[:k]
        note = f" (on the first {k} of {x.shape[0]} along axis 0)"
    if x32.shape.num_elements() > 4 * GRAD_MAX_ELEMENTS:
        return Check("gradient", "skip", f"input slice {x32.shape} too large for finite differences")
    x32 = tf.where(tf.math.is_finite(x32), x32, tf.zeros_like(x32))  # FD needs finite inputs
    try:
        with tf.device("/CPU:0"):
            theo, num = tf.test.compute_gradient(call, [x32], delta=1e-3)
            w = tf.random.stateless_normal(x32.shape, seed=[1, 2])
            grads = []
            for fn in (call, ref_call):
                with tf.GradientTape() as tape:
                    tape.watch(x32)
                    loss = tf.reduce_sum(fn(x32) * w)
                grads.append(tape.gradient(loss, x32).numpy())
    except Exception as e:
        return Check("gradient", "fail", "gradient raised " + _first_line(e))
    fd_err = float(np.max(np.abs(theo[0] - num[0]))) if theo[0].size else 0.0
    ref_err = float(np.max(np.abs(grads[0] - grads[1]))) if grads[0].size else 0.0
    ok = fd_err <= GRAD_FD_BOUND and ref_err <= GRAD_REF_BOUND
    return Check("gradient", "pass" if ok else "fail",
                 f"compute_gradient max |theoretical - numerical| {fd_err:.3g} (bound {GRAD_FD_BOUND}); "
                 f"vs reference gradient {ref_err:.3g} (bound {GRAD_REF_BOUND}){note}",
                 fd_err, GRAD_FD_BOUND)


def _saved_model_check(call, inputs, expected: np.ndarray, op_type: str) -> Check:
    specs = [tf.TensorSpec([None] * t.shape.rank, t.dtype) for t in inputs]
    module = tf.Module()
    module.f = tf.function(call, input_signature=specs)
    try:
        with tempfile.TemporaryDirectory(prefix="opcheck-") as tmp:
            path = os.path.join(tmp, "sm")
            tf.saved_model.save(module, path)
            loaded = tf.saved_model.load(path)
            with tf.device("/CPU:0"):
                got = loaded.f(*inputs).numpy()
            graph_ops = {n.op for f in loaded.f.get_concrete_function(*specs).graph.as_graph_def()
                         .library.function for n in f.node_def}
            graph_ops |= {n.op for n in loaded.f.get_concrete_function(*specs).graph.as_graph_def().node}
    except Exception as e:
        return Check("saved_model", "fail", "save/load raised " + _first_line(e))
    same = np.array_equal(got, expected, equal_nan=True)
    has_op = op_type in graph_ops
    ok = same and has_op
    return Check("saved_model", "pass" if ok else "fail",
                 (f"reloaded SavedModel (graph holds {op_type}: {has_op}) "
                  + ("equals eager bit for bit" if same else "differs from eager")))


def _xla_check(call, ref_call, inputs, ref_out, op_type: str, fallback: str, dtype) -> Check:
    with tf.device("/CPU:0"):
        try:
            got = tf.function(call, jit_compile=True)(*inputs).numpy()
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError,
                tf.errors.UnimplementedError) as e:
            # TF's message is long; the phrase naming the missing kernel says it all.
            found = re.search(r"No registered '[^']+' OpKernel for \S+ devices", str(e))
            first = found.group(0) if found else _first_line(e)[:160]
            try:
                fb = tf.function(ref_call, jit_compile=True)(*inputs).numpy()
                _, max_abs, _, _ = compare(fb, ref_out, dtype)
                fb_note = (f"{fallback} under jit_compile=True runs (max abs err {max_abs:.3g} "
                           "vs the eager reference)")
            except Exception as e2:  # the fallback itself failing is worth saying
                fb_note = f"{fallback} under jit_compile=True also failed: {_first_line(e2)}"
            return Check("xla", "unsupported",
                         f"XLA has no kernel for custom op {op_type} ({first}); "
                         f"use {fallback} under jit_compile=True: {fb_note}")
    ok, max_abs, _, detail = compare(got, ref_out, dtype)
    return Check("xla", "pass" if ok else "fail", "jit_compile=True ran: " + detail, max_abs)
