"""tflab: a TensorFlow 2.21 tracing and export lab.

Public names (imported lazily, since importing TensorFlow takes seconds):

* step 1 `trace_and_inspect` → `TraceReport` (tflab/tracing.py)
* step 2 `RetraceProbe`, `expect_traces`, `RetraceError`, `Trace`, `Reason`, `TraceEvent`,
  `capture_trace_events`, `trace_script`, `reasons_between` (the tflab/retrace/ package)
* step 3 `demonstrate_retracing` (tflab/retrace/demo.py)
* step 4 `stabilize` (tflab/signatures.py) → `StabilizeReport` (tflab/stabilization.py)
* step 5 `autograph_diff` → `AutographDiff` (tflab/autograph.py)
* step 6 `compare_modes` → `ModeComparison` (tflab/modes/api.py)
* step 7 `save_and_reload` → `SavedModelCheck` (the tflab/saved_model/ package); `Examples`, the
  example batches steps 7-8 and export take (tflab/examples.py)
* step 8 `tflite_roundtrip` → `TFLiteCheck`; `check_tflite`, the same check of a flatbuffer
  you already have against its SavedModel (the package tflab/litert/ re-exports
  tflab/litert/conversion.py, bounds.py, check.py)
* step 10 `float_info`, `compare_precisions` → `PrecisionComparison` (tflab/precision/api.py), `demonstrate_loss_scaling` (tflab/precision/loss_scaling.py)
* step 11 `DistributedRetraceProbe`, `inspect_distributed`, `run_workers` (tflab/distribute.py)
* `diagnose` → `Diagnosis`: why a tf.function failed (tflab/diagnosis/)
* `runtime_config` → `RuntimeConfig`: what a measurement ran on (tflab/runtime.py)
"""

from __future__ import annotations

import importlib as _importlib
import os as _os

# Candidate fixes are checked in a forked child (tflab/process/apart.py). TF's intra-op thread pool
# is one pool for the whole process unless this is set before TF's first op, and its threads do
# not survive fork: with it, each eager context owns its pool and the child starts its own.
_os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")

from tflab._api.deprecations import install_module_aliases as _install_module_aliases
from tflab._api.not_modules import install as _install_name_finder
from tflab._api.deprecations import name_getattr as _name_getattr
from tflab._api.deprecations import old_module as _old_module
from tflab._api.version import package_version as _package_version

__version__ = _package_version()

# Module paths of earlier releases (``import tflab.retrace_probe``) load the module that holds their
# names now, with a DeprecationWarning: the table is tflab/_api/deprecations.py.
_install_module_aliases()
# ``import tflab.diagnose`` (a function, not a module) answers with the import that works.
_install_name_finder()

_EXPORTS = {
    "trace_and_inspect": "tflab.tracing",
    "TraceReport": "tflab.tracing",
    "OpInfo": "tflab.tracing",
    "CaptureInfo": "tflab.tracing",
    "RetraceProbe": "tflab.retrace.probe",
    "StaleRead": "tflab.retrace.probe",
    "Trace": "tflab.retrace.records",
    "Reason": "tflab.retrace.records",
    "TraceEvent": "tflab.retrace.event",
    "capture_trace_events": "tflab.retrace.event",
    "reasons_between": "tflab.retrace.diff",
    "trace_script": "tflab.retrace.log",
    "ScriptTraces": "tflab.retrace.records",
    "SideEffect": "tflab.retrace.sideeffects",
    "expect_traces": "tflab.retrace.expect",
    "RetraceError": "tflab.retrace.expect",
    "TraceExpectation": "tflab.retrace.expect",
    "demonstrate_retracing": "tflab.retrace.demo",
    "stabilize": "tflab.signatures",
    "StabilizeReport": "tflab.stabilization",
    "infer_input_signature": "tflab.signatures",
    "stabilization_report": "tflab.stabilization",
    "FixedShapeWarning": "tflab.signatures",
    "autograph_diff": "tflab.autograph",
    "AutographDiff": "tflab.autograph",
    "lower": "tflab.lowering.api",
    "compare_modes": "tflab.modes.api",
    "ModeComparison": "tflab.modes.records",
    "Examples": "tflab.examples",
    "save_and_reload": "tflab.saved_model.roundtrip",
    "SavedModelCheck": "tflab.saved_model.records",
    "tflite_roundtrip": "tflab.litert.check",
    "check_tflite": "tflab.litert.check",
    "TFLiteCheck": "tflab.litert.check",
    "UnsupportedOpsError": "tflab.litert.conversion",
    "export_model": "tflab.export",
    "DistributedRetraceProbe": "tflab.distribute",
    "inspect_distributed": "tflab.distribute",
    "DistributedTraceReport": "tflab.distribute",
    "run_workers": "tflab.distribute",
    "MultiWorkerReport": "tflab.distribute",
    "WorkerError": "tflab.distribute",
    "diagnose": "tflab.diagnosis",
    "Diagnosis": "tflab.diagnosis",
    "float_info": "tflab.precision.float_formats",
    "FloatInfo": "tflab.precision.float_formats",
    "compare_precisions": "tflab.precision.api",
    "PrecisionComparison": "tflab.precision.records",
    "PolicyResult": "tflab.precision.records",
    "demonstrate_loss_scaling": "tflab.precision.loss_scaling",
    "LossScalingDemo": "tflab.precision.records",
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
        old = _old_module("tflab", name)
        return old if old is not None else _name_getattr("tflab", name)
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    # The public names, the submodules imported so far and the dunders; not this file's own helpers
    # (``_os``, ``_importlib``) nor ``annotations`` (the __future__ import binds it here).
    return sorted(n for n in set(globals()) | set(_EXPORTS)
                  if n != "annotations" and (not n.startswith("_") or n.startswith("__")))
