"""Bad input (issue #10): every verb keeps the contract "one line, exit 2, no traceback, nothing half-written".

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
    """Item 1: the probe really creates a file; os.access says yes to root on /proc and /sys."""
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
    """Item 3 (and 7 for retrace): sys.exit(5)/BaseException in user code is exit 2, not tflab exiting 5."""
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
    """Issue 33 B4: a KeyboardInterrupt the user's code raises with no Ctrl-C is the user's exception
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
    """Item 2: every numeric option is range-checked by argparse (tflab._cliargs), in every verb."""
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
    """Item 4: one line naming the signature, the op and the shapes fed; nothing left behind."""
    out_dir = tmp_path / "o"
    code, out, err = run_cli("export", f"{user_files['exits']}:{func}", "--out", str(out_dir),
                             "--quantize", "none")
    line = _one_error_line("export", err)
    assert code == 2 and "signature '" in line and f"in op {op}" in line and f"({fed})" in line, line
    assert os.listdir(tmp_path) == []


def test_unbuilt_subclassed_keras_model(run_cli, user_files, tmp_path):
    """Item 5: without examples, one line saying what to do; with them, built from the first batch."""
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
    """Item 6: "2 bad input (nothing written)" includes the parent folders of --out."""
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
    """Item 7, at the API: the error line names the exception and the user's line."""
    from tflab.retrace import trace_script

    result = trace_script(user_files["base"])
    assert result.error.startswith(f"{user_files['base']} raised BaseException: base while running (at ")
    assert "_user.py:" in result.error


def test_random_inputs_that_cannot_fit_are_refused_before_allocating(run_cli, user_files, monkeypatch):
    """Item 8: compare holds 8 input-sized copies (2 + 3 modes × output and gradient); 5 with --no-grad;
    plus the ULP step's 13 for float32 (issue 33 B16, `tflab.process.memory.ulp_step_copies`)."""
    import tflab.process.memory

    monkeypatch.setattr(tflab.process.memory, "available_memory", lambda: (1 << 30, "test limit"))
    allocated = []
    import tflab._target

    real = tflab._target.materialize
    monkeypatch.setattr(tflab._target, "materialize", lambda *a, **k: allocated.append(a) or real(*a, **k))
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
    from tflab._target import parse_value

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


def test_output_path_writes_atomically_and_probes(tmp_path):
    from tflab._paths import output_path

    target = output_path(tmp_path / "g.dot", "--dot")
    target.write("digraph {}")
    assert (tmp_path / "g.dot").read_text() == "digraph {}" and os.listdir(tmp_path) == ["g.dot"]
    with pytest.raises(UsageError, match="exists; pass --force"):
        output_path(tmp_path / "g.dot", "--hlo", overwrite=False)
    folder = output_path(tmp_path / "x" / "y" / "z", "--out", folder=True)
    assert os.listdir(tmp_path) == ["g.dot"]  # parents are created when writing starts, not by the probe
    tmp = folder.temp_dir()
    folder.discard(tmp)
    assert os.listdir(tmp_path) == ["g.dot"]


# ---------------------------------------------------------------- hostile-tester regressions


def test_output_to_a_device_or_fifo_is_written_in_place_never_replaced(tmp_path):
    """``--dot /dev/null`` as root renamed a plain file over /dev/null (os.replace); now opened in place."""
    import stat
    import threading

    from tflab._paths import output_path

    assert output_path("/dev/null", "--dot").in_place  # checked without writing: a failure must not harm /dev
    fifo = tmp_path / "pipe.dot"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    output_path(fifo, "--dot").write("digraph {}")
    reader.join(10)
    assert got == [b"digraph {}"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe.dot"]  # no temp file beside it
    with pytest.raises(UsageError, match=r"is a FIFO, not a folder"):
        output_path(fifo, "--out", folder=True)


def test_output_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path):
    from tflab._paths import output_path

    (tmp_path / "link.dot").symlink_to(tmp_path / "real.dot")  # dangling: created, as the shell's > does
    output_path(tmp_path / "link.dot", "--dot").write("a")
    assert (tmp_path / "link.dot").is_symlink() and (tmp_path / "real.dot").read_text() == "a"
    (tmp_path / "dead.dot").symlink_to(tmp_path / "no" / "such" / "x.dot")
    with pytest.raises(UsageError, match=r"folder .*no/such does not exist"):
        output_path(tmp_path / "dead.dot", "--dot")


@pytest.mark.parametrize("verb", list(VERBS))
def test_odd_output_path_text_is_one_line(verb, run_cli, user_files, tmp_path, monkeypatch):
    """os.stat raised OSError(ENAMETOOLONG) / ValueError(embedded null byte) out of main() (--dot, export --out)."""
    p = _subparsers()[verb]
    options = _output_options(p)
    if not options:
        pytest.skip(f"{verb} has no output-path option")
    monkeypatch.chdir(tmp_path)
    for option in options:
        for bad, reason in [("x" * 300 + ".dot", "File name too long"), ("a\0b.dot", "NUL byte")]:
            code, out, err = _run_walk(run_cli, *_argv(verb, p, user_files["exits"], "ok"), option, bad)
            line = _one_error_line(verb, err)
            assert code == 2 and reason in line and option in line and len(line) < 400, line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_empty_option_value_is_refused_by_argparse(verb, run_cli, user_files, tmp_path, monkeypatch):
    """``--dot ""`` was silently ignored (no file written, exit 0); ``export --out ""`` wrote saved_models/."""
    p = _subparsers()[verb]
    options = [a.option_strings[-1] for a in p._actions
               if a.option_strings and a.nargs != 0 and a.type in (None, str) and a.choices is None]
    if not options:
        pytest.skip(f"{verb} has no string-valued option")
    monkeypatch.chdir(tmp_path)
    for option in options:
        code, out, err = _run_walk(run_cli, *_argv(verb, p, user_files["exits"], "ok"), option, "")
        line = _one_error_line(verb, err)
        assert code == 2 and out == "" and f"argument {option}: empty value" in line, line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_unknown_option_names_the_verb(verb, run_cli, user_files, tmp_path, monkeypatch):
    """argparse reported ``tflab: error: unrecognized arguments`` from the top parser, not ``tflab VERB:``."""
    p = _subparsers()[verb]
    monkeypatch.chdir(tmp_path)
    argv = _argv(verb, p, user_files["exits"], "ok")
    if _user_positional(p) is not None and str(_user_positional(p).metavar) == "SCRIPT.py":
        argv.insert(1, "--bogus-option")  # after SCRIPT.py everything is the script's own argv
    else:
        argv.append("--bogus-option")
    code, out, err = run_cli(*argv)
    line = _one_error_line(verb, err)
    assert code == 2 and "unrecognized arguments: --bogus-option" in line and f"tflab {verb} --help" in line
    assert os.listdir(tmp_path) == []


def test_last_resort_names_the_target_not_user_code(run_cli, user_files):
    """``diagnose`` calls user code outside user_code: main()'s last resort said "user code … the verb ran"."""
    code, out, err = run_cli("diagnose", f"{user_files['exits']}:exits", "--arg", "x=float32[2]")
    line = _one_error_line("diagnose", err)
    assert code == 2 and f"{user_files['exits']}:exits called sys.exit(5) while tflab diagnose ran" in line


@pytest.mark.parametrize("dims, message", [
    ("²", r"bad dimension '²'"),  # str.isdigit() said yes, int() raised ValueError out of main()
    ("２", r"bad dimension '２'"),  # fullwidth 2: was silently read as 2
    ("99999999999999999999", r"larger than TF's int64 dims allow"),  # was "ok raised while tracing"
], ids=["superscript", "fullwidth", "over-int64"])
def test_dims_are_ascii_integers_that_fit_int64(dims, message, run_cli, user_files):
    code, out, err = run_cli("inspect", f"{user_files['exits']}:ok", "--arg", f"x=float32[{dims}]")
    line = _one_error_line("inspect", err)
    assert code == 2 and re.search(message, line) and "--arg x=" in line and "raised" not in line, line


def test_a_huge_exception_message_is_cut_to_one_short_line(run_cli, tmp_path):
    (tmp_path / "long_msg.py").write_text("def f(x):\n    raise ValueError('z' * 5000)\n")
    code, out, err = run_cli("inspect", f"{tmp_path / 'long_msg.py'}:f", "--arg", "x=float32[2]")
    line = _one_error_line("inspect", err)
    assert code == 2 and "ValueError: zzz" in line and "(5012 chars)" in line and len(line) < 700, len(line)


def test_retrace_script_that_forks_reports_once(tmp_path):
    """The fork()ed child returned out of runpy and went on as tflab: a second report (and exit status)."""
    script = tmp_path / "forks.py"
    script.write_text("import os\npid = os.fork()\nif pid:\n    os.waitpid(pid, 0)\nelse:\n"
                      "    print('child done')\n")
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tflab", "retrace", "--json", str(script)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["script"] == str(script)  # one JSON document: the child printed none
    assert proc.stderr.count("child done") == 1  # the script's prints go to stderr under --json


def test_user_code_that_changes_folder_does_not_move_the_output(run_cli, tmp_path, monkeypatch):
    """A function that os.chdir()s while traced made the relative --dot land in that folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cd.py").write_text(f"import os\ndef f(x):\n    os.chdir({str(elsewhere)!r})\n    return x\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("inspect", "cd.py:f", "--arg", "x=float32[2]", "--dot", "g.dot")
    assert code == 0, err
    assert os.getcwd() == str(tmp_path) and (tmp_path / "g.dot").is_file() and os.listdir(elsewhere) == []


# ---------------------------------------------------------------- Python API misuse


def _module_with_signature():
    import tensorflow as tf

    class Scale(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * 2.0}

    return Scale()


def test_save_and_reload_probes_its_path_and_removes_the_parents_it_made(tmp_path):
    """'/proc/x' was TF's NotFoundError after tracing; a failed check left the parents of a/b/c behind."""
    from tflab import save_and_reload

    with pytest.raises(UsageError, match=r"path /proc/x: cannot create a folder in /proc"):
        save_and_reload(_module_with_signature(), "/proc/x", None)
    with pytest.raises(UsageError, match=r"has shape \[2, 5\]"):
        save_and_reload(_module_with_signature(), tmp_path / "a" / "b" / "c", {"x": np.ones([2, 5], np.float32)})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("where, message", [("missing", "does not exist"), ("file", "is a file"),
                                            ("empty", "without saved_model.pb"), (123, "got int")])
def test_tflite_roundtrip_on_what_is_not_a_saved_model(where, message, tmp_path):
    """Was OSError('SavedModel file does not exist at: …/{saved_model.pbtxt|saved_model.pb}') from the converter."""
    from tflab import tflite_roundtrip

    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    path = where if isinstance(where, int) else tmp_path / where
    with pytest.raises(UsageError, match=message):
        tflite_roundtrip(path, {"x": np.ones([1, 4], np.float32)})


def test_api_argument_misuse_is_one_clear_error(tmp_path):
    import tensorflow as tf

    from tflab import compare_modes, export_model

    with pytest.raises(UsageError, match=r"seed must be an int in \[0, 2\*\*63\), got -1"):  # numpy: "expected non-negative integer"
        compare_modes(lambda x: x * 2.0, tf.zeros([2]), seed=-1)
    with pytest.raises(UsageError, match=r"unknown quantization 'bogus'"):  # a str was read letter by letter ('n')
        export_model(_module_with_signature(), tmp_path / "o", quantize="none,bogus", isolate=False)
    with pytest.raises(UsageError, match=r"out must be a folder path .*got NoneType"):  # was os.fspath's TypeError
        export_model(_module_with_signature(), None, isolate=False)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- signals and partial output


def test_sigterm_in_any_verb_exits_143_with_one_line_and_nothing_written(tmp_path):
    """SIGTERM's default action killed tflab at once (rc -15, no line, no cleanup) in every verb but export."""
    import signal
    import time

    marker = tmp_path / "started"
    (tmp_path / "slow.py").write_text(
        "import pathlib, time\n"
        f"def f(x):\n    pathlib.Path({str(marker)!r}).write_text('x')\n    time.sleep(120)\n    return x\n")
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tflab", "inspect", "slow.py:f", "--arg", "x=float32[2]",
                             "--dot", "g.dot"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and out == "" and err == "tflab inspect: terminated\n", (proc.returncode, err)
    assert set(os.listdir(tmp_path)) <= {"__pycache__", "slow.py", "started"}  # no g.dot, no temp file


def test_interrupted_tour_leaves_nothing_it_wrote(small_keras_file, tmp_path, monkeypatch):
    """Ctrl-C after the trace section left --out/inference.dot (and the folders) behind, rc 130."""
    import tflab._tour.s01_trace as s01
    from tflab.tour import run_tour

    real = s01.run

    def run_then_interrupt(ctx):
        real(ctx)
        assert (ctx.out_dir / "inference.dot").is_file()
        raise KeyboardInterrupt

    monkeypatch.setattr(s01, "run", run_then_interrupt)
    from tflab._paths import MARKER, write_marker

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_text("a previous tour's")
    write_marker(tmp_path / "kept")  # a previous tour's folder: --force may replace it (issue 33 B21)
    for out in (tmp_path / "new" / "t", tmp_path / "kept"):
        with pytest.raises(KeyboardInterrupt):
            # force: "kept" is not empty (a tour refuses it without --force, issue 21 B3)
            run_tour(model_path=str(small_keras_file), out_dir=str(out), only=["s01_trace"], quiet=True,
                     force=True)
    assert sorted(os.listdir(tmp_path)) == ["kept"] and sorted(os.listdir(tmp_path / "kept")) == [MARKER,
                                                                                                  "mine.txt"]


def test_sigterm_during_a_retraced_script_is_not_the_scripts_exit(tmp_path):
    """Terminated is a SystemExit: trace_script reported it as "exited with status 143" and went on (rc 2)."""
    from tflab.errors import Terminated
    from tflab.retrace import trace_script

    script = tmp_path / "term.py"
    script.write_text("from tflab.errors import Terminated\nraise Terminated(143)\n")  # what the handler raises
    with pytest.raises(Terminated):
        trace_script(str(script))


def test_sigterm_while_distribute_waits_for_workers_is_terminated_not_interrupted():
    """distribute turned SIGTERM into KeyboardInterrupt: `tflab distribute` said "interrupted", exit 130."""
    import signal

    from tflab.process.group import ChildGroup  # distribute's workers wait in one (issue 23: one SIGTERM handler)
    from tflab.errors import Terminated

    with pytest.raises(Terminated) as info, ChildGroup():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs at the next bytecode boundary
        for _ in range(1000):
            pass
    assert info.value.code == 143


def test_precision_refuses_random_inputs_that_cannot_fit(run_cli, user_files, monkeypatch):
    """precision allocated without the memory check compare has: past the limit the OOM killer ends it (137)."""
    import tflab.process.memory
    import tflab._target

    monkeypatch.setattr(tflab.process.memory, "available_memory", lambda: (1 << 30, "test limit"))
    allocated = []
    real = tflab._target.materialize
    monkeypatch.setattr(tflab._target, "materialize", lambda *a, **k: allocated.append(a) or real(*a, **k))
    # 50e6 float32 = 0.19 GiB; 3 policies: 2 + 2×3 = 8 copies = 1.5 GiB > 1 GiB.
    code, out, err = run_cli("precision", f"{user_files['exits']}:ok", "--arg", "x=float32[50000000]")
    line = _one_error_line("precision", err)
    assert code == 2 and out == "" and allocated == []
    assert "about 1.5 GiB (8 copies of 0.2 GiB" in line and "fewer --policies" in line, line


def test_stdout_closed_by_the_reader_is_quiet_exit_141(tmp_path):
    """`tflab retrace big.py | head -c 10`: BrokenPipeError traceback, exit 1; now quiet, 141 (128 + SIGPIPE)."""
    script = tmp_path / "big.py"
    script.write_text("print('x' * 1_000_000)\n")  # more than a pipe buffer (64 KiB)
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tflab", "retrace", str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # the reader goes away, as head does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141 and err == "", err[-500:]


@pytest.mark.parametrize("verb", ["inspect", "autograph", "diagnose"])
def test_json_stdout_is_only_the_report_when_user_code_prints(verb, run_cli, tmp_path):
    """The user's print() while traced came before the JSON document: stdout was not valid JSON."""
    (tmp_path / "printer.py").write_text("def f(x):\n    print('hello from user code')\n    return x * 2.0\n")
    code, out, err = run_cli(verb, f"{tmp_path / 'printer.py'}:f", "--arg", "x=float32[2]", "--json")
    assert code == 0, err
    json.loads(out)  # the whole of stdout is the report (autograph's quotes the source: not the print)
    assert "hello from user code\n" in err and not out.startswith("hello")


def test_examples_that_is_a_device_and_tracing_a_class(run_cli, user_files, tmp_path):
    """--examples /dev/null said "does not exist"; trace_and_inspect(SomeClass, x) failed inside the trace."""
    code, out, err = run_cli("export", f"{user_files['exits']}:ok", "--examples", "/dev/null",
                             "--out", str(tmp_path / "o"))
    line = _one_error_line("export", err)
    assert code == 2 and "is a character device, not a regular file" in line and os.listdir(tmp_path) == []

    import keras

    from tflab import trace_and_inspect

    with pytest.raises(UsageError, match=r"got the class Dense; pass an instance's method"):
        trace_and_inspect(keras.layers.Dense, np.ones([2, 3], np.float32))


# The "Exception ignored in __del__" that pytest reports is the swallowed Terminated this test makes.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_sigterm_lost_in_a_finalizer_is_still_seen_before_committing():
    """Python runs a signal handler at the next bytecode of the main thread; inside a ``__del__``
    its exception is printed as "Exception ignored" and dropped (seen once as an export that
    exited 0 after SIGTERM). The handler also records the signal, so the commit and the CLI's
    return path still stop with `Terminated` (143)."""
    import gc
    import signal

    from tflab import errors

    previous = errors.install_sigterm_handler()
    try:
        class Finalizer:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(100):  # bytecodes: the handler runs here, its raise is swallowed
                    pass

        Finalizer()
        gc.collect()
        with pytest.raises(errors.Terminated) as info:
            errors.raise_if_terminated()
        assert info.value.code == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
        errors._TERM_RECEIVED = False
    errors.raise_if_terminated()  # nothing pending once cleared: no raise
