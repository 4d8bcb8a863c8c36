"""The steps of `tflab.lower(..., path="graph")`: python, autograph, funcgraph, grappler, partition, profile.

The function is traced once as a plain ``tf.function`` (no XLA) with a static
input signature, and run on the user's inputs (zeros for a TensorSpec):

1. one run with RunMetadata on (`tflab._tf.run_metadata.function_graphs`) gives
   the graphs TF instantiated: the ``grappler`` level is the post-optimization
   graph, the ``partition`` level the per-device graphs that ran;
2. the same ConcreteFunction is instantiated again with ONE Grappler optimizer off
   at a time (`tflab._tf.run_metadata.grappler_options`; the options are part of
   the instantiation's key, so TF re-optimizes; no user Python runs again): what
   each optimizer changed is the difference (`tflab.lowering.graph.optimizer_effects`);
3. ``runs`` runs under TF's profiler give each node's time
   (`tflab.lowering.graph_profile`).
"""

from __future__ import annotations

import time
from typing import Any

from tflab.lowering.records import GRAPH_STAGES, Lowering, Stage

__all__ = ["build_graph_lowering", "DEFAULT_RUNS"]

#: Runs the profile level times (after the run that instantiated the function).
DEFAULT_RUNS = 20


def _inputs(args: tuple, kwargs: dict) -> list:
    """The tensor leaves of the call, in `flat_inputs`' order: the user's values, zeros for a TensorSpec."""
    import numpy as np
    import tensorflow as tf

    out = []
    for v in tf.nest.flatten((args, kwargs)):
        if isinstance(v, tf.TensorSpec):
            out.append(tf.zeros(v.shape, v.dtype))
        elif isinstance(v, (tf.Tensor, tf.Variable, np.ndarray)):
            out.append(tf.convert_to_tensor(v))
    return out


def _timed_stage(name: str, make) -> Stage:
    t0, c0 = time.perf_counter(), time.process_time()
    text, ops, pieces, note = make()
    return Stage(name, text, ops, time.perf_counter() - t0, "", note, tuple(pieces),
                 cpu_seconds=time.process_time() - c0)


def build_graph_lowering(fn: Any, args: tuple, kwargs: dict, runs: int = DEFAULT_RUNS,
                         optimizers: tuple[str, ...] | None = None) -> Lowering:
    import tensorflow as tf

    from tflab._tf.run_metadata import function_graphs, grappler_options
    from tflab.lowering import stages as st
    from tflab.lowering.build import check_inputs_fit, flat_function, flat_inputs, python_levels
    from tflab.lowering.graph import graph_nodes, graph_stage, main_function, optimizer_effects
    from tflab.lowering.graph_profile import profile_nodes, profile_stage
    from tflab.lowering.layers import record_layer_calls
    from tflab.modes.causes import GRAPPLER_OPTIMIZERS
    from tflab.tracing import function_name, get_concrete_function

    specs, rebuild = flat_inputs(args, kwargs)
    check_inputs_fit(specs)
    values = _inputs(args, kwargs)
    name = function_name(fn)
    py_fn, _, _, done = python_levels(fn)
    graph_fn = tf.function(flat_function(py_fn, rebuild, name), input_signature=specs)
    t0, c0 = time.perf_counter(), time.process_time()
    with record_layer_calls() as layer_calls:  # which Keras layer call created each op (not a scope guess)
        concrete = get_concrete_function(graph_fn)  # tracing errors are the user's: raised as TraceError
    trace_seconds, trace_cpu = time.perf_counter() - t0, time.process_time() - c0
    index = st.op_index(concrete.graph)
    fg = _timed_stage("funcgraph", lambda: st.funcgraph_stage(concrete.graph, index))
    fg.seconds += trace_seconds
    fg.cpu_seconds += trace_cpu
    done.append(fg)
    op_names = {r.name for r in index}

    def call():
        return concrete(*values)

    def instantiate(options: dict | None):
        with grappler_options(options or {}):
            fgs = function_graphs(call)
        return main_function(fgs, op_names)

    t0, c0 = time.perf_counter(), time.process_time()
    found = instantiate(None)
    if found is None:
        why = ("TF recorded no function graph for this run (RunMetadata is empty): the function may "
               "have been instantiated before with these options")
        stages = done + [Stage(s, why=why) for s in GRAPH_STAGES[3:]]
        return Lowering(function_name=name, stages=tuple(stages), stopped_at="grappler", why=why,
                        _index=index, path="graph")
    pre, post, partitions = found
    by_name = {r.name: r for r in index}
    nodes, removed = graph_nodes(pre, post, partitions, by_name, layer_calls.names_for(concrete.graph))
    first = (time.perf_counter() - t0, time.process_time() - c0)
    t0, c0 = time.perf_counter(), time.process_time()
    effects = optimizer_effects(lambda o: (instantiate(o) or (None, None))[1], post,
                                GRAPPLER_OPTIMIZERS if optimizers is None else tuple(optimizers))
    effects_seconds, effects_cpu = time.perf_counter() - t0, time.process_time() - c0
    from tflab.lowering.text import effect_text

    g_text, g_ops, g_pieces, _ = graph_stage("grappler", [post], nodes, removed)
    g_text += "\n# what each optimizer changed (the function instantiated again with it off):\n" + effect_text(effects)
    user_options = tf.config.optimizer.get_experimental_options()
    in_effect = ("Grappler options set in this process: " + ", ".join(f"{k}={v}" for k, v in sorted(user_options.items()))
                 if user_options else "Grappler's default options")
    if user_options:
        g_text = f"# {in_effect}\n" + g_text
    done.append(Stage("grappler", g_text, g_ops, first[0] + effects_seconds, "",
                      "RunMetadata.function_graphs[].post_optimization_graph; each optimizer measured by "
                      f"instantiating the function again with it off; {in_effect}", tuple(g_pieces),
                      cpu_seconds=first[1] + effects_cpu))
    done.append(_timed_stage("partition", lambda: graph_stage(
        "partition", partitions, nodes, (), "RunMetadata.function_graphs[].partition_graphs: each node's "
        "device and the kernel library its op runs on")))
    t0, c0 = time.perf_counter(), time.process_time()
    nodes, summary = profile_nodes(nodes, concrete.graph, call, runs)
    text, ops, pieces, note = profile_stage(nodes, summary)
    done.append(Stage("profile", text, ops, time.perf_counter() - t0, "", note, tuple(pieces),
                      cpu_seconds=time.process_time() - c0))
    return Lowering(function_name=name, stages=tuple(done), _index=index, path="graph", nodes=tuple(nodes),
                    optimizers=tuple(effects), profile=summary)
