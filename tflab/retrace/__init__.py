"""Lab steps 2-3: why a tf.function traced again, from TF's own structures.

The package, bottom-up (each module imports only those above it):

* `tflab.retrace.records`: the `Trace` and `Reason` records, the FIXES table and the
  reports `FunctionTraces`, `ScriptTraces`, `RetracingDemo`;
* `tflab.retrace.nodes`: TraceType objects (or a log's TraceType text) ->
  `Node` trees;
* `tflab.retrace.function_context`, `tflab.retrace.paths`: which part of TF's
  FunctionContext changed; paths into `Node` trees and a call rebuilt like an
  earlier trace;
* `tflab.retrace.diff`: the structured diff of two trees that gives each
  `Reason` (parameter path, old -> new, exact or relaxed, a fix that fits the
  options already on);
* `tflab.retrace.bench` → `tflab.retrace.check`: a recorded call rebuilt from
  its TraceTypes, and each fix run on the recorded calls before it is printed;
* `tflab.retrace.event`: the `TraceEvent`, made at one place from TF's tracing
  frame (``tracing_compilation._maybe_define_function``), `capture_trace_events`
  and `on_each_trace` (the two triggers every consumer uses);
* `tflab.retrace.sideeffects`: Python side effects in the body that run only
  while tracing;
* `tflab.retrace.live`: a `Trace` from each `TraceEvent` as TF starts it, and
  a tf.function's cached traces;
* `tflab.retrace.log`: traces of every tf.function in a block or a script
  (``tflab retrace SCRIPT.py``), grouped by object and by qualified name;
* `tflab.retrace.stale` → `tflab.retrace.probe`: stale closure and global
  reads (`StaleRead`); `RetraceProbe`;
* `tflab.retrace.expect`: `expect_traces`, `RetraceError`;
* `tflab.retrace.demo`: `demonstrate_retracing` (lab step 3).

Importing this package imports nothing (names load on first use), and no part
imports TensorFlow at import time. TF internals are read through
`tflab._tf.function` only.
"""

from __future__ import annotations

import importlib

from tflab._api.lazy import lazy_exports

# Public name -> the submodule that defines it. Imported on first use (PEP 562
# module __getattr__), so importing one part (tflab.retrace.diff) loads only
# that part and what it imports, never the whole package.
_EXPORTS = {
    **dict.fromkeys(("FIXES", "FIXES_WITH_REDUCE_RETRACING", "NO_VARIABLE_CREATION", "Reason",
                     "Trace", "VARIABLE_CREATION", "FunctionTraces", "STALE_READ_NOTE", "ScriptTraces"),
                    "records"),
    **dict.fromkeys(("Node", "function_type_inputs", "node_of", "nodes_of", "parse_trace_type"),
                    "nodes"),
    **dict.fromkeys(("PER_REPLICA_FIX", "describe_per_replica", "diff_per_replica", "explain",
                     "make_trace", "reasons_between"), "diff"),
    **dict.fromkeys(("TraceEvent", "capture_trace_events", "current_trace_event",
                     "event_from_frame", "parse_trace_log_message"), "event"),
    **dict.fromkeys(("SideEffect", "trace_time_effects"), "sideeffects"),
    **dict.fromkeys(("cached_traces", "explain_records", "trace_from_event"), "live"),
    **dict.fromkeys(("NameGroup", "group_logged_traces", "name_groups", "trace_script"), "log"),
    "StaleRead": "stale",
    "RetraceProbe": "probe",
    **dict.fromkeys(("RetraceError", "TraceExpectation", "expect_traces"), "expect"),
    "demonstrate_retracing": "demo",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.retrace.{part}"))
