"""Keras dtype policies for `tflab.precision`: the names, the loss-scale constants, a policy context.

Mixed precision computes in a 16-bit float and keeps variables in float32
(Keras' ``DTypePolicy``: ``keras/src/dtype_policies/dtype_policy.py``).
`global_policy` sets the global policy of every imported Keras (Keras 3's
``set_dtype_policy``, tf_keras' ``set_global_policy``) and restores it on exit.
"""

from __future__ import annotations

import contextlib
import random
import sys
from typing import Any, Callable

import numpy as np

__all__ = ["POLICIES", "DEFAULT_POLICIES", "REFERENCE", "INITIAL_LOSS_SCALE", "MIN_LOSS_SCALE",
           "global_policy", "keras_modules", "is_keras_layer", "takes_no_parameters"]

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
