"""Lab step 8, what a converted flatbuffer alone shows, before anything runs it.

* `uninitialized_variables` reads the flatbuffer (TF's generated schema, through
  `tflab._tf.lite`) for resource variables: a ``VAR_HANDLE`` whose variable a
  ``READ_VARIABLE`` reads but no ``ASSIGN_VARIABLE`` of any subgraph writes
  (neither an initializer subgraph run by ``CALL_ONCE`` nor a signature).
  LiteRT's builtin READ_VARIABLE kernel then fails
  (``tflite/kernels/read_variable.cc``: ``variable != nullptr``) and the
  XNNPACK delegate reads memory nobody wrote: NaN, inf or garbage. This is
  known right after `tflab.litert.conversion.convert`.
* `conversion_notes` says it, with int8 scales of 0 and float16 weights
  saturated at 65504; `warn_after_conversion` says them as warnings or lines.

The subgraph reader here (`read_graphs`) is shared with `tflab.litert.nan`,
which reruns the model to find the first op that makes a NaN/inf.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Mapping

import numpy as np

# float16's largest finite value (IEEE 754 binary16: (2 − 2^-10) · 2^15).
FLOAT16_MAX = 65504.0

# Measured on TF 2.21's converter (tests/litert/test_litert_nan.py): a read-only
# tf.Variable of a tf.Module becomes a constant weight; one a signature
# assigns stays a TFLite resource variable with an initializer subgraph
# (CALL_ONCE), as ``experimental_enable_resource_variables`` (default True,
# tensorflow/lite/python/lite.py) allows; the keras.Variables of a Keras 3
# model inside a tf.Module (which lists none of them in ``.variables``) stay
# resource variables with no initializer at all. Each fix below was checked on
# that model (test_each_fix_the_note_gives_is_checked_on_the_snippet).
VARIABLE_FIX = ("export with Keras' own model.export(DIR) (a Keras 3 model's weights are keras.Variable "
                "objects, which a tf.Module wrapper does not list in .variables), or freeze the function "
                "first (tf.lite.TFLiteConverter.from_concrete_functions([convert_variables_to_constants_v2("
                "fn.get_concrete_function())]), from tensorflow.python.framework.convert_to_constants), or "
                "track the backing tf.Variables on the module before tf.saved_model.save "
                "(self.tf_vars = [v.value for v in model.weights]); "
                "converter.experimental_enable_resource_variables=False does not help: the variables stay")



# -------------------------------------------------------------- flatbuffer


@dataclasses.dataclass(frozen=True)
class Op:
    index: int
    name: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Graph:
    """One subgraph of the flatbuffer: ops in execution order and tensor facts."""

    index: int
    key: str | None  # signature key, None for an initializer or control-flow subgraph
    ops: tuple[Op, ...]
    inputs: tuple[int, ...]
    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    scales: tuple[tuple[float, ...], ...]
    zero_points: tuple[tuple[int, ...], ...]
    feeds: Mapping[str, int]  # signature input name -> tensor index
    constants: Mapping[int, np.ndarray]  # float16 constants (weights of the float16 recipe), by tensor
    constant_ids: frozenset[int]  # every tensor with a constant buffer
    variables: Mapping[int, str]  # VAR_HANDLE output tensor -> "container/shared_name"


@functools.lru_cache(maxsize=1)  # one model: check_tflite and the export's warning read the same bytes
def read_graphs(model: bytes) -> tuple[Graph, ...]:
    """Every subgraph of ``model``, parsed once (the per-op rerun reads it once per example batch)."""
    from tflab._tf.lite import schema, unpack_model

    fb = schema()

    m = unpack_model(model)  # parsed once per model bytes, shared with read_ops and analyze_flatbuffer
    builtin = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    opnames = []
    for oc in m.operatorCodes or []:
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
        opnames.append(builtin.get(code, f"BUILTIN_{code}") if code != fb.BuiltinOperator.CUSTOM else
                       (oc.customCode.decode() if isinstance(oc.customCode, bytes) else str(oc.customCode)))
    keys = {int(s.subgraphIndex): _text(s.signatureKey) for s in m.signatureDefs or []}
    feeds = {int(s.subgraphIndex): {_text(t.name): int(t.tensorIndex) for t in s.inputs or []}
             for s in m.signatureDefs or []}
    graphs = []
    for si, sg in enumerate(m.subgraphs or []):
        tensors = sg.tensors or []
        names = tuple(_text(t.name) for t in tensors)
        dtypes = tuple(types.get(t.type, str(t.type)) for t in tensors)
        scales = tuple(tuple(float(s) for s in (t.quantization.scale if t.quantization is not None
                                                 and t.quantization.scale is not None else ()))
                       for t in tensors)
        zero_points = tuple(tuple(int(z) for z in (t.quantization.zeroPoint if t.quantization is not None
                                                   and t.quantization.zeroPoint is not None else ()))
                            for t in tensors)
        constants: dict[int, np.ndarray] = {}
        constant_ids = set()
        for ti, t in enumerate(tensors):
            buf = m.buffers[t.buffer] if 0 < t.buffer < len(m.buffers) else None
            has_data = buf is not None and buf.data is not None and len(buf.data) > 0
            if has_data or (buf is not None and buf.size > 0):  # size: stored past the flatbuffer (> 2 GB)
                constant_ids.add(ti)
            if has_data and dtypes[ti] == "float16":
                constants[ti] = np.frombuffer(bytes(bytearray(buf.data)), dtype=np.float16)
        ops, variables = [], {}
        for oi, op in enumerate(sg.operators or []):
            name = opnames[op.opcodeIndex]
            ops.append(Op(oi, name, tuple(int(i) for i in (op.inputs if op.inputs is not None else ())),
                           tuple(int(i) for i in (op.outputs if op.outputs is not None else ()))))
            if name == "VAR_HANDLE":
                opt = op.builtinOptions
                var = f"{_text(getattr(opt, 'container', b''))}/{_text(getattr(opt, 'sharedName', b''))}"
                for o in ops[-1].outputs:
                    variables[o] = var if var != "/" else f"{si}:{names[o]}"
        graphs.append(Graph(si, keys.get(si), tuple(ops),
                             tuple(int(i) for i in (sg.inputs if sg.inputs is not None else ())),
                             names, dtypes, scales, zero_points, feeds.get(si, {}), constants,
                             frozenset(constant_ids), variables))
    return tuple(graphs)


def _text(v) -> str:
    if v is None:
        return ""
    return v.decode(errors="replace") if isinstance(v, (bytes, bytearray)) else str(v)


@dataclasses.dataclass(frozen=True)
class UninitializedVariable:
    """A resource variable that a signature reads and no subgraph writes.

    Attributes:
        variable: the VAR_HANDLE's ``shared_name`` (TF's variable name, e.g.
            ``"sequential/dense/kernel"``).
        signature: the signature key whose subgraph reads it.
        op_index: index of the first READ_VARIABLE of it in that subgraph
            (LiteRT's "Node number" in its error).
    """

    variable: str
    signature: str
    op_index: int


def uninitialized_variables(model: bytes) -> tuple[UninitializedVariable, ...]:
    """Resource variables a READ_VARIABLE reads and no ASSIGN_VARIABLE in any subgraph writes.

    Args:
        model: TFLite flatbuffer bytes (`tflab.litert.conversion.convert`).

    Returns:
        One `UninitializedVariable` per (variable, signature), in op order; empty
        when every variable read is written somewhere (an initializer subgraph
        run by CALL_ONCE, or a signature such as on-device training's
        ``restore``) or the model has no resource variables.

    Example (the issue-26 model: a Keras 3 model inside a tf.Module):

    >>> [v.variable for v in uninitialized_variables(model)]
    ['sequential/dense_1/bias', 'sequential/dense_1/kernel', 'sequential/dense/bias', 'sequential/dense/kernel']
    """
    graphs = read_graphs(model)
    written = {g.variables.get(op.inputs[0]) for g in graphs for op in g.ops
               if op.name == "ASSIGN_VARIABLE" and op.inputs}
    found: list[UninitializedVariable] = []
    seen: set[tuple[str, str]] = set()
    for g in graphs:
        for op in g.ops:
            if op.name != "READ_VARIABLE" or not op.inputs:
                continue
            var = g.variables.get(op.inputs[0])
            if var is None or var in written:
                continue
            key = g.key if g.key is not None else f"subgraph {g.index}"
            if (var, key) not in seen:
                seen.add((var, key))
                found.append(UninitializedVariable(var.lstrip("/"), key, op.index))
    return tuple(found)


# Read from the flatbuffer before anything runs: the fixes change the user's model or calibration.
NOTE_FIX_NOT_RUN = ("read from the flatbuffer before it runs; the fix changes your model or its calibration, "
                    "which tflab cannot do to a flatbuffer: convert again after it and tflab checks the result")


def _fix_line(description: str) -> str:
    """The note's fix as a `tflab.fix.Fix` line: ``fix: ... (not checked: why)``."""
    from tflab.fix import unchecked

    return unchecked("code", "", description, NOTE_FIX_NOT_RUN).line()


class ConversionWarning(UserWarning):
    """A converted flatbuffer reads resource variables nothing initializes, has an int8 scale of 0 or
    float16 weights saturated at 65504 (`conversion_notes` says which)."""


def variable_note(model: bytes, op_counts: Mapping[str, int] | None = None) -> str:
    """One line naming READ_VARIABLE of uninitialized resource variables and the fix, or "" when none.

    Known from the flatbuffer alone, so `tflab.litert.check.check_tflite`
    puts it first, before LiteRT runs the model, and `tflab.tflite_roundtrip`
    and ``tflab export`` say it as soon as the conversion is done.

    Args:
        model: flatbuffer bytes.
        op_counts: the op histogram when already known
            (`tflab.litert.conversion.analyze_flatbuffer`): without READ_VARIABLE
            the flatbuffer is not parsed again.
    """
    if op_counts is not None and "READ_VARIABLE" not in op_counts:
        return ""
    found = uninitialized_variables(model)
    if not found:
        return ""
    names = sorted({v.variable for v in found})
    first = found[0]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (f"READ_VARIABLE (op {first.op_index} of signature {first.signature!r}) reads an uninitialized "
            f"resource variable: {len(names)} variable(s) ({shown}) are VAR_HANDLE/READ_VARIABLE ops that no "
            f"initializer subgraph or signature writes, so LiteRT's outputs are NaN or garbage: the "
            f"converter kept them as resource variables instead of freezing them into weights; "
            + _fix_line(VARIABLE_FIX))


def zero_scale_note(model: bytes) -> str:
    """One line naming the quantized tensors whose scale is 0 (and the op that writes each), or "".

    A real value is ``scale · (q − zero_point)``: with scale 0 every value is 0
    and requantizing into the tensor divides by 0. LiteRT's XNNPACK delegate
    refuses such a tensor ("unsupported scale value (0.000000)") and the model
    is not run at all.
    """
    found = []
    for g in read_graphs(model):
        writer = {t: op for op in g.ops for t in op.outputs}
        for t, scales in enumerate(g.scales):
            if scales and any(sc == 0.0 for sc in scales) and g.dtypes[t] in ("int8", "uint8", "int16", "int32"):
                op = writer.get(t)
                found.append(f"{g.names[t]!r} ({g.dtypes[t]}, written by "
                             + (f"op {op.index} {op.name}" if op else "no op: a constant or input") + ")")
    if not found:
        return ""
    return (f"int8 tensor(s) with quantization scale 0: {', '.join(found[:4])}"
            + (f" and {len(found) - 4} more" if len(found) > 4 else "")
            + ": every value dequantizes to 0 and requantizing into it divides by 0 (NaN, inf or garbage "
              "integers downstream); " + _fix_line("calibrate with a representative dataset whose rows make "
                                                   "that tensor vary, or keep that op float"))


def float16_note(model: bytes) -> str:
    """One line naming float16 weights at ±65504, or "".

    TF 2.21's float16 recipe saturates a float32 weight beyond float16's range
    to ±65504 rather than storing inf (measured: tests/litert/test_litert_nan.py),
    so such a weight gives a wrong answer, not a NaN. A weight exactly ±65504
    in float32 is possible but rare; the note says "at", not "beyond".
    """
    found = []
    for g in read_graphs(model):
        for t, v in g.constants.items():
            if v.dtype == np.float16:
                n = int((np.abs(v.astype(np.float32)) >= FLOAT16_MAX).sum())
                if n:
                    found.append(f"{g.names[t]!r} ({n} of {v.size} elements)")
    if not found:
        return ""
    return (f"float16 weight(s) at ±{FLOAT16_MAX:g}, float16's largest finite value: {', '.join(found[:4])}"
            + (f" and {len(found) - 4} more" if len(found) > 4 else "")
            + f": the float16 recipe saturates a float32 weight beyond {FLOAT16_MAX:g} there, so those "
              f"products are wrong; " + _fix_line(f"keep weights below {FLOAT16_MAX:g} in magnitude (move a "
                                                  f"large factor out of the weight into a later op) or use the "
                                                  f"float32 or dynamic variant"))


def conversion_notes(model: bytes, op_counts: Mapping[str, int] | None = None) -> tuple[str, ...]:
    """What the flatbuffer alone says will make NaN or wrong values: `variable_note`,
    `zero_scale_note`, `float16_note` (each "" when it does not apply, and left out)."""
    return tuple(n for n in (variable_note(model, op_counts), zero_scale_note(model), float16_note(model)) if n)


def warn_after_conversion(model: bytes, where: str, say=None) -> tuple[str, ...]:
    """Says `conversion_notes` right after conversion, before anything runs the model; returns them.

    Args:
        model: flatbuffer bytes.
        where: who converted it, e.g. ``"tflite_roundtrip none"``.
        say: called with each line (``tflab export``'s progress); None raises an
            `ConversionWarning` instead (the Python API).
    """
    notes = conversion_notes(model)
    for note in notes:
        if say is None:
            warnings.warn(f"{where}: {note}", ConversionWarning, stacklevel=3)
        else:
            say(f"warning: {where}: {note}")
    return notes
