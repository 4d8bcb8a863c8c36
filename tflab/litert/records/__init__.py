"""Lab step 8's records, one module per concern (each under 600 lines), re-exported here.

* `tflab.litert.records.check`: `OutputError`, `TFLiteCheck` (one variant) and the
  variants table (`variant_line`, `variant_table`, `TABLE_LEGEND`), with `TFLiteCheck`'s renderer;
* `tflab.litert.records.ops`: `OpCheck`, `PerOpCheck` (`tflab.litert.per_op` measures them);
* `tflab.litert.records.attribution`: `OpShare`, `KeptFloat`, `Attribution`
  (`tflab.litert.attribution` measures them);
* `tflab.litert.records.float_tensors`: `TensorMatch`, `FloatTensors`
  (`tflab.litert.float_tensors` measures them);
* `tflab.litert.records.simulation`: `SimulatedTensor`, `Simulation`
  (`tflab.litert.simulate` measures them);
* `tflab.litert.records.whole_model`: `RangeUse`, `WholeModelEffect`
  (`tflab.litert.whole_model` measures them).

They import only the report base layer, so importing them loads neither TF nor LiteRT;
importing this package imports none of them (each name loads its part on first use).
"""

import importlib

from tflab._api.lazy import lazy_exports

# Public name -> the part that defines it, loaded on first use (PEP 562): importing one part
# (tflab.litert.records.ops) loads only that part.
_EXPORTS = {
    **dict.fromkeys(("OutputError", "TFLiteCheck", "variant_line", "variant_table", "TABLE_LEGEND",
                      "whole_model_line"), "check"),
    **dict.fromkeys(("OpCheck", "PerOpCheck", "ILL_CONDITIONED"), "ops"),
    **dict.fromkeys(("OpShare", "KeptFloat", "Attribution", "TOP", "KEEP_SHARE", "MIN_DROP"), "attribution"),
    **dict.fromkeys(("TensorMatch", "FloatTensors"), "float_tensors"),
    **dict.fromkeys(("SimulatedTensor", "Simulation"), "simulation"),
    **dict.fromkeys(("RangeUse", "WholeModelEffect"), "whole_model"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.litert.records.{part}"))
