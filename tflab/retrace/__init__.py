"""Lab steps 2-3: why a tf.function traced again, from TF's own structures.

The package, bottom-up (each module imports only those above it):

* `tflab.retrace.records`: the `Trace` and `Reason` records and the FIXES table;
* `tflab.retrace.diff`: TraceType objects -> `Node` trees, and the structured
  diff that gives each `Reason` (parameter path, old -> new, exact or relaxed,
  a fix that fits the options already on);
* `tflab.retrace.event`: the `TraceEvent`, made at one place from TF's tracing
  frame (``tracing_compilation._maybe_define_function``), and
  `capture_trace_events`;
* `tflab.retrace.sideeffects`: Python side effects in the body that run only
  while tracing;
* `tflab.retrace.log`: traces of every tf.function in a block or a script
  (``tflab retrace SCRIPT.py``), grouped by object and by qualified name;
* `tflab.retrace.probe`: `RetraceProbe`;
* `tflab.retrace.expect`: `expect_traces`, `RetraceError`;
* `tflab.retrace.demo`: `demonstrate_retracing` (lab step 3).

Importing this package does not import TensorFlow.
"""

from __future__ import annotations

from tflab.retrace.records import (  # noqa: F401
    FIXES, FIXES_WITH_REDUCE_RETRACING, NO_VARIABLE_CREATION, Reason, Trace, VARIABLE_CREATION)
from tflab.retrace.diff import (  # noqa: F401
    Node, PER_REPLICA_FIX, describe_per_replica, diff_per_replica, explain, function_type_inputs,
    make_trace, node_of, nodes_of, parse_trace_type, reasons_between)
from tflab.retrace.event import (  # noqa: F401
    TraceEvent, capture_trace_events, current_trace_event, event_from_frame, parse_trace_log_message)
from tflab.retrace.sideeffects import SideEffect, trace_time_effects  # noqa: F401
from tflab.retrace.log import (  # noqa: F401
    FunctionTraces, NameGroup, STALE_READ_NOTE, ScriptTraces, cached_traces, explain_records,
    group_logged_traces, name_groups, trace_from_event, trace_script)
from tflab.retrace.probe import RetraceProbe, StaleRead  # noqa: F401
from tflab.retrace.expect import RetraceError, TraceExpectation, expect_traces  # noqa: F401
from tflab.retrace.demo import demonstrate_retracing  # noqa: F401

__all__ = [
    "FIXES", "FIXES_WITH_REDUCE_RETRACING", "NO_VARIABLE_CREATION", "Reason", "Trace",
    "VARIABLE_CREATION", "Node", "PER_REPLICA_FIX", "describe_per_replica", "diff_per_replica",
    "explain", "function_type_inputs", "make_trace", "node_of", "nodes_of", "parse_trace_type",
    "reasons_between", "TraceEvent", "capture_trace_events", "current_trace_event",
    "event_from_frame", "parse_trace_log_message", "SideEffect", "trace_time_effects",
    "FunctionTraces", "NameGroup", "STALE_READ_NOTE", "ScriptTraces", "cached_traces",
    "explain_records", "group_logged_traces", "name_groups", "trace_from_event", "trace_script",
    "RetraceProbe", "StaleRead", "RetraceError", "TraceExpectation", "expect_traces",
    "demonstrate_retracing",
]
