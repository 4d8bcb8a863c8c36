"""Step 10: float32 vs mixed_bfloat16 vs mixed_float16, underflow, overflow and loss scaling.

Modules: `float_formats` (`float_info`: a format's limits, no TF), `policy`
(Keras dtype policies and their context), `records` (`PolicyResult`,
`PrecisionComparison`, `LossScalingRow`, `LossScalingDemo`), `fixes` (the overflow and loss-scale fixes, each
applied to the user's case and measured), `api` (`compare_precisions`),
`loss_scaling` (`demonstrate_loss_scaling` on a MobileNetV3Small training
step). Importing the package imports none of them: each name loads its module
on first use.
"""

import importlib

from tflab._api.lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(("compare_precisions", "parse_policies", "run_policies", "PolicySubject"), "api"),
    **dict.fromkeys(("PrecisionComparison", "PolicyResult", "LossScalingRow", "LossScalingDemo"), "records"),
    **dict.fromkeys(("FloatInfo", "float_info", "TABLE_DTYPES", "pow2_text"), "float_formats"),
    **dict.fromkeys(("global_policy", "POLICIES", "DEFAULT_POLICIES", "REFERENCE", "INITIAL_LOSS_SCALE",
                     "MIN_LOSS_SCALE"), "policy"),
    **dict.fromkeys(("demonstrate_loss_scaling",), "loss_scaling"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.precision.{part}"))
