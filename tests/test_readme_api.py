"""Issue 23: the README's Python API examples run as written, and show what they print.

Every ``>>>`` example of README.md (the "From a REPL" section and the per-op TFLite
one after it) runs in one namespace, in order, the way a user would type them:
each example is written to a file that starts with ``import tensorflow as tf``
(the README says so for ``f.py``: AutoGraph and `diagnose` read the source file),
compiled from it, and run. Where the README shows an output, the output must be
that text; where it shows none, the example must run without error. The only
change made is the SavedModel folder (``/tmp/scale_sm`` becomes one under pytest's
tmp_path, since `save_and_reload` keeps an existing folder), and the working
directory is tmp_path (the example writes ``g.dot``).

The plain script blocks run too: ``bump.py`` as a file (its printed list is the
comment under it), and the test-suite snippet is compiled and its function defined.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import os
import re
import runpy

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


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


def test_the_readme_examples_are_found():
    """The extraction sees the README's API examples (it cannot pass by finding none)."""
    text = open(README, encoding="utf-8").read()
    examples = repl_examples(text)
    sources = " ".join(e.source for e in examples)
    assert len(examples) >= 30
    for call in ("trace_and_inspect", "RetraceProbe", "diagnose", "stabilize", "save_and_reload",
                 "tflite_roundtrip", "compare_modes", "demonstrate_retracing"):
        assert f"tflab.{call}(" in sources, call
    assert sum(bool(e.want) for e in examples) >= 10


def test_a_wrong_readme_output_is_caught(tmp_path):
    """The check can fail: a README whose shown output is not what the code prints."""
    globs: dict = {}
    good, bad = doctest.DocTestParser().get_examples(">>> (1 + 2, 'a')\n(3, 'a')\n>>> 2 * 2\n5\n")
    assert run_example(good, globs, str(tmp_path), 0) is None
    assert run_example(bad, globs, str(tmp_path), 1) == "4\n"
    with pytest.raises(NameError):
        run_example(doctest.Example("undefined_name + 1\n", ""), globs, str(tmp_path), 2)


def test_the_readme_python_api_runs_as_written(tmp_path, monkeypatch):
    text = open(README, encoding="utf-8").read()
    monkeypatch.chdir(tmp_path)
    sm_dir = str(tmp_path / "scale_sm")
    globs: dict = {"__name__": "__readme__"}
    wrong, compared = [], 0
    for i, ex in enumerate(repl_examples(text)):
        compared += bool(ex.want)
        ex.source = ex.source.replace('"/tmp/scale_sm"', repr(sm_dir))
        got = run_example(ex, globs, str(tmp_path), i)
        if got is not None:
            wrong.append(f"README line {ex.lineno}: {ex.source.strip()}\n  README shows: {ex.want.strip()}\n"
                         f"  it prints:    {got.strip()}")
    assert not wrong, "README examples whose output is not what the README shows:\n" + "\n".join(wrong)
    assert compared >= 10 and os.path.isfile(tmp_path / "g.dot") and globs["sm"].bit_exact is True


def test_the_readme_scripts_run_as_written(tmp_path, monkeypatch):
    text = open(README, encoding="utf-8").read()
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
    with pytest.raises(RetraceError, match=r"shape \(4, 3\) -> \(5, 3\)|x: shape"):
        run(tf.function(lambda x, y: tf.reduce_sum(x * w) - tf.reduce_sum(y)), ragged)
