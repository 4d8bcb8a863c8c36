"""The text, the JSON and the page render the same record.

One record, three renderings: ``to_text()``, ``to_dict()`` (what ``--json``
prints) and the HTML (the ``--html`` page and the notebook fragment). A
checker reads the numbers and labels out of each and lists where they
disagree. The three disagreements are its planted
defects: the retrace page showing TF's TraceType reprs for a first trace
(``x=TensorSpec(shape=(2,), dtype=tf.float32, name=None), k=Literal[2]``) where
the text shows ``x=float32(2,), k=2``; the retrace page dropping the call
counts; the export page's max|Δ| that was the |Δ| at the worst-ratio
element.
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import re
from types import SimpleNamespace as NS

import pytest

SCRIPT = '''
import tensorflow as tf


@tf.function
def scale(x, k):
    return x * k


scale(tf.ones([2]), 2)
scale(tf.ones([2]), 2)
scale(tf.ones([3]), 2)
'''


def visible(page: str) -> str:
    """What a reader sees on a page: tags removed (a cell boundary is a space), entities decoded."""
    return html_lib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def retrace_disagreements(text: str, d: dict, page: str) -> list[str]:
    """Where ``tflab retrace``'s text, JSON (``d``) and page (HTML) differ, one line each."""
    seen = visible(page)
    out = []
    for f in d["functions"]:
        label = f["label"]
        count = f"{f['trace_count']} trace(s)" + (f" in {f['calls']} call(s)" if f["calls"] is not None else "")
        if f"{label}: {count}" not in text:
            out.append(f"text: no '{label}: {count}'")
        if count not in seen:
            out.append(f"page: no '{count}' for {label}")
        for t in f["traces"]:
            if t["kind"] == "first":
                labels = ", ".join(f"{k}={v}" for k, v in t["labels"].items())
                if f"#{t['index']} first: {labels}" not in text:
                    out.append(f"text: trace #{t['index']} is not '{labels}'")
                if labels not in seen:
                    out.append(f"page: trace #{t['index']} is not '{labels}'")
                raw = [v for k, v in t["inputs"].items() if v != t["labels"].get(k) and v in seen and v not in text]
                if raw:
                    out.append(f"page: trace #{t['index']} shows TF's TraceType reprs {raw}")
            for r in t["reasons"]:
                if r not in text:
                    out.append(f"text: no reason '{r}'")
                if r not in seen:
                    out.append(f"page: no reason '{r}'")
    return out


@pytest.fixture(scope="module")
def script_traces(tmp_path_factory):
    from tflab.retrace.log import trace_script

    path = tmp_path_factory.mktemp("agree") / "scale.py"
    path.write_text(SCRIPT)
    return trace_script(str(path))


def test_retrace_text_json_and_page_agree(script_traces):
    from tflab.report.jsonable import to_jsonable
    from tflab.report.pages import retrace_page

    r = script_traces
    d = to_jsonable(r.to_dict())
    (f,) = d["functions"]
    # the measurement itself: one shape retrace in three counted calls
    assert (f["trace_count"], f["calls"]) == (2, 3), f
    assert f["traces"][0]["labels"] == {"x": "float32(2,)", "k": "2"}
    assert f["traces"][1]["reasons"] == ["x: shape (2,) -> (3,)"]
    page = retrace_page(r, [])
    assert retrace_disagreements(r.to_text(), d, page) == []
    # the notebook fragment is the page's timeline, so it agrees too
    assert retrace_disagreements(r.to_text(), d, r._repr_html_()) == []


def test_the_retrace_checker_catches_the_old_page(script_traces, monkeypatch):
    """Planted: the page as it was (TraceType reprs of ``inputs``, calls not passed) disagrees twice."""
    from tflab.report.html import timeline
    from tflab.report.jsonable import to_jsonable
    from tflab.report.pages import retrace_page

    r = script_traces
    d = to_jsonable(r.to_dict())

    def old_groups(result):
        return [{"function_name": g.function_name, "label": g.label or g.function_name, "calls": None,
                 "traces": [{k: v for k, v in t.to_dict().items() if k != "labels"} for t in g.traces]}
                for g in result.functions]

    import tflab.report.html as html_pkg

    monkeypatch.setattr(timeline, "script_groups", old_groups)
    monkeypatch.setattr(html_pkg, "script_groups", old_groups, raising=False)  # the package root's cached name
    bad = retrace_disagreements(r.to_text(), d, retrace_page(r, []))
    assert "page: no '2 trace(s) in 3 call(s)' for scale" in bad
    assert "page: trace #1 is not 'x=float32(2,), k=2'" in bad
    assert "page: trace #1 shows TF's TraceType reprs ['TensorSpec(shape=(2,), dtype=tf.float32, name=None)', " \
           "'Literal[2]']" in bad, bad


# ------------------------------------------------------------------ export


def _cells(row_html: str) -> list[str]:
    return [html_lib.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row_html, re.S)]


def export_disagreements(text: str, d: dict, page: str) -> list[str]:
    """Where the variants table of the text, the JSON (``d``: recipe -> its check's dict) and the page differ."""
    out = []
    table = page[page.index("<th>variant</th>"):]
    table = table[:table.index("</table>")]
    page_rows = {c[0]: c for c in (_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", table, re.S)) if c}
    text_rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.split() and ln.split()[0] in d}
    for q, check in d.items():
        w = check["outputs"][check["worst_output"]]
        want = format(float(w["max_abs_error"]), ".3g")
        ratio = format(float(w["bound_ratio"]), ".2f")
        if text_rows.get(q, [None] * 6)[4] != want:
            out.append(f"text: {q} max|Δ| {text_rows.get(q, [None] * 6)[4]} is not the JSON's {want}")
        if page_rows.get(q, [None] * 7)[4] != want:
            out.append(f"page: {q} max|Δ| {page_rows.get(q, [None] * 7)[4]} is not the JSON's {want}")
        if text_rows.get(q, [None] * 6)[5] != ratio or page_rows.get(q, [None] * 7)[6] != ratio:
            out.append(f"{q} Δ/bound: text {text_rows.get(q, [None] * 6)[5]}, page "
                       f"{page_rows.get(q, [None] * 7)[6]}, JSON {ratio}")
    return out


def _output(name, max_abs, worst_abs, bound, ratio):
    from tflab.litert.records import OutputError

    return OutputError(name, "float32", (-1, 5), max_abs_error=max_abs, max_rel_error=max_abs, max_ulp=9,
                       bound=bound, bound_ratio=ratio, argmax_agreement=1.0, reference_range=1.0,
                       worst_abs_error=worst_abs, worst_bound=worst_abs / ratio)


def _variants(outputs_by_recipe):
    from tflab.export import VariantResult

    variants = {}
    for q, outs in outputs_by_recipe.items():
        worst = max(outs, key=lambda o: o.bound_ratio).name
        check = NS(outputs={o.name: o for o in outs}, worst_output=worst, size_bytes=1000, size_ratio=0.5,
                   op_counts={"FULLY_CONNECTED": 2}, flex_ops=(), per_op=None, runtime="LiteRT interpreter",
                   quantization=q)
        variants[q] = VariantResult(q, "ok", check=check, convert_seconds=1.0)
    return variants


def _export(variants):
    from tflab.report.html.export import export_fragment
    from tflab.report.jsonable import to_jsonable
    from tflab.litert.records import variant_table

    rep = NS(saved_model=NS(bit_exact=True, batch_count=1, signatures=["serving_default"]), model="m",
             out="/nonexistent", examples="e", variants=variants)
    d = {q: {"outputs": to_jsonable(v.check.outputs), "worst_output": v.check.worst_output}
         for q, v in variants.items()}
    return variant_table(variants), d, export_fragment(rep)


# The the numbers: the float16 max |Δ| is 8.9e-05, the |Δ| at its worst-ratio element 3.37e-05.
def _trial() -> dict:
    return {"none": [_output("y", 6e-08, 2.24e-08, 1e-6, 0.04)],
            "float16": [_output("y", 8.9e-05, 3.37e-05, 2e-4, 0.6), _output("z", 1e-5, 1e-5, 1e-3, 0.01)],
            "int8": [_output("y", 0.0033, 0.00328, 0.01, 0.33)]}


def test_export_text_json_and_page_agree():
    text, d, page = _export(_variants(_trial()))
    assert export_disagreements(text, d, page) == []
    assert "8.9e-05" in visible(page) and "3.37e-05" not in visible(page)


def test_the_export_checker_catches_the_worst_element_shown_as_the_max():
    """Planted: the page given each output's |Δ| at the worst-ratio element as its max (page)."""
    variants = _variants(_trial())
    text, d, _ = _export(variants)
    shown = {q: dataclasses.replace(v, check=NS(**{**vars(v.check), "outputs": {
        n: dataclasses.replace(o, max_abs_error=o.worst_abs_error) for n, o in v.check.outputs.items()}}))
        for q, v in variants.items()}
    _, _, old_page = _export(shown)
    bad = export_disagreements(text, d, old_page)
    assert "page: float16 max|Δ| 3.37e-05 is not the JSON's 8.9e-05" in bad
    assert "page: none max|Δ| 2.24e-08 is not the JSON's 6e-08" in bad
    assert not any(b.startswith("text:") for b in bad)


def test_the_per_op_list_of_the_page_is_the_text_table():
    """The page's per-op list ranks the ops as the text's per-op table does: worst |Δ|/bound first (it ranked
    by the OpCheck's ``error``, the |Δ| at the worst element, under a column named "error"), unchecked ops
    left out, and the max|Δ| of each."""
    from tflab.litert.per_op import OpCheck, PerOpCheck
    from tflab.report.html.export import op_records_fragment, per_op_records

    ops = (OpCheck(0, "FULLY_CONNECTED", "dense/MatMul", worst_abs_error=1e-3, bound=1e-2, ratio=0.1,
                   max_abs_error=2e-3, verdict="ok"),
           OpCheck(1, "SOFTMAX", "softmax", worst_abs_error=3e-3, bound=2e-3, ratio=1.5, max_abs_error=3e-3,
                   verdict="OUTSIDE"),
           OpCheck(2, "LOG", "log", verdict="unchecked", reason="no reference"))
    per_op = PerOpCheck(ops, {"LOG": 1}, 2, 0, 2, "builtin kernels", 0.1)
    text_order = [ln.split()[1] for ln in per_op.to_text().splitlines() if re.match(r"\s+#\d", ln)]
    page = op_records_fragment(per_op_records(NS(per_op=per_op)))
    page_rows = [_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", page, re.S)]
    page_rows = [c for c in page_rows if c]
    assert text_order == ["SOFTMAX", "FULLY_CONNECTED"]
    assert [c[1] for c in page_rows] == text_order
    assert [(c[2], c[3]) for c in page_rows] == [("1.5", "0.003"), ("0.1", "0.002")]
