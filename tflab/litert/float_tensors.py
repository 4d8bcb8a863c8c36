"""Lab step 8, the float variant's intermediate tensors against TF's tensors of the same name.

The float (``"none"``) variant's weights are the per-op check's reference, so
that check tests its kernels only. This comparison tests the conversion itself:
each op's output, through the whole TFLite model, against the TF tensor the
converter named it after, in the SavedModel run by TF on the same examples.

How tensors are matched: the converter names a fused op's output after the TF
ops it was made from, joined by ``;`` (``"model/conv2d/Relu;model/conv2d/BiasAdd;
model/conv2d/convolution"``). The signature is frozen (variables folded,
calls inlined: `tflab._tf.lite.frozen_graph`), so its nodes are
``StatefulPartitionedCall/model/conv2d/Relu``; every part that names a node
(exactly, or as the end of a node's name) is a candidate, and the one downstream
of the others in TF's dataflow is the op's output (Relu after BiasAdd after the
convolution). A ``:N`` suffix is kept (the node's N-th output), a part that only ends
several nodes' names is ambiguous and not matched, and a signature output is
matched by its SignatureDef name to TF's structured output of that name, never by
its tensor name (``StatefulPartitionedCall:1`` is the call's second output). A tensor
is unmatched when no part names exactly one node or the shapes differ.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from tflab.litert.records.float_tensors import FloatTensors, TensorMatch  # noqa: F401 (the records live there)


def _downstream(candidates: list[str], graph, inputs_of: dict | None = None) -> str:
    """The candidate node that no other candidate's value depends on... i.e. the last in dataflow.

    Each candidate's ancestors are walked depth first over its data inputs, at
    most 2000 of them. ``inputs_of`` memoizes node name → the names of the ops
    feeding it, in input order (shared across calls: the walks of one model's
    ops cover the same nodes again and again); the walk is the same with or
    without it.
    """
    if len(candidates) == 1:
        return candidates[0]
    if inputs_of is None:
        inputs_of = {}

    def feeding(name: str) -> list[str]:
        got = inputs_of.get(name)
        if got is None:
            got = inputs_of[name] = [t.op.name for t in graph.get_operation_by_name(name).inputs]
        return got

    ancestors: dict[str, set[str]] = {}
    for c in candidates:
        seen, todo = set(), [c]
        while todo and len(seen) < 2000:
            for i in feeding(todo.pop()):
                if i not in seen:
                    seen.add(i)
                    todo.append(i)
        ancestors[c] = seen
    for c in candidates:
        if all(c == d or d in ancestors[c] for d in candidates):
            return c
    return candidates[0]


def name_candidates(tflite_name: str, nodes: list[str], node_set: set[str] | None = None) -> list[tuple[str, int]]:
    """The TF nodes a TFLite tensor name names, with the output index: ``[(node, index), ...]``.

    Each ``;``-separated part is a node name, exactly, or the end of exactly one node's name (an
    inlined call's scope, ``StatefulPartitionedCall/model/dense/Relu`` for ``model/dense/Relu``); a
    part that ends several nodes' names is ambiguous and names none. ``:N`` is kept as the index.
    """
    node_set = set(nodes) if node_set is None else node_set
    cands: list[tuple[str, int]] = []
    for part in tflite_name.split(";"):
        node, _, idx = part.partition(":")
        if node in node_set:
            hit = node
        else:
            ends = [n for n in nodes if n.endswith("/" + node)]
            hit = ends[0] if len(ends) == 1 else None
        if hit and hit not in (c for c, _ in cands):
            cands.append((hit, int(idx) if idx.isdigit() else 0))
    return cands


def _structured_outputs(signature, flat: list[str]) -> dict[str, str]:
    """The frozen signature's outputs by SignatureDef name: ``{output name: "node:index"}``.

    The frozen function keeps its outputs flat (``Identity:0``, ``Identity_1:0``), in the order
    ``tf.nest.flatten`` gives the signature's structured outputs (a dict: sorted keys), so they are
    packed back into the signature's structure (TF appends a gradient's intermediates after them).
    """
    import tensorflow as tf

    spec = signature.structured_outputs
    n = len(tf.nest.flatten(spec)) if isinstance(spec, dict) else 0
    # A gradient taken through the signature (the bounds' sensitivities) appends the forward pass's
    # intermediates to its outputs: the structured outputs are the first n.
    if not n or len(flat) < n:
        return {}
    packed = tf.nest.pack_sequence_as(spec, flat[:n])
    return {str(k): v for k, v in packed.items() if isinstance(v, str)}


def _run_fetches(session, fetches: dict, feeds: list) -> list:
    """``session.run`` of ``fetches`` on each feed; a tensor the Session reports "not found in the Graph"
    (a node the frozen graph names but the run prunes, e.g. a swish's Sigmoid) is dropped from
    ``fetches`` (in place) and the run repeated, so one unmatched name leaves the rest compared. The
    name is read from TF's message (the Session says no more); any other failure is raised as it was."""
    import tensorflow as tf

    while True:
        try:
            return [session.run(list(fetches.values()), feed) for feed in feeds]
        except tf.errors.InvalidArgumentError as e:
            m = re.search(r"Tensor (\S+?), specified in either feed_devices or fetch_devices", str(e))
            gone = [i for i, n in fetches.items() if m and n == m.group(1)]
            if not gone:
                raise
            for i in gone:
                del fetches[i]


def compare_float_tensors(model: bytes, saved_model_dir: str | os.PathLike, examples: Any,
                          key: str | None = None) -> FloatTensors:
    """Compares each op output of a float flatbuffer with TF's tensor of the same name.

    Args:
        model: the float (``"none"``) flatbuffer.
        saved_model_dir: the SavedModel it was converted from.
        examples: a `tflab.examples.Examples` (or any form `Examples.of` takes).
        key: the signature to compare (default: the model's first that the examples feed).

    Returns:
        A `FloatTensors`.
    """
    import collections

    import tensorflow as tf

    from tflab._io.progress import step_note
    from tflab._tf.lite import frozen_graph
    from tflab.examples import Examples
    from tflab.litert.ops import preserving_interpreter, read_ops, run_ops
    from tflab.saved_model import load_saved_model, signature_inputs

    step_note("none: comparing the float variant's intermediate tensors with TF's (the signature frozen once)")
    loaded = load_saved_model(saved_model_dir)
    examples = Examples.of(examples).check({k: signature_inputs(f) for k, f in loaded.signatures.items()})
    parsed = read_ops(model)
    key = key or next(k for k in parsed.signatures if k in examples.signatures)
    # The frozen graph, imported with name="" (every node keeps its name), run by a Session below.
    g, in_names, out_names = frozen_graph(loaded.signatures[key])
    nodes = [op.name for op in g.get_operations()]
    node_set = set(nodes)
    ops = parsed.subgraphs[parsed.signatures[key]]
    interp = preserving_interpreter(model)
    # A signature output is matched by its SignatureDef name: the TFLite tensor the signature returns
    # as 'p' is TF's structured output 'p', whatever the converter named it ("StatefulPartitionedCall:1"
    # names the call's second output, not the node's first).
    outputs_by_index = {d["index"]: n for n, d in interp.get_signature_runner(key).get_output_details().items()}
    tf_outputs = _structured_outputs(loaded.signatures[key], out_names)
    pick: dict[int, str] = {}
    inputs_of: dict[str, list[str]] = {}
    for op in ops:
        if not op.outputs or np.dtype(op.outputs[0].dtype).kind != "f":
            continue
        out_name = outputs_by_index.get(op.outputs[0].index)
        if out_name is not None:
            if out_name in tf_outputs:
                pick[op.index] = tf_outputs[out_name]
            continue  # an output TF does not name alike is not guessed from its tensor name
        cands = name_candidates(op.outputs[0].name, nodes, node_set)
        if cands:
            chosen = _downstream([c for c, _ in cands], g, inputs_of)
            index = dict(cands)[chosen]
            if index < len(g.get_operation_by_name(chosen).outputs):
                pick[op.index] = f"{chosen}:{index}"
    # Ops that name one TF node alike (a Softplus decomposed into EXP, ADD and LOG, named "Softplus",
    # "Softplus1", "Softplus2" by the converter's name uniquing): only the last computes TF's value;
    # the others are steps of it, left unmatched.
    first_part = {op.index: op.outputs[0].name.split(";")[0] for op in ops if op.outputs}
    for i in sorted(pick):
        if i not in pick or i in outputs_by_index.values():
            continue
        base = re.escape(first_part[i])
        later = [j for j, n in first_part.items() if j > i and re.fullmatch(base + r"\d+", n)]
        if later:
            pick[max(later)] = pick.pop(i)
    last = {}
    for i, name in sorted(pick.items()):
        last[name] = i
    pick = {i: name for i, name in pick.items() if last[name] == i}
    # The placeholders are named after the signature's inputs; else they keep its (sorted) order.
    order = [n.split(":")[0] for n in in_names]
    if set(order) != set(signature_inputs(loaded.signatures[key])):
        order = sorted(signature_inputs(loaded.signatures[key]))
    fetches = {i: g.get_tensor_by_name(n).name for i, n in pick.items()}
    err = collections.defaultdict(float)
    ref = collections.defaultdict(float)
    bad_shape: set[int] = set()
    # The frozen graph runs as imported, fetching the picked tensors (a v1 Session over its graph):
    # a pruned WrappedFunction computed the same tensors after copying every op into a new graph in
    # Python (twice: once to wrap the frozen graph, once to fetch the intermediates). Grappler is off:
    # each fetched tensor is its own op's kernel on its inputs, as the graph names it, and Grappler's
    # pass over a graph holding every weight as a constant cost more than the runs (ConvNeXtTiny at
    # 32×32: the first run 2.5 s with it, 0.65 s without; later runs alike).
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    with tf.compat.v1.Session(graph=g, config=config) as session:
        runs = _run_fetches(session, fetches, [{p: feed[n] for p, n in zip(in_names, order)}
                                               for feed in examples.feeds(key)])
    for i in set(pick) - set(fetches):
        del pick[i]  # a tensor the Session could not fetch: that op is unmatched, the others are compared
    for feed, want in zip(examples.feeds(key), runs):
        by_index = dict(zip(fetches, want))
        for o in run_ops(model, feed, key, parsed=parsed, interpreter=interp):
            if o.index not in by_index or o.output_arrays[0] is None:
                continue
            a = np.asarray(o.output_arrays[0], np.float64)
            b = np.asarray(by_index[o.index], np.float64)
            if a.shape != b.shape:
                bad_shape.add(o.index)
                continue
            keep = np.isfinite(a) & np.isfinite(b)
            if keep.any():
                err[o.index] = max(err[o.index], float(np.abs(a[keep] - b[keep]).max()))
                ref[o.index] = max(ref[o.index], float(np.abs(b[keep]).max()))
    matched = tuple(TensorMatch(o.index, o.op_type, o.outputs[0].name, pick[o.index], err[o.index],
                                ref[o.index]) for o in ops if o.index in pick and o.index not in bad_shape)
    done = {m.index for m in matched}
    unmatched = collections.Counter(o.op_type for o in ops if o.outputs and o.index not in done
                                    and np.dtype(o.outputs[0].dtype).kind == "f")
    return FloatTensors(key, matched, dict(sorted(unmatched.items())))
