"""The one door to tf.function internals: its tracing frame, trace cache, clone and TraceTypes.

TF 2.21 has no public API for what the retrace tools read, so it is read here
and nowhere else (the rest of tflab calls these functions):

* the frame of ``tracing_compilation._maybe_define_function``
  (``tensorflow/python/eager/polymorphic_function/tracing_compilation.py``),
  whose locals are the call's FunctionType (``lookup_func_type``), the one TF
  traces (``target_func_type``), the TracingOptions and the FunctionContext
  (`tracing_frame`, `tracing_locals`);
* a ``Function``'s private state (``polymorphic_function.py``): its
  FunctionCache (``_function_cache``, an ordered map ``_primary`` of
  ``(FunctionContext, FunctionType) -> ConcreteFunction``,
  ``tensorflow/core/function/polymorphism/function_cache.py``), the
  per-instance copies of a method (``_descriptor_cache``), its options
  (``_jit_compile``, ``_reduce_retracing``), ``_created_variables`` and
  ``_clone``;
* TraceType and TypeSpec internals: ``Weakref._ref``
  (``core/function/trace_type/default_types.py``), ``TypeSpec._serialize``,
  ``PerReplicaSpec._value_specs`` (``python/distribute/values.py``), a value's
  ``_type_spec``, a distributed variable's ``_distributed_container``, and
  ``trace_type.from_value``.

Public equivalents are used where TF has them: ``tf.__internal__.decorator``
(``make_decorator``, ``unwrap``) for ``tf_decorator``,
``tf.__internal__.function.Function`` for the class, ``tf.distribute``'s
strategy and replica-context functions, ``f.function_type``.

The patches, `count_eager_calls` and `watch_calls`, are context managers that
restore ``Function.__call__`` (and ``get_concrete_function``) on exit, also
when the body raises. `install_trace_entry` wraps TF's trace entry point,
``tracing_compilation._create_concrete_function`` (called once per FuncGraph
TF builds, whatever the ``tensorflow`` logger's level or handlers), until its
``uninstall`` is called; it never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, NamedTuple

# (module, attribute path) of every private TF name used here; tests/house/test_tf_internals.py
# resolves each in the pinned TF, so an upgrade fails there with the name.
PRIVATE_NAMES = (
    ("tensorflow.python.eager.polymorphic_function.tracing_compilation", "_maybe_define_function"),
    ("tensorflow.python.eager.polymorphic_function.tracing_compilation", "TracingOptions"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function", "Function._clone"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function", "Function.__call__"),
    ("tensorflow.core.function.polymorphism.function_cache", "FunctionCache"),
    ("tensorflow.core.function.trace_type.default_types", "Weakref"),
    ("tensorflow.core.function.trace_type", "from_value"),
    ("tensorflow.python.framework.type_spec", "TypeSpec._serialize"),
    ("tensorflow.python.distribute.values", "PerReplicaSpec"),
    ("tensorflow.python.framework.ops", "_EagerTensorBase._num_elements"),
    ("tensorflow.python.framework.ops", "_EagerTensorBase._datatype_enum"),
    ("tensorflow.python.eager.polymorphic_function.tracing_compilation", "_create_concrete_function"),
    ("tensorflow.python.data.ops.structured_function", "StructuredFunctionWrapper.__init__"),
)

# Instance attributes (set in __init__, so not resolvable on the class): checked on a live
# tf.function / TraceType by tests/retrace/test_retrace_why.py::test_the_adapter_instance_names_exist.
INSTANCE_NAMES = (
    ("Function", "_function_cache"), ("Function", "_descriptor_cache"), ("Function", "_jit_compile"),
    ("Function", "_reduce_retracing"), ("Function", "_created_variables"),
    ("FunctionCache", "_primary"), ("Weakref", "_ref"), ("PerReplicaSpec", "_value_specs"),
)

TRACING_MODULE = "tensorflow.python.eager.polymorphic_function.tracing_compilation"
TRACE_ENTRY = "_create_concrete_function"
TRACING_FILE = os.path.join("polymorphic_function", "tracing_compilation.py")
DATA_FUNCTION_FILE = os.path.join("data", "ops", "structured_function.py")
FUNCTION_FILE = os.path.join("polymorphic_function", "polymorphic_function.py")


# ---------------------------------------------------------------------------
# The tracing frame
# ---------------------------------------------------------------------------


class TracingLocals(NamedTuple):
    """What TF's ``_maybe_define_function`` frame holds while it traces.

    Attributes:
        python_function: the Python function being traced (TracingOptions).
        lookup_type: the call's FunctionType.
        traced_type: the FunctionType TF traces: ``lookup_type``, or its
            ``FunctionCache.generalize`` under reduce_retracing.
        context: the FunctionContext (``scope_type``, ``context``).
        reduce_retracing: TracingOptions.reduce_retracing.
        input_signature: TracingOptions.input_signature is set.
    """

    python_function: Any
    lookup_type: Any
    traced_type: Any
    context: Any
    reduce_retracing: bool
    input_signature: bool


def tracing_frame(start: Any) -> Any:
    """The nearest ``tracing_compilation._maybe_define_function`` frame at or above ``start``, or None."""
    f = start
    for _ in range(200):
        if f is None:
            return None
        if f.f_code.co_name == "_maybe_define_function" and f.f_code.co_filename.endswith(TRACING_FILE):
            return f
        f = f.f_back
    return None


def tracing_locals(frame: Any) -> TracingLocals | None:
    """TF's structures from a ``_maybe_define_function`` frame, or None when its locals moved."""
    loc = frame.f_locals
    opts = loc.get("tracing_options")
    lookup = loc.get("lookup_func_type")
    ctx = loc.get("current_func_context")
    if opts is None or lookup is None:
        return None
    traced = loc.get("target_func_type")
    if traced is None:  # before the trace: what _maybe_define_function computes next
        traced = lookup
        cache = getattr(opts, "function_cache", None)
        if opts.input_signature is None and opts.reduce_retracing and cache is not None:
            try:
                traced = cache.generalize(ctx, lookup)  # pure: FunctionCache / TypeDispatchTable
            except Exception:
                traced = lookup
    return TracingLocals(opts.python_function, lookup, traced, ctx, bool(opts.reduce_retracing),
                         opts.input_signature is not None)


def function_frame(start: Any) -> tuple[Any, Any]:
    """(the tf.function object, its frame): ``self`` of the nearest polymorphic_function.py frame."""
    import tensorflow as tf

    cls = tf.__internal__.function.Function
    f = start
    for _ in range(80):
        if f is None:
            return None, None
        if f.f_code.co_filename.endswith(FUNCTION_FILE):
            obj = f.f_locals.get("self")
            if isinstance(obj, cls):
                return obj, f
        f = f.f_back
    return None, None


# ---------------------------------------------------------------------------
# A tf.function's own state
# ---------------------------------------------------------------------------


def is_tf_function(fn: Any) -> bool:
    """A ``tf.function`` object (TF's polymorphic ``Function``)."""
    import tensorflow as tf

    return isinstance(fn, (tf.types.experimental.PolymorphicFunction, tf.__internal__.function.Function))


def can_clone(fn: Any) -> bool:
    """``fn`` is a tf.function whose options `clone` can copy onto another Python function."""
    import tensorflow as tf

    return isinstance(fn, tf.__internal__.function.Function)


def clone(fn: Any, python_function: Callable) -> Any:
    """A new tf.function of ``python_function`` with every option of ``fn`` (TF's ``Function._clone``)."""
    return fn._clone(python_function=python_function)


def jit_compile(fn: Any) -> Any:
    """The tf.function's ``jit_compile`` option (True, False or None), or None for another object."""
    return getattr(fn, "_jit_compile", None)


def reduce_retracing(fn: Any) -> bool:
    """The tf.function's ``reduce_retracing`` option."""
    return bool(getattr(fn, "_reduce_retracing", False))


def created_variables(fn: Any) -> bool:
    """The tf.function's first call created tf.Variables (so later traces disallow creation)."""
    return bool(getattr(fn, "_created_variables", None))


def cache_keys(fn: Any) -> list[tuple[Any, Any]]:
    """The (FunctionContext, FunctionType) keys of a tf.function's trace cache, oldest first ([] if unreadable)."""
    primary = getattr(getattr(fn, "_function_cache", None), "_primary", None)
    try:
        return list(primary.keys()) if primary is not None else []
    except Exception:  # TF internals moved: no earlier traces to compare with
        return []


def cache_items(fn: Any) -> list[tuple[Any, Any]]:
    """((FunctionContext, FunctionType), ConcreteFunction) of a tf.function's trace cache, oldest first."""
    primary = getattr(getattr(fn, "_function_cache", None), "_primary", None)
    try:
        return list(primary.items()) if primary is not None else []
    except Exception:  # TF internals moved
        return []


def function_cache(fn: Any) -> Any:
    """A tf.function's FunctionCache (``Function._function_cache``), or None when ``fn`` has none."""
    return getattr(fn, "_function_cache", None)


def cache_size(fn: Any) -> int | None:
    """Entries in the tf.function's trace cache (``experimental_get_tracing_count``), or None."""
    cache = getattr(fn, "_function_cache", None)
    return len(cache) if cache is not None else None


def last_cache_entry(fn: Any) -> Any:
    """The newest (FunctionContext, FunctionType) key of the trace cache, or None."""
    try:
        return next(reversed(fn._function_cache._primary))
    except Exception:
        return None


def context_fields(function_context: Any) -> dict[str, str] | None:
    """``{field: repr}`` of a FunctionContext's ``context``: TF 2.21's ``function_context.EagerContext``
    (parent_graph, device_functions, colocation_stack, in_cross_replica_context, variable_policy,
    xla_context_id), the part of the trace cache key beside the FunctionType; None when not a NamedTuple."""
    inner = getattr(function_context, "context", None)
    fields = getattr(inner, "_fields", None)
    if not fields:
        return None
    return {f: repr(getattr(inner, f)) for f in fields}


def method_instances(fn: Any) -> list[Any]:
    """The per-instance tf.functions TF made for a ``@tf.function`` method (``Function.__get__``)."""
    cache = getattr(fn, "_descriptor_cache", None)
    try:
        return [f for f in list(cache.values()) if hasattr(f, "experimental_get_tracing_count")]
    except Exception:
        return []


def make_decorator(target: Callable, wrapper: Callable, name: str) -> Callable:
    """``wrapper`` as a TF decorator of ``target`` (AutoGraph unwraps it and converts ``target``)."""
    import tensorflow as tf

    return tf.__internal__.decorator.make_decorator(target, wrapper, decorator_name=name)


_DTYPE_BYTES: dict = {}


def eager_nbytes(t: Any) -> int:
    """Bytes of an EagerTensor's buffer, on a probe call's hot path (about 1 us).

    TF's ``_num_elements`` and ``_datatype_enum`` read the C tensor directly;
    the public ``t.shape.num_elements() * t.dtype.size`` builds a TensorShape
    and a DType each call (several times slower).
    """
    e = t._datatype_enum()
    size = _DTYPE_BYTES.get(e)
    if size is None:
        size = _DTYPE_BYTES[e] = t.dtype.size
    return t._num_elements() * size


def unwrap(fn: Any) -> Any:
    """The innermost target of TF decorators on ``fn`` (``fn`` itself when undecorated)."""
    import tensorflow as tf

    return tf.__internal__.decorator.unwrap(fn)[1]


def method_target_freed(python_function: Any) -> bool:
    """A tf.function method's Python function whose instance (TF's TfMethodTarget weak reference) is gone."""
    try:
        holder = getattr(unwrap(python_function), "__self__", None)
        return type(holder).__name__ == "TfMethodTarget" and holder.target is None
    except Exception:
        return False


def method_instance(fn: Any) -> Any:
    """The instance a tf.function method is bound to (through TF's TfMethodTarget), or None."""
    try:
        target = unwrap(getattr(fn, "python_function", None))
        holder = getattr(target, "__self__", None)
        # A method decorated in its class: TF binds it to a TfMethodTarget holding a
        # weak reference to the instance (polymorphic_function.class_method_to_instance_method).
        return holder.target if type(holder).__name__ == "TfMethodTarget" else holder
    except Exception:
        return None


@contextlib.contextmanager
def count_eager_calls(on_call: Callable[[Any], None]) -> Iterator[None]:
    """Calls ``on_call(fn)`` for every eager call of any tf.function ``fn`` inside the block.

    TF has no call hook: its own per-call statistics
    (``polymorphic_function._frequent_tracing_detector_manager``) keep only a
    window of the last calls. So ``Function.__call__`` is wrapped for the
    block and restored on exit (also when the block raises). Like TF's
    detector, a call made while tracing another tf.function is not counted.

    Args:
        on_call: called with the Function object before the call; must not raise.
    """
    import tensorflow as tf

    cls = tf.__internal__.function.Function
    original = cls.__dict__["__call__"]

    def __call__(self, *args, **kwargs):
        if tf.executing_eagerly():
            try:
                on_call(self)
            except Exception:  # counting must never break the user's program
                pass
        return original(self, *args, **kwargs)

    cls.__call__ = __call__
    try:
        yield
    finally:
        cls.__call__ = original


@contextlib.contextmanager
def watch_calls(on_enter: Callable[[Any], None], on_exit: Callable[[Any], None]) -> Iterator[None]:
    """Calls ``on_enter(fn)`` before and ``on_exit(fn)`` after every call of any tf.function ``fn`` in the block.

    Every call, eager or made while another tf.function traces, of
    ``Function.__call__`` and ``Function.get_concrete_function``: the two entry
    points that can trace (``polymorphic_function.py``). ``on_exit`` runs also
    when the call raises. The clock of trace time
    (`tflab.retrace.event.TraceClock`) uses it: a trace ends when the call that
    started it returns (its FuncGraph traced, instantiated and run once).
    Both methods are restored on exit, also when the block raises; nested
    blocks (and `count_eager_calls`) restore in LIFO order.

    Args:
        on_enter: called with the Function object before the call; must not raise.
        on_exit: called with it after the call, in a ``finally``; must not raise.
    """
    import tensorflow as tf

    cls = tf.__internal__.function.Function
    originals = {name: cls.__dict__[name] for name in ("__call__", "get_concrete_function")}

    def wrap(original: Callable) -> Callable:
        def watched(self, *args, **kwargs):
            try:
                on_enter(self)
            except Exception:  # timing must never break the user's program
                pass
            try:
                return original(self, *args, **kwargs)
            finally:
                try:
                    on_exit(self)
                except Exception:
                    pass

        watched.__name__ = original.__name__
        watched.__doc__ = original.__doc__
        return watched

    for name, original in originals.items():
        setattr(cls, name, wrap(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(cls, name, original)


# ---------------------------------------------------------------------------
# TraceType and TypeSpec internals
# ---------------------------------------------------------------------------


def weakref_target(trace_type: Any) -> Any:
    """The object a ``Weakref`` TraceType refers to, or None once it was collected."""
    return trace_type._ref()


def is_per_replica_spec(spec: Any) -> bool:
    """True for a ``PerReplicaSpec`` (the TypeSpec of a PerReplica value)."""
    from tensorflow.python.distribute import values as values_lib

    return isinstance(spec, values_lib.PerReplicaSpec)


def per_replica_components(spec: Any) -> tuple:
    """The per-replica TypeSpecs of a ``PerReplicaSpec``."""
    return tuple(spec._value_specs)


def make_per_replica_spec(components: Any) -> Any:
    """A ``PerReplicaSpec`` of these per-replica TypeSpecs."""
    from tensorflow.python.distribute import values as values_lib

    return values_lib.PerReplicaSpec(*components)


def has_serialization(value: Any) -> bool:
    """A TypeSpec (or TraceType) that `type_spec_fields` can read."""
    return hasattr(value, "_serialize")


def type_spec_fields(spec: Any) -> Any:
    """``TypeSpec._serialize()``: the fields that make a TypeSpec (an ExtensionType's included)."""
    return spec._serialize()


def value_type_spec(value: Any) -> Any:
    """The TypeSpec of a composite value (RaggedTensor, SparseTensor, a PerReplica value), or None."""
    return getattr(value, "_type_spec", None)


def distributed_container(variable: Any) -> Any:
    """The distributed variable (MirroredVariable…) a component variable belongs to, or None."""
    ref = (getattr(getattr(variable, "handle", None), "_distributed_container", None)
           or getattr(variable, "_distributed_container", None))
    return ref() if callable(ref) else None


def trace_type_of(value: Any) -> Any:
    """TF's TraceType of a Python value (``trace_type.from_value``); raises TypeError if it has none."""
    from tensorflow.core.function import trace_type

    return trace_type.from_value(value)


# ---------------------------------------------------------------------------
# TF's trace entry point (one FuncGraph built per call)
# ---------------------------------------------------------------------------


def install_trace_entry(on_start: Callable[[Any], Any],
                        on_end: Callable[[Any, bool], None]) -> Callable[[], None] | None:
    """Wraps ``tracing_compilation._create_concrete_function``: ``on_start(frame)`` / ``on_end(token, ok)`` per trace.

    ``_maybe_define_function`` calls it once for every FuncGraph it builds
    (after its cache lookup missed), and never on a cached call; ``frame`` is
    that ``_maybe_define_function`` frame (`tracing_locals`, `function_frame`
    read it). ``on_end`` runs when the FuncGraph is built and its
    ConcreteFunction made (``ok`` True) or the trace raised (``ok`` False),
    only for a start that returned a token other than None. Neither may break
    the trace: what they raise is dropped. Unlike TF's level-1 "Creating new
    FuncGraph" record, no logger setting (``caplog.at_level``, ``assertLogs``)
    can hide this point.

    Args:
        on_start: called with TF's tracing frame as the trace starts; returns a token or None.
        on_end: called with that token and whether the FuncGraph was built.

    Returns:
        ``uninstall()`` (restores TF's function if the wrapper is still in place, and
        turns the wrapper into a pass-through otherwise), or None when TensorFlow's
        tracing module is not loaded (nothing is imported here).
    """
    import sys
    import types

    module = sys.modules.get(TRACING_MODULE)
    if not isinstance(module, types.ModuleType):
        return None
    original = vars(module).get(TRACE_ENTRY)
    if original is None:
        return None
    active = [True]

    def wrapper(*args, **kwargs):
        token = None
        if active[0]:
            try:
                # TF's _maybe_define_function frame: the caller, or above another wrapper of
                # this entry point (an outer session's, a user's own counter)
                token = on_start(tracing_frame(sys._getframe(1)))
            except Exception:  # counting must never break the user's trace
                token = None
        ok = False
        try:
            result = original(*args, **kwargs)
            ok = True
            return result
        finally:
            if token is not None:
                try:
                    on_end(token, ok)
                except Exception:
                    pass

    wrapper.__name__ = original.__name__
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original
    setattr(module, TRACE_ENTRY, wrapper)

    def uninstall() -> None:
        active[0] = False
        if vars(module).get(TRACE_ENTRY) is wrapper:
            setattr(module, TRACE_ENTRY, original)

    return uninstall


def data_function(frame: Any) -> tuple[Any, str] | None:
    """(the user's function, ``"Dataset.map()"``) when the trace in ``frame`` is a tf.data function's.

    tf.data traces a ``map``/``filter``/... function through
    ``structured_function.StructuredFunctionWrapper.__init__``, whose locals
    are the user's ``func`` and the ``transformation_name``; None for any other trace.
    """
    f = frame
    for _ in range(40):
        if f is None:
            return None
        code = f.f_code
        if code.co_name == "__init__" and code.co_filename.endswith(DATA_FUNCTION_FILE):
            loc = f.f_locals
            return loc.get("func"), str(loc.get("transformation_name") or "")
        f = f.f_back
    return None
