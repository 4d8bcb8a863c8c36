"""The one channel back from a helper process (`tflab.process.channel`): whole results or none.

Children here are small Python processes (no TensorFlow). "Killed mid-write"
is exact, not a race: the child's channel writes half of a file, flushes it
to disk and SIGKILLs itself, so the parent finds exactly what a kill in the
middle of that write leaves. Each check is shown to fail on a planted file
(a result written in place, a truncated or foreign side file).
"""

from __future__ import annotations

import fractions
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tflab.process.channel import ChannelError, Result, receive_result, result_ready, send_result

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}

# Run in a child before it sends: the NTH file the channel opens for writing gets half its bytes,
# flushed, and the child SIGKILLs itself (a kill in the middle of that write). Counting files, not
# matching names, keeps the kill where it is whatever names a (planted) writer uses.
KILL_MID_WRITE = textwrap.dedent("""
    import builtins, os, signal
    from tflab.process import channel

    _real_open = builtins.open
    _opened = [0]

    class _Half:
        def __init__(self, f):
            self.f = f
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def _open(path, mode="r", *args, **kwargs):
        f = _real_open(path, mode, *args, **kwargs)
        if "w" not in mode:
            return f
        _opened[0] += 1
        return _Half(f) if _opened[0] == NTH else f

    channel.open = _open
""")


def _child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], env=ENV, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_a_result_comes_back_whole_data_arrays_and_objects(tmp_path):
    path = tmp_path / "r"
    assert not result_ready(path)
    with pytest.raises(ChannelError, match=r"no result \(the child did not commit one\)"):
        receive_result(path)
    p = _child("import sys, fractions, numpy as np\n"
               "from tflab.process.channel import send_result\n"
               "send_result(sys.argv[1], data={'steps': [4, 4, 2], 'name': 'lab'},\n"
               "            arrays={'w': np.arange(6, dtype=np.float32).reshape(3, 2), 'b': np.array([1, 2], np.int8)},\n"
               "            objects={'ratio': fractions.Fraction(3, 7)})\n", str(path))
    assert p.returncode == 0, p.stderr
    assert result_ready(path)
    r = receive_result(path)
    assert isinstance(r, Result) and r.pid != os.getpid()
    assert r.data == {"steps": [4, 4, 2], "name": "lab"}
    assert r.arrays["w"].dtype == np.float32 and r.arrays["w"].tolist() == [[0, 1], [2, 3], [4, 5]]
    assert r.arrays["b"].dtype == np.int8 and r.arrays["b"].tolist() == [1, 2]
    assert r.objects == {"ratio": fractions.Fraction(3, 7)}
    # Nothing but the result and its two side files is left in the folder (no temporary name).
    assert sorted(os.listdir(tmp_path)) == ["r", "r.npz", "r.pickle"]


def test_a_value_that_is_not_json_publishes_nothing(tmp_path):
    with pytest.raises(TypeError):
        send_result(tmp_path / "r", data={"x": object()}, arrays={"w": np.zeros(3)})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("nth, left", [
    (1, {"tmp"}),                     # killed writing the arrays: only a temporary name
    (2, {"r.npz", "tmp"}),            # killed writing the objects: the arrays are in place, no result
    (3, {"r.npz", "r.pickle", "tmp"}),  # killed writing the result file itself: still no result
], ids=["in-arrays", "in-objects", "in-result-file"])
def test_a_child_killed_mid_write_leaves_no_result(tmp_path, nth, left):
    path = tmp_path / "r"
    p = _child(f"NTH = {nth}\n" + KILL_MID_WRITE +
               "import sys, numpy as np\n"
               "channel.send_result(sys.argv[1], data={'ok': True}, arrays={'w': np.ones(100000)},\n"
               "                    objects=['x'] * 1000)\n", str(path))
    assert p.returncode == -signal.SIGKILL, p.stderr
    found = {("tmp" if n.startswith(".") and ".tmp-" in n else n) for n in os.listdir(tmp_path)}
    assert found == left  # the half-written file is there, under its temporary name
    half = [n for n in os.listdir(tmp_path) if n.startswith(".")]
    assert len(half) == 1 and (tmp_path / half[0]).stat().st_size > 0
    assert not result_ready(path)
    with pytest.raises(ChannelError, match="no result"):
        receive_result(path)


def test_planted_a_result_written_in_place_and_cut_short_is_refused(tmp_path):
    """A writer without the commit rule (the result file written at its own name, killed halfway):
    the half file is refused, never read as data."""
    good = tmp_path / "good"
    send_result(good, data={"rows": list(range(50))})
    whole = good.read_bytes()
    cut = tmp_path / "cut"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ChannelError, match=r"cut: not a tflab result \(\d+ bytes; expected a tflab-result/1"):
        receive_result(cut)
    (tmp_path / "plain").write_text(json.dumps({"rows": [1]}))  # JSON, but not through the channel
    with pytest.raises(ChannelError, match="not a tflab result"):
        receive_result(tmp_path / "plain")
    assert receive_result(good).data == {"rows": list(range(50))}  # healthy: the whole file reads


def test_planted_a_side_file_that_is_not_the_results_is_refused(tmp_path):
    path = tmp_path / "r"
    send_result(path, data=1, arrays={"w": np.arange(1000.0)}, objects=[1, 2])
    npz = tmp_path / "r.npz"
    whole = npz.read_bytes()
    npz.write_bytes(whole[:-10])  # truncated
    with pytest.raises(ChannelError, match=r"r: its r.npz does not match the result \(\d+ bytes, \d+ recorded\)"):
        receive_result(path)
    npz.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))  # same size, other bytes (an earlier attempt's)
    with pytest.raises(ChannelError, match="r.npz does not match"):
        receive_result(path)
    npz.write_bytes(whole)
    (tmp_path / "r.pickle").unlink()
    with pytest.raises(ChannelError, match="its r.pickle is missing"):
        receive_result(path)


# ------------------------------------------------------------------ the children that use it

def test_distribute_children_report_through_the_channel_and_a_half_report_is_named(tmp_path):
    from tflab.distribute import WorkerError
    from tflab.distribute.processes import run_children

    send = [sys.executable, "-c", "import os; from tflab.process.channel import send_result; "
            "send_result(os.environ['TFLAB_REPORT'], data={'task': 1, 'weights': [0.5]})"]
    assert run_children([("worker 1", send, {})], timeout=60) == [{"task": 1, "weights": [0.5]}]
    killed = [sys.executable, "-c", "NTH = 1\n" + KILL_MID_WRITE +
              "import os\nchannel.send_result(os.environ['TFLAB_REPORT'], data={'task': 0})\n"]
    with pytest.raises(WorkerError, match=r"^worker 0 \(pid \d+\) was killed by SIGKILL$"):
        run_children([("worker 0", killed, {})], timeout=60)
    # Planted: a child that writes its report in place, half of it, and exits 0.
    in_place = [sys.executable, "-c", "import os; open(os.environ['TFLAB_REPORT'], 'w').write('{\"format\": \"tfl')"]
    with pytest.raises(WorkerError, match=r"^worker 0 \(pid \d+\) exited 0 with a broken report \(.*not a tflab "
                                          r"result"):
        run_children([("worker 0", in_place, {})], timeout=60)
    silent = [sys.executable, "-c", "pass"]
    with pytest.raises(WorkerError, match=r"exited 0 without its report"):
        run_children([("worker 0", silent, {})], timeout=60)


def _stub_lane(tmp_path: Path, body: str) -> str:
    """A stand-in for ``python -m tflab._tour.lane`` (same argv): a module on PYTHONPATH."""
    (tmp_path / "stub_lane.py").write_text(
        "import sys\nparent, out, notes, out_dir, final_dir, model, training, *sections = sys.argv[1:]\n"
        + body)
    return "stub_lane"


def test_the_tours_second_process_hands_its_sections_back_through_the_channel(tmp_path, monkeypatch):
    import tflab._tour.lane as lane_module

    monkeypatch.setattr(lane_module, "LANE_MODULE", _stub_lane(tmp_path, textwrap.dedent("""
        from tflab.process.channel import send_result
        send_result(f"{out}.s06_modes", objects={"text": "== Step 6\\n", "seconds": 1.5, "report": {"modes": {}}})
        send_result(out, objects={"shared": {}, "training_steps": [4, 4, 2]})
    """)))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    lane = lane_module.Lane(["s06_modes"], tmp_path / "out", None, None)
    try:
        assert lane.result("s06_modes") == {"text": "== Step 6\n", "seconds": 1.5, "report": {"modes": {}}}
        assert lane.training_steps == [4, 4, 2] and lane.failure is None
    finally:
        lane.stop()


def test_a_second_process_killed_mid_write_is_a_failed_lane_not_a_half_record(tmp_path, monkeypatch):
    import tflab._tour.lane as lane_module

    monkeypatch.setattr(lane_module, "LANE_MODULE", _stub_lane(tmp_path, "NTH = 2\n" + KILL_MID_WRITE + (
        'channel.send_result(f"{out}.s06_modes", objects={"text": "x" * 100000, "seconds": 1.0, "report": {}})\n')))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    lane = lane_module.Lane(["s06_modes"], tmp_path / "out", None, None)
    try:
        assert lane.result("s06_modes") is None  # the tour runs the section itself
        assert lane.failure.startswith("exit -9"), lane.failure
    finally:
        lane.stop()


def test_the_loss_scaling_child_hands_its_demo_back_through_the_channel(tmp_path, monkeypatch):
    import tflab._tour.background as background

    (tmp_path / "stub_precision.py").write_text(
        "import sys, fractions\nfrom tflab.process.channel import send_result\n"
        "send_result(sys.argv[1], objects=fractions.Fraction(1, 3))\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    monkeypatch.setattr(background, "PRECISION_CHILD", "stub_precision")
    assert background.loss_scaling_demo() == fractions.Fraction(1, 3)
    (tmp_path / "stub_precision.py").write_text("NTH = 2\n" + KILL_MID_WRITE +
                                                "import sys\nchannel.send_result(sys.argv[1], objects='x' * 9999)\n")
    with pytest.raises(RuntimeError, match=r"^loss-scaling child exited -9"):
        background.loss_scaling_demo()
