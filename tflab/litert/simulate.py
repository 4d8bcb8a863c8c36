"""Lab step 8, the end-to-end check of a quantized variant: LiteRT against the float model with the
variant's own quantization simulated.

The gradient bound of `tflab.litert.bounds` is a worst case summed over every
weight; on a deep CNN it is larger than the output's whole range, so it
cannot fail. This check asks a narrower question that can: *is LiteRT's
output what this variant's quantization makes of the float model?*

`simulate` runs the float model op by op in float64 (the references of
`tflab.litert.references`, with the float conversion's weights matched as in
`tflab.litert.per_op`) and rounds every tensor the way the variant's tensors
say, as TF's fake-quant ops do (``tf.quantization.fake_quant_with_min_max_vars``,
tensorflow/core/kernels/fake_quant_ops_functor.h): with the scale ``s`` and
zero point ``z`` read from the converted flatbuffer,
``q = clip(round(x/s) + z, qmin, qmax)`` and ``x' = (q − z)·s``, per channel
along the tensor's ``quantized_dimension`` where the weights have per-channel
scales. float16 constants are rounded to float16. For the dynamic-range
variant the hybrid kernels' run-time input quantization is simulated too
(one step ``max|x|/127`` per row, asymmetric where the op's options ask).

What LiteRT may still differ by, and the bound: an integer kernel rounds its
rescaled accumulator with a fixed-point multiplier, and look-up-table kernels
(softmax, logistic) round once more, so an op's output may land one step of
its own scale from the correctly rounded value (the per-op check asserts that
much, ``tflab.litert.per_op``). How often it does is *measured* per op: the
op is recomputed on LiteRT's own inputs and the share of elements one step
off is its slip rate. How far such slips travel through the model is
measured too, not multiplied out: `simulate` runs the model `DITHER_RUNS`
more times (seeded), each op's output moved by one step, up or down, at that
op's slip rate at random places (for the dynamic variant: the hybrid inputs
within LiteRT's measured input difference of a rounding boundary round
either way). LiteRT's run is one more such draw. The bound on a tensor is
``DITHER_MARGIN`` times the largest distance between any two of the runs,
plus ``OUTPUT_STEPS`` steps of its own scale and ``FLOAT_NOISE`` of its
largest magnitude, plus what LiteRT's own input deviations make of it through
its op (`carry`, measured: a steep op amplifies a slip its input's bound
allowed, at a place the dithered runs may not have drawn). A defect that changes what a tensor means (a weight or
its scale ×1.1, a dropped bias, an input scale that disagrees with its
producer) moves values by far more than the slips do and exceeds it there.
On a deep random-weight CNN the slips grow through the layers until the
spread is the output's whole range (rounding alone decides its top class):
the bound says so by its size, and the early tensors, where a defect
shows, are judged tightly.

`simulation_check` compares every quantized tensor LiteRT kept, not only the
outputs: on a softmax classifier the outputs' int8 step (1/256) can be larger
than any defect's effect on a 1000-class probability, while the logits two
ops earlier still show it. The first tensor past its bound is named.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from tflab.litert.ops import ModelOps, OpInfo, TensorInfo, preserving_interpreter, read_ops, run_ops
from tflab.litert.references import INDEX_INPUTS, reference

# Seeded runs with every quantized tensor moved by ±1 of its steps (random sign per element).
DITHER_RUNS = 3
# The measured spread is multiplied by this: the dithered runs draw LiteRT's measured slip rate at
# random places, and LiteRT's own places are one more draw; the margin covers draws the runs did not
# make (measured on healthy MobileNetV2/ResNet50 int8: up to 0.6 of the spread before the margin).
DITHER_MARGIN = 2.0
# Steps of the output's own scale always allowed: its final rounding (and the look-up-table kernels'
# second one).
OUTPUT_STEPS = 2.0
# A float tensor's allowance: float32 kernels against the float64 reference, relative to the tensor's
# largest magnitude or, where larger, its op's terms' (Σ|x||w|, |a|+|b|, mean|x|: an op that cancels
# carries its inputs' rounding); a defect moves values by a share of themselves (10% for a weight ×1.1).
FLOAT_NOISE = 2.0 ** -10
HYBRID_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL")


def fake_quant(x: np.ndarray, t: TensorInfo) -> np.ndarray:
    """``x`` rounded to tensor ``t``'s grid: ``(clip(round(x/s) + z, qmin, qmax) − z)·s`` (float64).

    Per channel along ``t.quantized_dimension`` when ``t`` has several scales; a float16 tensor rounds
    to float16; a float32 or unquantized tensor is returned as is.
    """
    x = np.asarray(x, np.float64)
    if t.dtype == "float16":
        return x.astype(np.float16).astype(np.float64)
    if not t.quantized:
        return x
    shape = [1] * x.ndim
    if t.scale.size > 1 and x.ndim:
        shape[t.quantized_dimension] = t.scale.size
    s = t.scale.reshape(shape) if x.ndim else t.scale.reshape(())
    z = t.zero_point.reshape(shape) if x.ndim else t.zero_point.reshape(())
    info = np.iinfo(np.dtype(t.dtype))
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.clip(np.round(x / np.where(s == 0, 1.0, s)) + z, info.min, info.max)
    return (q - z) * s


def _step(t: TensorInfo, shape: tuple) -> np.ndarray | float:
    if not t.quantized:
        return 0.0
    if t.scale.size > 1 and len(shape):
        s = [1] * len(shape)
        s[t.quantized_dimension] = t.scale.size
        return t.scale.reshape(s)
    return float(t.scale[0])


def _hybrid_input(x: np.ndarray, op_type: str, options, rng=None, near: float | None = None) -> np.ndarray:
    """The dynamic-range kernels' run-time int8 quantization of a float input, simulated.

    With ``rng``, elements whose value lies within ``near`` of a rounding boundary round
    either way (a dithered run: LiteRT's input differs from the simulation's by up to ``near``).

    One step per batch row (per image for the convolutions, per row of the flattened
    ``[rows, K]`` input for FULLY_CONNECTED and BATCH_MATMUL): ``max|x|/127``
    symmetric, or ``(max − min)/255`` with a zero point when the options ask for
    asymmetric inputs (``asymmetric_quantize_inputs``).
    """
    if x.ndim == 0 or not x.size:
        return x
    rows = x.reshape(x.shape[0], -1) if op_type in ("CONV_2D", "DEPTHWISE_CONV_2D") else x.reshape(-1, x.shape[-1])
    if op_type in ("CONV_2D", "DEPTHWISE_CONV_2D") or getattr(options, "asymmetricQuantizeInputs", False):
        lo, hi = np.minimum(rows.min(axis=1, keepdims=True), 0.0), np.maximum(rows.max(axis=1, keepdims=True), 0.0)
        s = np.where(hi > lo, (hi - lo) / 255.0, 1.0)
        z = np.round(-128 - lo / s)
        u = rows / s
        q = np.round(u)
        if rng is not None and near is not None:
            edge = np.abs(np.abs(u - np.floor(u)) - 0.5) * s <= near + 1e-12 * s
            q = np.where(edge & (rng.random(q.shape) < 0.5), np.where(q > u, q - 1, q + 1), q)
        q = np.clip(q + z, -128, 127)
        return ((q - z) * s).reshape(x.shape)
    m = np.abs(rows).max(axis=1, keepdims=True)
    s = np.where(m > 0, m / 127.0, 1.0)
    u = rows / s
    q = np.round(u)
    if rng is not None and near is not None:
        # Dithered run: the elements within ``near`` (measured upstream difference) of a boundary flip.
        edge = np.abs(np.abs(u - np.floor(u)) - 0.5) * s <= near + 1e-12 * s
        q = np.where(edge & (rng.random(q.shape) < 0.5), np.where(q > u, q - 1, q + 1), q)
    return (np.clip(q, -127, 127) * s).reshape(x.shape)


def _source_constant(t: TensorInfo, producer: Mapping[int, OpInfo]) -> TensorInfo | None:
    """The constant behind ``t``, through a DEQUANTIZE (float16 and int8 weights), else None."""
    if t.constant is not None:
        return t
    op = producer.get(t.index)
    if op is not None and op.op_type == "DEQUANTIZE" and op.inputs and op.inputs[0] is not None \
            and op.inputs[0].constant is not None:
        return op.inputs[0]
    return None


@dataclasses.dataclass
class Simulated:
    """One example batch through the simulation: tensor index → float64 values.

    ``nominal`` is the simulation; ``dithered`` one dict per `DITHER_RUNS` seed, every quantized
    tensor moved by ±1 of its steps; ``carried`` the op indices whose output was taken from LiteRT
    (no reference for that op type), ``lite`` LiteRT's own values (dequantized).
    """

    nominal: dict[int, np.ndarray]
    dithered: list[dict[int, np.ndarray]]
    lite: dict[int, np.ndarray]
    carried: list[str]
    slips: dict[int, float] = dataclasses.field(default_factory=dict)
    rounded: set = dataclasses.field(default_factory=set)
    # tensor index → the largest magnitude of the op's terms in the simulation (``Terms.dot``:
    # Σ|x||w|, |a|+|b|, mean|x|), where the op has them: the scale of its float32 evaluation's noise
    terms: dict[int, float] = dataclasses.field(default_factory=dict)
    # float tensor index → the quantization step it carries from the quantized tensors it is made of
    # (`_carried_step`): a DEQUANTIZE's output, and the float ops after it, are that step off wherever
    # their quantized source is, which its own bound allowed
    steps: dict[int, float] = dataclasses.field(default_factory=dict)
    # each op on LiteRT's own inputs with the simulation's constants, rounded as the simulation rounds
    # (`carry`: what an input deviation its own bound allowed makes of this op's output)
    own: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)


def carry(sim: Simulated, index: int) -> float:
    """What LiteRT's input deviations make of tensor ``index`` through its own op: the largest
    ``|op(LiteRT's inputs) − op(the simulation's inputs)|`` (both with the simulation's constants,
    rounded to the tensor's grid) over the finite elements; 0 where the op has no reference.

    An input one step off, within its own tensor's bound, moves a steep op's output by far more than
    a step (a softmax over peaked logits: one logit step of 0.415 moved a probability by 0.102, 26
    output steps): that is carried, not made here. Dithering samples such slips at random places and
    can miss the one that matters (the top logit); this is the measured amount at this tensor. A
    defect in the op itself (its weight, its scale) is not in it: the op is recomputed correctly.
    """
    a, b = sim.own.get(index), sim.nominal.get(index)
    if a is None or b is None or a.shape != b.shape or not a.size:
        return 0.0
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    d = d[np.isfinite(d)]
    return float(d.max()) if d.size else 0.0


def simulate(model: bytes, float_model: bytes, key: str, feed: Mapping[str, np.ndarray], *,
             interpreter=None, parsed: ModelOps | None = None, quantization: str = "int8") -> Simulated:
    """Runs one signature of the float model with ``model``'s quantization simulated, and LiteRT on ``model``.

    Args:
        model: the quantized flatbuffer (int8, dynamic or float16 variant).
        float_model: the float (``"none"``) conversion of the same SavedModel: its weights
            are rounded to ``model``'s weight grids (a weight the converted model holds wrong
            therefore differs from the simulation).
        key: the signature key.
        feed: ``{input name: float array}`` (int8 inputs are quantized with their own scale).
        interpreter: a `tflab.litert.ops.preserving_interpreter` of ``model`` to reuse.
        parsed: ``read_ops(model)`` when the caller has it.
        quantization: the recipe (``"dynamic"`` adds the hybrid kernels' input quantization).

    Returns:
        A `Simulated`.
    """
    from tflab.litert.per_op import match_ops, quantize_feed

    pq = parsed or read_ops(model)
    pf = read_ops(float_model)
    interp = interpreter or preserving_interpreter(model)
    ops = pq.subgraphs[pq.subgraph_of(key)]
    f_ops = pf.subgraphs[pf.signatures[key]] if key in pf.signatures else ()
    pairs, _ = match_ops(ops, f_ops)
    details = interp.get_signature_runner(key).get_input_details()
    ran = run_ops(model, quantize_feed(feed, details), key, parsed=pq, interpreter=interp)
    producer = {t.index: op for op in ops for t in op.outputs}
    lite: dict[int, np.ndarray] = {}
    for op in ran:
        for t, a in zip(op.outputs, op.output_arrays):
            if a is not None:
                lite[t.index] = t.dequantize(a)
        for t, a in zip(op.inputs, op.input_arrays):  # the signature inputs, as LiteRT read them
            if t is not None and a is not None and t.constant is None and t.index not in producer \
                    and t.index not in lite:
                lite[t.index] = t.dequantize(a)
    # Signature inputs: the float examples, rounded to the input tensor's grid.
    by_name = {}
    for name, d in details.items():
        by_name[int(d["index"])] = np.asarray(feed[name], np.float64) if name in feed else None
    # Run 0 is the simulation, run 1 the same op on LiteRT's own inputs (its local slips are measured
    # there), runs 2.. the dithered ones.
    runs: list[dict[int, np.ndarray]] = [dict() for _ in range(2 + DITHER_RUNS)]
    rngs = [None, None] + [np.random.default_rng(1000 + i) for i in range(DITHER_RUNS)]
    carried: list[str] = []
    slips: dict[int, float] = {}
    terms: dict[int, float] = {}
    steps: dict[int, float] = {}
    rounded: set[int] = set()  # tensors a rounding reaches: quantized ones, hybrid outputs and what follows
    for op in ran:
        f_op = f_ops[pairs[op.index]] if op.index in pairs else None
        out = op.outputs[0] if op.outputs else None
        if out is None or op.output_arrays[0] is None:
            continue
        out_shape = tuple(op.output_arrays[0].shape)
        index_inputs = INDEX_INPUTS.get(op.op_type, ())
        src = f_op.inputs if f_op is not None and len(f_op.inputs) == len(op.inputs) else (None,) * len(op.inputs)
        hybrid = (quantization == "dynamic" and op.op_type in HYBRID_OPS and len(op.inputs) > 1
                  and op.inputs[0] is not None and not op.inputs[0].quantized and op.inputs[1] is not None
                  and (_source_constant(op.inputs[1], producer) or op.inputs[1]).quantized)
        if out.quantized or hybrid or any(t is not None and t.index in rounded for t in op.inputs):
            rounded.update(t.index for t in op.outputs)
        # The constant inputs are the same in every run: made once (and once per check, `_constant_input`).
        fixed = {i: _constant_input(t, src[i], producer) for i, t in enumerate(op.inputs)
                 if t is not None and i not in index_inputs}
        for r, values in enumerate(runs):
            if r >= 2 and not out.quantized and not hybrid and not any(
                    t is not None and t.index in values for t in op.inputs):
                values[out.index] = runs[0].get(out.index)  # nothing rounded upstream: as the simulation
                continue
            ins: list = []
            for i, (t, a) in enumerate(zip(op.inputs, op.input_arrays)):
                if t is None:
                    ins.append(None)
                    continue
                if i in index_inputs:
                    ins.append(np.asarray(a))
                    continue
                if fixed[i] is not None:
                    ins.append(fixed[i])
                elif r == 1:
                    ins.append(lite.get(t.index, t.dequantize(a) if a is not None else None))
                elif t.index in values and values[t.index] is not None:
                    ins.append(values[t.index])
                elif t.index in by_name and by_name[t.index] is not None:
                    ins.append(fake_quant(by_name[t.index], t))
                else:
                    ins.append(t.dequantize(a) if a is not None else None)
            if hybrid and ins[0] is not None:
                near = None
                if rngs[r] is not None and op.inputs[0].index in lite and op.inputs[0].index in runs[0]:
                    # LiteRT's input differs from the simulation's by float32 noise: an element that close
                    # to a rounding boundary may round the other way in LiteRT. Those flip here.
                    gap = np.abs(lite[op.inputs[0].index] - runs[0][op.inputs[0].index])
                    near = gap.max() if gap.size else 0.0
                ins[0] = _hybrid_input(ins[0], op.op_type, op.info.options, rngs[r], near)
            try:  # the simulation's float tensors need their noise scale (`_noise_scale`)
                ref, t_ = reference(op.op_type, op.info.options, ins, out_shape,
                                    terms=r == 0 and not out.quantized and out.index in rounded)
                if r == 0 and not out.quantized:
                    terms[out.index] = _noise_scale(op.op_type, t_, ref, ins, op.inputs, terms, index_inputs)
                    steps[out.index] = _carried_step(op.op_type, t_, ins, op.inputs, steps, index_inputs)
            except Exception:  # noqa: BLE001 - no reference (or not for this use): LiteRT's output is carried
                if r == 0:
                    carried.append(f"{op.op_type} #{op.index}")
                ref = lite.get(out.index)
                if ref is None:
                    continue
            y = fake_quant(ref, out)
            if r == 1 and out.quantized and out.index in lite:
                # How often LiteRT's kernel lands one step off the correctly rounded value on its own
                # inputs: its legitimate slips (a defect moves elements by more, and is left out).
                with np.errstate(invalid="ignore", divide="ignore"):
                    k = np.abs(lite[out.index] - y) / np.broadcast_to(_step(out, y.shape), y.shape)
                slips[op.index] = float(np.mean((k >= 0.5) & (k <= 1.5))) if k.size else 0.0
            if rngs[r] is not None and out.quantized:
                p = slips.get(op.index, 0.0)
                move = rngs[r].choice((-1.0, 1.0), y.shape) * (rngs[r].random(y.shape) < p)
                y = np.clip(y + _step(out, y.shape) * move, *_range(out, y.shape))
            values[out.index] = y
    return Simulated(runs[0], runs[2:], lite, carried, slips, rounded, terms, steps, runs[1])


def _finite_max(a) -> float:
    if a is None:
        return 0.0
    a = np.abs(np.asarray(a, np.float64))
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def _noise_scale(op_type: str, t_, ref, ins, tensors, scales: Mapping[int, float], index_inputs) -> float:
    """The magnitude a float op's float32 evaluation carries noise at: never below its own result.

    An op that cancels (a LayerNorm's MEAN of values that sum to ~0, the SUB that centres them)
    has a result far below its terms, and float32 rounds at the terms' scale (``Terms.dot``:
    Σ|x||w|, |a|+|b|, mean|x|). Ops that only move, negate or combine that noise linearly carry
    their inputs' scale on: one-input exact ops keep it, ADD/SUB add it, MUL weighs each input's
    by the other's largest magnitude, MEAN/SUM average or add it. Other ops (transcendental, dot
    products on their own terms) start again from their own result.
    """
    own = max(_finite_max(ref), _finite_max(t_.dot))
    data = [(i, t) for i, t in enumerate(tensors) if t is not None and i not in index_inputs and i < len(ins)]
    s = [scales.get(t.index, _finite_max(ins[i])) for i, t in data]
    carried = _linear_carry(op_type, t_, s, [_finite_max(ins[i]) for i, _ in data])
    return own if carried is None else max(own, carried)


def _linear_carry(op_type: str, t_, s: list[float], m: list[float]) -> float | None:
    """How far an op's output moves when each input moves by ``s[i]`` (its largest magnitude ``m[i]``),
    for the ops that only move, negate or combine their inputs linearly; None for the others."""
    if not s:
        return None
    if op_type in ("ADD", "SUB"):
        return sum(s)
    if op_type == "MUL" and len(s) == 2:
        return s[0] * m[1] + s[1] * m[0]
    if op_type in ("MEAN", "SUM"):
        return s[0] * (1 if op_type == "MEAN" else max(1, t_.k))
    if t_.kind in ("exact", "convert") and len(s) == 1:
        return s[0]
    return None


def _carried_step(op_type: str, t_, ins, tensors, steps: Mapping[int, float], index_inputs) -> float:
    """The quantization step a float op's output carries from its inputs: a quantized input's own
    scale, a float input's carried step (`Simulated.steps`), moved through the op as `_linear_carry`
    moves it (a DEQUANTIZE then a NEG: the source's step); for other ops, the largest input's."""
    data = [(i, t) for i, t in enumerate(tensors) if t is not None and i not in index_inputs and i < len(ins)]
    s = [float(t.scale.max()) if t.quantized and t.scale.size else steps.get(t.index, 0.0) for _, t in data]
    if not any(s):
        return 0.0
    carried = _linear_carry(op_type, t_, s, [_finite_max(ins[i]) for i, _ in data])
    return max(s) if carried is None else carried


def _constant_input(t: TensorInfo, ft: TensorInfo | None, producer: Mapping[int, OpInfo]) -> np.ndarray | None:
    """A constant input as the simulation feeds it (float64, read-only), or None when it is not constant.

    The float model's weight rounded to the variant's grid where the two match, else the variant's own
    constant dequantized. Made once per weight inside ``PREPARED.keeping()`` (`simulation_check`).
    """
    from tflab.litert.references import PREPARED

    const = _source_constant(t, producer)
    if const is None:
        return None
    if ft is not None and ft.constant is not None and np.dtype(ft.dtype).kind == "f" \
            and ft.constant.shape == tuple(const.shape):
        make = lambda: (fake_quant(ft.constant, const),)  # noqa: E731  the float weight on the variant's grid
        sources = (ft.constant, const)
    else:
        make = lambda: (const.dequantize(const.constant) if const.quantized  # noqa: E731
                        else np.asarray(const.constant, np.float64),)
        sources = (const,)
    a = PREPARED.get("simulated constant", sources, make)[0]
    if a.base is None and a.flags.writeable:
        a.setflags(write=False)  # shared by the runs: never written
    return a


def _range(t: TensorInfo, shape: tuple):
    info = np.iinfo(np.dtype(t.dtype))
    s = _step(t, shape)
    z = t.zero_point.reshape(np.shape(s)) if np.ndim(s) else float(t.zero_point[0])
    return (info.min - z) * s, (info.max - z) * s


def simulation_check(model: bytes, float_model: bytes, feeds: Mapping[str, Sequence[Mapping[str, np.ndarray]]],
                     quantization: str):
    """LiteRT's tensors against the simulation of ``model``'s quantization, tensor by tensor, end to end.

    Args:
        model: the quantized flatbuffer (``"int8"`` or ``"dynamic"`` variant).
        float_model: the float conversion of the same SavedModel (its weights are the reference).
        feeds: signature key → example feeds ``{input name: float array}``.
        quantization: ``"int8"`` or ``"dynamic"``.

    Returns:
        A `tflab.litert.records.simulation.Simulation`: every op output that carries rounding
        (a quantized tensor, or for the dynamic variant a float tensor downstream of a hybrid
        kernel), with ``max|lite − simulated|``, its measured bound and their ratio.
    """
    from tflab._io.progress import step_note
    from tflab.litert.references import PREPARED

    step_note(f"{quantization}: simulating its quantization end to end (1 + {DITHER_RUNS} dithered runs per "
              f"example batch)")
    with PREPARED.keeping():  # each weight rounded to the variant's grid and laid out once for all runs
        return _simulation_check(model, float_model, feeds, quantization)


def _simulation_check(model: bytes, float_model: bytes, feeds, quantization: str):
    import time

    from tflab.litert.records.simulation import SimulatedTensor, Simulation
    from tflab.litert.whole_model import activation_range

    t0 = time.perf_counter()
    pq = read_ops(model)
    interp = preserving_interpreter(model)
    acc: dict[tuple[str, int], list] = {}
    carried: list[str] = []
    seen: dict[tuple[str, int], tuple] = {}  # LiteRT's values of each quantized op output, for its range use
    for key, batch_feeds in feeds.items():
        if key not in pq.signatures:
            continue
        ops = pq.subgraphs[pq.signatures[key]]
        outputs = {int(d["index"]) for d in interp.get_signature_runner(key).get_output_details().values()}
        # A signature input's range use is measured on the float examples (the calibration data).
        fed = {int(d["index"]): n for n, d in interp.get_signature_runner(key).get_input_details().items()}
        for feed in batch_feeds:
            sim = simulate(model, float_model, key, feed, interpreter=interp, parsed=pq, quantization=quantization)
            carried += [c for c in sim.carried if c not in carried]
            made = {t.index for op in ops for t in op.outputs}
            for op in ops:
                for t in op.inputs:  # a signature input's range is the calibration data's
                    if t is not None and t.quantized and t.constant is None and t.index not in made \
                            and t.index in sim.lite:
                        entry = seen.setdefault((key, t.index), (t, op, [], "input"))
                        if entry[1] is op:  # once per example, at its first reader
                            name = fed.get(t.index)
                            entry[2].append(np.asarray(feed[name], np.float64) if name in feed
                                            else sim.lite[t.index])
                for t in op.outputs:
                    if t.index not in sim.nominal or t.index not in sim.lite or sim.nominal[t.index] is None:
                        continue
                    nom, lite = sim.nominal[t.index], sim.lite[t.index]
                    if t.quantized:
                        seen.setdefault((key, t.index), (t, op, [], "activation"))[2].append(lite)
                    if nom.shape != lite.shape or np.dtype(t.dtype).kind not in "fiu" or not nom.size:
                        continue
                    # The spread of the runs: the largest distance between any two of the simulation
                    # and its dithered runs (each is a model LiteRT's slips could have produced).
                    runs = [nom] + [d[t.index] for d in sim.dithered if d.get(t.index) is not None]
                    moved = max((float(np.nanmax(np.abs(a - b))) for i, a in enumerate(runs)
                                 for b in runs[i + 1:] if a.shape == b.shape), default=0.0)
                    if not t.quantized and t.index not in sim.rounded and t.index not in outputs:
                        continue  # no rounding reaches it: the per-op check judges float kernels
                    # A float tensor made from quantized ones (DEQUANTIZE, a hybrid kernel) carries their steps:
                    # an input one step off, which its own tensor's bound allowed, is that step off here too.
                    step = float(t.scale.max()) if t.quantized else sim.steps.get(t.index, max(
                        (float(i.scale.max()) for i in op.inputs if i is not None and i.quantized and i.scale.size),
                        default=0.0))
                    finite = np.isfinite(nom)
                    # The float32 kernel's noise is at the scale of the op's terms, not of its result: a
                    # LayerNorm's MEAN of values that cancel is 1e-7 where its inputs are 1e-2, and
                    # float32 sums them with errors at 1e-2's scale.
                    scale = max(float(np.abs(nom[finite]).max()) if finite.any() else 0.0, sim.terms.get(t.index, 0.0))
                    bound = DITHER_MARGIN * moved + OUTPUT_STEPS * step + FLOAT_NOISE * scale + carry(sim, t.index)
                    with np.errstate(invalid="ignore"):
                        d = np.abs(lite - nom)
                    # NaN/inf elements are the NaN analysis' (a NaN on one side only is already an infinite
                    # error of the output check): compared here are the finite ones.
                    d = np.where(np.isfinite(lite) & np.isfinite(nom), d, 0.0)
                    err = float(d.max())
                    ratio = 0.0 if err == 0 else (err / bound if bound > 0 else np.inf)
                    prev = acc.get((key, t.index))
                    if prev is None or ratio > prev[6]:
                        acc[(key, t.index)] = [op.index, op.op_type, t.name, key, max(err, prev[4] if prev else 0.0),
                                               bound, ratio, step, t.index in outputs]
                    else:
                        prev[4] = max(prev[4], err)
    tensors = tuple(SimulatedTensor(*v) for v in sorted(acc.values(), key=lambda v: (v[3], v[0])))
    ranges = tuple(r for t, op, values, role in seen.values()
                   for r in [activation_range(t, values, op.op_type, op.index, role)] if r is not None)
    return Simulation(quantization=quantization, tensors=tensors, carried=tuple(carried),
                      seconds=time.perf_counter() - t0, ranges=ranges)
