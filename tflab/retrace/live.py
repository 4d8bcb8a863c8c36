"""Traces explained as they happen: a `Trace` from TF's `TraceEvent`, and a tf.function's cached traces.

`trace_from_event` turns one `TraceEvent` (TF's trace-time record) into a
`Trace` with its reasons against the earlier ones (`tflab.retrace.diff`);
`LiveExplainer` does it at trace time for every tf.function a block traces
(`capture_explained`), with each function's configuration and its trace-time
side effects; `explain_records` does it afterwards for recorded events;
`cached_traces` reads a tf.function's trace cache, the baseline later traces
are compared with. `tflab.retrace.log` groups them per object and name, and
re-exports these names.
"""

from __future__ import annotations

import types
from typing import Any, Callable, Sequence

from tflab._tf import function as _tf
from tflab._user.usercode import is_library_file, library_of
from tflab.retrace.diff import function_type_inputs, make_trace, nodes_of
from tflab.retrace.event import TraceEvent, capture_trace_events
from tflab.retrace.records import Trace
from tflab.retrace.sideeffects import SideEffect, trace_time_effects, user_function


def is_tf_internal(t: TraceEvent) -> bool:
    """TF's own helpers (variable initializers, tf.data wrappers) are not the user's functions.

    Judged by location (`tflab._user.usercode.library_of`): the traced Python
    function's code file lies in the installed TensorFlow package. A user's
    module named ``tensorflow_helpers`` (or ``tensorflow_probability``) is not
    TensorFlow. Only an event without its function object (a saved log's text)
    falls back to the module name, ``tensorflow`` or ``tensorflow.*``.
    """
    if t.function.startswith(("Function._initialize_uninitialized_variables", "StructuredFunctionWrapper.")):
        return True
    filename = code_file(t.function_object())
    if filename:
        return library_of(filename) == "tensorflow"
    return t.module == "tensorflow" or t.module.startswith("tensorflow.")


def code_file(fn: Any) -> str:
    """The code file of a tf.function's Python function (``co_filename``), or "" when it has none."""
    if fn is None:
        return ""
    try:
        import inspect

        # TF's decorators, then functools.wraps chains (Keras wraps its steps in AutoGraph's
        # do_not_convert, whose wrapper lives in TF's folder)
        body = inspect.unwrap(_tf.unwrap(getattr(fn, "python_function", fn)))
        body = getattr(body, "__func__", body)
        return getattr(getattr(body, "__code__", None), "co_filename", "") or ""
    except Exception:
        return ""

def trace_from_event(event: TraceEvent, index: int, previous: Sequence[Trace],
                     previous_contexts: Sequence[str | None] = (), *, call: int = 0,
                     kind: str | None = None, reduce_retracing: bool = False,
                     outcome_known: bool = True, error: str | None = None) -> Trace:
    """The `Trace` of one `TraceEvent`: its reasons diffed from the event's FunctionTypes.

    Every consumer (the probe, the log path, `expect_traces`) turns an event
    into a Trace here, so one script gives the same reasons either way.
    """
    structured = event.nodes is not None
    return make_trace(index, event.nodes if structured else event.inputs, previous,
                      scope=event.scope, context=event.context_fields or event.context,
                      previous_contexts=previous_contexts,
                      traced_as=event.traced_nodes if structured else None,
                      inputs_text=event.inputs,
                      traced_text=(function_type_inputs(event.traced_type)
                                   if structured and event.relaxed else None),
                      call=call, kind=kind,
                      reduce_retracing=reduce_retracing or event.reduce_retracing,
                      outcome_known=outcome_known, error=error, options=event.options,
                      site=event.site)


class LiveExplainer:
    """An ``on_event`` for `capture_trace_events`: explains each event as TF starts its trace.

    Keeps each tf.function object's traces, seeded with what its trace cache
    held at its first event (`cached_traces`), and stores the `Trace` in
    ``event.explained``. Diffing then, not after the block, judges an
    argument object alive or collected as TF did when it looked the call up.
    """

    def __init__(self, calls: dict | None = None, side_effects: bool = True) -> None:
        # {event key: eager calls so far} (`trace_script`'s counter): a trace's call number
        self.calls = calls
        self._history: dict[Any, tuple[list[Trace], list[str | None]]] = {}
        # key -> the body's trace-time side effects, read while the tf.function is alive
        self.effects: dict[Any, list[SideEffect]] = {}
        # key -> the Python function of an object that retraced, kept for checking its fixes
        # (`tflab.retrace.check`); qualname -> the latest object's, for a name many objects share
        self.bodies: dict[Any, Any] = {}
        self.latest: dict[str, Any] = {}
        # key -> what configures the object: its instance's attributes or its closure's values
        self.configs: dict[Any, tuple[str, dict]] = {}
        self._side_effects = side_effects  # False: not read (the pytest plugin reports none)

    def __call__(self, event: TraceEvent) -> None:
        if event.nodes is None or event.key is None or is_tf_internal(event):
            return
        hist = self._history.get(event.key)
        if hist is None:
            fn = event.function_object()
            prior, contexts = cached_traces(fn) if fn is not None else ([], [])
            hist = self._history[event.key] = (list(prior), list(contexts))
            self.effects[event.key] = _user_effects(fn) if self._side_effects else []
            self.configs[event.key] = _configuration(fn)
        traces, contexts = hist
        call = self.calls.get(event.key, 0) if self.calls is not None else 0
        t = trace_from_event(event, len(traces) + 1, traces, contexts, outcome_known=False, call=call)
        fn = event.function_object()
        body = getattr(fn, "python_function", None) if fn is not None else None
        if body is not None:
            self.latest[event.function] = body
            if t.kind not in ("first", "variable_creation", "cached"):
                self.bodies[event.key] = body
        traces.append(t)
        contexts.append(event.context_fields or event.context)
        event.explained.append(t)


_SIMPLE = (bool, int, float, str, bytes, type(None))


def _variable_value(v: Any) -> str | None:
    """A tf.Variable attribute's value as configuration (two instances holding their
    own variables, 1.0 and 2.0, were told to share one tf.function, which computes with one of them).

    Small variables by value, larger ones by a digest of their bytes; read in TF's eager init scope
    (this runs while a FuncGraph is being traced). None for anything that is not a variable.
    """
    if not (hasattr(v, "assign") and hasattr(v, "read_value") and hasattr(v, "dtype") and hasattr(v, "shape")):
        return None
    try:
        import hashlib

        import numpy as np
        import tensorflow as tf

        with tf.init_scope():
            a = np.asarray(v.numpy())
        if a.size <= 8:
            return f"tf.Variable({a.tolist()!r}, {a.dtype})"
        return f"tf.Variable(shape {a.shape}, {a.dtype}, sha1 {hashlib.sha1(a.tobytes()).hexdigest()[:10]})"
    except Exception:  # a help only
        return None


def _configuration(fn: Any) -> tuple[str, dict]:
    """("instance", {attribute: repr}) of a method's instance, or ("closure", {name: repr}) of a closure.

    Only plain values (numbers, strings, bools, None, tuples of them) are kept:
    two objects that differ there compute different graphs.
    """
    def simple(v: Any) -> bool:
        return isinstance(v, _SIMPLE) or (isinstance(v, tuple) and all(isinstance(x, _SIMPLE) for x in v))

    try:
        instance = _tf.method_instance(fn)
        if instance is not None and not isinstance(instance, (type, types.ModuleType)):
            attrs = getattr(instance, "__dict__", {}) or {}
            out = {k: repr(v) for k, v in attrs.items() if not k.startswith("_") and simple(v)}
            out.update({k: text for k, v in attrs.items() if not k.startswith("_")
                        for text in [_variable_value(v)] if text is not None})
            return "instance", out
        body = user_function(fn)
        cells = getattr(body, "__closure__", None) or ()
        names = getattr(getattr(body, "__code__", None), "co_freevars", ())
        out = {}
        for n, c in zip(names, cells):
            try:
                v = c.cell_contents
            except ValueError:
                continue
            if simple(v):
                out[n] = repr(v)
        return "closure", out
    except Exception:  # a help only
        return "", {}


def _user_effects(fn: Any) -> list[SideEffect]:
    """`trace_time_effects` of a tf.function's body when it is the user's code (not TF's or Keras's)."""
    if fn is None:
        return []
    try:
        body = user_function(fn)
        filename = getattr(getattr(body, "__code__", None), "co_filename", "")
        if not filename or filename.startswith("<frozen ") or is_library_file(filename):
            return []
        return trace_time_effects(body)
    except Exception:  # the listing is a help; an odd callable must not stop the report
        return []




def capture_explained(explainer: "LiveExplainer | None" = None,
                      identify: Callable[[Any], Any] | None = None) -> Any:
    """`capture_trace_events` with a `LiveExplainer`: the events come with their `Trace`."""
    return capture_trace_events(on_event=explainer or LiveExplainer(), identify=identify)


def explain_records(records: Sequence[TraceEvent], prior: Sequence[Trace] = (),
                    prior_contexts: Sequence[str | None] = (),
                    reduce_retracing: bool = False) -> list[Trace]:
    """Explains the logged traces of ONE tf.function object, after its ``prior`` traces.

    Args:
        records: that object's records, in trace order.
        prior: traces the object made before the records (`cached_traces`);
            the new traces are numbered after them and compared with them too.
        prior_contexts: the FunctionContext ``context`` text of each prior trace.
        reduce_retracing: the function has ``reduce_retracing=True``.

    Returns:
        One `Trace` per record (the prior ones are not repeated).
    """
    # Explained at trace time (`LiveExplainer`) after the same prior traces: use that.
    if records and all(r.explained for r in records) and \
            records[0].explained[0].index == len(prior) + 1:
        return [r.explained[0] for r in records]
    traces: list[Trace] = list(prior)
    contexts: list[str | None] = list(prior_contexts) + [None] * (len(prior) - len(prior_contexts))
    for rec in records:
        traces.append(trace_from_event(rec, len(traces) + 1, traces, contexts,
                                       reduce_retracing=reduce_retracing, outcome_known=False))
        contexts.append(rec.context_fields or rec.context)
    return traces[len(prior):]

def cached_traces(fn: Any, keys: Sequence[tuple[Any, Any]] | None = None) -> tuple[list[Trace], list[str]]:
    """The traces a tf.function already holds in its trace cache, as `Trace` records.

    TF 2.21's ``FunctionCache`` (``tensorflow/core/function/polymorphism/
    function_cache.py``) is an ordered map ``(FunctionContext, FunctionType)
    -> ConcreteFunction``; ``experimental_get_tracing_count()`` is its length.
    The FunctionTypes are the ones TF traced (relaxed by
    ``reduce_retracing``), oldest first; traces that raised are not cached.
    The records are the baseline later traces are compared with: their kind
    is "cached" and they carry no reasons of their own.

    Args:
        fn: a `tf.function`.
        keys: the cache keys read earlier (`tflab._tf.function.cache_keys`); read now when None.

    Returns:
        (traces numbered from 1, the FunctionContext ``context`` text of each).
        Both empty when the cache cannot be read.
    """
    traces: list[Trace] = []
    contexts: list[str] = []
    for ctx, ftype in (_tf.cache_keys(fn) if keys is None else keys):
        scope = getattr(getattr(ctx, "scope_type", None), "name", None)
        nodes = nodes_of(ftype)
        traces.append(Trace(index=len(traces) + 1, kind="cached", reasons=[], fixes=[],
                            inputs=function_type_inputs(ftype), scope=scope,
                            labels=tuple((n, c.label) for n, c in nodes.items()),
                            nodes=nodes, traced_nodes=nodes))
        contexts.append(_tf.context_fields(ctx) or repr(getattr(ctx, "context", None)))
    return traces, contexts
