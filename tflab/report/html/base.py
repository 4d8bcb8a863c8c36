"""What every tflab HTML fragment is made of: the inline CSS and JS, escaping, tables, bars, the page.

Everything is inline: CSS, the few lines of JavaScript for the FuncGraph search
box, and the SVG. Nothing is fetched, so a page opens offline and in a sandboxed
notebook output. No report module is imported here.
"""

from __future__ import annotations

import colorsys
import hashlib
import html
import json
import math
from typing import Any, Iterable, Sequence

from tflab.report.layout import NODE_H, NODE_W

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


def esc(x: Any) -> str:
    """HTML-escaped text of ``x`` (quotes too, so it is safe inside attributes)."""
    return html.escape(str(x), quote=True)


def num(x: Any, spec: str = ".3g") -> str:
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
            cells.append(f"<td{cls}>{c if raw and isinstance(c, str) else num(c)}</td>")
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


# --------------------------------------------------------------------------- generic tables

def scalar(v: Any) -> bool:
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
                if scalar(v) and k not in columns and not (isinstance(v, str) and len(v) > 80):
                    columns.append(k)
    top = max((abs(d.get(chart)) for d in rows.values() if isinstance(d, dict)
               and isinstance(d.get(chart), (int, float)) and not isinstance(d.get(chart), bool)),
              default=0) if chart else 0
    out = []
    for name, d in rows.items():
        d = d if isinstance(d, dict) else {"value": d}
        cells = [esc(name)] + [num(d.get(c)) for c in columns]
        if chart:
            v = d.get(chart)
            cells.append(bar(abs(v) / top if top and isinstance(v, (int, float)) else None, chart_colour))
        out.append(cells)
    return table(["", *columns] + ([f"{chart}"] if chart else []), out, raw=True)


def text_fragment(obj: Any, title: str | None = None) -> str:
    """Any report: its class name as the title and its ``to_text()`` (or repr) in a ``<pre>``."""
    text = obj.to_text() if hasattr(obj, "to_text") else repr(obj)
    kind = type(obj).__name__
    return (f'<div class="tflab report-section" data-kind="{esc(kind)}"><h3>{esc(title or kind)}</h3>'
            f"<pre>{esc(text)}</pre></div>")


def json_fragment(d: Any, title: str) -> str:
    """A dict shown as folded, pretty JSON."""
    from tflab.report.jsonable import to_jsonable

    return (f"<details><summary>{esc(title)}</summary><pre>{esc(json.dumps(to_jsonable(d), indent=1))}</pre>"
            "</details>")


def style() -> str:
    return f"<style>{CSS}</style>"


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
            f"<title>{esc(title)}</title>{style()}<script>{SEARCH_JS}</script></head>"
            f'<body class="tflab"><h1>{esc(title)}</h1>'
            + section("config", "Configuration", config_fragment(config))
            + f"<nav>{nav}</nav>" + "".join(sections) + "</body></html>")
