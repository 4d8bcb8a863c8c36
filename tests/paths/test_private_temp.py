"""A verb's processes get a private TMPDIR (`tflab._io.paths.private_temp_dir`): what they leave there goes too.

TF's AutoGraph writes each converted function to ``$TMPDIR/__autograph_generated_file*.py`` and
deletes it only at a normal exit, so a SIGKILLed ``tflab tour`` left them in the user's TMPDIR
(``tests/tour/test_tour_hostile.py`` one once the tour's timing moved). The supervisor
now starts the verb's child with ``TMPDIR`` = an owned ``tflab_tmp_*`` folder, removes it when the
child is gone and sweeps it in a later run after a SIGKILL; tflab's own folders stay in the user's
TMPDIR (``TFLAB_SYSTEM_TMPDIR``), where the sweeps look.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

USER = textwrap.dedent("""\
    import os, tempfile, time
    def f(x):
        mark = os.path.join(os.environ["MARK_DIR"], "where.txt")
        if not os.path.exists(mark):
            fd, name = tempfile.mkstemp(prefix="left_by_user_code_", suffix=".py")  # as AutoGraph does
            os.close(fd)
            with open(mark + ".part", "w") as out:
                out.write(name)
            os.replace(mark + ".part", mark)
        if os.environ.get("HANG"):
            time.sleep(600)
        return x * 2.0
    """)


def _tflab(tmp_path: Path, *args: str, hang: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path / "tmp"),
           "MARK_DIR": str(tmp_path)}
    for name in ("TFLAB_IN_PROCESS", "TFLAB_SYSTEM_TMPDIR", "HANG"):
        env.pop(name, None)
    if hang:
        env["HANG"] = "1"
    return subprocess.Popen([sys.executable, "-m", "tflab", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)


def test_a_verbs_temporary_files_go_with_its_private_folder(tmp_path):
    (tmp_path / "tmp").mkdir()
    (tmp_path / "u.py").write_text(USER)
    proc = _tflab(tmp_path, "inspect", f"{tmp_path / 'u.py'}:f", "--arg", "x=float32[2]")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    left = Path((tmp_path / "where.txt").read_text())
    # The file was made in the verb's private folder, inside the user's TMPDIR, and went with it.
    assert left.parent.parent == tmp_path / "tmp" and left.parent.name.startswith("tflab_tmp_"), left
    assert not left.exists() and os.listdir(tmp_path / "tmp") == []


def test_after_a_sigkill_the_next_run_sweeps_the_private_folder(tmp_path):
    (tmp_path / "tmp").mkdir()
    (tmp_path / "u.py").write_text(USER)
    proc = _tflab(tmp_path, "inspect", f"{tmp_path / 'u.py'}:f", "--arg", "x=float32[2]", hang=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "where.txt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    left = Path((tmp_path / "where.txt").read_text())
    os.kill(proc.pid, signal.SIGKILL)  # the supervisor; its child dies with it (PR_SET_PDEATHSIG)
    proc.communicate(timeout=60)
    time.sleep(1.0)
    assert left.exists()  # nothing could remove it yet
    again = _tflab(tmp_path, "env")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert "removed 1 temporary folder(s) left by a run that was killed" in err, err  # the private folder
    assert not left.exists() and os.listdir(tmp_path / "tmp") == []



def test_a_fifo_or_a_link_named_like_an_owner_file_is_not_read(tmp_path):
    """`mkfifo /tmp/tflab_x/.tflab-owner` hung every tflab command (the sweep read it)."""
    from tflab._io.paths import OWNER, owner_gone, sweep_stale

    fifo_dir = tmp_path / "tflab_fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / OWNER)
    link_dir = tmp_path / "tflab_link"
    link_dir.mkdir()
    (tmp_path / "elsewhere").write_text("999999999 ?")
    (link_dir / OWNER).symlink_to(tmp_path / "elsewhere")
    dead = tmp_path / "tflab_dead"  # healthy: a real owner file naming a process that is gone is swept
    dead.mkdir()
    (dead / OWNER).write_text("999999999 ?")
    t0 = time.monotonic()
    assert owner_gone(fifo_dir) is None and owner_gone(link_dir) is None
    removed = sweep_stale(tmp_path, "tflab_", say=lambda line: None)
    assert time.monotonic() - t0 < 5
    assert removed == [dead] and fifo_dir.exists() and link_dir.exists()
