"""tf.distribute internals tflab needs: ``StrategyBase.run``, distributed-variable components, SavedModel protos.

TF 2.21 has no public hook for "a replica function is about to run". Every
strategy's ``run`` is ``distribute_lib.StrategyBase.run`` (``Strategy`` and
``StrategyV1`` both inherit it; ``tensorflow/python/distribute/distribute_lib.py``),
so `wrapping_strategy_run` replaces that one attribute for a block and puts it
back on the way out, also when the block raises. Wrappers of nested or
concurrent blocks stack: the attribute is patched while any block is open.

A ``DistributedVariable`` marks each component with a weak reference to itself
(``values.DistributedVariable.__init__`` sets ``_distributed_container`` on the
component's handle, or on the component when it has no handle);
`distributed_container` reads it back.

``saved_model.pb`` is read with TF's own proto (``tensorflow.core.protobuf.saved_model_pb2``):
`read_saved_model_proto`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, Iterator

PRIVATE_NAMES = (
    ("tensorflow.python.distribute.distribute_lib", "StrategyBase.run"),
    ("tensorflow.core.protobuf.saved_model_pb2", "SavedModel"),
)

_lock = threading.Lock()
_wrappers: list[Callable[[Callable], Callable]] = []
_original_run: Any = None


def _strategy_base() -> type:
    from tensorflow.python.distribute import distribute_lib

    return distribute_lib.StrategyBase


def _run_with_wrappers(self, fn, args=(), kwargs=None, options=None):
    for wrap in list(_wrappers):
        fn = wrap(fn)
    return _original_run(self, fn, args=args, kwargs=kwargs, options=options)


@contextlib.contextmanager
def wrapping_strategy_run(wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """Makes every ``strategy.run(fn, …)`` in the block run ``wrap(fn)`` instead of ``fn``.

    ``distribute_lib.StrategyBase.run`` is replaced while at least one such
    block is open (in any thread) and restored when the last one closes,
    whether it returns or raises.

    Args:
        wrap: takes the replica function and returns the one to run; it is
            called once per ``strategy.run`` call (inside a `tf.function`:
            once per trace), and what it returns runs once per replica.

    Yields:
        None.

    Example:
        >>> with wrapping_strategy_run(lambda fn: fn):
        ...     strategy.run(replica_fn, args=(x,))
    """
    global _original_run
    base = _strategy_base()
    with _lock:
        if not _wrappers:
            _original_run = base.run
            base.run = _run_with_wrappers
        _wrappers.append(wrap)
    try:
        yield
    finally:
        with _lock:
            _wrappers.remove(wrap)
            if not _wrappers:
                base.run = _original_run
                _original_run = None


def strategy_run_is_patched() -> bool:
    """True while a `wrapping_strategy_run` block is open (``StrategyBase.run`` is tflab's)."""
    return _strategy_base().run is _run_with_wrappers


def distributed_container(component: Any) -> Any:
    """The ``DistributedVariable`` (e.g. ``MirroredVariable``) a captured component belongs to, or None.

    Args:
        component: a variable (or resource handle owner) a FuncGraph captured.

    Returns:
        The live distributed variable, or None for a plain variable.
    """
    ref = (getattr(getattr(component, "handle", None), "_distributed_container", None)
           or getattr(component, "_distributed_container", None))
    return ref() if callable(ref) else None


def read_saved_model_proto(path: str) -> Any:
    """``saved_model.pb`` of the SavedModel folder ``path``, parsed (``saved_model_pb2.SavedModel``).

    Raises:
        OSError: the file cannot be read.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    return sm
