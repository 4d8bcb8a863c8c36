"""Lab step 8, inside the flatbuffer: every op of a TFLite model with the tensors it read and wrote.

`read_ops` parses a flatbuffer with TF's generated schema
(``tensorflow.lite.python.schema_py_generated``, from
tensorflow/compiler/mlir/lite/schema/schema.fbs): per subgraph, each
operator's builtin name, its options object (padding, strides, fused
activation, ...) and its input/output tensors with their name, dtype,
shape, quantization (scale and zero point, per channel along
``quantized_dimension``) and constant data.

`run_ops` runs one signature with the LiteRT interpreter built with
``experimental_preserve_all_tensors=True`` and the builtin kernels only
(``OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES``), and returns every
op's input and output arrays. Both settings matter:

* Without ``experimental_preserve_all_tensors`` the arena reuses an
  intermediate tensor's memory once its last reader has run
  (tensorflow/lite/core/subgraph.cc, ``preserve_all_tensors_``), so reading it
  after ``invoke`` returns whatever overwrote it.
* XNNPACK (applied by default) replaces the ops it takes by one ``DELEGATE``
  node whose intermediates never reach the interpreter's tensors
  (google-ai-edge/LiteRT#413, tensorflow/tensorflow#79355). The builtin
  kernels are what this pass judges; an end-to-end run with XNNPACK is
  `tflab.litert.check`'s.

Preserving tensors turns off buffer reuse, so the run needs the sum of all
tensor sizes in memory (not the arena's peak): fine for lab-sized models.

Example (the float conversion of README's ``Scale`` model, ``y = x * w``):

>>> ops = run_ops(convert("/tmp/scale_sm", "none"), {"x": np.ones((4, 64), np.float32)})
>>> ops
[OpTensors(#0 MUL ['StatefulPartitionedCall:0'] [(4, 64)])]
>>> ops[0].inputs[0].name, ops[0].output_arrays[0].shape
('serving_default_x:0', (4, 64))

`tflab.litert.nan` (the first-NaN finder) and `tflab.litert.per_op` both read these records.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import numpy as np

from tflab.errors import UsageError

# -------------------------------------------------------------------- records


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class TensorInfo:
    """One tensor of a subgraph, as the flatbuffer declares it.

    Attributes:
        index: position in the subgraph's tensor table.
        name: the converter's name, e.g. ``"sequential/dense/MatMul;sequential/dense/BiasAdd"``.
        dtype: numpy dtype name (``"float32"``, ``"int8"``, ``"float16"``, ``"int32"`` ...).
        shape: the static shape (-1 marks a dynamic dim in ``shape_signature``).
        scale: quantization scales, shape ``(1,)`` per tensor or ``(C,)`` per channel; empty when not quantized.
        zero_point: zero points, same shape as ``scale``.
        quantized_dimension: the axis ``scale`` runs along when per channel.
        constant: the buffer's data (a constant/weight tensor), else None.
    """

    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    scale: np.ndarray
    zero_point: np.ndarray
    quantized_dimension: int
    constant: np.ndarray | None

    @property
    def quantized(self) -> bool:
        return self.scale.size > 0 and np.dtype(self.dtype).kind in "iu"

    def dequantize(self, a: np.ndarray) -> np.ndarray:
        """``(q − zero_point)·scale`` in float64 (per channel along ``quantized_dimension``); float as float64."""
        a = np.asarray(a)
        if not self.quantized:
            return a.astype(np.float64)
        shape = [1] * a.ndim
        if self.scale.size > 1 and a.ndim:
            shape[self.quantized_dimension] = self.scale.size
        s = self.scale.reshape(shape) if a.ndim else self.scale.reshape(())
        z = self.zero_point.reshape(shape) if a.ndim else self.zero_point.reshape(())
        return (a.astype(np.float64) - z) * s

    def __repr__(self) -> str:
        q = f", scale[{self.scale.size}]" if self.scale.size else ""
        return f"TensorInfo({self.index}, {self.name!r}, {self.dtype}{list(self.shape)}{q})"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class OpInfo:
    """One operator of a subgraph: builtin name, options, tensors (None for an omitted optional input)."""

    index: int
    op_type: str
    options: Any
    inputs: tuple[TensorInfo | None, ...]
    outputs: tuple[TensorInfo, ...]

    def __repr__(self) -> str:
        return f"OpInfo(#{self.index} {self.op_type} -> {[t.name for t in self.outputs]})"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class OpTensors:
    """One op as it ran: its `OpInfo` and the arrays of its inputs and outputs, raw (not dequantized).

    Attributes:
        index: op index in the subgraph (execution order).
        op_type: builtin name, e.g. ``"CONV_2D"`` (custom ops by custom code).
        info: the `OpInfo` (options, tensor declarations).
        inputs: one `TensorInfo` per input (None: an omitted optional input, such as a missing bias).
        outputs: one `TensorInfo` per output.
        input_arrays: the arrays read, as the interpreter holds them (int8 stays int8), None where omitted.
        output_arrays: the arrays written.
    """

    index: int
    op_type: str
    info: OpInfo
    inputs: tuple[TensorInfo | None, ...]
    outputs: tuple[TensorInfo, ...]
    input_arrays: tuple[np.ndarray | None, ...]
    output_arrays: tuple[np.ndarray, ...]

    @property
    def input_names(self) -> tuple[str | None, ...]:
        return tuple(None if t is None else t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def __repr__(self) -> str:
        shapes = [tuple(a.shape) for a in self.output_arrays]
        return f"OpTensors(#{self.index} {self.op_type} {list(self.output_names)} {shapes})"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ModelOps:
    """A parsed flatbuffer: ops per subgraph and the subgraph each signature runs."""

    subgraphs: tuple[tuple[OpInfo, ...], ...]
    signatures: dict[str, int]  # signature key -> subgraph index

    def subgraph_of(self, key: str | None) -> int:
        if key is None:
            return next(iter(self.signatures.values()), 0)
        if key not in self.signatures:
            raise UsageError(f"the TFLite model has no signature {key!r}; it has {sorted(self.signatures)}")
        return self.signatures[key]

    def __repr__(self) -> str:
        return f"ModelOps({[len(s) for s in self.subgraphs]} ops, signatures={self.signatures})"


# -------------------------------------------------------------------- parsing


def _names(fb) -> tuple[dict, dict]:
    builtin = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    return builtin, types


def _text(s) -> str:
    return s.decode(errors="replace") if isinstance(s, (bytes, bytearray)) else str(s or "")


def read_ops(model: bytes) -> ModelOps:
    """Parses ``model`` into ops per subgraph, with options and tensor declarations.

    One export asks for the same bytes about 30 times (`tflab.litert.check`,
    `tflab.litert.per_op`, `tflab.litert.attribution`,
    `tflab.litert.float_tensors`), so the last `tflab._tf.lite.UNPACKED_MODELS`
    distinct models are parsed once and kept, keyed by their bytes. The result
    is shared: its arrays (``scale``, ``zero_point``, ``constant``) are read-only.

    Args:
        model: TFLite flatbuffer bytes.

    Returns:
        A `ModelOps`.

    Raises:
        UsageError: the bytes are not a TFLite flatbuffer (no ``TFL3`` identifier at offset 4).
    """
    model = bytes(model)
    if len(model) < 8 or model[4:8] != b"TFL3":
        raise UsageError("not a TFLite flatbuffer (no 'TFL3' file identifier at byte 4): pass a .tflite "
                         "file written by tf.lite.TFLiteConverter")
    return _parse_ops(model)


@functools.lru_cache(maxsize=4)  # as many as tflab._tf.lite.UNPACKED_MODELS
def _parse_ops(model: bytes) -> ModelOps:
    from tflab._tf.lite import schema, unpack_model

    fb = schema()
    m = unpack_model(model)
    builtin, types = _names(fb)
    codes = []
    for oc in m.operatorCodes or []:
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
        codes.append(_text(oc.customCode) if code == fb.BuiltinOperator.CUSTOM else builtin.get(code, f"BUILTIN_{code}"))
    subgraphs = []
    for sg in m.subgraphs or []:
        tensors = []
        for i, t in enumerate(sg.tensors or []):
            dt = types.get(t.type, str(t.type))
            np_dt = {"float32": "float32", "float16": "float16", "int8": "int8", "uint8": "uint8",
                     "int32": "int32", "int64": "int64", "bool": "bool", "int16": "int16",
                     "float64": "float64"}.get(dt, dt)
            q = t.quantization
            scale = np.asarray(q.scale if q is not None and q.scale is not None else [], np.float64)
            zp = np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [], np.int64)
            if zp.size != scale.size:
                zp = np.zeros(scale.size, np.int64)
            scale.setflags(write=False)  # shared by every caller of read_ops (cached)
            zp.setflags(write=False)
            buf = m.buffers[t.buffer] if t.buffer < len(m.buffers) else None
            const = None
            shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
            if buf is not None and buf.data is not None and len(buf.data) and np_dt in np.sctypeDict:
                const = np.frombuffer(bytes(bytearray(buf.data)), dtype=np.dtype(np_dt)).reshape(shape)
            tensors.append(TensorInfo(i, _text(t.name), np_dt, shape, scale, zp,
                                      int(q.quantizedDimension) if q is not None else 0, const))
        ops = []
        for j, op in enumerate(sg.operators or []):
            ins = tuple(None if k < 0 else tensors[k] for k in (op.inputs if op.inputs is not None else []))
            outs = tuple(tensors[k] for k in (op.outputs if op.outputs is not None else []))
            ops.append(OpInfo(j, codes[op.opcodeIndex], op.builtinOptions, ins, outs))
        subgraphs.append(tuple(ops))
    sigs = {_text(s.signatureKey): int(s.subgraphIndex) for s in (m.signatureDefs or [])}
    return ModelOps(tuple(subgraphs), sigs)


# -------------------------------------------------------------------- running


def preserving_interpreter(model: bytes):
    """A LiteRT interpreter that keeps every tensor and runs builtin kernels only (no XNNPACK)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    return Interpreter(model_content=bytes(model), experimental_preserve_all_tensors=True,
                       experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)


def run_ops(model: bytes, feed: Mapping[str, np.ndarray], signature_key: str | None = None, *,
            parsed: ModelOps | None = None, interpreter=None) -> list[OpTensors]:
    """Runs one signature with every tensor kept and returns each op's input and output arrays.

    Args:
        model: TFLite flatbuffer bytes.
        feed: ``{input name: array}`` for the signature, already in the input's dtype
            (an int8 input takes int8 values: quantize first with its scale/zero point).
        signature_key: which signature to run (default: the first).
        parsed: `read_ops(model)` when the caller has it (saves re-parsing).
        interpreter: a `preserving_interpreter(model)` to reuse across feeds.

    Returns:
        One `OpTensors` per op of the signature's subgraph, in execution order.
        Arrays are copies, so they stay valid after the next run.

    Raises:
        UsageError: not a flatbuffer, or no such signature.
    """
    parsed = parsed or read_ops(model)
    interp = interpreter or preserving_interpreter(model)
    keys = list(interp.get_signature_list())
    key = signature_key if signature_key is not None else (keys[0] if keys else None)
    si = parsed.subgraph_of(key)
    if key is None:
        interp.allocate_tensors()
        for d, a in zip(interp.get_input_details(), feed.values()):
            interp.resize_tensor_input(d["index"], np.shape(a))
        interp.allocate_tensors()
        for d, a in zip(interp.get_input_details(), feed.values()):
            interp.set_tensor(d["index"], a)
        interp.invoke()
    else:
        interp.get_signature_runner(key)(**feed)

    return subgraph_tensors(parsed, interp, si)


def subgraph_tensors(parsed: ModelOps, interp, si: int) -> list[OpTensors]:
    """Each op of subgraph ``si`` with the arrays a preserving interpreter holds after its last run.

    For a WHILE body (`loop_body`) those are the last iteration's, and its loop variables (the
    body's inputs) hold the value the loop ended with: the WHILE kernel hands the next iteration's
    value to the body's input buffer (measured: a body ``tanh(h·1.5 + 0.25)`` run 4 times kept
    ``h₄`` as its input and ``h₃·1.5`` as the MUL's output), so an op that reads a loop variable was
    not run on the array kept for it (`tflab.litert.per_op` leaves it out).
    """
    def get(t: TensorInfo | None):
        if t is None:
            return None
        if t.constant is not None:
            return t.constant
        try:
            return np.array(interp.get_tensor(t.index, si))
        except ValueError:  # a tensor the interpreter never allocated (unused optional output)
            return None

    return [OpTensors(op.index, op.op_type, op, op.inputs, op.outputs,
                      tuple(get(t) for t in op.inputs), tuple(get(t) for t in op.outputs))
            for op in parsed.subgraphs[si]]


def loop_body(op: OpInfo, parsed: ModelOps) -> int | None:
    """The body subgraph of a WHILE op (``WhileOptions.bodySubgraphIndex``), or None."""
    if op.op_type != "WHILE" or op.options is None:
        return None
    body = getattr(op.options, "bodySubgraphIndex", None)
    return int(body) if isinstance(body, int) and 0 < body < len(parsed.subgraphs) else None


def variant_of(model: bytes) -> str:
    """Which of the four recipes made ``model``, read from its tensors (`tflab.litert.recipe.read_recipe`).

    ``"int8"`` for a full-integer model: integer (int8 or uint8) activations and no float kernel
    besides QUANTIZE/DEQUANTIZE, or int8/uint8 signature inputs or outputs; ``"float16"`` when a
    constant is float16, ``"dynamic"`` when a constant is int8 with a scale (dynamic-range weights),
    else ``"none"``.

    Args:
        model: TFLite flatbuffer bytes.

    Returns:
        ``"none"``, ``"dynamic"``, ``"float16"`` or ``"int8"``.
    """
    from tflab.litert.recipe import read_recipe

    return read_recipe(bytes(model)).name
