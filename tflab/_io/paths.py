"""The one guarded path for writing a user's output path (``--dot``, ``--hlo``, ``--out``, report files).

Every verb that writes where the user said goes through `output_path`, so a
path that cannot be written is refused the same way everywhere, before any
work, as one `UsageError` line (the CLI prints it and exits 2):

* **Probe by doing.** `os.access` answers for the permission bits only: it
  says yes to root on read-only and virtual file systems (``/proc``,
  ``/sys``), where ``open`` then fails with ENOENT or EACCES. So the probe
  really creates a file (or folder) next to the target and removes it.
* **Atomic writes.** A file is written to a temporary name in the same folder
  and renamed into place (`os.replace`, atomic on POSIX within one file
  system), so a reader never sees half a file and a failure leaves nothing.
* **Parents only on success.** A folder output (``export --out a/b/c``)
  creates its missing parents when it starts writing and removes the ones it
  created (if still empty) when the work fails or is interrupted.
* **Never replace what is not a regular file.** An existing device or FIFO
  (``--dot /dev/null``, ``--dot /dev/stdout``) is opened and written in
  place: renaming over it would replace ``/dev/null`` with a plain file when
  tflab runs as root. A symlink is followed: its target is written (or
  created, as the shell's ``>`` does) and the link is kept.
* **Odd path text** (a NUL byte, a name longer than ``NAME_MAX``) is one
  error line, not ``ValueError``/``OSError`` out of ``os.stat``.

What stands at a path and the input-path check are `tflab._io.path_checks`, and
the marker of a folder output with the one ``--force`` rule is
`tflab._io.output_marker`; their names are importable from here too.

Use from a verb (new verbs: do the same for every output option)::

    from tflab._io.paths import output_path

    def run(args):
        dot = (output_path(args.dot, "--dot", example="graph.dot", overwrite=args.force)  # before work
               if args.dot else None)
        report = ...                                                                  # the work
        if dot:
            dot.write(report.to_dot())                                                # atomic

    out = output_path(args.out, "--out", folder=True)      # a folder filled in a temp folder
    tmp = out.temp_dir()
    try:
        ...write under tmp...
        out.commit(tmp)
    except BaseException:
        out.discard(tmp)
        raise
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

# Writing a device or FIFO in place (and holding a FIFO output open from the check on) is
# `tflab._io.fifo_out`'s; its names stay importable from here.
from tflab._io.fifo_out import FIFO_READER_GRACE_S, claim_fifo, release_fifos, write_in_place  # noqa: F401
from tflab._io.output_marker import (MARKER, OWNER, check_folder_out, publish_noreplace,  # noqa: F401 (re-exported)
                                  check_not_parent_ref, check_replaceable, check_temp_dir, foreign_entries,
                                  published_path, register_publication, system_temp_dir, write_marker)
from tflab._io.path_checks import check_npz, check_path_text, describe_existing, input_path, shorten_path  # noqa: F401
from tflab.errors import UsageError, held_interrupts


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (a dangling symlink counts as existing)."""
    probe = path
    while not (probe.exists() or probe.is_symlink()):
        if probe == probe.parent:
            break
        probe = probe.parent
    return probe


def _missing_parents(path: Path) -> list[Path]:
    """The ancestors of ``path`` (and ``path`` itself) that do not exist, outermost first."""
    missing = []
    probe = path
    while not (probe.exists() or probe.is_symlink()) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    return missing[::-1]


@dataclasses.dataclass
class OutputPath:
    """A user's output path that was probed writable; see `output_path`.

    Attributes:
        path: the target, as a `Path`.
        flag: the option that named it (``"--dot"``), used in messages.
        folder: True for a folder output, False for a file.
        created: folders this object created (outermost first); `discard`
            removes them again if they are empty.
    """

    path: Path
    flag: str
    folder: bool = False
    created: list[Path] = dataclasses.field(default_factory=list)
    preexisting: set[str] | None = None  # make_dir: the folder's entries before the work; discard keeps only these
    in_place: bool = False  # an existing device/FIFO: opened and written, never renamed over
    replace: bool = True  # False: publishing fails with "already exists" if anything took the path meanwhile
    only_if_empty: bool = False  # with replace: only while the folder is still empty (two racing tours)
    noun: str | None = None  # a folder output's kind ("export", "lowering", "tour"): its marker's verb

    def _fail(self, what: str, e: OSError) -> UsageError:
        return UsageError(f"{self.flag} {self.path}: {what}: {e.strerror or e}; choose another {self.flag}")

    # ------------------------------------------------------------------ files

    def write(self, data: str | bytes) -> None:
        """Writes a file output atomically: a temporary file in the same folder, then `os.replace`.

        Args:
            data: the whole content; `str` is written as UTF-8 text.

        Raises:
            UsageError: the write or the rename failed (e.g. the path became a
                folder since the probe, or the disk is full); the temporary
                file is removed.
        """
        payload = data.encode() if isinstance(data, str) else data
        if self.in_place:  # /dev/null, /dev/stdout, a FIFO: rename would replace the device node
            report = _stdout_stream(self.path)
            if report is not None:  # under the supervisor fd 1 is its stderr pipe: write to the report
                try:
                    report.flush()
                    report.buffer.write(payload)
                    report.buffer.flush()
                except OSError as e:
                    raise UsageError(f"{self.flag} {self.path}: cannot write it: {e.strerror or e}") from None
                return
            write_in_place(self.path, payload, self.flag)
            return
        parent = self.path.parent
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.tmp-", dir=parent)
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the output is an ordinary file
            if self.replace:
                os.replace(tmp, self.path)
            else:
                try:
                    publish_noreplace(Path(tmp), self.path, self.flag)
                except UsageError:
                    with contextlib.suppress(OSError):
                        os.remove(tmp)
                    raise
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
            raise UsageError(f"{self.flag} {self.path}: cannot write it: {e.strerror or e}") from None

    # ---------------------------------------------------------------- folders

    def make_parents(self) -> None:
        """Creates the missing parents of a folder output, remembering them for `discard`.

        Raises:
            UsageError: one could not be created.
        """
        for p in _missing_parents(self.path.parent):
            try:
                p.mkdir()
            except FileExistsError:
                continue
            except OSError as e:
                self.discard()
                raise self._fail(f"cannot create the folder {p}", e) from None
            self.created.append(p)

    def make_dir(self) -> Path:
        """Creates the folder output itself in place (its parents too); an existing folder is kept.

        For outputs filled step by step (``tour --out``). Returns the path.
        """
        self.make_parents()
        if not self.path.is_dir():
            try:
                self.path.mkdir()
            except OSError as e:
                self.discard()
                raise self._fail("cannot create it", e) from None
            self.created.append(self.path)
        self.preexisting = set(os.listdir(self.path))
        return self.path

    def temp_dir(self) -> Path:
        """Creates the parents, then a fresh temporary folder beside the target, to fill and `commit`.

        Raises:
            UsageError: the folder could not be created; what was created is removed.
        """
        self.make_parents()
        tmp = None
        try:  # a SIGTERM between mkdir and the owner file would leave tmp to no one: held until it is marked
            with held_interrupts():
                try:
                    tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.tmp-", dir=self.path.parent))
                except OSError as e:
                    self.discard()
                    raise self._fail(f"cannot create a folder in {self.path.parent}", e) from None
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the output is an ordinary folder
                mark_owner(tmp)  # from here the supervisor removes it if this process dies
                register_publication(tmp, self.path)  # what is written inside names the published path
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def commit(self, tmp: Path) -> None:
        """Renames the finished ``tmp`` folder to the target; an old target is moved aside, then removed.

        Without ``replace`` (no ``--force``) the rename is exclusive
        (`publish_noreplace`): of two runs writing the same new path, the
        second gets "already exists" and its ``tmp`` is kept for `discard`.

        Raises:
            UsageError: without ``replace``, the target appeared since the check.
        """
        old = None
        write_marker(tmp, self.noun)
        if not self.replace:
            publish_noreplace(tmp, self.path, self.flag)
            self.created.clear()
            return
        if self.only_if_empty:
            try:  # rename(2) over a folder replaces it only while it is empty (ENOTEMPTY otherwise)
                os.rename(tmp, self.path)
            except OSError as e:
                if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise UsageError(f"{self.flag} {self.path} is no longer empty (another run wrote it since "
                                     f"the check); pass --force to replace it, or choose another "
                                     f"{self.flag}") from None
                raise
            self.created.clear()
            return
        # Held: a SIGTERM between the two renames would leave the old output moved aside and no new one.
        published = False
        try:
            with held_interrupts():
                if self.path.exists():
                    check_replaceable(self.path, self.flag, self.noun or "output")  # again: it may have changed
                    old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.old-", dir=self.path.parent))
                    os.replace(self.path, old / self.path.name)
                os.replace(tmp, self.path)
                published = True
                self.created.clear()  # they hold the output now
        finally:
            if old is not None and published:  # (not published: the old output stays where it was moved)
                shutil.rmtree(old, ignore_errors=True)

    def discard(self, tmp: Path | None = None) -> None:
        """Removes ``tmp``, what the work added to a `make_dir` folder, then the folders this object created.

        A folder filled in place (`make_dir`, ``tour --out``) loses the entries
        that were not there when `make_dir` ran, so an interrupted or failed
        run leaves no half-written output; what the user had there is kept.
        The created folders are removed innermost first, only if empty.
        """
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if self.preexisting is not None and self.path.is_dir():
            for name in set(os.listdir(self.path)) - self.preexisting:
                entry = self.path / name
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        entry.unlink()
            self.preexisting = None
        for p in reversed(self.created):
            with contextlib.suppress(OSError):
                p.rmdir()  # only if empty: never removes anything the user put there
        self.created.clear()


#: Set by `tflab.process.supervisor.ChildChannel` in a supervised child (this module imports nothing of it):
#: ``announce_hook(path)`` tells the supervisor about a temporary folder; ``report_hook()`` is the
#: stream that reaches the supervisor's stdout.
announce_hook = None
report_hook = None


def _stdout_stream(path: Path):
    """The supervisor's report stream when ``path`` names this process's stdout, else None."""
    if os.path.abspath(path) not in ("/dev/stdout", "/proc/self/fd/1", "/dev/fd/1", f"/proc/{os.getpid()}/fd/1"):
        return None
    return report_hook() if report_hook is not None else None


def _special_kind(p: Path) -> str | None:
    """"character device", "FIFO", ... when ``p`` (links followed) exists and is neither file nor folder."""
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    for test, name in ((stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return None


def output_path(path: str | os.PathLike, flag: str, *, folder: bool = False, overwrite: bool = False,
                example: str = "out.txt", exclusive: bool | None = None, noun: str | None = None) -> OutputPath:
    """Checks, before any work, that a user's output path can be written, by really writing there.

    A file output needs an existing folder (its parent is never created); a
    folder output may have missing parents, which are created only when
    writing starts (`OutputPath.temp_dir`, `OutputPath.make_dir`) and removed
    again by `OutputPath.discard`. The probe creates and removes a temporary
    file (or folder) in the nearest existing folder, because `os.access`
    ignores read-only mounts and says yes to root on ``/proc`` and ``/sys``
    (``access(2)``: "the check is done using the calling process's real UID
    ... root ... X_OK").

    Args:
        path: the path the user gave.
        flag: the option that gave it (``"--dot"``, ``"--out"``), for messages.
        folder: True when the output is a folder (``export --out``).
        overwrite: False (the default) refuses an existing file: a verb passes its
            ``--force`` here (``--hlo`` without ``--force`` keeps the old file).
            Existing folders are the caller's to judge (``export --force`` rules).
        example: a file name for the "give a file path such as" hint.
        exclusive: for a folder output, publish it only if nothing took the
            path since this check (`OutputPath.commit` without ``--force``).
            False (``--force``): an existing folder is replaced, and only when
            tflab wrote it (`check_replaceable`: its `MARKER` and nothing else).
            None: the caller fills the folder in place (`OutputPath.make_dir`).
        noun: a folder output's kind (``"export"``, ``"lowering"``, ``"tour"``): written into its
            marker, and ``--force`` replaces only a folder of the same kind (`check_replaceable`).

    Leftover ``.NAME.tmp-*`` folders beside the path whose owner is gone (a run
    killed with SIGKILL) are removed first, with one line on stderr (`sweep_beside`).

    Returns:
        An `OutputPath` to write through (`OutputPath.write` for files;
        `OutputPath.temp_dir` + `OutputPath.commit` or `OutputPath.make_dir`
        for folders).

    Raises:
        UsageError: one line: a folder where a file is wanted (or the reverse),
            a missing folder, an existing file with ``overwrite=False``, a
            path with a NUL byte or a name too long for the file system, or a
            place where creating a file fails (the OS's reason quoted).
            An existing device or FIFO is not an error: it is written in place
            (``--dot /dev/null``); a symlink is followed (its target written).

    Example:

    >>> output_path("/proc/x.dot", "--dot")
    Traceback (most recent call last):
    tflab.errors.UsageError: --dot /proc/x.dot: cannot create a file in /proc (No such file or directory); ...
    """
    text = os.fspath(path)
    if not text:
        raise UsageError(f"{flag}: empty path; give a {'folder' if folder else 'file'} path")
    check_path_text(text, flag)
    check_not_parent_ref(text, flag)
    if describe_existing(Path(text)) == "a symlink loop":
        raise UsageError(f"{flag} {shorten_path(text)}: is a symlink loop (the links point at each other); "
                         f"remove them or choose another {flag}")
    sweep_beside(text)
    if folder and exclusive is False and Path(text).is_dir():
        check_replaceable(Path(text), flag, noun or "output")
    try:
        out = _output_path(Path(text), flag, folder=folder, overwrite=overwrite, example=example)
        if folder:
            out.replace = not exclusive
            out.noun = noun
        return out
    except OSError as e:  # os.stat's ENAMETOOLONG, ELOOP, EACCES on a parent, ...
        raise UsageError(f"{flag} {shorten_path(text)}: {e.strerror or e}; choose another path") from None


def _output_path(p: Path, flag: str, *, folder: bool, overwrite: bool, example: str) -> OutputPath:
    kind = _special_kind(p)
    if kind == "FIFO" and not folder:
        claim_fifo(p, flag)  # a FIFO nobody reads is refused now, before the verb's work
    if kind and not folder:
        return OutputPath(p, flag, in_place=True)  # written in place; nothing to overwrite or probe
    if kind:
        raise UsageError(f"{flag} {p}: is a {kind}, not a folder; choose another {flag}")
    if p.is_symlink():  # write through the link (its target, created if missing); keep the link
        p = Path(os.path.realpath(p))
    if folder:
        if p.exists() and not p.is_dir():
            raise UsageError(f"{flag} {p}: exists and is not a folder; choose another {flag}")
        base = _nearest_existing(p if p.exists() else p.parent)
        if base.exists() and not base.is_dir():
            raise UsageError(f"{flag} {p}: {base} is a file, not a folder; choose another {flag}")
        try:
            with held_interrupts():  # never a probe folder left by a signal between mkdir and rmdir
                os.rmdir(tempfile.mkdtemp(prefix=".tflab-probe-", dir=base))
        except OSError as e:
            raise UsageError(f"{flag} {p}: cannot create a folder in {base} ({e.strerror}); "
                             f"choose another {flag}") from None
        return OutputPath(p, flag, folder=True)
    if p.is_dir():
        raise UsageError(f"{flag} {p}: is a directory; give a file path such as {p / example}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        base = _nearest_existing(parent)
        what = describe_existing(base) if base != parent or parent.exists() or parent.is_symlink() else None
        if what not in (None, "a folder"):  # out/afile/g.dot with out/afile a file: "create it" would fail
            raise UsageError(f"{flag} {p}: {base} is {what}, not a folder; choose another path")
        raise UsageError(f"{flag} {p}: folder {parent.absolute()} does not exist; create it or pick another path")
    if (p.exists() or p.is_symlink()) and not overwrite:
        raise UsageError(f"{flag} {p} exists; pass --force to overwrite it")
    try:
        fd, probe = tempfile.mkstemp(prefix=".tflab-probe-", dir=parent)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise UsageError(f"{flag} {p}: cannot create a file in {parent.absolute()} ({e.strerror}); "
                         f"choose another path") from None
    return OutputPath(p, flag, replace=overwrite)


# ----------------------------------------------------------------------------- what tflab wrote


# ----------------------------------------------------------------------------- temporary folders

def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    return data.rsplit(")", 1)[-1].split()[19]  # fields after "(comm)" start at field 3


def mark_owner(folder: Path) -> None:
    """Writes `OWNER` (this pid and its start time) into a temporary folder and tells the supervisor.

    The supervisor (`tflab.process.supervisor.run_child`) removes what its child announced when the child
    was killed; a later run removes what `sweep_stale` finds with its owner gone.
    """
    pid = os.getpid()
    with contextlib.suppress(OSError):
        (Path(folder) / OWNER).write_text(f"{pid} {_start_time(pid) or '?'}\n")
    if announce_hook is not None:
        announce_hook(Path(folder))


def owner_gone(folder: Path) -> int | None:
    """The owner's pid when ``folder``'s `OWNER` names a process that is no longer running, else None.

    Only this user's regular file is read, never through a link nor blocking (a FIFO there hung
    every tflab command)."""
    from tflab._io.path_checks import open_regular

    try:
        fd = open_regular(Path(folder) / OWNER, follow=False)  # the one non-blocking open of a regular file
        try:
            if os.fstat(fd).st_uid != os.getuid():
                return None
            pid_text, start = os.read(fd, 256).decode(errors="replace").split()[:2]
        finally:
            os.close(fd)
        pid = int(pid_text)
    except (OSError, ValueError, UsageError):
        return None
    now = _start_time(pid)
    if now is None or (start != "?" and now != start):
        return pid
    return None


def private_temp_dir() -> tuple[Path, dict[str, str]]:
    """An owned folder for a verb's processes to use as ``TMPDIR``, and the environment entries that say so.

    What other libraries leave in ``TMPDIR`` when a process is killed (AutoGraph's
    ``__autograph_generated_file*.py``, deleted only at a normal exit) goes with the folder.

    Returns:
        ``(folder, {"TMPDIR": folder, "TFLAB_SYSTEM_TMPDIR": the user's temporary folder})``; the
        caller removes the folder when the processes are gone (a later run sweeps it after a SIGKILL).
    """
    system = system_temp_dir()
    folder = owned_temp_dir("tflab_tmp_", dir=system)
    return folder, {"TMPDIR": str(folder), "TFLAB_SYSTEM_TMPDIR": system}


def owned_temp_dir(prefix: str, dir: str | os.PathLike | None = None) -> Path:
    """``tempfile.mkdtemp(prefix=…)`` carrying `OWNER` in `system_temp_dir` (or ``dir``); stale ones of the
    same prefix are swept first."""
    dir = dir or system_temp_dir()
    # Every tflab_* folder of a killed run, not only this prefix's (a killed lower's tflab_lower_* is
    # swept by the next run of any verb).
    sweep_stale(Path(dir), "tflab_" if prefix.startswith("tflab_") else prefix)
    tmp = None
    try:
        with held_interrupts():  # no SIGTERM between mkdir and the owner file (`OutputPath.temp_dir`)
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
            mark_owner(tmp)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def sweep_stale(parent: Path, prefix: str, say=None, match=None) -> list[Path]:
    """Removes the folders ``parent/prefix*`` whose `OWNER` is gone (a run killed with SIGKILL).

    ``match(name)``, when given, must also say yes (`sweep_beside`: every ``.*.tmp-*`` name).

    Says so in one line on stderr (or through ``say``). Folders without `OWNER` (not tflab's, or
    from an older tflab) and folders of running processes are kept.

    Returns:
        The folders removed.
    """
    import sys

    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix) and (match is None or match(n))]
    except OSError:
        return removed
    for name in names:
        entry = Path(parent) / name
        if entry.is_symlink() or not entry.is_dir():
            continue
        pid = owner_gone(entry)
        if pid is None:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    if removed:
        line = (f"tflab: removed {len(removed)} temporary folder(s) left by a run that was killed "
                f"({', '.join(shorten_path(p, 80) for p in removed[:3])})")
        (say or (lambda text: print(text, file=sys.stderr)))(line)
    return removed


def _temp_output_name(name: str) -> bool:
    """``.NAME.tmp-XXXX``: the temporary folder of a folder output (`OutputPath.temp_dir`), any NAME."""
    return name.startswith(".") and ".tmp-" in name[1:]


def sweep_beside(target: str | os.PathLike) -> list[Path]:
    """`sweep_stale` for every ``.*.tmp-*`` folder in the folder of an output path (any verb writing there).

    Not only the same NAME's: after ``export --out run1`` is killed, ``export --out run2`` in the same
    folder removes ``.run1.tmp-*`` (it can hold hundreds of MB). Only folders whose `OWNER` names a
    process that is gone are removed; a running export's folder, and folders without `OWNER`, stay.
    """
    p = Path(target)
    with contextlib.suppress(OSError, ValueError):
        if p.is_symlink():
            p = Path(os.path.realpath(p))
        parent = p.parent if str(p.parent) else Path(".")
        if parent.is_dir():
            return sweep_stale(parent, ".", match=_temp_output_name)
    return []
