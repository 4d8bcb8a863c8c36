"""Step 10's root causes: the float32 reference's own noise floor, and the cause of a disagreement.

* **Noise floor.** A float32 gradient element is only a value a policy can
  lose when it is above float32's own rounding noise. The function runs once
  more in float64 (arguments cast to float64; a factory built under the
  ``float64`` policy) and a float32 element counts only where
  ``|g32 - g64| < |g32| / 2`` (`tflab.attribution.judge.noise_mask`). The
  gradient of ``sum(softmax(x))`` is exactly 0: float32 gives ~1e-9 of noise
  and float64 ~1e-17, so none of it is counted as lost. The float64 run is made
  only when some float32 gradient element is non-zero where a policy gave 0.
  Where the float64 run fails (code that mixes in float32 tensors), no element
  is dropped and the report says the floor was not measured.
* **Cause.** When a policy and float32 disagree (an inf/NaN float32 does not
  have, a gradient element lost, or an output off by more than rounding),
  `tflab.attribution.engine.attribute_calls` traces both runs (and the float64
  one for the floor) and judges every op on its actual inputs: the `Cause`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["float64_gradients", "noise_masks", "disagree", "attribute_policy"]


def float64_gradients(subject, forward: Callable) -> list | None:
    """The gradients of the float64 run (float64 arrays), or None when it cannot run."""
    from tflab.precision.policy import global_policy

    try:
        with global_policy("float64", seed=subject.seed):
            obj = subject.build("float64") if subject.factory else subject.python_fn
        run = forward(subject.call(obj, "float64"), subject.sources, "float64", subject.variables_of(obj))
        grads, _ = run.grad_fn(1.0)
    except Exception:  # noqa: BLE001 - no floor: said on the report
        return None
    return grads


def noise_masks(ref_grads: list, grads64: list | None) -> list:
    """Per gradient: the float32 elements above their own noise (True), or None when unmeasured."""
    from tflab.attribution.judge import noise_mask

    if grads64 is None:
        return [None] * len(ref_grads)
    return [None if r is None or h is None else noise_mask(r, h) for r, h in zip(ref_grads, grads64)]


def cleaned(ref_grads: list, masks: list) -> list:
    """The float32 gradients with the elements below their own noise floor set to 0 (the value they hold)."""
    out = []
    for r, m in zip(ref_grads, masks):
        out.append(r if r is None or m is None else np.where(m, r, np.zeros_like(r)))
    return out


def disagree(result, ref_out: list, out: list) -> bool:
    """Whether a policy differs from float32 by more than its rounding (inf/NaN, lost gradients, outputs)."""
    from tflab.attribution.judge import significant

    from tflab.precision.float_formats import float_info

    if result.overflow or result.underflow:
        return True
    # outputs measured as the table measures them: float32 values at or above the smallest normal
    normal = float(float_info(result.compute_dtype).smallest_normal)
    return any(significant(o, r, result.compute_dtype, ~np.isfinite(r) | (np.abs(r) >= normal))
               for r, o in zip(ref_out, out) if r.dtype.kind == "f" and np.shape(r) == np.shape(o))


def attribute_policy(subject, policy: str, obj, ref_obj, name: str) -> Any:
    """The `Attribution` of ``policy``'s run against float32's (float64 for the noise floor)."""
    from tflab.attribution.engine import attribute_calls
    from tflab.precision.policy import POLICIES, global_policy

    compute, _ = POLICIES[policy]
    higher = None
    try:
        with global_policy("float64", seed=subject.seed):
            obj64 = subject.build("float64") if subject.factory else subject.python_fn
        higher = (subject.call(obj64, "float64"), subject.sources)
    except Exception:  # noqa: BLE001 - attributed without the floor
        higher = None
    return attribute_calls(subject.call(obj, compute), subject.call(ref_obj, "float32"), subject.sources,
                           subject.sources, name, f"float32 vs {policy}", gradients="auto", require_cause=True,
                           higher=higher)
