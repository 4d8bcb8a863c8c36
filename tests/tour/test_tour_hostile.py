"""The tour killed with SIGKILL, then interrupted with Ctrl-C.

One tour on the small user model per step, signalled the moment its distribute lab's temporary
folder appears in ``$TMPDIR`` (no sleep: the folder is the cue). After the SIGKILL every process of
the tree is gone and the folders it left are swept by the next run, which says so in one line;
after the Ctrl-C (exit 130) nothing is left at all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _start(tmp_path: Path, model: Path | None, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path / "tmp")}
    env.pop("TFLAB_IN_PROCESS", None)
    model_args = ["--model", str(model)] if model is not None else []
    return subprocess.Popen([sys.executable, "-m", "tflab", "tour", *model_args, "--out", str(out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_for_lab_folder(tmp: Path, proc: subprocess.Popen, timeout: float = 300, old: Path | None = None) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # the folder is made first and its owner file written just after it: wait for both
        found = [p for p in tmp.iterdir() if p.name.startswith("tflab_distribute_") and p != old
                 and (p / ".tflab-owner").exists()]
        if found:
            return found[0]
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError("the tour's distribute lab never started")


@pytest.mark.slow
def test_tour_sigkilled_then_interrupted_leaves_nothing(tmp_path, small_keras_file):
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "o5" / "tour180"
    # SIGKILL of `tflab tour` left .tour180.tmp-*, tflab_tour_lane_*, tflab_distribute_* …
    proc = _start(tmp_path, small_keras_file, out)
    lab = _wait_for_lab_folder(tmp_path / "tmp", proc)
    owner = int((lab / ".tflab-owner").read_text().split()[0])
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 15  # the child: PR_SET_PDEATHSIG; the lane and the lab: the same
    while _alive(owner) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(owner)
    left = sorted(os.listdir(tmp_path / "tmp")) + sorted(os.listdir(out.parent))
    assert any(n.startswith("tflab_distribute_") for n in left), left  # nothing could remove them yet

    # Ctrl-C during the tour left $TMPDIR/tflab_distribute_* (0.json, 0.stderr); this run also sweeps.
    # It tours the default MobileNetV3Small: its sections outlast the lab's start by far, so the Ctrl-C
    # lands in them (on the small model a loaded machine started the lab as the tour was committing
    # its folder, and the tour, past the point where Ctrl-C stops it, ended 0).
    proc = _start(tmp_path, None, out)
    _wait_for_lab_folder(tmp_path / "tmp", proc, old=lab)
    assert not lab.exists()  # swept by this run's supervisor before its child started
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "removed" in err and "temporary folder(s) left by a run that was killed" in err, err
    assert os.listdir(tmp_path / "tmp") == [] and not out.exists()
    assert [n for n in os.listdir(out.parent) if n.startswith(".tour180.tmp-")] == []
