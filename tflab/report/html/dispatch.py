"""`fragment`: the HTML fragment of any tflab report, chosen by its class name (no report module imported)."""

from __future__ import annotations

from typing import Any

from tflab.report.html.base import SEARCH_JS, dict_table, esc, style, text_fragment
from tflab.report.html.export import export_fragment, tflite_fragment
from tflab.report.html.funcgraph import trace_fragment
from tflab.report.html.lab import modes_fragment, precision_fragment
from tflab.report.html.timeline import probe_groups, script_groups, timeline_fragment

__all__ = ["fragment"]


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
    return f'<div class="tflab">{style()}{body}</div>'
