"""Lab step 8, a quantized variant's whole-model effect in users' terms, and when quantization itself is the cause.

The per-op check and the simulation (`tflab.litert.simulate`) ask whether LiteRT computes the quantized
model the flatbuffer describes. A variant can do that faithfully and still be useless: when one
tensor's calibrated range is set by a few outliers (one huge input value in the examples, one unit
with a large bias, one large weight in a per-tensor table), every other value of that tensor falls on
a handful of the 255 int8 steps, and the outputs no longer follow the float model. Then the variant is
not "ok", whatever the bounds say: what the user reads is the whole model.

The thresholds, and why:

* `MIN_TOP1_AGREEMENT` (50%): below it the variant picks another class than the float model more
  often than the same one (LiteRT's top class against TF's, a tie is not agreement; rows where TF
  itself ties its top classes have no class to keep and are not judged). How many rows
  TF itself decides by more than one output step is reported beside it (``decisive_rows``): rows with a
  smaller lead are ones a single rounding may flip, which says why, not that the variant is fine.
  They are not left out: an outlier that coarsens the output's own scale makes every lead smaller
  than a step, and leaving those rows out would hide exactly the destroyed variant.
* `MAX_RANGE_SHARE` (25%): max|Δ| past a quarter of TF's output range means two outputs a quarter of
  the range apart can swap order: fewer than 4 distinguishable levels (2 bits) survive, where a
  faithful int8 output keeps its error to a few of its 255 steps (about 1% of its range).

The cause, once a threshold is crossed and LiteRT stays within its simulation (so the arithmetic is
the variant's own): ``quantization-range`` at an input whose examples fall outside its int8 grid
(at least `MIN_CLIPPED` of its values: LiteRT clips them, TF does not; the examples are not like the
calibration data), else at the first quantized tensor, in execution order, whose
range is set by outliers (the 99.9th percentile of its magnitudes uses less than `OUTLIER_RANGE_USE`
of the farthest value its grid reaches: at most 8 of int8's 128 steps on a side, 4 bits), with the
measurements; else ``rounding`` (no tensor's range
is outlier-dominated: the steps themselves, through the model's depth, move the outputs).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from tflab.attribution.records import Cause
from tflab.litert.ops import TensorInfo, read_ops
from tflab.litert.records.whole_model import RangeUse, WholeModelEffect
from tflab.litert.runner import argmax_agreement

__all__ = ["MIN_TOP1_AGREEMENT", "MAX_RANGE_SHARE", "OUTLIER_RANGE_USE", "MIN_CLIPPED", "range_use",
           "weight_ranges", "output_effect", "whole_model_cause", "stored_integer_sizes"]

MIN_TOP1_AGREEMENT = 0.5
MAX_RANGE_SHARE = 0.25
OUTLIER_RANGE_USE = 1.0 / 16.0
# An input whose examples fall outside its int8 grid this often is clipped by LiteRT, not by TF: the
# examples are not like the calibration data (a healthy export's own examples are: they calibrated it).
MIN_CLIPPED = 0.01
_INTEGER = ("int8", "uint8", "int16")


def stored_integer_sizes(model: bytes) -> set[int]:
    """Element counts of the constant tensors ``model`` stores as int8/uint8/int16 (its quantized weights).

    Args:
        model: flatbuffer bytes.

    Returns:
        The set of element counts (int32 biases are not among them).
    """
    parsed = read_ops(bytes(model))
    return {int(np.prod(t.shape)) for ops in parsed.subgraphs for op in ops for t in op.inputs
            if t is not None and t.constant is not None and t.dtype in _INTEGER}


def range_use(values: np.ndarray, t: TensorInfo) -> tuple[float, float] | None:
    """``(range_used, bulk_max)`` of ``values`` (the tensor's units) on ``t``'s grid, or None.

    ``bulk_max`` is the 99.9th percentile of ``|x|`` (``lower`` interpolation: a lone outlier among
    fewer than 1000 values is left out), ``range_used`` its share of the farthest value the grid
    reaches from zero (``max(|qmin − z|, |qmax − z|)·s``). Per channel along ``t.quantized_dimension``
    when ``t`` has several scales: the median channel's share, the largest ``bulk_max``.

    Args:
        values: float64 values in the tensor's units (LiteRT's dequantized values, or a weight's).
        t: the tensor (its scale, zero point, dtype and ``quantized_dimension``).

    Returns:
        ``(range_used, bulk_max)``, or None for a tensor that is not int8/uint8/int16 quantized or
        has no finite value.
    """
    if not t.quantized or t.dtype not in _INTEGER:
        return None
    x = np.asarray(values, np.float64)
    if t.scale.size > 1 and x.ndim:
        x = np.moveaxis(x, t.quantized_dimension, 0).reshape(t.scale.size, -1)
        chans = [(x[c], c) for c in range(t.scale.size)]
    else:
        chans = [(x.reshape(-1), 0)]
    shares, bulk = [], 0.0
    for v, c in chans:
        v = np.abs(v[np.isfinite(v)])
        reach = _reach(t, c)
        if v.size == 0 or reach == 0 or not v.any():
            continue  # all zero: no value sets its range, none is an outlier
        b = float(np.quantile(v, 0.999, method="lower"))
        shares.append(b / reach)
        bulk = max(bulk, b)
    if not shares:
        return None
    return float(np.median(shares)), bulk


def _reach(t: TensorInfo, c: int = 0) -> float:
    """The farthest value from zero ``t``'s grid holds (channel ``c``): ``max(|qmin − z|, |qmax − z|)·s``."""
    info = np.iinfo(np.dtype(t.dtype))
    c = min(c, t.scale.size - 1)
    s, z = float(t.scale[c]), float(t.zero_point.reshape(-1)[min(c, t.zero_point.size - 1)])
    return max(abs(info.min - z), abs(info.max - z)) * s


def _largest(t: TensorInfo) -> float:
    return max(_reach(t, c) for c in range(max(1, t.scale.size)))


def activation_range(t: TensorInfo, values: Sequence[np.ndarray], op_type: str, index: int,
                     role: str = "activation") -> RangeUse | None:
    """`RangeUse` of an op output (or, ``role="input"``, a signature input) from LiteRT's values.

    Args:
        t: the tensor.
        values: LiteRT's dequantized values of it, one array per example batch.
        op_type: the op writing it (or, for an input, the first op reading it).
        index: that op's index.
        role: ``"activation"`` or ``"input"``.

    Returns:
        A `RangeUse`, or None (no values, or not an integer tensor).
    """
    if not values:
        return None
    x = np.concatenate([np.ravel(v) for v in values])
    found = range_use(x, t)
    if found is None:
        return None
    low, high = _limits(t)
    step = float(t.scale.reshape(-1)[0])
    finite = x[np.isfinite(x)]
    clipped = float(np.mean((finite < low - step / 2) | (finite > high + step / 2))) if finite.size else 0.0
    return RangeUse(t.name, op_type, index, role, found[0], found[1], _largest(t), clipped, low, high)


def _limits(t: TensorInfo) -> tuple[float, float]:
    """``[(qmin − z)·s, (qmax − z)·s]`` of ``t``'s first channel."""
    info = np.iinfo(np.dtype(t.dtype))
    s, z = float(t.scale.reshape(-1)[0]), float(t.zero_point.reshape(-1)[0]) if t.zero_point.size else 0.0
    return (info.min - z) * s, (info.max - z) * s


def weight_ranges(model: bytes, float_model: bytes | None = None) -> list[RangeUse]:
    """`RangeUse` of every integer weight of ``model``, at the first op that reads it.

    Args:
        model: flatbuffer bytes (the signatures' subgraphs are read).
        float_model: the float conversion of the same model: a weight of the same name and shape there
            is measured in its float values (what calibration saw), else the stored values are.

    Returns:
        One `RangeUse` per int8/uint8/int16 constant, role ``"weight"``, in op order.
    """
    parsed = read_ops(bytes(model))
    floats: dict[str, np.ndarray] = {}
    if float_model is not None:
        for ops in read_ops(bytes(float_model)).subgraphs:
            for op in ops:
                for t in op.inputs:
                    if t is not None and t.constant is not None and np.dtype(t.dtype).kind == "f":
                        floats.setdefault(t.name, np.asarray(t.constant, np.float64))
    out, seen = [], set()
    for sg in sorted(set(parsed.signatures.values())) or [0]:
        for op in parsed.subgraphs[sg]:
            for t in op.inputs:
                if t is None or t.constant is None or t.dtype not in _INTEGER or (sg, t.index) in seen:
                    continue
                seen.add((sg, t.index))
                f = floats.get(t.name)
                found = range_use(f if f is not None and f.shape == np.shape(t.constant) else
                                  t.dequantize(t.constant), t)
                if found is not None:
                    out.append(RangeUse(t.name, op.op_type, op.index, "weight", found[0], found[1], _largest(t)))
    return out


def flat_output(want: Sequence[np.ndarray], max_abs_error: float | None = None,
                fixed_step: float | None = None) -> str:
    """Why TF's output is flat at int8's resolution, or "".

    Flat: TF's output varies by less than one step of the finest int8 grid that holds its values
    (``max|tf| / 127``, 127 steps on a side), or, where the kernel fixes the output grid whatever
    the calibration (``fixed_step``: an int8 SOFTMAX writes steps of 1/256,
    `tflab.litert.recipe.fixed_output_step`), by less than ``1 / MAX_RANGE_SHARE`` of its steps (one
    step, which the kernel may be off, is then past the range-share threshold). No int8 output can
    keep TF's order then, whatever the model does (a random-weight classifier's softmax at 0.1 ± 1e-9
    on every class, or at 0.198-0.202, 1.2 of a softmax's steps): top-1 agreement and max|Δ| as a
    share of that range measure the float model's flatness, not the variant. Unless the variant is
    far from TF's values themselves: ``max_abs_error`` past `MAX_RANGE_SHARE` of ``max|tf|`` (a
    constant output of 1.0 read back as 0) is judged as any other output.
    """
    vals = np.concatenate([np.ravel(a) for a in want]).astype(np.float64)
    vals = vals[np.isfinite(vals)]
    if vals.size < 2:
        return ""
    spread, peak = float(vals.max() - vals.min()), float(np.abs(vals).max())
    if max_abs_error is not None and not max_abs_error <= MAX_RANGE_SHARE * peak:
        return ""
    if peak > 0 and spread < peak / 127:
        return (f"TF's output varies by {spread:.3g} over values up to {peak:.3g}, less than one step "
                f"({peak / 127:.3g}) of the finest int8 grid that holds them: no int8 output keeps its order")
    if fixed_step and spread < fixed_step / MAX_RANGE_SHARE:
        return (f"TF's output varies by {spread:.3g}, less than {1 / MAX_RANGE_SHARE:.0f} steps of the int8 grid "
                f"its op's kernel fixes ({fixed_step:.4g}, whatever the calibration): the one step a correctly "
                f"computed int8 kernel may be off is more than {MAX_RANGE_SHARE:.0%} of that range, and no int8 "
                f"output keeps its order")
    return ""


def output_effect(o, got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                  fixed_step: float | None = None) -> WholeModelEffect | None:
    """One output's whole-model effect (`WholeModelEffect`), from LiteRT's and TF's arrays per example batch.

    Args:
        o: the output's `tflab.litert.records.OutputError` (its ``range_share`` and ``step``).
        got: LiteRT's output per batch (dequantized).
        want: TF's output per batch.
        fixed_step: the output grid's step where the kernel fixes it (`flat_output`), else None.

    Returns:
        The effect, or None for a non-float output.
    """
    if not want or np.asarray(want[0]).dtype.kind != "f":
        return None
    flat = flat_output(want, o.max_abs_error, fixed_step)
    if flat:
        return WholeModelEffect(o.name, None, 0, 0, None, MIN_TOP1_AGREEMENT, MAX_RANGE_SHARE, not_judged=flat)
    agreement, decisive, rows = None, 0, 0
    if np.ndim(want[0]) >= 2 and np.shape(want[0])[-1] >= 2:
        g = np.concatenate([np.reshape(a, (-1, np.shape(a)[-1])) for a in got]).astype(np.float64)
        w = np.concatenate([np.reshape(a, (-1, np.shape(a)[-1])) for a in want]).astype(np.float64)
        keep = np.isfinite(w).all(axis=-1)
        top2 = np.sort(np.where(keep[:, None], w, 0.0), axis=-1)[:, -2:]
        lead = top2[:, 1] - top2[:, 0]
        keep &= lead > 0  # a row where TF itself ties its top classes has no class to keep
        g, w, lead = g[keep], w[keep], lead[keep]
        rows = int(len(w))
        decided = lead > (o.step or 0.0)
        decisive = int(decided.sum())
        if rows:
            agreement, _ = argmax_agreement(g, w)
    return WholeModelEffect(o.name, agreement, decisive, rows, o.range_share, MIN_TOP1_AGREEMENT, MAX_RANGE_SHARE)


def whole_model_cause(cause: Cause | None, effects: Iterable[WholeModelEffect], simulation, model: bytes,
                      quantization: str, function_name: str = "", float_model: bytes | None = None) -> Cause | None:
    """``cause``, or the quantization itself when the outputs cross a threshold and nothing else explains it.

    Args:
        cause: the cause `tflab.litert.cause.litert_cause` named (kept unless it is None or
            ``unexplained``: an op over its own bound, a constant, a NaN come first).
        effects: the variant's `WholeModelEffect` per output.
        simulation: the `tflab.litert.records.Simulation` (activation ranges), or None.
        model: the checked flatbuffer (its weights' ranges).
        quantization: the recipe.
        function_name: the model's name in the report.
        float_model: the float conversion (weights are measured in its values, `weight_ranges`).

    Returns:
        A `Cause` of kind ``quantization-range`` (a tensor whose range is set by outliers, named with its
        measurements) or ``rounding`` (none is), or ``cause`` unchanged.
    """
    crossed = [e for e in effects if e.crossed]
    if (not crossed and cause is None) or (cause is not None and cause.kind != "unexplained"):
        return cause
    # An input clipped on these examples comes first, in execution order and as the root: every tensor
    # after it is off the distribution the grids were calibrated for (an unexplained end-to-end excess,
    # or a later tensor past the simulation's bound, follows from it).
    clipped = next((r for r in getattr(simulation, "ranges", ()) or () if r.role == "input" and r.clipped >= MIN_CLIPPED),
                   None)
    if not crossed and clipped is None:
        return cause
    if clipped is None and simulation is not None and simulation.ok is False:
        return cause  # LiteRT left its own quantized model: that is the finding, not the quantization
    ranges = list(getattr(simulation, "ranges", ()) or ()) + weight_ranges(model, float_model)
    # Execution order; a weight sits before the op that reads it, an activation after the op that writes it.
    ranges.sort(key=lambda r: (r.index, 1 if r.role == "activation" else 0))
    outlier = next((r for r in ranges if r.range_used < OUTLIER_RANGE_USE), None)
    effect = "; ".join(e.text for e in crossed)
    faithful = ("LiteRT computes the quantized model its flatbuffer describes (within the simulation's bound)"
                if simulation is not None and simulation.ok else "no op is over its own bound")
    evidence = {"effects": [e.text for e in crossed], "min_top1_agreement": MIN_TOP1_AGREEMENT,
                "max_range_share": MAX_RANGE_SHARE, "outlier_range_use": OUTLIER_RANGE_USE,
                "ranges": [{"tensor": r.name, "op": f"{r.op_type} #{r.index}", "role": r.role,
                            "range_used": r.range_used, "bulk_max": r.bulk_max, "largest": r.largest}
                           for r in sorted(ranges, key=lambda r: r.range_used)[:5]]}
    if clipped is not None:  # before any range: the examples are not what the grid was calibrated for
        return Cause(function_name, f"tf vs litert {quantization}", "quantization-range", clipped.name.split(";")[0],
                     clipped.op_type, detail=(
                         (f"{faithful}, but " if simulation is None or simulation.ok else "")
                         + (f"its quantization destroys the outputs ({effect})" if crossed
                            else "its outputs leave their end-to-end bound") + f": the "
                         f"{clipped.clip_text}; the grid came from the representative dataset, so these examples "
                         f"are not like it: check with examples like the calibration data (--examples), or "
                         f"calibrate on data like these"),
                     evidence=dict(evidence, tensor=clipped.name, role=clipped.role, clipped=clipped.clipped,
                                   range=[clipped.low, clipped.high]))
    if outlier is not None:
        fix = ("clip or rescale that weight" if outlier.role == "weight" else
               "calibrate with examples without the outliers, or bound the activation (e.g. ReLU6)") + \
            ", or keep that op in float"
        return Cause(function_name, f"tf vs litert {quantization}", "quantization-range", outlier.name.split(";")[0],
                     outlier.op_type, detail=(
                         f"{faithful}, but its quantization destroys the outputs ({effect}): the range of "
                         f"{outlier.text}; {fix}"),
                     evidence=dict(evidence, tensor=outlier.name, role=outlier.role, range_used=outlier.range_used))
    return Cause(function_name, f"tf vs litert {quantization}", "rounding", detail=(
        f"{faithful}, but its rounding moves the outputs past the whole-model threshold ({effect}); no tensor's "
        f"range is set by outliers (each uses at least {OUTLIER_RANGE_USE:.1%} of its steps): the steps "
        f"themselves, through the model, are too coarse"), evidence=evidence)
