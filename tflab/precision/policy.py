"""Keras dtype policies for `tflab.precision`: the names, the loss-scale constants, a policy context.

Mixed precision computes in a 16-bit float and keeps variables in float32
(Keras' ``DTypePolicy``: ``keras/src/dtype_policies/dtype_policy.py``).
`global_policy` sets the global policy of every imported Keras (Keras 3's
``set_dtype_policy``, tf_keras' ``set_global_policy``) and restores it on exit.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
from typing import Any, Callable

import numpy as np

from tflab.errors import UsageError

__all__ = ["POLICIES", "DEFAULT_POLICIES", "REFERENCE", "INITIAL_LOSS_SCALE", "MIN_LOSS_SCALE",
           "global_policy", "keras_modules", "is_keras_layer", "takes_no_parameters", "parse_policies", "parse_loss_scale"]

# Keras policy name -> (compute dtype, variable dtype), as DTypePolicy parses them.
POLICIES = {
    "float32": ("float32", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "mixed_float16": ("float16", "float32"),
    "bfloat16": ("bfloat16", "bfloat16"),
    "float16": ("float16", "float16"),
}
DEFAULT_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
REFERENCE = "float32"

# Keras 3 LossScaleOptimizer(initial_scale=2.0**15); tf_keras: _DEFAULT_INITIAL_SCALE = 2**15.
INITIAL_LOSS_SCALE = 2.0 ** 15
# tf_keras' dynamic rule: new_scale = maximum(scale / 2, 1). Below 1 a scale adds
# underflow instead of preventing it.
MIN_LOSS_SCALE = 1.0


def keras_modules() -> list:
    """The Keras packages already imported (Keras 3 and/or tf_keras)."""
    return [sys.modules[n] for n in ("keras", "tf_keras") if n in sys.modules]


def _get_policy(mod):
    mp = mod.mixed_precision
    return mp.dtype_policy() if hasattr(mp, "dtype_policy") else mp.global_policy()


def _set_policy(mod, policy) -> None:
    mp = mod.mixed_precision
    (mp.set_dtype_policy if hasattr(mp, "set_dtype_policy") else mp.set_global_policy)(policy)


@contextlib.contextmanager
def global_policy(name: str, seed: int | None = None):
    """Sets the Keras global dtype policy (Keras 3 and tf_keras, where imported) and
    restores the previous one on exit, also on error.

    Args:
        name: a Keras policy name (``"mixed_float16"``, …).
        seed: when given, Keras' ``set_random_seed(seed)`` too, so builds draw the same
            initial weights; Python's, numpy's and TF's global seeds are put back on exit.
    """
    from tflab._tf.runtime import kept_global_seed

    saved = []
    py_state, np_state = random.getstate(), np.random.get_state()
    seeds = kept_global_seed() if seed is not None else contextlib.nullcontext()
    try:
        with seeds:
            for mod in keras_modules():
                saved.append((mod, _get_policy(mod)))
                _set_policy(mod, name)
                if seed is not None:
                    mod.utils.set_random_seed(seed)
            yield
    finally:
        for mod, old in reversed(saved):
            _set_policy(mod, old)
        if seed is not None:
            random.setstate(py_state)
            np.random.set_state(np_state)


def is_keras_layer(obj: Any) -> bool:
    """Whether ``obj`` is a Keras 3 or tf_keras layer (a model included)."""
    return any(c.__name__ == "Layer" and c.__module__.split(".")[0] in ("keras", "tf_keras")
               for c in type(obj).__mro__)


def takes_no_parameters(fn: Callable) -> bool:
    """Whether ``fn`` is a zero-argument callable (a factory)."""
    from tflab._user.target import python_signature

    sig = python_signature(fn)
    return sig is not None and not sig.parameters


def check_float_values(name: str, outputs: list, grads: list) -> None:
    """Refuses a function with no floating-point value to judge, or whose float32 outputs are all NaN or
    inf: every policy would pass vacuously.

    Each policy is judged on the float outputs and the gradients; a function whose outputs are all
    integers or booleans (``x * 2 + 1`` on int32, ``tf.logical_not``, a ``tf.cast(tf.round(x), tf.int32)``
    of a float argument, through which no gradient flows) gave "no underflow or overflow" for every
    policy, measured over nothing.
    """
    floats = [o for o in outputs if np.issubdtype(np.asarray(o).dtype, np.floating)]
    sized = [o for o in floats if np.asarray(o).size]
    if sized and not any(np.isfinite(np.asarray(o, np.float64)).any() for o in sized):
        from tflab.errors import UsageError

        raise UsageError(f"{name}: under float32 every float output element is NaN or inf, so no policy's outputs "
                         f"can be measured against it; make the float32 run finite first (`tflab compare "
                         f"FILE.py:FUNC` names the first non-finite op)")
    if sum(np.asarray(o).size for o in floats) or any(g is not None and np.asarray(g).size for g in grads):
        return
    kinds = ", ".join(sorted({str(np.asarray(o).dtype) for o in outputs})) or "none"
    from tflab.errors import UsageError

    raise UsageError(f"{name}: there is no floating-point value to judge: its outputs are {kinds} "
                     f"({len(outputs)} output(s), {sum(np.asarray(o).size for o in floats)} float element(s)) and "
                     f"no gradient reaches a float argument or variable; precision measures float values "
                     f"under each dtype policy, so return the float tensors to judge (e.g. before a cast to "
                     f"an integer)")


def parse_loss_scale(loss_scale: Any) -> Any:
    """None, ``"dynamic"`` or a positive float32-normal number, checked (`compare_precisions`' ``loss_scale``).

    Raises:
        UsageError: anything else, in one line.
    """
    if loss_scale is None or loss_scale == "dynamic":
        return loss_scale
    bad = isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float))
    if not bad:
        try:
            value = float(loss_scale)  # an int past float's range (10**400) is refused, not an OverflowError
        except OverflowError:
            bad = True
        else:
            bad = not math.isfinite(value) or value <= 0
    if bad:
        shown = repr(loss_scale) if len(repr(loss_scale)) <= 40 else repr(loss_scale)[:37] + "..."
        raise UsageError(f"loss_scale must be None, a positive number or 'dynamic' (a float; at most "
                         f"{sys.float_info.max:.3g}), got {shown}")
    from tflab._api.cliargs import loss_scale_problem

    problem = loss_scale_problem(value)  # 1e-320 is 0 in float32, 1e39 is inf: the scaled gradients mean nothing
    if problem:
        raise UsageError(f"loss_scale {problem}; give e.g. 32768 or 'dynamic'")
    return value


def parse_policies(policies: Any) -> tuple[str, ...]:
    """Validates policy names; float32 (the reference) is put first, duplicates dropped.

    Raises:
        UsageError: an unknown name (the message lists the known ones).
    """
    if isinstance(policies, str):
        policies = [p for p in policies.split(",")]
    names = [str(p).strip() for p in policies]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise UsageError(f"unknown policy {', '.join(map(repr, unknown)) or '(none given)'}; "
                         f"choose from {', '.join(POLICIES)}")
    return tuple(dict.fromkeys([REFERENCE] + names))


def held_layers(fn: Callable) -> list:
    """The Keras layers (models included) a callable holds, each once, in this order: a bound
    method's object, a ``functools.partial``'s arguments, the values its closure cells and the
    globals it names hold (a list, tuple or dict of layers too).

    Args:
        fn: what a factory returned that is no Keras layer: a function, a bound method, a
            ``functools.partial`` or a ``tf.function`` (its Python function is read).

    Returns:
        The layers (``keras.layers.Layer`` and tf_keras', models included); ``[]`` for a builtin or
        a callable object without code. Read with ``inspect.getclosurevars``, never called.

    Example:
        >>> model = keras.Sequential([keras.layers.Dense(2)])
        >>> held_layers(lambda x: model(x, training=True)) == [model]
        True
    """
    import functools
    import inspect

    out: list = []

    def add(value: Any) -> None:
        values = list(value.values()) if isinstance(value, dict) else (
            list(value) if isinstance(value, (list, tuple)) else [value])
        for v in values:
            if is_keras_layer(v) and not any(v is o for o in out):
                out.append(v)

    while isinstance(fn, functools.partial):
        add(list(fn.args) + list(fn.keywords.values()))
        fn = fn.func
    add(getattr(fn, "__self__", None))
    fn = getattr(fn, "python_function", fn)  # a tf.function's Python function
    try:
        names = inspect.getclosurevars(fn)
    except (TypeError, ValueError):  # a builtin, a callable object without code
        return out
    for value in list(names.nonlocals.values()) + list(names.globals.values()):
        add(value)
    return out


# The ops that carry a policy's arithmetic: what a compute dtype is for.
COMPUTE_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D",
                         "Conv3D", "DepthwiseConv2dNative", "Conv", "Conv2DBackpropInput",
                         "Conv3DBackpropInputV2"})


@contextlib.contextmanager
def record_compute_ops(random_ops: list | None = None):
    """Records (op type, output dtype name) of every `COMPUTE_OPS` op run in the block, and the type
    of every random op (``tflab._graph.analysis.RANDOM_OPS``: a Dropout in training mode draws one)
    into ``random_ops`` when it is a list.

    Uses TF's op callbacks (``tensorflow/python/framework/op_callbacks.py``, through
    `tflab._tf.runtime.op_callback`), which see each eager op and each op created while tracing.
    """
    from tflab._graph.analysis import RANDOM_OPS
    from tflab._tf.runtime import op_callback

    seen: list[tuple[str, str]] = []

    def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        op_type = op_type.decode() if isinstance(op_type, bytes) else op_type
        if op_type in COMPUTE_OPS and outputs:
            seen.append((op_type, outputs[0].dtype.name))
        elif random_ops is not None and op_type in RANDOM_OPS:
            random_ops.append(op_type)
        return None

    with op_callback(callback):
        yield seen
