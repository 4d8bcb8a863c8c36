"""The sweep covers the whole folder, and every file tflab opens is probed first (never blocks on a FIFO)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tflab.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _temp(folder: Path, name: str, owner: str | None) -> Path:
    d = folder / name
    d.mkdir()
    (d / "payload.bin").write_bytes(b"x" * 1000)
    if owner is not None:
        (d / ".tflab-owner").write_text(owner)
    return d


@pytest.fixture
def leftovers(tmp_path):
    from tflab._io.paths import _start_time

    me = f"{os.getpid()} {_start_time(os.getpid())}\n"
    dead = f"{_dead_pid()} 1\n"
    return {
        "other_name_dead": _temp(tmp_path, ".run1.tmp-abc123", dead),  # killed `export --out run1`
        "lowering_dead": _temp(tmp_path, ".lo.tmp-zz", dead),           # killed `lower --out lo`
        "running": _temp(tmp_path, ".run3.tmp-live", me),               # a run still going: kept
        "not_tflab": _temp(tmp_path, ".mine.tmp-notes", None),          # no owner file: kept
        "plain": _temp(tmp_path, "run1", None),                         # the user's folder: kept
    }


def test_folder_output_sweeps_every_dead_temp_folder_of_the_folder(tmp_path, leftovers):
    """After `export --out run1` is SIGKILLed, `export --out run2` left `.run1.tmp-*` for ever: only its own
    NAME's were swept."""
    from tflab._io.paths import output_path

    output_path(tmp_path / "run2", "--out", folder=True, exclusive=True)
    assert not leftovers["other_name_dead"].exists() and not leftovers["lowering_dead"].exists()
    assert all(leftovers[k].exists() for k in ("running", "not_tflab", "plain"))


def test_file_output_sweeps_its_folder_too(tmp_path, leftovers):
    """Sibling: a file output (``--html``) into the folder sweeps it as well."""
    from tflab._io.paths import output_path

    output_path(tmp_path / "page.html", "--html")
    assert not leftovers["other_name_dead"].exists()
    assert all(leftovers[k].exists() for k in ("running", "not_tflab", "plain"))


def test_system_temp_sweep_covers_every_tflab_prefix(tmp_path):
    """``$TMPDIR/tflab_*``: a new tflab_lower_* folder sweeps a killed run's tflab_tmp_* (not only its prefix)."""
    from tflab._io.paths import _start_time, owned_temp_dir

    dead = _temp(tmp_path, "tflab_tmp_killed", f"{_dead_pid()} 1\n")
    live = _temp(tmp_path, "tflab_export_live", f"{os.getpid()} {_start_time(os.getpid())}\n")
    other = _temp(tmp_path, "tflabish_dead", f"{_dead_pid()} 1\n")  # not tflab's prefix: kept
    new = owned_temp_dir("tflab_lower_", dir=tmp_path)
    assert not dead.exists() and live.exists() and other.exists() and new.exists()


# ------------------------------------------------------------------ probing before opening

def test_open_regular_refuses_a_fifo_at_once_for_reading_and_writing(tmp_path):
    """open() of a FIFO without a peer blocked export and build-op for ever."""
    from tflab._io.path_checks import open_regular, read_regular

    os.mkfifo(tmp_path / "f")
    t = time.monotonic()
    with pytest.raises(UsageError, match="is a FIFO, not a regular file"):
        read_regular(tmp_path / "f", what="x")
    with pytest.raises(UsageError, match="is a FIFO, not a regular file"):
        open_regular(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(UsageError, match="character device"):
        read_regular("/dev/zero")
    assert time.monotonic() - t < 2
    (tmp_path / "r").write_bytes(b"ok")
    assert read_regular(tmp_path / "r") == b"ok"  # healthy twin, and reads block normally again
    fd = open_regular(tmp_path / "new", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    assert (tmp_path / "new").is_file()


@pytest.mark.parametrize("name", ["saved_model.pb", os.path.join("variables", "variables.index")])
def test_saved_model_files_are_judged_before_tf_opens_them(tmp_path, name):
    """saved_model.pb a FIFO: export hung; check-tflite said "a folder without saved_model.pb" (the file is
    there). Sibling: variables.index."""
    from tflab._io.path_checks import check_saved_model_files
    from tflab.saved_model.loading import require_saved_model_dir

    sm = tmp_path / "sm"
    (sm / "variables").mkdir(parents=True)
    (sm / "saved_model.pb").write_bytes(b"")
    (sm / "variables" / "variables.index").write_bytes(b"")
    check_saved_model_files(sm, "MODEL")  # healthy twin
    os.remove(sm / name)
    os.mkfifo(sm / name)
    with pytest.raises(UsageError, match=f"{os.path.basename(name)} is a FIFO, not a regular file"):
        check_saved_model_files(sm, "MODEL")
    with pytest.raises(UsageError, match="is a FIFO"):
        require_saved_model_dir(sm, "SAVED_MODEL")


def _cli(cwd, *argv, env=None):
    e = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    e.pop("TFLAB_IN_PROCESS", None)
    return subprocess.run([sys.executable, "-m", "tflab", *argv], cwd=cwd, env=e, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)


def test_cli_names_a_fifo_saved_model_pb_before_tf(tmp_path):
    (tmp_path / "sm").mkdir()
    os.mkfifo(tmp_path / "sm" / "saved_model.pb")
    (tmp_path / "m.tflite").write_bytes(b"\0" * 64)
    for argv in (["export", "sm", "--quantize", "none", "--out", "o"], ["check-tflite", "m.tflite", "sm"]):
        p = _cli(tmp_path, *argv)
        assert p.returncode == 2 and "saved_model.pb is a FIFO" in p.stderr and len(p.stderr.splitlines()) == 1, \
            p.stderr


def test_build_op_fifo_lock_and_manifest_are_refused_not_waited_on(tmp_path, monkeypatch):
    """a FIFO named .lock in the build cache hung `tflab build-op` (its open blocked for a writer)."""
    from custom_ops.build import BuildError, build

    monkeypatch.setenv("TFLAB_CUSTOM_OPS_BUILD_DIR", str(tmp_path))
    os.mkfifo(tmp_path / ".lock")
    with pytest.raises(BuildError, match=r"\.lock in .* is a FIFO, not a regular file"):
        build(cuda=False)
    os.remove(tmp_path / ".lock")
    so = next(iter(tmp_path.glob("*.so")), None)
    assert so is None  # nothing was built or waited on
