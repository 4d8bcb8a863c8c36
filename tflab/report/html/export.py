"""The export and TFLite fragments: the SavedModel verdict, one row per TFLite variant, per-op errors."""

from __future__ import annotations

from typing import Any

from tflab.report.html.base import bar, esc, num, table

# The text table's legend (tflab.litert.records.TABLE_LEGEND), for the columns this table shows.
LEGEND = ("max|Δ|: the largest |lite − tf| of the worst output (the one with the worst |Δ|/bound), over all "
          "its elements and examples, as in the text table and report.json; bound: that output's largest "
          "elementwise bound; Δ/bound: that same output's largest elementwise |Δ|/bound; argmax: rows whose "
          "one top class is TF's (ties are not agreement)")

def per_op_records(check: Any) -> Any:
    """The per-op records of a `TFLiteCheck`: ``check.per_op.ops`` (`tflab.litert.per_op.OpCheck`, what
    ``TFLiteCheck.ops`` returns), else ``check.ops``, else None."""
    per_op = getattr(check, "per_op", None)
    return getattr(per_op, "ops", None) if per_op is not None else getattr(check, "ops", None)


def cause_fragment(check: Any) -> str:
    """The check's root-cause line (``cause: KIND at OP 'name': ...``), marked, or "" when it has none."""
    cause = getattr(check, "cause", None)
    if cause is None:
        return ""
    return f'<p class="cause"><b>{esc(cause.line_text)}</b></p>'


def op_records_fragment(ops: Any, cause: Any = None) -> str:
    """Per-op errors of a TFLite variant (`per_op_records`) as a heat list, worst ``|Δ|/bound`` first.

    Each record is an `OpCheck` or a dict; its number is ``bound_ratio``/``ratio``
    (``|Δ|/bound``, as the text's per-op table ranks them), else ``max_rel_error``
    or ``max_abs_error``. Unchecked ops are left out, as in the text.
    """
    recs = []
    for r in ops or ():
        d = r if isinstance(r, dict) else (r.to_dict() if hasattr(r, "to_dict") else vars(r))
        if d.get("verdict") == "unchecked":
            continue
        err = next((d[k] for k in ("bound_ratio", "ratio", "max_rel_error", "max_abs_error") if
                    isinstance(d.get(k), (int, float))), None)
        recs.append((d.get("name") or d.get("op") or d.get("tensor") or "?",
                     d.get("type") or d.get("op_type") or "", err, d.get("max_abs_error")))
    if not recs:
        return ""
    worst = max((abs(e) for _, _, e, _ in recs if e is not None), default=0.0) or 1.0
    # The cause op (the first over its own bound, `TFLiteCheck.cause`) is marked; later ops only carry it.
    mark = getattr(cause, "op_name", "") or ""

    def name(n, t):
        if mark and str(n).split(";")[0] == mark and t == getattr(cause, "op_type", t):
            return f'<b>{esc(n)}</b> <span class="bad">◀ cause: {esc(cause.kind)}</span>'
        return esc(n)

    rows = [(name(n, t), esc(t), num(e), num(m), bar(None if e is None else abs(e) / worst,
                                                     "#b3261e" if e is not None and abs(e) > 1 else "#d97706"))
            for n, t, e, m in sorted(recs, key=lambda r: -(abs(r[2]) if r[2] is not None else -1))[:40]]
    return (f"<details><summary>per-op error ({len(recs)} ops checked, worst |Δ|/bound first)</summary>"
            + table(("op", "type", "|Δ|/bound", "max|Δ|", ""), rows, raw=True) + "</details>")


def tflite_fragment(check: Any) -> str:
    """One `tflab.TFLiteCheck`: size, per-output error against its bound (bars), ops, notes."""
    rows = []
    for o in check.outputs.values():
        ratio = o.bound_ratio
        colour = "#17803d" if ratio is not None and ratio <= 1 else "#b3261e"
        rows.append((esc(o.name), esc(o.dtype), num(o.max_abs_error), num(o.bound), num(ratio, ".2f"),
                     bar(None if ratio is None else ratio, colour), num(o.argmax_agreement, ".0%")))
    verdict = ("within bound" if check.within_bound else "EXCEEDS its bound" if check.within_bound is False
               else "no bound")
    parts = [f'<div class="tflab tflite-section"><h3>TFLite {esc(check.quantization)}: '
             f'<span class="{"ok" if check.within_bound else "bad"}">{verdict}</span></h3>',
             f"<p>{check.size_bytes:,} bytes"
             + (f" ({check.size_ratio:.2f}× float)" if check.size_ratio else "")
             + f"; {sum(check.op_counts.values())} ops; runtime {esc(check.runtime)}</p>",
             table(("output", "dtype", "max |Δ|", "bound", "Δ/bound", "", "argmax"), rows, raw=True),
             cause_fragment(check), op_records_fragment(per_op_records(check), getattr(check, "cause", None)),
             "".join(f"<p>note: {esc(n)}</p>" for n in check.notes), "</div>"]
    return "".join(parts)


def export_fragment(report: Any) -> str:
    """A `tflab.export.ExportReport`: the SavedModel check, then the variants table.

    The table has one row per TFLite variant: status, bytes, size ratio, the
    worst output's max ``|Δ|`` and largest bound (the numbers of the text table and
    report.json), ``Δ/bound`` as a bar (green within the
    bound, red beyond), argmax agreement and conversion time; per-op errors
    (`per_op_records`, when the check has them) follow, folded.
    """
    sm = report.saved_model
    rows, details = [], []
    for q, v in report.variants.items():
        c = v.check
        if c is None or not c.outputs:
            rows.append((esc(q), esc(v.status), "–", "–", "–", "–", "–", "", "–",
                         num(v.convert_seconds, ".1f"),
                         esc(v.error or (c.runtime if c is not None else ""))))
            continue
        w = c.outputs[c.worst_output] if c.worst_output in c.outputs else next(iter(c.outputs.values()))
        agree = [o.argmax_agreement for o in c.outputs.values() if o.argmax_agreement is not None]
        ok = v.status == "ok"
        rows.append((esc(q), f'<span class="{"ok" if ok else "bad"}">{esc(v.status)}</span>',
                     num(c.size_bytes), num(c.size_ratio, ".2f"), num(w.max_abs_error), num(w.bound),
                     num(w.bound_ratio, ".2f"), bar(w.bound_ratio, "#17803d" if (w.bound_ratio or 0) <= 1
                                                     else "#b3261e"),
                     num(min(agree), ".0%") if agree else "–", num(v.convert_seconds, ".1f"),
                     f"{sum(c.op_counts.values())} ops; {esc(c.runtime)}"))
        ops = op_records_fragment(per_op_records(c), getattr(c, "cause", None))
        if ops or cause_fragment(c):
            details.append(f"<h4>{esc(q)}</h4>{cause_fragment(c)}{ops}")
    parts = ['<div class="tflab export-section">',
             f"<p>export {esc(report.model)} → {esc(report.out)} (examples: {esc(report.examples)})</p>",
             f"<p>SavedModel: <span class=\"{'ok' if sm.bit_exact else 'bad'}\">"
             f"{'bit-exact' if sm.bit_exact else 'NOT bit-exact'}</span> over {sm.batch_count} batch(es), "
             f"signatures {esc(', '.join(sm.signatures))}</p>",
             table(("variant", "status", "bytes", "×float", "max|Δ|", "bound", "Δ/bound", "", "argmax",
                    "convert s", "ops / runtime / error"), rows, raw=True),
             f'<p class="legend">{esc(LEGEND)}</p>',
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
