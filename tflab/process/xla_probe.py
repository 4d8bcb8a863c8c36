"""XLA's flags tried in a child before the first XLA compile in an API process (`check_xla_flags`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tflab.process.supervisor import FATAL_LINE, supervised

_XLA_PROBED: dict[tuple[str, str], str | None] = {}  # (XLA_FLAGS, TF_XLA_FLAGS) -> TF's F line, or None
_XLA_PROBE = ("import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2'); import tensorflow as tf; "
              "tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0))")


# The dump flags tflab sets itself for a process it starts (`dump_flags`): known to parse on TF 2.21.
_DUMP_SETTING = "TFLAB_TOUR_XLA_DUMP"


def dump_flags(folder: str | os.PathLike) -> str:
    """The ``XLA_FLAGS`` words that make XLA dump each compile as text into ``folder``.

    A process started with them and with ``TFLAB_TOUR_XLA_DUMP=folder`` (the tour's second
    process, `tflab.lowering.tour.lane_env`) skips `check_xla_flags`' child for these words: they
    are tflab's own and parse (``tests/lowering/test_lowering_tour.py`` compiles under them);
    whatever the user's ``XLA_FLAGS`` carried before them is still tried.

    Args:
        folder: the dump folder; a path with white space is not one word, so it is left to the probe.
    """
    return f"--xla_dump_to={os.fspath(folder)} --xla_dump_hlo_as_text"


# An XLA dump flag as XLA's own parser reads it (``xla/parse_flags_from_env.cc``: ``--name=value``, a value
# in double quotes may hold spaces).
_DUMP_TO = re.compile(r'(?<!\S)--xla_dump_to(?:=(?:"[^"]*"|\S*))?')
_DUMP_ANY = re.compile(r'(?<!\S)--xla_dump_\w+')
#: Where TF's own graph dumps go (``tensorflow/core/util/dump_graph.cc``; ``--tf_xla_clustering_debug``
#: in ``TF_XLA_FLAGS`` and the MLIR bridge write there).
TF_GRAPH_DUMP_ENV = "TF_DUMP_GRAPH_PREFIX"


def private_dumps_env(env: dict, folder: str | os.PathLike) -> dict:
    """``env`` for a child tflab starts, with every dump the user asked for sent to ``folder`` instead.

    A user who sets ``XLA_FLAGS=--xla_dump_to=D`` (or ``TF_DUMP_GRAPH_PREFIX=D``) asks for the dumps of
    their own compiles. tflab's children (the bisection's runs under each compiler setting, the probe of
    the flags) compile copies of them, and wrote dozens of modules into ``D``, mixed with the user's. Every
    ``--xla_dump_to`` is dropped; where a dump flag is left (``--xla_dump_hlo_as_text``, which without a
    folder dumps to stdout), ``--xla_dump_to=folder`` is added; ``TF_DUMP_GRAPH_PREFIX`` points into
    ``folder``. The other flags, which may change the numbers, are kept as they are.

    Args:
        env: the child's environment (not changed).
        folder: a private folder (removed with the caller's temporary folder).

    Returns:
        A new environment dict.
    """
    out = dict(env)
    flags = out.get("XLA_FLAGS", "")
    if flags and (_DUMP_TO.search(flags) or _DUMP_ANY.search(flags)):
        kept = _DUMP_TO.sub(" ", flags).strip()
        out["XLA_FLAGS"] = f"{kept} --xla_dump_to={os.path.join(os.fspath(folder), 'xla')}".strip()
    if out.get(TF_GRAPH_DUMP_ENV):
        out[TF_GRAPH_DUMP_ENV] = os.path.join(os.fspath(folder), "tf_graphs")
    return out


_OWN_DUMPS: list[str] = []  # dump folders this process put in XLA_FLAGS for tflab's own work


def note_own_dump(folder: str | os.PathLike | None) -> None:
    """Records that this process added `dump_flags` ``(folder)`` to ``XLA_FLAGS`` (None: forget them all)."""
    if folder is None:
        _OWN_DUMPS.clear()
    else:
        _OWN_DUMPS.append(os.fspath(folder))


def split_own_flags(text: str | None) -> tuple[str | None, str | None]:
    """``XLA_FLAGS`` split into the user's own flags and tflab's dump flags (`dump_flags`).

    ``tflab lower`` and the tour's second process add XLA's dump flags for a temporary folder
    that is removed after the run; a report that recorded them as the user's ``XLA_FLAGS`` sent a
    reproduction to a deleted folder. tflab's are those of a folder noted with `note_own_dump` or
    named by ``TFLAB_TOUR_XLA_DUMP``.

    Returns:
        ``(user's flags or None when none is left, tflab's flags or None)``.
    """
    if not text:
        return text or None, None
    from tflab.process.settings import get

    folders = [*_OWN_DUMPS, *([get("TFLAB_TOUR_XLA_DUMP")] if get("TFLAB_TOUR_XLA_DUMP") else [])]
    own = []
    for folder in folders:
        words = dump_flags(folder)
        if words in text:
            text = text.replace(words, " ", 1)
            own.append(words)
    user = " ".join(text.split())
    return (user or None), (" ".join(own) or None)


def users_xla_flags(environ=None) -> str:
    """``XLA_FLAGS`` without the `dump_flags` words tflab appended for this process.

    Args:
        environ: the environment to read (default ``os.environ``).

    Returns:
        The user's part of ``XLA_FLAGS``, stripped ("" when tflab's words were all of it); the
        whole variable when its end is not exactly ``dump_flags(TFLAB_TOUR_XLA_DUMP)``.
    """
    from tflab.process.settings import get

    env = os.environ if environ is None else environ
    flags = env.get("XLA_FLAGS", "").strip()
    folder = get(_DUMP_SETTING, env)
    if folder and not any(c.isspace() for c in folder):
        own = dump_flags(folder)
        if flags == own or flags.endswith(" " + own):
            return flags[: -len(own)].strip()
    return flags


def check_xla_flags(timeout: float = 300.0) -> None:
    """Before the first XLA compile in an API process: the XLA flags tried once in a child, cached.

    XLA parses ``XLA_FLAGS`` at its first compile and stops the whole process on an unknown flag
    (``F… parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS``): in the CLI the supervisor
    survives and names it, but an API call (``compare_modes``) in the user's own process died with
    it. A child that compiles ``x + 1`` under the same flags answers first (about one TF import,
    once per process and flag value; nothing when no flag is set, or under the CLI's supervisor).

    Raises:
        tflab.errors.UsageError: the child stopped on the flags; TF's line is quoted.
    """
    key = (users_xla_flags(), os.environ.get("TF_XLA_FLAGS", "").strip())
    if not any(key) or supervised():
        return
    if key not in _XLA_PROBED:
        fatal = None
        import tempfile

        try:
            with tempfile.TemporaryDirectory(prefix="tflab_xla_probe_") as private:
                p = subprocess.run([sys.executable, "-c", _XLA_PROBE], capture_output=True, text=True,
                                   timeout=timeout, stdin=subprocess.DEVNULL, start_new_session=True,
                                   env=private_dumps_env(os.environ, private))  # its compile is not the user's
            if p.returncode != 0:
                found = list(FATAL_LINE.finditer(p.stderr))
                fatal = found[-1].group(0).strip() if found else None
        except (OSError, subprocess.TimeoutExpired):
            fatal = None  # no answer: let the compile itself decide
        _XLA_PROBED[key] = fatal
    fatal = _XLA_PROBED[key]
    if fatal is not None:
        from tflab.errors import UsageError

        var = "TF_XLA_FLAGS" if "TF_XLA_FLAGS" in fatal or (key[1] and not key[0]) else "XLA_FLAGS"
        raise UsageError(f"TensorFlow would stop this process on a bad {var}: {fatal!r}; fix or unset {var} "
                         f"(now {os.environ.get(var, '')!r})")
