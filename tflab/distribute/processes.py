"""The lab's and the workers' processes: started, bounded and stopped by `tflab.process.group.ChildGroup`.

Logical devices must be configured before TF initializes its context, so the
single-machine lab and each worker run in a fresh Python process
(``python -m tflab.distribute.child MODE``). `run_children` starts them in a
`ChildGroup` (the one supervisor: each child in its own process group, the
sticky SIGTERM handler, SIGTERM then SIGKILL and a reap on every exit path),
waits for all of them within one timeout, and receives each child's JSON report
through the one channel (`tflab.process.channel`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from typing import Callable, Sequence

from tflab.process.watch import watch_parent  # noqa: F401  (re-exported: the workers' own exit)
from tflab.errors import TflabError

_TFLAB_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class WorkerError(TflabError):
    """A worker process crashed, failed or ran past its timeout; the message names the worker."""


def pick_free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports free on ``host`` now (bound to port 0, then released).

    Another process may take a port between this call and the worker's
    bind; the worker then fails to start and `run_children` names it.
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tf_config(ports: Sequence[int], index: int, host: str = "127.0.0.1") -> dict:
    """The ``TF_CONFIG`` of worker ``index`` in a cluster of ``len(ports)`` workers on ``host``."""
    return {"cluster": {"worker": [f"{host}:{p}" for p in ports]},
            "task": {"type": "worker", "index": index}}


def worker_argv(mode: str) -> list[str]:
    """The command line of one child: ``python -m tflab.distribute.child MODE``."""
    return [sys.executable, "-m", "tflab.distribute.child", mode]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _last_line(path: str) -> str:
    from tflab.process.stderr import cause_line  # TF's log lines (cuInit …) are never the cause

    try:
        with open(path, errors="replace") as f:
            return cause_line(f.read())
    except OSError:
        return ""


OS_EXIT_MARK = "tflab-worker: os._exit"  # the worker's last stderr line when the user's code calls os._exit


def _exit_words(code: int, last: str) -> str:
    """How a worker ended, for the error line: the user's os._exit named as the other verbs do."""
    if last.startswith(OS_EXIT_MARK):
        n = last[len(OS_EXIT_MARK):].strip("() ")
        return (f"exited with status {code}: your code ended the process with os._exit({n}); "
                f"return or raise instead")
    return f"exited with status {code}" + (f": {last}" if last else "")


def _child_env(extra: dict) -> dict:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = _TFLAB_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("TF_CONFIG", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _received(label: str, proc, path: str, err_path: str) -> dict:
    """The child's report from the one channel (`tflab.process.channel`); a missing or partial one is named."""
    from tflab.process.channel import ChannelError, receive_result

    try:
        return receive_result(path).data
    except ChannelError as e:
        why = "without its report" if "no result" in str(e) else f"with a broken report ({e})"
        raise WorkerError(f"{label} (pid {proc.pid}) exited 0 {why}: {_last_line(err_path)}") from None


def _fork_server(specs, children):
    """A `tflab.process.forks.ForkServer` that imported TF once, for two or more children of
    ``python -m tflab.distribute.child`` (Linux, ``TFLAB_FORK_WORKERS`` not 0); else None."""
    from tflab.process.settings import get as setting

    if (len(specs) < 2 or not sys.platform.startswith("linux") or setting("TFLAB_FORK_WORKERS") == "0"
            or any(argv[:3] != worker_argv("")[:3] for _, argv, _ in specs)):
        return None
    from tflab.process.forks import ForkServer

    server = ForkServer(("tensorflow", "tflab.distribute.child"), _child_env({}), start=children.start)
    children.forget(server.proc)  # not a child whose end `ChildGroup.wait` waits for: killed after them
    return server


def _forked(forks, argv: list[str], env: dict, err, children):
    """The child forked from ``forks`` (a member of ``children``), or None: start a fresh process."""
    if forks is None:
        return None
    from tflab.process.forks import ForkUnavailable

    try:
        p = forks.spawn("tflab.distribute.child", argv[3:], env=env, stdout=err, stderr=err)
    except ForkUnavailable:
        return None
    children.procs.append(p)
    return p


def run_children(specs: Sequence[tuple[str, list[str], dict]], timeout: float,
                 progress: Callable[[str], None] | None = None,
                 on_start: Callable[[list[int]], None] | None = None) -> list[dict]:
    """Runs child processes to completion; returns each one's JSON report, in ``specs`` order.

    Args:
        specs: (label, argv, environment extras) per child; the child sends its
            JSON report to ``$TFLAB_REPORT`` through `tflab.process.channel.send_result`
            (`tflab.distribute.child` does).
        timeout: seconds of wall clock for all children together; each child also
            gets it as ``$TFLAB_DEADLINE_S`` and ends itself past it.
        progress: called with ``"<label> finished"`` as each child ends well.
        on_start: called with every child's pid once all have started.

    Returns:
        One dict per child.

    Raises:
        WorkerError: a child exited non-zero (one line naming it and its pid, with
            its last stderr line, and the children stopped because of it), ran past
            ``timeout`` (named with its pid), or exited 0 without a report.
        KeyboardInterrupt: re-raised after every child is stopped (Ctrl-C).
        Terminated: SIGTERM, re-raised after every child is stopped (exit 143).

    Example:
        >>> run_children([("worker 0", worker_argv("worker"), {"TF_CONFIG": "…"})], timeout=60)
        [{'task': 0, …}]
    """
    from tflab.process.group import ChildGroup

    from tflab._io.paths import owned_temp_dir

    tmp = str(owned_temp_dir("tflab_distribute_"))  # carries its owner: swept after a SIGKILL or a lost thread
    files = []
    try:
        with ChildGroup() as children:
            forks = _fork_server(specs, children)
            try:
                return _run(specs, timeout, progress, on_start, tmp, files, children, forks)
            finally:
                if forks is not None:  # idle once every child has ended; else stopped with them
                    forks.kill()
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)


def _run(specs, timeout, progress, on_start, tmp, files, children, forks) -> list[dict]:
    """`run_children`'s work inside its `ChildGroup`: start each child (forked from ``forks`` where
    it runs), wait for all, name the first that failed."""
    for label, argv, extra in specs:
        report = os.path.join(tmp, f"{len(files)}.json")
        err_path = os.path.join(tmp, f"{len(files)}.stderr")
        env = _child_env({**extra, "TFLAB_REPORT": report, "TFLAB_DEADLINE_S": timeout})
        with open(err_path, "w") as err:
            p = _forked(forks, argv, env, err, children) or children.start(
                argv, env, waits=True, stdout=err, stderr=err)  # tied: TFLAB_PARENT_PID
        files.append((label, p, report, err_path))
    if on_start is not None:
        on_start([p.pid for _, p, _, _ in files])
    labels = {p.pid: (label, err_path) for label, p, _, err_path in files}

    def on_exit(p) -> None:
        label, err_path = labels[p.pid]
        code = p.returncode
        if code == 0:
            if progress:
                progress(f"{label} finished")
            return
        last = _last_line(err_path)
        how = f"was killed by {_signal_name(code)}" if code < 0 else _exit_words(code, last)
        others = [lbl for lbl, q, _, _ in files if q.poll() is None]
        raise WorkerError(f"{label} (pid {p.pid}) {how}"
                          + (f"; stopped {', '.join(others)}" if others else ""))

    still = children.wait(timeout, on_exit)
    if still:
        names = ", ".join(f"{labels[q.pid][0]} (pid {q.pid})" for q in still)
        raise WorkerError(f"{names} still running after {timeout:g} s; stopped "
                          f"(raise --timeout, or look for a worker blocked on a peer)")
    return [_received(label, p, report, err_path) for label, p, report, err_path in files]
