"""Reading a SavedModel: the folder checks, one cached ``tf.saved_model.load``, and its SignatureDefs' tensors.

`load_saved_model` is the one SavedModel loader (export, check-tflite, the tour,
the API): every unreadable or inconsistent SavedModel (no ``variables/``, a
truncated or empty ``saved_model.pb``, variables of other shapes) is one
`UsageError` line. It keeps the last SavedModel loaded, keyed by its content
(``saved_model.pb``'s and ``variables.index``'s bytes, and each variables data
file's size and inode), not by an mtime, so a replaced ``variables/`` folder is
read afresh; the TFLite checks after a round trip do not load it again. `signature_inputs`/`signature_outputs` read a loaded signature
function's `tf.TensorSpec`s as `TensorInfo`s; `normalize_outputs` names outputs
the way a SignatureDef does.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Mapping

import numpy as np

from tflab.errors import UsageError
from tflab.saved_model.records import TensorInfo

__all__ = ["DEFAULT_SIGNATURE", "remember_loaded", "require_saved_model_dir", "require_readable_saved_model",
           "load_saved_model", "tensor_info", "signature_inputs", "signature_outputs", "normalize_outputs", "to_numpy"]

DEFAULT_SIGNATURE = "serving_default"  # tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY


_LOADED: dict[tuple, Any] = {}


def _load_key(path: str) -> tuple:
    """The folder and a digest of what a load reads: ``saved_model.pb``, ``variables.index`` (bytes) and
    each variables shard's size, inode and mtime (a shard is GBs; a replaced one is a new inode)."""
    import hashlib

    digest = hashlib.sha256()
    from tflab._io.path_checks import read_regular

    for name in ("saved_model.pb", "saved_model.pbtxt", os.path.join("variables", "variables.index")):
        with contextlib.suppress(OSError, UsageError):  # a FIFO is never opened: refused by the load
            digest.update(name.encode() + b"\0" + read_regular(os.path.join(path, name)) + b"\0")
    var_dir = os.path.join(path, "variables")
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(var_dir)):
            st = os.stat(os.path.join(var_dir, name))
            digest.update(f"{name}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns};".encode())
    return os.path.realpath(path), digest.hexdigest()


def remember_loaded(path: str | os.PathLike, loaded: Any) -> None:
    """Keeps the last loaded SavedModel, so the TFLite checks that follow need not load it again."""
    _LOADED.clear()  # one at a time: a loaded model holds its variables in memory
    _LOADED[_load_key(os.fspath(path))] = loaded


def require_saved_model_dir(path: Any, what: str = "saved_model_dir") -> str:
    """``path`` as a str when it is a SavedModel folder; else one `UsageError` line saying what it is.

    TF's own answer is ``OSError: SavedModel file does not exist at:
    PATH/{saved_model.pbtxt|saved_model.pb}`` from deep in the converter
    (``tensorflow/python/saved_model/loader_impl.py``).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"{what} must be a SavedModel folder path (str or os.PathLike), got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.exists(path) and not os.path.islink(path):
        raise UsageError(f"{what} {path!r} does not exist: give a SavedModel folder (e.g. from save_and_reload)")
    if os.path.isfile(path):
        raise UsageError(f"{what} {path!r} is a file, not a SavedModel folder: give the folder holding "
                         f"saved_model.pb")
    from tflab._io.paths import input_path

    # A FIFO, a device, a symlink loop: named as such, without opening it (the one input place).
    input_path(path, what, want="folder", what="a SavedModel folder (the folder holding saved_model.pb)")
    from tflab._io.path_checks import check_saved_model_files

    check_saved_model_files(path, what)  # saved_model.pb a FIFO: named, never opened (TF's open blocks)
    if not any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
        raise UsageError(f"{what} {path!r} is a folder without saved_model.pb, so not a SavedModel")
    return path


def require_readable_saved_model(path: Any, what: str = "saved_model_dir") -> str:
    """`require_saved_model_dir`, then ``saved_model.pb`` parsed as TF's ``SavedModel`` protobuf.

    TF's own answer for a corrupt file is ``OSError: Cannot parse file …:
    Error parsing message with type 'tensorflow.SavedModel'`` from the
    converter (``loader_impl.parse_saved_model``).

    Raises:
        UsageError: not a SavedModel folder, or its ``saved_model.pb`` is not
            a readable ``tensorflow.SavedModel`` message (truncated, corrupt).
    """
    path = require_saved_model_dir(path, what)
    pb = os.path.join(path, "saved_model.pb")
    if os.path.isfile(pb):
        from google.protobuf.message import DecodeError

        from tflab._tf.saved_model import parse_saved_model

        from tflab._io.path_checks import read_regular

        try:
            parse_saved_model(read_regular(pb, what=f"saved_model.pb in {what}"))
        except (DecodeError, OSError, ValueError) as e:
            raise UsageError(f"{what} {path!r}: {pb} is not a readable SavedModel ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:160] if str(e) else 'cannot parse'}); export it "
                             f"again") from None
    return path


def load_saved_model(path: str | os.PathLike, what: str = "saved_model_dir") -> Any:
    """`tf.saved_model.load`, reusing the last load of the same folder and content; the one SavedModel loader.

    Args:
        path: the SavedModel folder.
        what: the argument's name, for messages (``"SAVED_MODEL"`` from the CLI).

    Returns:
        The loaded object (``tf.saved_model.load``'s ``_UserObject``).

    Raises:
        UsageError: not a SavedModel folder; ``saved_model.pb`` unreadable; TF could not load it
            (``variables/`` missing: TF's ``FileNotFoundError … TensorSliceReader``; variables of
            other shapes: ``ValueError: Received incompatible tensor``), in one line.
    """
    import tensorflow as tf

    path = require_readable_saved_model(path, what)
    key = _load_key(path)
    if key not in _LOADED:
        from tflab.custom_op_loader import load_custom_ops_for

        load_custom_ops_for(path)
        try:
            loaded = tf.saved_model.load(path)
        except Exception as e:  # noqa: BLE001  (whatever TF raises on a user's folder: unreadable)
            raise UsageError(f"{what} {path!r} is not a readable SavedModel ({_first_line(e)}); "
                             f"export it again") from None
        _LOADED.clear()  # one at a time: a loaded model holds its variables in memory
        _LOADED[key] = loaded
    return _LOADED[key]


def _first_line(e: BaseException) -> str:
    """``Type: first line of the message`` (TF's messages run to pages), cut to 200 characters."""
    text = (str(e).strip().splitlines() or [""])[0]
    if isinstance(e, Exception) and "variables" in str(e) and "TensorSliceReader" in str(e):
        text = "its variables/ folder is missing or unreadable: " + text
    return f"{type(e).__name__}: {text[:200]}"


def tensor_info(name: str, spec) -> TensorInfo:
    """`TensorInfo` of a `tf.TensorSpec`."""
    shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
    return TensorInfo(name, spec.dtype.name, shape)


def signature_inputs(fn) -> dict[str, TensorInfo]:
    """Inputs of a loaded signature function (``loaded.signatures[key]``), by name, sorted."""
    return {k: tensor_info(k, s) for k, s in sorted(fn.structured_input_signature[1].items())}


def signature_outputs(fn) -> dict[str, TensorInfo]:
    """Outputs of a loaded signature function, by name."""
    return {k: tensor_info(k, s) for k, s in fn.structured_outputs.items()}


def to_numpy(value) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def normalize_outputs(structured) -> dict:
    """Names outputs the way SignatureDefs do: dict keys, else ``output_0``, ``output_1``…

    Mirrors tensorflow/python/saved_model/signature_serialization.py
    (``_normalize_outputs``).
    """
    import tensorflow as tf

    if isinstance(structured, Mapping):
        return dict(structured)
    flat = tf.nest.flatten(structured)
    return {f"output_{i}": t for i, t in enumerate(flat)}


