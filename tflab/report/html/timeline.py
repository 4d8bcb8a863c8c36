"""The trace-timeline fragment: calls along an axis, one mark per trace, and a table of reasons and fixes."""

from __future__ import annotations

from typing import Any, Sequence

from tflab.report.html.base import esc, table, text_fragment
from tflab.report.text import seconds_text

TRACE_COLOURS = {"first": "#2b6cb0", "retrace": "#d97706", "variable_creation": "#7c3aed",
                  "failed": "#b3261e", "concrete": "#0f766e", "cached": "#64748b"}


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
    elif calls is not None:
        parts.append(f'<text x="{left}" y="56">traces in order ({calls} call(s); the log does not say which '
                     f'call traced)</text>')
    else:
        parts.append(f'<text x="{left}" y="56">traces in order (a trace log does not count calls)</text>')
    seen_calls: dict = {}
    for i, t in enumerate(traces):
        c = t.get("call") if known else i + 1
        # Traces made by one call (TF's variable-creation re-trace) sit side by side, not on top of each other.
        dup = seen_calls[c] = seen_calls.get(c, -1) + 1
        x = left + (c - 1) * step + dup * 16
        colour = TRACE_COLOURS.get(t.get("kind"), "#444")
        why = "; ".join(t.get("reasons") or []) or t.get("kind", "")
        secs = f", {seconds_text(t['seconds'])}" if t.get("seconds") is not None else ""
        parts.append(f'<g class="trace-mark" data-kind="{esc(t.get("kind"))}"><title>#{t["index"]} '
                     f'{esc(t.get("kind"))}{(" at call " + str(c)) if known else ""}{secs}: {esc(why)}</title>'
                     f'<circle cx="{x:.1f}" cy="30" r="7" fill="{colour}"/>'
                     f'<text x="{x - 7:.1f}" y="16">#{t["index"]}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def timeline_fragment(groups: Sequence[dict]) -> str:
    """The trace timeline of each tf.function, grouped by qualified name.

    Args:
        groups: one dict per tf.function object: ``label`` (its name, with the
            owner when several share it), ``function_name`` (qualified name: the
            group key), ``traces`` (`Trace` objects or dicts), ``calls`` (or None);
            optional ``seconds`` (each trace's seconds, None where untimed),
            ``wall`` and ``wall_label`` (the seconds the share of trace time is of).

    Returns:
        A ``<div class="tflab timeline-section">`` fragment: per qualified name a
        heading, then per object its timeline SVG and a table of traces with
        their reasons and fixes.
    """
    by_name: dict[str, list[dict]] = {}
    for g in groups:
        by_name.setdefault(g.get("function_name") or g.get("label") or "?", []).append(g)
    parts = ['<div class="tflab timeline-section">']
    if not groups:
        parts.append("<p>no tf.function traced</p>")
    legend = "".join(f'<span><i style="background:{c};border-radius:5px"></i>{k}</span>'
                     for k, c in TRACE_COLOURS.items())
    parts.append(f'<div class="legend">{legend}</div>')
    for name, members in by_name.items():
        total = sum(len(m["traces"]) for m in members)
        parts.append(f'<div class="function-group" data-function="{esc(name)}"><h3>{esc(name)}: {total} '
                     f'trace(s){f" in {len(members)} objects" if len(members) > 1 else ""}</h3>')
        for m in members:
            traces = [_trace_dict(t) for t in m["traces"]]
            seconds = list(m.get("seconds") or [])
            traces = [dict(t, seconds=seconds[i]) if i < len(seconds) else t for i, t in enumerate(traces)]
            calls = m.get("calls")
            if len(members) > 1:
                parts.append(f"<h4>{esc(m.get('label') or name)}</h4>")
            parts.append(timeline_svg(traces, calls))
            if calls is not None:
                parts.append(f"<p>{len(traces)} trace(s) in {calls} call(s)</p>")
            timed = [x for x in seconds if x is not None]
            if timed:
                wall = m.get("wall")
                share = (f" of {esc(m.get('wall_label') or 'the')} {seconds_text(wall)} ({100 * sum(timed) / wall:.0f}%)"
                         if wall else "")
                parts.append(f'<p class="trace-time" data-seconds="{sum(timed):.6f}">trace time: '
                             f'{seconds_text(sum(timed))}{share} (tracing plus the first run\'s instantiation)</p>')
            rows = []
            for t in traces:
                fixes = list(dict.fromkeys(t.get("fixes") or []))
                # The readable labels (``x=float32(2,), k=2``) the text prints, not TF's TraceType reprs.
                why = "<br>".join(esc(r) for r in t.get("reasons") or []) or esc(
                    ", ".join(f"{k}={v}" for k, v in (t.get("labels") or t.get("inputs") or {}).items()))
                versus = f" vs #{t['compared_with']}" if t.get("compared_with") and t["kind"] == "retrace" else ""
                colour = TRACE_COLOURS.get(t.get("kind"), "#444")
                rows.append((f"#{t['index']}", esc(t.get("call") or "–"),
                             f'<span style="color:{colour}">{esc(t.get("kind"))}{versus}</span>', why,
                             "<br>".join(esc(f) for f in fixes)) + ((seconds_text(t.get("seconds")),) if timed else ()))
            parts.append(table(("trace", "call", "kind", "reasons (or the inputs traced)", "fix")
                               + (("seconds",) if timed else ()), rows, raw=True))
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def probe_groups(probe: Any) -> list[dict]:
    """`timeline_fragment` input for one `tflab.RetraceProbe`."""
    return [{"function_name": probe.function_name, "label": probe.function_name,
             "traces": list(probe.traces), "calls": probe.calls,
             "seconds": list(getattr(probe, "trace_seconds", ()) or ()),
             "wall": getattr(probe, "call_seconds", None), "wall_label": "the calls'"}]


def script_groups(result: Any) -> list[dict]:
    """`timeline_fragment` input for a `ScriptTraces` (``tflab retrace SCRIPT``): calls where they were counted."""
    return [{"function_name": f.function_name, "label": f.label or f.function_name, "traces": list(f.traces),
             "calls": f.calls, "seconds": list(getattr(f, "trace_seconds", ()) or ()),
             "wall": getattr(f, "script_seconds", None), "wall_label": "the script's"} for f in result.functions]




def probe_fragment(probe: Any) -> str:
    """A `tflab.RetraceProbe`: a heading with its trace and call counts, its timeline, its stale reads."""
    return (f"<h3>{esc(type(probe).__name__)}({esc(probe.function_name)}): {probe.trace_count} trace(s) in "
            f"{probe.calls} call(s)</h3>" + timeline_fragment(probe_groups(probe))
            + "".join(f"<p>stale: {esc(s.text)}<br>fix: {esc(s.fix)}</p>" for s in probe.stale))


def probe_text_fragment(probe: Any) -> str:
    """`probe_fragment`'s heading and timeline, then the probe's ``to_text()`` (a `DistributedRetraceProbe`)."""
    return (f"<h3>{esc(type(probe).__name__)}({esc(probe.function_name)}): {probe.trace_count} trace(s) in "
            f"{probe.calls} call(s)</h3>" + timeline_fragment(probe_groups(probe)) + text_fragment(probe))


def script_fragment(result: Any) -> str:
    """A `tflab.retrace.ScriptTraces`: the timeline of every tf.function the script traced."""
    return timeline_fragment(script_groups(result))
