"""Lab step 2, one import for all of it: `RetraceProbe`, `expect_traces`, `RetraceError`, ….

The retrace code is four modules, one concern each, imported bottom-up:

* `tflab.retrace_reasons`: the `Trace`/`Reason` records, the FIXES table, the
  TraceType text parser and the `explain` engine (imports no other part);
* `tflab.retrace_probe`: `RetraceProbe` and its `StaleRead` records;
* `tflab.retrace_log`: TF's "Creating new FuncGraph" log records
  (`capture_trace_log`, `parse_trace_log_message`, `group_logged_traces`,
  `cached_traces`) and the script runner behind ``tflab retrace``
  (`trace_script`);
* `tflab.retrace_expect`: `expect_traces` and `RetraceError`.

This module re-exports every name the single ``tflab/retrace.py`` had (public
and private, so ``tflab.retrace.X`` keeps working); it holds no code of its
own, and no tflab module imports it (it would pull in all four parts). A name
set on it is set on the part that uses it too.
"""

from __future__ import annotations

from tflab import _facade, retrace_expect, retrace_log, retrace_probe, retrace_reasons
from tflab.retrace_reasons import (  # noqa: F401
    describe_per_replica, diff_per_replica, explain, FIXES, FIXES_WITH_REDUCE_RETRACING,
    function_type_inputs, make_trace, NO_VARIABLE_CREATION, parse_trace_type, PER_REPLICA_FIX,
    reasons_between,
    Reason, Trace, TRACE_TYPE_HOOKS, TraceTypeHook, VARIABLE_CREATION, _Candidate, _child_path,
    _CLOSE, _describe, _diff, _dims, _explain, _failure_reasons, _hook, _kind_label, _Node,
    _OPEN, _param_reasons, _ranked_candidates, _reason, _short_name, _short_type,
    _SINGLETON_VARIABLE, _split_top, _STRUCTURE_KINDS, _TENSOR_RE, _WEAKREF_FIX, _WEAKREF_TO)
from tflab.retrace_probe import (  # noqa: F401
    RetraceProbe, StaleRead, _BY_IDENTITY, _closure_cells, _code_names,
    _innermost_python_function, _is_watchable, _MISSING, _same, _SCALARS, _value_repr)
from tflab.retrace_log import (  # noqa: F401
    cached_traces, capture_trace_log, explain_records, FunctionTraces, group_logged_traces,
    LoggedTrace, parse_trace_log_message, ScriptTraces, STALE_READ_NOTE, trace_script,
    _cache_keys, _CONTEXT_RE, _FUNC_REPR, _function_owner, _group_key, _is_tf_internal,
    _LOG_PREFIX, _logged_trace_from_record, _PARAM_LINE, _PropagateFrom, _SCOPE_RE,
    _TraceLogHandler, _tracing_function_object)
from tflab.retrace_expect import (  # noqa: F401
    expect_traces, RetraceError, TraceExpectation, _ExpectTraces, _FunctionWatch,
    _method_instances, _no_probe_call_error, _retrace_message)

_facade.forward_writes(__name__, (retrace_reasons, retrace_probe, retrace_log, retrace_expect))
