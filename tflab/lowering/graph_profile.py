"""The graph path's ``profile`` level: each node's time over N runs, its bytes and FLOPs, and its roofline share.

Times come from TF's profiler (`tflab._tf.run_metadata.kernel_events`): every
kernel TF's executor ran is an event ``NODE:TYPE``; a node's time is the sum of
its events over the runs, divided by the runs. Bytes and FLOPs come from the
static shapes of the FuncGraph ops the node stands for (`GraphNode.replaced`):
the tensors they read from outside that set and the tensors they hand on; a
MatMul costs 2·M·N·K, a convolution 2·|out|·kh·kw·cin (``/ cin`` per group for a
depthwise one), an elementwise op one per output element, a reduction one per
input element. The roofline is the one copy-roofline of `custom_ops.bench`: the
fastest copy this machine makes, measured here, once, at the largest node's
bytes (clamped to 1–64 MiB): ``bandwidth_share`` is the node's bytes per second
over it.
"""

from __future__ import annotations

import dataclasses
import math

from tflab.lowering.records import GraphNode, Piece

__all__ = ["node_cost", "profile_nodes", "profile_stage", "ELEMENTWISE"]

ELEMENTWISE = frozenset({
    "AddV2", "Add", "Sub", "Mul", "RealDiv", "Div", "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "BiasAdd",
    "Tanh", "Sigmoid", "Maximum", "Minimum", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Neg", "Abs",
    "Erf", "Softplus", "SquaredDifference", "Pow", "Reciprocal", "FloorDiv", "FloorMod", "Cast", "AddN"})
_REDUCTIONS = frozenset({"Sum", "Mean", "Max", "Min", "Prod", "Softmax", "LogSoftmax"})


def _elements(shape) -> int | None:
    if shape.rank is None or not shape.is_fully_defined():
        return None
    return int(math.prod(shape.as_list()))


def _nbytes(t) -> int:
    import tensorflow as tf

    n = _elements(t.shape)
    return 0 if n is None or t.dtype in (tf.resource, tf.variant) else n * max(t.dtype.size, 1)


def _op_flops(op) -> int:
    out = _elements(op.outputs[0].shape) if op.outputs else None
    if out is None:
        return 0
    t = op.type
    if t in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
        a = op.inputs[0].shape
        if a.rank is None:
            return 0
        adj = op.get_attr("transpose_a") if t == "MatMul" else op.get_attr("adj_x")
        k = a.as_list()[-2 if adj else -1]
        return 2 * out * k if k else 0
    if t in ("Conv2D", "DepthwiseConv2dNative", "Conv3D"):
        f = op.inputs[1].shape
        if not f.is_fully_defined():
            return 0
        dims = f.as_list()
        window = math.prod(dims[:-2])
        cin = 1 if t == "DepthwiseConv2dNative" else dims[-2]
        return 2 * out * window * cin
    if t in ELEMENTWISE:
        return out
    if t in _REDUCTIONS and op.inputs:
        return _elements(op.inputs[0].shape) or 0
    return 0


def node_cost(graph, replaced: tuple[str, ...]) -> tuple[int, int]:
    """(bytes read and written, FLOPs) of the FuncGraph ops ``replaced`` as one node, from static shapes."""
    ops = []
    for name in replaced:
        try:
            ops.append(graph.get_operation_by_name(name))
        except (KeyError, ValueError):
            continue
    inside = {op.name for op in ops}
    read = {t.name: _nbytes(t) for op in ops for t in op.inputs if t.op.name not in inside}
    written = {t.name: _nbytes(t) for op in ops for t in op.outputs
               if not t.consumers() or any(c.name not in inside for c in t.consumers())}
    return sum(read.values()) + sum(written.values()), sum(_op_flops(op) for op in ops)


def profile_nodes(nodes: list[GraphNode], graph, call, runs: int) -> tuple[list[GraphNode], dict]:
    """Each node with its seconds per run, bytes, FLOPs and copy-roofline share; the profile's summary.

    Args:
        nodes: the graph's nodes (`tflab.lowering.graph.graph_nodes`).
        graph: the FuncGraph (static shapes of the replaced ops).
        call: one run of the function on the user's inputs.
        runs: how many runs are profiled (after the run that instantiated it).

    Returns:
        ``(nodes, summary)``; summary: ``runs``, ``wall_seconds`` (those runs, measured around them),
        ``node_seconds`` (every kernel event of those runs, summed), ``threads`` (host threads that ran
        kernels), ``within_bound`` (``node_seconds <= wall_seconds × threads``: kernels on T threads
        cannot take longer than T times the wall clock of the runs they ran in), ``bound`` (the rule in
        words), ``copy_gbps``, ``copy_way``, ``copy_bytes``.
    """
    import numpy as np

    from custom_ops.bench import copy_roofline
    from tflab._tf.run_metadata import kernel_events

    events, wall = kernel_events(call, runs)
    per_node: dict[str, float] = {}
    threads = set()
    names = {n.name for n in nodes}
    for node, _op, seconds, line in events:
        if node in names:  # a kernel of this function (TF's own events, e.g. the call's, are not nodes)
            per_node[node] = per_node.get(node, 0.0) + seconds
            threads.add(line)
    costed = []
    for n in nodes:
        nbytes, flops = node_cost(graph, n.replaced) if n.op not in ("_Arg", "_Retval", "Const") else (0, 0)
        costed.append(dataclasses.replace(n, seconds=per_node.get(n.name, 0.0) / runs, bytes=nbytes, flops=flops))
    biggest = max((n.bytes for n in costed), default=0)
    copy_bytes = min(max(biggest, 1 << 20), 64 << 20)
    roof = copy_roofline(np.ones(copy_bytes // 4, np.float32), runs=3)
    gbps = roof.gbps
    out = []
    for n in costed:
        share = (n.bytes / n.seconds / 1e9) / gbps if n.seconds > 0 and n.bytes and gbps > 0 else 0.0
        out.append(dataclasses.replace(n, bandwidth_share=share))
    node_seconds = sum(per_node.values())
    nthreads = max(len(threads), 1)
    summary = {"runs": runs, "wall_seconds": wall, "node_seconds": node_seconds, "threads": nthreads,
               "within_bound": node_seconds <= wall * nthreads,
               "bound": f"the nodes' time summed ({node_seconds * 1e3:.3f} ms) is at most the runs' wall time "
                        f"({wall * 1e3:.3f} ms) × the {nthreads} host thread(s) that ran kernels; the rest of "
                        "the wall time is dispatch (the Python call, the executor's scheduling)",
               "copy_gbps": gbps, "copy_way": roof.way, "copy_bytes": copy_bytes}
    return out, summary


def profile_stage(nodes: list[GraphNode], summary: dict) -> tuple[str, dict, list[Piece], str]:
    """The ``profile`` level: nodes by time per run, with kernel, bytes, FLOPs, share of the copy roofline."""
    timed = sorted((n for n in nodes if n.seconds > 0), key=lambda n: -n.seconds)
    total = sum(n.seconds for n in timed) or 1.0
    lines, pieces, ops = [], [], {}
    for n in timed:
        rate = f"{n.flops / n.seconds / 1e9:.2f} GFLOP/s" if n.flops else "-"
        share = f"{n.bandwidth_share:.0%} of copy" if n.bandwidth_share else "-"
        line = (f"{n.name} = {n.op} [{n.kernel}]  {n.seconds * 1e6:.1f} us/run ({n.seconds / total:.0%})  "
                f"{n.bytes} B  {n.flops} FLOP  {rate}  {share}"
                + (f"  # {', '.join(n.source_lines)}" if n.source_lines else ""))
        lines.append(line)
        pieces.append(Piece(line, n.replaced, n.source_lines, n.name))
        ops[n.op] = ops.get(n.op, 0) + 1
    note = (f"TF's profiler over {summary['runs']} runs; roofline: {summary['copy_gbps']:.1f} GB/s "
            f"({summary['copy_way']}, {summary['copy_bytes']} B); {summary['bound']}")
    return "\n".join(lines), ops, pieces, note
