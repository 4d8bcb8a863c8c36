"""Each op of a run judged on its own: its local error against a reference on its actual inputs, and range events.

For one op of the run under test (`tflab.nonfinite.OpValue`), `judge_op`

* evaluates the same op again in float64 on the inputs it received
  (`tflab.attribution.reeval.evaluate`), and for a sum or contraction also on
  their absolute values (``Σ|x||w|``);
* takes the **local error** ``|actual - reference|`` elementwise (0 where both
  are the same inf or both NaN; inf where one side is non-finite and the other
  is not) and the op's bound (`tflab.attribution.bounds`);
* marks the **range events** a bound in ULP cannot see: a finite reference that
  became ±inf (``overflow``); a reference above its own noise floor that
  became exactly 0 (``underflow``: below the dtype's smallest subnormal, or a
  normal value rounded away); a NaN whose reference on the same finite inputs
  is NaN too (``domain``: ``sqrt``/``log`` of a negative, ``0/0``);
* for a source (``Const``, a variable read): its value against the reference
  run's value of the same op (the literal as the reference dtype holds it): 0
  or inf in the run under test where the reference is not is a constant the
  dtype cannot hold.

`inherited` compares one array of the run under test with the reference run's
value of the same op: the error the op received plus its own.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflab.attribution.bounds import (CONTRACTIONS, REDUCTIONS, elementwise_bound, gamma, sum_bound,
                                      terms_per_output, unit_roundoff)

__all__ = ["judge_op", "JudgedOp", "inherited", "significant", "noise_mask", "SOURCES", "significance_threshold"]

ROW_OPS = frozenset({"Softmax", "LogSoftmax"})
SOURCES = frozenset({"Const", "ReadVariableOp", "Placeholder", "VarHandleOp", "HostConst"})


@dataclasses.dataclass
class JudgedOp:
    """What `judge_op` measured for one op (all float64 numbers).

    Attributes:
        index: the op's position in the run (creation order, a topological order).
        op: the `OpValue`.
        dtype: its first float output's dtype.
        local_error, bound: at the element with the largest local_error/bound (None: not evaluated).
        event: "overflow", "underflow", "domain", "constant-zero", "constant-inf" or "".
        event_count: elements of that event; event_of: elements looked at.
        reference_max: the largest |reference| among the event's elements.
        unchecked: why the op was not re-evaluated ("" when it was).
        reference: the float64 reference outputs (on the actual inputs), or None.
        abs_terms: ``Σ|terms|`` per output element for a sum or contraction, or None.
        k: terms per output element (1 for elementwise).
    """

    index: int
    op: object
    dtype: str
    local_error: float | None = None
    bound: float | None = None
    event: str = ""
    event_count: int = 0
    event_of: int = 0
    reference_max: float = 0.0
    unchecked: str = ""
    reference: list | None = None
    abs_terms: list | None = None
    k: int = 1

    @property
    def over_bound(self) -> bool:
        return (self.local_error is not None and self.bound is not None
                and self.local_error > self.bound) or self.event in ("overflow", "underflow", "constant-zero",
                                                                      "constant-inf")


def _float_name(a) -> str:
    return "bfloat16" if a.dtype.name == "bfloat16" else a.dtype.name


def _is_float(a) -> bool:
    return a is not None and (a.dtype.kind == "f" or a.dtype.name == "bfloat16")


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def significance_threshold(dtype: str) -> float:
    """The relative error from which a difference is more than a low dtype's rounding: max(2^-3, 64·u)."""
    return max(0.125, 64 * unit_roundoff(dtype))


def inherited(got, ref, meaningful=None) -> tuple[float | None, float | None, int]:
    """``(max |got - ref|, max relative error, non-finite mismatches)`` of one op across the two runs.

    The relative error is taken over the elements whose reference magnitude is at
    least 1/16 of the tensor's largest (elements far below the tensor's scale
    carry the scale's rounding, not their own); a NaN/inf where the reference is
    finite counts as a mismatch (and an infinite error). (None, None, 0) when the
    shapes differ.
    """
    if got is None or ref is None or np.shape(got) != np.shape(ref) or not (_is_float(got) and _is_float(ref)):
        return None, None, 0
    g, r = _f64(got), _f64(ref)
    fin = np.isfinite(r)
    if meaningful is not None and np.shape(meaningful) == np.shape(r):
        fin = fin & meaningful
    mism = int((fin & ~np.isfinite(g)).sum())
    both = fin & np.isfinite(g)
    if not both.any():
        return (float("inf") if mism else 0.0), (float("inf") if mism else 0.0), mism
    d = np.abs(g - r)[both]
    scale = float(np.abs(r[both]).max())
    keep = np.abs(r[both]) >= scale / 16 if scale > 0 else np.zeros_like(d, bool)
    rel = float((d[keep] / np.abs(r[both][keep])).max()) if keep.any() else (0.0 if scale == 0 else float("inf"))
    if scale == 0 and float(d.max()) > 0:
        rel = float("inf")  # the reference is 0 everywhere and the run is not
    return (float("inf") if mism else float(d.max())), (float("inf") if mism else rel), mism


def noise_mask(ref, higher) -> np.ndarray | None:
    """The reference run's elements above its own noise floor: ``|ref - higher| < |ref| / 2``.

    ``higher`` is the same op's value in a run in a higher precision (float64 for a
    float32 reference). The distance between the two is the reference's own
    rounding, propagated; where it is half the value or more, the reference
    element is noise (the gradient of ``sum(softmax(x))``: exactly 0, float32
    ~1e-9), and no difference there is an error of the run under test. None when
    the shapes differ.
    """
    if ref is None or higher is None or np.shape(ref) != np.shape(higher) or not (_is_float(ref) and _is_float(higher)):
        return None
    r, h = _f64(ref), _f64(higher)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(r) | (np.abs(r - h) < np.abs(r) / 2)


def significant(got, ref, dtype: str, meaningful=None) -> bool | None:
    """Whether the run under test differs from the reference run at this value by more than rounding."""
    _, rel, mism = inherited(got, ref, meaningful)
    if rel is None:
        return None
    return bool(mism) or rel >= significance_threshold(dtype)


def _local(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    o = _f64(out)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.abs(o - ref)
    same = (np.isnan(o) & np.isnan(ref)) | (np.isinf(o) & (o == ref))
    e = np.where(same, 0.0, e)
    return np.where(np.isnan(e), np.inf, e)


def _smallest_normal(dtype: str) -> float:
    """The dtype's smallest positive normal value (float16 2^-14, bfloat16 and float32 2^-126); 0 for others."""
    from tflab.precision.float_formats import float_info

    try:
        return float(float_info(dtype).smallest_normal)
    except Exception:  # noqa: BLE001 - not a float format tflab knows: no underflow event
        return 0.0


def judge_op(index: int, op, ref_run_op=None) -> JudgedOp:
    """Judges one op (see the module docstring); ``ref_run_op`` is the reference run's same op, or None."""
    from tflab.attribution.reeval import Unevaluable, evaluate

    outs = [o for o in op.outputs]
    floats = [o for o in outs if _is_float(o)]
    if not floats:
        return JudgedOp(index, op, "", unchecked="no float output")
    dtype = _float_name(floats[0])
    j = JudgedOp(index, op, dtype)
    if op.op_type in SOURCES or (not op.inputs and op.op_type not in ("Const",)):
        return _judge_source(j, op, ref_run_op)
    if len(outs) != op.num_outputs:
        j.unchecked = "an output whose value was not recorded"
        return j
    try:
        ref, _ = evaluate(op.op_type, op.attrs, op.inputs, op.num_outputs, stateful=op.stateful)
    except Unevaluable as e:
        j.unchecked = str(e)
        return j
    j.reference = ref
    if op.op_type in CONTRACTIONS or op.op_type in REDUCTIONS:
        try:
            j.abs_terms, _ = evaluate(op.op_type, op.attrs, op.inputs, op.num_outputs, transform=np.abs)
        except Unevaluable:
            j.abs_terms = None
    inputs_finite = all(not _is_float(a) or np.isfinite(_f64(a)).all() for a in op.inputs)
    worst = (-1.0, None, None)
    for i, (o, r) in enumerate(zip(outs, ref)):
        if not _is_float(o) or np.shape(o) != np.shape(r):
            continue
        r = np.asarray(r, np.float64)
        dt = _float_name(o)
        e = _local(o, r)
        if j.abs_terms is not None and i < len(j.abs_terms):
            j.k = terms_per_output(op.op_type, op.attrs, op.inputs, o)
            b = sum_bound(r, j.abs_terms[i], j.k, dt)
            noise = gamma(j.k + 1, unit_roundoff("float64")) * np.abs(np.asarray(j.abs_terms[i], np.float64))
        elif op.op_type in ROW_OPS and np.ndim(r):
            # exp, a sum over the last axis and a division (a log for LogSoftmax) inside one kernel
            j.k = int(np.shape(r)[-1])
            b = gamma(j.k + 3, unit_roundoff(dt)) * (np.abs(r) + (op.op_type == "LogSoftmax")) \
                + elementwise_bound(r, dt)
            noise = unit_roundoff("float64") * np.abs(r)
        else:
            b = elementwise_bound(r, dt)
            noise = unit_roundoff("float64") * np.abs(r)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(b > 0, e / b, np.where(e > 0, np.inf, 0.0))
        if ratio.size:
            k = int(np.nanargmax(np.where(np.isnan(ratio), -1, ratio)))
            if float(ratio.flat[k]) > worst[0]:
                worst = (float(ratio.flat[k]), float(e.flat[k]), float(b.flat[k]))
        o64 = _f64(o)
        finite_ref = np.isfinite(r)
        over = finite_ref & np.isinf(o64)
        # A 0 is an underflow only where the value lies below the dtype's normal range, or where every
        # term of the op's sum may (Σ|terms| < K·smallest normal: products flushed before they were
        # added). Above that, a 0 is rounding in a short significand (bfloat16's Conv2DBackpropInput
        # adds [1, 2^-9, -1] to 0), judged by the op's bound like any other rounding.
        normal = _smallest_normal(dt)
        low = np.abs(r) < normal
        if j.abs_terms is not None and i < len(j.abs_terms):  # Σ|terms|: already magnitudes
            low = low | (np.asarray(j.abs_terms[i], np.float64) < max(j.k, 1) * normal)
        under = finite_ref & (o64 == 0) & (np.abs(r) > noise) & (r != 0) & low
        dom = np.isnan(o64) & np.isnan(r)
        for name, mask in (("overflow", over), ("underflow", under), ("domain", dom if inputs_finite else dom & False)):
            if mask.any() and not j.event:
                j.event, j.event_count, j.event_of = name, int(mask.sum()), int(mask.size)
                j.reference_max = float(np.abs(r[mask]).max()) if name != "domain" else 0.0
    if worst[1] is not None:
        j.local_error, j.bound = worst[1], worst[2]
    return j


def _judge_source(j: JudgedOp, op, ref_run_op) -> JudgedOp:
    """A constant or variable read: its value against the reference run's value of the same op."""
    o = op.outputs[0]
    r = ref_run_op.outputs[0] if ref_run_op is not None and ref_run_op.outputs else None
    if r is None or np.shape(r) != np.shape(o) or not _is_float(r):
        j.unchecked = "a source without a matching value in the reference run"
        return j
    r64, o64 = _f64(r), _f64(o)
    e = _local(o, r64)
    b = 0.5 * elementwise_bound(r64, j.dtype, 1.0)
    j.local_error = float(e.max()) if e.size else 0.0
    j.bound = float(b.max()) if b.size else 0.0
    j.reference = [r64]
    zero = np.isfinite(r64) & (r64 != 0) & (o64 == 0)
    inf = np.isfinite(r64) & np.isinf(o64)
    for name, mask in (("constant-inf", inf), ("constant-zero", zero)):
        if mask.any() and not j.event:
            j.event, j.event_count, j.event_of = name, int(mask.sum()), int(mask.size)
            j.reference_max = float(np.abs(r64[mask]).max())
    return j
