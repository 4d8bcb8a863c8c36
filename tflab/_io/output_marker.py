"""What tflab wrote: the marker of every folder output it publishes, and the one ``--force`` rule.

A folder output (``export --out``, ``tour --out``) carries `MARKER`, the list
of what tflab wrote there; ``--force`` replaces only such a folder, and only
while it holds nothing else (`check_replaceable`, `check_folder_out`).
`tflab._io.paths` (output paths) uses them and re-exports them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from tflab._io.path_checks import check_path_text, describe_existing, shorten_path
from tflab.errors import UsageError


#: The file tflab writes into every folder output it publishes (``export --out``, ``tour --out``):
#: JSON with the relative path of every entry it wrote. ``--force`` replaces only such a folder,
#: and only while it holds nothing else (`check_replaceable`).
MARKER = ".tflab-output"
#: The file in every temporary folder tflab fills (``.NAME.tmp-*``, ``$TMPDIR/tflab_*``): the
#: owner's pid and start time, so a later run can tell a folder whose owner is gone (`sweep_stale`).
OWNER = ".tflab-owner"


def _entries(folder: Path) -> set[str]:
    """Every path under ``folder`` (files, folders, links), relative, with ``/`` separators."""
    found = set()
    for root, dirs, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        for name in dirs + files:
            found.add(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return found


def write_marker(folder: Path, verb: str | None = None) -> None:
    """Writes `MARKER` into ``folder``, listing every entry it holds now (call last, before publishing)."""
    import json

    with contextlib.suppress(FileNotFoundError):
        os.remove(Path(folder) / OWNER)
    entries = sorted(_entries(Path(folder)) - {MARKER})
    (Path(folder) / MARKER).write_text(json.dumps({"written_by": "tflab", "verb": verb, "entries": entries}))


def foreign_entries(folder: Path) -> list[str] | None:
    """The entries of ``folder`` tflab did not write there; None when it has no (readable) `MARKER`."""
    import json

    try:
        listed = set(json.loads((Path(folder) / MARKER).read_text())["entries"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sorted(_entries(Path(folder)) - listed - {MARKER})


def marker_kind(folder: Path) -> str | None:
    """What tflab wrote ``folder`` as (``"export"``, ``"lowering"``, ``"tour"``), or None when unknown.

    The `MARKER`'s ``verb``; a marker from before it was recorded (``null``) is read from what the
    folder holds: ``lowering.json`` is a lowering, a ``saved_model`` folder beside ``report.json``
    and ``examples.npz`` an export.
    """
    import json

    try:
        verb = json.loads((Path(folder) / MARKER).read_text()).get("verb")
    except (OSError, ValueError, AttributeError):
        verb = None
    if isinstance(verb, str) and verb:
        return verb
    f = Path(folder)
    if (f / "lowering.json").is_file():
        return "lowering"
    if (f / "saved_model").is_dir() and (f / "report.json").is_file() and (f / "examples.npz").is_file():
        return "export"
    return None


def check_replaceable(folder: Path, flag: str, noun: str = "output") -> None:
    """Refuses to replace ``folder`` unless it is empty, or holds tflab's `MARKER` and nothing else,
    written by the same kind of output.

    The one ``--force`` rule for folder outputs (``export --out``, ``tour --out``): tflab replaces
    only what it wrote itself, never a folder of the user's own files, the current folder or one
    of its parents, nor another verb's output (``lower --out EXPORT --force`` deleted a SavedModel
    and its TFLite variants).

    Args:
        folder: the existing folder.
        flag: the option that named it, for messages.
        noun: what tflab writes there (``"export"``, ``"tour"``), for messages.

    Raises:
        UsageError: one line naming what would be lost.
    """
    folder = Path(folder)
    real, cwd = folder.resolve(), Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise UsageError(f"{flag} {folder} is the current folder or one of its parents: --force will not "
                         f"replace it; choose a new folder")
    try:
        if not any(folder.iterdir()):
            return
    except OSError as e:
        raise UsageError(f"{flag} {folder}: cannot read it ({e.strerror}); choose another {flag}") from None
    foreign = foreign_entries(folder)
    if foreign is None:
        # Every verb's folder is recognized by the one marker, whatever else it holds (lower writes
        # lowering.json, the tour report.json, export a SavedModel): name the marker, not a verb's file.
        why = f"no {MARKER} marker, which tflab writes into every folder it publishes"
        raise UsageError(f"{flag} {folder} is a folder that is not a tflab {noun} ({why}): --force replaces "
                         f"only tflab's own {noun}s; choose another {flag}, or remove the folder yourself")
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UsageError(f"{flag} {folder} holds files tflab did not write ({shown}): --force would delete "
                         f"them; move them away or choose another {flag}")
    kind = marker_kind(folder)
    if noun != "output" and kind is not None and kind != noun:
        raise UsageError(f"{flag} {folder} is a tflab {kind} folder, not {_article(noun)} {noun}: --force "
                         f"replaces only a previous {noun}; choose another {flag}")


def check_folder_out(path: str | os.PathLike, flag: str, force: bool, noun: str = "output",
                     empty_ok: bool = True) -> bool | None:
    """The rules for a folder output that replaces a whole folder (``export --out``, ``tour --out``).

    Args:
        path: the folder the user gave.
        flag: its option (``"--out"``).
        force: the verb's ``--force``.
        noun: what tflab writes there (``"export"``, ``"tour"``), for messages.
        empty_ok: an existing empty folder is taken without ``force`` (the tour); False: any
            existing path needs ``force`` (export).

    Returns:
        None when ``path`` does not exist; True when an existing folder will be replaced (an
        empty one, or tflab's own with ``force``).

    Raises:
        UsageError: a file, FIFO, device or symlink loop there; an existing folder without
            ``force``; with ``force``, a folder `check_replaceable` refuses.
    """
    check_path_text(path, flag)
    check_not_parent_ref(path, flag)  # x/.. names x's parent, which exists
    p = Path(path)
    what = describe_existing(p)
    if what is None:
        return None
    if what not in ("a folder", "a regular file", "a dangling symlink"):
        raise UsageError(f"{flag} {shorten_path(p)} is {what}, not {_article(noun)} {noun} folder; choose another {flag}")
    if what != "a folder":
        if not force:  # --force would not help: it replaces only a previous tflab folder
            raise UsageError(f"{flag} {shorten_path(p)} exists and is not a folder (it is {what}); "
                             f"choose another {flag}")
        raise UsageError(f"{flag} {shorten_path(p)} is {what}, not {_article(noun)} {noun} folder: --force replaces only a "
                         f"previous tflab {noun}; choose another {flag}")
    try:
        empty = not any(p.iterdir())
    except OSError as e:
        raise UsageError(f"{flag} {p}: cannot read it ({e.strerror}); choose another {flag}") from None
    if empty and empty_ok:
        return True
    if not force:
        if empty_ok:
            raise UsageError(f"{flag} {p} is a folder that is not empty: pass --force to replace it, "
                             f"or choose another {flag}")
        raise UsageError(f"{p} already exists: pass --force to replace it, or choose another {flag}")
    check_replaceable(p, flag, noun)
    return True


def system_temp_dir() -> str:
    """The temporary folder tflab's own folders go in: the user's, also inside a verb's processes
    (whose ``TMPDIR`` is their `private_temp_dir`; ``TFLAB_SYSTEM_TMPDIR`` names the user's, where
    every run's sweep looks for stale folders)."""
    from tflab.process.settings import get

    named = get("TFLAB_SYSTEM_TMPDIR")
    return named if named and os.path.isdir(named) else tempfile.gettempdir()


def check_temp_dir() -> str:
    """The temporary folder, after creating and writing a file there; else one line naming the limit.

    Python's own answer is a 16-line traceback out of ``tempfile._get_default_tempdir``
    ("No usable temporary directory found in ['/tmp', …]"), which names neither the reason nor the
    limit (``ulimit -f 0``: every write fails with EFBIG, "File too large").

    Returns:
        `system_temp_dir`.

    Raises:
        UsageError: "no usable temporary folder: writing a file in /tmp fails (File too large; the
            file size limit, ulimit -f, is 0 bytes); set TMPDIR to a writable folder or raise ulimit -f".
    """
    import resource

    try:
        return system_temp_dir()  # gettempdir() writes a file in each candidate: fails when none takes one
    except OSError:
        pass
    candidate = os.environ.get("TMPDIR") or "/tmp"
    why = "it cannot be used"
    try:
        fd, probe = tempfile.mkstemp(prefix=".tflab-probe-", dir=candidate)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as e:
        why = e.strerror or str(e)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    named = (f"; the file size limit (ulimit -f) is {limit} bytes" if limit != resource.RLIM_INFINITY and
             limit < 1 << 20 else "")
    raise UsageError(f"no usable temporary folder: writing a file in {candidate} fails ({why}{named}); set "
                     f"TMPDIR to a writable folder" + (" or raise ulimit -f" if named else ""))


# ----------------------------------------------------------------------------- publishing

_RENAME_NOREPLACE = 1  # linux/fs.h
_AT_FDCWD = -100


def _renameat2_noreplace(src: Path, dst: Path) -> bool:
    """``renameat2(src, dst, RENAME_NOREPLACE)``; False when the C library or file system lacks it.

    Raises:
        FileExistsError: ``dst`` exists.
        OSError: any other failure of the rename.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False  # not on this file system: fall back
    raise OSError(err, os.strerror(err), os.fspath(dst))


def publish_noreplace(tmp: Path, dst: Path, flag: str) -> None:
    """Renames ``tmp`` to ``dst`` only if ``dst`` does not exist, atomically (two writers: one wins).

    ``renameat2(RENAME_NOREPLACE)`` where the kernel and file system have it;
    else a file is published with ``link(2)`` (fails with EEXIST) and a folder
    by claiming ``dst`` with ``mkdir(2)`` (fails with EEXIST) and renaming
    over that empty folder, which ``rename(2)`` allows.

    Raises:
        UsageError: ``dst`` exists ("already exists", exit 2); ``tmp`` is left for the caller to remove.
    """
    taken = UsageError(f"{flag} {dst} already exists (another run wrote it since the check); "
                       f"pass --force to replace it, or choose another {flag}")
    try:
        if _renameat2_noreplace(tmp, dst):
            return
        if tmp.is_dir():
            os.mkdir(dst)
            os.rename(tmp, dst)
        else:
            os.link(tmp, dst)
            os.unlink(tmp)
    except FileExistsError:
        raise taken from None
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise taken from None
        raise


def check_not_parent_ref(path: str | os.PathLike, flag: str) -> None:
    """Refuses an output path whose last part is ``..`` (``--out x/..``): it names x's parent, which exists.

    Without this, ``--out o/p/..`` passed the checks that look at the text and was refused only after
    the work, as "already exists (another run wrote it since the check)".

    Raises:
        UsageError: "--out x/.. names the folder PARENT (it ends in ..); give the folder itself".
    """
    text = os.fspath(path)
    if Path(text).name == ".." or text.rstrip("/").endswith("/..") or text.rstrip("/") == "..":
        real = os.path.realpath(text)
        raise UsageError(f"{flag} {shorten_path(text)} names the folder {shorten_path(real)} (it ends in ..); "
                         f"give the folder itself")


#: Temporary folder -> the path it is published as (`OutputPath.temp_dir`, `register_publication`).
_PUBLISHED: dict[str, Path] = {}


def register_publication(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Records that ``tmp`` will be renamed to ``final``: `published_path` maps paths under it.

    `OutputPath.temp_dir` records its own folders; a process that fills another process's
    temporary folder (the tour's second process) records it itself.
    """
    _PUBLISHED[os.path.abspath(tmp)] = Path(final)


def published_path(path: str | os.PathLike) -> Path:
    """Where ``path`` will be once every temporary folder it is under has been published.

    A report written inside a temporary folder (the tour's export, its own ``report.json`` and
    the HTML page) named the ``.NAME.tmp-*`` folder, gone after the rename. Nested folders are
    followed (an export inside a tour). A path under no registered folder comes back as given.
    """
    p = Path(path)
    for _ in range(16):
        absolute = os.path.abspath(p)
        under = [t for t in _PUBLISHED if absolute == t or absolute.startswith(t + os.sep)]
        if not under:
            return p
        tmp = max(under, key=len)  # the innermost first: it is published into the next one out
        rest = os.path.relpath(absolute, tmp)
        p = _PUBLISHED[tmp] if rest == "." else _PUBLISHED[tmp] / rest
    return p


def _article(noun: str) -> str:
    """"an export", "a lowering", "a tour": the article the noun takes."""
    return "an" if noun[:1] in "aeiou" else "a"
