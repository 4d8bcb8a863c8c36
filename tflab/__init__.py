"""tflab: a TensorFlow 2.21 tracing and export lab.

Public names (imported lazily, since importing TensorFlow takes seconds):

* step 1 `trace_and_inspect` → `TraceReport` (tflab/tracing.py)
* step 2 `RetraceProbe`, `expect_traces`, `RetraceError` (tflab/retrace.py)
* step 3 `demonstrate_retracing` (tflab/retrace_demo.py)
* step 4 `stabilize` → `StabilizeReport` (tflab/signatures.py)
* step 5 `autograph_diff` → `AutographDiff` (tflab/autograph.py)
* step 6 `compare_modes` → `ModeComparison` (tflab/modes.py)
* step 7 `save_and_reload` → `SavedModelCheck` (tflab/saved_model.py)
* step 8 `tflite_roundtrip` → `TFLiteCheck` (tflab/litert.py)
* `runtime_config` → `RuntimeConfig`: what a measurement ran on (tflab/runtime.py)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "trace_and_inspect": "tflab.tracing",
    "TraceReport": "tflab.tracing",
    "OpInfo": "tflab.tracing",
    "CaptureInfo": "tflab.tracing",
    "RetraceProbe": "tflab.retrace",
    "Trace": "tflab.retrace",
    "expect_traces": "tflab.retrace",
    "RetraceError": "tflab.retrace",
    "demonstrate_retracing": "tflab.retrace_demo",
    "stabilize": "tflab.signatures",
    "StabilizeReport": "tflab.signatures",
    "infer_input_signature": "tflab.signatures",
    "stabilization_report": "tflab.signatures",
    "autograph_diff": "tflab.autograph",
    "AutographDiff": "tflab.autograph",
    "compare_modes": "tflab.modes",
    "ModeComparison": "tflab.modes",
    "save_and_reload": "tflab.saved_model",
    "SavedModelCheck": "tflab.saved_model",
    "tflite_roundtrip": "tflab.litert",
    "TFLiteCheck": "tflab.litert",
    "UnsupportedOpsError": "tflab.litert",
    "export_model": "tflab.export",
    "runtime_config": "tflab.runtime",
    "RuntimeConfig": "tflab.runtime",
    "TflabError": "tflab.errors",
    "UsageError": "tflab.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'tflab' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
