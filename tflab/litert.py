"""Lab step 8, one import for all of it: `tflite_roundtrip`, `TFLiteCheck`, `convert`, ….

The LiteRT code is three modules, one concern each, imported bottom-up:

* `tflab.litert_convert`: SavedModel → flatbuffer (`convert`, the four
  recipes, `UnsupportedOpsError`) and what the flatbuffer holds
  (`analyze_flatbuffer`);
* `tflab.litert_bounds`: the elementwise error bound of each recipe and how
  it is derived (the float, float16, dynamic-range and int8 bounds);
* `tflab.litert_check`: run the flatbuffer with LiteRT, compare with TF
  (`check_tflite`, `tflite_roundtrip`, `TFLiteCheck`).

This module re-exports every name the single ``tflab/litert.py`` had, and a
name set on it (``tflab.litert.MAX_GRADIENT_ELEMENTS = 100``) is set on the
part that uses it. It holds no code of its own; no tflab module imports it.
"""

from __future__ import annotations

import sys
import types

from tflab import litert_bounds, litert_check, litert_convert
from tflab.litert_convert import (  # noqa: F401
    analyze_flatbuffer, convert, FlatbufferStats, QUANTIZATIONS, signature_op_types,
    UnsupportedOpsError, _call_target, _captured_stderr, _converter, _explain_converter_error,
    _representative, _where_ops)
from tflab.litert_bounds import (  # noqa: F401
    ELEMENTWISE_ULPS, FLOAT16_STEP, MAX_GRADIENT_ELEMENTS, MIN_WEIGHT_ELEMENTS, prepare_bounds,
    UNIT_ROUNDOFF, _bounds, _bounds_computed, _cache_key, _explanation, _gamma, _Sensitivity,
    _sensitivity, _SENSITIVITY_CACHE, _ulp32)
from tflab.litert_check import (  # noqa: F401
    argmax_agreement, check_rows, check_tflite, OutputError, tflite_roundtrip, TFLiteCheck,
    _dequantize, _details, _quantize, _RANDOM_OPS, _run_signatures, _runtime_name,
    _stateful_random_ops)



class _ForwardWrites(types.ModuleType):
    """A name WRITTEN on this module (``monkeypatch.setattr(tflab.litert, "MAX_GRADIENT_ELEMENTS",
    100)``) is written on the part that defines it too: that part's functions read their own globals."""

    _parts = (litert_convert, litert_bounds, litert_check)

    def __setattr__(self, name: str, value) -> None:
        for part in self._parts:
            if name in vars(part):
                setattr(part, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ForwardWrites
