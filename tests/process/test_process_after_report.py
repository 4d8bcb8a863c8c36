"""What a user's function leaves behind (a non-daemon thread, a blocking atexit handler) does not keep
the verb from ending once its report is out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOSTILE = textwrap.dedent("""
    import atexit, threading, time

    def nondaemon(x):
        threading.Thread(target=time.sleep, args=(4323,), daemon=False).start()
        return x * 2.0

    def blocking_atexit(x):
        atexit.register(time.sleep, 4324)
        return x * 2.0

    def both(x):
        return blocking_atexit(nondaemon(x))
""")


@pytest.mark.parametrize("func", ["both"])
def test_verb_ends_after_its_report(tmp_path, func):
    """`tflab inspect` printed the whole report, then never exited (killed at 90 s), for a function that
    starts a non-daemon thread and for one that registers a blocking atexit handler (one run: either alone
    hangs the old child)."""
    (tmp_path / "hostile.py").write_text(HOSTILE)
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TFLAB_IN_PROCESS", None)
    p = subprocess.run([sys.executable, "-m", "tflab", "inspect", f"hostile.py:{func}", "--arg", "x=float32[2]"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith(f"FuncGraph of {func}"), (p.returncode, p.stderr[-500:])
