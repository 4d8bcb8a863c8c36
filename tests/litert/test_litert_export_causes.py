"""LiteRT in `tflab export`: kept-float fix record.

One export the LogNet (``log(x @ w)``, 4×3 weights, random normal examples, so x @ w has
negative values): none, dynamic and int8.

* the int8 variant has TF NaN and LiteRT finite values (an infinite error): it fails and the
  command exits 1; the same model on positive examples passes (exit 0).
* the NaN note says log of negative values (NaN), from the measured counts, not "log of zero".
* the dynamic variant quantized nothing: no error attribution, its error is float rounding.
* the ``--html`` variants table shows the max |Δ| and bound of the text table and report.json.

Models: tests/data/causes/models.py.
"""

from __future__ import annotations

import html as html_lib
import json
import os
import re

import numpy as np
import pytest

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "causes", "models.py")


@pytest.fixture(scope="module")
def lognet_export(tmp_path_factory):
    from tflab.cli import main

    d = tmp_path_factory.mktemp("lognet")
    out, page = d / "out", d / "e.html"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["export", f"{MODELS}:model", "--quantize", "none,dynamic,int8", "--out", str(out),
                     "--html", str(page)])
    return code, buf.getvalue(), json.loads((out / "report.json").read_text()), page.read_text(), out


def test_int8_with_an_infinite_error_fails_and_export_exits_1(lognet_export):
    code, text, report, _, out = lognet_export
    q8 = report["variants"]["int8"]
    # Our own count: TF's NaN (log of negative) where the int8 LiteRT output is finite.
    ex = np.load(out / "examples.npz")
    x = np.concatenate([ex[k] for k in ex.files if k.endswith("x")])
    negative = int(((x @ np.full((4, 3), 0.5, np.float32)) < 0).sum())
    assert negative > 0
    assert q8["check"]["max_abs_error"] in ("inf", float("inf")) and q8["check"]["within_bound"] is False
    assert q8["status"] == "EXCEEDED" and q8["check"]["ok"] is False, q8["status"]
    assert report["ok"] is False and code == 1, (code, text[-2000:])
    assert re.search(r"^int8\s+EXCEEDED", text, re.M), text
    # Where LiteRT loses TF's NaN, measured: the int8 LOG kernel on negative (dequantized) inputs.
    (lost,) = [n for n in q8["check"]["notes"] if "one side only" in n]
    assert "NaN/inf lost at op 1 LOG" in lost and "integer kernel domain" in lost, lost
    assert re.search(r"dequantizes to [1-9]\d* negative value\(s\)", lost), lost


def test_the_same_model_on_positive_examples_passes(tmp_path):
    from tflab.cli import main

    ex = tmp_path / "pos.npz"
    np.savez(ex, x=np.random.default_rng(0).uniform(1.0, 2.0, (6, 4)).astype(np.float32))
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["export", f"{MODELS}:model", "--quantize", "int8", "--out", str(tmp_path / "o"),
                     "--examples", str(ex)])
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["variants"]["int8"]["status"] == "ok" and report["ok"] is True and code == 0, report["variants"]


def test_nan_note_names_log_of_negative_values_from_the_counts(lognet_export):
    _, _, report, _, out = lognet_export
    ex = np.load(out / "examples.npz")
    x = np.concatenate([ex[k] for k in ex.files if k.endswith("x")])
    h = x @ np.full((4, 3), 0.5, np.float32)
    negative, zeros = int((h < 0).sum()), int((h == 0).sum())
    notes = [n for n in report["variants"]["none"]["check"]["notes"] if "LOG" in n]
    assert notes, report["variants"]["none"]["check"]["notes"]
    (note,) = notes
    assert "log of negative:" in note and "log of zero" not in note, note
    assert f"{negative} negative value(s) and {zeros} zero(s)" in note and "of a negative number is NaN" in note
    assert f"({negative} NaN, 0 +inf, 0 -inf)" in note
    # The clamp fix is a change to the user's model: said as not checked, with why.
    assert "fix: clamp the input first" in note and "(not checked: " in note


def test_dynamic_variant_that_quantized_nothing_gets_no_attribution(lognet_export):
    _, text, report, _, _ = lognet_export
    dyn = report["variants"]["dynamic"]["check"]
    assert dyn["weights"].get("int8") is None and dyn["attribution"] is None
    assert any("no error attribution" in n and "float32 rounding" in n for n in dyn["notes"]), dyn["notes"]
    assert not re.search(r"^dynamic: .*of the output error from", text, re.M), text
    # The int8 variant, which quantized, keeps its attribution line.
    assert report["variants"]["int8"]["check"]["attribution"] is not None


def test_html_variants_table_shows_the_max_error_of_the_text_and_json(lognet_export):
    _, _, report, page, _ = lognet_export
    table = page[page.index("<th>variant</th>"):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    header = [html_lib.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    assert header[4:6] == ["max|Δ|", "bound"], header
    seen = 0
    for row in rows:
        cells = [html_lib.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if not cells or cells[0] not in report["variants"]:
            continue
        c = report["variants"][cells[0]]["check"]
        w = c["outputs"][c["worst_output"]]
        assert cells[4] == format(float(w["max_abs_error"]), ".3g"), cells
        assert cells[5] == format(float(w["bound"]), ".3g"), cells
        seen += 1
    assert seen == 3
    assert "max|Δ|: the largest |lite − tf| of the worst output" in html_lib.unescape(page)


def test_html_row_is_the_max_not_the_error_at_the_worst_ratio():
    """The the float16 row: max|Δ| 8.9e-05 while the element with the worst |Δ|/bound has 3.37e-05."""
    from types import SimpleNamespace as NS

    from tflab.report.html.export import export_fragment
    from tflab.litert.records import OutputError

    o = OutputError("y", "float32", (-1, 5), max_abs_error=8.9e-05, max_rel_error=1e-4, max_ulp=9, bound=2e-4,
                    bound_ratio=0.6, argmax_agreement=1.0, reference_range=1.0, worst_abs_error=3.37e-05,
                    worst_bound=5.6e-05)
    check = NS(outputs={"y": o}, worst_output="y", size_bytes=100, size_ratio=0.5, op_counts={"X": 1},
               runtime="LiteRT", ops=())
    rep = NS(saved_model=NS(bit_exact=True, batch_count=1, signatures=["serving_default"]), model="m", out="/nonexistent",
             examples="e", variants={"float16": NS(check=check, status="ok", convert_seconds=1.0, error=None)})
    page = export_fragment(rep)
    assert "8.9e-05" in page and "0.0002" in page and "3.37e-05" not in page and "5.6e-05" not in page


# ------------------------------------------------------------- the kept-float fix record


def _kept(before: float, after: float):
    from tflab.litert.attribution import KeptFloat

    return KeptFloat(("model/dense/MatMul",), before, after, 1000, 1100)


def test_kept_float_that_helps_is_the_checked_fix():
    k = _kept(0.02, 0.008)
    assert k.fix.checked and k.fix.measured == {"error_before": 0.02, "error_after": 0.008,
                                                "size_before": 1000, "size_after": 1100}
    assert k.summary_line() == "kept float: -60% error, +10% size"
    assert k.to_text().startswith("fix: keep the ops with the largest share of the output error in float: "
                                  "QuantizationDebugOptions(fully_quantize=True, denylisted_nodes="
                                  "['model/dense/MatMul']) (checked: output error 0.02 -> 0.008 (-60%)")


@pytest.mark.parametrize("after", [0.0195, 0.03])
def test_kept_float_that_did_not_help_is_not_printed_as_the_fix(after):
    """Planted failing candidates: a 2.5% drop (under the 10% it must give) and a rise."""
    k = _kept(0.02, after)
    assert k.fix.failed
    assert k.summary_line().startswith("kept float did not help")
    assert "(checked" not in k.to_text() and "none of the 1 candidate fix(es) worked" in k.to_text()
