"""SavedModel internals: signature selection as ``tf.saved_model.save`` does it, and a tf.function's traces.

What `tflab.saved_model` and the ``--html`` pages need from TF that has no public API:

* `signature_choice`: TF's own ``signature_serialization.find_function_to_export``
  on the ``_AugmentedGraphView`` that ``tf.saved_model.save`` builds
  (tensorflow/python/saved_model/save.py), and the ``_get_signature`` /
  ``_valid_signature`` tests it applies to each child, so tflab reports the rule
  TF applies instead of a copy of it;
* `is_literal`: whether a FunctionType parameter is a Python value baked into the
  trace (``tensorflow/core/function/trace_type/default_types.py``, ``Literal``);
* `parse_saved_model`: ``saved_model.pb`` parsed as the ``tensorflow.SavedModel`` protobuf;
* `serialized_concrete_functions` / `traced_concrete_functions`: the
  ConcreteFunctions a tf.function holds (TF 2.21's trace cache; there is no public
  list of them);
* `keras_input_signature`: the input signature ``keras.Model.export`` uses
  (keras/src/export/export_utils.py).

Each name used is listed in `PRIVATE_NAMES`; tests/house/test_tf_internals.py checks that
every one exists in the pinned TF and Keras.
"""

from __future__ import annotations

from typing import Any

PRIVATE_NAMES = (
    ("tensorflow.python.saved_model.save", "_AugmentedGraphView"),
    ("tensorflow.python.saved_model.signature_serialization", "find_function_to_export"),
    ("tensorflow.python.saved_model.signature_serialization", "_get_signature"),
    ("tensorflow.python.saved_model.signature_serialization", "_valid_signature"),
    ("tensorflow.core.function.trace_type.default_types", "Literal"),
    ("tensorflow.core.protobuf.saved_model_pb2", "SavedModel"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function",
     "Function._list_all_concrete_functions"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function",
     "Function._list_all_concrete_functions_for_serialization"),
    ("keras.src.export.export_utils", "get_input_signature"),
)


def signature_choice(obj: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """What ``tf.saved_model.save(obj)`` without ``signatures=`` sees and picks.

    Args:
        obj: a trackable object (a `tf.Module`).

    Returns:
        ``(chosen, children)``: what ``find_function_to_export`` returns (a
        ConcreteFunction, a tf.function from ``_default_save_signature``, or None)
        and ``(attribute name, object)`` for every SavedModel child of ``obj``.
    """
    from tensorflow.python.saved_model import save as save_lib
    from tensorflow.python.saved_model import signature_serialization as ss

    view = save_lib._AugmentedGraphView(obj)  # noqa: SLF001 - TF's own rule, not a copy of it
    chosen = ss.find_function_to_export(view)
    return chosen, [(ref.name, ref.ref) for ref in view.list_children(view.root)]


def get_signature(fn: Any) -> Any:
    """TF's ``_get_signature``: the ConcreteFunction a child would be saved as, or None.

    A tf.function with an ``input_signature`` gives its one ConcreteFunction, a
    ConcreteFunction itself; anything else None.
    """
    from tensorflow.python.saved_model import signature_serialization as ss

    return ss._get_signature(fn)  # noqa: SLF001


def valid_signature(concrete: Any) -> bool:
    """TF's ``_valid_signature``: returns a tensor, takes no tf.Variable, outputs a tensor/list/str-keyed dict."""
    from tensorflow.python.saved_model import signature_serialization as ss

    return bool(ss._valid_signature(concrete))  # noqa: SLF001


def is_literal(type_constraint: Any) -> bool:
    """True when a FunctionType parameter's TraceType is a ``Literal`` (a Python value traced as a constant)."""
    from tensorflow.core.function.trace_type import default_types

    return isinstance(type_constraint, default_types.Literal)


def parse_saved_model(data: bytes) -> Any:
    """``saved_model.pb``'s bytes as a ``tensorflow.SavedModel`` message.

    Raises:
        google.protobuf.message.DecodeError: the bytes are not that message.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    message = saved_model_pb2.SavedModel()
    message.ParseFromString(data)
    return message


def serialized_concrete_functions(fn: Any) -> list:
    """The ConcreteFunctions ``tf.saved_model.save`` writes for the tf.function ``fn`` (none when never traced)."""
    return list(fn._list_all_concrete_functions_for_serialization())  # noqa: SLF001


def traced_concrete_functions(fn: Any) -> list:
    """The ConcreteFunctions in ``fn``'s trace cache, oldest first (TF 2.21's cache values)."""
    return list(fn._list_all_concrete_functions())  # noqa: SLF001


def keras_input_signature(model: Any) -> Any:
    """The input signature ``keras.Model.export`` gives its ``serve`` endpoint."""
    from keras.src.export.export_utils import get_input_signature

    return get_input_signature(model)
