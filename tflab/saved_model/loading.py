"""Reading a SavedModel: the folder checks, one cached ``tf.saved_model.load``, and its SignatureDefs' tensors.

`load_saved_model` keeps the last SavedModel loaded (keyed by its folder and
``saved_model.pb``'s mtime), so the TFLite checks after a round trip do not load
it again. `signature_inputs`/`signature_outputs` read a loaded signature
function's `tf.TensorSpec`s as `TensorInfo`s; `normalize_outputs` names outputs
the way a SignatureDef does.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from tflab.errors import UsageError
from tflab.saved_model.records import TensorInfo

__all__ = ["DEFAULT_SIGNATURE", "remember_loaded", "require_saved_model_dir", "require_readable_saved_model",
           "load_saved_model", "tensor_info", "signature_inputs", "signature_outputs", "normalize_outputs", "to_numpy"]

DEFAULT_SIGNATURE = "serving_default"  # tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY


_LOADED: dict[tuple[str, int], Any] = {}


def _load_key(path: str) -> tuple[str, int]:
    pb = os.path.join(path, "saved_model.pb")
    return os.path.realpath(path), (os.stat(pb).st_mtime_ns if os.path.exists(pb) else 0)


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
    if not os.path.exists(path):
        raise UsageError(f"{what} {path!r} does not exist: give a SavedModel folder (e.g. from save_and_reload)")
    if not os.path.isdir(path):
        raise UsageError(f"{what} {path!r} is a file, not a SavedModel folder: give the folder holding "
                         f"saved_model.pb")
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

        try:
            with open(pb, "rb") as f:
                parse_saved_model(f.read())
        except (DecodeError, OSError, ValueError) as e:
            raise UsageError(f"{what} {path!r}: {pb} is not a readable SavedModel ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:160] if str(e) else 'cannot parse'}); export it "
                             f"again") from None
    return path


def load_saved_model(path: str | os.PathLike) -> Any:
    """`tf.saved_model.load`, reusing the last load of the same folder and saved_model.pb version."""
    import tensorflow as tf

    path = os.fspath(path)
    key = _load_key(path)
    if key not in _LOADED:
        from tflab.custom_op_loader import load_custom_ops_for

        load_custom_ops_for(path)
        remember_loaded(path, tf.saved_model.load(path))
    return _LOADED[key]


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


