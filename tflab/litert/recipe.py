"""Lab step 8, the recipe: which quantization made a flatbuffer, read from its tensors, and what follows.

A user's ``.tflite`` comes with no label. What the tensors show decides:

* **full-integer** (``"int8"``): integer (int8 or uint8) activation tensors and no
  float kernel besides QUANTIZE/DEQUANTIZE at the edges, or int8/uint8 signature
  inputs. ``inference_input_type=tf.uint8`` gives uint8 inputs and outputs
  (tensorflow#53278): still full-integer, bounded as int8 (the bound is in output
  steps, whatever the integer type);
* ``"float16"``: float16 weights; ``"dynamic"``: int8 weights with a scale
  feeding float kernels (the hybrid kernels); else ``"none"`` (float32).

`recipe_mismatch` refuses a recipe the caller gives that the tensors contradict
(``--quantization int8`` on a float32 flatbuffer would be checked against the
loose int8 bound: a vacuous pass). `feed_note` says how a quantized input is fed,
`saturation_note` which output saturates (codes at qmin/qmax where TF's value lies
outside what the output's scale and zero point can represent).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

_EDGE_OPS = ("QUANTIZE", "DEQUANTIZE")
_INTEGER = ("int8", "uint8")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What the tensors of a flatbuffer say about the recipe that made it.

    Attributes:
        name: ``"none"``, ``"dynamic"``, ``"float16"`` or ``"int8"`` (full-integer, int8 or uint8).
        integer_io: the integer dtypes of the signatures' inputs and outputs (``("uint8",)``), empty
            for float inputs and outputs.
        float_kernels: ops other than QUANTIZE/DEQUANTIZE with a float32 activation, by name.
        integer_activations: non-constant int8/uint8 tensors with a quantization scale.
        float16_weights: float16 constant tensors.
        int8_weights: int8 constant tensors with a scale.
        why: one phrase: what in the tensors decided ``name``.
    """

    name: str
    integer_io: tuple[str, ...]
    float_kernels: tuple[str, ...]
    integer_activations: int
    float16_weights: int
    int8_weights: int
    why: str


def read_recipe(model: bytes) -> Recipe:
    """The recipe of ``model``, read from its tensors (see the module docstring for the rule).

    Args:
        model: TFLite flatbuffer bytes.

    Returns:
        A `Recipe`.
    """
    from tflab.litert.flatbuffer_notes import read_graphs

    io: set[str] = set()
    float_kernels: list[str] = []
    int_act = f16 = i8w = 0
    for g in read_graphs(model):
        consts = g.constant_ids
        for t, dt in enumerate(g.dtypes):
            quantized = bool(g.scales[t])
            if t in consts:
                f16 += dt == "float16"
                i8w += dt == "int8" and quantized
            elif dt in _INTEGER and quantized:
                int_act += 1
        if g.key is not None:
            outs = {t for op in g.ops for t in op.outputs} - {t for op in g.ops for t in op.inputs}
            for t in (*g.feeds.values(), *outs):
                if g.dtypes[t] in _INTEGER and g.scales[t]:
                    io.add(g.dtypes[t])
        for op in g.ops:
            if op.name in _EDGE_OPS:
                continue
            if any(t >= 0 and t not in consts and g.dtypes[t] == "float32" for t in (*op.inputs, *op.outputs)):
                float_kernels.append(op.name)
    kernels = tuple(dict.fromkeys(float_kernels))
    if int_act and not kernels:
        name, why = "int8", (f"{int_act} integer activation tensor(s) and no float kernel"
                             + (f"; {'/'.join(sorted(io))} inputs and outputs" if io else ""))
    elif io:
        name, why = "int8", f"{'/'.join(sorted(io))} signature inputs or outputs with a quantization scale"
    elif f16:
        name, why = "float16", f"{f16} float16 weight tensor(s)"
    elif i8w:
        name, why = "dynamic", f"{i8w} int8 weight tensor(s) feeding float kernels ({', '.join(kernels[:4])})"
    else:
        name, why = "none", "float32 tensors only (no integer activation, no int8 or float16 weight)"
    return Recipe(name, tuple(sorted(io)), kernels, int_act, f16, i8w, why)


def recipe_mismatch(model: bytes, quantization: str) -> str:
    """Why the recipe ``quantization`` contradicts ``model``'s tensors, or "" when it does not.

    Only a contradiction is refused: a ``"dynamic"`` or ``"float16"`` recipe that
    quantized nothing (weights under 1024 elements, a model with no weight) reads
    as ``"none"`` and is accepted (`tflab.litert.check` says it is the float model).

    Args:
        model: TFLite flatbuffer bytes.
        quantization: the recipe given.

    Returns:
        "" or one sentence naming both the recipe given and the one the tensors show.
    """
    r = read_recipe(model)
    if quantization == r.name:
        return ""
    bad = ((quantization == "int8") or (r.name == "int8")
           or (quantization == "none" and r.name in ("dynamic", "float16"))
           or (quantization == "float16" and r.name == "dynamic")
           or (quantization == "dynamic" and r.name == "float16"))
    if not bad:
        return ""
    return (f"the recipe given ({quantization}) disagrees with the flatbuffer's tensors, which show a "
            f"{r.name} model ({r.why}): its bound would not be this model's; omit it to read the recipe "
            f"from the tensors ({r.name}), or give the .tflite file the {quantization} conversion wrote")


def feed_note(signatures: Mapping[str, dict]) -> str:
    """How the quantized inputs are fed: ``q = x/scale + zero_point``, rounded and clipped; "" when none is.

    Args:
        signatures: `TFLiteCheck.signatures` (key → inputs → dtype, quantization).
    """
    seen, parts = set(), []
    for sig in signatures.values():
        for name, d in sig["inputs"].items():
            q = d.get("quantization")
            if not q or np.dtype(d["dtype"]).kind not in "iu" or name in seen:
                continue
            seen.add(name)
            info = np.iinfo(np.dtype(d["dtype"]))
            parts.append(f"{name} is {d['dtype']} (scale {q[0]:.6g}, zero point {q[1]}): "
                         f"q = np.clip(np.round({name} / {q[0]:.6g} + {q[1]}), {info.min}, {info.max})"
                         f".astype(np.{d['dtype']})")
    if not parts:
        return ""
    return ("quantized input(s): feed q = x/scale + zero_point, rounded and clipped, not the float values "
            "cast (x.astype(...) gives another input): " + "; ".join(parts) + "; tflab fed the examples so")


def saturation(codes: np.ndarray, want: np.ndarray, dtype: str, scale: float, zero_point: int) -> dict:
    """The output codes at qmin/qmax and how many of them clip TF's value.

    Args:
        codes: LiteRT's integer output codes (flat).
        want: TF's float output (flat, same order).
        dtype: the output's integer dtype (``"int8"``, ``"uint8"``).
        scale, zero_point: the output's quantization.

    Returns:
        ``{"at_qmin", "at_qmax", "clipped", "total", "qmin", "qmax", "low", "high"}``: codes at each
        end, elements where TF's value lies more than half a step outside ``[low, high]`` (what the
        scale and zero point can represent), all elements, and the range.
    """
    info = np.iinfo(np.dtype(dtype))
    low, high = (info.min - zero_point) * scale, (info.max - zero_point) * scale
    codes = np.asarray(codes)
    want = np.asarray(want, np.float64)
    at_min, at_max = codes == info.min, codes == info.max
    with np.errstate(invalid="ignore"):
        clipped = (at_min & (want < low - scale / 2)) | (at_max & (want > high + scale / 2))
    return {"at_qmin": int(at_min.sum()), "at_qmax": int(at_max.sum()), "clipped": int(clipped.sum()),
            "total": int(codes.size), "qmin": int(info.min), "qmax": int(info.max), "low": float(low),
            "high": float(high), "tf_min": float(np.nanmin(want)) if want.size else 0.0,
            "tf_max": float(np.nanmax(want)) if want.size else 0.0}


def saturation_note(okey: str, op: str, s: Mapping) -> str:
    """The note for an output that saturates (``s`` from `saturation`), or "" when nothing clips."""
    if not s["clipped"]:
        return ""
    share = (s["at_qmin"] + s["at_qmax"]) / s["total"] if s["total"] else 0.0
    head = (f"{okey}: the output saturates: {share:.0%} of its codes are at qmin or qmax "
            f"({s['at_qmin']} at {s['qmin']}, {s['at_qmax']} at {s['qmax']}, of {s['total']}), and at "
            f"{s['clipped']} of them TF's value lies outside [{s['low']:.4g}, {s['high']:.4g}], all that "
            f"{op}'s output scale and zero point can represent (TF's values span [{s['tf_min']:.4g}, "
            f"{s['tf_max']:.4g}])")
    fixed = FIXED_OUTPUT_GRIDS.get(op.split(" ")[0])
    if fixed:  # no calibration sets this grid: recalibrating changes nothing
        return (f"{head}: TFLite's int8 {op.split(' ')[0]} always writes {fixed}, whatever the calibration, so "
                f"TF's values past it are clipped by the kernel's own output grid; keep that op's output in "
                f"float (or accept the clipping: at most {s['high'] - s['low']:.4g}/255 per step)")
    return (f"{head}: that range came from the representative dataset and these inputs lie outside it; "
            f"calibrate on data like your inputs (representative dataset)")


# Ops whose int8 output grid TFLite fixes by the op, not by calibration (tensorflow/lite/kernels:
# softmax.cc, activations.cc require these output scales and zero points).
FIXED_OUTPUT_GRIDS = {"SOFTMAX": "scale 1/256, zero point -128 ([0, 255/256])",
                      "LOGISTIC": "scale 1/256, zero point -128 ([0, 255/256])",
                      "TANH": "scale 1/128, zero point 0 ([-1, 127/128])",
                      "LOG_SOFTMAX": "scale 16/256, zero point 127 ([-255/16, 0])"}

# The step of each fixed grid (TFLite's int8 kernels, tensorflow/lite/kernels/activations.cc).
_FIXED_STEPS = {"SOFTMAX": 1 / 256, "LOGISTIC": 1 / 256, "TANH": 1 / 128, "LOG_SOFTMAX": 16 / 256}


def fixed_output_step(writer: str) -> float | None:
    """The int8 output step of the op ``writer`` names (``"SOFTMAX #3"``) when its grid is fixed
    (`FIXED_OUTPUT_GRIDS`: set by the kernel, not by calibration), else None."""
    return _FIXED_STEPS.get(writer.split(" ")[0]) if writer else None


# Ops that move or re-encode values without computing new ones: a float output read through them (a
# final DEQUANTIZE, a RESHAPE after it) carries the quantization of the integer tensor they start from.
CARRY_OPS = ("DEQUANTIZE", "QUANTIZE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE",
             "STRIDED_SLICE", "GATHER", "BROADCAST_TO", "IDENTITY")


@dataclasses.dataclass(frozen=True)
class CarriedQuantization:
    """The integer tensor whose quantization a float signature tensor carries.

    Attributes:
        scale: its scale (the largest, for a per-channel tensor), float units per step.
        zero_point: its zero point.
        dtype: ``"int8"``, ``"uint8"`` or ``"int16"``.
        tensor: its name in the flatbuffer.
        path: the ops between it and the signature tensor (``("DEQUANTIZE #5", "RESHAPE #6")``).
    """

    scale: float
    zero_point: int
    dtype: str
    tensor: str
    path: tuple[str, ...] = ()


def _quantized(g, t: int) -> bool:
    return t >= 0 and g.dtypes[t] in (*_INTEGER, "int16") and bool(g.scales[t]) and max(g.scales[t]) > 0


def carried_quantization(g, tensor: int, toward: str = "output") -> CarriedQuantization | None:
    """The last (``toward="output"``) or first (``"input"``) quantized tensor on a signature tensor's path.

    An output is followed back through its writers while they are `CARRY_OPS` (its first input);
    an input forward through the ops that read it while they are. The converter's default int8 recipe
    (float input and output, int8 ops inside) puts QUANTIZE/DEQUANTIZE at the edges: the int8 tensor
    feeding the final DEQUANTIZE is the output's last rounding, and its scale bounds the output as
    an int8 output's own scale would.

    Args:
        g: a `tflab.litert.flatbuffer_notes.Graph` (one subgraph).
        tensor: the signature tensor's index in ``g``.
        toward: ``"output"`` or ``"input"``.

    Returns:
        A `CarriedQuantization`, or None when no quantized tensor is reached (a float model, a
        dynamic-range model whose activations stay float).
    """
    writer = {t: op for op in g.ops for t in op.outputs}
    readers: dict[int, list] = {}
    for op in g.ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    path: list[str] = []
    seen = set()
    t = tensor
    while t >= 0 and t not in seen:
        seen.add(t)
        if _quantized(g, t):
            return CarriedQuantization(float(max(g.scales[t])), int(g.zero_points[t][0]) if g.zero_points[t] else 0,
                                       g.dtypes[t], g.names[t], tuple(reversed(path)) if toward == "output"
                                       else tuple(path))
        if toward == "output":
            op = writer.get(t)
            if op is None or op.name not in CARRY_OPS or not op.inputs:
                return None
            t = op.inputs[0]
        else:
            ops = [op for op in readers.get(t, ()) if op.name in CARRY_OPS and op.inputs and op.inputs[0] == t]
            if not ops:
                return None
            op = next((o for o in ops if any(_quantized(g, x) for x in o.outputs)), ops[0])
            t = op.outputs[0] if op.outputs else -1
        path.append(f"{op.name} #{op.index}")
    return None
