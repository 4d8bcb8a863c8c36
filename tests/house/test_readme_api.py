"""The README and the docs pages run as written, and show what they print.

Every ``>>>`` example runs the way a user would type it: the README's in one namespace, in
order; docs/python-api.md's and then docs/tflite.md's (which continues it) in another. Each
example is written to a file that starts with ``import tensorflow as tf`` (AutoGraph and
`diagnose` read the source file), compiled from it, and run. Where a page shows an output, the
output must be that text; where it shows none, the example must run without error. The only
change made is the SavedModel folder (``/tmp/score_sm``, ``/tmp/scale_sm`` become folders under
pytest's tmp_path), and the working directory is tmp_path (an example writes ``g.dot``).

The plain script blocks of docs/python-api.md run too: ``bump.py`` as a file (its printed list is
the comment under it), and the test-suite snippet is called with a step that keeps its trace and
with one that retraces. The README's commands are checked without running them: each ``tflab``
line parses with the CLI's own parser (no TensorFlow is imported), the verbs listed are exactly
`tflab.cli.VERBS`, and ``make -n`` shows what ``make tour`` and ``make test`` run. Every relative
link of the README and the docs pages names a file that exists.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import os
import re
import runpy

import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
# The docs pages whose >>> examples run, in this order, in one namespace (tflite.md uses python-api.md's sm).
API_PAGES = ("python-api.md", "tflite.md")


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def api_pages_text() -> str:
    return "\n".join(read(os.path.join(DOCS, name)) for name in API_PAGES)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def repl_examples(text: str) -> list[doctest.Example]:
    out = []
    for block in python_blocks(text):
        if ">>> " in block:
            out += doctest.DocTestParser().get_examples(block)
    return out


def run_example(ex: doctest.Example, globs: dict, folder: str, index: int) -> str | None:
    """Runs one example as a file; returns what it printed/echoed when it differs from the README, else None."""
    path = os.path.join(folder, f"readme_example_{index}.py")
    src = "import tensorflow as tf\n" + ex.source
    with open(path, "w", encoding="utf-8") as f:
        f.write(src)
    tree = ast.parse(src, path)
    # The last statement, when an expression, is echoed as the REPL does (repr, None not shown).
    echo = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        echo = ast.Expression(tree.body.pop().value)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(tree, path, "exec"), globs)  # noqa: S102 - the README's own code
        if echo is not None:
            value = eval(compile(echo, path, "eval"), globs)  # noqa: S307
            if value is not None:
                print(repr(value))
    got = buf.getvalue()
    if ex.want and " ".join(got.split()) != " ".join(ex.want.split()):
        return got
    return None


def run_page(text: str, tmp_path, replace: dict[str, str]) -> tuple[dict, int]:
    """Runs a page's >>> examples in one namespace; fails listing each shown output that is not printed."""
    globs: dict = {"__name__": "__readme__"}
    wrong, compared = [], 0
    for i, ex in enumerate(repl_examples(text)):
        compared += bool(ex.want)
        for old, new in replace.items():
            ex.source = ex.source.replace(old, new)
        got = run_example(ex, globs, str(tmp_path), i)
        if got is not None:
            wrong.append(f"line {ex.lineno}: {ex.source.strip()}\n  the page shows: {ex.want.strip()}\n"
                         f"  it prints:      {got.strip()}")
    assert not wrong, "examples whose output is not what the page shows:\n" + "\n".join(wrong)
    return globs, compared


def test_the_examples_are_found():
    """The extraction sees the README's and the docs' API examples (it cannot pass by finding none)."""
    readme = repl_examples(read(README))
    assert 9 <= len(readme) <= 12 and sum(bool(e.want) for e in readme) >= 3  # the ten-line example
    readme_src = " ".join(e.source for e in readme)
    for call in ("trace_and_inspect", "RetraceProbe", "tflite_roundtrip"):
        assert f"tflab.{call}(" in readme_src, call
    docs = repl_examples(api_pages_text())
    sources = " ".join(e.source for e in docs)
    assert len(docs) >= 30
    for call in ("trace_and_inspect", "RetraceProbe", "diagnose", "stabilize", "save_and_reload",
                 "tflite_roundtrip", "compare_modes", "demonstrate_retracing"):
        assert f"tflab.{call}(" in sources, call
    assert sum(bool(e.want) for e in docs) >= 10


def test_a_wrong_readme_output_is_caught(tmp_path):
    """The check can fail: a README whose shown output is not what the code prints."""
    globs: dict = {}
    good, bad = doctest.DocTestParser().get_examples(">>> (1 + 2, 'a')\n(3, 'a')\n>>> 2 * 2\n5\n")
    assert run_example(good, globs, str(tmp_path), 0) is None
    assert run_example(bad, globs, str(tmp_path), 1) == "4\n"
    with pytest.raises(NameError):
        run_example(doctest.Example("undefined_name + 1\n", ""), globs, str(tmp_path), 2)
    with pytest.raises(AssertionError, match=r"the page shows: 5\n\s+it prints:\s+4\n"):
        run_page("```python\n>>> 2 * 2\n5\n```\n", tmp_path, {})


def test_the_readme_ten_lines_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sm_dir = str(tmp_path / "score_sm")
    globs, compared = run_page(read(README), tmp_path, {'"/tmp/score_sm"': repr(sm_dir)})
    assert compared >= 3 and os.path.isfile(os.path.join(sm_dir, "saved_model.pb"))
    assert globs["probe"].trace_count == 3 and globs["c"].quantization == "int8"


def test_the_docs_python_api_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sm_dir = str(tmp_path / "scale_sm")
    globs, compared = run_page(api_pages_text(), tmp_path, {'"/tmp/scale_sm"': repr(sm_dir)})
    assert compared >= 10 and os.path.isfile(tmp_path / "g.dot") and globs["sm"].bit_exact is True


def test_the_docs_scripts_run_as_written(tmp_path, monkeypatch):
    text = read(os.path.join(DOCS, "python-api.md"))
    scripts = [b for b in python_blocks(text) if ">>> " not in b]
    bump = next(b for b in scripts if b.startswith("# bump.py"))
    snippet = next(b for b in scripts if "expect_traces" in b and "def test_" in b)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bump.py").write_text(bump, encoding="utf-8")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        runpy.run_path(str(tmp_path / "bump.py"), run_name="__main__")
    # The output the README shows is the comment after print(...), one list wrapped over lines.
    shown = " ".join(ln[1:].strip() for ln in bump.split("print(p.side_effects)", 1)[1].splitlines()
                     if ln.startswith("#"))
    assert buf.getvalue().strip() == shown
    # The snippet names `train_step` and `dataset` as the user's own; give it both and call
    # the test it defines: once with a step that keeps its one trace (passes), once with a
    # step that retraces on every batch size (the RetraceError the snippet promises).
    import tensorflow as tf

    from tflab import RetraceError

    data = [(tf.ones([4, 3]), tf.ones([4])), (tf.ones([4, 3]), tf.zeros([4]))]
    ragged = [(tf.ones([n, 3]), tf.ones([n])) for n in (4, 5, 6, 7)]

    def run(step, dataset):
        ns: dict = {"train_step": step, "dataset": dataset}
        exec(compile(snippet, "README-snippet.py", "exec"), ns)  # noqa: S102
        ns["test_train_step_does_not_retrace"]()

    w = tf.Variable(tf.ones([3]))
    run(tf.function(lambda x, y: tf.reduce_sum(x * w) - tf.reduce_sum(y)), data)
    with pytest.raises(RetraceError, match=r"x: shape \(4, 3\) -> \(5, 3\)"):
        run(tf.function(lambda x, y: tf.reduce_sum(x * w) - tf.reduce_sum(y)), ragged)


# ---------------------------------------------------------------- the README's commands and links

def sh_lines(text: str) -> list[str]:
    """The commands of a page's ```sh blocks, comments dropped."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def readme_tflab_lines() -> list[list[str]]:
    return [shlex.split(ln)[1:] for ln in sh_lines(read(README)) if ln.startswith("tflab ")]


def test_the_readme_lists_every_verb_once_and_each_line_parses():
    """One line per verb of `tflab.cli.VERBS`, none missing and none unknown, and each line is a
    command line the CLI's own parser accepts (argparse exits 2 on a wrong option or a missing
    positional; nothing runs and TensorFlow is not imported)."""
    from tflab.cli import VERBS, build_parser

    lines = readme_tflab_lines()
    verbs = [argv[0] for argv in lines]
    missing, unknown = sorted(set(VERBS) - set(verbs)), sorted(set(verbs) - set(VERBS))
    assert not missing and not unknown, f"README lacks the verbs {missing}; names unknown verbs {unknown}"
    assert len(verbs) == len(set(verbs)), verbs
    parser, _ = build_parser()
    for argv in lines:
        args, extra = parser.parse_known_args(argv)  # as tflab.cli.main parses (extras refused there)
        assert args.verb == argv[0] and extra == [], argv


def test_a_readme_line_the_parser_refuses_is_caught(capsys):
    """The parse check can fail: a wrong option is an extra, a missing FILE.py:FUNC exits 2."""
    from tflab.cli import build_parser

    parser, _ = build_parser()
    for bad in (["inspect", "model.py:step", "--bogus"], ["env", "--arg", "x=float32"]):
        assert parser.parse_known_args(bad)[1] != [], bad  # an extra the check above refuses
    with pytest.raises(SystemExit) as info:
        parser.parse_known_args(["compare", "--seed", "0"])
    assert info.value.code == 2
    assert "tflab compare: error: the following arguments are required: FILE.py:FUNC" in capsys.readouterr().err


def test_the_two_make_commands_do_what_the_readme_says():
    """`make tour` runs the tour (after installing into .venv); `make test` runs pytest."""
    assert [ln for ln in sh_lines(read(README)) if ln.startswith("make ")] == ["make tour", "make test"]
    for target, want in (("tour", ".venv/bin/tflab tour"), ("test", ".venv/bin/python -m pytest")):
        # -W pyproject.toml: as if the install stamp were stale, so the install recipe shows too.
        dry = subprocess.run(["make", "-n", "-W", "pyproject.toml", target], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        assert "pip install --quiet -e '.[test]'" in dry.stdout and want in dry.stdout, dry.stdout


def links(text: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]


def test_every_relative_link_of_the_readme_and_docs_names_a_file():
    pages = [README] + sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md"))
    missing = [(os.path.relpath(page, ROOT), target) for page in pages for target in links(read(page))
               if not os.path.exists(os.path.join(os.path.dirname(page), target))]
    assert not missing, missing
    # The README links each page it moved details to, and the architecture map.
    readme_links = set(links(read(README)))
    for name in ("architecture.md", "lab-steps.md", "python-api.md", "tflite.md", "cli.md", "tour.md",
                 "configuration.md", "html.md", "pytest-plugin.md", "lowering.md"):
        assert f"docs/{name}" in readme_links, name
    assert links("see [x](docs/nope.md) and [y](https://a.b/c)") == ["docs/nope.md"]
