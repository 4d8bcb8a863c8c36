"""Lab step 8: TFLite conversion and LiteRT checks, one module per concern.

The package, bottom-up (each module imports only those above it):

* `tflab.litert.conversion`: SavedModel → flatbuffer (`convert`, the four
  recipes, `UnsupportedOpsError`) and what the flatbuffer holds (`analyze_flatbuffer`);
* `tflab.litert.flatbuffer_notes`: what the flatbuffer alone shows before it
  runs (uninitialized resource variables, int8 scale 0, saturated float16 weights);
* `tflab.litert.bounds`: the end-to-end elementwise error bound of each recipe
  and how it is derived;
* `tflab.litert.ops`, `tflab.litert.references` → `tflab.litert.per_op`: every
  op's tensors (builtin kernels, every tensor kept), float64 op references on the
  op's own inputs with the float model's weights, and the per-op verdict;
* `tflab.litert.attribution`: the output error of a quantized variant attributed to
  ops (TFLite tensors matched to TF's by name), and the measured kept-float fix;
* `tflab.litert.float_tensors`: the float variant's intermediates against TF's
  tensors of the same name;
* `tflab.litert.nan_runner` → `tflab.litert.nan`: one signature rerun op by op with the
  builtin kernels; the first op that makes a NaN/inf, and its cause;
* `tflab.litert.records` (a package: `check`, `ops`, `attribution`, `float_tensors`): every
  record of the step (`TFLiteCheck`, `PerOpCheck`, `Attribution`, `FloatTensors`, ...), below the
  modules that measure them;
* `tflab.litert.runner` → `tflab.litert.check`:
  the interpreter run on every SignatureDef; `check_tflite`, `tflite_roundtrip`;
* `tflab.litert.workers`, `tflab.litert.pool`: conversions in worker processes,
  several at once.

Importing this package imports nothing (names load on first use, PEP 562), so
importing one part loads only that part and what it imports.
"""

from __future__ import annotations

import importlib

from tflab._api.lazy import lazy_exports

# Public name -> the module that defines it.
_EXPORTS = {
    **dict.fromkeys(("QUANTIZATIONS", "UnsupportedOpsError", "convert", "make_converter", "FlatbufferStats",
                     "analyze_flatbuffer", "signature_op_types"), "conversion"),
    **dict.fromkeys(("FLOAT16_MAX", "VARIABLE_FIX", "UninitializedVariable", "uninitialized_variables",
                     "ConversionWarning", "variable_note", "zero_scale_note", "float16_note",
                     "conversion_notes", "warn_after_conversion", "read_graphs"), "flatbuffer_notes"),
    **dict.fromkeys(("UNIT_ROUNDOFF", "FLOAT16_STEP", "MIN_WEIGHT_ELEMENTS", "ELEMENTWISE_ULPS",
                     "MAX_GRADIENT_ELEMENTS", "prepare_bounds"), "bounds"),
    **dict.fromkeys(("TensorInfo", "OpInfo", "OpTensors", "ModelOps", "read_ops", "preserving_interpreter",
                     "run_ops", "variant_of"), "ops"),
    **dict.fromkeys(("Terms", "REFERENCES", "INDEX_INPUTS"), "references"),
    **dict.fromkeys(("match_ops", "check_ops"), "per_op"),
    "run_per_op": "nan_runner",
    **dict.fromkeys(("CAUSES", "NanOrigin", "find_nan_origin", "find_nan_sink", "nan_note"), "nan"),
    **dict.fromkeys(("attribute_error", "tf_name_of", "output_error"), "attribution"),
    "compare_float_tensors": "float_tensors",
    **dict.fromkeys(("OutputError", "TFLiteCheck", "variant_line", "variant_table", "TABLE_LEGEND", "OpCheck",
                     "PerOpCheck", "ILL_CONDITIONED", "OpShare", "KeptFloat", "Attribution", "TensorMatch",
                     "FloatTensors"), "records"),
    **dict.fromkeys(("argmax_agreement", "require_matching_signatures", "read_signature_keys"), "runner"),
    **dict.fromkeys(("check_tflite", "float_reference", "remember_float_reference", "MIN_TFLITE_BYTES",
                     "tflite_roundtrip"), "check"),
    **dict.fromkeys(("CRASH_ENV", "convert_isolated", "convert_inprocess", "save_examples", "stop_workers",
                     "reset_workers"), "workers"),
    **dict.fromkeys(("schedulable_cpus", "ConversionPool"), "pool"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.litert.{part}"))
