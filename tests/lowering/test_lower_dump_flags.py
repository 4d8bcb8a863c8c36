"""A lowering in a process where XLA compiled before gives the report a fresh process gives, with no child.

XLA parses ``XLA_FLAGS`` once per process; `tflab.lowering.dump_flags` has it
read the dump flags again for `lower`'s own compile and their defaults right
after. The reference is a fresh process whose first XLA compile is the
lowering; the model is the two Conv-BN blocks whose BatchNormalization
epsilons XLA merges across layers (the case the layer credit must not be
misled by), and a sibling without a Keras layer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("keras")

from tflab import lower  # noqa: E402
from tflab.lowering import dump, dump_flags  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

_PROGRAMS = '''
import keras, numpy as np, tensorflow as tf

keras.utils.set_random_seed(3)
inp = keras.Input((8, 8, 3))
h = inp
for i in range(2):  # two Conv-BN blocks: XLA merges their BatchNormalization epsilons
    h = keras.layers.Conv2D(4, 3, padding="same", name=f"conv{i}")(h)
    h = keras.layers.BatchNormalization(name=f"bn{i}")(h)
    h = keras.layers.ReLU(name=f"relu{i}")(h)
model = keras.Model(inp, h, name="two_blocks")
x = np.zeros((1, 8, 8, 3), np.float32)
w = tf.Variable(tf.ones([8, 4]))


def plain(v):
    return tf.reduce_sum(tf.nn.relu(v @ w) * 3.0, axis=1)
'''

_FRESH = """
import importlib.util, json, os, sys
from tflab import lower

spec = importlib.util.spec_from_file_location("two_blocks_programs", sys.argv[2])
p = importlib.util.module_from_spec(spec)
spec.loader.exec_module(p)
before = os.environ.get("XLA_FLAGS")
out = [lower(p.model, p.x), lower(p.plain, tf.TensorSpec([2, 8], tf.float32))]  # the first XLA compile is lower's
with open(sys.argv[1], "w") as f:
    json.dump({"reports": [_key(low) for low in out], "flags_kept": os.environ.get("XLA_FLAGS") == before}, f)
"""


def _key(low) -> dict:
    """What a report says, less its timings and names XLA numbers per process (the entry computation's)."""
    comps: dict[str, int] = {}
    fusions = []
    for f in low.fusions:
        d = f.to_dict()
        d["computation"] = comps.setdefault(d["computation"], len(comps))
        fusions.append(d)
    return {"stages": [[s.name, s.ops, s.why, bool(s.text)] for s in low.stages], "fusions": fusions,
            "memory": low.memory, "stopped": [low.stopped_at, low.why], "summary": low.summary_line()}


@pytest.fixture(scope="module")
def programs_file(tmp_path_factory) -> Path:
    """The programs as a file (their lines are the same in both processes: the python level reads them)."""
    path = tmp_path_factory.mktemp("programs") / "two_blocks_programs.py"
    path.write_text(_PROGRAMS)
    return path


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, programs_file):
    """The two reports of a fresh process whose first XLA compile is `lower`'s (one TF import)."""
    import inspect

    out = tmp_path_factory.mktemp("fresh") / "reports.json"
    src = "import tensorflow as tf\n" + inspect.getsource(_key) + _FRESH
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, "-c", src, str(out), str(programs_file)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def programs(programs_file):
    import importlib.util

    spec = importlib.util.spec_from_file_location("two_blocks_programs", programs_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)


def test_a_lowering_after_another_compile_equals_a_fresh_processes(fresh, programs, monkeypatch):
    """The same stages, fusions, layer credit (and constants listed apart) and memory, made in this process."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    tf.function(lambda v: v * 5.0, jit_compile=True)(tf.ones([3]))  # the user's own compile: XLA read its flags
    assert dump_flags.available() == ""
    made = []
    real_init = dump.WindowDump.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        made.append(self.tmp)

    monkeypatch.setattr(dump.WindowDump, "__init__", init)
    reports = [lower(programs["model"], programs["x"]), lower(programs["plain"], tf.TensorSpec([2, 8], tf.float32))]
    assert fresh["flags_kept"] and "XLA_FLAGS" not in os.environ
    for low, ref in zip(reports, fresh["reports"]):
        assert low.stage("optimized_hlo").note.startswith("XLA's dump of one compile in this process"), \
            low.stage("optimized_hlo").note
        assert json.loads(json.dumps(_key(low))) == ref
    model_key = fresh["reports"][0]
    assert {layer for f in model_key["fusions"] for layer in f["layers"]} >= {"conv0", "bn0", "conv1", "bn1"}
    assert len(made) == 2 and not any(p.exists() for p in made)  # each lowering's folder is removed


def _lower_named(v):
    return tf.nn.relu(v) * 2.0


_lower_named.__name__ = "probe" + dump.JIT_SUFFIX


def _compile(n: int) -> None:
    tf.function(_lower_named, jit_compile=True).experimental_get_compiler_ir(tf.zeros([n]))(stage="optimized_hlo")


def test_the_window_turns_the_dump_off_again(tmp_path, capfd):
    """After the window XLA dumps nothing more, into the folder or onto stdout.

    The planted defect beside it: XLA reads the window's flags and not the defaults after
    them, and the next compile of a lowering's module is dumped (the check can fail).
    """
    folder = tmp_path / "dump"
    folder.mkdir()
    _compile(3)  # XLA has read its flags
    with dump_flags.dump_window(folder, ".*" + dump.JIT_SUFFIX + ".*"):
        _compile(4)
    assert any(p.name.endswith("cpu_after_optimizations.txt") for p in folder.iterdir())
    for p in folder.iterdir():
        p.unlink()
    _compile(5)
    assert list(folder.iterdir()) == [] and "HloModule" not in capfd.readouterr().out
    try:  # planted: the window's flags read, the defaults after them never
        with dump_flags._lock:
            dump_flags._read(dump_flags.window_flags(folder, ".*"), os.environ.get("XLA_FLAGS"))
        _compile(6)
        assert list(folder.iterdir()) != []
    finally:
        dump_flags._read(dump_flags.restore_flags(), os.environ.get("XLA_FLAGS"))
    for p in folder.iterdir():
        p.unlink()
    _compile(7)
    assert list(folder.iterdir()) == []


def test_a_user_who_dumps_already_keeps_the_child(monkeypatch):
    """The healthy twin: the user's XLA_FLAGS dump into their folder, so tflab leaves XLA's flags alone."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nonexistent/users_own --xla_dump_hlo_as_text")
    monkeypatch.setattr(dump, "_in_process", False)
    monkeypatch.setattr(dump, "_own_dump", None)
    assert "dump already" in dump_flags.available()
    assert isinstance(dump.dumper(), dump.DumpChild)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")  # not a dump flag: the window
    monkeypatch.setattr(dump, "_in_process", None)
    w = dump.dumper()
    try:
        assert isinstance(w, dump.WindowDump)
    finally:
        w.__exit__(None, None, None)


def test_a_window_that_dumps_nothing_falls_back_to_the_child(monkeypatch):
    """Planted: XLA never reads the window's flags (a TF whose exported flags its compiles do not read).

    The compile under the window then wrote no dump: the program goes to a child process after all
    (here a stand-in that records what it was handed, instead of a TF import), and this process
    stops using the window.
    """
    import contextlib

    handed = []

    class Child:
        def __init__(self, passes=False):
            self.passes = passes

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def submit(self, concrete, specs, variables):
            handed.append(specs)

        def collect(self, generator):
            return dump.DumpResult(error="the stand-in child compiles nothing")

    monkeypatch.setattr(dump, "_in_process", None)
    monkeypatch.setattr(dump, "DumpChild", Child)
    monkeypatch.setattr(dump_flags, "_broken", "")
    monkeypatch.setattr(dump_flags, "dump_window", lambda *a, **k: contextlib.nullcontext())
    low = lower(_lower_named, tf.TensorSpec([3], tf.float32))
    assert handed == [[("a0", "float32", [3])]]
    assert "the child compile failed: the stand-in child" in low.stage("optimized_hlo").note
    assert "wrote no dump" in dump_flags.available()
    assert isinstance(dump.dumper(), Child)


def test_flags_the_window_does_not_name_keep_their_values(monkeypatch):
    """A flag XLA parsed before (here ``--xla_disable_all_hlo_passes``) holds in the lowering's compile and after.

    The window has XLA read its dump words alone, never XLA's defaults for everything: a lowering
    whose report came from a fresh set of options would show fusions this process never makes.
    """
    _compile(8)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with dump_flags._lock:  # as the user's XLA_FLAGS would have set it at the first compile
        dump_flags._read("--xla_disable_all_hlo_passes=true", None)
    try:
        low = lower(_lower_named, tf.TensorSpec([4], tf.float32))
        assert "this process" in low.stage("optimized_hlo").note
        assert " fusion(" not in low.stage("optimized_hlo").text  # no HLO pass ran: nothing fused
        ir = tf.function(_lower_named, jit_compile=True).experimental_get_compiler_ir(tf.zeros([9]))
        assert " fusion(" not in ir(stage="optimized_hlo")
    finally:
        with dump_flags._lock:
            dump_flags._read("--xla_disable_all_hlo_passes=false", None)
    low = lower(_lower_named, tf.TensorSpec([4], tf.float32))  # the twin: XLA's passes on, one fusion
    assert " fusion(" in low.stage("optimized_hlo").text
