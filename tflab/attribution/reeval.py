"""One op of a traced graph evaluated again, alone, in a higher precision, on the inputs it received.

`tflab.nonfinite.trace_op_values` records, for every op of the user's
FuncGraph, its type, its attributes (``tf.Operation.get_attr``) and the
values of its inputs and outputs in one run. `evaluate` re-creates **the same
op** from that record and runs it eagerly (TF's ``execute``, what every
``tf.raw_ops`` function calls: ``tensorflow/python/eager/execute.py``) with

* every floating input converted to the reference dtype (float64; float32
  where TF has no float64 kernel for the op), integer and bool inputs as they
  were, and
* every floating dtype attribute (``T``, ``DstT``, ``dtype``, a list of types)
  changed to that dtype.

There is no table of hand-written ops: what TF can run, is checked. An op is
not re-evaluated (the caller lists it as unchecked) when it is stateful (a
random op, a variable read: a second run need not give the same values), has a
function attribute (``If``, ``While``, ``PartitionedCall``: their bodies are
their own graphs), an input whose value was not recorded (a resource), or no
kernel in either dtype.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["evaluate", "Unevaluable", "REFERENCE_DTYPES"]

REFERENCE_DTYPES = ("float64", "float32")


class Unevaluable(Exception):
    """The op cannot be evaluated again here (the message says why)."""


def _convert_attrs(attrs: dict, dtype) -> tuple:
    import tensorflow as tf

    flat: list = []
    for k, v in attrs.items():
        if k.startswith("_"):  # graph-construction bookkeeping (_has_manual_control_dependencies), no kernel attr
            continue
        if isinstance(v, tf.DType):
            v = (dtype if v.is_floating else v).as_datatype_enum
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, tf.DType) for x in v):
            v = [(dtype if x.is_floating else x).as_datatype_enum for x in v]
        elif k == "value" and hasattr(v, "dtype") and hasattr(v, "tensor_content"):  # a Const's TensorProto
            raise Unevaluable("a constant (judged by its value, not re-evaluated)")
        elif hasattr(v, "name") and hasattr(v, "attr") and not isinstance(v, (str, bytes)):
            raise Unevaluable("a function attribute (its body is its own graph)")
        elif isinstance(v, tf.TensorShape):
            v = v.as_list() if v.rank is not None else None
        flat += [k, v]
    return tuple(flat)


def evaluate(op_type: str, attrs: dict, inputs: Sequence, num_outputs: int, *, stateful: bool = False,
             transform=None) -> tuple[list[np.ndarray], str]:
    """Runs the op again, alone, on its recorded inputs raised to float64 (or float32).

    Args:
        op_type: the op's type (``"Mul"``, ``"Sum"``, ``"Cast"``).
        attrs: its attributes (`tflab.nonfinite.OpValue.attrs`).
        inputs: its recorded input arrays (None where not recorded).
        num_outputs: how many outputs it has.
        stateful: TF registers it as stateful (then it is not re-run).
        transform: applied to each floating input after the raise (``np.abs`` gives
            Σ|x||w| for a sum or contraction), or None.

    Returns:
        ``(outputs, dtype)``: float64 numpy arrays of its outputs and the dtype
        it was evaluated in (``"float64"`` or ``"float32"``).

    Raises:
        Unevaluable: stateful, a function attribute, an unrecorded input, or no
            kernel for the op in float64 or float32.
    """
    import tensorflow as tf

    from tflab._tf.runtime import eager_execute

    if stateful:
        raise Unevaluable("stateful (a second run need not give the same values)")
    if op_type in ("Const", "Placeholder", "VarHandleOp", "ReadVariableOp"):
        raise Unevaluable("a source (judged by its value against the reference run)")
    if any(a is None for a in inputs):
        raise Unevaluable("an input whose value was not recorded (a resource or variant)")
    last: Exception | None = None
    for name in REFERENCE_DTYPES:
        dt = getattr(tf, name)
        try:
            flat_attrs = _convert_attrs(attrs, dt)
            tensors = []
            for a in inputs:
                a = np.asarray(a)
                if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
                    a = a.astype(np.float64)
                    if transform is not None:
                        a = transform(a)
                    tensors.append(tf.constant(a.astype(name)))
                else:
                    tensors.append(tf.constant(a))
            outs = eager_execute(op_type, num_outputs, tensors, flat_attrs)
            return [np.asarray(o.numpy(), dtype=np.float64) if o.dtype.is_floating else o.numpy()
                    for o in outs], name
        except Unevaluable:
            raise
        except Exception as e:  # noqa: BLE001 - no kernel in this dtype (NotFoundError, InvalidArgument...)
            last = e
    raise Unevaluable(f"no kernel in {' or '.join(REFERENCE_DTYPES)}: {type(last).__name__}: "
                      f"{str(last).splitlines()[0][:160] if last is not None and str(last) else ''}")
