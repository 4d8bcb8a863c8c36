"""What a report records is true: paths are the published paths, and XLA_FLAGS is the user's own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_published_path_follows_nested_temporary_folders(tmp_path):
    from tflab._io.paths import published_path, register_publication

    tour_tmp, export_tmp = tmp_path / ".tour.tmp-ab12", tmp_path / ".tour.tmp-ab12" / ".export.tmp-cd34"
    register_publication(tour_tmp, tmp_path / "tour")
    register_publication(export_tmp, tour_tmp / "export")
    assert published_path(export_tmp / "saved_model") == tmp_path / "tour" / "export" / "saved_model"
    assert published_path(tour_tmp) == tmp_path / "tour"
    assert published_path("o/run1") == Path("o/run1")  # healthy twin: under no temporary folder, as given
    assert published_path(tmp_path / ".tour.tmp-ab123") == tmp_path / ".tour.tmp-ab123"  # a prefix is not a parent


def test_export_inside_a_tour_folder_records_the_published_path(tmp_path):
    """The tour's export report.json said "out": "cli/.tour_tiny.tmp-n6crg00z/export", a folder that no longer
    exists after the tour publishes its --out."""
    import tflab
    from tflab._tour.context import TourContext

    tour_tmp = tmp_path / ".tour.tmp-xyz"
    tour_tmp.mkdir()
    TourContext(model=None, model_source="default", out_dir=tour_tmp, report={}, progress_line=None,
                final_dir=tmp_path / "tour")  # what the tour and its second process each make
    report = tflab.export_model(str(REPO / "tests/data/export/models.py:dense16"), tour_tmp / "export",
                                quantize=["none"], isolate=False, keep_float=False)
    final = tmp_path / "tour" / "export"
    assert Path(report.out) == final and Path(report.saved_model.path) == final / "saved_model"
    written = json.loads((tour_tmp / "export" / "report.json").read_text())
    assert Path(written["out"]) == final


@pytest.fixture
def own_dump(tmp_path):
    from tflab.process import xla_probe

    folder = tmp_path / "tflab_lower_x" / "xla_dump"
    xla_probe.note_own_dump(folder)
    yield folder
    xla_probe.note_own_dump(None)


def test_xla_flags_recorded_are_the_users_own(own_dump, monkeypatch):
    """`tflab lower` recorded XLA_FLAGS='--xla_dump_to=<TMPDIR>/tflab_lower_…/xla_dump --xla_dump_hlo_as_text' in
    a shell where XLA_FLAGS was unset."""
    from tflab.process.xla_probe import dump_flags, split_own_flags
    from tflab.runtime import runtime_config

    assert split_own_flags(dump_flags(own_dump)) == (None, dump_flags(own_dump))
    mixed = f"--xla_cpu_enable_fast_math=false {dump_flags(own_dump)}"
    assert split_own_flags(mixed) == ("--xla_cpu_enable_fast_math=false", dump_flags(own_dump))
    monkeypatch.setenv("XLA_FLAGS", dump_flags(own_dump))
    config = runtime_config()
    assert config.xla_flags is None and config.tflab_xla_flags == dump_flags(own_dump)
    assert "XLA_FLAGS unset" in config.one_line() and "tflab's own XLA dump flags" in config.one_line()


def test_tour_second_process_dump_flags_are_tflabs(tmp_path, monkeypatch):
    """Sibling: the tour's second process gets its dump folder through TFLAB_TOUR_XLA_DUMP."""
    from tflab.process.xla_probe import dump_flags, split_own_flags

    monkeypatch.setenv("TFLAB_TOUR_XLA_DUMP", str(tmp_path / "d"))
    assert split_own_flags(f"--xla_backend_optimization_level=1 {dump_flags(tmp_path / 'd')}") == (
        "--xla_backend_optimization_level=1", dump_flags(tmp_path / "d"))


def test_users_own_dump_flags_stay_the_users(own_dump):
    """Healthy twin: a dump folder the user chose is theirs, recorded as their XLA_FLAGS."""
    from tflab.process.xla_probe import split_own_flags

    mine = "--xla_dump_to=/home/me/dumps --xla_dump_hlo_as_text"
    assert split_own_flags(mine) == (mine, None)
