"""The tour's second process (`tflab._tour.lane`): the sections it runs state what one process states.

steps 6 and 7–8 run in a second process from the tour's start, on
the model as steps 2 and 4 leave it (their training steps replayed there). A
user's small model keeps these tests to seconds; the full tour's facts are
compared with the stored ones in tests/tour/test_tour_speed.py.
"""

from __future__ import annotations

import pytest


def _modes_facts(report: dict) -> dict:
    from tflab._tour.facts import report_facts

    facts = report_facts(report)
    return {"keys": [k for k in facts["keys"] if k.startswith("modes.")],
            "verdicts": {k: v for k, v in facts["verdicts"].items() if k.startswith("modes.")}}


def test_the_lane_runs_step_6_with_the_facts_one_process_states(small_keras_file, tmp_path, monkeypatch, capsys):
    from tflab.tour import run_tour

    lane = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "lane"),
                    only=["s02_retrace", "s06_modes"])
    printed = capsys.readouterr().out
    # It ran there, after replaying step 2's first two training steps (of the batches step 2 reports).
    assert lane["second_process"]["sections"] == ["s06_modes"]
    assert lane["retrace"]["batch_sizes"] == [4, 4, 2]
    assert lane["second_process"]["training_batches_replayed"] == lane["retrace"]["batch_sizes"][:2]
    assert "failure" not in lane["second_process"]
    # Its text is printed in its place, after step 2's.
    assert printed.index("== Step 2") < printed.index("== Step 6") < printed.index("forward graph:")
    monkeypatch.setenv("TFLAB_TOUR_LANE", "0")
    alone = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "alone"),
                     only=["s02_retrace", "s06_modes"])
    assert "second_process" not in alone
    facts = _modes_facts(lane)
    assert facts["keys"] and facts == _modes_facts(alone)


def test_a_lane_that_fails_leaves_its_sections_to_the_tour(small_keras_file, tmp_path, monkeypatch, capsys):
    import tflab._tour.lane as lane_module
    from tflab.tour import run_tour

    monkeypatch.setattr(lane_module, "LANE_MODULE", "tflab._tour.no_such_lane")
    report = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "t"), only=["s06_modes"])
    assert "No module named tflab._tour.no_such_lane" in report["second_process"]["failure"]
    assert "sections" not in report["second_process"]
    # The tour ran step 6 itself: the same report entry and text.
    assert report["modes"]["forward"]["modes"]["graph"]["error"] is None
    assert "forward graph:" in capsys.readouterr().out
    assert not any((tmp_path / "t").parent.glob(".t.tmp-*"))  # committed, nothing left beside it


def test_the_replay_trains_on_every_batch_steps_2_and_4_train_on(small_keras_file, tmp_path, monkeypatch):
    """If step 2 or 4 trained on other batches, the lane's model would not be the one they leave."""
    import keras
    import numpy as np

    from tflab._tour.lane import replay_training
    from tflab.tour import run_tour

    monkeypatch.setenv("TFLAB_TOUR_LANE", "0")
    report = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "t"),
                      only=["s02_retrace", "s04_stabilize"], quiet=True)
    model = keras.models.load_model(small_keras_file)
    before = [v.numpy().copy() for v in model.trainable_variables]
    sizes = replay_training(model, ["s02_retrace", "s04_stabilize"], steps=None)
    assert sizes == report["retrace"]["batch_sizes"] + report["stabilize"]["train_step"]["batch_sizes"]
    assert sizes == [4, 4, 2, 4, 4, 2, 3]
    # What the lane runs by default: the first two of them (EXPORT_TRAINING_STEPS).
    assert replay_training(keras.models.load_model(small_keras_file), ["s02_retrace", "s04_stabilize"]) == [4, 4]
    # Each step really trained: every weight moved.
    assert all(not np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables))
    assert replay_training(model, ["s01_trace"]) == []


@pytest.mark.parametrize("names, expected", [
    (["s01_trace", "s06_modes", "s07_export", "s09_custom_op"], ["s06_modes", "s07_export"]),
    (["s02_retrace", "s04_stabilize"], []),
])
def test_which_sections_go_to_the_lane(names, expected, monkeypatch):
    from tflab._tour.lane import lane_sections

    assert lane_sections(names) == expected
    monkeypatch.setenv("TFLAB_TOUR_LANE", "0")
    assert lane_sections(names) == []


def test_only_names_sections_by_module_and_refuses_others(tmp_path):
    """only=[6, 7] ran nothing and wrote an empty report."""
    from tflab.errors import UsageError
    from tflab.tour import run_tour

    for only in (["6", "7"], ["modes"], "s06_modes", [6]):
        with pytest.raises(UsageError, match="s06_modes"):
            run_tour(out_dir=str(tmp_path / "t"), only=only)
    assert not (tmp_path / "t").exists()


def test_a_lane_whose_tour_is_already_gone_exits_at_once(tmp_path):
    """A tour SIGKILLed before the lane read its parent left the lane
    exporting for 30 min under init. The tour's pid comes in argv; another parent: exit 124."""
    import subprocess
    import sys
    import time

    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tflab._tour.lane", "1", str(tmp_path / "out"),
                           str(tmp_path / "notes"), str(tmp_path), "", "", "", "s06_modes"], timeout=120)
    assert proc.returncode == 124 and time.perf_counter() - t < 60
    assert not (tmp_path / "notes").exists()  # it built no model, ran no section


@pytest.mark.parametrize("in_lane, isolate", [(True, False), (False, True)])
def test_steps_7_8_convert_in_the_lane_itself_and_in_workers_elsewhere(in_lane, isolate, tmp_path, monkeypatch):
    """In the second process the TFLite variants convert in that process (it is the
    isolation: a converter abort ends it and the tour reruns steps 7–8 itself, in worker processes);
    in the tour's own process they convert in workers as before."""
    import tflab.export
    from tflab._tour import s07_export
    from tflab._tour.context import TourContext

    seen = {}

    class Stop(Exception):
        pass

    def fake_export(model, out, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(tflab.export, "export_model", fake_export)
    ctx = TourContext(model=object(), model_source="default", out_dir=tmp_path, report={},
                      progress_line=lambda m: None, quiet=True, in_second_process=in_lane)
    with pytest.raises(Stop):
        s07_export.run(ctx)
    assert seen["isolate"] is isolate
