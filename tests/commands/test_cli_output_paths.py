"""Every verb's output paths (atomic, devices and FIFOs, symlinks, odd names) and option errors: one line, exit 2.

Split from `test_cli_bad_input.py` (no test file over 600 lines); its helpers and fixtures are imported from there.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli_bad_input import (  # noqa: E402,F401  (helpers, fixtures and imports of the first part)
    json, os, re, subprocess, sys, np, pytest, VERBS, UsageError, user_files, _subparsers, _output_options,
    _user_positional, _argv, _run_walk, _one_error_line, _module_with_signature,)


def test_output_path_writes_atomically_and_probes(tmp_path):
    from tflab._io.paths import output_path

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


def test_output_to_a_device_or_fifo_is_written_in_place_never_replaced(tmp_path):
    """``--dot /dev/null`` as root renamed a plain file over /dev/null (os.replace); now opened in place."""
    import stat
    import threading

    from tflab._io.paths import output_path

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
    from tflab._io.paths import output_path

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
    from tflab._io.paths import MARKER, write_marker

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_text("a previous tour's")
    write_marker(tmp_path / "kept")  # a previous tour's folder: --force may replace it
    for out in (tmp_path / "new" / "t", tmp_path / "kept"):
        with pytest.raises(KeyboardInterrupt):
            # force: "kept" is not empty (a tour refuses it without --force)
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

    from tflab.process.group import ChildGroup  # distribute's workers wait in one (one SIGTERM handler)
    from tflab.errors import Terminated

    with pytest.raises(Terminated) as info, ChildGroup():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs at the next bytecode boundary
        for _ in range(1000):
            pass
    assert info.value.code == 143


def test_precision_refuses_random_inputs_that_cannot_fit(run_cli, user_files, monkeypatch):
    """precision allocated without the memory check compare has: past the limit the OOM killer ends it (137)."""
    import tflab.process.memory
    import tflab._user.target

    monkeypatch.setattr(tflab.process.memory, "available_memory", lambda: (1 << 30, "test limit"))
    allocated = []
    real = tflab._user.target.materialize
    monkeypatch.setattr(tflab._user.target, "materialize", lambda *a, **k: allocated.append(a) or real(*a, **k))
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
