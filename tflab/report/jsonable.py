"""Turns reports (dataclasses holding numpy and TF values) into JSON."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from typing import Any

import numpy as np


def to_jsonable(obj: Any) -> Any:
    """Converts dataclasses, numpy values, TensorSpecs and DTypes to JSON types.

    Non-finite floats become the strings ``"nan"``, ``"inf"``, ``"-inf"`` so
    the output stays strict JSON.
    """
    import tensorflow as tf

    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return to_jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.name.startswith("_")}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, tf.TensorSpec):
        return {"shape": tf.TensorShape(obj.shape).as_list() if obj.shape.rank is not None else None,
                "dtype": obj.dtype.name, "name": obj.name}
    if isinstance(obj, tf.dtypes.DType):
        return obj.name
    if isinstance(obj, tf.TensorShape):
        return obj.as_list() if obj.rank is not None else None
    if isinstance(obj, tf.Tensor):
        return to_jsonable(obj.numpy())
    if obj is None or isinstance(obj, str):
        return obj
    return repr(obj)


def dumps(obj: Any) -> str:
    """`json.dumps` of `to_jsonable(obj)`, indented, keys in insertion order."""
    return json.dumps(to_jsonable(obj), indent=2)
