"""``tflab lower``'s option combinations, ``--stage`` per path and ``--runs`` bounds: refused before TF loads.

Also what ``--force`` names when a folder is not tflab's (the marker every verb writes), and a
``--help``/``--version`` whose stdout cannot be written (a full device): one line, not exit 0.
"""

from __future__ import annotations

import argparse
import os

import pytest

from tests.commands.test_cli_preflight import tflab

ARG = ["--arg", "x=float32[4,8]"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("lower_options")
    (w / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    (w / "userdir").mkdir()
    (w / "userdir" / "mine.txt").write_text("mine")
    return w


@pytest.mark.parametrize("argv, said", [
    (["--path", "graph", "--runs", "0"], "must be an integer >= 1"),
    (["--path", "graph", "--cause"], "--cause compares eager with XLA"),
    (["--path", "graph", "--passes"], "--passes shows XLA's HLO passes"),
    (["--path", "graph", "--stage", "asm"], "--stage asm: --path graph has no such level"),
    (["--path", "graph", "--stage", "profile", "--stage", "llvm_ir"], "--stage llvm_ir: --path graph has no"),
    (["--stage", "grappler"], "--stage grappler: --path xla has no such level"),  # the other way round
    (["--path", "graph", "--runs", "1000000000"], "must be an integer <= 100000"),
    (["--runs", "100001"], "must be an integer <= 100000"),
])
def test_a_combination_the_path_cannot_do_is_refused_before_tf(work, argv, said):
    code, lines, tf_loaded = tflab(work, "lower", "m.py:f", *ARG, *argv)
    assert code == 2 and len(lines) == 1 and said in lines[0] and not tf_loaded, lines


@pytest.mark.parametrize("argv", [
    ["--path", "graph", "--stage", "profile", "--stage", "grappler", "--runs", "100000"],
    ["--path", "xla", "--stage", "asm", "--passes", "--cause"],
])
def test_a_valid_combination_reaches_the_next_check(work, argv):
    """Healthy twins: they pass the option checks and stop at the --out check (still before TF)."""
    code, lines, tf_loaded = tflab(work, "lower", "m.py:f", *ARG, *argv, "--out", "userdir", "--force")
    assert code == 2 and len(lines) == 1 and not tf_loaded, lines
    assert "no .tflab-output marker" in lines[0] and "report.json" not in lines[0], lines


def test_force_on_a_users_folder_names_the_marker_for_every_verb(work):
    """The folder is recognized by the marker, not by one verb's file (lower writes lowering.json)."""
    for argv in (["lower", "m.py:f", *ARG], ["export", "m.py:f"]):
        code, lines, _ = tflab(work, *argv, "--out", "userdir", "--force")
        assert code == 2 and len(lines) == 1 and "no .tflab-output marker" in lines[0], lines
    assert os.listdir(work / "userdir") == ["mine.txt"]


def test_the_cli_stage_table_is_the_lowerings():
    from tflab.commands import lower_cmd
    from tflab.lowering import api, records

    assert lower_cmd.PATH_STAGES == {"xla": records.STAGES, "graph": records.GRAPH_STAGES}
    assert set(lower_cmd.STAGE_FILES) == set(records.STAGES) | set(records.GRAPH_STAGES)
    assert lower_cmd.MAX_RUNS == api.MAX_RUNS


def test_check_options_in_process_refuses_what_preflight_refuses():
    """`run` calls it again (in-process runs skip the preflight); a default namespace passes."""
    from tflab.commands.lower_cmd import check_options
    from tflab.errors import UsageError

    ok = argparse.Namespace(path="xla", cause=False, passes=False, stage=[], runs=20)
    check_options(ok)
    for bad in ({"path": "graph", "stage": ["hlo"]}, {"runs": 0}, {"runs": 10**9}):
        with pytest.raises(UsageError):
            check_options(argparse.Namespace(**{**vars(ok), **bad}))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["lower", "--help"]])
def test_help_or_version_to_a_full_device_is_one_line_not_exit_0(work, argv):
    import subprocess
    import sys

    from tests.commands.test_cli_preflight import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "tflab", *argv], stdout=full, stderr=subprocess.PIPE, text=True,
                           env=env, timeout=60)
    assert p.returncode == 2 and p.stderr.splitlines() == [
        "tflab: error: could not write to stdout: No space left on device"], p.stderr
    ok = subprocess.run([sys.executable, "-m", "tflab", *argv], capture_output=True, text=True, env=env, timeout=60)
    assert ok.returncode == 0 and ok.stdout and not ok.stderr  # healthy twin: a writable stdout


def test_help_to_a_reader_that_left_is_quiet_141(work):
    """Sibling: the write fails with EPIPE (the reader went away), which is 141 without a line, as for verbs."""
    import subprocess
    import sys

    from tests.commands.test_cli_preflight import REPO

    r, w = os.pipe()
    os.close(r)  # no reader left
    try:
        p = subprocess.run([sys.executable, "-m", "tflab", "--help"], stdout=w, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, ""), p.stderr
