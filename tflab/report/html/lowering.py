"""The page of `tflab lower --html` and a `Lowering`'s notebook fragment: every level side by side.

Each level is a column of its pieces (source lines, FuncGraph ops, MLIR and
HLO ops, kernels). A source line, a FuncGraph op or a fusion row is
clickable: the page holds, for each, the ids of the pieces that came from it
(``Lowering._resolve_key``, computed when the page is written; this module imports no
lowering module),
and a click marks them ``hit`` at every level. No network, inline CSS and JS.
"""

from __future__ import annotations

import json
from typing import Any

from tflab.report.html.base import esc, page, section, table

__all__ = ["lowering_fragment", "lowering_page"]

_MAX_PIECES = 2500  # per level shown; the counts say when more were left out

_CSS = """
.lower-cols{display:flex;gap:.5em;overflow-x:auto;align-items:flex-start}
.lower-col{min-width:22em;max-width:34em;max-height:38em;overflow:auto;border:1px solid #ccc;padding:.3em}
.lower-col h4{margin:.2em 0;position:sticky;top:0;background:#fff}
.piece{font:12px monospace;white-space:pre;overflow:hidden;text-overflow:ellipsis;padding:0 .2em}
[data-key]{cursor:pointer}
[data-key]:hover{background:#eef}
.hit{background:#fde68a !important}
"""

_JS = """
(function(){
  var MAP = JSON.parse(document.getElementById('lower-map').textContent);
  document.addEventListener('click', function(e){
    var el = e.target.closest('[data-key]');
    if (!el) return;
    document.querySelectorAll('.hit').forEach(function(x){ x.classList.remove('hit'); });
    var ids = MAP[el.dataset.key] || [];
    ids.forEach(function(id){ var p = document.getElementById(id); if (p) p.classList.add('hit'); });
    el.classList.add('hit');
    var stages = {};
    ids.forEach(function(id){ stages[id.split('-')[1]] = 1; });
    document.getElementById('lower-count').textContent =
      ids.length + ' pieces from ' + el.dataset.key + ' in ' + Object.keys(stages).length + ' levels';
  });
})();
"""


def _key_map(low: Any, ids: dict) -> dict[str, list[str]]:
    """Clickable key → ids of the pieces that came from it, from inverted indexes of the pieces."""
    by_name, by_line, by_hlo = {}, {}, {}
    for (si, pi), pid in ids.items():
        stage = low.stages[si]
        piece = stage.pieces[pi]
        if stage.name in ("python", "autograph"):
            for line in piece.lines:
                by_line.setdefault(line, []).append(pid)
        elif stage.name in ("llvm_ir", "asm"):
            by_hlo.setdefault(piece.key, []).append(pid)
        else:
            for n in piece.names:
                by_name.setdefault(n, []).append(pid)
            if stage.name == "optimized_hlo" and piece.key:
                by_hlo.setdefault(piece.key, []).append(pid)
    keys = set()
    for (si, pi) in ids:
        stage = low.stages[si]
        piece = stage.pieces[pi]
        if stage.name == "python":
            keys.add(piece.lines[0])
        elif stage.name == "funcgraph":
            keys.add(piece.key)
        elif stage.name == "grappler" and piece.key:  # graph path: a node, by its own name
            keys.add(f"node:{piece.key}")
    keys |= {f.name for f in low.fusions}
    out = {}
    for key in keys:
        try:
            ops, lines, hlo = low._resolve_key(key)
        except Exception:  # a key that names nothing has nothing to highlight
            continue
        hits = set()
        for n in ops:
            hits.update(by_name.get(n, ()))
        for line in lines:
            hits.update(by_line.get(line, ()))
        for h in hlo:
            hits.update(by_hlo.get(h, ()))
        out[key] = sorted(hits)
    return out


def _layers(f: Any) -> str:
    """As `tflab.lowering.text.layer_credit`: the layers whose work the fusion computes, then the shared ones."""
    shared = getattr(f, "constant_layers", ())
    return (", ".join(f.layers) or "-") + (f" (shared constants from: {', '.join(shared)})" if shared else "")


def lowering_fragment(low: Any) -> str:
    """The levels as clickable columns, the fusion table, memory and where it stopped."""
    ids: dict[tuple[int, int], str] = {}
    cols = []
    for si, stage in enumerate(low.stages):
        rows = []
        for pi, piece in enumerate(stage.pieces[:_MAX_PIECES]):
            pid = f"p-{stage.name}-{pi}"
            ids[(si, pi)] = pid
            key = (piece.lines[0] if stage.name == "python" and piece.lines
                   else piece.key if stage.name == "funcgraph"
                   else f"node:{piece.key}" if stage.name == "grappler" and piece.key else "")
            attr = f' data-key="{esc(key)}"' if key else ""
            rows.append(f'<div class="piece" id="{pid}"{attr} title="{esc(piece.text)}">{esc(piece.text)}</div>')
        more = len(stage.pieces) - _MAX_PIECES
        head = (f"{esc(stage.name)}: {sum(stage.ops.values())} ops, {stage.bytes} bytes, {stage.seconds:.3f} s"
                if not stage.why else f"{esc(stage.name)}: {esc(stage.why)}")
        cols.append(f'<div class="lower-col" data-stage="{esc(stage.name)}"><h4>{head}</h4>{"".join(rows)}'
                    + (f"<p>… {more} more pieces (see --out)</p>" if more > 0 else "") + "</div>")
    cause_at = getattr(low, "cause_fusion", "")
    fusion_rows = [(f'<span data-key="{esc(f.name)}">{esc(f.name)}</span>'
                    + (' <b class="cause">&#9664; cause</b>' if f.name == cause_at else ""), esc(f.kind), len(f.instructions),
                    esc(", ".join(f.source_lines) or "-"), esc(_layers(f)),
                    esc(", ".join(f.tf_op_types)), f.bytes_read, f.bytes_written, f.llvm_ir_bytes, f.asm_bytes)
                   for f in low.fusions]
    stop = (f'<p class="stop">stopped at <b>{esc(low.stopped_at)}</b>: {esc(low.why)}</p>'
            if low.stopped_at else "")
    mem = ""
    if low.memory:
        m = low.memory
        mem = (f"<h4>memory (XLA buffer assignment): {m['total_bytes']} bytes, temp {m['temp_bytes']}</h4>"
               + table(["allocation", "bytes", "kind", "shape"],
                       [(a["index"], a["bytes"], a["kind"], a["shape"]) for a in m.get("largest", [])]))
    cause = getattr(low, "cause", None)
    if cause is not None:  # the cause line, above the fusion table that marks its fusion
        stop += f'<p class="cause"><b>{esc(cause.runs)}</b>: {esc(cause.line_text)}</p>'
    extra = _graph_tables(low) + _pass_table(low)
    key_map = _key_map(low, ids)
    data = json.dumps(key_map).replace("</", "<\\/")
    return (f"<style>{_CSS}</style>{stop}<p id=\"lower-count\">click a source line, a FuncGraph op or a fusion</p>"
            f'<div class="lower-cols">{"".join(cols)}</div>'
            + (f"<h4>fusions and kernels ({len(low.fusions)})</h4>"
               + table(["fusion", "kind", "instructions", "user lines", "layers", "TF ops", "bytes read",
                        "bytes written", "LLVM IR bytes", "asm bytes"], fusion_rows, raw=True)
               if low.fusions else "")
            + mem + extra + f'<script type="application/json" id="lower-map">{data}</script><script>{_JS}</script>')


def _counts(d: dict) -> str:
    return ", ".join(f"{k}×{v}" for k, v in sorted(d.items())) or "-"


def _graph_tables(low: Any) -> str:
    """Graph path: the slowest nodes (clickable: what they replaced at every level) and each optimizer's effect."""
    nodes = sorted((n for n in getattr(low, "nodes", ()) if n.seconds > 0), key=lambda n: -n.seconds)[:20]
    out = ""
    if nodes:
        rows = [(f'<span data-key="node:{esc(n.name)}">{esc(n.name)}</span>', esc(n.op), esc(n.kernel),
                 f"{n.seconds * 1e6:.1f}", n.bytes, n.flops, f"{n.bandwidth_share:.0%}" if n.bandwidth_share else "-",
                 esc(", ".join(n.replaced_types)), esc(", ".join(n.source_lines) or "-"),
                 esc(", ".join(n.layers) or "-")) for n in nodes]
        out += ("<h4>slowest nodes (us per run)</h4>"
                + table(["node", "ran as", "kernel", "us/run", "bytes", "FLOPs", "of copy roofline", "replaced",
                         "user lines", "layers"], rows, raw=True))
    effects = getattr(low, "optimizers", ())
    if effects:
        rows = [(esc(e.name), "not measured: " + esc(e.error) if e.error else ("changed" if e.changed else
                 "changed nothing"), esc(_counts(e.removed)), esc(_counts(e.added))) for e in effects]
        out += ("<h4>Grappler optimizers, each turned off alone</h4>"
                + table(["optimizer", "effect", "removed", "added"], rows, raw=True))
    return out


def _pass_table(low: Any) -> str:
    """XLA path with passes: one row per HLO pass (what it removed and added, the user's lines)."""
    passes = getattr(low, "passes", ())
    if not passes:
        return ""
    rows = [(esc(p.pipeline), esc(p.name), len(p.removed) if p.changed else "-", len(p.added) if p.changed else "-",
             esc(", ".join(p.source_lines) or "-") if p.changed else "changed nothing") for p in passes]
    return "<h4>XLA passes (one compile's dump)</h4>" + table(
        ["pipeline", "pass", "removed", "added", "user lines"], rows, raw=True)


def lowering_page(low: Any) -> str:
    """A whole self-contained page for ``tflab lower --html``."""
    return page(f"tflab lower {low.function_name}",
                [section("lowering", "Lowering: Python to machine code", lowering_fragment(low))], low.config)
