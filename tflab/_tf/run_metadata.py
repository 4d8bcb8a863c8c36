"""TF's own record of what a tf.function ran: RunMetadata's function graphs and the profiler's kernel events.

What tflab reads here has no public API in TF 2.21:

* the eager context's RunMetadata (``tensorflow/python/eager/context.py``:
  ``enable_run_metadata``, ``export_run_metadata``, ``disable_run_metadata``).
  While it is on, each function instantiated and run stores one
  ``function_graphs`` entry (``tensorflow/core/protobuf/config.proto``
  ``RunMetadata.FunctionGraphs``): ``pre_optimization_graph`` (the FuncGraph as
  TF instantiated it), ``post_optimization_graph`` (after Grappler's
  meta optimizer) and ``partition_graphs`` (per device, after the runtime's
  own rewrites: oneDNN's ``_MklNative*`` kernels are chosen there);
* the profiler's XSpace (``tensorflow/tsl/profiler/protobuf/xplane.proto``):
  ``tf.profiler.experimental.start``/``stop`` write it; each kernel TF's
  executor ran is an event named ``NODE_NAME:OP_TYPE`` on a host thread line
  (``tensorflow/core/common_runtime/executor.cc``: ``TraceMeOp``).

Eager RunMetadata carries no step stats for a function call in TF 2.21 (measured: ``step_stats`` is empty),
so a node's time comes from the profiler's events.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Iterator

__all__ = ["PRIVATE_NAMES", "function_graphs", "kernel_events", "grappler_options"]

PRIVATE_NAMES = (
    ("tensorflow.python.eager.context", "context"),
    ("tensorflow.tsl.profiler.protobuf.xplane_pb2", "XSpace"),
)


def function_graphs(call: Callable[[], Any]) -> list[tuple[Any, Any, list]]:
    """Runs ``call()`` with RunMetadata on; the function graphs TF instantiated meanwhile.

    Args:
        call: runs the function (a ConcreteFunction called on its inputs). Only a function
            instantiated during the call is recorded: TF stores the graphs when it
            instantiates (``process_function_library_runtime.cc``), not on each run.

    Returns:
        ``[(pre_optimization GraphDef, post_optimization GraphDef, [partition GraphDef, …]), …]``,
        one per function instantiated.
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        call()
        md = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    return [(fg.pre_optimization_graph, fg.post_optimization_graph, list(fg.partition_graphs))
            for fg in md.function_graphs]


@contextlib.contextmanager
def grappler_options(options: dict) -> Iterator[None]:
    """Sets Grappler options (``tf.config.optimizer.set_experimental_options``) and restores them exactly.

    The public API cannot unset an option; the context keeps them in a dict
    (``Context._optimizer_experimental_options``), which is put back as it was.
    A ConcreteFunction called inside is instantiated again: the options are part
    of the call's ``config_proto`` and so of the instantiation's key.
    """
    import tensorflow as tf
    from tensorflow.python.eager import context

    ctx = context.context()
    old = dict(ctx._optimizer_experimental_options)
    tf.config.optimizer.set_experimental_options(options)
    try:
        yield
    finally:
        options_now = ctx._optimizer_experimental_options
        options_now.clear()
        options_now.update(old)
        tf.config.optimizer.set_experimental_options({})  # drops the call options TF cached from the dict


def kernel_events(call: Callable[[], Any], runs: int) -> tuple[list[tuple[str, str, float, int]], float]:
    """Runs ``call()`` ``runs`` times under TF's profiler; each kernel event and the runs' wall seconds.

    Args:
        call: one run of the function.
        runs: how many runs are traced.

    Returns:
        ``([(node name, op type, seconds, thread line id), …], wall seconds of the runs)``: every event
        named ``NODE:TYPE`` on the host plane (TF's executor names each kernel it runs so).

    Raises:
        UsageError: another profiler is running in this process (TF allows one at a time).
        tflab.errors.Terminated: SIGTERM arrived between two runs (checked after each run, so a
            long profile obeys it within one run's time).
    """
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tflab.errors import UsageError, raise_if_terminated

    logdir = tempfile.mkdtemp(prefix="tflab_graph_profile_")
    try:
        try:
            tf.profiler.experimental.start(logdir)
        except tf.errors.AlreadyExistsError:  # TF: "Another profiler is running."
            raise UsageError("a TF profiler is already running in this process (tf.profiler.experimental.start, "
                             "or a TensorBoard callback's profile); the graph path's profile level needs its own: "
                             "stop it first (tf.profiler.experimental.stop()) or use path='xla'") from None
        try:
            t0 = time.perf_counter()
            for _ in range(runs):
                call()
                raise_if_terminated()  # a pending SIGTERM ends the profile between runs
            wall = time.perf_counter() - t0
        finally:
            tf.profiler.experimental.stop()
        events = []
        for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
            space = xplane_pb2.XSpace()
            with open(path, "rb") as f:
                space.ParseFromString(f.read())
            for plane in space.planes:
                if not plane.name.startswith("/host:"):
                    continue
                meta = plane.event_metadata
                for line in plane.lines:
                    for e in line.events:
                        name = meta[e.metadata_id].name
                        node, sep, op = name.rpartition(":")
                        if sep and node and op and " " not in op and not node.endswith(":"):
                            events.append((node, op, e.duration_ps * 1e-12, line.id))
        return events, wall
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
