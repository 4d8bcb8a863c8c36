"""TF runtime internals: the oneDNN build switch, the eager context's global seed, op callbacks, nest paths.

What tflab reads here has no public API in TF 2.21:

* whether oneDNN's CPU kernels are on in this process: ``IsMklEnabled()`` of
  ``tensorflow/python/util/_pywrap_util_port`` (``tensorflow/core/util/port.cc``),
  the function TF's kernels and allocator registry ask;
* the global seed ``tf.random.set_seed`` stored (``context.global_seed()``,
  ``tensorflow/python/eager/context.py``): `kept_global_seed` puts it back;
* op callbacks (``tensorflow/python/framework/op_callbacks.py``), which see every
  eager op and every op created while tracing: `op_callback` adds one for a block;
* the joined string paths of a nested structure (``tensorflow/python/util/nest.py``
  ``flatten_with_joined_string_paths``; public ``tf.nest`` has no path API);
* the kernels registered for an op type, by device and dtype
  (``tensorflow/python/framework/kernels.py`` ``get_registered_kernels_for_op``):
  the custom-op loader asks whether a prebuilt library registered GPU kernels;
* one op executed eagerly from its type, flat inputs and flat attributes
  (``tensorflow/python/eager/execute.py`` ``execute``, what every ``tf.raw_ops``
  function calls): `tflab.attribution.reeval` re-creates a traced op with its
  float dtypes raised.

Every patch is a context manager that restores what it changed, also on error.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

__all__ = ["PRIVATE_NAMES", "onednn_enabled", "global_seed", "kept_global_seed", "op_callback",
           "joined_paths", "registered_kernels", "eager_execute"]

PRIVATE_NAMES = (
    ("tensorflow.python.util._pywrap_util_port", "IsMklEnabled"),
    ("tensorflow.python.eager.context", "global_seed"),
    ("tensorflow.python.framework.op_callbacks", "add_op_callback"),
    ("tensorflow.python.framework.op_callbacks", "remove_op_callback"),
    ("tensorflow.python.util.nest", "flatten_with_joined_string_paths"),
    ("tensorflow.python.framework.kernels", "get_registered_kernels_for_op"),
    ("tensorflow.python.eager.execute", "execute"),
    ("tensorflow.python.eager.context", "context"),
)


def onednn_enabled() -> bool:
    """Whether TF's oneDNN CPU kernels are on in this process (TF decided when it loaded).

    Returns:
        ``_pywrap_util_port.IsMklEnabled()`` as a bool.
    """
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def global_seed() -> int | None:
    """The seed ``tf.random.set_seed`` last set, or None when unseeded (or unreadable)."""
    try:
        from tensorflow.python.eager import context

        return context.global_seed()
    except (ImportError, AttributeError):  # private API: unseeded is the safe fallback
        return None


@contextlib.contextmanager
def kept_global_seed() -> Iterator[None]:
    """Puts TF's global seed back as it was on exit, also on error (``tf.random.set_seed``)."""
    import tensorflow as tf

    saved = global_seed()
    try:
        yield
    finally:
        tf.random.set_seed(saved)


@contextlib.contextmanager
def op_callback(callback: Callable[..., Any]) -> Iterator[None]:
    """Calls ``callback(op_type, inputs, attrs, outputs, op_name=None, graph=None)`` for
    every op run eagerly or created while tracing inside the block; removed on exit.

    Args:
        callback: TF's op-callback signature; it should return None (keep the outputs).
    """
    from tensorflow.python.framework import op_callbacks

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(callback)


def joined_paths(structure: Any) -> list[str] | None:
    """``"a/0"``-style paths of the leaves of ``structure``, in ``tf.nest.flatten`` order.

    Returns:
        One string per leaf, or None when TF's nest module lacks the path API.
    """
    try:
        from tensorflow.python.util import nest

        return [p for p, _ in nest.flatten_with_joined_string_paths(structure)]
    except (ImportError, AttributeError):
        return None


def registered_kernels(op_type: str) -> dict[str, set[str]]:
    """The kernels this process has registered for ``op_type``: device type -> dtype names.

    Args:
        op_type: a registered op's type name, e.g. ``"WarpSoftmax"``.

    Returns:
        ``{"CPU": {"float32", "float16", "bfloat16"}, "GPU": {...}}``: each device type that has
        a kernel, with the dtypes its ``TypeConstraint``s allow (empty set: no constraint).
        Empty when the op has no kernel (or is not registered).
    """
    import tensorflow as tf
    from tensorflow.python.framework import kernels

    found: dict[str, set[str]] = {}
    for k in kernels.get_registered_kernels_for_op(op_type).kernel:
        names = found.setdefault(k.device_type, set())
        for c in k.constraint:
            names.update(tf.dtypes.as_dtype(t).name for t in c.allowed_values.list.type)
    return found


def eager_execute(op_type: str, num_outputs: int, inputs: list, attrs: tuple) -> list:
    """Runs one op eagerly: ``execute.execute(op_type, num_outputs, inputs, attrs, context())``.

    Args:
        op_type: the op's registered type (``"MatMul"``).
        num_outputs: how many output tensors it makes.
        inputs: eager tensors, flat (a list input's tensors one after another).
        attrs: ``(name, value, name, value, ...)``; dtypes as ``DataType`` enums.

    Returns:
        The op's output tensors (a list).
    """
    from tensorflow.python.eager import context, execute

    return list(execute.execute(op_type.encode(), num_outputs, inputs, attrs, context.context()))


def keras_restated(exc: BaseException) -> bool:
    """True when ``exc`` is Keras' copy of a layer's error with the call's arguments added
    (``keras/src/utils/traceback_utils.py``, ``inject_argument_info_in_traceback``: it sets
    ``_keras_call_info_injected`` and raises the copy ``from None``); no public API says so."""
    return bool(getattr(exc, "_keras_call_info_injected", False))
