"""Helper processes tied to tflab: `start_tied`, `ChildGroup`, `guarded`, and the orphan sweep.

Every process tflab starts for its own work (the tour's second process and
background jobs, the converter workers, distribute's children, the
compilers) dies with the process that started it:

* `start_tied`: ``PR_SET_PDEATHSIG`` set between fork and exec (the kernel
  sends SIGKILL when the starting thread's process dies; no window);
* `ChildGroup`: each child in its own session, stopped as a group (SIGTERM,
  grace, SIGKILL, reap) on every exit path of a ``with`` block;
* `guarded`: a small guard process for external tools that fork workers of
  their own (``g++`` runs ``cc1plus``), which takes the whole tree down;
* `set_subreaper` / `kill_orphans`: what left its group (``setsid``, a double
  fork) is re-parented here and killed (the supervisor, the guard).

The child's own half is `tflab.process.watch.watch_parent`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

def set_subreaper() -> bool:
    """``prctl(PR_SET_CHILD_SUBREAPER)``: orphans of our descendants are re-parented to this process."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(Exception):
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    return False


def own_children() -> list[int]:
    """The pids whose parent is this process (``/proc/*/stat`` field 4)."""
    me, found = os.getpid(), []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().decode(errors="replace").rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if len(fields) > 1 and fields[1] == str(me):
                found.append(int(name))
    return found


def kill_orphans(rounds: int = 20) -> int:
    """SIGKILLs and reaps every process re-parented to this subreaper (what the child's code forked).

    Killing one re-parents its own children here too, so this repeats until none is left.

    Returns:
        How many were killed.
    """
    killed = 0
    for _ in range(rounds):
        pids = own_children()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        for pid in pids:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
    return killed


class ChildGroup:
    """Worker processes each in its own process group; `stop` ends every one and reaps it.

    The export's converter workers and distribute's worker processes are
    started and stopped here, so every tflab child dies the same way on every
    exit path: SIGTERM to its whole group (its own children too), ``grace``
    seconds, then SIGKILL, then ``wait`` (no zombie left).
    """

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], env: dict | None = None, *, waits: bool = False,
              **popen_kwargs) -> subprocess.Popen:
        """Starts ``argv`` in a new session (Ctrl-C in the terminal reaches only this process), tied (`tie`).

        ``waits``: the calling thread waits for it (`wait`, or reads it to its end), so the kernel's
        parent-death signal may be asked for from a thread other than the main one.
        """
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(argv, start_new_session=True, **tie({**popen_kwargs, "env": env}, waits))
        self.procs.append(p)
        return p

    def forget(self, proc: subprocess.Popen) -> None:
        """Drops a process that ended and was reaped by its caller."""
        with contextlib.suppress(ValueError):
            self.procs.remove(proc)

    def __enter__(self) -> "ChildGroup":
        """Opens the group: SIGTERM raises `tflab.errors.Terminated` (the sticky handler) until it closes."""
        from tflab.errors import install_sigterm_handler, sigterm_handler_installed

        self._previous_term = None if sigterm_handler_installed() else install_sigterm_handler()
        return self

    def __exit__(self, *exc) -> None:
        """Closes the group: every process is stopped and reaped (`stop`), on every exit path."""
        try:
            self.stop()
        finally:
            previous, self._previous_term = getattr(self, "_previous_term", None), None
            if previous is not None:  # the group installed the handler: its SIGTERM is spent now
                from tflab.errors import clear_terminated

                signal.signal(signal.SIGTERM, previous)
                clear_terminated()

    def wait(self, timeout: float, on_exit=None, poll: float = 0.05) -> list[subprocess.Popen]:
        """Waits ``timeout`` seconds at most for every process to end; returns those still running.

        ``on_exit(proc)`` is called as each one ends and may raise (a failed worker) to stop
        waiting; the ``with`` block then stops the others. Raises `tflab.errors.Terminated` on
        SIGTERM, also one whose exception a finalizer lost (the flag is sticky).
        """
        from tflab.errors import raise_if_terminated

        deadline, seen = time.monotonic() + timeout, set()
        while True:
            raise_if_terminated()
            for p in [p for p in self.procs if p.pid not in seen and p.poll() is not None]:
                seen.add(p.pid)
                if on_exit is not None:
                    on_exit(p)
            running = [p for p in self.procs if p.poll() is None]
            if not running or time.monotonic() > deadline:
                return running
            time.sleep(poll)

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM to each running group, up to ``grace`` s, then SIGKILL; every process is reaped."""
        running = [p for p in self.procs if p.poll() is None]
        if grace > 0:
            for p in running:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for p in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.05, deadline - time.monotonic()))
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5.0)
        self.procs = [p for p in self.procs if p.returncode is None]


_PRCTL = None  # libc's prctl, resolved in the parent: the forked child must not dlopen (another thread may hold the loader's lock)


def pdeathsig_preexec() -> None:  # runs in the forked child before exec
    _PRCTL(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def tie(popen_kwargs: dict, waits: bool = False) -> dict:
    """``popen_kwargs`` for a child tied to this process: ``$TFLAB_PARENT_PID`` and, where safe, PDEATHSIG.

    The child's environment names this pid (`tflab.process.watch.tie_to_parent` reads it: a
    parent that died before the child's first line is not mistaken for init). The kernel's
    parent-death signal follows the thread that forks, so it is asked for only from the main
    thread, or from a thread that ``waits`` for the child itself (a background job's thread in
    ``communicate``, a `ChildGroup` waited on in the thread that started it): that thread
    outlives the child by construction.
    """
    global _PRCTL
    kwargs = dict(popen_kwargs)
    env = dict(os.environ if kwargs.get("env") is None else kwargs["env"])
    env["TFLAB_PARENT_PID"] = str(os.getpid())
    kwargs["env"] = env
    if sys.platform.startswith("linux") and (waits or threading.current_thread() is threading.main_thread()):
        with contextlib.suppress(Exception):
            if _PRCTL is None:
                import ctypes

                _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
            kwargs.setdefault("preexec_fn", pdeathsig_preexec)
    return kwargs


def start_tied(argv: list[str], *, waits: bool = False, **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` of a child that dies with this process (the one way tflab starts a helper).

    The kernel sends the child SIGKILL when this thread's process dies (``PR_SET_PDEATHSIG``, set
    between fork and exec, so no window), and the child watches its parent too
    (`tflab.process.watch.tie_to_parent`, with the pid from ``$TFLAB_PARENT_PID``). See `tie`.
    Used by the tour's second process, its background jobs' processes and the suite's full tour.

    Args:
        argv: the command.
        waits: the calling thread waits for the child (then a thread other than
            the main one may ask for the kernel's signal too).
        **popen_kwargs: as for `subprocess.Popen`.
    """
    return subprocess.Popen(argv, **tie(popen_kwargs, waits))


# ----------------------------------------------------------------------------- guarded tools

_GUARD = "import sys; from tflab.process.group import guard_main; sys.exit(guard_main(sys.argv[1:]))"


def guarded(argv: list[str]) -> list[str]:
    """``argv`` run under a guard that takes its whole process tree down when tflab dies.

    For external tools that fork their own workers (``g++`` runs ``cc1plus`` and ``as``): the
    kernel's parent-death signal is per process and is cleared in a fork, so a SIGKILLed tflab left
    ``cc1plus`` compiling under init. The guard (a small Python process) asks for SIGTERM
    when its parent dies, is the tool's child subreaper, and kills the tool's group and every
    orphan of it then, or when the tool ends. Use as ``subprocess.Popen(guarded(cmd), …)``.
    """
    return [sys.executable, "-c", _GUARD, *argv]


def guard_main(argv: list[str]) -> int:
    """The guard of `guarded`: runs ``argv``, returns its status; kills its tree on the parent's death."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    set_subreaper()
    proc = subprocess.Popen(argv, start_new_session=True)

    def stop(*_):
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        kill_orphans()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if os.getppid() != parent:  # the parent died before the signal was asked for
        stop()
    while True:
        try:
            code = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                stop()
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the tool left in its group
    kill_orphans()
    return code if code >= 0 else 128 - code



# ----------------------------------------------------------------------------- the run's mark

#: The environment variable that marks every process of one supervised run (`run_env`).
RUN_MARK = "TFLAB_RUN"


def run_env(token: str) -> dict[str, str]:
    """The environment entry that marks a run's processes: every process the verb starts inherits it.

    A process that leaves the verb's process group and session (``setsid``) is still found by it
    (`kill_run`): no cgroup is needed, which an unprivileged tflab often cannot create (cgroup v1,
    or a v2 tree not delegated to the user). A process started with an environment of its own
    (``env={}``) is not marked.
    """
    return {RUN_MARK: token}


def run_processes(token: str) -> list[int]:
    """The pids whose environment (``/proc/PID/environ``, as they started) carries ``RUN_MARK=token``."""
    mark = f"{RUN_MARK}={token}".encode()
    found, me = [], os.getpid()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if mark in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:  # gone, or another user's
                continue
    return found


def kill_run(token: str, rounds: int = 5) -> int:
    """SIGKILLs every process marked with ``token`` (`run_env`), again while new ones appear (forks).

    Returns:
        How many were killed.
    """
    killed = 0
    for _ in range(rounds):
        pids = run_processes(token)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.02)
    return killed


_RUN_GUARD = "import sys; from tflab.process.group import run_guard_main; run_guard_main(sys.argv[1])"


def start_run_guard(token: str) -> subprocess.Popen | None:
    """A small process that ends the run's marked processes when this process dies (SIGKILL included).

    The supervisor's own sweep (`kill_run`, on every end it lives to see) cannot run after a
    SIGKILL; the kernel then tells this guard (``PR_SET_PDEATHSIG`` SIGTERM), which sweeps. The
    guard itself is not marked. Stop it with ``proc.kill()`` after the run's own sweep.
    """
    env = {k: v for k, v in os.environ.items() if k != RUN_MARK}
    with contextlib.suppress(OSError):
        return subprocess.Popen([sys.executable, "-c", _RUN_GUARD, token], env=env, start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True)
    return None


def run_guard_main(token: str) -> None:
    """`start_run_guard`'s process: waits for its parent's end, then kills the run's marked processes."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG

    def stop(*_):
        kill_run(token)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a terminal's hang-up is the supervisor's to handle
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.getppid() == parent:
        time.sleep(0.5)
    stop()


def mark_run(env: dict) -> tuple[str, subprocess.Popen | None]:
    """Marks a run about to start: its environment gets `run_env`, and a guard starts (`start_run_guard`).

    Returns:
        ``(token, guard)`` for `end_marked_run`.
    """
    import secrets

    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    env.update(run_env(token))
    return token, start_run_guard(token)


def end_marked_run(token: str, guard: subprocess.Popen | None) -> None:
    """Ends every process still marked with ``token``, then the guard (the run is over)."""
    kill_run(token)
    if guard is not None:
        with contextlib.suppress(OSError):
            guard.kill()
            guard.wait()
