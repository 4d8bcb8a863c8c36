"""The one way a helper process hands a result back to the process that started it.

The parent names a path in a folder it owns (an `tflab._io.paths.owned_temp_dir`,
swept after a SIGKILL); the child calls `send_result` once per result; the
parent waits until `result_ready` and calls `receive_result`. A result has up
to three parts, all written by `send_result` and checked by `receive_result`:

* ``data``: JSON (a report's ``to_dict``, the workers' rows), kept in the
  result file itself;
* ``arrays``: numpy arrays by name, in an ``.npz`` beside it
  (``np.load(allow_pickle=False)`` on the way back);
* ``objects``: Python objects the parent needs as objects (the tour's
  `ExportReport` for its page, a `LossScalingDemo`), pickled beside it.
  Only tflab's own child writes them, into the parent's own folder.

**Commit rule.** The side files are written first, each under a hidden
temporary name (``.NAME.npz.tmp-PID``) and renamed into place; the result
file, which records each side file's size and SHA-256, is written last, the
same way. ``os.replace`` is atomic within a folder, so the result's path
either does not exist or holds a complete result: a child killed mid-write
(SIGKILL, the OOM killer, its parent's timeout) leaves only temporary names,
never a half result the parent could read. A side file that does not match
its record (truncated, or left by an earlier attempt) is a `ChannelError`,
never data.

The verb's own child of the ``tflab`` supervisor is not a helper: its report
is a live stream (`tflab.process.supervisor.ChildChannel`, the report pipe),
printed while it runs. The TFLite converter workers stream events too (one
JSON line as each variant starts and ends, `tflab.litert.workers`), and each
converted ``.tflite`` is published the same way (``.part``, then renamed).

Example:
    >>> send_result(f"{folder}/lab.json", data={"steps": 3}, arrays={"w": w})  # in the child
    >>> if result_ready(f"{folder}/lab.json"):                                 # in the parent
    ...     r = receive_result(f"{folder}/lab.json")
    >>> r.data, r.arrays["w"].shape
    ({'steps': 3}, (4, 1))
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pickle
from typing import Any, Mapping

from tflab.errors import TflabError

#: The ``"format"`` of a result file; `receive_result` refuses any other.
RESULT_FORMAT = "tflab-result/1"


class ChannelError(TflabError):
    """A result that is missing, incomplete or not tflab's: the message says which and where."""


@dataclasses.dataclass
class Result:
    """One result as the child sent it.

    Attributes:
        data: the JSON part (None when the child sent none).
        arrays: the arrays by name ({} when none).
        objects: the unpickled objects part (None when none).
        pid: the pid of the process that sent it.
    """

    data: Any
    arrays: dict
    objects: Any
    pid: int


def _publish(path: str, payload: bytes) -> None:
    """Writes ``payload`` under a hidden temporary name beside ``path``, then renames it to ``path``."""
    folder, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{base}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def _side(path: str, suffix: str, payload: bytes) -> dict:
    """Publishes one side file (``PATH.npz``, ``PATH.pickle``); its record for the result file."""
    _publish(f"{path}.{suffix}", payload)
    return {"file": f"{os.path.basename(path)}.{suffix}", "bytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest()}


def send_result(path: str | os.PathLike, data: Any = None, *, arrays: Mapping[str, Any] | None = None,
                objects: Any = None) -> None:
    """In the child: publishes one result at ``path`` (side files first, the result file last).

    Args:
        path: where the parent waits for it (a file in a folder the parent owns).
        data: JSON-serializable data (`json.dumps` must take it as is).
        arrays: numpy arrays by name (an ``.npz`` beside the result).
        objects: picklable Python objects (a pickle beside the result).

    Raises:
        TypeError: ``data`` is not JSON (nothing is published then).
        pickle.PicklingError: ``objects`` do not pickle (nothing is published).
        OSError: the folder cannot be written.
    """
    path = os.fspath(path)
    text = json.dumps(data)  # every part serialized before any file: a bad value publishes nothing
    sides = {}
    if arrays:
        import numpy as np

        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
        sides["arrays"] = ("npz", buf.getvalue())
    if objects is not None:
        sides["objects"] = ("pickle", pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL))
    record: dict[str, Any] = {"format": RESULT_FORMAT, "pid": os.getpid(), "data": json.loads(text)}
    for part, (suffix, payload) in sides.items():
        record[part] = _side(path, suffix, payload)
    _publish(path, json.dumps(record).encode())


def result_ready(path: str | os.PathLike) -> bool:
    """In the parent: True once ``path`` holds a committed result (its result file exists)."""
    return os.path.isfile(os.fspath(path))


def _read_side(path: str, record: dict) -> bytes:
    side = os.path.join(os.path.dirname(os.path.abspath(path)), record["file"])
    try:
        with open(side, "rb") as f:
            payload = f.read()
    except OSError as e:
        raise ChannelError(f"{path}: its {record['file']} is missing ({e.strerror or e})") from None
    if len(payload) != record["bytes"] or hashlib.sha256(payload).hexdigest() != record["sha256"]:
        raise ChannelError(f"{path}: its {record['file']} does not match the result "
                           f"({len(payload)} bytes, {record['bytes']} recorded): not this result's file")
    return payload


def receive_result(path: str | os.PathLike) -> Result:
    """In the parent: reads the result at ``path`` and checks every part against its record.

    Returns:
        A `Result`.

    Raises:
        ChannelError: no result file (the child did not commit one), a file
            that is not a tflab result, or a side file that does not match.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ChannelError(f"{path}: no result (the child did not commit one)") from None
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("format") != RESULT_FORMAT:
        raise ChannelError(f"{path}: not a tflab result ({len(raw)} bytes; expected a {RESULT_FORMAT} "
                           f"file written by tflab.process.channel.send_result)")
    arrays: dict = {}
    if record.get("arrays"):
        import numpy as np

        with np.load(io.BytesIO(_read_side(path, record["arrays"])), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    objects = None
    if record.get("objects"):
        objects = pickle.loads(_read_side(path, record["objects"]))
    return Result(data=record.get("data"), arrays=arrays, objects=objects, pid=int(record.get("pid", 0)))
