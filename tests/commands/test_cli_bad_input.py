"""Bad input: every verb keeps the contract "one line, exit 2, no traceback, nothing half-written".

The walks iterate over `tflab.cli.VERBS`, so a verb added later is covered
without editing this file: its output-path options (found by their metavar
``OUT…``/``DIR`` or dest ``out``/``output``/``report``) must refuse
``/proc/x.dot`` and ``/sys/x``, a user function (positional ``FILE.py:…`` or
``SCRIPT.py``) that calls ``sys.exit(5)`` or raises ``BaseException`` must be
one line, and no numeric option may be typed with a bare ``int``/``float``.
Most checks call `tflab.cli.main` in-process (what the console script runs);
one subprocess checks the real interpreter exit (no traceback, status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tflab.cli import VERBS, build_parser
from tflab.errors import UsageError

# Options a verb requires that the walks cannot guess (verb -> extra argv).
WALK_EXTRA_ARGS: dict[str, list[str]] = {"check-tflite": ["model.tflite", "saved_model"]}
# /proc refuses new files with ENOENT, /sys with EACCES, also for root (os.access says yes to root).
UNWRITABLE = ["/proc/x.dot", "/sys/x"]
PROGRESS = re.compile(r"^\[\w[\w-]* \d+(/\d+)? \+")

USER_CODE = '''
import sys
import keras
import tensorflow as tf


def exits(*args, **kwargs):
    sys.exit(5)


def base(*args, **kwargs):
    raise BaseException("base")


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt


@tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
def ok(x):
    return x * 2.0


class SquareMatmul(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.matmul(x, x)}  # [n,3] x [n,3]: only n == 3 runs


def bad_signature():
    return SquareMatmul()


def not_finite():
    inp = keras.Input((4,), name="x")
    out = keras.layers.Lambda(lambda t: tf.debugging.assert_all_finite(tf.math.log(t - 100.0), "log"))(inp)
    return keras.Model(inp, out)


class Sub(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(3)

    def call(self, x):
        return self.d(x)


def unbuilt():
    return Sub()


def no_signature():
    return tf.Module()


if __name__ == "__main__":
    KIND
'''


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """Two user files: script code that ``sys.exit(5)``s, and one that raises ``BaseException``."""
    d = tmp_path_factory.mktemp("user_code")
    files = {}
    for kind, stmt in [("exits", "sys.exit(5)"), ("base", 'raise BaseException("base")')]:
        path = d / f"{kind}_user.py"
        path.write_text(USER_CODE.replace("KIND", stmt))
        files[kind] = str(path)
    return files


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    """Every verb's parser; fails (not skips) when a verb of `tflab.cli.VERBS` has no parser.

    `build_parser` leaves out a verb whose ``tflab.commands.*`` module is missing, so without
    this check a deleted or renamed command module would turn each per-verb walk into a skip.
    """
    import tflab.cli

    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = {v: f"tflab.commands.{m}" for v, m in tflab.cli.VERBS.items() if v not in sub.choices}
    if missing:
        pytest.fail(f"verbs without a parser (their command module is missing): {missing}")
    return dict(sub.choices)


def _output_options(p: argparse.ArgumentParser) -> list[str]:
    return [a.option_strings[-1] for a in p._actions if a.option_strings and a.nargs != 0
            and (str(a.metavar or "").startswith("OUT") or a.metavar == "DIR"
                 or a.dest in ("out", "output", "report"))]


def _user_positional(p: argparse.ArgumentParser):
    """The positional naming user code (``FILE.py:FUNC``, ``FILE.py:OBJ``, ``SCRIPT.py``, ``MODEL``), or None."""
    for a in p._actions:
        if not a.option_strings and a.nargs != argparse.REMAINDER and a.dest != "help":
            if ".py" in str(a.metavar or "") or a.metavar == "MODEL":
                return a
    return None


def _argv(verb: str, p: argparse.ArgumentParser, file: str, func: str) -> list[str]:
    """A valid-looking command line for ``verb`` calling ``file:func`` (or running ``file``)."""
    argv = [verb]
    pos = _user_positional(p)
    if pos is not None:
        argv.append(file if str(pos.metavar).endswith(".py") else f"{file}:{func}")
    if any("--arg" in a.option_strings for a in p._actions):
        argv += ["--arg", "x=float32[2]"]
    return argv + WALK_EXTRA_ARGS.get(verb, [])


def _run_walk(run_cli, verb: str, *argv: str):
    p = _subparsers().get(verb)
    if p is not None and any(a.nargs == argparse.REMAINDER for a in p._actions):
        # `tflab retrace SCRIPT.py ARGS…`: what follows SCRIPT.py is the script's; options go first.
        i = next((k for k, a in enumerate(argv) if a.endswith(".py")), None)
        if i is not None:
            argv = argv[:i] + argv[i + 1:] + argv[i:i + 1]
    try:
        return run_cli(verb, *argv)
    except SystemExit as e:  # argparse refused the walk's command line
        pytest.fail(f"argparse refused `tflab {verb} {' '.join(argv)}` (exit {e.code}): give the options "
                    f"{verb} requires in WALK_EXTRA_ARGS")


def _one_error_line(verb: str, err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not PROGRESS.match(ln)]
    assert len(lines) == 1 and lines[0].startswith(f"tflab {verb}: error: "), err
    return lines[0]


def test_every_verb_has_a_parser_and_a_missing_module_fails_the_walks(monkeypatch):
    """The per-verb walks below cover every verb: none is dropped for a missing command module.

    Planted: a verb whose module does not exist (what deleting or renaming
    ``tflab/commands/export_cmd.py`` does) fails `_subparsers`, so each walk of it fails."""
    import tflab.cli

    assert set(_subparsers()) == set(VERBS)
    monkeypatch.setitem(tflab.cli.VERBS, "ghost", "ghost_cmd")
    with pytest.raises(pytest.fail.Exception, match=r"\{'ghost': 'tflab\.commands\.ghost_cmd'\}"):
        _subparsers()


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_output_option_refuses_an_unwritable_path(verb, run_cli, user_files, tmp_path, monkeypatch):
    """The probe really creates a file; os.access says yes to root on /proc and /sys."""
    p = _subparsers()[verb]
    options = _output_options(p)
    if not options:
        pytest.skip(f"{verb} has no output-path option (metavar OUT…/DIR or dest out/output/report)")
    monkeypatch.chdir(tmp_path)
    for option in options:
        for bad in UNWRITABLE:
            code, out, err = _run_walk(run_cli, *_argv(verb, p, user_files["exits"], "ok"), option, bad)
            line = _one_error_line(verb, err)
            assert code == 2 and out == "" and f"{option} {bad}" in line, (option, bad, line)
    assert os.listdir(tmp_path) == []  # nothing written, no parents or temp files


@pytest.mark.parametrize("kind", ["exits", "base"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_user_code_that_exits_or_raises_base_exception_is_one_line(verb, kind, run_cli, user_files,
                                                                   tmp_path, monkeypatch):
    """sys.exit(5)/BaseException in user code is exit 2, not tflab exiting 5."""
    p = _subparsers()[verb]
    if _user_positional(p) is None:
        pytest.skip(f"{verb} takes no user code (no FILE.py:… / SCRIPT.py / MODEL positional)")
    monkeypatch.chdir(tmp_path)
    code, out, err = _run_walk(run_cli, *_argv(verb, p, user_files[kind], kind))
    line = _one_error_line(verb, err)
    assert code == 2, (code, err)
    if kind == "exits":
        assert "sys.exit(5)" in line or "exited with status 5" in line, line
    else:
        assert "BaseException: base" in line, line
    assert os.listdir(tmp_path) == []  # nothing written (export: not even saved_models/)


def test_keyboard_interrupt_raised_by_user_code_is_exit_2(run_cli, user_files):
    """A KeyboardInterrupt the user's code raises with no Ctrl-C is the user's exception
    (README: BaseException -> 2), not "interrupted" (130, only for a signal that came)."""
    code, out, err = run_cli("inspect", f"{user_files['exits']}:interrupted", "--arg", "x=float32[2]")
    line = _one_error_line("inspect", err)
    assert code == 2 and "interrupted raised KeyboardInterrupt" in line and "no Ctrl-C came" in line, line


def test_sys_exit_in_a_subprocess_is_status_2_without_traceback(user_files):
    """The console script itself: rc 2 and exactly one stderr line (rc 5 and silence before #10)."""
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tflab", "inspect", f"{user_files['exits']}:exits",
                           "--arg", "x=float32[2]"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "tflab inspect: error: exits called sys.exit(5) while tracing; tflab runs it in its own process, "
        "so it must return or raise instead of exiting"]


def test_no_numeric_option_is_a_bare_int_or_float():
    """Every numeric option is range-checked by argparse (tflab._api.cliargs), in every verb."""
    bare = [(verb, a.option_strings[-1]) for verb, p in _subparsers().items() for a in p._actions
            if a.type in (int, float)]
    assert bare == []


def test_negative_seed_is_an_argparse_error(capsys, user_files):
    from tflab.cli import main

    # argparse refuses it before any TF work; main() returns its exit code, and the error is one line
    code = main(["compare", f"{user_files['exits']}:ok", "--arg", "x=float32[4]", "--seed", "-1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == ("tflab compare: error: argument --seed: must be an integer >= 0, got -1 "
                   "(see tflab compare --help)\n")


@pytest.mark.parametrize("func, op, fed", [
    ("bad_signature", "MatMul", "x: float32[1,3]"),  # random batches of sizes 1 and 4: the first fails
    ("not_finite", "CheckNumerics", "x: float32[1,4]"),  # log(x - 100) of N(0,1) data is NaN
], ids=["matmul", "assert_all_finite"])
def test_signature_that_fails_on_the_examples_is_one_line(func, op, fed, run_cli, user_files, tmp_path):
    """One line naming the signature, the op and the shapes fed; nothing left behind."""
    out_dir = tmp_path / "o"
    code, out, err = run_cli("export", f"{user_files['exits']}:{func}", "--out", str(out_dir),
                             "--quantize", "none")
    line = _one_error_line("export", err)
    assert code == 2 and "signature '" in line and f"in op {op}" in line and f"({fed})" in line, line
    assert os.listdir(tmp_path) == []


def test_unbuilt_subclassed_keras_model(run_cli, user_files, tmp_path):
    """Without examples, one line saying what to do; with them, built from the first batch."""
    code, out, err = run_cli("export", f"{user_files['exits']}:unbuilt", "--out", str(tmp_path / "o"))
    line = _one_error_line("export", err)
    assert code == 2 and "Sub was never built" in line and "--examples" in line and "call it once" in line
    assert os.listdir(tmp_path) == []

    from tflab.export import export_model

    np.savez(tmp_path / "ex.npz", x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    report = export_model(f"{user_files['exits']}:unbuilt", tmp_path / "built", quantize=["none"],
                          examples=str(tmp_path / "ex.npz"), isolate=False)
    assert report.saved_model.bit_exact  # the same FuncGraph reloaded: the bits agree
    assert report.saved_model.notes[0].startswith("Sub was never built: tflab built it")
    inputs = report.saved_model.signatures["serving_default"].inputs
    assert [(i.dtype, list(i.shape)) for i in inputs.values()] == [("float32", [None, 8])]


@pytest.mark.parametrize("out_args, leftover", [(["--out", "a/b/c"], "a"), ([], "saved_models")],
                         ids=["out-parents", "default-out"])
def test_failed_export_removes_the_parents_it_created(out_args, leftover, run_cli, user_files, tmp_path,
                                                      monkeypatch):
    """"2 bad input (nothing written)" includes the parent folders of --out."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("export", f"{user_files['exits']}:no_signature", *out_args, "--quantize", "none")
    line = _one_error_line("export", err)
    assert code == 2 and "no tf.function with an input_signature" in line
    assert not os.path.exists(leftover) and os.listdir(tmp_path) == []


def test_failed_export_keeps_parents_that_already_existed(run_cli, user_files, tmp_path):
    (tmp_path / "a").mkdir()
    code, _, _ = run_cli("export", f"{user_files['exits']}:no_signature", "--out", str(tmp_path / "a/b/c"))
    assert code == 2 and os.listdir(tmp_path) == ["a"] and os.listdir(tmp_path / "a") == []


def test_retrace_script_raising_base_exception(user_files, capsys):
    """At the API, the error line names the exception and the user's line."""
    from tflab.retrace import trace_script

    result = trace_script(user_files["base"])
    assert result.error.startswith(f"{user_files['base']} raised BaseException: base while running (at ")
    assert "_user.py:" in result.error


def test_random_inputs_that_cannot_fit_are_refused_before_allocating(run_cli, user_files, monkeypatch):
    """Compare holds 8 input-sized copies (2 + 3 modes × output and gradient); 5 with --no-grad;
    plus the ULP step's 13 for float32 (`tflab.process.memory.ulp_step_copies`)."""
    import tflab.process.memory

    monkeypatch.setattr(tflab.process.memory, "available_memory", lambda: (1 << 30, "test limit"))
    allocated = []
    import tflab._user.target

    real = tflab._user.target.materialize
    monkeypatch.setattr(tflab._user.target, "materialize", lambda *a, **k: allocated.append(a) or real(*a, **k))
    # 50e6 float32 = 0.19 GiB: 8 + 13 copies are 3.9 GiB > 1 GiB, 5 copies 0.93 GiB would fit.
    code, out, err = run_cli("compare", f"{user_files['exits']}:ok", "--arg", "x=float32[50000000]")
    line = _one_error_line("compare", err)
    assert code == 2 and out == "" and allocated == []
    assert "about 3.9 GiB (21 copies of 0.2 GiB" in line and "only 1.0 GiB is available (test limit)" in line
    from tflab.process.memory import check_fits

    check_fits(50_000_000 * 4, 5, "compare")  # fits: no error


def test_cgroup_limit_is_read(tmp_path):
    from tflab.process.memory import available_memory, cgroup_available

    (tmp_path / "memory.max").write_text("1073741824\n")
    (tmp_path / "memory.current").write_text("73741824\n")
    assert cgroup_available(str(tmp_path)) == 1_000_000_000
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroup_available(str(tmp_path)) is None  # no limit
    have, source = available_memory()
    assert have is not None and have > 0 and source != "unknown"  # Linux always has /proc/meminfo


def test_arg_grammar_messages():
    """Also seen: the bad dtype is named, -1 is refused (README documents None), long text is cut."""
    from tflab._user.target import parse_value

    with pytest.raises(UsageError, match=r"unknown dtype 'float33'; did you mean float32"):
        parse_value("float33[2]", "x")
    with pytest.raises(UsageError, match=r"bad dimension -1 .*None for an unknown dim"):
        parse_value("float32[-1]", "x")
    with pytest.raises(UsageError) as info:
        parse_value("1" * 5000 + "x", "n")
    assert len(str(info.value)) < 300 and "(5001 chars)" in str(info.value)
    assert parse_value("float32[None,8]", "x").shape.as_list() == [None, 8]


def test_tour_model_that_is_not_a_zip(run_cli, tmp_path):
    fake = tmp_path / "fake.keras"
    fake.write_text("not a zip")
    code, out, err = run_cli("tour", "--model", str(fake), "--out", str(tmp_path / "t"))
    line = _one_error_line("tour", err)
    assert code == 2 and "is not a valid .keras file" in line and "File not found" not in line
    assert sorted(os.listdir(tmp_path)) == ["fake.keras"]


def test_examples_that_is_a_folder(run_cli, user_files, tmp_path):
    (tmp_path / "ex").mkdir()
    code, out, err = run_cli("export", f"{user_files['exits']}:ok", "--examples", str(tmp_path / "ex"),
                             "--out", str(tmp_path / "o"))
    line = _one_error_line("export", err)
    assert code == 2 and "is a folder" in line and "does not exist" not in line


# ---------------------------------------------------------------- hostile-tester regressions


# ---------------------------------------------------------------- Python API misuse


def _module_with_signature():
    import tensorflow as tf

    class Scale(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * 2.0}

    return Scale()


# ---------------------------------------------------------------- signals and partial output


def test_a_truncated_tflite_says_what_failed_and_how_big_the_file_is(run_cli, tmp_path):
    """A .tflite cut after its identifier said only '(error)'."""
    trunc = tmp_path / "trunc.tflite"
    trunc.write_bytes(b"\x1c\x00\x00\x00TFL3\x14\x00\x20\x00\x1c\x00\x18\x00")
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"\x08\x01")  # a folder that looks like a SavedModel
    code, out, err = run_cli("check-tflite", str(trunc), str(tmp_path / "sm"))
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "reading its tables failed (struct.error: " in err and "a file of 16 bytes (cut short?)" in err, err
