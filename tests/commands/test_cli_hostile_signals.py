"""Hostile runs of the CLI, second part: signals while TF loads, os._exit and closed stdout in user code.

Split from `test_cli_hostile.py` (no test file over 600 lines); its helpers and fixtures are imported from there.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli_hostile import (  # noqa: E402,F401  (helpers, fixtures and imports of the first part)
    json, os, signal, subprocess, sys, time, np, pytest, UsageError, REPO, work, tflab, one_line, _children,
    _tf_files_mapped, tf_files_of_a_full_import, DECLARED, RETRACE_SCRIPT, _gone,)


def test_the_tf_import_probe_tells_not_started_from_done(tf_files_of_a_full_import):
    """The probe b9 relies on can fail: a process without TF maps none; a full import maps many."""
    assert _tf_files_mapped(os.getpid()) > 0  # this pytest process imported TF (conftest)
    plain = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        time.sleep(0.2)
        assert _tf_files_mapped(plain.pid) == 0
    finally:
        plain.kill()
        plain.wait()
    assert tf_files_of_a_full_import >= 3  # _pywrap_tensorflow_internal, libtensorflow_{framework,cc}, …


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "terminated")], ids=["SIGINT", "SIGTERM"])
def test_signal_while_tf_loads_is_one_line(work, sig, code, word, tf_files_of_a_full_import):
    """Ctrl-C during the seconds-long TF import printed a KeyboardInterrupt traceback.

    The signal is sent once the verb's child has mapped its first TensorFlow library and before
    it has mapped all that a full import maps (`tf_files_of_a_full_import`): the import was
    under way when the signal came, whatever this machine's speed or cache."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, "-m", "tflab", "inspect", "h.py:f", "--arg", "x=float32[4]"],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)  # no terminal: the supervisor forwards signals
    try:
        deadline = time.monotonic() + 60
        mapped = 0
        while proc.poll() is None and time.monotonic() < deadline:
            mapped = max([_tf_files_mapped(c) for c in _children(proc.pid)] or [0])
            if mapped:
                break
            time.sleep(0.002)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 0 < mapped < tf_files_of_a_full_import, (mapped, tf_files_of_a_full_import)  # TF was loading
    assert proc.returncode == code and err == f"tflab inspect: {word}\n" and out == "", (proc.returncode, err)


def test_os_exit_in_user_code_is_named(work):
    code, out, err = tflab(work, "inspect", "h.py:oexit", "--arg", "x=float32[4]")
    assert code == 2 and "os._exit(9)" in one_line("inspect", err), (code, err)


def test_retrace_script_that_os_exits_0_is_not_success(work):
    code, out, err = tflab(work, "retrace", "s_oexit.py")
    assert code == 2 and "os._exit(0)" in one_line("retrace", err), (code, err)


@pytest.mark.parametrize("func", ["closestdout", "closefd1"])
def test_user_code_closing_stdout_does_not_lose_the_report(work, func):
    code, out, err = tflab(work, "inspect", f"h.py:{func}", "--arg", "x=float32[4]")
    assert code == 0 and out.startswith(f"FuncGraph of {func}:") and "Traceback" not in err, (code, err)


def test_no_exit_0_without_the_report(work):
    """User code replacing sys.stdout swallowed the report; exit 0 said all was well."""
    code, out, err = tflab(work, "inspect", "h.py:hijack", "--arg", "x=float32[4]")
    assert code == 2 and out == "" and "no report was written" in one_line("inspect", err), (code, err)


def test_closed_stdout_is_141_not_a_silent_0(work):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "tflab", "env"], cwd=work, env=env, stderr=subprocess.PIPE,
                       preexec_fn=lambda: os.close(1), timeout=120)
    assert p.returncode == 141 and p.stderr == b"", p.stderr


def test_json_is_valid_when_user_code_writes_to_the_real_stdout(work):
    code, out, err = tflab(work, "inspect", "--json", "h.py:printer", "--arg", "x=float32[4]")
    assert code == 0, err
    assert json.loads(out)["function"] == "printer"  # old: stdout began with "FD WRITE"
    assert "FD WRITE" in err and "sys.__stdout__" in err  # the user's writes are not lost: stderr


@pytest.mark.parametrize("func, words", [("segfault", "segmentation fault"), ("killed", "SIGKILL")])
def test_crash_of_the_child_is_one_line_with_the_crash_code(work, func, words):
    """A segfault or SIGKILL ended tflab with -11/-9 and no line; now one line and exit 70 (README)."""
    from tflab.process.supervisor import CRASH_EXIT

    code, out, err = tflab(work, "inspect", f"h.py:{func}", "--arg", "x=float32[4]")
    line = one_line("inspect", err)
    assert code == CRASH_EXIT == 70 and words in line, err
    if func == "killed":  # its own SIGKILL: the limit in force is named, or, with none, not blamed on memory
        from tflab.process.memory import limit_text

        assert ("not for memory" if limit_text().startswith("no cgroup") else "memory limit in force") in line


def test_sigterm_after_start_up_is_forwarded_and_cleaned_up(work, tmp_path):
    mark = tmp_path / "started"
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", MARK=str(mark))
    proc = subprocess.Popen([sys.executable, "-m", "tflab", "inspect", "h.py:slow", "--arg", "x=float32[2]",
                             "--dot", str(tmp_path / "g.dot")], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        child = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and err == "tflab inspect: terminated\n", (proc.returncode, err)
    assert sorted(os.listdir(tmp_path)) == ["started"]  # no g.dot, no temp file
    assert child and not any(os.path.exists(f"/proc/{c}") for c in child)  # the child is gone


def test_tflite_roundtrip_on_a_corrupt_saved_model(tmp_path):
    import tflab

    (tmp_path / "corrupt_sm").mkdir()
    (tmp_path / "corrupt_sm" / "saved_model.pb").write_bytes(b"\x08\xff\xff garbage not a proto" * 3)
    with pytest.raises(UsageError, match="not a readable SavedModel"):
        tflab.tflite_roundtrip(tmp_path / "corrupt_sm", {"x": np.ones((2, 4), np.float32)})


@pytest.mark.parametrize("kwargs, words", [
    ({"quantize": 5}, "quantize must be a comma string or a list"),
    ({"quantize": ["none"], "progress": "x"}, "progress must be a callable"),
    ({"quantize": ""}, "names nothing"),          # an "ok" export with no variant
    ({"quantize": []}, "names nothing"),
], ids=["quantize-int", "progress-str", "quantize-empty-str", "quantize-empty-list"])
def test_export_model_arguments(tmp_path, work, kwargs, words):
    import tflab

    with pytest.raises(UsageError, match=words):
        tflab.export_model(f"{work}/h.py:tiny", tmp_path / "x", **kwargs)
    assert not (tmp_path / "x").exists()


def test_retrace_probe_unknown_tf_function_keyword():
    import tflab

    with pytest.raises(UsageError, match="bogus_kw"):
        tflab.RetraceProbe(lambda x: x, bogus_kw=3)


def test_to_text_max_ops_is_checked():
    import tensorflow as tf

    import tflab

    report = tflab.trace_and_inspect(lambda x: x * 2.0, tf.TensorSpec([4], tf.float32))
    for bad in ("x", -1, 1.5, True):
        with pytest.raises(UsageError, match="max_ops must be an int >= 0"):
            report.to_text(max_ops=bad)
    assert len(report.to_text(max_ops=None)) > len(report.to_text(max_ops=0))  # both still work


def test_save_and_reload_with_zero_rows_is_refused(tmp_path):
    import tensorflow as tf

    import tflab

    class Tiny(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * 2.0}

    with pytest.raises(UsageError, match="0 rows"):
        tflab.save_and_reload(Tiny(), tmp_path / "b07", {"x": np.ones((0, 4), np.float32)})
    assert not (tmp_path / "b07").exists()


def test_speed_ratio_of_an_unknown_mode():
    import tensorflow as tf

    import tflab

    r = tflab.compare_modes(lambda x: x * 2.0, tf.TensorSpec([4], tf.float32), repeats=1, gradients=False,
                            modes=("eager", "graph"))
    assert r.speed_ratio("graph", "eager") > 0  # a real ratio
    assert r.speed_ratio("xla", "graph") is None  # known, did not run: None as documented
    for bad in ("bogus", "XLA"):
        with pytest.raises(UsageError, match="must be one of"):
            r.speed_ratio(bad, "graph")
    with pytest.raises(UsageError, match="baseline must be one of"):
        r.speed_ratio("graph", "Eager")


def test_parsing_imports_no_tensorflow():
    """`tflab --help` took 5-6 s because main() imported TF first; verb modules must not import it.

    numpy too: it is most of what is left (about 0.1 s of a 0.2 s `--help` on an idle machine).
    """
    code = ("import sys; from tflab.cli import build_parser, _parse; p, _ = build_parser();"
            "_parse(p, ['env', '--json']); print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras', 'tf_keras', 'numpy')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout[:300], p.stderr[-500:])


def test_every_verb_writes_only_what_its_output_options_declare(run_cli, work, tmp_path, monkeypatch,
                                                                small_keras_file):
    """ the class of bug: a verb writing through a path it did not probe. Walks `tflab.cli.VERBS`."""
    import tflab.tour
    from tflab.cli import VERBS

    from test_cli_bad_input import _output_options, _subparsers

    subs = _subparsers()
    with_outputs = {v for v in VERBS if _output_options(subs[v])}  # _subparsers fails on a missing verb
    assert with_outputs <= set(DECLARED), f"declare what {sorted(with_outputs - set(DECLARED))} write"
    monkeypatch.setattr(tflab.tour, "SECTIONS", [s for s in tflab.tour.SECTIONS if s[0] == "s01_trace"])
    positional = {"inspect": [f"{work}/h.py:f", "--arg", "x=float32[4]"],
                  "compare": [f"{work}/h.py:f", "--arg", "x=float32[4]"],
                  "export": [f"{work}/h.py:tiny"], "tour": ["--model", str(small_keras_file)],
                  "lower": [f"{work}/h.py:f", "--arg", "x=float32[4]"]}
    (work / "r.py").write_text(RETRACE_SCRIPT)
    # check-tflite reads what export wrote, so export runs first.
    for verb in sorted(with_outputs, key=lambda v: (v != "export", v)):
        folder = tmp_path / verb
        folder.mkdir()
        monkeypatch.chdir(folder)
        opts, declared = DECLARED[verb]
        if verb == "retrace":  # options before SCRIPT.py (the script's own arguments follow it)
            code, out, err = run_cli(verb, *opts, f"{work}/r.py")
        elif verb == "check-tflite":
            e = tmp_path / "export" / "e"
            model = next(e.rglob("*.tflite"))
            sm = next(p.parent for p in e.rglob("saved_model.pb"))
            code, out, err = run_cli(verb, str(model), str(sm), *opts)
        else:
            code, out, err = run_cli(verb, *positional[verb], *opts)
        assert code == 0, (verb, err[-800:])
        written = {str(p.relative_to(folder)) + ("/" if p.is_dir() else "") for p in folder.rglob("*")}
        top = {w for w in written if w.count("/") == 0 or (w.count("/") == 1 and w.endswith("/"))}
        assert top == set(declared), (verb, sorted(written))  # nothing else, no temp file left
        for d in declared:
            assert (folder / d).exists()


def test_inspect_dot_keeps_an_existing_file_without_force(run_cli, work, tmp_path):
    """`inspect --dot` follows the rule of every output path: an existing file is kept unless --force."""
    target = tmp_path / "exist.dot"
    target.write_text("existing")
    args = ("inspect", f"{work}/h.py:f", "--arg", "x=float32[4]", "--dot", str(target))
    code, out, err = run_cli(*args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "exists; pass --force" in lines[0], err
    assert target.read_text() == "existing"
    code, out, err = run_cli(*args, "--force")
    assert code == 0, err
    assert target.read_text().startswith("digraph")


def test_compare_modes_refuses_a_repeat_count_that_cannot_finish(run_cli, work):
    import tensorflow as tf

    import tflab
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match=r"repeats must be at most 100000.*got 10{30}"):
        tflab.compare_modes(lambda x: x * 2.0, tf.ones([2, 4]), repeats=10 ** 30)
    code, out, err = run_cli("compare", f"{work}/h.py:f", "--arg", "x=float32[4]", "--repeats", "10" * 12)
    assert code == 2 and "--repeats" in err and len(err.strip().splitlines()) == 1, err


def test_compare_precisions_refuses_a_loss_scale_past_float_range():
    import tensorflow as tf

    import tflab
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match=r"^loss_scale must be None, a positive number or 'dynamic'"):
        tflab.compare_precisions(lambda x: x * 2.0, tf.ones([2, 4]), loss_scale=10 ** 400)


def test_check_tflite_node_data_keeps_an_existing_file_unless_force(tmp_path):
    import tflab
    """`check-tflite --node-data` went through output_path's old default (overwrite): now --force decides."""
    import argparse

    from tflab._io.paths import output_path

    old = tmp_path / "nodes.json"
    old.write_text("old")
    with pytest.raises(tflab.UsageError, match="exists; pass --force"):
        output_path(old, "--node-data")
    output_path(old, "--node-data", overwrite=True).write("new")
    assert old.read_text() == "new"
    from tflab.commands import check_tflite_cmd

    p = argparse.ArgumentParser()
    check_tflite_cmd.add_arguments(p)
    assert p.parse_args(["m.tflite", "sm", "--node-data", "x.json", "--force"]).force is True


def test_python_api_refuses_odd_arguments_with_one_usage_error(tmp_path):
    import tensorflow as tf

    import tflab
    from tflab.litert.check import check_tflite
    from tflab.modes import compare_modes
    from tflab.retrace.log import trace_script

    with pytest.raises(tflab.UsageError, match="path of a .py file, got NoneType"):
        trace_script(None)
    with pytest.raises(tflab.UsageError, match="flatbuffer's bytes"):
        check_tflite("model.tflite", str(tmp_path), {"x": np.ones((1, 2), np.float32)})
    with pytest.raises(tflab.UsageError, match="not a"):
        check_tflite(b"", str(tmp_path), {"x": np.ones((1, 2), np.float32)})
    with pytest.raises(tflab.UsageError, match="not a readable TFLite flatbuffer"):
        check_tflite(b"\0" * 4 + b"TFL3" + b"\xff" * 200, str(tmp_path), {"x": np.ones((1, 2), np.float32)})
    with pytest.raises(tflab.UsageError, match="unknown quantization 'bogus'"):
        check_tflite(b"\0" * 4 + b"TFL3", str(tmp_path), {}, "bogus")
    with pytest.raises(tflab.UsageError, match="hlo='bogus'"):
        compare_modes(lambda x: x * 2.0, tf.TensorSpec([2]), hlo="bogus")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_converter_worker_ends_itself_when_its_parent_is_killed(tmp_path):
    """Converter workers run in their own session (a group kill misses them); SIGKILL of
    the export or tour lane that started one must not leave it converting on."""
    import signal
    import subprocess
    import sys
    import time

    examples = tmp_path / "examples.npz"
    np.savez(examples, x=np.ones((1, 2), np.float32))
    import tensorflow as tf

    m = tf.Module()
    m.v = tf.Variable(tf.ones([2]))
    m.f = tf.function(lambda x: x * m.v, input_signature=[tf.TensorSpec([1, 2])])
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures=m.f)
    # The worker blocks reading the variables' data shard, which TF opens itself (saved_model.pb and
    # variables.index are judged by tflab first and would be refused at once): alive until ended.
    shard = next((tmp_path / "sm" / "variables").glob("variables.data-*"))
    shard.unlink()
    os.mkfifo(shard)
    spawn = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-m', 'tflab.litert.workers', "
             f"'--worker', {str(tmp_path / 'sm')!r}, {str(tmp_path)!r}, 'none', {str(examples)!r}], "
             "start_new_session=True); print(p.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", spawn], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    time.sleep(6)  # past its imports and into the SavedModel's read: the parent watch is running
    assert not _gone(worker)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not _gone(worker):
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the converter worker outlived its SIGKILLed parent by 20 s")
