"""What the user's code does to the verb's own process: closing tflab's file descriptors, and a SIGINT it sends
itself. Both ended as tflab's crash (exit 70) or as a Ctrl-C (exit 130); both are now the user's, in one line.

The supervisor (`tflab.process.supervisor.run_child`) drives small Python children that open the same
`ChildChannel` the verbs' child opens and end the way `tflab.cli.main` does (the verb's report on
``sys.stdout``, a ``KeyboardInterrupt`` judged by `tflab.commands.endings.user_keyboard_interrupt`), so
nothing here loads TensorFlow.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}

_CHILD = """
import sys, types
from tflab.process.supervisor import ChildChannel
from tflab.errors import TflabError
import tflab.process.child_end as child_end
child_end.NOTICE_WAIT_S = 0.3  # the supervisor notes a SIGINT within milliseconds; the tests need not wait 2 s
channel = ChildChannel.open()
channel.ready()
try:
    def user_code():
{body}
    user_code()
    print("report: f traced")
    code = 0
except KeyboardInterrupt as e:
    from tflab.commands.endings import user_keyboard_interrupt
    code = user_keyboard_interrupt("inspect", types.SimpleNamespace(target="u.py:f"), e)
    if code is None:
        print("tflab inspect: interrupted", file=sys.stderr)
        code = 130
except TflabError as e:
    print(f"tflab inspect: error: {{e}}", file=sys.stderr)
    code = 2
sys.exit(channel.finish(code, "inspect"))
"""


def _supervise(body: str, tmp_path: Path, *, same_group: bool = False, signal_parent_on: str = "",
               timeout: float = 60) -> tuple[int, str, str]:
    """Runs a child whose "user code" is ``body`` under `run_child`, in a fresh session.

    Args:
        same_group: the child shares the supervisor's process group, as under a terminal's foreground.
        signal_parent_on: a file the child's code creates; once it exists the test sends SIGINT to the
            supervisor's whole process group (a terminal's Ctrl-C) or to the supervisor alone.

    Returns:
        (the supervisor's exit code, its stdout, its stderr).
    """
    child = tmp_path / "child.py"
    child.write_text(_CHILD.format(body=textwrap.indent(textwrap.dedent(body), " " * 8)))
    sup = textwrap.dedent(f"""
        import sys
        from tflab.process import supervisor as s
        s._terminal_foreground = lambda: {same_group}
        end = s.run_child([sys.executable, {str(child)!r}], reap_orphans=True)
        code, line = s.describe_end(end)
        if line:
            print(line, file=sys.stderr)
        sys.exit(code)
    """)
    p = subprocess.Popen([sys.executable, "-c", sup], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL, cwd=tmp_path, start_new_session=True)
    if signal_parent_on:
        flag = tmp_path / signal_parent_on
        import time

        deadline = time.monotonic() + timeout
        while not flag.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.02)
        if same_group:
            os.killpg(p.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole foreground group
        else:
            os.kill(p.pid, signal.SIGINT)  # kill -INT of tflab
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


# ------------------------------------------------------------------ file descriptors

def test_closing_other_fds_keeps_the_report(tmp_path):
    """The handed case: `for fd in range(3, 50): os.close(fd)` closed tflab's report pipe; tflab's own
    write then raised EBADF and the run ended as a crash (exit 70, a traceback). The pipes now sit near
    the top of the descriptor range: the report comes out whole."""
    code, out, err = _supervise("""
        import os
        for fd in range(3, 50):
            try:
                os.close(fd)
            except OSError:
                pass
    """, tmp_path)
    assert (code, out) == (0, "report: f traced\n"), err
    assert "Traceback" not in err


def test_closing_every_fd_and_reusing_the_numbers_is_the_users_one_line(tmp_path):
    """A sibling the handed case does not name: `os.closerange(3, 65536)` reaches tflab's pipes too, and
    files the code then opens take their numbers. The report must not be written into the user's file;
    the run ends with one line naming the user's doing, exit 2, never 70."""
    mine = tmp_path / "mine.txt"
    code, out, err = _supervise(f"""
        import os
        os.closerange(3, 65536)
        fds = [os.open({str(mine)!r}, os.O_WRONLY | os.O_CREAT) for _ in range(64)]
    """, tmp_path)
    assert code == 2, err
    assert out == ""
    assert mine.read_text() == ""  # nothing of tflab's landed in the user's file
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "your code closed" in lines[0] and "report" in lines[0], err


def test_closing_fd_2_keeps_tflabs_error_line(tmp_path):
    """Another sibling: `os.close(2)` then a KeyboardInterrupt of the user's code: tflab's one line still
    reaches stderr (its own copy of fd 2)."""
    code, out, err = _supervise("""
        import os
        os.close(2)
        raise KeyboardInterrupt
    """, tmp_path)
    assert code == 2, err
    assert "no Ctrl-C came" in err


def test_closing_only_its_own_fds_is_healthy(tmp_path):
    """The healthy twin: code that opens and closes its own files ends with its report, exit 0."""
    code, out, err = _supervise(f"""
        import os
        fd = os.open({str(tmp_path / 'own.txt')!r}, os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"mine")
        os.close(fd)
    """, tmp_path)
    assert (code, out, err) == (0, "report: f traced\n", "")


# ------------------------------------------------------------------ SIGINT

def test_sigint_the_code_sends_itself_is_the_users_not_ctrl_c(tmp_path):
    """The handed case: `os.kill(os.getpid(), SIGINT)` in the user's function ended as "interrupted", exit
    130, though no Ctrl-C came. The supervisor never received that SIGINT: exit 2, one line."""
    code, out, err = _supervise("""
        import os, signal, time
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    """, tmp_path)
    assert code == 2, err
    assert "SIGINT from inside the run" in err and "interrupted" not in err


def test_sigint_to_the_code_s_process_group_is_the_users_not_ctrl_c(tmp_path):
    """A sibling: `os.killpg(0, SIGINT)` reaches every process of the child's group, yet not tflab's."""
    code, out, err = _supervise("""
        import os, signal, time
        os.killpg(0, signal.SIGINT)
        time.sleep(5)
    """, tmp_path)
    assert code == 2, err
    assert "SIGINT from inside the run" in err


def test_real_ctrl_c_is_still_interrupted(tmp_path):
    """The healthy twins: a Ctrl-C from the terminal (SIGINT to the whole foreground group, child sharing
    it) and a `kill -INT` of tflab (forwarded to a child in its own group) both end as exit 130."""
    body = f"""
        import time
        open({str(tmp_path / 'started')!r}, "w").close()
        time.sleep(30)
    """
    code, out, err = _supervise(body, tmp_path, same_group=True, signal_parent_on="started")
    assert code == 130 and "interrupted" in err, err
    (tmp_path / "started").unlink()
    code, out, err = _supervise(body, tmp_path, same_group=False, signal_parent_on="started")
    assert code == 130 and "interrupted" in err, err
