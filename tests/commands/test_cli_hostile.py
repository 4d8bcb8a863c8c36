"""Hostile inputs to the CLI: each way a verb broke is a test here.

Every test fails on main 176dbcb (before the supervising ``tflab`` process,
exclusive publishing and the argument checks) and passes now. The CLI tests
that need the real process (os._exit, closed fds, signals, fatal TF lines)
run ``python -m tflab`` (the console script's `tflab.cli.supervise`); the
others run `tflab.cli.main` in-process (``run_cli``), which is cheaper.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tflab.errors import UsageError

REPO = Path(__file__).resolve().parents[2]

HOSTILE = '''
import os
import sys
import tensorflow as tf


def f(x):
    return tf.sin(x) * 2.0


def oexit(x):
    os._exit(9)


def closestdout(x):
    sys.stdout.close()
    return x * 2.0


def closefd1(x):
    os.close(1)
    return x * 2.0


def printer(x):
    os.write(1, b"FD WRITE\\n")
    print("to stdout via sys.__stdout__", file=sys.__stdout__)
    print("a plain print")
    return x + 1.0


def segfault(x):
    import ctypes
    ctypes.string_at(0)


def killed(x):
    import signal
    os.kill(os.getpid(), signal.SIGKILL)


def hijack(x):
    import io
    sys.stdout = io.StringIO()  # the verb's report would vanish into it
    return x * 2.0


def slow(x):
    import pathlib
    pathlib.Path(os.environ["MARK"]).write_text("x")
    import time
    time.sleep(120)
    return x


class Tiny(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x * 2.0}


def tiny():
    return Tiny()
'''


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    (d / "h.py").write_text(HOSTILE)
    (d / "s_oexit.py").write_text("import os\nos._exit(0)\n")
    return d


def tflab(work: Path, *argv: str, env: dict | None = None, timeout: float = 300, **kw):
    """Runs ``python -m tflab ARGV`` (the supervising entry) in ``work``; returns (rc, stdout, stderr)."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    p = subprocess.run([sys.executable, "-m", "tflab", *argv], cwd=work, env=full_env, capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    return p.returncode, p.stdout, p.stderr


def one_line(verb: str, err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith(f"tflab {verb}:")]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ --hlo replaced what it wrote to


def test_compare_hlo_keeps_a_symlink_and_a_fifo(run_cli, work, tmp_path):
    """`_write_hlo` built a second, unprobed OutputPath: it renamed a regular file over the link / FIFO."""
    target = tmp_path / "hlo_target.txt"
    target.write_text("target content")
    link = tmp_path / "hlo_link.txt"
    link.symlink_to(target)
    code, out, err = run_cli("compare", f"{work}/h.py:f", "--arg", "x=float32[4]", "--no-grad",
                             "--repeats", "1", "--hlo", str(link), "--force")
    assert code == 0, err
    assert link.is_symlink()  # the link is kept ...
    assert "stage:" in target.read_text()  # ... and its target holds the HLO (old: the link became a file)

    fifo = tmp_path / "fifo_hlo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    code, out, err = run_cli("compare", f"{work}/h.py:f", "--arg", "x=float32[4]", "--no-grad",
                             "--repeats", "1", "--hlo", str(fifo))
    reader.join(30)
    assert code == 0, err
    assert fifo.is_fifo() and got and b"stage:" in got[0]  # old: a regular file, the reader got 0 bytes


# ------------------------------------------------------------------ two writers of one new path


def test_second_writer_of_the_same_new_out_gets_already_exists(tmp_path):
    """Both exports passed check_out (the folder did not exist yet); the second commit deleted the first."""
    from tflab.export import check_out

    out = tmp_path / "same"
    a, b = check_out(out, False), check_out(out, False)  # both checked before either commits
    ta, tb = a.temp_dir(), b.temp_dir()
    (ta / "report.json").write_text('{"model": "A"}')
    (tb / "report.json").write_text('{"model": "B"}')
    a.commit(ta)
    with pytest.raises(UsageError, match="already exists"):
        b.commit(tb)
    b.discard(tb)
    assert json.loads((out / "report.json").read_text()) == {"model": "A"}  # the first one's, kept
    assert sorted(os.listdir(tmp_path)) == ["same"]  # no temporary folder left


def test_exclusive_file_publish(tmp_path):
    """A file output without --force (compare --hlo) is published with link(2): never over a new file."""
    from tflab._io.paths import output_path

    p = tmp_path / "h.txt"
    first = output_path(p, "--hlo", overwrite=False)
    p.write_text("someone else's")  # appears between the check and the write
    with pytest.raises(UsageError, match="already exists"):
        first.write("ours")
    assert p.read_text() == "someone else's" and os.listdir(tmp_path) == ["h.txt"]


# ------------------------------------------------------------------ tour --out


def test_tour_refuses_a_non_empty_out_without_force(run_cli, tmp_path, small_keras_file):
    out = tmp_path / "tourx"
    out.mkdir()
    (out / "inference.dot").write_text("USER DOT - precious")
    code, _, err = run_cli("tour", "--model", str(small_keras_file), "--out", str(out))
    assert code == 2 and "not empty: pass --force" in one_line("tour", err)
    assert (out / "inference.dot").read_text() == "USER DOT - precious"


def test_interrupted_tour_with_force_leaves_the_old_folder_as_it_was(small_keras_file, tmp_path, monkeypatch):
    """The tour wrote inference.dot in place: after Ctrl-C the folder was half old, half new."""
    import tflab._tour.s01_trace as s01
    from tflab.tour import run_tour

    real = s01.run

    def run_then_interrupt(ctx):
        real(ctx)
        raise KeyboardInterrupt

    out = tmp_path / "tourx"
    out.mkdir()
    (out / "inference.dot").write_text("USER DOT - precious")
    (out / "report.json").write_text("USER REPORT - precious")
    from tflab._io.paths import MARKER, write_marker

    write_marker(out)  # a previous tour's folder: --force replaces only those
    monkeypatch.setattr(s01, "run", run_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_tour(model_path=str(small_keras_file), out_dir=str(out), only=["s01_trace"], quiet=True, force=True)
    assert (out / "inference.dot").read_text() == "USER DOT - precious"
    assert sorted(os.listdir(tmp_path)) == ["tourx"] and sorted(os.listdir(out)) == [MARKER, "inference.dot",
                                                                                    "report.json"]
    monkeypatch.setattr(s01, "run", real)
    report = run_tour(model_path=str(small_keras_file), out_dir=str(out), only=["s01_trace"], quiet=True,
                      force=True)  # completes: the whole folder is the tour's, paths name the final folder
    assert "digraph" in (out / "inference.dot").read_text()
    assert report["trace"]["dot"] == str(out / "inference.dot"), report["trace"]


# ------------------------------------------------------------------ memory


def test_diagnose_refuses_inputs_that_cannot_fit(run_cli, work, monkeypatch):
    """diagnose exited 1 ("a problem was diagnosed") and blamed the user's code for tflab's own input."""
    import tensorflow as tf

    import tflab
    import tflab.process.memory

    code, _, err = run_cli("diagnose", f"{work}/h.py:f", "--arg", "x=float32[1099511627776,1048576]")
    assert code == 2 and "GiB of random data" in one_line("diagnose", err)
    monkeypatch.setattr(tflab.process.memory, "available_memory", lambda: (1 << 30, "test limit"))
    code, _, err = run_cli("diagnose", f"{work}/h.py:f", "--arg", "x=float32[16384,16384]")  # 1 GiB × 3 copies
    assert code == 2 and "only 1.0 GiB is available (test limit)" in one_line("diagnose", err)
    with pytest.raises(UsageError, match="random data"):
        tflab.diagnose(lambda x: x * 2, tf.TensorSpec([2**40, 2**20]))


def test_the_own_cgroup_and_its_ancestors_are_read(tmp_path):
    """_memory read /sys/fs/cgroup/memory.max at the hierarchy's root, not the process's own cgroup."""
    from tflab.process.memory import own_cgroup_limit

    root = tmp_path / "cg"
    (root / "user.slice" / "run-1.scope").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    (root / "memory.max").write_text("max\n")
    (root / "user.slice" / "memory.max").write_text(f"{8 << 30}\n")
    (root / "user.slice" / "memory.current").write_text(f"{1 << 30}\n")
    (root / "user.slice" / "run-1.scope" / "memory.max").write_text(f"{3 << 30}\n")
    (root / "user.slice" / "run-1.scope" / "memory.current").write_text(f"{1 << 30}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/user.slice/run-1.scope\n")
    limit, free, where = own_cgroup_limit(str(proc), str(root))
    assert (limit, free) == (3 << 30, 2 << 30) and where.endswith("run-1.scope/memory.max")
    # v1: a nested memcg with a tighter parent
    v1 = tmp_path / "v1"
    (v1 / "memory" / "a" / "b").mkdir(parents=True)
    (v1 / "memory" / "a" / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    (v1 / "memory" / "a" / "memory.usage_in_bytes").write_text("0\n")
    (v1 / "memory" / "a" / "b" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc.write_text("4:memory:/a/b\n1:cpu:/\n")
    assert own_cgroup_limit(str(proc), str(v1))[:2] == (1 << 30, 1 << 30)


_RLIMIT_CHILD = """
import resource, sys
from tflab.process import memory
if sys.argv[1] == "planted":  # the defect this test must catch: RLIMIT_AS not read
    memory.address_space_available = lambda: None
def vm():
    return int(next(ln for ln in open("/proc/self/status") if ln.startswith("VmSize:")).split()[1]) * 1024
free, _ = memory.available_memory()  # no RLIMIT_AS yet: the cgroup or MemAvailable
before = vm()
limit = before + free // 2  # half of what is free: below every other limit, on any machine
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
n, src = memory.available_memory()
print(free, limit, before, vm(), n, src)
"""


def _rlimit_reading(mode: str) -> tuple[int, int, int, int, int, str]:
    p = subprocess.run([sys.executable, "-c", _RLIMIT_CHILD, mode], capture_output=True, text=True, cwd=REPO,
                       timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr
    free, limit, before, after, n, src = p.stdout.strip().split(" ", 5)
    return int(free), int(limit), int(before), int(after), int(n), src


def _reads_the_limit(free: int, limit: int, before: int, after: int, n: int, src: str) -> bool:
    """available_memory is RLIMIT_AS minus VmSize (read just before and after it) and says so."""
    return limit - after <= n <= limit - before and n < free and src.startswith("RLIMIT_AS ")


def test_rlimit_as_is_a_limit():
    """RLIMIT_AS (ulimit -v) was not read: allocations past it fail in TF, not as tflab's exit 2.

    The child sets RLIMIT_AS to its VmSize plus half of what `available_memory` found free, so the
    limit is the smallest on any machine (a small one too); then the number must be that limit
    minus VmSize and name RLIMIT_AS. Planted: the same child with the RLIMIT_AS reader disabled."""
    reading = _rlimit_reading("healthy")
    assert _reads_the_limit(*reading), reading
    planted = _rlimit_reading("planted")
    assert not _reads_the_limit(*planted) and "RLIMIT_AS" not in planted[5], planted


# ------------------------------------------------------------------ bad XLA flags


def test_bad_tf_xla_flags(work):
    """Every verb, even --help, exited 1 with no output: the F line went to /dev/null while TF loaded."""
    code, out, err = tflab(work, "--help", env={"TF_XLA_FLAGS": "--tf_bogus=1"}, timeout=60)
    assert code == 0 and out.startswith("usage: tflab"), err  # parsing needs no TF
    code, out, err = tflab(work, "inspect", "h.py:f", "--arg", "x=float32[4]", env={"TF_XLA_FLAGS": "--tf_bogus=1"})
    line = one_line("inspect", err)
    assert code == 2 and "TF_XLA_FLAGS" in line and "--tf_bogus=1" in line and out == "", err


def test_bad_xla_flags(work):
    """compare ended with XLA's C++ fatal line and exit 1 (1 means "a check failed")."""
    code, out, err = tflab(work, "compare", "h.py:f", "--arg", "x=float32[4]", "--no-grad", "--repeats", "1",
                           env={"XLA_FLAGS": "--xla_bogus_flag=1"})
    line = one_line("compare", err)
    assert code == 2 and "XLA_FLAGS" in line and "Unknown flag" in line, err


# ------------------------------------------------------------------ what the path is


def test_out_that_is_a_loop_a_fifo_or_a_device(run_cli, work, tmp_path):
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    os.mkfifo(tmp_path / "fifo1")
    cases = [(tmp_path / "loopA", "symlink loop"), (tmp_path / "fifo1", "is a FIFO"),
             (Path("/dev/full"), "is a character device")]
    for out, words in cases:
        for force in ([], ["--force"]):
            code, _, err = run_cli("export", f"{work}/h.py:tiny", "--quantize", "none", "--out", str(out), *force)
            line = one_line("export", err)
            assert code == 2 and words in line and "pass --force" not in line, (out, force, line)
    assert (tmp_path / "fifo1").is_fifo() and (tmp_path / "loopA").is_symlink()


def test_dot_under_a_regular_file(run_cli, work, tmp_path):
    (tmp_path / "afile").write_text("x")
    code, _, err = run_cli("inspect", f"{work}/h.py:f", "--arg", "x=float32[4]", "--dot",
                           str(tmp_path / "afile" / "g.dot"))
    line = one_line("inspect", err)
    assert code == 2 and "is a regular file, not a folder" in line and "does not exist" not in line, line


# ------------------------------------------------------------------ Ctrl-C during start-up


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _tf_files_mapped(pid: int) -> int:
    """How many distinct files of the tensorflow package process ``pid`` has mapped (its .so files)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return len({ln.split(None, 5)[-1] for ln in f if "/site-packages/tensorflow/" in ln})
    except OSError:
        return 0


@pytest.fixture(scope="module")
def tf_files_of_a_full_import():
    """The number `_tf_files_mapped` reads once ``import tensorflow`` (and the device list the verb
    child makes) has finished, measured on this machine in a process of its own."""
    code = ("import sys, tensorflow as tf; tf.config.list_physical_devices(); print('ready', flush=True); "
            "sys.stdin.read()")
    ref = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    try:
        assert ref.stdout.readline().strip() == "ready"
        return _tf_files_mapped(ref.pid)
    finally:
        ref.kill()
        ref.wait()


# ------------------------------------------------------------------ the process


# ------------------------------------------------------------------ crashes the supervisor names


# ------------------------------------------------------------------ the Python API


# ------------------------------------------------------------------ parsing without TF (S1)


# ------------------------------------------------------------------ every written file was declared

# verb -> (its output options with values, the paths they declare under the working folder). A verb
# with an output option that is missing here fails the walk: declare what it writes.
DECLARED = {
    "inspect": (["--dot", "g.dot"], ["g.dot"]),
    "compare": (["--hlo", "h.txt", "--no-grad", "--repeats", "1"], ["h.txt"]),
    "export": (["--out", "e", "--quantize", "none"], ["e/"]),
    "tour": (["--out", "t"], ["t/"]),
    "retrace": (["--html", "r.html"], ["r.html"]),
    "check-tflite": (["--node-data", "n.json"], ["n.json"]),
    "lower": (["--out", "l", "--html", "l.html"], ["l/", "l.html"]),
}
RETRACE_SCRIPT = """import tensorflow as tf
f = tf.function(lambda x: x * 2)
f(tf.ones([2])); f(tf.ones([3]))
"""


# ------------------------------------------- the lead's on merged main (3 breaks)


# --------------------------------------------------------------- more hostile inputs (each broke before)


def _gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts: its code ran to the end)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_export_out_messages_name_the_options_as_the_caller_spells_them(tmp_path, run_cli):
    """``export_model(m, "exp1")`` on an existing folder said "pass --force … choose another --out":
    from Python it is ``force=True`` and ``out``; the CLI keeps ``--force`` and ``--out``."""
    import tflab

    (tmp_path / "exp1").mkdir()
    (tmp_path / "exp1" / "x").write_text("x")
    with pytest.raises(UsageError) as e:
        tflab.export_model("nowhere.keras", tmp_path / "exp1")
    assert "pass force=True to replace it, or choose another out" in str(e.value) and "--" not in str(e.value)
    code, out, err = run_cli("export", "nowhere.keras", "--out", str(tmp_path / "exp1"))
    assert code == 2 and "pass --force to replace it, or choose another --out" in err
