"""``tflab lower FILE.py:FUNC``: text, --json, --out, --html (in headless Chromium), bad input.

One CLI run with every output (one child-process XLA dump) for the module;
the bad-input cases stop before any lowering.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import textwrap

import pytest

pytest.importorskip("tensorflow")

from tflab.lowering import STAGES  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

SOURCE = textwrap.dedent("""\
    import tensorflow as tf

    w = tf.Variable(tf.ones([8, 4]))


    def g(x):
        return tf.py_function(lambda t: t * 2.0, [x], tf.float32)


    def f(x):
        y = tf.nn.relu(x @ w)
        i = tf.constant(0)
        while i < 3:
            y = y * w[0, 0]
            i += 1
        return tf.reduce_sum(y)
    """)
WHILE_LINE = "model_fn.py:13"


def _main(*argv: str) -> tuple[int, str, str]:
    from tflab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("lower") / "model_fn.py"
    path.write_text(SOURCE)
    return path


@pytest.fixture(scope="module")
def outputs(script):
    """One run: --json with --stage stablehlo, --out DIR, --html PAGE, --passes."""
    folder = script.parent
    code, out, err = _main("lower", f"{script}:f", "--arg", "x=float32[2,8]", "--stage", "stablehlo", "--json",
                           "--out", str(folder / "stages"), "--html", str(folder / "page.html"), "--passes")
    assert code == 0, err
    return json.loads(out), folder / "stages", folder / "page.html", err


def test_json_carries_every_stages_op_counts_and_the_fusions(outputs):
    data, _, _, err = outputs
    assert err == ""  # --json: no progress line; stdout is the JSON document
    assert [s["name"] for s in data["stages"]] == list(STAGES)
    by = {s["name"]: s for s in data["stages"]}
    assert by["funcgraph"]["ops"]["While"] == 1 and by["stablehlo"]["ops"]["stablehlo.while"] == 1
    assert "stablehlo.while" in by["stablehlo"]["text"] and "text" not in by["hlo"]  # --stage: that text only
    assert all(s["bytes"] > 0 and s["why"] == "" for s in data["stages"])
    fusion = next(f for f in data["fusions"] if "Relu" in f["tf_op_types"])
    assert fusion["source_lines"] == ["model_fn.py:11"] and fusion["bytes_written"] == 32
    assert data["memory"]["total_bytes"] > 0 and data["stopped_at"] == ""


def test_passes_reach_the_json_and_the_page(outputs):
    data, _, page, _ = outputs
    fusion = next(p for p in data["passes"] if p["changed"] and p["name"] == "fusion")
    assert "model_fn.py:11" in fusion["source_lines"]
    assert "XLA passes (one compile's dump)" in page.read_text() and any(not p["changed"] for p in data["passes"])


def test_out_writes_each_stage_in_full_one_file_per_stage(outputs):
    data, folder, _, _ = outputs
    names = sorted(p.name for p in folder.iterdir())
    assert names == [".tflab-output", "01_python.py", "02_autograph.py", "03_funcgraph.txt", "04_tf_mlir.mlir",
                     "05_stablehlo.mlir", "06_hlo.hlo.txt", "07_optimized_hlo.hlo.txt", "08_llvm_ir.ll",
                     "09_asm.s", "lowering.json"]
    assert (folder / "05_stablehlo.mlir").read_text() == next(
        s["text"] for s in data["stages"] if s["name"] == "stablehlo")
    assert len((folder / "08_llvm_ir.ll").read_text().encode()) == next(
        s["bytes"] for s in data["stages"] if s["name"] == "llvm_ir")
    assert "define" in (folder / "08_llvm_ir.ll").read_text()


def test_out_refuses_an_existing_folder_and_html_an_existing_file(outputs, script):
    _, folder, page, _ = outputs
    before = sorted(p.name for p in folder.iterdir())
    code, out, err = _main("lower", f"{script}:f", "--arg", "x=float32[2,8]", "--out", str(folder))
    assert code == 2 and out == "" and "already exists" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in folder.iterdir()) == before
    code, _, err = _main("lower", f"{script}:f", "--arg", "x=float32[2,8]", "--html", str(page))
    assert code == 2 and "--html" in err


def test_a_lowering_that_stops_exits_1_with_the_levels_before_it(script):
    code, out, err = _main("lower", f"{script}:g", "--arg", "x=float32[3]")
    assert code == 1 and "stopped at stablehlo: stablehlo failed: XLA cannot compile EagerPyFunc" in out
    assert "funcgraph" in out and "tflab lower: finding: g stopped at stablehlo" in err


@pytest.mark.parametrize("argv, words", [
    (["{script}:nope", "--arg", "x=float32[2,8]"], "nope"),
    (["{script}:f", "--arg", "x=float32[None,8]"], "static shapes"),
    (["{script}:f", "--arg", "x=float32[2,8]", "--stage", "mhlo"], "invalid choice"),
    (["/no/such/file.py:f"], "file.py"),
    # 40 TB of input is refused from the memory available, before anything is allocated.
    (["{script}:f", "--arg", "x=float32[100000,100000,1000]"], "would need about"),
])
def test_bad_input_is_one_line_exit_2(script, argv, words):
    code, out, err = _main("lower", *[a.format(script=script) for a in argv])
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[lower 1/1")]
    assert code == 2 and out == "" and len(lines) == 1 and words in lines[0] and "Traceback" not in err, err


def _browser():
    if CHROMIUM is None:
        pytest.skip("no Chromium: apt-get install -y chromium (Debian's package; .ci/run installs it)")
    return pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install "
                               "'tflab[test]')")


def _clicked(page_path, selector: str) -> dict:
    sync_api = _browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS)
        try:
            page = browser.new_page()
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.as_uri())
            page.locator(selector).first.click()
            hits = page.eval_on_selector_all(
                ".hit", "els => els.map(e => [e.closest('.lower-col') ? e.closest('.lower-col').dataset.stage : '',"
                        " e.textContent])")
            return {"errors": errors, "requests": requests, "hits": hits,
                    "count": page.locator("#lower-count").text_content()}
        finally:
            browser.close()


def test_page_in_chromium_a_click_on_the_while_line_highlights_every_level(outputs):
    _, _, page, _ = outputs
    r = _clicked(page, f'.lower-col[data-stage="python"] [data-key="{WHILE_LINE}"]')
    assert r["errors"] == [] and r["requests"] == [page.as_uri()]
    stages = {s for s, _ in r["hits"] if s}
    assert {"python", "autograph", "funcgraph", "tf_mlir", "stablehlo", "hlo", "optimized_hlo"} <= stages, stages
    texts = [t for _, t in r["hits"]]
    assert any("stablehlo.while" in t for t in texts) and any("ag__.while_stmt(" in t for t in texts)
    assert not any("tf.nn.relu" in t for t in texts)  # only what came from that line
    assert r["count"].startswith(f"{len([h for h in r['hits'] if h[0]])} pieces from {WHILE_LINE} in ")


def test_page_in_chromium_a_click_on_a_fusion_reaches_its_kernel_code(outputs):
    data, _, page, _ = outputs
    fusion = next(f for f in data["fusions"] if "Relu" in f["tf_op_types"])
    r = _clicked(page, f'span[data-key="{fusion["name"]}"]')
    stages = {s for s, _ in r["hits"] if s}
    assert {"python", "funcgraph", "optimized_hlo", "llvm_ir", "asm"} <= stages, stages
    assert any("tf.nn.relu" in t for s, t in r["hits"] if s == "python")


def test_the_console_verb_dumps_its_own_compile_and_leaves_no_folder(script, tmp_path):
    """``tflab lower`` runs in a fresh supervised process: XLA's dump is on before TF loads, no child compile.

    The one real ``tflab`` process of this file (the others run `main` in this
    process, where TF loaded first, so they use the child).
    """
    import os
    import subprocess
    import sys

    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop("TFLAB_IN_PROCESS", None)
    run = subprocess.run([sys.executable, "-m", "tflab", "lower", f"{script}:f", "--arg", "x=float32[2,8]",
                          "--json", "--passes"], capture_output=True, text=True, env=env, cwd=script.parent,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads(run.stdout)
    by = {s["name"]: s for s in data["stages"]}
    assert all(s["why"] == "" and s["bytes"] > 0 for s in data["stages"]), [s["why"] for s in data["stages"]]
    assert "in this process (XLA_FLAGS set before TF loaded)" in by["optimized_hlo"]["note"], by["optimized_hlo"]
    assert "before_optimizations" in by["hlo"]["note"] and by["hlo"]["ops"]["while"] == 1
    fusion = next(f for f in data["fusions"] if "Relu" in f["tf_op_types"])
    assert fusion["source_lines"] == ["model_fn.py:11"] and fusion["llvm_ir_bytes"] > 0 and fusion["asm_bytes"] > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tflab_")] == []  # the dump folder removed
    # --passes: this process's own dump had XLA's per-pass files (armed before TF loaded).
    fusion = next(p for p in data["passes"] if p["changed"] and p["name"] == "fusion")
    assert "model_fn.py:11" in fusion["source_lines"] and any(not p["changed"] for p in data["passes"])
