"""The graph path's levels: what Grappler and the runtime made of a tf.function, tied to the user's ops.

TF records them itself (`tflab._tf.run_metadata.function_graphs`): when a
function is instantiated with RunMetadata on, ``pre_optimization_graph`` is
the FuncGraph as instantiated, ``post_optimization_graph`` what Grappler's meta
optimizer returned (``grappler/optimizers/meta_optimizer.cc``), and
``partition_graphs`` what each device ran, after the runtime's own rewrites
(``mkl_layout_pass.cc`` turns ``_FusedMatMul`` into ``_MklNativeFusedMatMul``
where oneDNN is on).

**Provenance through the rewrites.** Grappler records no original names on a
fused node in TF 2.21 (measured: ``experimental_debug_info.original_node_names``
is empty); the remapper gives the fused node the name of the last op it
replaced (``remapper.cc``: ``fused_op.set_name(activation.name())``) and drops
the others. So a node's ``replaced`` ops are the pre-optimization op of its
own name, plus every op that vanished between it and the nodes that survived,
walking the pre-optimization graph's data inputs back. Each fused node is then
checked against its own ``fused_ops`` attr (`check_fused`): a mapping that
lost an op, or gave it to the wrong node, says so in ``provenance_problem``.
"""

from __future__ import annotations

import collections
import difflib
from tflab.lowering.records import GraphNode, OptimizerEffect, Piece

__all__ = ["op_counts", "main_function", "map_rewrites", "check_fused", "kernel_label", "graph_nodes",
           "graph_stage", "optimizer_effects", "NO_COMPUTE"]

#: Nodes that compute nothing: no kernel library is named for them.
NO_COMPUTE = frozenset({"_Arg", "_Retval", "Const", "NoOp", "_Send", "_Recv", "_HostSend", "_HostRecv",
                        "_DeviceArg", "_DeviceRetval"})
# The op types each ``fused_ops`` entry may have replaced (remapper.cc: a BiasAdd may be an AddV2 or Add
# of a 1-D bias; FusedBatchNorm any of its versions).
_FUSED_ALIASES = {"BiasAdd": ("BiasAdd", "BiasAddV1", "AddV2", "Add"), "Add": ("AddV2", "Add"),
                  "FusedBatchNorm": ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"),
                  "Relu": ("Relu",), "Relu6": ("Relu6",), "Elu": ("Elu",), "LeakyRelu": ("LeakyRelu",),
                  "Tanh": ("Tanh",), "Sigmoid": ("Sigmoid",)}
_BASE_ALIASES = {"BatchNormEx": "FusedBatchNorm", "BatchMatMul": "BatchMatMul"}


def op_counts(gdef) -> dict[str, int]:
    """Op type → count over a GraphDef's nodes (every node, as TF lists them)."""
    return dict(collections.Counter(n.op for n in gdef.node))


def main_function(function_graphs: list, op_names: set[str]):
    """The RunMetadata entry of the traced function: the one whose pre-optimization nodes hold most FuncGraph ops."""
    if not function_graphs:
        return None
    return max(function_graphs, key=lambda fg: len(op_names & {n.name for n in fg[0].node}))


def _data_inputs(node) -> list[str]:
    return [i.split(":")[0] for i in node.input if not i.startswith("^")]


def map_rewrites(pre, post) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """Which pre-optimization ops each post-optimization node stands for, and the ops no node took.

    Args:
        pre, post: the pre- and post-optimization GraphDefs of one function.

    Returns:
        ``({post node name: (pre op name, …) in the pre graph's order}, (removed op names, …))``.
        A node Grappler kept stands for itself; a rewritten or fused node (same name, another
        op type) also for the ops that vanished on the way back from it to surviving nodes
        (``Const``/``_Arg`` left out: their values became its inputs). A node with a name the
        pre graph lacks (a constant Grappler folded) stands for nothing.
    """
    pre_nodes = {n.name: n for n in pre.node}
    order = {n.name: i for i, n in enumerate(pre.node)}
    post_names = {n.name for n in post.node}
    claimed: set[str] = set()
    out: dict[str, tuple[str, ...]] = {}
    for node in post.node:
        own = pre_nodes.get(node.name)
        if own is None:
            out[node.name] = ()
            continue
        found = {node.name}
        if own.op != node.op:
            todo = _data_inputs(own)
            while todo:
                name = todo.pop()
                if name in post_names or name in found or name in claimed or name not in pre_nodes:
                    continue
                if pre_nodes[name].op in ("Const", "_Arg"):
                    continue
                found.add(name)
                todo.extend(_data_inputs(pre_nodes[name]))
        claimed |= found
        out[node.name] = tuple(sorted(found, key=order.get))
    removed = tuple(n.name for n in pre.node if n.name not in claimed and n.name not in post_names
                    and n.op not in ("Const", "_Arg"))
    return out, removed


def check_fused(op: str, fused_ops: tuple[str, ...], replaced_types: tuple[str, ...]) -> str:
    """"" when a fused node's replaced ops hold its base op and each of its ``fused_ops``; else what is missing.

    Args:
        op: the fused node's op type (``_FusedMatMul``, ``_FusedConv2D``).
        fused_ops: its ``fused_ops`` attr (``("BiasAdd", "Relu")``).
        replaced_types: the op types of the ops it is mapped to.

    Returns:
        "" or e.g. ``"_FusedMatMul fuses Relu, but the ops mapped to it (MatMul, BiasAdd) hold no Relu"``.
        A ``fused_ops`` entry that is a composite (``GeluApproximate``: several ops) is not checked.
    """
    if not op.startswith("_Fused"):
        return ""
    types = set(replaced_types)
    missing = []
    base = op[len("_Fused"):]
    base = _BASE_ALIASES.get(base, base)
    if not any(t == base or t.startswith(base) for t in types):
        missing.append(base)
    for f in fused_ops:
        allowed = _FUSED_ALIASES.get(f)
        if allowed is not None and not types & set(allowed):
            missing.append(f)
    if not missing:
        return ""
    return (f"{op} fuses {', '.join(missing)}, but the ops mapped to it "
            f"({', '.join(replaced_types) or 'none'}) hold no {' or '.join(missing)}")


def kernel_label(node) -> str:
    """The kernel library a partition-graph node ran on: ``oneDNN``, ``TF (Eigen)``, or ``-``.

    oneDNN's kernels are registered under ``_Mkl*`` op names, and the runtime's rewrite
    (``mkl_layout_pass.cc``) marks each with a ``_kernel`` attr (``MklNameChangeOp``,
    ``MklLayoutDependentOp``); TF's own CPU kernels are Eigen's.
    """
    if node.op in NO_COMPUTE:
        return "-"
    label = node.attr["_kernel"].s.decode() if "_kernel" in node.attr else ""
    if node.op.startswith("_Mkl") or label.startswith("Mkl"):
        return "oneDNN"
    return "TF (Eigen)"


def graph_nodes(pre, post, partitions: list, index_by_name: dict,
                op_layer: dict | None = None) -> tuple[list[GraphNode], tuple[str, ...]]:
    """One `GraphNode` per node that ran (post-optimization nodes, with the partition graph's op and device).

    Args:
        pre, post, partitions: the function's GraphDefs from RunMetadata.
        index_by_name: FuncGraph op name → `tflab.lowering.stages.OpRecord` (its user line).
        op_layer: FuncGraph op name → the Keras layer name whose call created it.
    """
    op_layer = op_layer or {}
    mapping, removed = map_rewrites(pre, post)
    pre_types = {n.name: n.op for n in pre.node}
    ran = {}
    for g in partitions:
        for n in g.node:
            ran.setdefault(n.name, n)
    nodes = []
    for p in post.node:
        part = ran.get(p.name)
        replaced = mapping.get(p.name, ())
        types = tuple(pre_types[n] for n in replaced)
        fused = tuple(x.decode() for x in p.attr["fused_ops"].list.s) if "fused_ops" in p.attr else ()
        # An _Arg's placeholder is made outside the user's body (its traceback is the caller's): no line.
        lines = () if p.op == "_Arg" else tuple(dict.fromkeys(
            index_by_name[n].source for n in replaced if n in index_by_name and index_by_name[n].source))
        op = part.op if part is not None else p.op
        nodes.append(GraphNode(
            name=p.name, grappler_op=p.op, op=op, kernel=kernel_label(part if part is not None else p),
            device=(part.device if part is not None else p.device).rpartition("/device:")[2] or "-",
            replaced=replaced, replaced_types=types, fused_ops=fused, source_lines=lines,
            provenance_problem=check_fused(p.op, fused, types),
            layers=tuple(dict.fromkeys(op_layer[n] for n in replaced if op_layer.get(n)))))
    return nodes, removed


def _node_line(n: GraphNode, level: str) -> str:
    op = n.grappler_op if level == "grappler" else n.op
    fused = f"(fused_ops={','.join(n.fused_ops)})" if n.fused_ops else ""
    frm = "" if n.replaced == (n.name,) and op == (n.replaced_types or ("",))[0] else (
        f"  <- {', '.join(f'{a}:{t}' for a, t in zip(n.replaced, n.replaced_types)) or 'no FuncGraph op'}")
    where = f" on {n.device} [{n.kernel}]" if level == "partition" else ""
    src = f"  # {', '.join(n.source_lines)}" if n.source_lines else ""
    bad = f"  !! {n.provenance_problem}" if n.provenance_problem else ""
    return f"{n.name} = {op}{fused}{where}{frm}{src}{bad}"


def graph_stage(level: str, gdefs: list, nodes: list[GraphNode], removed: tuple[str, ...] = (),
                note: str = "") -> tuple[str, dict, list[Piece], str]:
    """The ``grappler`` or ``partition`` level: its GraphDef(s)' op counts, one line and piece per node."""
    ops: collections.Counter = collections.Counter()
    for g in gdefs:
        ops.update(op_counts(g))
    names = {n.name for g in gdefs for n in g.node}
    lines, pieces = [], []
    for n in nodes:
        if n.name not in names:
            continue
        line = _node_line(n, level)
        lines.append(line)
        pieces.append(Piece(line, n.replaced, n.source_lines, n.name))
    if removed:
        lines.append(f"# removed by Grappler (no node stands for them): {', '.join(removed)}")
    return "\n".join(lines), dict(ops), pieces, note


def _lines(gdef) -> list[str]:
    return sorted(f"{n.name} = {n.op}" for n in gdef.node)


def optimizer_effects(instantiate, baseline_post, optimizers: tuple[str, ...]) -> list[OptimizerEffect]:
    """What each Grappler optimizer changed: the function instantiated again with that one optimizer off.

    Args:
        instantiate: ``instantiate(options)`` → the post-optimization GraphDef of the function
            instantiated under ``tf.config.optimizer.set_experimental_options(options)``.
        baseline_post: the post-optimization GraphDef with the user's options.
        optimizers: the option names, each turned off alone.

    Returns:
        One `OptimizerEffect` per optimizer; ``changed`` is False where the graph with it off equals
        the baseline (the optimizer found nothing to do on this function).
    """
    base = _lines(baseline_post)
    base_ops = collections.Counter(n.op for n in baseline_post.node)
    out = []
    for name in optimizers:
        try:
            off = instantiate({name: False})
        except Exception as e:  # one optimizer that cannot be measured does not stop the others
            out.append(OptimizerEffect(name, False, error=f"{type(e).__name__}: {str(e)[:200]}"))
            continue
        if off is None:
            out.append(OptimizerEffect(name, False, error="TF recorded no function graph for this run"))
            continue
        off_lines = _lines(off)
        if off_lines == base:
            out.append(OptimizerEffect(name, False))
            continue
        off_ops = collections.Counter(n.op for n in off.node)
        diff = "\n".join(difflib.unified_diff(off_lines, base, f"{name} off", f"{name} on", lineterm="", n=0))
        out.append(OptimizerEffect(name, True, removed=dict(off_ops - base_ops), added=dict(base_ops - off_ops),
                                   diff=diff))
    return out

