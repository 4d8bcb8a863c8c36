"""What stands at a path, and the one guarded path for reading a user's input path.

`describe_existing` names what is at a path for a message, `check_path_text`
refuses a path ``os.stat`` cannot look at (a NUL byte, a name over
``NAME_MAX``), `shorten_path` cuts one for an error line, and `input_path`
probes an input (FILE.py, MODEL, examples, SavedModel) without opening it.
`tflab._io.paths` (output paths) builds on them and re-exports them.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from pathlib import Path

from tflab.errors import UsageError


def describe_existing(p: Path) -> str | None:
    """What stands at ``p``, for a message: "a FIFO", "a character device", "a symlink loop", ...

    Returns:
        None when nothing is there (a dangling symlink is "a dangling symlink").
    """
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return "a dangling symlink" if os.path.islink(p) else None
    except NotADirectoryError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop"
        raise
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a regular file"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(st.st_mode):
            return name
    return "not a file or folder"


def check_path_text(path: str | os.PathLike, flag: str) -> None:
    """Refuses a path ``os.stat`` cannot even look at, as one line (call before any ``Path.exists()``).

    ``Path.exists()`` raises ``ValueError: embedded null byte`` for a NUL and
    ``OSError: [Errno 36] File name too long`` for a component over the file
    system's ``NAME_MAX`` (255 bytes on ext4), out of ``main()`` as a traceback.

    Raises:
        UsageError: a NUL byte, or ``lstat`` failing with anything but "no
            such file" (ENAMETOOLONG, ELOOP, EACCES on a parent folder).
    """
    text = os.fspath(path)
    if "\0" in str(text):
        raise UsageError(f"{flag} {text!r}: the path contains a NUL byte; give a plain path")
    try:
        os.lstat(text)
    except (FileNotFoundError, NotADirectoryError):
        pass  # a path to create, or under a file: the callers name that case
    except OSError as e:
        raise UsageError(f"{flag} {shorten_path(text)}: {e.strerror or e}; choose another path") from None


def check_tf_path_text(path: str | os.PathLike, flag: str, why: str | None = None) -> None:
    """Refuses a path TensorFlow cannot take: one that is not valid UTF-8.

    TF's file system layer takes paths as UTF-8 strings (``tf.saved_model.save``, ``tf.summary``'s
    event writer, XLA's dump folder); a name with other bytes (surrogate-escaped in Python) raised
    ``UnicodeEncodeError`` from inside TF after the work had started.

    Args:
        path: the path as the user gave it.
        flag: the option or argument it came from, for the message.
        why: how TensorFlow takes it, for the message; default: it writes through the path.

    Raises:
        UsageError: the path is not valid UTF-8.
    """
    text = os.fsdecode(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        how = why or f"TensorFlow writes {flag} through UTF-8 paths only"
        raise UsageError(f"{flag} {text.encode('utf-8', 'surrogateescape')!r}: the path is not valid UTF-8, and "
                         f"{how}; choose a UTF-8 name") from None


def shorten_path(text: str | os.PathLike, limit: int = 120) -> str:
    """A path cut to ``limit`` characters for an error line (a 300-character name stays readable)."""
    s = os.fspath(text)
    s = s if isinstance(s, str) else os.fsdecode(s)
    return s if len(s) <= limit else f"{s[:limit]}…({len(s)} chars)"


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def input_path(path: str | os.PathLike, flag: str, *, want: str = "file", what: str = "a file") -> Path:
    """Probes an input path without opening it: the one input place (FILE.py, MODEL, examples, SavedModel).

    ``open`` on a FIFO blocks until a writer comes (for ever); a device reads for ever or nothing. So
    the path is judged from ``os.stat`` alone, and each kind is named as such.

    Args:
        path: what the user gave.
        flag: the argument's name for messages (``"file"``, ``"--examples"``, ``"SAVED_MODEL"``).
        want: ``"file"`` (a regular file), ``"folder"``, or ``"any"`` (a regular file or a folder).
        what: words for what was expected, e.g. ``"a .py file"``.

    Returns:
        The path.

    Raises:
        UsageError: the path is missing, a dangling symlink, a symlink loop, under a regular file,
            unreadable, a FIFO, a device or a socket, or a folder where a file is wanted (or the
            reverse).
    """
    check_path_text(path, flag)
    text = shorten_path(path)
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if os.path.islink(p):
            raise UsageError(f"{flag} {text!r} is a dangling symlink (to {os.readlink(p)!r}); give {what}") from None
        raise UsageError(f"{flag} {text!r} does not exist; give {what}") from None
    except NotADirectoryError:
        raise UsageError(f"{flag} {text!r} does not exist (a part of the path is a file); give {what}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{flag} {text!r} is a symlink loop (the links point at each other); "
                             f"give {what}") from None
        raise UsageError(f"{flag} {text!r}: {e.strerror or e}; give {what}") from None
    for test, name in _KINDS:
        if test(st.st_mode):
            raise UsageError(f"{flag} {text!r} is {name}, not a regular file; give {what}")
    is_dir = stat.S_ISDIR(st.st_mode)
    if want == "file" and is_dir:
        kind = what.removeprefix("a path to ")
        raise UsageError(f"{flag} {text!r} is a folder, so it is not {kind}; give {what}")
    if want == "folder" and not is_dir:
        raise UsageError(f"{flag} {text!r} is a regular file, not a folder; give {what}")
    if not os.access(p, os.R_OK | (os.X_OK if is_dir else 0)):
        raise UsageError(f"{flag} {text!r} cannot be read (permission denied); give {what}")
    return p


def _kind_of_mode(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), *_KINDS):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY, *, follow: bool = True,
                 what: str = "this file", mode: int = 0o666) -> int:
    """Opens ``path`` as a regular file without ever blocking: the one "open a file tflab reads" place.

    ``open(2)`` of a FIFO without a writer (for reading) or a reader (for writing) blocks for ever,
    and a character device reads for ever. The file is opened with ``O_NONBLOCK`` (a FIFO then opens
    at once, or fails with ENXIO), judged with ``fstat`` on the descriptor that was opened (no race
    between a check and the open), and only a regular file is kept: ``O_NONBLOCK`` is cleared again,
    so reads and writes block as usual.

    Args:
        path: the file.
        flags: ``os.open`` flags (``os.O_RDONLY``, ``os.O_WRONLY | os.O_CREAT``).
        follow: False adds ``O_NOFOLLOW`` (a symlink is refused).
        what: the words for the message ("saved_model.pb in SAVED_MODEL", "the build cache's .lock").
        mode: the permission bits of a file ``O_CREAT`` creates.

    Returns:
        The open file descriptor (the caller closes it; ``os.fdopen`` wraps it).

    Raises:
        UsageError: ``path`` is a FIFO, a device, a socket or a folder (named as such).
        OSError: the open itself failed (missing, permission denied, ELOOP with ``follow=False``).
    """
    import fcntl

    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else getattr(os, "O_NOFOLLOW", 0)),
                     mode)
    except OSError as e:
        if e.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO opened for writing with no reader; a folder
            kind = describe_existing(Path(path)) or "not a regular file"
            raise UsageError(f"{what} ({shorten_path(path)}) is {kind}, not a regular file: tflab never opens "
                             f"one (it could block for ever); replace it with the regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{what} ({shorten_path(path)}) is {_kind_of_mode(st.st_mode)}, not a regular file: "
                             f"tflab never reads one (it could block for ever); replace it with the regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike, what: str = "this file") -> bytes:
    """The bytes of a regular file, read through `open_regular` (a FIFO or device is refused, never read).

    Raises:
        UsageError: not a regular file. OSError: it cannot be opened or read.
    """
    with os.fdopen(open_regular(path, what=what), "rb") as f:
        return f.read()


#: The files TF reads from a SavedModel folder (``tensorflow/python/saved_model/loader_impl.py``,
#: ``tensorflow/core/util/tensor_bundle``): each is judged before TF opens it.
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt", os.path.join("variables", "variables.index"),
                     "fingerprint.pb")


def check_saved_model_files(folder: str | os.PathLike, flag: str) -> None:
    """Refuses a SavedModel folder whose ``saved_model.pb`` (or ``variables.index``, …) is not a regular file.

    TF opens them with a blocking ``open``: a FIFO there hung ``tflab export`` for ever, and
    ``os.path.isfile`` made ``check-tflite`` say the file was missing. Judged with ``os.stat`` only.

    Raises:
        UsageError: "FLAG F: saved_model.pb is a FIFO, not a regular file; …".
    """
    for name in SAVED_MODEL_FILES:
        p = Path(folder) / name
        try:
            what = describe_existing(p)
        except OSError:
            continue
        if what in (None, "a regular file"):
            continue
        raise UsageError(f"{flag} {shorten_path(folder)}: {name} is {what}, not a regular file, so TF would "
                         f"{'block reading it' if what in ('a FIFO', 'a character device') else 'fail to read it'}; "
                         f"replace it with the SavedModel's file (save the model again)")


def check_npz(path: str | os.PathLike, flag: str = "--examples") -> None:
    """Refuses, without TF, what cannot be an ``.npz`` of examples: a folder, no regular file, a missing
    or unreadable file, a file that is no zip archive (``np.savez`` writes a zip), and from each
    member's ``.npy`` header alone (numpy, the data left unread): an archive without arrays, a member
    that is no array or is there twice, an object array, a dtype TF has no tensor for, a negative
    dim, arrays declaring more than half this machine's memory (a zip of a few MB can inflate to that).

    Raises:
        UsageError: one line, what is wrong and how to write one (``np.savez(path, x=array)``).
    """
    import zipfile

    text = shorten_path(path)
    write = "give an .npz with one array per input name (np.savez(path, x=array))"
    if os.path.isdir(path):
        raise UsageError(f"{flag} {text!r} is a folder: {write}")
    if os.path.exists(path) and not os.path.isfile(path):  # /dev/null, a FIFO: never opened
        raise UsageError(f"{flag} {text!r} is not a regular file: {write}")
    if not os.path.isfile(path):
        raise UsageError(f"{flag} {text!r} does not exist: {write}")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag} {text!r} is not readable (permission denied): {write}")
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as e:
        raise UsageError(f"{flag} {text!r} cannot be read ({type(e).__name__}: {e}): {write}") from e
    if not is_zip:
        # np.load reads a non-zip as a pickle and blames "pickled (object) data".
        raise UsageError(f"{flag} {text!r} is not an .npz archive (np.savez writes one, an array per input name)")
    with open(path, "rb") as f:
        start = f.read(4)
    if start not in (b"PK\x03\x04", b"PK\x05\x06"):  # np.load takes only an archive at the file's start
        raise UsageError(f"{flag} {text!r} has other bytes before its zip archive, which np.load then reads as a "
                         f"pickle: write the arrays again with np.savez(path, x=array)")
    _check_npz_members(path, flag)


def _check_npz_members(path: str | os.PathLike, flag: str) -> None:
    """Each member's ``.npy`` header, read without its data (numpy, no TF): no member at all, a member
    that is no ``.npy``, an object array (stored as a pickle, which tflab never loads) or a dtype TF
    has no tensor for is refused here, before a verb loads TF, with the words `read_npz` uses."""
    import zipfile

    import numpy as np
    from numpy.lib import format as npy

    from tflab._user.arrays import check_dtype

    text = shorten_path(path)
    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            twice = next((n for n in names if names.count(n) > 1), None)
            if twice is not None:  # zipfile reads the last of them: the other would be dropped unsaid
                raise UsageError(f"{flag} {text!r} holds member {shorten_path(twice)!r} twice (np.savez writes each "
                                 f"name once): write the arrays again with np.savez(path, x=array)")
            declared = 0
            if not names:
                raise UsageError(f"{flag} {text!r} holds no arrays: give one array per input name "
                                 f"(np.savez(path, x=array))")
            for member in names:
                if not member.endswith(".npy"):
                    raise UsageError(f"{flag} {text!r} is not an .npz written by np.savez: member "
                                     f"{shorten_path(member)!r} is not a .npy (np.savez(path, x=array) writes one "
                                     f"per array)")
                with z.open(member) as f:
                    try:
                        version = npy.read_magic(f)
                    except ValueError:
                        raise UsageError(f"{flag} {text!r} is not an .npz written by np.savez: member "
                                         f"{shorten_path(member)!r} is not an array in numpy's .npy format "
                                         f"(np.savez(path, x=array) writes one per array)") from None
                    if version not in readers:  # a newer header: read_npz judges it when it loads the data
                        continue
                    shape, _, dtype = readers[version](f)
                name = member[:-len(".npy")]
                if any(d < 0 for d in shape):
                    raise UsageError(f"{flag} {text!r}: {name!r} declares the shape {tuple(shape)} in its .npy header: "
                                     f"a damaged file; write the arrays again with np.savez(path, x=array)")
                declared += math.prod(shape) * dtype.itemsize
                if dtype.hasobject:
                    raise UsageError(f"{flag} {text!r}: {name!r} is an object array of Python objects, which an "
                                     f".npz holds as a pickle and tflab never loads; give a numeric, bool or string "
                                     f"array (e.g. np.asarray(..., dtype=np.float32), or dtype=str)")
                check_dtype(name, np.empty((0,), dtype), f"{flag} {text!r}")
            from tflab.process.memory import machine_total

            memory = machine_total()
            if memory and declared > memory // 2:  # a few MB on disk can inflate to more than the machine holds
                raise UsageError(f"{flag} {text!r} declares {declared / 2**30:,.1f} GiB of arrays in its .npy headers, "
                                 f"more than half this machine's memory ({memory / 2**30:,.1f} GiB), and is read whole: "
                                 f"give fewer or smaller examples")
    except UsageError:
        raise
    except Exception as e:  # a damaged archive or header: one line, as read_npz says it
        raise UsageError(f"{flag} {text!r} is not a readable .npz ({type(e).__name__}: {e})") from e


def read_npz(path: str | os.PathLike, flag: str = "--examples") -> list[dict]:
    """Reads an ``.npz`` of examples: ``[{name: ndarray}]``, one dict per batch.

    Keys are input names (one batch), or ``"<i>/<name>"`` for several batches (the layout of the
    ``examples.npz`` that ``tflab export`` writes). Arrays keep the file's order (``np.savez``'s
    keyword order), which a model taking its inputs by position follows.

    Raises:
        UsageError: `check_npz`'s refusals, or an archive numpy cannot read (object arrays included).
    """
    import numpy as np

    check_npz(path, flag)
    import re

    from tflab._user.arrays import check_dtype

    try:
        with np.load(path, allow_pickle=False) as z:
            # np.load reads a member that is no .npy as raw bytes: refused, not fed as a string tensor.
            other = [m for m in z.zip.namelist() if not m.endswith(".npy")]
            if other:
                raise UsageError(f"{flag} {shorten_path(path)!r} is not an .npz written by np.savez: member "
                                 f"{shorten_path(other[0])!r} is not a .npy (np.savez(path, x=array) writes one per array)")
            arrays = {k: z[k] for k in z.files}
            # ... and a member named .npy that does not start with numpy's magic as raw bytes too.
            raw = [k for k, a in arrays.items() if not isinstance(a, np.ndarray)]
            if raw:
                raise UsageError(f"{flag} {shorten_path(path)!r} is not an .npz written by np.savez: member "
                                 f"{shorten_path(raw[0] + '.npy')!r} is not an array in numpy's .npy format "
                                 f"(np.savez(path, x=array) writes one per array)")
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{flag} {shorten_path(path)!r} is not a readable .npz ({type(e).__name__}: {e})") from e
    if not arrays:
        raise UsageError(f"{flag} {shorten_path(path)!r} holds no arrays: give one array per input name "
                         f"(np.savez(path, x=array))")
    for k, a in arrays.items():
        check_dtype(k, a, f"{flag} {shorten_path(path)!r}")
    # "<i>/<name>": i in ASCII digits only (str.isdigit takes '²', which int() refuses).
    layout = [re.fullmatch(r"([0-9]+)/(.*)", k, re.ASCII | re.DOTALL) for k in arrays]
    if all(layout):
        by_batch: dict[int, dict] = {}
        for m, a in zip(layout, arrays.values()):
            if not m.group(2):
                raise UsageError(f"{flag} {shorten_path(path)!r}: member {m.group(0)!r} names no input after "
                                 f"its batch index: name it '<batch>/<input name>', e.g. '0/x'")
            batch = by_batch.setdefault(int(m.group(1)), {})
            if m.group(2) in batch:  # '0/x' and '00/x': one array would silently replace the other
                raise UsageError(f"{flag} {shorten_path(path)!r}: two members name input {m.group(2)!r} of batch "
                                 f"{int(m.group(1))} ({m.group(0)!r} and another with the same number): keep one")
            batch[m.group(2)] = a
        return [by_batch[i] for i in sorted(by_batch)]
    return [arrays]


def check_outputs_apart(outputs: list[tuple[str, str, bool]], inputs: list[tuple[str, str]]) -> None:
    """Refuses an output path that is one of the verb's inputs, or a folder output that holds one.

    ``--dot m.py --force`` replaced the source file being analysed, ``--node-data X.tflite --force``
    the model being checked, and ``export SM --out DIR --force`` with ``SM`` inside ``DIR`` would
    publish over its own input: ``--force`` allows replacing an earlier output, never an input.
    Compared by real path (symlinks followed) and by ``os.path.samefile`` (hard links).

    Args:
        outputs: ``(path, flag, is_folder)`` per output the verb will write.
        inputs: ``(path, flag)`` per input path it reads.

    Raises:
        UsageError: one line naming the output, the input and what to do.
    """
    for out, oflag, is_folder in outputs:
        for inp, iflag in inputs:
            try:
                o, i = os.path.realpath(out), os.path.realpath(inp)
                same = o == i or (os.path.exists(out) and os.path.exists(inp) and os.path.samefile(out, inp))
            except (OSError, ValueError):  # a NUL byte, an odd name: the path's own check says what is wrong
                continue
            if same:
                raise UsageError(f"{oflag} {out!r} is the input {iflag} {inp!r}: writing it would replace what "
                                 f"tflab reads; choose another {oflag}")
            if is_folder and i.startswith(o.rstrip(os.sep) + os.sep):
                raise UsageError(f"{oflag} {out!r} holds the input {iflag} {inp!r}: publishing {oflag} replaces "
                                 f"that folder, the input with it; choose another {oflag}")


def check_source_apart(out: str | os.PathLike, model: object, flag: str = "out") -> None:
    """`check_outputs_apart` for a folder output and a model given by path (``FILE.py:OBJ``'s file,
    a ``.keras`` file or a SavedModel folder); a model object is no path and passes."""
    if isinstance(model, (str, os.PathLike)):
        src = os.fspath(model)
        path, sep, _ = src.rpartition(":")
        check_outputs_apart([(os.fspath(out), flag, True)], [(path if sep and path.endswith(".py") else src, "model")])
