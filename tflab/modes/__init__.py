"""Step 6: eager vs graph vs XLA on the same inputs (`tflab.compare_modes`).

Modules: `defaults` (the modes and default bounds, importable without numpy,
for ``tflab compare --help``), `xla` (XLA's error parsing, HLO stages and
fusion counting), `records` (`ModeResult`, `Distance`, `ModeComparison`),
`findings` (distances, each array once, and the findings), `api`
(`compare_modes`: one trace per mode). Importing the package imports none of
them: each name loads its module on first use.
"""

import importlib

from tflab._api.lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(("compare_modes", "ModeComparison", "ModeResult", "Distance", "speed_text", "ulp_distance",
                     "MAX_REPEATS", "RANDOM_OPS", "STATEFUL_RANDOM_OPS", "STATELESS_RANDOM_OPS",
                     "random_dependencies"), "api"),
    **dict.fromkeys(("MODES", "DEFAULT_ATOL", "DEFAULT_ULP_BOUND"), "defaults"),
    **dict.fromkeys(("count_fusions", "probe_hlo_stages", "xla_reason"), "xla"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.modes.{part}"))
