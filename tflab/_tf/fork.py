"""TF's eager runtime in a forked child: a fresh eager context, and functions traced before the fork rebound to it.

A child made by ``os.fork()`` keeps one thread: TF's inter-op thread pool (owned
by the eager context, ``tensorflow/core/common_runtime/eager/context.cc``) has
no threads left in it, so any tf.function call waits for ever on work queued
there (``ProcessFunctionLibraryRuntime::RunSync``). What tflab does in the child:

* `fresh_eager_context`: drops the Python ``Context`` (``context._reset_context``,
  ``tensorflow/python/eager/context.py``); the next op builds a new C++ context,
  whose pools are started in the child. The global seed is carried over.
  Variables and Keras layers built before the fork still read and assign (their
  resources stay on the device that holds them);
* `rebind_functions`: an ``AtomicFunction`` traced before the fork keeps the old
  context (``_bound_context``, ``polymorphic_function/atomic_function.py``);
  its ``call_flat`` is wrapped so that on first use it copies its FunctionDef
  and its children's into the new context and binds to it;
* `keep_assigns`: ``AssignVariableOp`` finds a variable made before the fork in
  the new device's resource manager (``LookupOrCreateResource``), misses it and
  makes a new one, so ``v.assign(x)`` was lost (measured: a later read gave the
  old value, eagerly and in a tf.function) while ``assign_add`` (a plain
  lookup) worked. For such a variable (its handle's EagerTensor id is below
  the id counter at the fork, ``ops.uid``) ``assign_variable_op`` becomes a
  full-range ``ResourceStridedSliceAssign`` (empty begin/end/strides: every
  element, any rank, exact), which looks it up the way ``assign_add`` does.

Every private name is listed in `PRIVATE_NAMES` (``tests/house/test_tf_internals.py``).
"""

from __future__ import annotations

import gc

__all__ = ["PRIVATE_NAMES", "fresh_eager_context", "rebind_functions", "keep_assigns"]

PRIVATE_NAMES = (
    ("tensorflow.python.eager.context", "_reset_context"),
    ("tensorflow.python.eager.context", "context"),
    ("tensorflow.python.eager.polymorphic_function.atomic_function", "AtomicFunction"),
    ("tensorflow.python.eager.polymorphic_function.atomic_function", "AtomicFunction._bound_context"),
    ("tensorflow.python.eager.polymorphic_function.atomic_function", "AtomicFunction._children"),
    ("tensorflow.python.ops.gen_resource_variable_ops", "assign_variable_op"),
    ("tensorflow.python.framework.ops", "uid"),
    ("tensorflow.python.framework.ops", "EagerTensor._id"),
)


def fresh_eager_context() -> None:
    """Replaces the eager context inherited through fork by a new one (started on first use), seed kept."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    from tflab._tf.runtime import global_seed

    from tensorflow.python.framework import ops

    fork_uid = ops.uid()
    seed = global_seed()
    # _reset_context runs gc.collect(): over the user's whole heap that costs ~0.7 s and touches
    # every page fork shares; frozen objects (all of them, inherited) are not traversed.
    gc.freeze()
    try:
        context._reset_context()
    finally:
        # frozen objects are invisible to gc.get_objects(): a check that looks for the user's live
        # objects (the function holding a line to rewrite, the tf.Variables a replay must put back)
        # has to see the inherited heap again
        gc.unfreeze()
    if seed is not None:
        tf.random.set_seed(seed)
    rebind_functions()
    keep_assigns(fork_uid)


def _copy_into(fn, new_ctx, seen: set) -> None:
    if id(fn) in seen:
        return
    seen.add(id(fn))
    for child in list(fn._children or ()):
        _copy_into(child, new_ctx, seen)
    old = fn._bound_context
    if old is not new_ctx:
        if not new_ctx.has_function(fn.name):
            new_ctx.add_function_def(old.get_function_def(fn.name))
        fn._bound_context = new_ctx


def rebind_functions() -> None:
    """Wraps ``AtomicFunction.call_flat`` so a function traced before the fork runs in the current context."""
    from tensorflow.python.eager import context
    from tensorflow.python.eager.polymorphic_function import atomic_function

    cls = atomic_function.AtomicFunction
    if getattr(cls.call_flat, "__tflab_rebinds__", False):
        return
    original = cls.call_flat

    def call_flat(self, *args, **kwargs):
        now = context.context()
        if self._bound_context is not now:
            _copy_into(self, now, set())
        return original(self, *args, **kwargs)

    call_flat.__tflab_rebinds__ = True
    cls.call_flat = call_flat


def keep_assigns(fork_uid: int) -> None:
    """Routes ``assign_variable_op`` on a variable made before the fork through ``ResourceStridedSliceAssign``."""
    import tensorflow as tf
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import gen_resource_variable_ops as gen

    original = gen.assign_variable_op
    if getattr(original, "__tflab_keeps__", False):
        return

    def inherited(handle) -> bool:
        if isinstance(handle, ops.EagerTensor):
            return handle._id < fork_uid
        graph = getattr(handle, "graph", None)
        for external, internal in getattr(graph, "captures", ()) or ():
            if internal is handle:
                return isinstance(external, ops.EagerTensor) and external._id < fork_uid
        return False

    def assign_variable_op(resource, value, validate_shape=False, name=None):
        if inherited(resource):
            empty = tf.zeros([0], tf.int32)
            try:
                return tf.raw_ops.ResourceStridedSliceAssign(ref=resource, begin=empty, end=empty, strides=empty,
                                                             value=value, name=name)
            except Exception:  # noqa: BLE001 - a shape change or an uninitialized variable: TF's own op
                if not tf.executing_eagerly():
                    raise
        return original(resource, value, validate_shape=validate_shape, name=name)

    assign_variable_op.__tflab_keeps__ = True
    gen.assign_variable_op = assign_variable_op
