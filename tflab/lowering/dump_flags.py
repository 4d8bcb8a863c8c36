"""XLA's dump flags turned on for one compile in a process where XLA has already read its flags.

XLA parses ``XLA_FLAGS`` into one process-wide ``DebugOptions`` at its first
compile (``xla/debug_options_flags.cc``: ``GetDebugOptionsFromFlags`` runs
``AllocateFlags`` once), and every later compile copies those options into its
module's config, which decides what is dumped (``xla/service/dump.cc``). The
same file exports ``void xla::ParseDebugOptionFlagsFromEnv(bool reset_envvar)``
(``xla/debug_options_flags.h``): it reads ``XLA_FLAGS`` again and sets, in that
process-wide ``DebugOptions``, the fields the variable names (the others keep
their values). TF 2.21 exports it from ``libtensorflow_framework.so.2``, the
library whose XLA compiles ``experimental_get_compiler_ir``; `tflab._tf.xla_flags`
reaches it through ``ctypes``.

`dump_window` first has XLA read the user's ``XLA_FLAGS`` as it would at a
first compile (``reset_envvar=false``: a no-op where XLA parsed them already,
since its parser consumes the flags it knew), then sets ``XLA_FLAGS`` to
``--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_hlo_module_re=…`` alone
(only the module of `tflab.lower`'s own jit function, so a compile the user
runs on another thread meanwhile is not dumped), has XLA read it again, and
puts the user's ``XLA_FLAGS`` back in ``os.environ`` at once: the variable
holds tflab's words only for the length of that call, and the user's own
flags are never read twice. When the window closes, XLA reads the dump flags'
defaults the same way (``--xla_dump_to=``, and ``--xla_dump_hlo_as_text=false``,
without which XLA would dump every later compile to stdout, ``dump.cc``'s
``CanonicalDebugOptions``). The user's flags hold no dump flag (`available`
refuses otherwise), so XLA's options are again what they made them.

Nothing here is used when the symbol is missing (another TF build), or when
the user's ``XLA_FLAGS`` dump already (their folder and settings are theirs):
`tflab.lowering.dump` then compiles in a child process, as before.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path

__all__ = ["available", "dump_window", "window_flags", "restore_flags", "mark_broken"]

_DUMP_ANY = re.compile(r"(?<!\S)--xla_dump_\w+")
_lock = threading.Lock()  # one window at a time: two lowerings on two threads must not mix their folders
_parse = None  # the function, once found; False when this TF has none
_broken = ""  # why this process stopped using the window (a compile under it dumped nothing)


def _function():
    """The exported ``ParseDebugOptionFlagsFromEnv`` of the loaded TF library (`tflab._tf.xla_flags`), or None."""
    global _parse
    if _parse is None:
        from tflab._tf.xla_flags import debug_options_reader

        _parse = debug_options_reader() or False
    return _parse or None


def available(environ: dict | None = None) -> str:
    """"" when `dump_window` can be used in this process, else why not (one line).

    Args:
        environ: the environment whose ``XLA_FLAGS`` are the user's (default ``os.environ``).
    """
    flags = (os.environ if environ is None else environ).get("XLA_FLAGS", "")
    if _DUMP_ANY.search(flags):
        return "the user's XLA_FLAGS set XLA's dump already (their folder and settings stay theirs)"
    if flags.strip() and not flags.strip().startswith("-"):
        # XLA reads such a value as a file of flags (``parse_flags_from_env.cc``): not seen here
        return "the user's XLA_FLAGS name a file of flags, which may set XLA's dump"
    if _broken:
        return _broken
    if _function() is None:
        from tflab._tf.xla_flags import SYMBOL

        return f"this TensorFlow exports no xla::ParseDebugOptionFlagsFromEnv ({SYMBOL})"
    return ""


def window_flags(folder: str | os.PathLike, module_re: str, passes: bool = False) -> str:
    """The dump words XLA reads when the window opens (``--xla_dump_hlo_pass_re=.*`` with ``passes``)."""
    return (f"--xla_dump_to={os.fspath(folder)} --xla_dump_hlo_as_text --xla_dump_hlo_module_re={module_re}"
            + (" --xla_dump_hlo_pass_re=.*" if passes else ""))


def restore_flags() -> str:
    """The words XLA reads when the window closes: each dump flag the window set, at XLA's default."""
    return ("--xla_dump_to= --xla_dump_hlo_as_text=false --xla_dump_hlo_module_re= "
            "--xla_dump_hlo_pass_re=")


def _read(words: str | None, user: str | None) -> None:
    """Has XLA read ``words`` (None: the user's flags, at their first parse only); ``os.environ`` is ``user`` after."""
    if words is None:
        _parse(False)  # XLA's first parse of the user's flags where none ran yet; else nothing is left to read
        return
    os.environ["XLA_FLAGS"] = words
    try:
        _parse(True)  # reset_envvar: the variable is read again, not what is left of the last parse
    finally:
        if user is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = user


@contextlib.contextmanager
def dump_window(folder: Path, module_re: str, passes: bool = False):
    """XLA dumps the compiles of modules matching ``module_re`` into ``folder`` while the block runs.

    Args:
        folder: an existing, empty folder the caller owns.
        module_re: the module names to dump (``--xla_dump_hlo_module_re``; `tflab.lower`'s own jit).
        passes: also dump the module after each HLO pass that changed it.

    Raises:
        RuntimeError: `available` says no (call it first).
    """
    why = available()
    if why:
        raise RuntimeError(why)
    user = os.environ.get("XLA_FLAGS")
    with _lock:
        _read(None, user)
        _read(window_flags(folder, module_re, passes), user)
        try:
            yield folder
        finally:
            _read(restore_flags(), user)


def mark_broken(why: str) -> None:
    """Stops using the window in this process (a compile under it dumped nothing): the child route instead."""
    global _broken
    _broken = why
