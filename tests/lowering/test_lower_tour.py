"""The tour's lowering lines, from the dump of a compile the process made already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

SCRIPT = textwrap.dedent("""\
    import json, os, sys, tempfile
    from tflab.lowering.tour import ENV, lane_env
    tmp = tempfile.mkdtemp(prefix="tflab_test_tour_")
    if sys.argv[1] == "dump":
        os.environ.update(lane_env(tmp))  # before TF loads, as the tour's second process gets it
    import keras
    import tensorflow as tf
    from tflab.lowering.tour import tour_lines
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(4, activation="tanh")])
    x = tf.random.normal([2, 8])
    def forward(images):
        return model(images, training=False)
    jitted = tf.function(forward, jit_compile=True)
    jitted(x)  # step 6's own XLA compile
    files = len(os.listdir(os.environ[ENV])) if ENV in os.environ else 0
    from tflab.lowering.tour import dumps_compiles, step_six_optimized_hlo
    from tflab.modes import count_fusions
    dumped = step_six_optimized_hlo()
    fusions = {"dumped": dumps_compiles(), "dump": None if dumped is None else count_fusions(dumped),
               "compiler_ir": count_fusions(jitted.experimental_get_compiler_ir(x)(stage="optimized_hlo"))}
    print(json.dumps({"lines": tour_lines(forward, x), "layers": [l.name for l in model.layers], "files": files,
                      "fusions": fusions}))
    """)


def _run(mode: str, tmp_path) -> dict:
    script = tmp_path / "tour_step.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.getcwd(), TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(tmp_path))
    env.pop("XLA_FLAGS", None)
    env.pop("TFLAB_TOUR_XLA_DUMP", None)
    run = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, env=env,
                         timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_one_line_per_level_and_the_largest_fusion_with_its_layer_from_the_compile_already_made(tmp_path):
    from tflab.lowering import STAGES

    got = _run("dump", tmp_path)
    # Step 6 counts fusions in XLA's dump of its own compile instead of compiling again for
    # experimental_get_compiler_ir(stage="optimized_hlo"): the same count and kinds.
    assert got["fusions"]["dumped"] and got["fusions"]["dump"] is not None
    assert got["fusions"]["dump"] == got["fusions"]["compiler_ir"] and got["fusions"]["dump"][0] > 0, got
    lines = got["lines"]
    assert got["files"] > 0
    assert [ln.split()[1] for ln in lines[:len(STAGES)]] == list(STAGES), lines
    assert all(" ops, " in ln for ln in lines[:len(STAGES)]), lines  # every level made, none empty
    big = next(ln for ln in lines if ln.startswith("largest fusion "))
    # The largest fusion by traffic is the ReLU of the 64-wide layer (the tanh one moves 2x4 floats).
    assert "Relu" in big and big.split(" layer ")[1].split(";")[0] == got["layers"][0], big
    assert lines[-1].startswith("lowering lines: ") and "no second one" in lines[-1]


def test_without_a_dump_the_tour_prints_no_lowering_lines(tmp_path):
    got = _run("nodump", tmp_path)
    assert got["lines"] == []
    assert not got["fusions"]["dumped"] and got["fusions"]["dump"] is None  # step 6 asks TF then


def test_lane_env_leaves_a_users_own_dump_alone(tmp_path):
    from tflab.lowering.tour import ENV, lane_env

    env = lane_env(tmp_path, {"XLA_FLAGS": "--xla_cpu_use_thunk_runtime=true"})
    assert env["XLA_FLAGS"].startswith("--xla_cpu_use_thunk_runtime=true --xla_dump_to=")
    assert os.path.isdir(env[ENV])
    assert lane_env(tmp_path, {"XLA_FLAGS": "--xla_dump_to=/mine"}) == {}

