"""The fragments of lab steps 6, 10 and 11: modes, precision policies, loss scaling, tf.distribute."""

from __future__ import annotations

from typing import Any

from tflab.report.html.base import SEARCH_JS, bar, dict_table, esc, scalar, table, text_fragment

def modes_fragment(d: Any) -> str:
    """A `tflab.ModeComparison` (or its ``to_dict()``): per mode max ULP, |Δ| and time, with a time bar."""
    d = d.to_dict() if hasattr(d, "to_dict") else d
    rows = {}
    for m, r in (d.get("modes") or {}).items():
        ulp = r.get("ulp_above_atol") or r.get("ulp") or {}
        diff = r.get("abs_error") or {}
        rows[m] = {"error": r.get("error"), "max ULP (outputs)": ulp.get("outputs") if isinstance(ulp, dict) else ulp,
                   "max ULP (gradients)": ulp.get("gradients") if isinstance(ulp, dict) else None,
                   "max |Δ| outputs": diff.get("outputs") if isinstance(diff, dict) else diff,
                   "first call s": r.get("first_call_seconds"), "median s": r.get("median_seconds")}
    parts = [f'<div class="tflab modes-section"><h3>{esc(d.get("function_name") or d.get("function") or "")}: '
             f"eager vs graph vs XLA</h3>", dict_table(rows, chart="median s")]
    if d.get("fusion_count") is not None:
        parts.append(f"<p>XLA optimized HLO: {d['fusion_count']} fusions "
                     f"({esc(', '.join(f'{k} {v}' for k, v in sorted((d.get('fusion_kinds') or {}).items())))})</p>")
    for c in d.get("causes") or []:  # a tflab.attribution.Cause's dict: its one cause line, marked
        where = " ".join(p for p in (c.get("op_type"), repr(c["op_name"]) if c.get("op_name") else "") if p)
        line = (f"cause: {c.get('kind')}" + (f" at {where}" if where else "")
                + (f" ({c['line']})" if c.get("line") else "") + (f": {c['detail']}" if c.get("detail") else ""))
        parts.append(f'<p class="cause"><b>{esc(c.get("runs") or "")}</b> {esc(line)}</p>')
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
    name = d.get("function_name") or d.get("function") or ""
    return (f'<div class="tflab precision-section"><h3>{esc(name)}: per-policy underflow</h3>'
            + dict_table(rows, chart="underflow (no loss scale)", chart_colour="#b3261e") + "</div>")


def loss_scaling_fragment(d: dict) -> str:
    """`demonstrate_loss_scaling`'s dict: one row per run."""
    rows = {r.get("label", str(i)): {k: v for k, v in r.items() if k != "label"}
            for i, r in enumerate(d.get("rows") or []) if isinstance(r, dict)}
    head = " · ".join(esc(d[k]) for k in ("model", "step") if scalar(d.get(k)) and d.get(k))
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


def precision_notebook_fragment(report: Any) -> str:
    """A `tflab.PrecisionComparison` in a notebook: `precision_fragment`, then its ``to_text()``."""
    return precision_fragment(report) + text_fragment(report)


def distributed_trace_fragment(report: Any) -> str:
    """A `tflab.distribute.DistributedTraceReport`: its text, ops per device (a bar each), its FuncGraph."""
    from tflab.report.html.funcgraph import trace_fragment

    devices = {d or "(unplaced inputs/outputs)": {"ops": n} for d, n in report.ops_per_device.items()}
    return (text_fragment(report) + "<h4>ops per device (one row per replica)</h4>"
            + dict_table(devices, chart="ops", chart_colour="#0f766e")
            + trace_fragment(report.report, op_list=False) + f"<script>{SEARCH_JS}</script>")


def multi_worker_fragment(report: Any) -> str:
    """A `tflab.distribute.MultiWorkerReport`: its text, then one row per worker (bar: its data sum)."""
    rows = {f"worker {r.task}": {"replicas_in_sync": r.replicas_in_sync, "step_traces": r.step_traces,
                                 "replica_runs": r.replica_runs, "local_batches": str(list(r.local_batches)),
                                 "local_data_sum": r.local_data_sum, "seconds": r.seconds}
            for r in report.rows}
    return (text_fragment(report) + "<h4>per-worker rows</h4>"
            + dict_table(rows, chart="local_data_sum", chart_colour="#0f766e"))
