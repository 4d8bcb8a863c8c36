"""Grappler off for the functions one thread instantiates, through the eager context's per-thread call options.

A tf.function call passes the eager context's ``FunctionCallOptions`` to the
``PartitionedCall`` it runs: their ``config_proto`` decides which Grappler passes
optimize the function graph when the runtime instantiates it
(``tensorflow/python/eager/context.py``: ``Context.function_call_options`` is kept
in ``_thread_local_data``, one per thread; ``atomic_function.py`` adds
``function_call_options.as_attrs()`` to every call). TF 2.21 has no public API for
one thread's options, so they are set here and nowhere else.

`without_grappler` sets ``rewrite_options.disable_meta_optimizer`` on the calling
thread only, and puts the thread's own options back on exit: the user's
functions called on other threads, or on this thread afterwards, keep TF's
default. A function instantiated under it keeps that instantiation (the runtime
caches it with its options), so every call of it should be under it too.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["grappler_disabled", "without_grappler"]


@contextlib.contextmanager
def without_grappler() -> Iterator[None]:
    """Runs the block with Grappler's meta-optimizer off for the functions this thread calls.

    Used where tflab builds a large function of its own whose first call would
    otherwise spend seconds in Grappler for no faster run (the end-to-end bound's
    backward passes: measured on ResNet50, 32×32, 2 cores: first call 22 s → 13 s,
    each later backward pass unchanged or faster).

    Yields:
        None. The thread's previous ``FunctionCallOptions`` are restored on exit,
        also when the block raises.
    """
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context

    ctx = context.context()
    before = ctx._thread_local_data.function_call_options  # None: the context's default, built lazily
    config = config_pb2.ConfigProto()
    config.ParseFromString(ctx.function_call_options.config_proto_serialized)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    ctx.function_call_options = context.FunctionCallOptions(
        executor_type=ctx.function_call_options.executor_type, config_proto=config)
    try:
        yield
    finally:
        ctx._thread_local_data.function_call_options = before


def grappler_disabled() -> bool:
    """Whether the functions this thread instantiates now skip Grappler's meta-optimizer.

    Returns:
        ``rewrite_options.disable_meta_optimizer`` of this thread's ``FunctionCallOptions`` config
        (``tensorflow/core/protobuf/rewriter_config.proto``): False under TF's default.
    """
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context

    config = config_pb2.ConfigProto()
    config.ParseFromString(context.context().function_call_options.config_proto_serialized)
    return config.graph_options.rewrite_options.disable_meta_optimizer
