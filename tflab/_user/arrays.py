"""The one check of the user's example arrays, shared by every verb's ``--examples`` and the API's
``examples=``: a value that becomes an array TF can take (a dtype `tf.constant` accepts, not a ragged
nested list), and an input with at least one finite value.

`tflab._io.path_checks.read_npz` (the ``.npz`` reader), `tflab.examples.example_inputs` (the binder
of a function's parameters) and `tflab.examples.Examples` (export, check-tflite, save_and_reload)
all call these, so a bad array gets the same one line wherever it is given.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tflab.errors import UsageError

#: numpy dtypes `tf.as_dtype` maps to a TF dtype (``tensorflow/python/framework/dtypes.py``'s
#: ``_NP_TO_TF``, with ml_dtypes' bfloat16 and float8 types); bytes and unicode arrays become tf.string.
TF_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                       "float16", "float32", "float64", "complex64", "complex128", "bfloat16",
                       "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int4", "uint4"})


def check_dtype(name: str, a: np.ndarray, source: str) -> None:
    """Refuses an array whose dtype TF has no tensor for (datetime64, timedelta64, structured or void
    records, longdouble, …): `tf.constant` would fail with a traceback.

    Raises:
        UsageError: "SOURCE: 'x' is a datetime64[s] array: TF has no such dtype; …".
    """
    dt = a.dtype
    if dt.kind in "SU" or dt.name in TF_DTYPES and dt.names is None:
        return
    if dt.kind == "O" and all(isinstance(x, (bytes, str)) for x in a.ravel()):
        return  # strings held as Python objects: a tf.string input
    if dt.kind == "V" and dt.names is None:  # what np.save writes for an ml_dtypes array: the type is gone
        raise UsageError(f"{source}: {name!r} is a raw {dt.itemsize}-byte record array ({dt.str}): TF has no tensor of "
                         f"that dtype; np.save stores an ml_dtypes array (bfloat16, float8, int4) so, without its "
                         f"type: save it as float32 instead (x.astype(np.float32))")
    what = ("a structured array (fields " + ", ".join(dt.names) + ")" if dt.names else
            f"an object array of Python objects" if dt.kind == "O" else f"a {dt.name} array")
    raise UsageError(f"{source}: {name!r} is {what}: TF has no tensor of that dtype; give a numeric, bool or "
                     f"string array (e.g. np.asarray(..., dtype=np.float32))")


def as_example_array(name: str, value: Any, source: str) -> np.ndarray:
    """``value`` (an array, a tensor, a nested list) as a numpy array TF can take.

    Raises:
        UsageError: a ragged nested list (rows of different lengths), or `check_dtype`'s refusals.
    """
    try:
        a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except ValueError:  # numpy refuses a ragged nested list ("inhomogeneous shape")
        raise UsageError(f"{source}: {name!r} is a ragged list (rows of different lengths), not an array: "
                         f"give a rectangular array, padded to one length") from None
    check_dtype(name, a, source)
    return a


def check_finite(batches: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Refuses an input none of whose values is finite (over every batch): nothing would be compared
    or calibrated, and a verb judging NaN against NaN reports "no findings" measured over nothing.

    An input with some finite values is kept (NaN propagation is worth checking).

    Raises:
        UsageError: the input's name and its counts of NaN and ±inf.
    """
    counts: dict[str, list[int]] = {}  # name -> [NaN, +-inf, size], over every batch
    for b in batches:
        for name, a in b.items():
            a = np.asarray(a)
            if a.dtype.kind not in "fc" or a.size == 0:
                continue
            c = counts.setdefault(name, [0, 0, 0])
            c[0] += int(np.count_nonzero(np.isnan(a)))
            c[1] += int(np.count_nonzero(np.isinf(a)))
            c[2] += int(a.size)
    for name, (nan, inf, size) in counts.items():
        if nan + inf == size:
            what = "NaN" if not inf else "±inf" if not nan else "NaN or ±inf"
            raise UsageError(f"examples: every value of {name} is {what} ({nan} NaN, {inf} inf of {size} "
                             f"non-finite): nothing to calibrate or compare; give finite values")
