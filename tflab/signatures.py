"""Lab step 4: stabilize a tf.function with an input_signature.

A `tf.function` without ``input_signature`` keys its trace cache by the
FunctionType of each call: a tensor argument's TraceType is its TensorSpec
with the exact shape, so every new batch size is a new trace (the classic
retrace on a `tf.data` pipeline whose last batch is smaller). An
``input_signature`` with ``None`` dims fixes the FunctionType up front: one
trace serves every shape that the signature admits
(``tensorflow/python/eager/polymorphic_function/polymorphic_function.py``,
``function_type_utils.py``).

``reduce_retracing=True`` is TF's automatic alternative: on 2.21 the first
call traces the exact shape, and the next call with another shape traces a
generalized FunctionType with the differing dims relaxed to ``None``
(``TraceType.most_specific_common_supertype`` in
``tensorflow/core/function/trace_type``). `stabilization_report` measures the
three side by side.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Sequence

from tflab._tf import function as _tf
from tflab._user.usercode import user_entry
from tflab.errors import UsageError


def _as_call(example: Any) -> tuple:
    """An example is a tuple of positional arguments, or one positional argument."""
    return tuple(example) if isinstance(example, tuple) else (example,)


def examples_list(examples: Any) -> list[tuple]:
    import tensorflow as tf

    if examples is None:
        return []
    if isinstance(examples, (tf.data.Dataset, tf.distribute.DistributedDataset)):
        return [_as_call(e) for e in examples]
    if not isinstance(examples, (list, tuple)) or hasattr(examples, "shape"):
        raise UsageError("examples must be a list of example calls (each a tuple of positional "
                         f"arguments, or one argument) or a tf.data.Dataset, got {type(examples).__name__}")
    return [_as_call(e) for e in examples]


def _leaf_spec(value: Any, where: str):
    import numpy as np
    import tensorflow as tf

    if isinstance(value, tf.TypeSpec):
        return value
    if isinstance(value, (tf.Tensor, tf.Variable, np.ndarray)):
        return tf.TensorSpec(value.shape, tf.as_dtype(value.dtype))
    if isinstance(value, tf.distribute.DistributedValues):  # PerReplica: a PerReplicaSpec
        return _tf.value_type_spec(value)
    if isinstance(value, (tf.RaggedTensor, tf.SparseTensor)) or _is_composite(value):
        # A RaggedTensor/SparseTensor (any CompositeTensor) has its own TypeSpec, which an
        # input_signature accepts: RaggedTensorSpec, SparseTensorSpec (type_spec.py).
        return tf.type_spec_from_value(value)
    raise UsageError(f"{where} is a Python {type(value).__name__} ({value!r:.40}); an input_signature "
                     "describes tensors only: pass it as a tensor (tf.constant) or bind it with "
                     "functools.partial before stabilizing")


def _is_composite(value: Any) -> bool:
    import tensorflow as tf

    return isinstance(value, tf.__internal__.CompositeTensor)


def is_per_replica_spec(spec: Any) -> bool:
    """True for a ``PerReplicaSpec`` (the TypeSpec of a PerReplica value, ``values.py``)."""
    return _tf.is_per_replica_spec(spec)


def relax_spec(a: Any, b: Any, relax_leaf: Callable[[Any, Any], Any]) -> Any:
    """The ``PerReplicaSpec`` whose components are ``relax_leaf`` of ``a``'s and ``b``'s.

    Used by `infer_input_signature`: per-replica batches 2, 2,
    1 relax to ``PerReplicaSpec(TensorSpec([None, 4]), TensorSpec([None, 4]))``,
    the same as ``dist_dataset.element_spec``.

    Raises:
        UsageError: different numbers of replicas, or a spec that is not a PerReplicaSpec.
    """
    if not (_tf.is_per_replica_spec(a) and _tf.is_per_replica_spec(b)):
        raise UsageError(f"examples mix a distributed value with a tensor ({type(a).__name__} vs "
                         f"{type(b).__name__}); give every example from the same distributed dataset")
    ca, cb = _tf.per_replica_components(a), _tf.per_replica_components(b)
    if len(ca) != len(cb):
        raise UsageError(f"examples have {len(ca)} and {len(cb)} replicas; use one strategy for all")
    return _tf.make_per_replica_spec([relax_leaf(x, y) for x, y in zip(ca, cb)])


def _relax(a, b):
    import tensorflow as tf

    if is_per_replica_spec(a) or is_per_replica_spec(b):  # relaxed per replica
        return relax_spec(a, b, _relax)
    if type(a) is not type(b):
        raise UsageError(f"examples mix {type(a).__name__} and {type(b).__name__} for one input; an "
                         "input_signature has one TypeSpec per input: pass the same kind of tensor every time")
    if a.dtype != b.dtype:
        raise UsageError(f"examples disagree on dtype ({a.dtype.name} vs {b.dtype.name}); an input_signature "
                         "has one dtype per input: cast the inputs to one dtype first")
    if not isinstance(a, tf.TensorSpec):
        # RaggedTensorSpec, SparseTensorSpec, ...: TF's own relaxation, the TraceType supertype
        # (RaggedTensorSpec keeps ragged_rank and row_splits_dtype and relaxes the dims).
        common = a.most_specific_common_supertype([b])
        if common is None:
            raise UsageError(f"examples have incompatible {type(a).__name__}s ({a} vs {b}), e.g. a different "
                             "ragged_rank; give every example the same kind of tensor")
        return common
    if a.shape.rank != b.shape.rank:
        return tf.TensorSpec(None, a.dtype, a.name)
    dims = [da if da == db else None for da, db in zip(a.shape.as_list(), b.shape.as_list())]
    return tf.TensorSpec(dims, a.dtype, a.name)


def infer_input_signature(examples: Iterable[Any], names: Sequence[str] | None = None) -> tuple:
    """Infers an input_signature from example calls, relaxing every varying dim to None.

    Args:
        examples: a list of example calls, each a tuple of positional arguments
            (or one argument), or a `tf.data.Dataset` whose elements are calls.
            Arguments are tensors, numpy arrays, RaggedTensors, SparseTensors
            (their RaggedTensorSpec/SparseTensorSpec) or nests (dicts, tuples) of them.
        names: parameter names, used as TensorSpec names (optional).

    Returns:
        A tuple with one `tf.TensorSpec` nest per positional argument: the
        dims that are equal in every example are kept, the others are None.
        For a `tf.data.Dataset`, a dim its ``element_spec`` leaves None is
        None too (e.g. the batch dim of ``batch(32)`` without
        ``drop_remainder``, even when every batch seen had 32); for a
        distributed dataset, per replica. When no dim
        varies, every dim stays fixed: `stabilize` warns about that
        (`FixedShapeWarning`).

    Raises:
        UsageError: no examples, examples with different numbers of arguments or
            structures, a dtype that varies, or a Python (non-tensor) argument.

    Example:

    >>> infer_input_signature([tf.zeros([4, 8]), tf.zeros([2, 8])])
    (TensorSpec(shape=(None, 8), dtype=tf.float32, name=None),)
    """
    calls = examples_list(examples)
    if names is not None:
        from tflab._api.argcheck import check_str_sequence

        names = check_str_sequence(names, "names", "infer_input_signature")
        if calls and len(names) != len(calls[0]):  # zip() cut the signature to the names, or dropped names
            raise UsageError(f"infer_input_signature: {len(names)} names {names} for {len(calls[0])} argument(s) "
                             f"per example; give one name per argument, or names=None")
    return _infer(calls, names, dataset_element_spec(examples))


def dataset_element_spec(examples: Any) -> Any:
    import tensorflow as tf

    # A DistributedDataset's element_spec is per replica (PerReplicaSpec): what every
    # step can be given, e.g. a batch that leaves one replica short.
    return (examples.element_spec
            if isinstance(examples, (tf.data.Dataset, tf.distribute.DistributedDataset)) else None)


def _relax_to_element_spec(spec: Any, element: Any) -> Any:
    """``spec`` with None wherever the dataset's element_spec has None (per replica too)."""
    import tensorflow as tf

    if is_per_replica_spec(spec) and is_per_replica_spec(element) \
            and len(_tf.per_replica_components(spec)) == len(_tf.per_replica_components(element)):
        return _tf.make_per_replica_spec([_relax_to_element_spec(a, b) for a, b in
                                          zip(_tf.per_replica_components(spec),
                                              _tf.per_replica_components(element))])
    if not (isinstance(spec, tf.TensorSpec) and isinstance(element, tf.TensorSpec)):
        return spec
    if element.shape.rank is None:
        return tf.TensorSpec(None, spec.dtype, spec.name)
    if spec.shape.rank != element.shape.rank:
        return spec
    return tf.TensorSpec([None if e is None else d for d, e in zip(spec.shape.as_list(), element.shape.as_list())],
                         spec.dtype, spec.name)


def _infer(calls: list[tuple], names: Sequence[str] | None, element_spec: Any = None) -> tuple:
    import tensorflow as tf

    if not calls:
        raise UsageError("no examples to infer an input_signature from; pass examples=[...] "
                         "or input_signature=[tf.TensorSpec(...)]")
    arity = len(calls[0])
    sig = None
    for k, call in enumerate(calls):
        if len(call) != arity:
            raise UsageError(f"example {k} has {len(call)} arguments, example 0 has {arity}; "
                             "every example must call the function the same way")
        specs = []
        for i, arg in enumerate(call):
            label = names[i] if names and i < len(names) else f"argument {i}"
            specs.append(tf.nest.map_structure(
                lambda v, label=label: _leaf_spec(v, f"{label} of example {k}"), arg))
        if sig is None:
            sig = specs
            continue
        try:
            sig = [tf.nest.map_structure(_relax, s, n) for s, n in zip(sig, specs)]
        except (ValueError, TypeError) as e:
            if isinstance(e, UsageError):
                raise
            raise UsageError(f"example {k} is nested differently from example 0 (different dict keys, "
                             "list lengths or nesting); an input_signature fixes the structure of every "
                             "input, so give every example the same structure") from None
    if element_spec is not None:
        elements = _as_call(element_spec)
        if len(elements) == len(sig):
            try:
                sig = [tf.nest.map_structure(_relax_to_element_spec, s, e) for s, e in zip(sig, elements)]
            except (ValueError, TypeError):
                pass  # the calls' structure is not the element's: keep what the examples say
    if names:
        # a name per parameter that has one; arguments past the names (*args) keep their specs
        sig = [tf.TensorSpec(s.shape, s.dtype, names[i]) if isinstance(s, tf.TensorSpec) and i < len(names) else s
               for i, s in enumerate(sig)]
    return tuple(sig)


class FixedShapeWarning(UserWarning):
    """`stabilize` inferred an input_signature in which no dim varies (every example had one shape)."""


def _fixed_dims_message(signature: Sequence[Any], n_examples: int) -> str | None:
    """Why an inferred signature with no None dim will fail on another shape, or None.

    When every example has the same shapes (or there is one example),
    `infer_input_signature` has nothing to relax: the signature pins every
    dim, e.g. the batch dim at 32, and a smaller last batch then fails TF's
    input binding (``TypeError: Binding inputs to tf.function failed …``,
    ``function_type_utils.canonicalize_function_inputs``).
    """
    import tensorflow as tf

    leaves = [s for s in tf.nest.flatten(list(signature)) if isinstance(s, tf.TensorSpec)]
    if not leaves or any(s.shape.rank is None or None in s.shape.as_list() for s in leaves):
        return None
    shaped = [s for s in leaves if s.shape.rank]
    if not shaped:  # scalars only: nothing to vary
        return None
    fixed = ", ".join(f"{s.name or f'input {i}'} {tuple(s.shape.as_list())}" for i, s in enumerate(shaped))
    first = shaped[0]
    relaxed = [None, *first.shape.as_list()[1:]]
    return (f"stabilize: no dim varies across the {n_examples} example(s), so the inferred input_signature "
            f"pins every dim ({fixed}); a call with another shape, such as a smaller last batch, will "
            f"raise TF's TypeError 'Binding inputs to tf.function failed'. Add an example with another "
            f"batch size, or pass input_signature with None for the dims that vary, e.g. "
            f"tf.TensorSpec({relaxed}, tf.{first.dtype.name})")


def python_function(fn: Any) -> Callable:
    if hasattr(fn, "python_function"):
        return fn.python_function
    if not callable(fn):
        raise UsageError(f"expected a function or tf.function, got {type(fn).__name__}; "
                         "pass the callable itself")
    return fn


def _param_names(py_fn: Callable) -> list[str]:
    import inspect

    try:
        return [p.name for p in inspect.signature(py_fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


@user_entry("while tracing")
def stabilize(fn: Callable, input_signature: Sequence[Any] | None = None,
              examples: Iterable[Any] | None = None, **tf_function_kwargs: Any):
    """Returns a `tf.function` of ``fn`` with a fixed input_signature.

    The signature is ``input_signature`` when given, otherwise inferred from
    ``examples`` by relaxing every dimension that varies between them to
    None (`infer_input_signature`). One trace then serves every call that
    fits, e.g. every batch size; a function that creates variables still
    traces twice on its first call (TF's variable-creation re-trace).

    Args:
        fn: a Python function, bound method or `tf.function` (its Python
            function is re-wrapped; its ``jit_compile`` setting is kept).
        input_signature: a sequence of `tf.TensorSpec` nests, one per positional
            parameter, e.g. ``[tf.TensorSpec([None, 96, 96, 3], tf.float32)]``.
        examples: example calls (see `infer_input_signature`), used when
            ``input_signature`` is None.
        **tf_function_kwargs: passed to `tf.function` (e.g. ``jit_compile``).

    Returns:
        A `tf.function` with ``input_signature`` set. Calls that do not fit the
        signature raise TF's ``TypeError`` ("Binding inputs …").

    Warns:
        FixedShapeWarning: the signature was inferred from examples in which
            no dim varies (e.g. one example, or batches all of 32): it pins
            every dim; the warning names them and says how to relax them.

    Raises:
        UsageError: neither ``input_signature`` nor ``examples`` given, an
            example that does not fit the given signature, or examples that
            cannot be described by an input_signature (Python values, dtypes
            that vary).

    Example:

    >>> step = stabilize(lambda x: x * 2, examples=[tf.zeros([4, 8]), tf.zeros([2, 8])])
    >>> step.input_signature
    (TensorSpec(shape=(None, 8), dtype=tf.float32, name='x'),)
    """
    import tensorflow as tf

    py_fn = python_function(fn)
    names = _param_names(py_fn)
    if input_signature is None and getattr(fn, "input_signature", None) is not None:
        input_signature = fn.input_signature  # "the one given": the tf.function's own
    if input_signature is None:
        if examples is None:
            raise UsageError("stabilize needs input_signature=[tf.TensorSpec(...)] or examples=[...] "
                             "to infer one from")
        calls = examples_list(examples)
        element_spec = dataset_element_spec(examples)
        input_signature = _infer(calls, names or None, element_spec)
        # A dataset's element_spec is what it can yield: a dim it fixes is fixed.
        message = _fixed_dims_message(input_signature, len(calls)) if element_spec is None else None
        if message:
            import warnings

            warnings.warn(message, FixedShapeWarning, stacklevel=3)  # past the user_entry wrapper
    else:
        if isinstance(input_signature, (str, bytes, tf.TypeSpec)) or not isinstance(input_signature, (list, tuple)):
            raise UsageError(f"input_signature must be a list with one tf.TensorSpec (or nest of them) per "
                             f"positional parameter, got {type(input_signature).__name__}")
        input_signature = tuple(input_signature)
        for i, spec in enumerate(input_signature):
            for leaf in tf.nest.flatten(spec):
                if not isinstance(leaf, tf.TypeSpec):
                    raise UsageError(f"input_signature[{i}] holds a {type(leaf).__name__}; use tf.TensorSpec")
        if names and len(input_signature) > len(names):
            raise UsageError(f"input_signature has {len(input_signature)} specs but the function takes "
                             f"{len(names)} positional parameters ({', '.join(names)})")
        for k, call in enumerate(examples_list(examples)):
            if len(call) != len(input_signature):
                raise UsageError(f"example {k} has {len(call)} arguments but input_signature has "
                                 f"{len(input_signature)} specs")
            for i, (arg, spec) in enumerate(zip(call, input_signature)):
                for v, s in zip(tf.nest.flatten(arg), tf.nest.flatten(spec)):
                    if not s.is_compatible_with(_leaf_spec(v, f"argument {i}")):
                        raise UsageError(f"example {k}, argument {i}: {_leaf_spec(v, '')} does not fit "
                                         f"input_signature {s}; relax that dim to None or fix the input")
    if hasattr(fn, "python_function") and "jit_compile" not in tf_function_kwargs:
        jit = _tf.jit_compile(fn)
        if jit is not None:
            tf_function_kwargs["jit_compile"] = jit
    # x.shape[i] on a dim left None (case D5); stacklevel 4: past stabilize and its user_entry wrapper
    warn_shape_reads(py_fn, input_signature, stacklevel=4)
    return tf.function(py_fn, input_signature=input_signature, **tf_function_kwargs)


# ------------------------------------------- shape-read warnings (from tflab.diagnosis)


class ShapeReadWarning(UserWarning):
    """A function reads a static dim (``x.shape[i]``, ``len(x)``) that its input_signature leaves
    None: at trace time Python gets None (or AutoGraph an int32 tensor) instead of a number."""


def shape_read_warnings(fn: Callable, input_signature: Any) -> list[str]:
    """One message per ``x.shape[i]`` / ``x.get_shape()[i]`` / ``len(x)`` in ``fn``'s
    source whose dim is None in ``input_signature`` (case D5), read from the AST
    (`tflab.diagnosis.source.unknown_dim_reads`) before any call.

    Args:
        fn: the Python function (a `tf.function`'s ``python_function``).
        input_signature: one `tf.TensorSpec` per positional parameter.

    Returns:
        Messages in line order, empty when there is no such read or no source.
    """
    from tflab.diagnosis.source import unknown_dim_reads

    out = []
    for where, text, name, dim, spec in unknown_dim_reads(fn, input_signature):
        if text.startswith("len("):
            out.append(f"{where}: len({name}) reads dim 0 of {name}, which is None in the "
                       f"input_signature {spec.shape}: AutoGraph makes it an int32 tensor, not a "
                       f"Python int; tf.cast it before mixing it with {spec.dtype.name}")
        else:
            out.append(f"{where}: {text} is None when traced: dim {dim} of {name} is None "
                       f"in the input_signature {spec.shape}; use tf.shape({name})[{dim}]")
    return sorted(set(out), key=lambda m: int(m.split(":")[1]))


def warn_shape_reads(fn: Callable, input_signature: Any, stacklevel: int = 3) -> None:
    """Warns (`ShapeReadWarning`) once per read that `shape_read_warnings` finds."""
    import warnings

    for message in shape_read_warnings(fn, input_signature):
        warnings.warn(message, ShapeReadWarning, stacklevel=stacklevel)
