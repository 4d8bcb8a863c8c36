"""`tflab.process.xla_probe`: the XLA_FLAGS probe child runs for the user's flags, not for tflab's own dump flags.

The tour's second process is started with ``XLA_FLAGS=... --xla_dump_to=DIR --xla_dump_hlo_as_text``
(`tflab.lowering.tour.lane_env`); its step 6 asked a child process (one TF import, ~3 CPU-s) to try
those flags before the first compile. The words tflab appended are its own and parse; the user's
part of the variable is still tried.
"""

from __future__ import annotations

import subprocess

import pytest

from tflab.errors import UsageError
from tflab.process import xla_probe

BOGUS = "--xla_hostile_bogus_flag=1"


@pytest.fixture
def probes(monkeypatch):
    """The argv of every probe child `check_xla_flags` starts (a fresh cache, outside a supervisor)."""
    runs = []
    real = subprocess.run
    monkeypatch.setattr(xla_probe, "_XLA_PROBED", {})
    monkeypatch.setattr(xla_probe, "supervised", lambda: False)
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: runs.append(a) or real(*a, **k))
    return runs


def test_tflabs_own_dump_flags_start_no_probe_and_the_users_flags_are_kept(tmp_path, monkeypatch, probes):
    folder = tmp_path / "xla_dump"
    own = xla_probe.dump_flags(folder)
    monkeypatch.setenv("TFLAB_TOUR_XLA_DUMP", str(folder))
    monkeypatch.setenv("XLA_FLAGS", own)
    assert xla_probe.users_xla_flags() == ""
    xla_probe.check_xla_flags()
    assert probes == []  # nothing of the user's to try
    # The user's part before tflab's words is what is tried, and the child sees the whole variable.
    monkeypatch.setenv("XLA_FLAGS", f"--xla_cpu_use_thunk_runtime=true {own}")
    assert xla_probe.users_xla_flags() == "--xla_cpu_use_thunk_runtime=true"


def test_a_bad_user_flag_beside_tflabs_dump_flags_is_still_refused(tmp_path, monkeypatch, probes):
    folder = tmp_path / "xla_dump"
    monkeypatch.setenv("TFLAB_TOUR_XLA_DUMP", str(folder))
    monkeypatch.setenv("XLA_FLAGS", f"{BOGUS} {xla_probe.dump_flags(folder)}")
    with pytest.raises(UsageError, match=r"bad XLA_FLAGS: 'F\d{4} .*Unknown flag in XLA_FLAGS: " + BOGUS):
        xla_probe.check_xla_flags()
    assert len(probes) == 1


def test_dump_words_that_are_not_the_ones_tflab_set_are_probed(tmp_path, monkeypatch, probes):
    """The same words naming another folder, or a folder with a space (two words to XLA), are the user's."""
    folder = tmp_path / "xla_dump"
    monkeypatch.setenv("TFLAB_TOUR_XLA_DUMP", str(folder))
    monkeypatch.setenv("XLA_FLAGS", xla_probe.dump_flags(tmp_path / "elsewhere"))
    assert xla_probe.users_xla_flags() == xla_probe.dump_flags(tmp_path / "elsewhere")
    spaced = tmp_path / "a folder"
    monkeypatch.setenv("TFLAB_TOUR_XLA_DUMP", str(spaced))
    monkeypatch.setenv("XLA_FLAGS", xla_probe.dump_flags(spaced))
    assert xla_probe.users_xla_flags() == xla_probe.dump_flags(spaced)
    monkeypatch.delenv("TFLAB_TOUR_XLA_DUMP")
    monkeypatch.setenv("XLA_FLAGS", xla_probe.dump_flags(folder))
    assert xla_probe.users_xla_flags() == xla_probe.dump_flags(folder)


# ------------------------------------------------------------------ the user's dump folders stay the user's

def test_private_dumps_env_sends_every_user_dump_to_tflabs_folder(tmp_path):
    """A child tflab starts compiles copies of the user's function: with the user's ``--xla_dump_to=D`` it
    wrote its modules into D. Every dump destination is replaced by a private folder; the flags that may
    change the numbers are kept as they are."""
    private = tmp_path / "private"
    env = xla_probe.private_dumps_env(
        {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true --xla_dump_to=/u/dumps --xla_dump_hlo_as_text",
         "TF_DUMP_GRAPH_PREFIX": "/u/graphs"}, private)
    assert "/u/" not in env["XLA_FLAGS"] and "/u/" not in env["TF_DUMP_GRAPH_PREFIX"]
    assert env["XLA_FLAGS"].startswith("--xla_cpu_enable_fast_math=true")
    assert env["XLA_FLAGS"].endswith(f"--xla_dump_to={private}/xla")
    assert env["TF_DUMP_GRAPH_PREFIX"].startswith(str(private))
    # Siblings: a quoted folder with a space, and a dump flag with no folder (XLA then dumps to stdout).
    quoted = xla_probe.private_dumps_env({"XLA_FLAGS": '--xla_dump_to="/u/my dumps" --xla_dump_hlo_as_proto'},
                                         private)["XLA_FLAGS"]
    assert "/u/" not in quoted and quoted.endswith(f"--xla_dump_to={private}/xla")
    bare = xla_probe.private_dumps_env({"XLA_FLAGS": "--xla_dump_hlo_as_text"}, private)["XLA_FLAGS"]
    assert bare == f"--xla_dump_hlo_as_text --xla_dump_to={private}/xla"
    # The healthy twin: no dump asked, nothing changed.
    plain = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=true", "PATH": "/bin"}
    assert xla_probe.private_dumps_env(plain, private) == plain


def test_the_flags_probe_child_does_not_dump_into_the_users_folder(tmp_path, monkeypatch):
    """The API's probe of the flags compiles ``x + 1`` under the user's XLA_FLAGS: its module went into the
    user's dump folder. It runs with `private_dumps_env` (its environment seen here, no child started)."""
    seen = {}

    class Done:
        returncode, stderr = 0, ""

    monkeypatch.setattr(xla_probe, "_XLA_PROBED", {})
    monkeypatch.setattr(xla_probe, "supervised", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to={tmp_path / 'mine'} --xla_dump_hlo_as_text")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: seen.update(k) or Done())
    xla_probe.check_xla_flags()
    assert str(tmp_path / "mine") not in seen["env"]["XLA_FLAGS"]
    assert "--xla_dump_hlo_as_text" in seen["env"]["XLA_FLAGS"]
