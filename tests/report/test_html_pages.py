"""One self-contained HTML page per run (tour, retrace, export), --tensorboard, in a real browser.

The SVG is judged against TF's own FuncGraph (``graph.get_operations()``),
the layout against the graph's edges, the TensorBoard file by reading it back
with ``tf.compat.v1.train.summary_iterator``, and the page by loading it in
headless Chromium (Debian's ``chromium``, driven by playwright): no console
errors, no request but the page itself, every section, one SVG node per op,
and a search box that finds an op. The browser tests skip, with the reason,
where Chromium or playwright is missing.
"""

from __future__ import annotations

import os
import shutil
import xml.etree.ElementTree as ET

import pytest

SCRIPT = '''
import tensorflow as tf

v = tf.Variable([[1.0, 2.0, 3.0]])


@tf.function
def step(x, n):
    y = tf.matmul(x, v, transpose_b=True)
    if tf.reduce_sum(y) > 0:
        y = tf.nn.relu(y)
    for _ in range(n):
        y = y + 1.0
    return tf.reduce_sum(y)


if __name__ == "__main__":
    for shape, n in [((2, 3), 1), ((4, 3), 1), ((4, 3), 2)]:
        step(tf.ones(shape), n)
'''

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


_MODULE: list = []


def _step_function():
    """The script's ``step`` imported in this process (a fresh tf.function), to count its ops independently."""
    import importlib.util
    import tempfile

    import tensorflow as tf

    if not _MODULE:
        path = os.path.join(tempfile.mkdtemp(prefix="tflab-step-"), "step_defs.py")
        with open(path, "w") as f:
            f.write(SCRIPT)  # AutoGraph reads the source from the file
        _MODULE.append(path)
    spec = importlib.util.spec_from_file_location("step_defs", _MODULE[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.step, tf


def _newest_graph_ops():
    step, tf = _step_function()
    return step.get_concrete_function(tf.ones((4, 3)), 2).graph.get_operations()


def _expected_ops() -> int:
    return len(_newest_graph_ops())


def _matching(ops, query: str) -> int:
    """Ops whose name or type contains ``query`` (case-insensitive): what the search box must mark."""
    return sum(query.lower() in op.name.lower() or query.lower() in op.type.lower() for op in ops)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("retrace_html") / "script.py"
    path.write_text(SCRIPT)
    return path


@pytest.fixture(scope="module")
def retrace_page(script, tmp_path_factory):
    from tflab.cli import main

    out = tmp_path_factory.mktemp("page") / "r.html"
    assert main(["retrace", "--html", str(out), str(script)]) == 0
    return out


def _small_report():
    step, tf = _step_function()
    from tflab.tracing import inspect_concrete_function

    cf = step.get_concrete_function(tf.ones((4, 3)), 2)
    return inspect_concrete_function(cf), cf


def _svg_ops(svg_text: str) -> list[ET.Element]:
    root = ET.fromstring(svg_text)  # the SVG is well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    return [g for g in root.iter(f"{ns}g") if "op" in (g.get("class") or "").split()]


@pytest.mark.parametrize("engine", ["networkx", "dot"])
def test_svg_has_one_node_per_funcgraph_op_with_captures_and_control_flow_marked(engine):
    """One <g class="op"> per op of TF's FuncGraph; the captured variable and the If marked."""
    from tflab.report.html import funcgraph_svg

    if engine == "dot" and not shutil.which("dot"):
        pytest.skip("Graphviz `dot` is not installed (apt-get install graphviz)")
    report, cf = _small_report()
    ops = _svg_ops(funcgraph_svg(report, engine=engine))
    graph_ops = cf.graph.get_operations()
    assert len(ops) == len(graph_ops) > 5
    titles = [g.find("{http://www.w3.org/2000/svg}title").text for g in ops]
    assert sorted(t.split(" = ")[0] for t in titles) == sorted(op.name for op in graph_ops)
    capture_ops = {internal.op.name for _, internal in cf.graph.captures}
    marked = {t.split(" = ")[0] for g, t in zip(ops, titles) if "capture" in g.get("class").split()}
    assert marked == capture_ops and len(marked) == 1  # the one tf.Variable's resource handle
    cf_marked = [t for g, t in zip(ops, titles) if "cf" in g.get("class").split()]
    assert len(cf_marked) == 1 and "If" in cf_marked[0] and "functions:" in cf_marked[0]


def test_svg_count_check_catches_a_dropped_op():
    """Planted defect: a report missing one op draws one node fewer than TF's graph has ops."""
    import dataclasses

    from tflab.report.html import funcgraph_svg

    report, cf = _small_report()
    broken = dataclasses.replace(report, ops=report.ops[:-1])
    assert len(_svg_ops(funcgraph_svg(broken, engine="networkx"))) == len(cf.graph.get_operations()) - 1


def test_networkx_layout_puts_every_producer_above_its_consumer(tour_model):
    """The layered layout is a real layering: every edge of the tour FuncGraph points down, no two boxes overlap."""
    from tflab.report.layout import NODE_H, NODE_W, layout_graph
    from tflab.report.html import graph_nodes
    from tflab.models import model_input_spec
    from tflab.tracing import trace_and_inspect

    report = trace_and_inspect(lambda x: tour_model(x, training=False), model_input_spec(tour_model))
    ops, edges = graph_nodes(report)
    lay = layout_graph([o.name for o in ops], [(a, b) for a, b, _ in edges], engine="networkx")
    assert len(lay.positions) == len(ops) > 500
    assert all(lay.positions[a][1] < lay.positions[b][1] for a, b, _ in edges)
    boxes = {(x // (NODE_W + 1), y // (NODE_H + 1)) for x, y in lay.positions.values()}
    assert len(boxes) == len(ops)  # distinct cells: no box drawn on another
    # A cyclic graph (never a FuncGraph, but survivable) still gets a position for every node.
    cyc = layout_graph(["a", "b", "c"], [("a", "b"), ("b", "a"), ("b", "c")], engine="networkx")
    assert set(cyc.positions) == {"a", "b", "c"} and cyc.positions["c"][1] > cyc.positions["a"][1]


def test_notebook_fragment_of_the_tour_funcgraph_is_under_300_kB(tour_model):
    """ the budget, measured on the tour model's FuncGraph (op list folded away)."""
    from tflab.report.html import fragment
    from tflab.models import model_input_spec
    from tflab.tracing import trace_and_inspect

    report = trace_and_inspect(lambda x: tour_model(x, training=False), model_input_spec(tour_model))
    html = report._repr_html_()
    assert html == fragment(report)
    assert html.count('<g class="op ') == len(report.ops) > 1000
    assert len(html.encode()) < 300_000, len(html.encode())
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html


def test_retrace_html_page_is_self_contained_with_timeline_and_funcgraph(retrace_page):
    text = retrace_page.read_text()
    for sid in ("config", "timeline", "funcgraph"):
        assert f'<section id="{sid}"' in text
    assert text.count('class="trace-mark"') == 3  # #1 first, #2 shape, #3 Python value
    assert "n: 1 -&gt; 2" in text and "x: shape (2, 3) -&gt; (4, 3)" in text
    assert text.count('<g class="op ') == _expected_ops()
    for ref in ("src=", "href=\"http", "@import", "url("):
        assert ref not in text, ref


@pytest.mark.parametrize("verb", ["tour", "retrace", "export"])
@pytest.mark.parametrize("case", ["exists", "folder", "under_file"])
def test_bad_html_path_is_one_line_exit_2_and_nothing_touched(verb, case, run_cli, script, tmp_path,
                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    existing = tmp_path / "old.html"
    existing.write_text("keep me")
    target = {"exists": existing, "folder": tmp_path, "under_file": existing / "r.html"}[case]
    args = {"tour": ["tour", "--out", str(tmp_path / "t")], "retrace": ["retrace"],
            "export": ["export", "--out", str(tmp_path / "e")]}[verb]
    tail = {"tour": [], "retrace": [str(script)], "export": [str(script) + ":step"]}[verb]
    code, out, err = run_cli(*args, "--html", str(target), *tail)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and "--html" in lines[0], err
    assert {"exists": "--force", "folder": "is a directory", "under_file": "is a regular file, not a folder"}[case] \
        in lines[0]
    assert existing.read_text() == "keep me" and sorted(os.listdir(tmp_path)) == ["old.html"]


def test_retrace_html_force_replaces_the_file(script, run_cli, tmp_path):
    page = tmp_path / "r.html"
    page.write_text("old")
    code, out, _ = run_cli("retrace", "--force", "--html", str(page), str(script))
    assert code == 0 and page.read_text().startswith("<!DOCTYPE html>") and f"wrote {page}" in out


def test_tensorboard_event_file_holds_the_funcgraph(script, run_cli, tmp_path):
    """``inspect --tensorboard DIR``: the event file's graph_def is the FuncGraph, op for op."""
    import tensorflow as tf

    logdir = tmp_path / "tb" / "run1"  # missing parents are created
    code, out, _ = run_cli("inspect", f"{script}:step", "--arg", "x=float32[4,3]", "--arg", "n=2",
                           "--tensorboard", str(logdir))
    assert code == 0, out
    events = [f for f in os.listdir(logdir) if f.startswith("events.out.tfevents")]
    assert len(events) == 1
    graphs = [e.graph_def for e in tf.compat.v1.train.summary_iterator(str(logdir / events[0]))
              if e.graph_def]
    assert len(graphs) == 1
    gdef = tf.compat.v1.GraphDef.FromString(graphs[0])
    step, _ = _step_function()
    expected = step.get_concrete_function(tf.TensorSpec([4, 3], tf.float32), 2).graph.as_graph_def()
    assert sorted(n.name for n in gdef.node) == sorted(n.name for n in expected.node)
    assert sorted(n.op for n in gdef.node) == sorted(n.op for n in expected.node)


def test_tensorboard_refuses_a_regular_file(script, run_cli, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    code, out, err = run_cli("inspect", f"{script}:step", "--arg", "x=float32[4,3]", "--arg", "n=2",
                             "--tensorboard", str(f))
    assert code == 2 and "--tensorboard" in err and "not a folder" in err and f.read_text() == "x"


# --------------------------------------------------------------------------- in a real browser

def _browser():
    if CHROMIUM is None:
        pytest.skip("no Chromium: apt-get install -y chromium (Debian's package; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install "
                                   "'tflab[test]')")
    return sync_api


def load_in_browser(path, search: str | None = None) -> dict:
    """Loads ``path`` in headless Chromium; returns console errors, requests, sections, op nodes, search hits."""
    sync_api = _browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS)
        try:
            page = browser.new_page()
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            result = {"errors": errors, "requests": requests,
                      "sections": page.eval_on_selector_all("section", "els => els.map(e => e.id)"),
                      "op_nodes": page.locator("svg.funcgraph g.op").count(),
                      "funcgraphs": page.locator("svg.funcgraph").count()}
            if search is not None:
                box = page.locator("input.op-search").first
                box.fill(search)
                result["hits"] = page.locator(".funcgraph-section").first.locator("g.op.hit").count()
                result["count_text"] = page.locator(".search-count").first.text_content()
                box.fill("no-such-op-anywhere")
                result["misses"] = page.locator("g.op.hit").count()
            return result
        finally:
            browser.close()


def test_retrace_page_in_chromium(retrace_page):
    r = load_in_browser(retrace_page, search="MatMul")
    assert r["errors"] == [] and r["requests"] == [retrace_page.as_uri()]
    assert r["sections"] == ["config", "timeline", "funcgraph"]
    assert r["funcgraphs"] == 1 and r["op_nodes"] == _expected_ops()
    expected = _matching(_newest_graph_ops(), "MatMul")  # MatMul and its MatMul/ReadVariableOp
    assert r["hits"] == expected >= 2 and r["count_text"] == f"{expected} ops match" and r["misses"] == 0


def test_browser_check_catches_a_script_error_and_a_network_request(retrace_page, tmp_path):
    """Planted defects: a page with a broken script and an external image fails both checks."""
    broken = tmp_path / "broken.html"
    broken.write_text(retrace_page.read_text().replace(
        "</body>", '<img src="http://192.0.2.1/x.png"><script>undefinedFunction();</script></body>'))
    r = load_in_browser(broken)
    assert any("undefinedFunction" in e for e in r["errors"])
    assert "http://192.0.2.1/x.png" in r["requests"]


@pytest.mark.slow
def test_tour_page_in_chromium(tour_model, small_keras_file, tmp_path):
    """The tour page from real reports: trace timeline, FuncGraph, export, modes, precision, distribute."""
    import tensorflow as tf

    from tflab import compare_modes, compare_precisions, export_model
    from tflab.report.pages import tour_page
    from tflab.models import model_input_spec
    from tflab.retrace import RetraceProbe
    from tflab.runtime import runtime_config
    from tflab.tracing import trace_and_inspect

    trace = trace_and_inspect(lambda x: tour_model(x, training=False), model_input_spec(tour_model))
    probe = RetraceProbe(lambda x: x * 2.0)
    for n in (4, 4, 2):
        probe(tf.ones([n, 3]))
    exported = export_model(str(small_keras_file), tmp_path / "export", quantize=["none", "float16"],
                            isolate=False)
    x, w = tf.ones([8, 64]), tf.fill([64, 4], 2.0 ** -8)
    modes = compare_modes(lambda a: tf.nn.relu(a) * 3.0, x, modes=("eager", "graph"), repeats=1, hlo=False)
    precision = compare_precisions(lambda a, b: tf.reduce_sum(a @ b) * 2.0 ** -20, x, w, loss_scale=2.0 ** 15)
    report = {"model": "MobileNetV3Small", "config": runtime_config().to_dict(),
              "modes": {"forward": modes.to_dict(), "gradients": modes.to_dict()},
              "precision": {"tiny_loss": precision.to_dict()},
              "distribute": {"replicas_in_sync": 2, "per_replica_shapes": [[[2, 3], [2, 3]], [[1, 3], [1, 3]]],
                             "plain": {"trace_count": 2, "replica_runs": 4, "replica_runs_per_trace": 2}}}
    page = tmp_path / "tour.html"
    page.write_text(tour_page(report, {"trace_report": trace, "probe": probe, "export_report": exported}))
    assert page.stat().st_size < 2_000_000
    r = load_in_browser(page, search="Conv2D")
    assert r["errors"] == [] and r["requests"] == [page.as_uri()]
    assert r["sections"] == ["config", "timeline", "funcgraph", "export", "modes", "precision", "distribute",
                             "report"]
    assert r["op_nodes"] == len(trace.func_graph.get_operations())
    # dL/dx = 4 · 2^-8 · 2^-20 = 2^-26 per element, below float16's smallest subnormal 2^-24: all 8×64
    # elements flush to 0 without a loss scale (2^15 lifts them to 2^-11), and the table must say so.
    import re

    row = re.search(r"<tr><td>mixed_float16</td><td>[^<]*</td><td>([\d,]+)</td><td>([\d,]+)</td>",
                    page.read_text())
    assert row and row.groups() == ("512", "0"), row
    assert r["hits"] == _matching(trace.func_graph.get_operations(), "Conv2D") >= trace.op_counts["Conv2D"] > 0


def test_per_op_error_heat_list_is_worst_first_with_proportional_bars():
    """`TFLiteCheck.ops` (another issue's per-op records) rendered when present: worst op first, bar ∝ error."""
    import re

    from tflab.report.html import op_records_fragment

    recs = [{"name": "conv", "type": "CONV_2D", "bound_ratio": 0.25},
            {"name": "fc", "type": "FULLY_CONNECTED", "bound_ratio": 1.0},
            {"name": "soft", "type": "SOFTMAX", "bound_ratio": 0.5}]
    html = op_records_fragment(recs)
    assert [m for m in re.findall(r"<td>(conv|fc|soft)</td>", html)] == ["fc", "soft", "conv"]
    widths = [int(w) for w in re.findall(r"width:(\d+)px", html)]
    assert widths == [120, 60, 30]  # 120 px for the worst, then 0.5 and 0.25 of it
    assert op_records_fragment(None) == "" and op_records_fragment([]) == ""


@pytest.mark.slow
def test_export_html_page_has_the_variants_table(small_keras_file, run_cli, tmp_path):
    """``tflab export --html``: the page names each variant with its status and |Δ|/bound, as report.json does."""
    import json
    import re

    page = tmp_path / "export.html"
    code, out, _ = run_cli("export", str(small_keras_file), "--quantize", "none,float16", "--out",
                           str(tmp_path / "e"), "--html", str(page))
    report = json.loads((tmp_path / "e" / "report.json").read_text())
    assert code == (0 if report["ok"] else 1)
    text = page.read_text()
    for sid in ("config", "export", "variants", "report"):
        assert f'<section id="{sid}"' in text
    for q, v in report["variants"].items():
        row = re.search(rf"<tr><td>{q}</td><td><span class=\"\w+\">([^<]+)</span>", text)
        assert row and row.group(1) == v["status"], q
    assert text.count('class="tflab tflite-section"') == 2


def test_tour_writes_the_page_and_the_tensorboard_graph(small_keras_file, tmp_path):
    """``run_tour(html=…, tensorboard=…)`` on a user model, steps 1–2: the page and the event file agree with TF."""
    import tensorflow as tf

    from tflab.tour import run_tour

    page, logdir = tmp_path / "tour.html", tmp_path / "tb"
    report = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "t"), quiet=True,
                      only=["s01_trace", "s02_retrace"], html=str(page), tensorboard=str(logdir))
    text = page.read_text()
    assert '<section id="timeline"' in text and '<section id="funcgraph"' in text
    assert text.count('<g class="op ') == report["trace"]["op_count"]
    (event,) = [f for f in os.listdir(logdir) if f.startswith("events.out.tfevents")]
    (gdef,) = [tf.compat.v1.GraphDef.FromString(e.graph_def)
               for e in tf.compat.v1.train.summary_iterator(str(logdir / event)) if e.graph_def]
    assert len(gdef.node) == report["trace"]["op_count"]
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match="--html .* exists; pass --force"):
        run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "t2"), quiet=True, only=[],
                 html=str(page))
    assert not (tmp_path / "t2").exists()  # refused before any work
