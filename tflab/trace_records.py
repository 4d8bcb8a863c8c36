"""The parts of a `TraceReport` (lab step 1): one record per op and per capture, and specs as text.

`OpInfo` is one op of the FuncGraph (its type, inputs, output dtypes and
shapes, the device and the source line that made it), `CaptureInfo` one
capture (a tf.Variable's resource handle, or an eager tensor fed at call time
or folded into a ``Const``); `fmt_shape`, `spec_str` and `output_spec` write
shapes and TensorSpecs the way the report prints them. `tflab.tracing` builds
the report from them and re-exports these names.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tflab._tf import function as _tf
from tflab.errors import UsageError


CONTROL_FLOW_OP_TYPES = frozenset(
    {"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase"})

# Attributes of control-flow ops that name their branch/body functions.
BRANCH_ATTRS = ("then_branch", "else_branch", "cond", "body", "branches")


class TraceError(UsageError):
    """The user's function raised while being traced; the message names the user's line."""


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """One op of a FuncGraph.

    Attributes:
        name: the op's unique name in the graph, e.g. ``"MatMul"``.
        type: the op type (``op.type``), e.g. ``"MatMul"``, ``"StatelessIf"``.
        inputs: names of input tensors (``"x:0"``).
        outputs: ``(tensor name, dtype name, shape as a list with None dims)`` triples.
        functions: for control-flow ops, the names of the branch/body FuncGraphs.
    """

    name: str
    type: str
    inputs: tuple[str, ...]
    outputs: tuple[tuple[str, str, Any], ...]
    functions: tuple[str, ...] = ()

    def __repr__(self) -> str:
        outs = ", ".join(f"{d}{fmt_shape(s)}" for _, d, s in self.outputs)
        return f"<{self.type} {self.name!r} ({', '.join(self.inputs)}) -> {outs or '()'}>"


@dataclasses.dataclass(frozen=True)
class CaptureInfo:
    """One captured value of a FuncGraph.

    Attributes:
        kind: ``"variable"`` (a `tf.Variable`, captured as its resource handle)
            or ``"tensor"`` (an eager tensor captured by value).
        name: the variable's name, or the internal tensor name for a tensor.
        dtype: dtype name of the value (the variable's dtype, not ``resource``).
        shape: shape as a list (None for unknown dims).
        bytes: size of the value in bytes (elements × itemsize).
        internal: the graph tensor standing for the capture; for a tensor,
            ``Const`` means its bytes are baked into the GraphDef, ``Placeholder``
            means the ConcreteFunction feeds it at call time.
        internal_op_type: ``"Const"`` or ``"Placeholder"``.
        distributed: for one component of a distributed variable (a variable
            made in ``strategy.scope()``): ``"MirroredVariable w:0"``, the
            variable it belongs to (``values.DistributedVariable`` sets a weak
            reference to itself on each component's handle); "" otherwise.
        device: the component's device, for a distributed variable; "" otherwise.
    """

    kind: str
    name: str
    dtype: str
    shape: Any
    bytes: int
    internal: str
    internal_op_type: str
    distributed: str = ""
    device: str = ""

    @property
    def baked_bytes(self) -> int:
        """Bytes stored in the GraphDef itself: the tensor's size if it became a Const, else 0."""
        return self.bytes if self.kind == "tensor" and self.internal_op_type == "Const" else 0


def fmt_shape(shape: Any) -> str:
    if shape is None:
        return "[?]"
    return "[" + ",".join("None" if d is None else str(d) for d in shape) + "]"


def shape_list(shape) -> Any:
    import tensorflow as tf

    shape = tf.TensorShape(shape)
    return None if shape.rank is None else shape.as_list()


def spec_str(spec: Any) -> str:
    import tensorflow as tf

    if isinstance(spec, tf.TensorSpec):
        return f"{spec.dtype.name}{fmt_shape(shape_list(spec.shape))}"
    if isinstance(spec, tf.TypeSpec):
        return repr(spec)
    return repr(spec)


def outputs_as_specs(structured_outputs: Any) -> Any:
    import tensorflow as tf

    def to_spec(t):
        if isinstance(t, (tf.Tensor, tf.Variable)):
            return tf.TensorSpec(t.shape, t.dtype)
        spec = _tf.value_type_spec(t)  # composite tensors (RaggedTensor, SparseTensor)
        return spec if spec is not None else t

    return tf.nest.map_structure(to_spec, structured_outputs, expand_composites=False)
