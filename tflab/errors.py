"""Errors tflab raises for expected mistakes.

Every expected mistake (a bad path, a bad ``--arg``, a function that fails
while tracing) is a `TflabError`: one line saying what was wrong and what to
do. The CLI prints it as ``tflab VERB: error: …`` and exits with code 2.
"""

from __future__ import annotations

import contextvars


class TflabError(Exception):
    """An expected user mistake: the message says what was wrong and what to do.

    Args:
        message: one line, what was wrong and what to do instead.
    """


class UsageError(TflabError, ValueError):
    """Bad input to a tflab function or CLI verb (wrong type, bad spec, bad path)."""


class Terminated(SystemExit):
    """SIGTERM arrived during long work (``tflab export``); raised so cleanup runs as for Ctrl-C.

    Its code is 143 (128 + SIGTERM), the status a shell reports for a process
    killed by SIGTERM. `tflab._user.usercode.user_code` lets it through: it is not
    the user's ``sys.exit``.
    """


_TERM_RECEIVED = False
_HELD = 0  # depth of `held_interrupts` sections in the main thread
_PENDING: set[str] = set()  # "term"/"int" that came while held


def raise_if_terminated() -> None:
    """Raises `Terminated` if SIGTERM arrived since the handler was installed.

    The handler's exception can be lost: Python runs a signal handler at the
    next bytecode boundary of the main thread, which may be inside a
    finalizer (``__del__``, a weakref callback; TF runs many), where an
    exception is printed as "Exception ignored in …" and dropped. The handler
    therefore also records the signal, and work that must not complete after
    a SIGTERM (renaming an export into place, a verb returning success) calls
    this first.

    Raises:
        Terminated: SIGTERM arrived (code 143).
    """
    import signal

    if _TERM_RECEIVED:
        raise Terminated(128 + signal.SIGTERM)


def install_sigterm_handler():
    """Makes SIGTERM raise `Terminated` (code 143) so cleanup runs as for Ctrl-C.

    ``tflab.cli.main`` installs it around every verb: SIGTERM's default action
    ends the process at once (shell status 143, but no ``terminated`` line and
    no cleanup: a half-written ``tour --out``). Python runs the handler in the
    main thread between bytecodes (``signal`` docs), so a long TF kernel
    delays it as it delays Ctrl-C.

    Returns:
        The previous handler (to restore with ``signal.signal``), or None when
        not called from the main thread (handlers can only be set there).
    """
    import signal
    import threading

    global _TERM_RECEIVED

    if threading.current_thread() is not threading.main_thread():
        return None
    _TERM_RECEIVED = False

    def on_term(signum, frame):
        global _TERM_RECEIVED

        _TERM_RECEIVED = True  # sticky: raise_if_terminated() sees it even if the raise below is lost
        if _HELD:
            _PENDING.add("term")  # raised when the held section ends (`held_interrupts`)
            return
        raise Terminated(128 + signal.SIGTERM)

    try:
        return signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):
        return None


def sigterm_handler_installed() -> bool:
    """True when SIGTERM's handler is the one `install_sigterm_handler` put in (the CLI's, export's, a `ChildGroup`'s).

    A second install would clear the sticky flag; callers that nest check this first.
    """
    import signal

    handler = signal.getsignal(signal.SIGTERM)
    return (getattr(handler, "__module__", None) == __name__
            and getattr(handler, "__qualname__", "") == "install_sigterm_handler.<locals>.on_term")


def clear_terminated() -> None:
    """Forgets a SIGTERM that was recorded: for the owner of a handler it is now removing (`ChildGroup`)."""
    global _TERM_RECEIVED

    _TERM_RECEIVED = False


_INT_RECEIVED = False
_INT_WITNESS = None  # the verb's child: asks the supervisor whether a SIGINT reached it (ChildChannel)


def set_sigint_witness(witness) -> None:
    """Installs the callable that says whether a SIGINT this process got also reached tflab's supervisor.

    Args:
        witness: a zero-argument callable returning True when the supervisor received a SIGINT
            (a Ctrl-C reaches the terminal's whole foreground process group; a ``kill -INT`` names
            tflab), or None to forget it.
    """
    global _INT_WITNESS

    _INT_WITNESS = witness


def own_interrupt() -> bool:
    """True when the ``KeyboardInterrupt`` now unwinding is the user's code's own, not a Ctrl-C.

    It is the user's when no SIGINT came at all (the code raised it), or when the SIGINT came from
    inside the run (the user's code signalled its own process) and never reached the supervisor
    (`set_sigint_witness`). Where tflab installed no handler (the Python API in the user's own
    process), False: a ``KeyboardInterrupt`` is passed on as Python does.
    """
    import signal

    handler = signal.getsignal(signal.SIGINT)
    if not (getattr(handler, "__module__", None) == __name__
            and getattr(handler, "__qualname__", "") == "install_sigint_handler.<locals>.on_int"):
        return False  # tflab's handler is not in place: no SIGINT is recorded, nothing can be told apart
    if not _INT_RECEIVED:
        return True
    return _INT_WITNESS is not None and not _INT_WITNESS()


def install_sigint_handler():
    """Makes SIGINT raise KeyboardInterrupt as Python's default does, and records that it came.

    A ``KeyboardInterrupt`` the user's code raises itself is the user's exception (exit 2, one
    line); only one that follows a real SIGINT is "interrupted" (130). `sigint_received` tells them
    apart.

    Returns:
        The previous handler, or None off the main thread.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def on_int(signum, frame):
        global _INT_RECEIVED

        _INT_RECEIVED = True
        if _HELD:
            _PENDING.add("int")
            return
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGINT, on_int)
    except (ValueError, OSError):
        return None


def sigint_received() -> bool:
    """True when a SIGINT came since the process started (the handler of `install_sigint_handler`)."""
    return _INT_RECEIVED


class held_interrupts:
    """A section that SIGTERM and Ctrl-C do not cut in two: they are raised when it ends.

    Creating a temporary folder and writing its owner file is such a section:
    a `Terminated` raised between ``mkdir`` and the line that records the folder
    (inside ``tempfile.mkdtemp``) left a folder nobody removes. A signal that
    comes inside is recorded by tflab's handlers (`install_sigterm_handler`,
    `install_sigint_handler`) and raised as `Terminated` or
    ``KeyboardInterrupt`` on leaving, so the caller's ``except BaseException``
    cleans up what the section made. Signal masks cannot do this: Python runs
    its handlers in the main thread whichever thread the kernel picks (TF's
    threads do not block signals).

    Sections nest; only the outermost raises. Off the main thread, and
    without tflab's handlers (the Python API in the user's own process), it
    changes nothing.

    Raises:
        Terminated: a SIGTERM came inside the section (code 143).
        KeyboardInterrupt: a Ctrl-C came inside the section.

    Example:
        >>> with held_interrupts():
        ...     folder = make_and_record()   # never half done
    """

    def __enter__(self):
        global _HELD
        import threading

        self._counted = threading.current_thread() is threading.main_thread()  # where handlers run
        _HELD += self._counted
        return self

    def __exit__(self, *exc):
        global _HELD
        import signal

        _HELD -= self._counted
        if _HELD or not _PENDING:
            return False
        pending = set(_PENDING)
        _PENDING.clear()
        if exc[0] is not None:
            return False  # the section's own exception goes on; the signal stays recorded (sticky flags)
        if "int" in pending:
            raise KeyboardInterrupt
        raise Terminated(128 + signal.SIGTERM)



# Set while a CLI verb runs (`tflab._user.usercode.cli_verb`): messages name options as the command
# line spells them (``--force``), else as the Python API takes them (``force=True``).
CLI_VERB: contextvars.ContextVar[bool] = contextvars.ContextVar("tflab_cli_verb", default=False)


def in_cli() -> bool:
    """Whether a CLI verb runs this code (`CLI_VERB`)."""
    return CLI_VERB.get()


def error_line(verb: str, message: object) -> str:
    """``tflab VERB: error: MESSAGE`` as one line: a line break inside the message (a file name that
    holds one, an exception text over several lines) is written as ``\\n``, as ``repr`` would.

    Example:
        >>> error_line("inspect", "nl\\nx.py has no 'nope'")
        "tflab inspect: error: nl\\\\nx.py has no 'nope'"
    """
    text = str(message).replace("\r\n", "\\n").replace("\r", "\\r").replace("\n", "\\n")
    return f"tflab {verb}: error: {text}"
