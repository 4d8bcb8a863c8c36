"""Positions for drawing a FuncGraph: Graphviz ``dot`` when installed, else networkx's layers.

The HTML report and the notebook output (`tflab.report.html`) draw a FuncGraph as
inline SVG, so nobody needs the Graphviz binary to look at one. The layout is
never hand-written here:

* **Graphviz ``dot``** (Sugiyama layered layout with crossing reduction),
  when the ``dot`` program is on PATH: the graph is sent through the
  ``graphviz`` package (already a dependency) and read back in ``plain``
  format (``node NAME X Y W H …`` lines, inches, y up; Graphviz's
  ``lib/common/output.c``).
* **networkx** otherwise: `networkx.topological_generations` gives each op
  its layer (the longest-path-free "generation" of a DAG: every op lies below
  all of its inputs), and within a layer ops are ordered by the mean position
  of their inputs in the layer above (one barycenter sweep, the ordering step
  of the same Sugiyama scheme), which keeps a chain of ops in one column.

A FuncGraph is a DAG (TF's ``FuncGraph`` has no back edges: loops are
``While`` ops with body functions), so layers always exist; a cycle (never
seen in a GraphDef, but cheap to survive) falls back to one layer per
strongly connected component via `networkx.condensation`.
"""

from __future__ import annotations

import dataclasses
import shutil
from typing import Iterable, Sequence

# Node box size and spacing in SVG pixels (the networkx engine; dot's own sizes are scaled to match).
NODE_W, NODE_H = 120, 22
GAP_X, GAP_Y = 14, 34
# dot's crossing reduction grows much faster than linearly: on the tour's ~1,100-op
# FuncGraph it ran for minutes on a loaded 2-core machine, so larger graphs take the
# networkx layout (well under a second there), and a dot run is cut at DOT_TIMEOUT_S.
DOT_MAX_NODES = 400
DOT_TIMEOUT_S = 20


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each node goes.

    Attributes:
        positions: node name → (x, y) of the box's top-left corner, SVG pixels (y down).
        width: drawing width in pixels.
        height: drawing height in pixels.
        engine: ``"dot"`` or ``"networkx"``: which layout made it.
    """

    positions: dict
    width: int
    height: int
    engine: str


def layout_graph(nodes: Sequence[str], edges: Iterable[tuple[str, str]], *,
                 engine: str | None = None) -> Layout:
    """Lays out a directed graph top to bottom (inputs above their consumers).

    Args:
        nodes: node names (op names), in graph order.
        edges: (producer, consumer) pairs; pairs naming an unknown node are ignored.
        engine: ``"dot"``, ``"networkx"`` or None (dot when the program is on PATH and the
            graph has at most `DOT_MAX_NODES` nodes; networkx otherwise, and when dot
            runs past `DOT_TIMEOUT_S` seconds or fails).

    Returns:
        A `Layout` with a position for every node.

    Raises:
        ValueError: ``engine="dot"`` and the ``dot`` program is not on PATH.
    """
    known = set(nodes)
    edge_list = [(a, b) for a, b in edges if a in known and b in known and a != b]
    if engine is None:
        if shutil.which("dot") and len(known) <= DOT_MAX_NODES:
            try:
                return _dot_layout(list(nodes), edge_list)
            except Exception:  # timeout or a dot failure: the pure-Python layout still draws it
                pass
        engine = "networkx"
    if engine == "dot":
        if not shutil.which("dot"):
            raise ValueError("the Graphviz `dot` program is not on PATH")
        return _dot_layout(list(nodes), edge_list)
    return _networkx_layout(list(nodes), edge_list)


def _networkx_layout(nodes: list[str], edges: list[tuple[str, str]]) -> Layout:
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    if nx.is_directed_acyclic_graph(g):
        generations = [list(gen) for gen in nx.topological_generations(g)]
    else:
        cond = nx.condensation(g)
        members = nx.get_node_attributes(cond, "members")
        generations = [[n for c in gen for n in members[c]] for gen in nx.topological_generations(cond)]
    # Generations place every op as early as it can go (all Consts and captures in the
    # top layer). Pull each op down to just above its first consumer, walking the
    # layers bottom up: the ops on the longest path keep their layer, and a weight's
    # Placeholder -> ReadVariableOp chain sits beside the Conv2D that reads it.
    level = {n: i for i, gen in enumerate(generations) for n in gen}
    for gen in reversed(generations):
        for n in gen:
            succ = [level[c] for c in g.successors(n)]
            if succ:
                level[n] = max(min(succ) - 1, level[n])
    generations = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for n in nodes:
        generations[level[n]].append(n)
    order = {n: i for i, n in enumerate(nodes)}
    slot: dict[str, float] = {}
    rows = []
    for gen in generations:
        def key(n: str) -> tuple[float, int]:
            preds = [slot[p] for p in g.predecessors(n) if p in slot]
            return (sum(preds) / len(preds) if preds else float(order[n]), order[n])

        gen.sort(key=key)
        # slot: the barycenter target, kept as the node's column so the next layer can follow it
        for i, n in enumerate(gen):
            slot[n] = float(i)
        rows.append(gen)
    widest = max((len(r) for r in rows), default=1)
    positions = {}
    for y, row in enumerate(rows):
        offset = (widest - len(row)) * (NODE_W + GAP_X) / 2  # centre short layers
        for x, n in enumerate(row):
            positions[n] = (round(offset + x * (NODE_W + GAP_X)) + GAP_X,
                            y * (NODE_H + GAP_Y) + GAP_Y // 2)
    return Layout(positions, width=widest * (NODE_W + GAP_X) + GAP_X,
                  height=len(rows) * (NODE_H + GAP_Y) + GAP_Y // 2, engine="networkx")


def _dot_layout(nodes: list[str], edges: list[tuple[str, str]]) -> Layout:
    import graphviz

    ids = {n: f"n{i}" for i, n in enumerate(nodes)}
    dot = graphviz.Digraph(graph_attr={"rankdir": "TB", "nodesep": "0.15", "ranksep": "0.35"},
                           node_attr={"shape": "box", "width": f"{NODE_W / 72:.3f}",
                                      "height": f"{NODE_H / 72:.3f}", "fixedsize": "true", "label": ""})
    for n in nodes:
        dot.node(ids[n])
    for a, b in edges:
        dot.edge(ids[a], ids[b])
    import subprocess

    # The graphviz package writes the DOT source; the dot program is run here to bound its time.
    plain = subprocess.run(["dot", "-Tplain"], input=dot.source, capture_output=True, text=True,
                           timeout=DOT_TIMEOUT_S, check=True).stdout
    back = {v: k for k, v in ids.items()}
    width = height = 0.0
    centres = {}
    for line in plain.splitlines():
        parts = line.split()
        if parts[:1] == ["graph"]:
            width, height = float(parts[2]) * 72, float(parts[3]) * 72
        elif parts[:1] == ["node"]:
            centres[back[parts[1]]] = (float(parts[2]) * 72, float(parts[3]) * 72)
    positions = {n: (round(x - NODE_W / 2) + GAP_X, round(height - y - NODE_H / 2) + GAP_Y // 2)
                 for n, (x, y) in centres.items()}
    return Layout(positions, width=round(width) + 2 * GAP_X, height=round(height) + GAP_Y, engine="dot")
