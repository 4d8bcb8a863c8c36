"""The FuncGraph fragment of a `tflab.TraceReport`: an inline SVG with one ``<g class="op">`` per op.

Each op is coloured by its type; captures (the Placeholders standing for captured
variables and tensors, `tflab.tracing.CaptureInfo.internal`) and control-flow ops
(``If``/``While``/``Case``, with their branch functions) are marked. Positions come
from `tflab.report.layout.layout_graph` (Graphviz ``dot`` when installed, else
networkx's topological generations).
"""

from __future__ import annotations

from typing import Any

from tflab.report.layout import NODE_H, NODE_W, layout_graph
from tflab.report.html.base import SEARCH_JS, esc, type_colour

FIT_WIDTH = 1400  # pixels: a wider FuncGraph drawing opens fitted to the page width
CONTROL_FLOW = frozenset({"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase"})


def graph_nodes(report: Any) -> tuple[list[Any], list[tuple[str, str, bool]]]:
    names = {op.name for op in report.ops}
    edges = []
    for op in report.ops:
        for inp in op.inputs:
            control = inp.startswith("^")
            src = inp.lstrip("^").rsplit(":", 1)[0]
            if src in names and src != op.name:
                edges.append((src, op.name, control))
    return list(report.ops), edges


def funcgraph_svg(report: Any, *, engine: str | None = None) -> str:
    """The FuncGraph of a `tflab.TraceReport` as inline SVG: one ``<g class="op">`` per op.

    Each op box is filled with its type's colour (`type_colour`) and labelled
    with its type; its name, type and output specs are in a ``<title>``
    (the hover text) and in ``data-op``/``data-type`` for the search box.
    Captures (`tflab.tracing.CaptureInfo.internal`'s op) get a dashed blue
    border and class ``capture``; control-flow ops a thick orange border, class
    ``cf`` and their branch/body functions in the hover text. Edges are the
    data inputs (solid) and control inputs (dashed), producer above consumer.

    Args:
        report: a `tflab.TraceReport`.
        engine: layout engine for `tflab.report.layout.layout_graph` (None: dot when installed).

    Returns:
        ``<svg class="funcgraph" …>…</svg>``; its width and height are the layout's, pixels.
    """
    ops, edges = graph_nodes(report)
    lay = layout_graph([op.name for op in ops], [(a, b) for a, b, _ in edges], engine=engine)
    pos = lay.positions
    captures = {c.internal.rsplit(":", 1)[0]: c for c in report.captures}
    types = list(dict.fromkeys(op.type for op in ops))
    tclass = {t: f"t{i}" for i, t in enumerate(types)}
    # One fill rule per op type keeps each op's markup short (the tour model has ~1,100 ops).
    style = "".join(f".{tclass[t]} rect{{fill:{type_colour(t)}}}" for t in types)
    out = [f'<svg class="funcgraph" xmlns="http://www.w3.org/2000/svg" width="{lay.width}" '
           f'height="{lay.height}" viewBox="0 0 {lay.width} {lay.height}" data-engine="{lay.engine}" '
           f'data-ops="{len(ops)}"><style>{style}</style>']
    out.append('<g class="edges">')
    for a, b, control in edges:
        (x1, y1), (x2, y2) = pos[a], pos[b]
        dash = ' stroke-dasharray="3 2"' if control else ""
        out.append(f'<path class="edge" d="M{x1 + NODE_W // 2} {y1 + NODE_H}L{x2 + NODE_W // 2} {y2}"{dash}/>')
    out.append("</g>")
    for op in ops:
        x, y = pos[op.name]
        cls = f"op {tclass[op.type]}"
        extra = ""
        cap = captures.get(op.name)
        if cap is not None:
            cls += " capture"
            extra = f"\ncapture: {cap.kind} {cap.name} {cap.dtype}{cap.shape}"
        if op.type in CONTROL_FLOW:
            cls += " cf"
            extra += "\nfunctions: " + ", ".join(op.functions)
        label = op.type if len(op.type) <= 18 else op.type[:17] + "…"
        # The <title> (hover text) holds "name = type": the search box reads it.
        out.append(f'<g class="{cls}" transform="translate({x} {y})"><title>{esc(op.name)} = {esc(op.type)}'
                   f'{esc(extra)}</title><rect/><text x="4" y="15">{esc(label)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def trace_fragment(report: Any, *, engine: str | None = None, op_list: bool = True) -> str:
    """A `tflab.TraceReport`: signature, captures, control flow, the FuncGraph SVG with a search box.

    Args:
        report: a `tflab.TraceReport`.
        engine: layout engine (None: Graphviz dot when installed, else networkx).
        op_list: add the folded list of every op (name, type, inputs, outputs).

    Returns:
        A ``<div class="tflab funcgraph-section">`` fragment.
    """
    var_bytes = sum(c.bytes for c in report.variables)
    cf = ", ".join(f"{o.type} {o.name} → {', '.join(o.functions)}" for o in report.control_flow) or "none"
    svg = funcgraph_svg(report, engine=engine)
    # A wide graph opens fitted to the box's width (the whole shape at a glance); the button zooms to 1:1.
    fit = int(svg.split('width="', 1)[1].split('"', 1)[0]) > FIT_WIDTH
    counts = list(report.op_counts.items())
    legend = "".join(f'<span><i style="background:{type_colour(t)}"></i>{esc(t)} ×{n}</span>'
                     for t, n in counts[:24])
    if len(counts) > 24:
        legend += f"<span>… {len(counts) - 24} more types</span>"
    captured = report.capture_summary
    rows = [("inputs", esc(report._signature_str())), ("outputs", esc(report._outputs_str())),
            ("FunctionType", esc(report.function_type)),
            ("ops", f"{len(report.ops):,}"),
            ("captures", f"{len(report.variables)} variables ({var_bytes:,} bytes, resource handles); "
                         f"eager tensors: {esc(captured)}"),
            ("control flow", esc(cf))]
    parts = [f'<div class="tflab funcgraph-section" data-function="{esc(report.function_name)}">',
             f"<h3>FuncGraph of {esc(report.function_name)}</h3>",
             "<table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>",
             f'<div class="legend">{legend}<span><i style="border:2px dashed #1f5fbf"></i>capture</span>'
             f'<span><i style="border:3px solid #c77700"></i>control flow</span></div>',
             '<p><input type="search" class="op-search" placeholder="search ops by name or type" '
             'oninput="tflabSearch(this)" aria-label="search ops"> <span class="search-count"></span> '
             f'<button type="button" onclick="tflabZoom(this)">{"zoom to 100%" if fit else "fit to width"}'
             '</button></p>',
             f'<div class="graphbox{" fit" if fit else ""}">{svg}</div>']
    if op_list:
        items = "".join(f"<tr><td>{esc(op.name)}</td><td>{esc(op.type)}</td><td>{esc(', '.join(op.inputs))}</td>"
                        f"<td>{esc(', '.join(f'{d}{s}' for _, d, s in op.outputs))}</td></tr>"
                        for op in report.ops)
        parts.append(f"<details><summary>all {len(report.ops):,} ops</summary><table><tr><th>name</th>"
                     f"<th>type</th><th>inputs</th><th>outputs</th></tr>{items}</table></details>")
    parts.append("</div>")
    return "".join(parts)


def trace_notebook_fragment(report: Any) -> str:
    """A `tflab.TraceReport` in a notebook: `trace_fragment` with the op list folded away, and the search box's JS."""
    return trace_fragment(report, op_list=False) + f"<script>{SEARCH_JS}</script>"
