"""Lab step 8, "this check cannot fail": said only where a planted defect was measured not to move the output.

An end-to-end bound says little when no error inside the model could push
the output past it: a bound at least the output's range, or an output
saturated at its extremes (a softmax at exactly 0 and 1). Those are the
*candidates*; whether the check can fail is then measured, not inferred:

* the **planted defect**: TF runs the same signature on the same examples with
  every float variable multiplied by `PLANTED_FACTOR` (a 10% weight error, far
  larger than any quantization step), and the variables are restored;
* where that defect moves no element of the output past its own bound, the
  check is **vacuous** (it cannot see a 10% weight error) and the note says
  "cannot fail", with the measured move; where it moves some element past its
  bound, the check can fail and nothing says otherwise.

No note at all where the claim could not be true or measured: an output with
fewer than `MIN_ELEMENTS` finite elements (two values are always "at their
min or max"), NaN/inf on either side (the check is about them then), a check
that has just failed (an output over its bound is no vacuous pass), or a
model without float variables to perturb.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

__all__ = ["MIN_ELEMENTS", "PLANTED_FACTOR", "SATURATED", "planted_outputs", "vacuous_note"]

# An output is saturated when every element of TF's lies within this share of its range of the
# output's min or max (a softmax at exactly 0 and 1, or 1e-26 from them).
SATURATED = 1e-4
# Fewer finite elements than this say nothing about saturation (two values are each at an extreme).
MIN_ELEMENTS = 8
# The planted defect: every float weight ×1.1 in TF's run.
PLANTED_FACTOR = 1.1


def planted_outputs(loaded, batches, full_keys: Mapping[str, str],
                    factor: float = PLANTED_FACTOR) -> dict[str, np.ndarray] | None:
    """TF's outputs with every float variable multiplied by ``factor`` (restored after), flat per output.

    Args:
        loaded: the loaded SavedModel (`tflab.saved_model.load_saved_model`).
        batches: the `tflab.examples.Examples` the check ran on.
        full_keys: report key → ``"<signature>/<output>"`` (as `tflab.litert.runner.run_signatures` gives).

    Returns:
        report key → float64 flat array in the check's order (examples concatenated), or None when
        the signatures capture no float variable (nothing to perturb: no claim is made).
    """
    import tensorflow as tf

    from tflab._user.usercode import run_signature

    variables, seen = [], set()
    for sig in loaded.signatures.values():
        for v in sig.variables:
            if id(v) not in seen and v.dtype.is_floating:
                seen.add(id(v))
                variables.append(v)
    if not variables:
        return None
    kept = [v.numpy() for v in variables]
    wanted = {}
    for okey, full in full_keys.items():
        key, name = full.split("/", 1) if "/" in full else (full, "")
        wanted.setdefault(key, []).append((okey, name))
    out: dict[str, list] = {}
    try:
        for v, a in zip(variables, kept):
            v.assign(a * np.asarray(factor, a.dtype))
        for key, names in wanted.items():
            fn = loaded.signatures[key]
            for feed in batches.feeds(key):
                res = run_signature(fn, key, {n: tf.constant(a) for n, a in feed.items()})
                for okey, name in names:
                    out.setdefault(okey, []).append(np.asarray(res[name].numpy(), np.float64).ravel())
    finally:
        for v, a in zip(variables, kept):
            v.assign(a)
    return {k: np.concatenate(v) for k, v in out.items()}


def vacuous_note(okey: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray, rng: float,
                 agree: float | None, planted: Callable[[], np.ndarray | None]) -> tuple[str, bool]:
    """The note on a bound that may not be able to fail, and whether it was measured vacuous.

    Args:
        okey: the output's name in the report.
        got, want: LiteRT's and TF's values of it (flat, same order).
        bound: its elementwise bound (flat).
        rng: ``max − min`` of TF's finite values.
        agree: argmax agreement (None when not measured).
        planted: returns TF's output under the planted defect (`planted_outputs`), flat, or None;
            called only for a candidate.

    Returns:
        ``(note, vacuous)``: ``vacuous`` is True only when the planted defect moved no element past its
        bound; ``note`` is "" when neither the range nor the saturation rule applies, or a gate above
        holds.
    """
    if want.dtype.kind != "f" or not want.size:
        return "", False
    g, w, b = got.astype(np.float64), want.astype(np.float64), bound.astype(np.float64)
    if not (np.isfinite(g).all() and np.isfinite(w).all() and np.isfinite(b).all()):
        return "", False
    if w.size < MIN_ELEMENTS or rng <= 0:
        return "", False
    with np.errstate(divide="ignore", invalid="ignore"):
        failed = np.any(np.abs(g - w) > b)
    if failed:
        return "", False
    at_extremes = (np.abs(w - w.min()) <= SATURATED * rng) | (np.abs(w.max() - w) <= SATURATED * rng)
    probability = bool(np.all((w >= 0) & (w <= 1)) and np.all((g >= 0) & (g <= 1)))
    if b.max() < rng and at_extremes.all():
        why = (f"TF's {okey} is saturated: every one of its {w.size} elements lies within {SATURATED:g} × its "
               f"range of its min {w.min():.3g} or its max {w.max():.3g}")
    elif b.max() >= rng:
        why = f"bound {b.max():.3g} exceeds the output's range {rng:.3g} (max − min of TF's {okey} over the examples)"
    elif probability and b.max() >= 1.0:
        why = f"bound {b.max():.3g} exceeds 1, the range of a probability"
    else:
        return "", False
    moved = planted()
    if moved is None or moved.shape != w.shape:
        return "", False
    with np.errstate(invalid="ignore"):
        shift = np.abs(moved - w)
    past = int(np.sum(~(shift <= b)))  # NaN counts as moved
    defect = f"every float weight ×{PLANTED_FACTOR:g} in TF"
    instead = (f"compare argmax agreement instead (here {agree:.0%})" if agree is not None
               else "compare a task metric on real data instead")
    if past:
        return (f"{why}, but the check can fail: a planted defect ({defect}) moves {past} of {w.size} elements "
                f"past their bound (largest move {np.nanmax(shift):.3g})"), False
    return (f"{why}; a planted defect ({defect}) moves {okey} by at most {np.max(shift):.3g}, within its bound "
            f"at every element: this check cannot fail for {okey} (measured); {instead}"), True
