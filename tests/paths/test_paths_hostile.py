"""The input and output path breaks, each with its reproducer.

Every verb goes through the supervisor's pre-flight (`tflab.cli.preflight`) before TensorFlow
loads, so these run ``python -m tflab`` in a fresh process and also check that TF was never
imported there (the answer comes from the parent: under 0.5 s, `benchmarks/bench_cli_startup.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tflab._io import paths as _paths
from tflab.errors import UsageError

REPO = Path(__file__).resolve().parents[2]

# Runs the console script's entry point and says whether TF got imported in that process.
_SUPERVISE = ("import sys; from tflab.cli import supervise; rc = supervise(sys.argv[1:]); "
              "print('TF-IMPORTED' if 'tensorflow' in sys.modules else 'NO-TF', file=sys.stderr); sys.exit(rc)")


def tflab(*argv, cwd, timeout=60):
    """``tflab ARGV`` through the supervisor in a fresh process: (code, stdout, the error lines, TF imported)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TFLAB_IN_PROCESS", None)
    p = subprocess.run([sys.executable, "-c", _SUPERVISE, *map(str, argv)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    lines = p.stderr.strip().splitlines()
    tf = lines[-1] == "TF-IMPORTED"
    return p.returncode, p.stdout, lines[:-1], tf


@pytest.fixture
def odd(tmp_path):
    """A FIFO, a symlink loop, a dangling link, a folder, a socket: named as such, never opened."""
    import socket

    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "loop1.py").symlink_to("loop2.py")
    (tmp_path / "loop2.py").symlink_to("loop1.py")
    (tmp_path / "dangling.py").symlink_to("nowhere.py")
    (tmp_path / "adir.py").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock.py"))
    yield tmp_path
    sock.close()


# ------------------------------------------------------------------ inputs that are not files

@pytest.mark.parametrize("argv, words", [
    (["inspect", "fifo.py:f", "--arg", "x=float32[2,4]"], "file 'fifo.py' is a FIFO"),
    (["retrace", "fifo.py"], "script 'fifo.py' is a FIFO"),
    (["export", "fifo.py", "--quantize", "none", "--out", "o"], "MODEL 'fifo.py' is a FIFO"),
    (["export", "fifo.py:tiny", "--out", "o"], "file 'fifo.py' is a FIFO"),
    (["check-tflite", "fifo.py", "adir.py"], "MODEL.tflite 'fifo.py' is a FIFO"),
    (["check-tflite", "/dev/null", "adir.py"], "is a character device"),
    (["tour", "--model", "fifo.py", "--out", "t"], "--model 'fifo.py' is a FIFO"),
    (["autograph", "loop1.py:f"], "is a symlink loop"),
    (["compare", "dangling.py:f"], "is a dangling symlink"),
    (["diagnose", "sock.py:f"], "is a socket"),
    (["precision", "adir.py:f"], "is a folder"),
    (["distribute", "fifo.py:step", "--arg", "x=float32[8,4]"], "is a FIFO"),
], ids=["inspect-fifo", "retrace-fifo", "export-fifo", "export-fifo-obj", "check-tflite-fifo",
        "check-tflite-device", "tour-fifo", "autograph-loop", "compare-dangling", "diagnose-socket",
        "precision-folder", "distribute-fifo"])
def test_input_that_is_not_a_file_is_named_before_tf(odd, argv, words):
    """A FIFO as FILE.py blocked in open for ever (inspect killed after 337 s);: a symlink
    loop was "does not exist". Probed with stat only, in the parent, for every verb."""
    code, out, lines, tf = tflab(*argv, cwd=odd, timeout=30)
    assert code == 2 and len(lines) == 1 and words in lines[0] and "does not exist" not in lines[0], lines
    assert not tf and out == ""
    assert (odd / "fifo.py").is_fifo()


def test_input_probe_never_opens(odd):
    """The one input place itself (`tflab._io.paths.input_path`), used by the child and the API too."""
    for name, kind in [("fifo.py", "a FIFO"), ("loop1.py", "a symlink loop"), ("sock.py", "a socket"),
                       ("dangling.py", "a dangling symlink"), ("adir.py", "is a folder")]:
        with pytest.raises(UsageError, match=kind):
            _paths.input_path(odd / name, "file", want="file", what="a .py file")
    with pytest.raises(UsageError, match="is a regular file, not a folder"):
        (odd / "f.py").write_text("x = 1\n")
        _paths.input_path(odd / "f.py", "SAVED_MODEL", want="folder", what="a SavedModel folder")
    assert _paths.input_path(odd / "f.py", "file") == odd / "f.py"  # healthy: passes
    assert _paths.input_path(odd / "adir.py", "DIR", want="folder") == odd / "adir.py"


def test_load_module_refuses_a_fifo_without_opening_it(odd):
    """The child's side (and the API's): `load_target` on a FIFO blocked in open() for ever."""
    from tflab._user.target import load_target

    with pytest.raises(UsageError, match="is a FIFO"):
        load_target(f"{odd / 'fifo.py'}:f")


# ------------------------------------------------------------------ pre-flight: --arg grammar, outputs

@pytest.mark.parametrize("arg, words", [
    ("x", "expected NAME=VALUE"), ("1x=3", "is not a parameter name"),
    ("x=float32[-1,4]", "bad dimension -1"), ("x=float32[2,a]", "bad dimension 'a'"),
    ("x=int64[99999999999999999999]", "larger than TF's int64 dims"),
])
def test_arg_grammar_is_answered_by_the_parent(tmp_path, arg, words):
    (tmp_path / "m.py").write_text("def f(x):\n    return x\n")
    code, _, lines, tf = tflab("inspect", "m.py:f", "--arg", arg, cwd=tmp_path)
    assert code == 2 and len(lines) == 1 and words in lines[0] and not tf, lines


def test_arg_given_twice_and_healthy_grammar(tmp_path):
    from tflab._api.cliargs import check_arg_grammar

    with pytest.raises(UsageError, match="given twice"):
        check_arg_grammar(["x=1", "x=2"])
    # healthy: literals, unknown dims, scalars, dtypes the parent does not know (left to TF)
    check_arg_grammar(["x=float32[None,8]", "n=3", "s='a=b'", "y=float32[]", "z=float8_e4m3fn[2]",
                       "w=int32[007]"])


@pytest.mark.parametrize("argv, words", [
    (["inspect", "m.py:f", "--arg", "x=float32[2]", "--dot", "adir"], "is a directory"),
    (["compare", "m.py:f", "--hlo", "afile"], "exists; pass --force"),
    (["export", "m.py:f", "--out", "afile/x"], "afile is a file, not a folder"),
    (["retrace", "--html", "nodir/p.html", "m.py"], "does not exist"),
])
def test_output_paths_are_answered_by_the_parent(tmp_path, argv, words):
    (tmp_path / "m.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("keep")
    code, _, lines, tf = tflab(*argv, cwd=tmp_path)
    assert code == 2 and len(lines) == 1 and words in lines[0] and not tf, lines
    assert (tmp_path / "afile").read_text() == "keep"


# ------------------------------------------------------------------ --force replaces only tflab's own

@pytest.mark.parametrize("verb", ["tour", "export"])
def test_force_never_deletes_a_folder_of_user_files(tmp_path, verb):
    """`tour --out DIR --force` deleted o4/user/thesis.txt (export refused the same folder)."""
    user = tmp_path / "o4" / "user"
    user.mkdir(parents=True)
    (user / "thesis.txt").write_text("mine")
    (user / "report.json").write_text("{}")  # looks like an export, but tflab did not write it
    argv = ["tour", "--out", str(user), "--force"] if verb == "tour" else \
        ["export", "m.py:f", "--out", str(user), "--force"]
    (tmp_path / "m.py").write_text("def f(x):\n    return x\n")
    code, _, lines, tf = tflab(*argv, cwd=tmp_path)
    assert code == 2 and len(lines) == 1 and "not a tflab" in lines[0] and not tf, lines
    assert (user / "thesis.txt").read_text() == "mine"


def test_the_rule_at_the_one_output_place(tmp_path):
    """`OutputPath.commit` writes the marker; `--force` (exclusive=False) replaces that folder only
    while it holds nothing else; a file the user added since is named and kept."""
    out = tmp_path / "out"
    target = _paths.output_path(out, "--out", folder=True, exclusive=True)
    tmp = target.temp_dir()
    assert (tmp / _paths.OWNER).is_file()  # the temp folder names its owner (pid, start time)
    (tmp / "report.json").write_text("{}")
    (tmp / "sub").mkdir()
    (tmp / "sub" / "a.bin").write_bytes(b"1")
    target.commit(tmp)
    marker = json.loads((out / _paths.MARKER).read_text())
    assert marker["entries"] == ["report.json", "sub", "sub/a.bin"] and not (out / _paths.OWNER).exists()
    # tflab's own folder, untouched: --force replaces it
    again = _paths.output_path(out, "--out", folder=True, exclusive=False)
    tmp2 = again.temp_dir()
    (tmp2 / "report.json").write_text('{"new": 1}')
    again.commit(tmp2)
    assert json.loads((out / "report.json").read_text()) == {"new": 1} and not (out / "sub").exists()
    # planted defect: a user's file inside a subfolder tflab wrote
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"holds files tflab did not write \(notes.txt\)"):
        _paths.output_path(out, "--out", folder=True, exclusive=False)
    # a file put there between the check and the commit: commit checks again
    (out / "notes.txt").unlink()
    late = _paths.output_path(out, "--out", folder=True, exclusive=False)
    tmp3 = late.temp_dir()
    (out / "late.txt").write_text("mine too")
    with pytest.raises(UsageError, match="late.txt"):
        late.commit(tmp3)
    late.discard(tmp3)
    assert (out / "late.txt").read_text() == "mine too"
    # no marker at all (a folder of the user's): refused; an empty folder: taken
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "a").write_text("a")
    with pytest.raises(UsageError, match="not a tflab"):
        _paths.check_folder_out(tmp_path / "theirs", "--out", True, noun="tour")
    (tmp_path / "empty").mkdir()
    assert _paths.check_folder_out(tmp_path / "empty", "--out", False, noun="tour") is True


# ------------------------------------------------------------------ temp folders of killed runs

def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_the_next_run_removes_temp_folders_whose_owner_is_gone(tmp_path, capsys):
    """SIGKILL of tflab mid-export left o2/.e2.tmp-*; no later run removed it."""
    dead = tmp_path / ".e2.tmp-al386s7e"
    dead.mkdir()
    (dead / "saved_model").mkdir()
    (dead / _paths.OWNER).write_text(f"{_dead_pid()} 12345\n")
    alive = tmp_path / ".e2.tmp-running"
    alive.mkdir()
    (alive / _paths.OWNER).write_text(f"{os.getpid()} {_paths._start_time(os.getpid())}\n")
    reused = tmp_path / ".e2.tmp-reused"  # this pid, another start time: a pid the kernel reused
    reused.mkdir()
    (reused / _paths.OWNER).write_text(f"{os.getpid()} 1\n")
    foreign = tmp_path / ".e2.tmp-nomarker"  # not tflab's (or older): kept
    foreign.mkdir()
    _paths.output_path(tmp_path / "e2", "--out", folder=True, exclusive=True)
    err = capsys.readouterr().err
    assert not dead.exists() and not reused.exists() and alive.exists() and foreign.exists()
    assert err.count("\n") == 1 and "removed 2 temporary folder(s) left by a run that was killed" in err


def test_owned_temp_dirs_in_tmpdir(tmp_path, monkeypatch):
    """$TMPDIR/tflab_tour_lane_*, tflab_distribute_*, tflab_lab_export_* stayed."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    old = tmp_path / "tflab_distribute_n_2fapqt"
    old.mkdir()
    (old / "0.stderr").write_text("log")
    (old / _paths.OWNER).write_text(f"{_dead_pid()} 99\n")
    new = _paths.owned_temp_dir("tflab_distribute_")
    assert not old.exists() and new.is_dir() and _paths.owner_gone(new) is None
    assert (new / _paths.OWNER).read_text().split()[0] == str(os.getpid())


def test_two_tours_into_one_empty_folder_the_second_does_not_replace_the_first(tmp_path, small_keras_file,
                                                                              monkeypatch):
    """`tour --out EMPTY` is allowed without --force, and of two tours racing into the
    same empty folder the second replaced the first's output at its commit. Planted here: another run's
    output lands in the folder between the check and the commit."""
    import pytest

    from tflab._io import paths as _paths
    from tflab.errors import UsageError
    from tflab.tour import run_tour

    out = tmp_path / "shared"
    out.mkdir()
    real = _paths.OutputPath.commit

    def other_run_first(self, tmp):
        (self.path / "report.json").write_text('{"by": "the other run"}')
        return real(self, tmp)

    monkeypatch.setattr(_paths.OutputPath, "commit", other_run_first)
    with pytest.raises(UsageError, match=r"--out .*shared is no longer empty \(another run wrote it"):
        run_tour(model_path=str(small_keras_file), out_dir=str(out), quiet=True, only=["s01_trace"])
    assert os.listdir(out) == ["report.json"] and "the other run" in (out / "report.json").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".shared.tmp-")]  # its own work discarded
    monkeypatch.setattr(_paths.OutputPath, "commit", real)
    (out / "report.json").unlink()
    report = run_tour(model_path=str(small_keras_file), out_dir=str(out), quiet=True, only=["s01_trace"])
    assert (out / "report.json").is_file() and report["section_seconds"]  # healthy: an empty folder is used


# ------------------------------------------------------------------ signals inside a folder's creation

_SIGNAL_INSIDE = """
import os, signal, sys, tempfile
from pathlib import Path
from tflab.errors import Terminated, install_sigterm_handler, install_sigint_handler
from tflab._io.paths import output_path, owned_temp_dir

where, sig, kind, which = sys.argv[1], getattr(signal, sys.argv[2]), sys.argv[3], sys.argv[4]
install_sigterm_handler(); install_sigint_handler()
real = tempfile.mkdtemp
def mkdtemp(*a, **k):  # the signal lands after mkdir, before mkdtemp returns (the window)
    path = real(*a, **k)
    if which in path:  # the output check's probe, or the folder itself
        os.kill(os.getpid(), sig)
    return path
tempfile.mkdtemp = mkdtemp
try:
    if kind == "out":
        out = output_path(os.path.join(where, "o"), "--out", folder=True)
        out.temp_dir()
    else:
        owned_temp_dir("tflab_x_", dir=where)
    print("returned")
except (Terminated, KeyboardInterrupt) as e:
    print(type(e).__name__)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("kind, which", [("out", ".tmp-"), ("out", "probe"), ("owned", "tflab_x_")],
                         ids=["out", "out-probe", "owned"])
def test_a_signal_inside_a_temporary_folders_creation_leaves_no_folder(tmp_path, sig, kind, which):
    """mkdtemp's mkdir done, the handler's exception raised before the folder had an owner file: it stayed."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", _SIGNAL_INSIDE, str(tmp_path), sig, kind, which], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
    assert p.stdout.strip() == ("Terminated" if sig == "SIGTERM" else "KeyboardInterrupt"), p.stderr[-2000:]
    assert os.listdir(tmp_path) == []


def test_a_signal_between_commits_renames_keeps_one_whole_output(tmp_path):
    """--force over an old output: the two renames are one step; the signal ends the run after them."""
    import signal
    import subprocess
    import sys

    code = """
import os, signal, sys
from pathlib import Path
from tflab.errors import Terminated, install_sigterm_handler
from tflab._io.paths import output_path
install_sigterm_handler()
o = Path(sys.argv[1]) / "o"
out = output_path(o, "--out", folder=True, overwrite=True)
tmp = out.temp_dir()
(tmp / "new.txt").write_text("new")
real = os.replace
def replace(a, b):
    real(a, b)
    if ".old-" in str(b):
        os.kill(os.getpid(), signal.SIGTERM)  # after the old output went aside
os.replace = replace
try:
    out.commit(tmp)
    print("returned")
except Terminated:
    print("Terminated")
"""
    old = tmp_path / "o"
    old.mkdir()
    from tflab._io.paths import write_marker

    (old / "old.txt").write_text("old")
    write_marker(old)
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
    assert p.stdout.strip() == "Terminated", p.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["o"] and (old / "new.txt").read_text() == "new", os.listdir(tmp_path)
    del signal


NOT_UTF8 = os.fsdecode(b"out\xffdir")


@pytest.mark.parametrize("argv", [["export", "m.py:build", "--out", NOT_UTF8],
                                  ["lower", "m.py:f", "--arg", "x=float32[2]", "--out", NOT_UTF8],
                                  ["inspect", "m.py:f", "--arg", "x=float32[2]", "--tensorboard", NOT_UTF8]],
                         ids=["export-out", "lower-out", "inspect-tensorboard"])
def test_a_path_tensorflow_writes_that_is_not_utf8_is_one_line(tmp_path, argv):
    """TF writes SavedModels, XLA dumps and event files through UTF-8 paths only: a name with other
    bytes raised UnicodeEncodeError inside TF (a traceback, exit 70). Python-written outputs (--dot,
    --hlo, --html) take such names and are not refused."""
    (tmp_path / "m.py").write_text("import tensorflow as tf\n\ndef f(x):\n    return x * 2.0\n\n"
                                   "def build():\n    return tf.keras.Sequential([tf.keras.layers.Dense(1)])\n")
    code, out, err, _ = tflab(*argv, cwd=tmp_path, timeout=120)
    assert code == 2, err
    assert len(err) == 1 and "is not valid UTF-8" in err[0] and "Traceback" not in "\n".join(err), err
    assert not (tmp_path / NOT_UTF8).exists()


@pytest.mark.parametrize("verb", ["inspect", "compare"])
def test_a_source_file_whose_name_is_not_utf8_is_named_not_the_function(tmp_path, verb):
    """A correct function in ``bad\\xff.py`` was reported as the function's own error (TF's C++ cast of
    the source file name failed while tracing); refused in one line before TF loads. The same function
    from a UTF-8 name (``ünï.py``) runs."""
    src = "def f(x):\n    return x * 2.0\n"
    bad = os.fsdecode(b"bad\xff.py")
    (tmp_path / bad).write_text(src)
    (tmp_path / "ünï.py").write_text(src)
    code, out, err, _ = tflab(verb, f"{bad}:f", "--arg", "x=float32[2]", cwd=tmp_path, timeout=120)
    assert code == 2, err
    assert len(err) == 1 and "is not valid UTF-8" in err[0] and "source file name" in err[0], err
    assert "raised" not in err[0] and "Traceback" not in "\n".join(err)
    code, out, err, _ = tflab("inspect", "ünï.py:f", "--arg", "x=float32[2]", cwd=tmp_path, timeout=120)
    assert code == 0, err


@pytest.mark.parametrize("target,refused", [("/dev/stdout", True), ("/dev/fd/1", True), ("/dev/null", False)])
def test_json_and_a_file_output_on_stdout_are_one_line(tmp_path, target, refused):
    """``--json --dot /dev/stdout`` wrote the DOT graph into the JSON document (it no longer parsed):
    refused before TF loads, naming both; /dev/null is not stdout here and is written as before."""
    (tmp_path / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    code, out, err, tf = tflab("inspect", "m.py:f", "--arg", "x=float32[2]", "--json", "--dot", target,
                               cwd=tmp_path, timeout=120)
    if refused:
        assert code == 2 and out == "" and not tf, err
        assert len(err) == 1 and "that is stdout, where --json writes its document" in err[0], err
    else:
        assert code == 0, err
        assert json.loads(out)["function_name"] == "f"


@pytest.mark.parametrize("argv", [
    ["inspect", "m.py:f", "--arg", "x=float32[2]", "--dot", "m.py", "--force"],
    ["compare", "m.py:f", "--arg", "x=float32[2]", "--hlo", "./m.py", "--force"],
    ["check-tflite", "v/model_none.tflite", "v/saved_model", "--node-data", "v/model_none.tflite", "--force"],
    ["export", "v/saved_model", "--out", "v", "--force"],
], ids=["dot-over-source", "hlo-over-source", "node-data-over-model", "out-holding-the-input"])
def test_force_never_writes_over_an_input(tmp_path, argv):
    """``--force`` replaces an earlier output, never what the verb reads: ``--dot m.py --force`` replaced
    the source being analysed, ``--node-data X.tflite --force`` the model being checked (both exit 0).
    Refused in one line before TF loads; the input is unchanged."""
    src = "def f(x):\n    return x * 2.0\n"
    (tmp_path / "m.py").write_text(src)
    (tmp_path / "v" / "saved_model").mkdir(parents=True)
    (tmp_path / "v" / "saved_model" / "saved_model.pb").write_bytes(b"\x08\x01")
    (tmp_path / "v" / "model_none.tflite").write_bytes(b"\0\0\0\0TFL3" + b"\0" * 32)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err, seconds = tflab(*argv, cwd=tmp_path, timeout=60)
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert ("is the input" in err[0] or "holds the input" in err[0]) and "choose another" in err[0], err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_force_replaces_only_an_output_of_the_same_verb(tmp_path):
    """``lower --out EXPORT --force`` deleted a SavedModel and its TFLite variants (the marker said
    ``"verb": null``, so any verb's --force took any tflab folder). A folder of another kind is
    refused, by its marker's verb or, for a marker without one, by what it holds; a previous lowering
    is still replaced."""
    from tflab._io.output_marker import check_replaceable, marker_kind
    from tflab._io.paths import write_marker

    (tmp_path / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    exp = tmp_path / "exp"
    (exp / "saved_model").mkdir(parents=True)
    for name in ("report.json", "examples.npz", "model_none.tflite"):
        (exp / name).write_text("x")
    write_marker(exp)  # an older marker: "verb": null
    assert marker_kind(exp) == "export"
    code, out, err, _ = tflab("lower", "m.py:f", "--arg", "x=float32[2]", "--out", "exp", "--force",
                              cwd=tmp_path, timeout=60)
    assert code == 2 and len(err) == 1 and "is a tflab export folder, not a lowering" in err[0], err
    assert (exp / "saved_model").is_dir() and (exp / "model_none.tflite").exists()
    low = tmp_path / "low"
    low.mkdir()
    (low / "lowering.json").write_text("{}")
    write_marker(low, "lowering")
    assert marker_kind(low) == "lowering"
    check_replaceable(low, "--out", "lowering")  # the same kind: replaceable
    with pytest.raises(UsageError, match="is a tflab lowering folder, not an export"):
        check_replaceable(low, "--out", "export")


def test_export_model_never_publishes_over_its_examples(tmp_path):
    """The CLI refused ``export M --out e2 --force --examples e2/examples.npz``; the API's
    ``export_model(m, "e2", examples="e2/examples.npz", force=True)`` replaced the folder holding its
    own input. The same check now runs in the API, before any model is loaded; an examples file
    outside the folder is taken (the healthy twin)."""
    import numpy as np

    from tflab import export_model
    from tflab._io.paths import write_marker

    exp = tmp_path / "e2"
    (exp / "saved_model").mkdir(parents=True)
    np.savez(exp / "examples.npz", x=np.ones((2, 3), np.float32))
    (exp / "report.json").write_text("{}")
    write_marker(exp, "export")
    before = {p: p.read_bytes() for p in exp.rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match="holds the input examples"):
        export_model(object(), exp, quantize=["none"], examples=exp / "examples.npz", force=True)
    assert {p: p.read_bytes() for p in exp.rglob("*") if p.is_file()} == before
    outside = tmp_path / "examples.npz"
    outside.write_bytes((exp / "examples.npz").read_bytes())
    with pytest.raises(UsageError) as e:  # passes the check, then the model object is refused
        export_model(object(), exp, quantize=["none"], examples=outside, force=True)
    assert "holds the input" not in str(e.value)
