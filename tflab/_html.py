"""HTML fragments for every tflab report, and the self-contained page that holds them.

One fragment function per report kind; the ``--html FILE`` page of ``tflab
tour``, ``tflab retrace`` and ``tflab export`` is a list of these fragments
inside `page`, and each report's ``_repr_html_`` (Jupyter's rich display
protocol, ``IPython.core.formatters.HTMLFormatter``) returns the same
fragment through `fragment`. Everything is inline: CSS, the few lines of
JavaScript for the FuncGraph search box, and the SVG. Nothing is fetched, so
the page opens offline and in a sandboxed notebook output.

This module imports no report module: `fragment` dispatches on the class
name, so any layer can call it without an import cycle. IPython is never
imported.

The FuncGraph picture (`funcgraph_svg`) has one ``<g class="op">`` per op of
the FuncGraph, coloured by op type; captures (the Placeholders standing for
captured variables and tensors, `tflab.tracing.CaptureInfo.internal`) and
control-flow ops (``If``/``While``/``Case``, with their branch functions)
are marked. Positions come from `tflab._graph_layout.layout_graph` (Graphviz
``dot`` when installed, else networkx's topological generations).
"""

from __future__ import annotations

import colorsys
import hashlib
import html
import json
import math
from typing import Any, Iterable, Sequence

from tflab._graph_layout import NODE_H, NODE_W, layout_graph

FIT_WIDTH = 1400  # pixels: a wider FuncGraph drawing opens fitted to the page width
CONTROL_FLOW = frozenset({"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase"})

# Notebook front ends style tables too (JupyterLab right-aligns cells), hence the !important.
CSS = ("""
.tflab{font:13px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#1d2330}
.tflab h1{font-size:20px;margin:4px 0 8px}.tflab h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #dde}
.tflab h3{font-size:14px;margin:10px 0 4px}
.tflab table{border-collapse:collapse;margin:4px 0 8px}.tflab td,.tflab th{border:1px solid #d8dbe3;padding:2px 6px;
text-align:left!important;vertical-align:top}.tflab th{background:#f1f3f8}
.tflab td.num{text-align:right!important;font-variant-numeric:tabular-nums}
.tflab .config{font-family:ui-monospace,Menlo,Consolas,monospace;background:#f6f7fa;padding:4px 6px;border-radius:3px}
.tflab pre{background:#f6f7fa;padding:6px;overflow:auto;max-height:360px;font-size:12px}
.tflab .bar{display:inline-block;height:10px;vertical-align:middle;border-radius:2px}
.tflab .ok{color:#17803d}.tflab .bad{color:#b3261e;font-weight:600}
.tflab .graphbox{overflow:auto;max-height:560px;border:1px solid #d8dbe3;background:#fff}
.tflab .graphbox.fit svg{width:100%%;height:auto}
.tflab svg.funcgraph text{font:10px ui-monospace,Menlo,Consolas,monospace;pointer-events:none}
.tflab svg.funcgraph .edge{stroke:#9aa3b5;stroke-width:1;fill:none}
.tflab svg.funcgraph .op rect{stroke:#55607a;stroke-width:.6;rx:3px;width:%dpx;height:%dpx}
.tflab svg.funcgraph .op.capture rect{stroke:#1f5fbf;stroke-width:2.2;stroke-dasharray:4 2}
.tflab svg.funcgraph .op.cf rect{stroke:#c77700;stroke-width:3}
.tflab svg.funcgraph.searching .op{opacity:.18}.tflab svg.funcgraph .op.hit{opacity:1}
.tflab svg.funcgraph .op.hit rect{stroke:#e0115f;stroke-width:3}
.tflab .legend span{display:inline-block;margin:0 8px 2px 0;white-space:nowrap}
.tflab .legend i{display:inline-block;width:10px;height:10px;margin-right:3px;border:1px solid #55607a}
.tflab details>summary{cursor:pointer}
.tflab svg.timeline text{font:11px system-ui,Helvetica,Arial,sans-serif}
""" % (NODE_W, NODE_H))

# The search box: marks every op whose name or type contains the query, dims the rest,
# scrolls the first match into view and says how many matched.
SEARCH_JS = """
function tflabZoom(button){
  var box=button.closest('.funcgraph-section').querySelector('.graphbox');
  box.classList.toggle('fit');button.textContent=box.classList.contains('fit')?'zoom to 100%':'fit to width';
}
function tflabSearch(input){
  var box=input.closest('.funcgraph-section');var svg=box.querySelector('svg.funcgraph');
  var q=input.value.trim().toLowerCase();var n=0,first=null;
  svg.querySelectorAll('g.op').forEach(function(g){
    var t=g.querySelector('title');var hit=q&&t&&t.textContent.split('\\n')[0].toLowerCase().indexOf(q)>=0;
    g.classList.toggle('hit',!!hit);if(hit){n++;if(!first)first=g;}});
  svg.classList.toggle('searching',!!q);
  box.querySelector('.search-count').textContent=q?(n+' op'+(n==1?'':'s')+' match'):'';
  if(first&&first.scrollIntoView)first.scrollIntoView({block:'center',inline:'center'});
}
"""

_TRACE_COLOURS = {"first": "#2b6cb0", "retrace": "#d97706", "variable_creation": "#7c3aed",
                  "failed": "#b3261e", "concrete": "#0f766e", "cached": "#64748b"}


def esc(x: Any) -> str:
    """HTML-escaped text of ``x`` (quotes too, so it is safe inside attributes)."""
    return html.escape(str(x), quote=True)


def _num(x: Any, spec: str = ".3g") -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return format(x, spec)
    return esc(x)


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw`` (then they are HTML already)."""
    out = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cells = []
        for c in r:
            cls = ' class="num"' if isinstance(c, (int, float)) and not isinstance(c, bool) else ""
            cells.append(f"<td{cls}>{c if raw and isinstance(c, str) else _num(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def bar(fraction: float | None, colour: str = "#2b6cb0", width: int = 120) -> str:
    """An inline bar ``fraction`` (clipped to [0, 1]) of ``width`` pixels; empty for None."""
    if fraction is None or not math.isfinite(fraction):
        return ""
    w = max(1, round(min(max(fraction, 0.0), 1.0) * width))
    return f'<span class="bar" style="width:{w}px;background:{colour}"></span>'


def type_colour(op_type: str) -> str:
    """A stable pastel colour per op type (the same type has the same colour on every page)."""
    h = int(hashlib.md5(op_type.encode()).hexdigest()[:6], 16) / 0xFFFFFF
    r, g, b = colorsys.hls_to_rgb(h, 0.80, 0.60)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


# --------------------------------------------------------------------------- config

def config_fragment(config: Any) -> str:
    """The configuration line every report carries (`tflab.runtime.RuntimeConfig.one_line`).

    Args:
        config: a `RuntimeConfig`, its ``to_dict()``, or None (measured now).
    """
    if config is None:
        from tflab.runtime import runtime_config

        config = runtime_config()
    line = config.get("one_line", "") if isinstance(config, dict) else config.one_line()
    return f'<div class="config-section"><b>configuration:</b> <span class="config">{esc(line)}</span></div>'


# --------------------------------------------------------------------------- FuncGraph

def _graph_nodes(report: Any) -> tuple[list[Any], list[tuple[str, str, bool]]]:
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
        engine: layout engine for `tflab._graph_layout.layout_graph` (None: dot when installed).

    Returns:
        ``<svg class="funcgraph" …>…</svg>``; its width and height are the layout's, pixels.
    """
    ops, edges = _graph_nodes(report)
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
    rows = [("inputs", esc(report._signature_str())), ("outputs", esc(report._outputs_str())),
            ("FunctionType", esc(report.function_type)),
            ("ops", f"{len(report.ops):,}"),
            ("captures", f"{len(report.variables)} variables ({var_bytes:,} bytes, resource handles); "
                         f"eager tensors: {esc(report.capture_summary)}"),
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


# --------------------------------------------------------------------------- trace timeline

def _trace_dict(t: Any) -> dict:
    return t if isinstance(t, dict) else t.to_dict()


def timeline_svg(traces: Sequence[dict], calls: int | None) -> str:
    """Calls along the axis, one mark per trace (colour: its kind), labelled ``#N``.

    Args:
        traces: `tflab.retrace.Trace` dicts (``to_dict()``), oldest first.
        calls: the number of calls made, when known (`RetraceProbe.calls`);
            None puts the traces in order (a trace log does not count calls).
    """
    known = calls is not None and all(t.get("call") for t in traces)
    n = max(calls or 0, len(traces), 1) if known else max(len(traces), 1)
    w, left, step = 640, 30, 0.0
    step = (w - 2 * left) / max(n - 1, 1)
    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{w}" height="62" '
             f'data-traces="{len(traces)}"><line x1="{left}" y1="30" x2="{w - left}" y2="30" stroke="#888"/>']
    if known:
        for c in range(1, n + 1):
            x = left + (c - 1) * step
            parts.append(f'<line x1="{x:.1f}" y1="27" x2="{x:.1f}" y2="33" stroke="#888"/>')
        parts.append(f'<text x="{left}" y="56">call 1</text><text x="{w - left - 40}" y="56">call {n}</text>')
    else:
        parts.append(f'<text x="{left}" y="56">traces in order (a trace log does not count calls)</text>')
    seen_calls: dict = {}
    for i, t in enumerate(traces):
        c = t.get("call") if known else i + 1
        # Traces made by one call (TF's variable-creation re-trace) sit side by side, not on top of each other.
        dup = seen_calls[c] = seen_calls.get(c, -1) + 1
        x = left + (c - 1) * step + dup * 16
        colour = _TRACE_COLOURS.get(t.get("kind"), "#444")
        why = "; ".join(t.get("reasons") or []) or t.get("kind", "")
        parts.append(f'<g class="trace-mark" data-kind="{esc(t.get("kind"))}"><title>#{t["index"]} '
                     f'{esc(t.get("kind"))}{(" at call " + str(c)) if known else ""}: {esc(why)}</title>'
                     f'<circle cx="{x:.1f}" cy="30" r="7" fill="{colour}"/>'
                     f'<text x="{x - 7:.1f}" y="16">#{t["index"]}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_fragment(groups: Sequence[dict]) -> str:
    """The trace timeline of each tf.function, grouped by qualified name.

    Args:
        groups: one dict per tf.function object: ``label`` (its name, with the
            owner when several share it), ``function`` (qualified name: the
            group key), ``traces`` (`Trace` objects or dicts), ``calls`` (or None).

    Returns:
        A ``<div class="tflab timeline-section">`` fragment: per qualified name a
        heading, then per object its timeline SVG and a table of traces with
        their reasons and fixes.
    """
    by_name: dict[str, list[dict]] = {}
    for g in groups:
        by_name.setdefault(g.get("function") or g.get("label") or "?", []).append(g)
    parts = ['<div class="tflab timeline-section">']
    if not groups:
        parts.append("<p>no tf.function traced</p>")
    legend = "".join(f'<span><i style="background:{c};border-radius:5px"></i>{k}</span>'
                     for k, c in _TRACE_COLOURS.items())
    parts.append(f'<div class="legend">{legend}</div>')
    for name, members in by_name.items():
        total = sum(len(m["traces"]) for m in members)
        parts.append(f'<div class="function-group" data-function="{esc(name)}"><h3>{esc(name)}: {total} '
                     f'trace(s){f" in {len(members)} objects" if len(members) > 1 else ""}</h3>')
        for m in members:
            traces = [_trace_dict(t) for t in m["traces"]]
            calls = m.get("calls")
            if len(members) > 1:
                parts.append(f"<h4>{esc(m.get('label') or name)}</h4>")
            parts.append(timeline_svg(traces, calls))
            if calls is not None:
                parts.append(f"<p>{len(traces)} trace(s) in {calls} call(s)</p>")
            rows = []
            for t in traces:
                fixes = list(dict.fromkeys(t.get("fixes") or []))
                why = "<br>".join(esc(r) for r in t.get("reasons") or []) or esc(
                    ", ".join(f"{k}={v}" for k, v in (t.get("inputs") or {}).items()))
                versus = f" vs #{t['compared_with']}" if t.get("compared_with") and t["kind"] == "retrace" else ""
                colour = _TRACE_COLOURS.get(t.get("kind"), "#444")
                rows.append((f"#{t['index']}", esc(t.get("call") or "–"),
                             f'<span style="color:{colour}">{esc(t.get("kind"))}{versus}</span>', why,
                             "<br>".join(esc(f) for f in fixes)))
            parts.append(table(("trace", "call", "kind", "reasons (or the inputs traced)", "fix"), rows, raw=True))
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def probe_groups(probe: Any) -> list[dict]:
    """`timeline_fragment` input for one `tflab.RetraceProbe`."""
    return [{"function": probe.function_name, "label": probe.function_name,
             "traces": list(probe.traces), "calls": probe.calls}]


def script_groups(result: Any) -> list[dict]:
    """`timeline_fragment` input for a `ScriptTraces` (``tflab retrace SCRIPT``)."""
    return [{"function": f.function_name, "label": f.label or f.function_name, "traces": list(f.traces),
             "calls": None} for f in result.functions]


# --------------------------------------------------------------------------- export / TFLite

def _op_records_fragment(ops: Any) -> str:
    """Per-op errors of a TFLite variant (`TFLiteCheck.ops`, when present) as a heat list."""
    recs = []
    for r in ops or ():
        d = r if isinstance(r, dict) else (r.to_dict() if hasattr(r, "to_dict") else vars(r))
        err = next((d[k] for k in ("bound_ratio", "max_rel_error", "max_abs_error", "error") if
                    isinstance(d.get(k), (int, float))), None)
        recs.append((d.get("name") or d.get("op") or d.get("tensor") or "?", d.get("type") or d.get("op_type") or "",
                     err, d))
    if not recs:
        return ""
    worst = max((abs(e) for *_, e, _ in recs if e is not None), default=0.0) or 1.0
    rows = [(esc(n), esc(t), _num(e), bar(None if e is None else abs(e) / worst,
                                          "#b3261e" if e is not None and abs(e) > 1 else "#d97706"))
            for n, t, e, _ in sorted(recs, key=lambda r: -(abs(r[2]) if r[2] is not None else -1))[:40]]
    return (f"<details><summary>per-op error ({len(recs)} ops, worst first)</summary>"
            + table(("op", "type", "error", ""), rows, raw=True) + "</details>")


def tflite_fragment(check: Any) -> str:
    """One `tflab.TFLiteCheck`: size, per-output error against its bound (bars), ops, notes."""
    rows = []
    for o in check.outputs.values():
        ratio = o.bound_ratio
        colour = "#17803d" if ratio is not None and ratio <= 1 else "#b3261e"
        rows.append((esc(o.name), esc(o.dtype), _num(o.max_abs_error), _num(o.bound), _num(ratio, ".2f"),
                     bar(None if ratio is None else ratio, colour), _num(o.argmax_agreement, ".0%")))
    verdict = ("within bound" if check.within_bound else "EXCEEDS its bound" if check.within_bound is False
               else "no bound")
    parts = [f'<div class="tflab tflite-section"><h3>TFLite {esc(check.quantization)}: '
             f'<span class="{"ok" if check.within_bound else "bad"}">{verdict}</span></h3>',
             f"<p>{check.size_bytes:,} bytes"
             + (f" ({check.size_ratio:.2f}× float)" if check.size_ratio else "")
             + f"; {sum(check.op_counts.values())} ops; runtime {esc(check.runtime)}</p>",
             table(("output", "dtype", "max |Δ|", "bound", "Δ/bound", "", "argmax"), rows, raw=True),
             _op_records_fragment(getattr(check, "ops", None)),
             "".join(f"<p>note: {esc(n)}</p>" for n in check.notes), "</div>"]
    return "".join(parts)


def export_fragment(report: Any) -> str:
    """A `tflab.export.ExportReport`: the SavedModel check, then the variants table.

    The table has one row per TFLite variant: status, bytes, size ratio, the
    worst output's ``|Δ|``, bound and ``Δ/bound`` as a bar (green within the
    bound, red beyond), argmax agreement and conversion time; per-op errors
    (`TFLiteCheck.ops`, when the check has them) follow, folded.
    """
    sm = report.saved_model
    rows, details = [], []
    for q, v in report.variants.items():
        c = v.check
        if c is None or not c.outputs:
            rows.append((esc(q), esc(v.status), "–", "–", "–", "–", "–", "", "–", _num(v.convert_seconds, ".1f"),
                         esc(v.error or (c.runtime if c is not None else ""))))
            continue
        w = c.outputs[c.worst_output] if c.worst_output in c.outputs else next(iter(c.outputs.values()))
        agree = [o.argmax_agreement for o in c.outputs.values() if o.argmax_agreement is not None]
        ok = v.status == "ok"
        rows.append((esc(q), f'<span class="{"ok" if ok else "bad"}">{esc(v.status)}</span>',
                     _num(c.size_bytes), _num(c.size_ratio, ".2f"), _num(w.worst_abs_error), _num(w.worst_bound),
                     _num(w.bound_ratio, ".2f"), bar(w.bound_ratio, "#17803d" if (w.bound_ratio or 0) <= 1
                                                     else "#b3261e"),
                     _num(min(agree), ".0%") if agree else "–", _num(v.convert_seconds, ".1f"),
                     f"{sum(c.op_counts.values())} ops; {esc(c.runtime)}"))
        ops = _op_records_fragment(getattr(c, "ops", None))
        if ops:
            details.append(f"<h4>{esc(q)}</h4>{ops}")
    parts = ['<div class="tflab export-section">',
             f"<p>export {esc(report.model)} → {esc(report.out)} (examples: {esc(report.examples)})</p>",
             f"<p>SavedModel: <span class=\"{'ok' if sm.bit_exact else 'bad'}\">"
             f"{'bit-exact' if sm.bit_exact else 'NOT bit-exact'}</span> over {sm.batch_count} batch(es), "
             f"signatures {esc(', '.join(sm.signatures))}</p>",
             table(("variant", "status", "bytes", "×float", "|Δ|", "bound", "Δ/bound", "", "argmax",
                    "convert s", "ops / runtime / error"), rows, raw=True),
             "".join(details),
             _model_explorer_links(report.out), "</div>"]
    return "".join(parts)


def _model_explorer_links(out: str) -> str:
    """Links to Model Explorer node-data files (``*node_data*.json``) in the export folder, when there are any."""
    import glob
    import os
    from pathlib import Path

    files = sorted(glob.glob(os.path.join(str(out), "**", "*node_data*.json"), recursive=True))
    links = ", ".join(f'<a href="{esc(Path(os.path.abspath(f)).as_uri())}">{esc(os.path.relpath(f, out))}</a>'
                      for f in files)
    return ("<p>Google's Model Explorer (<code>pip install ai-edge-model-explorer</code>) draws the "
            "<code>.tflite</code> files of the export folder" + (f"; per-op node data: {links}" if links else "")
            + ".</p>")


# --------------------------------------------------------------------------- generic tables

def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def dict_table(rows: dict, columns: Sequence[str] | None = None, chart: str | None = None,
               chart_colour: str = "#2b6cb0") -> str:
    """A table of ``name → dict`` rows, scalar fields as columns, with a bar for column ``chart``."""
    if not rows:
        return "<p>none</p>"
    if columns is None:
        columns = []
        for d in rows.values():
            for k, v in (d.items() if isinstance(d, dict) else ()):
                if _scalar(v) and k not in columns and not (isinstance(v, str) and len(v) > 80):
                    columns.append(k)
    top = max((abs(d.get(chart)) for d in rows.values() if isinstance(d, dict)
               and isinstance(d.get(chart), (int, float)) and not isinstance(d.get(chart), bool)),
              default=0) if chart else 0
    out = []
    for name, d in rows.items():
        d = d if isinstance(d, dict) else {"value": d}
        cells = [esc(name)] + [_num(d.get(c)) for c in columns]
        if chart:
            v = d.get(chart)
            cells.append(bar(abs(v) / top if top and isinstance(v, (int, float)) else None, chart_colour))
        out.append(cells)
    return table(["", *columns] + ([f"{chart}"] if chart else []), out, raw=True)


def modes_fragment(d: Any) -> str:
    """A `tflab.ModeComparison` (or its ``to_dict()``): per mode max ULP, |Δ| and time, with a time bar."""
    d = d.to_dict() if hasattr(d, "to_dict") else d
    rows = {}
    for m, r in (d.get("modes") or {}).items():
        ulp = r.get("max_ulp_above_atol") or r.get("max_ulp") or {}
        diff = r.get("max_abs_diff") or {}
        rows[m] = {"error": r.get("error"), "max ULP (outputs)": ulp.get("outputs") if isinstance(ulp, dict) else ulp,
                   "max ULP (gradients)": ulp.get("gradients") if isinstance(ulp, dict) else None,
                   "max |Δ| outputs": diff.get("outputs") if isinstance(diff, dict) else diff,
                   "first call s": r.get("first_call_seconds"), "median s": r.get("median_seconds")}
    parts = [f'<div class="tflab modes-section"><h3>{esc(d.get("function_name") or d.get("function") or "")}: '
             f"eager vs graph vs XLA</h3>", dict_table(rows, chart="median s")]
    if d.get("fusion_count") is not None:
        parts.append(f"<p>XLA optimized HLO: {d['fusion_count']} fusions "
                     f"({esc(', '.join(f'{k} {v}' for k, v in sorted((d.get('fusion_kinds') or {}).items())))})</p>")
    parts += [f"<p>finding: {esc(f)}</p>" for f in d.get("findings") or []]
    parts.append("</div>")
    return "".join(parts)


def precision_fragment(d: Any) -> str:
    """A `tflab.PrecisionComparison` (or its dict): per policy verdict, underflow and overflow (bar: underflow)."""
    d = d.to_dict() if hasattr(d, "to_dict") else d
    rows = {}
    for p, r in (d.get("policies") or {}).items():
        # With a loss scale the policy's own numbers are the scaled run's; the unscaled run shows the underflow.
        unscaled = r.get("unscaled") or r
        rows[p] = {"verdict": r.get("verdict"), "underflow (no loss scale)": unscaled.get("underflow_count"),
                   "underflow (loss scaled)": r.get("underflow_count") if r.get("unscaled") else None,
                   "overflow": r.get("overflow_count"), "loss_scale": r.get("loss_scale"), "seconds": r.get("seconds")}
    return (f'<div class="tflab precision-section"><h3>{esc(d.get("function") or "")}: per-policy underflow</h3>'
            + dict_table(rows, chart="underflow (no loss scale)", chart_colour="#b3261e") + "</div>")


def loss_scaling_fragment(d: dict) -> str:
    """`demonstrate_loss_scaling`'s dict: one row per run."""
    rows = {r.get("label", str(i)): {k: v for k, v in r.items() if k != "label"}
            for i, r in enumerate(d.get("rows") or []) if isinstance(r, dict)}
    head = " · ".join(esc(d[k]) for k in ("model", "step") if _scalar(d.get(k)) and d.get(k))
    return (f"<p>{head}</p>" if head else "") + dict_table(rows, chart="underflow_fraction", chart_colour="#b3261e")


def distribute_fragment(d: dict) -> str:
    """The tour's tf.distribute numbers: replicas, per-replica rows (a bar per replica), traces per variant."""
    parts = ['<div class="tflab distribute-section">',
             f"<p>replicas in sync: {esc(d.get('replicas_in_sync'))}</p>"]
    shapes = d.get("per_replica_shapes")
    if shapes:
        rows = []
        flat = shapes if isinstance(shapes, list) else list(shapes.values())
        for i, s in enumerate(flat):
            rows.append(s if isinstance(s, list) else [s])
        most = max((r[0] if r and isinstance(r[0], int) else 0) for row in rows for r in
                   [row if isinstance(row[0], list) else [row]]) if rows else 0
        trs = []
        for i, row in enumerate(rows):
            inner = row if row and isinstance(row[0], list) else [row]
            trs.append((f"step {i + 1}", esc(" | ".join(str(x) for x in inner)),
                        "".join(bar((r[0] / most) if most and r and isinstance(r[0], int) else None, "#0f766e", 60)
                                + " " for r in inner)))
        parts.append("<h4>per-replica rows</h4>" + table(("", "per-replica shapes", "rows per replica"), trs, raw=True))
    variants = {k: v for k, v in d.items() if isinstance(v, dict) and "trace_count" in v}
    if variants:
        parts.append("<h4>traces per input pipeline</h4>" + dict_table(
            {k: {c: v.get(c) for c in ("trace_count", "replica_runs", "replica_runs_per_trace") if c in v}
             for k, v in variants.items()}, chart="trace_count", chart_colour="#d97706"))
    parts.append("</div>")
    return "".join(parts)


def text_fragment(obj: Any, title: str | None = None) -> str:
    """Any report: its class name as the title and its ``to_text()`` (or repr) in a ``<pre>``."""
    text = obj.to_text() if hasattr(obj, "to_text") else repr(obj)
    kind = type(obj).__name__
    return (f'<div class="tflab report-section" data-kind="{esc(kind)}"><h3>{esc(title or kind)}</h3>'
            f"<pre>{esc(text)}</pre></div>")


def json_fragment(d: Any, title: str) -> str:
    """A dict shown as folded, pretty JSON."""
    from tflab._jsonutil import to_jsonable

    return (f"<details><summary>{esc(title)}</summary><pre>{esc(json.dumps(to_jsonable(d), indent=1))}</pre>"
            "</details>")


# --------------------------------------------------------------------------- dispatch and page

def _style() -> str:
    return f"<style>{CSS}</style>"


def fragment(obj: Any) -> str:
    """The HTML fragment of any tflab report, for ``_repr_html_`` (inline CSS and JS, no network).

    Dispatches on the class name (no import of the report modules): a
    `TraceReport` gives `trace_fragment` (op list folded, to stay small in a
    notebook), a `RetraceProbe` its trace timeline, `ModeComparison`,
    `PrecisionComparison`, `TFLiteCheck` and `ExportReport` their tables, every
    other report its ``to_text()``.

    Args:
        obj: a report object.

    Returns:
        A ``<div class="tflab">`` holding the fragment and the CSS/JS it needs.
    """
    kind = type(obj).__name__
    if kind == "TraceReport":
        body = trace_fragment(obj, op_list=False)
        body += f"<script>{SEARCH_JS}</script>"
    elif kind == "RetraceProbe":
        body = (f"<h3>RetraceProbe({esc(obj.function_name)}): {obj.trace_count} trace(s) in {obj.calls} call(s)</h3>"
                + timeline_fragment(probe_groups(obj))
                + "".join(f"<p>stale: {esc(s.text)}<br>fix: {esc(s.fix)}</p>" for s in obj.stale))
    elif kind == "ScriptTraces":
        body = timeline_fragment(script_groups(obj))
    elif kind == "ModeComparison":
        body = modes_fragment(obj)
    elif kind == "PrecisionComparison":
        body = precision_fragment(obj) + text_fragment(obj)
    elif kind == "TFLiteCheck":
        body = tflite_fragment(obj)
    elif kind == "ExportReport":
        body = export_fragment(obj)
    elif kind == "DistributedTraceReport":
        devices = {d or "(unplaced inputs/outputs)": {"ops": n} for d, n in obj.ops_per_device.items()}
        body = (text_fragment(obj) + "<h4>ops per device (one row per replica)</h4>"
                + dict_table(devices, chart="ops", chart_colour="#0f766e")
                + trace_fragment(obj.report, op_list=False) + f"<script>{SEARCH_JS}</script>")
    elif kind == "MultiWorkerReport":
        rows = {f"worker {r.task}": {"replicas_in_sync": r.replicas_in_sync, "step_traces": r.step_traces,
                                     "replica_runs": r.replica_runs, "local_batches": str(list(r.local_batches)),
                                     "local_data_sum": r.local_data_sum, "seconds": r.seconds}
                for r in obj.rows}
        body = (text_fragment(obj) + "<h4>per-worker rows</h4>"
                + dict_table(rows, chart="local_data_sum", chart_colour="#0f766e"))
    elif kind in ("DistributedRetraceProbe",):
        body = (f"<h3>{esc(kind)}({esc(obj.function_name)}): {obj.trace_count} trace(s) in {obj.calls} call(s)"
                f"</h3>" + timeline_fragment(probe_groups(obj)) + text_fragment(obj))
    else:
        body = text_fragment(obj)
    return f'<div class="tflab">{_style()}{body}</div>'


def section(sid: str, heading: str, body: str) -> str:
    """One ``<section id=…>`` of a page."""
    return f'<section id="{esc(sid)}" class="report-part"><h2>{esc(heading)}</h2>{body}</section>'


def page(title: str, sections: Sequence[str], config: Any = None) -> str:
    """A whole self-contained HTML document: the title, the configuration line, then the sections.

    Args:
        title: the page title.
        sections: `section` strings, in order.
        config: a `RuntimeConfig` or its dict (None: measured now).

    Returns:
        The document text (UTF-8); nothing in it refers to another file or URL.
    """
    nav = "".join(f'<a href="#{s.split(chr(34))[1]}">{esc(s.split("<h2>")[1].split("</h2>")[0])}</a> · '
                  for s in sections if s.startswith("<section"))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
            f"<title>{esc(title)}</title>{_style()}<script>{SEARCH_JS}</script></head>"
            f'<body class="tflab"><h1>{esc(title)}</h1>'
            + section("config", "Configuration", config_fragment(config))
            + f"<nav>{nav}</nav>" + "".join(sections) + "</body></html>")
