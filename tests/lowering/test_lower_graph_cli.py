"""``tflab lower FILE.py:FUNC --path graph``: text, --json, and --html clicked in headless Chromium.

One in-process CLI run for the module (TF loaded first, as `tests/lowering/test_lower_cli.py` runs it).
"""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("tensorflow")

from tests.lowering.test_lower_cli import BROWSER_FLAGS, CHROMIUM, _browser, _main  # noqa: E402
from tflab.lowering import GRAPH_STAGES  # noqa: E402

SOURCE = textwrap.dedent("""\
    import tensorflow as tf

    w = tf.Variable(tf.fill([8, 4], 0.5))
    b = tf.Variable(tf.fill([4], 0.1))


    def f(x):
        h = tf.nn.relu(tf.nn.bias_add(x @ w, b))
        return tf.reduce_sum(h * 2.0)
    """)
FUSED_LINE, MUL_LINE = "graph_fn.py:8", "graph_fn.py:9"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lower_graph")
    script = folder / "graph_fn.py"
    script.write_text(SOURCE)
    code, out, err = _main("lower", f"{script}:f", "--arg", "x=float32[2,8]", "--path", "graph", "--runs", "3",
                           "--json", "--html", str(folder / "page.html"))
    assert code == 0, err
    return json.loads(out), folder / "page.html", script


def test_json_has_the_graph_levels_nodes_optimizers_and_profile(outputs):
    data, _, _ = outputs
    assert data["path"] == "graph" and [s["name"] for s in data["stages"]] == list(GRAPH_STAGES)
    fused = next(n for n in data["nodes"] if n["grappler_op"] == "_FusedMatMul")
    assert fused["replaced_types"] == ["MatMul", "BiasAdd", "Relu"] and fused["source_lines"] == [FUSED_LINE]
    assert any(o["name"] == "remapping" and o["changed"] for o in data["optimizers"])
    assert data["profile"]["runs"] == 3 and data["profile"]["within_bound"]
    html = outputs[1].read_text()
    assert "Grappler optimizers, each turned off alone" in html and "slowest nodes (us per run)" in html
    assert f'data-key="node:{fused["name"]}"' in html


def test_cause_with_the_graph_path_is_one_line_exit_2(outputs):
    _, _, script = outputs
    code, out, err = _main("lower", f"{script}:f", "--arg", "x=float32[2,8]", "--path", "graph", "--cause")
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[lower 1/1")]
    assert code == 2 and out == "" and len(lines) == 1 and "--path xla" in lines[0], err


def _clicks(page_path, selectors: list[str]) -> list[dict]:
    """One headless Chromium, one click per selector: what each click marked (level, text) and page errors."""
    sync_api = _browser()
    out = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS)
        try:
            page = browser.new_page()
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            for selector in selectors:
                page.locator(selector).first.click()
                hits = page.eval_on_selector_all(
                    ".hit", "els => els.map(e => [e.closest('.lower-col') ? e.closest('.lower-col').dataset.stage"
                            " : '', e.textContent])")
                by: dict = {}
                for stage, text in hits:
                    by.setdefault(stage, []).append(text)
                out.append({"errors": list(errors), "requests": list(requests), "by": by})
        finally:
            browser.close()
    return out


def test_page_in_chromium_a_click_on_a_line_or_a_node_highlights_it_at_every_level_with_its_time(outputs):
    data, page, _ = outputs
    fused = next(n for n in data["nodes"] if n["grappler_op"] == "_FusedMatMul")
    line, node = _clicks(page, [f'.lower-col[data-stage="python"] [data-key="{FUSED_LINE}"]',
                                '[data-key="node:' + fused["name"] + '"]'])
    assert line["errors"] == [] and line["requests"] == [page.as_uri()]
    by = line["by"]
    assert {"python", "autograph", "funcgraph", "grappler", "partition", "profile"} <= set(by), by.keys()
    assert any("_FusedMatMul" in t for t in by["grappler"]) and any("us/run" in t for t in by["profile"])
    assert not any("= Mul" in t for s in ("grappler", "profile") for t in by[s])  # only what came from that line
    # A click on the fused node reaches the FuncGraph ops it replaced, and no other.
    funcgraph = node["by"]["funcgraph"]
    assert any("= MatMul" in t for t in funcgraph) and any("= BiasAdd" in t for t in funcgraph)
    assert not any("= Mul" in t for t in funcgraph)
