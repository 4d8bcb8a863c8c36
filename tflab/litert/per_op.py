"""Lab step 8, the per-op verdict: every TFLite op checked against a float reference on its own inputs.

For each op of the variant being checked, `check_ops` computes what the op
should have written, in float64 (`tflab.litert.references`), from

* **the op's actual inputs** as LiteRT computed them in this run (read with
  every tensor preserved and the builtin kernels, `tflab.litert.ops.run_ops`;
  int8 tensors dequantized with their own scale and zero point), and
* **the float model's weights**: the constants of the matching op of a float
  conversion of the same SavedModel. A reference built from the checked
  model's own weights and scales would agree with a consistently wrong
  scale; the float model's cannot. This is the comparison
  ``tf.lite.experimental.QuantizationDebugger``'s NumericVerify debug model
  makes (tensorflow/lite/tools/optimize/debugging/python/debugger.py).

Ops are matched to the float model by position: the op types of both
subgraphs, QUANTIZE/DEQUANTIZE left out (the float16 and int8 conversions add
them), are aligned with `difflib.SequenceMatcher`; a pair counts as named
alike when their first output tensors have the same name. An op without a
float partner, or without a reference, is *unchecked*, listed with its count.

The local bound is built from the op's own K terms, in magnitudes only
(``u = 2**-24``, ``γ_K = K·u/(1−K·u)``; Higham, *Accuracy and Stability of
Numerical Algorithms*, §3.1), so a cancelling output cannot shrink it:

* float32, any op: ``2·γ_K·Σ|x||w|`` (any summation order, any blocking)
  plus rounding of the result; elementwise exp/tanh/softmax kernels get
  64 ULP of the tensor's largest value; data movement is exact.
* float16: the float32 bound plus ``2**-11·Σ|x||w|`` (each float16 weight
  is within ``2**-11`` relatively of the float32 one; ``2**-25`` absolutely
  for subnormals). It is tight where an output is its bias alone (ReLU'd
  zeros in front): measured up to 0.98 of it on MobileNetV3Small.
* dynamic (hybrid kernels): with int8 weights of per-channel step ``s_w`` and
  the activation quantized at run time to step ``s_x = max|x|/127``:
  ``Σ|x|·s_w/2 + Σ|w|·s_x/2 + K·s_x·s_w/4`` plus the float32 bound.
* int8: one output step ``s_y`` (rounding and the fixed-point multiplier;
  two for the look-up-table kernels LOGISTIC, TANH, SOFTMAX, HARD_SWISH, and
  for the reductions MEAN, SUM, AVERAGE_POOL_2D, whose integer kernels round
  the scaled sum and then requantize it: measured up to 1.14 steps on
  MobileNetV3Small's squeeze-excite means)
  plus ``Σ|x|·s_w/2`` for the weights and ``s_x·s_w/2`` for the int32 bias.
  The reference is clipped to the output's representable range, which is
  part of the quantized op's meaning.

A wrong weight or scale, a dropped bias or a permutation then shows at the op
that holds it: its inputs are the checked model's own, so nothing upstream
is charged to it.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import time
from typing import Mapping, Sequence

import numpy as np

from tflab.report.text import table
from tflab.litert.records.ops import ILL_CONDITIONED, OpCheck, PerOpCheck  # noqa: F401 (the records live there)
from tflab.litert.ops import (ModelOps, OpTensors, TensorInfo, loop_body, preserving_interpreter, read_ops,
                              run_ops, subgraph_tensors)
from tflab.litert.references import INDEX_INPUTS, Terms, as_float64, reference

UNIT_ROUNDOFF = 2.0 ** -24
FLOAT16_STEP = 2.0 ** -11  # unit roundoff of float16 (10 stored mantissa bits, round to nearest)
FLOAT16_SUBNORMAL_STEP = 2.0 ** -25  # half the spacing of float16 subnormals
CONVERSION_OPS = ("QUANTIZE", "DEQUANTIZE")
LUT_OPS = ("LOGISTIC", "TANH", "SOFTMAX", "HARD_SWISH", "EXP")
TRANSCENDENTAL_ULPS = 64


def match_ops(checked: Sequence, float_ops: Sequence) -> tuple[dict[int, int], int]:
    """Pairs ops of the checked subgraph with ops of the float subgraph by aligned position.

    Args:
        checked: the checked subgraph's `OpInfo` list.
        float_ops: the float model's `OpInfo` list for the same signature.

    Returns:
        ``({checked op index: float op index}, unmatched count)``; QUANTIZE/DEQUANTIZE
        ops of the checked model are neither matched nor counted as unmatched.
    """
    a = [o for o in checked if o.op_type not in CONVERSION_OPS]
    b = [o for o in float_ops if o.op_type not in CONVERSION_OPS]
    sm = difflib.SequenceMatcher(None, [o.op_type for o in a], [o.op_type for o in b], autojunk=False)
    pairs: dict[int, int] = {}
    for block in sm.get_matching_blocks():
        for k in range(block.size):
            pairs[a[block.a + k].index] = b[block.b + k].index
    return pairs, len(a) - len(pairs)


# -------------------------------------------------------------------- bounds


def _gamma(k: int) -> float:
    ku = k * UNIT_ROUNDOFF
    return ku / (1 - ku)


def _channel(scale: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A per-channel step along the output's last axis (per tensor: a scalar)."""
    if scale.size <= 1:
        return np.float64(scale.reshape(-1)[0] if scale.size else 0.0)
    return scale.reshape((1,) * (len(shape) - 1) + (scale.size,))


def _local_bound(op: OpTensors, quantization: str, ref: np.ndarray, terms: Terms,
                 ref_inputs: Sequence, float_const: Sequence[bool]) -> np.ndarray:
    u = UNIT_ROUNDOFF
    out = op.outputs[0]
    a_ref = np.abs(ref)
    kind = terms.kind
    if kind in ("dot", "reduce"):
        b = 2 * _gamma(terms.k + 1) * terms.dot + 2 * u * a_ref
    elif kind == "arith":
        b = 2 * u * ((terms.dot if terms.dot is not None else 0.0) + a_ref)
    elif kind == "transcendental":
        # The largest finite output (a NaN/inf element, e.g. sqrt or log of a negative, would make
        # the whole bound NaN and every element of the op unjudgeable).
        finite_ref = a_ref[np.isfinite(a_ref)]
        b = TRANSCENDENTAL_ULPS * u * (a_ref + (finite_ref.max() if finite_ref.size else 0.0))
    else:  # exact data movement, conversions
        b = u * a_ref
        x_t = op.inputs[0] if op.inputs else None
        if kind == "convert" and x_t is not None and x_t.quantized:
            # (q − z)·s in float32: the kernel may form s·q − s·z, two roundings of terms up to |z·s|
            zs = float(np.abs(x_t.zero_point).max() * x_t.scale.max()) if x_t.scale.size else 0.0
            b = 2 * u * (a_ref + 2 * zs)
    # Below float32's smallest normal the rounding error is absolute: at most half the subnormal
    # spacing (2**-150) per rounding, and the op rounds its K products, K-1 sums and its output.
    roundings = 2 * terms.k + 1 if kind in ("dot", "reduce") and terms.k is not None else 2
    b = np.broadcast_to(b + roundings * 2.0 ** -150, ref.shape).astype(np.float64)
    has_const = any(float_const)
    if quantization == "float16" and has_const and terms.dot is not None:
        # relative step 2**-11 for normal float16 values, absolute 2**-25 below 2**-14 (subnormals)
        b = b + FLOAT16_STEP * terms.dot
        if terms.x_abs is not None:
            b = b + FLOAT16_SUBNORMAL_STEP * (terms.x_abs + 1.0)
    elif quantization == "float16" and has_const and kind in ("exact", "convert"):
        # Data movement of a float16-stored constant (GATHER's table, a constant reshaped): each output
        # element is one stored value, off from the float32 weight by its own float16 rounding.
        b = b + FLOAT16_STEP * a_ref + FLOAT16_SUBNORMAL_STEP
    w_i = terms.weight
    w_t: TensorInfo | None = op.inputs[w_i] if w_i is not None and w_i < len(op.inputs) else None
    w_quant = w_t is not None and w_t.quantized
    if w_quant and terms.x_abs is not None:
        s_w = _channel(w_t.scale, ref.shape)
        b = b + terms.x_abs * s_w / 2
        x_t = op.inputs[0]
        if x_t is not None and x_t.quantized:  # int8: the int32 bias has step s_x·s_w
            b = b + float(x_t.scale.max()) * s_w / 2
        elif quantization == "dynamic":  # hybrid kernel: the input quantized at run time, step max|x|/127
            x = np.abs(ref_inputs[0])
            if op.op_type == "FULLY_CONNECTED":
                rows = x.reshape(-1, ref_inputs[1].shape[1]).max(axis=1) / 127
                s_x = rows.reshape(ref.shape[:-1] + (1,)) if ref.ndim >= 1 and rows.size == int(
                    np.prod(ref.shape[:-1])) else rows.max()
            else:
                s_x = x.max() / 127 if x.size else 0.0
            b = b + terms.w_abs * s_x / 2 + terms.k * s_x * s_w / 4
    if quantization == "int8" or out.quantized:
        for i, is_const in enumerate(float_const):
            t = op.inputs[i] if i < len(op.inputs) else None
            if not is_const or t is None or not t.quantized or i == w_i:
                continue
            s_c = float(t.scale.max())
            if op.op_type == "MUL":
                other = np.abs(ref_inputs[1 - i]) if i in (0, 1) else 0.0
                b = b + np.broadcast_to(other * s_c / 2, ref.shape)
            elif op.op_type in ("ADD", "SUB"):
                b = b + s_c / 2
    if out.quantized:
        s_y = float(out.scale.max())
        b = b + s_y * (2 if op.op_type in LUT_OPS or kind == "reduce" else 1)
    return b


def _clip_to_output(ref: np.ndarray, out: TensorInfo) -> np.ndarray:
    if not out.quantized or out.scale.size != 1:
        return ref
    info = np.iinfo(np.dtype(out.dtype))
    s, z = float(out.scale[0]), float(out.zero_point[0])
    return np.clip(ref, (info.min - z) * s, (info.max - z) * s)


# -------------------------------------------------------------------- checking


class _Acc:
    def __init__(self):
        self.ratio, self.worst_abs_error, self.bound, self.max_abs_error = 0.0, 0.0, 0.0, 0.0
        self.reason = ""
        self.max_out, self.max_terms, self.k = 0.0, None, 1
        self.err2, self.ref2, self.n = 0.0, 0.0, 0

    def terms(self, ref: np.ndarray, terms: Terms) -> None:
        if terms.dot is None or terms.kind not in ("dot", "arith", "reduce") or not ref.size:
            return
        finite = np.isfinite(ref)
        if finite.any():
            self.max_out = max(self.max_out, float(np.abs(ref[finite]).max()))
            # Over the elements with a finite output and finite terms: an inf term (log(0)) says
            # nothing about float32 rounding noise, and would call every such model ill-conditioned.
            dot = np.broadcast_to(terms.dot, ref.shape)[finite]
            dot = dot[np.isfinite(dot)]
            if dot.size:
                self.max_terms = max(self.max_terms or 0.0, float(dot.max()))
            self.k = max(self.k, terms.k)

    def add(self, got: np.ndarray, ref: np.ndarray, bound: np.ndarray) -> None:
        both_nan = np.isnan(got) & np.isnan(ref)
        # LiteRT's builtin float kernels clamp to the activation range [-FLT_MAX, FLT_MAX] (an ADD
        # with no activation turns log(0) = -inf into -3.4e38); XNNPACK, which the user runs, and TF
        # keep the inf. That saturation is the builtin kernel's, not an error of the model.
        fmax = float(np.finfo(np.float32).max)
        clamped_inf = np.isinf(ref) & (np.abs(got) == fmax) & (np.sign(got) == np.sign(ref))
        with np.errstate(invalid="ignore"):
            diff = np.abs(got - ref)
        diff = np.where(both_nan | (got == ref) | clamped_inf, 0.0, np.where(np.isnan(diff), np.inf, diff))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / bound)
        ratio = np.where(np.isnan(ratio), np.inf, ratio)  # inf/inf or a NaN bound: not within it
        if not ratio.size:
            return
        w = int(np.argmax(ratio))
        if ratio.flat[w] > self.ratio or self.ratio == 0.0 and diff.flat[w] > self.worst_abs_error:
            self.ratio, self.worst_abs_error, self.bound = (float(ratio.flat[w]), float(diff.flat[w]),
                                                            float(bound.flat[w]))
        elif self.ratio == 0.0 and self.worst_abs_error == 0.0:  # exact so far: show the widest bound it met
            self.bound = max(self.bound, float(np.nanmax(bound)))
        self.max_abs_error = max(self.max_abs_error, float(diff.max()))
        finite = np.isfinite(diff) & np.isfinite(ref)
        self.err2 += float(np.sum(np.square(diff[finite], dtype=np.float64)))
        self.ref2 += float(np.sum(np.square(ref[finite], dtype=np.float64)))
        self.n += int(finite.sum())

    def rms(self) -> tuple[float | None, float | None]:
        return (None, None) if not self.n else ((self.err2 / self.n) ** 0.5, (self.ref2 / self.n) ** 0.5)


def quantize_feed(feed: Mapping[str, np.ndarray], details: Mapping) -> dict:
    out = {}
    for n, a in feed.items():
        d = details[n]
        dt = np.dtype(d["dtype"])
        scale, zp = d.get("quantization", (0.0, 0))
        if dt.kind in "iu" and scale and np.asarray(a).dtype.kind == "f":
            info = np.iinfo(dt)
            with np.errstate(invalid="ignore", over="ignore"):  # a NaN/inf example is counted and named elsewhere
                a = np.clip(np.round(np.asarray(a) / scale + zp), info.min, info.max).astype(dt)
        out[n] = a
    return out


def check_ops(model: bytes, float_model: bytes, feeds: Mapping[str, Sequence[Mapping[str, np.ndarray]]],
              quantization: str) -> PerOpCheck:
    """Checks every op of ``model`` against a float64 reference on its own inputs.

    Args:
        model: the flatbuffer being checked (any of the four variants).
        float_model: a float (``"none"``) conversion of the same SavedModel: its
            constants are the reference weights. Passing ``model`` itself for the
            float variant checks the kernels, not the weights.
        feeds: signature key → example feeds ``{input name: float array}`` (int8
            inputs are quantized here with the input's own scale).
        quantization: ``"none"``, ``"dynamic"``, ``"float16"`` or ``"int8"`` (selects the bound).

    Returns:
        A `PerOpCheck`.

    Raises:
        UsageError: either model is not a TFLite flatbuffer.
    """
    from tflab._io.progress import step_note
    from tflab.litert.references import PREPARED

    step_note(f"{quantization}: per-op check, every op against a float64 reference on its own inputs "
              f"({sum(len(f) for f in feeds.values())} example batch(es))")
    with PREPARED.keeping():  # each weight made float64 and laid out once for all examples
        return _check_ops(model, float_model, feeds, quantization)


def _check_ops(model: bytes, float_model: bytes, feeds, quantization: str) -> PerOpCheck:
    t0 = time.perf_counter()
    pq: ModelOps = read_ops(model)
    pf: ModelOps = read_ops(float_model)
    interp = preserving_interpreter(model)
    results: list[OpCheck] = []
    body_notes: list[str] = []
    matched = unmatched = alike = 0
    for key, si in pq.signatures.items() or {None: 0}.items():
        q_ops = pq.subgraphs[si]
        f_ops = pf.subgraphs[pf.signatures[key]] if key in pf.signatures else ()
        pairs, n_un = match_ops(q_ops, f_ops)
        matched += len(pairs)
        unmatched += n_un
        alike += sum(1 for qi, fi in pairs.items() if q_ops[qi].outputs and f_ops[fi].outputs
                     and q_ops[qi].outputs[0].name == f_ops[fi].outputs[0].name)
        accs = {o.index: _Acc() for o in q_ops}
        details = interp.get_signature_runner(key).get_input_details() if key is not None else {}
        bodies = {op.index: b for op in q_ops if (b := loop_body(op, pq)) is not None}
        runs, body_runs = [], []
        for feed in (feeds.get(key, ()) if key is not None else ()):
            runs.append(run_ops(model, quantize_feed(feed, details), key, parsed=pq, interpreter=interp))
            body_runs.append({i: subgraph_tensors(pq, interp, b) for i, b in bodies.items()})  # before the next run
        # Op by op, each example in turn (each op's accumulator sees the examples in their order, as
        # before): an op's weight is prepared once for all examples (`tflab.litert.references.PREPARED`).
        for ops_of_feeds in zip(*runs):
            # An op of constants only (a float16 or int8 weight's DEQUANTIZE) gets the same inputs from
            # every example: its output is checked once, not once per example batch.
            first = ops_of_feeds[0] if ops_of_feeds else None
            once = first is not None and any(t is not None for t in first.inputs) and all(
                t is None or t.constant is not None for t in first.inputs)
            for op in ops_of_feeds[:1] if once else ops_of_feeds:
                _check_one(op, f_ops[pairs[op.index]] if op.index in pairs else None, quantization,
                           accs[op.index])
        loops = {i: _check_body(pq, pf, b, f_ops[pairs[i]] if i in pairs else None, [r[i] for r in body_runs],
                                quantization) for i, b in bodies.items()}
        for op in q_ops:
            acc = accs[op.index]
            fi = pairs.get(op.index)
            name = op.outputs[0].name if op.outputs else ""
            if op.index in loops:
                checked, verdict_op, note = loops[op.index]
                if verdict_op is not None:
                    body_notes.append(f"{op.op_type} #{op.index}: {note}")
                    results.append(dataclasses.replace(verdict_op, index=op.index, op_type=op.op_type, name=name,
                                                       float_index=fi, signature=key or "", weights=()))
                    continue
                acc.reason = f"{acc.reason or 'no reference for ' + op.op_type}; {note}"
            weights = () if fi is None else tuple(
                t.name for t in f_ops[fi].inputs if t is not None and t.constant is not None
                and np.dtype(t.dtype).kind == "f")
            if acc.reason or (fi is None and op.op_type not in CONVERSION_OPS):
                reason = acc.reason or "no matching op in the float model"
                results.append(OpCheck(op.index, op.op_type, name, verdict="unchecked", reason=reason,
                                       float_index=fi, signature=key or ""))
                continue
            cond = noise = None
            if acc.max_terms:
                cond, noise = acc.max_out / acc.max_terms, _gamma(acc.k) * acc.max_terms
            results.append(OpCheck(op.index, op.op_type, name, acc.worst_abs_error, acc.bound, acc.ratio,
                                   acc.max_abs_error, "ok" if acc.ratio <= 1.0 else "OUTSIDE", float_index=fi,
                                   weights=weights, signature=key or "", condition=cond, noise=noise,
                                   rms_error=acc.rms()[0], rms_reference=acc.rms()[1]))
    unchecked = collections.Counter(o.op_type for o in results if o.verdict == "unchecked")
    out = PerOpCheck(tuple(results), dict(sorted(unchecked.items())), matched, unmatched, alike,
                     _runtime_text(), time.perf_counter() - t0)
    notes = ([out.conditioning_note] if out.conditioning_note else []) + body_notes
    for si in pq.signatures.values() or [0]:
        notes += _discontinuity_notes(pq.subgraphs[si])
    return dataclasses.replace(out, notes=tuple(notes))


def _check_body(pq: ModelOps, pf: ModelOps, body: int, f_while, runs: list, quantization: str):
    """A WHILE's body checked: ``(checked, verdict, note)``.

    The ops whose every non-constant input another body op wrote are checked on the loop's last
    iteration, against the float model's op on the inputs they ran on. An op reading a loop variable
    finds the loop's next value in its input buffer, not the array it ran on
    (`tflab.litert.ops.subgraph_tensors`): its output is not checked, but its weights are, against
    the float model's (`_weight_ratio`: a recurrent kernel is such a weight). ``verdict`` is an
    `OpCheck` with the worst error, bound and ratio: "OUTSIDE" when a checked op or a weight is beyond
    its bound, "ok" only when every body op was checked; None otherwise (the WHILE stays unchecked,
    ``note`` says how far it was checked).
    """
    q_body = pq.subgraphs[body]
    f_index = loop_body(f_while, pf) if f_while is not None else None
    f_body = pf.subgraphs[f_index] if f_index is not None else ()
    pairs, _ = match_ops(q_body, f_body)
    written = {t.index for op in q_body for t in op.outputs}
    reads_loop_variable = {op.index for op in q_body
                           if any(t is not None and t.constant is None and t.index not in written for t in op.inputs)}
    accs = {op.index: _Acc() for op in q_body}
    weights: dict[int, tuple[float, float, float, str]] = {}  # op -> (ratio, |Δ|, bound, weight name)
    for ops in runs:
        for op in ops:
            f_op = f_body[pairs[op.index]] if op.index in pairs else None
            if op.index not in reads_loop_variable:
                _check_one(op, f_op, quantization, accs[op.index])
            elif f_op is not None:
                w = _weight_ratio(op, f_op, quantization, written)
                if w is not None and w[0] >= weights.get(op.index, (-1.0,))[0]:
                    weights[op.index] = w
    checked = [op for op in q_body if op.index not in reads_loop_variable and not accs[op.index].reason
               and (op.index in pairs or op.op_type in CONVERSION_OPS)]
    worst_w = max(weights.items(), key=lambda kv: kv[1][0], default=None)
    worst = max(checked, key=lambda o: accs[o.index].ratio, default=None)
    parts = [f"{len(checked)} of its body's {len(q_body)} ops checked on the loop's last iteration"]
    if worst is not None:
        parts.append(f"the worst, {worst.op_type} #{worst.index} {_name(worst)!r} (subgraph {body}), at "
                     f"{accs[worst.index].ratio:.3g} of its bound")
    if reads_loop_variable:
        parts.append(f"{len(reads_loop_variable)} read a loop variable, which LiteRT's WHILE overwrites with the "
                     f"next iteration's value, so their outputs are not checked; their weights are compared with "
                     f"the float model's" + (f" ({len(weights)} with weights)" if weights else " (none has weights)"))
    if worst_w is not None and worst_w[1][0] > 1.0:
        i, (r, d, bnd, name) = worst_w
        op = q_body[i]
        parts.append(f"{op.op_type} #{i} {_name(op)!r}: its weight {name!r} differs from the float model's by "
                     f"{d:.3g}, {r:.3g}× its rounding bound {bnd:.3g}")
        return len(checked), OpCheck(0, "", "", d, bnd, r, d, "OUTSIDE"), "; ".join(parts)
    if worst is not None and accs[worst.index].ratio > 1.0 or checked and not reads_loop_variable:
        a = accs[worst.index]
        verdict = "OUTSIDE" if a.ratio > 1.0 else "ok"
        return len(checked), OpCheck(0, "", "", a.worst_abs_error, a.bound, a.ratio,
                                     max(accs[o.index].max_abs_error for o in checked), verdict), "; ".join(parts)
    return len(checked), None, "; ".join(parts)


def _name(op) -> str:
    return op.outputs[0].name if op.outputs else ""


def _weight_ratio(op: OpTensors, f_op, quantization: str, written: set[int]):
    """The largest ``|w − w_float| / bound`` over the op's weight inputs (float constants of the float
    model's op), with ``(|Δ|, bound, name)`` there; None without weights.

    The bound is the variant's own rounding of that weight: 4 float32 ULP of the tensor's largest
    ``|w|`` (the same converter folds both); float16 storage (``2^-11·|w|`` more); half a
    quantization step per channel for an integer weight (int8 kernel, int32 bias).
    """
    best = None
    for t, a, ft in zip(op.inputs, op.input_arrays, f_op.inputs):
        if t is None or a is None or ft is None or ft.constant is None or np.dtype(ft.dtype).kind != "f":
            continue
        if t.constant is None and t.index not in written:
            continue  # a loop variable, not a weight
        got = t.dequantize(a) if t.quantized else np.asarray(a, np.float64)
        want = as_float64(ft.constant)
        if got.shape != want.shape or not want.size:
            continue
        top = float(np.abs(want).max())
        bound = np.full(want.shape, ELEMENTWISE_WEIGHT_ULPS * float(np.spacing(np.float32(top))))
        if quantization == "float16":
            bound = bound + np.abs(want) * 2.0 ** -11
        if t.quantized:
            bound = bound + t.dequantize(np.ones_like(a)) / 2.0 - t.dequantize(np.zeros_like(a)) / 2.0
        with np.errstate(invalid="ignore", divide="ignore"):
            diff = np.abs(got - want)
            ratio = np.where(diff == 0, 0.0, diff / bound)
        k = int(np.nanargmax(ratio)) if np.isfinite(ratio).any() else 0
        r = float(ratio.flat[k]) if ratio.size else 0.0
        if best is None or r > best[0]:
            best = (r, float(diff.flat[k]), float(bound.flat[k]), t.name)
    return best


ELEMENTWISE_WEIGHT_ULPS = 4


DISCONTINUOUS = ("FLOOR_MOD", "FLOOR_DIV", "FLOOR", "CEIL", "ROUND", "ARG_MAX", "ARG_MIN", "SIGN")


def _discontinuity_notes(ops: Sequence) -> list[str]:
    """Discontinuous ops whose input is (dequantized from) a quantized tensor: flips are expected there."""
    producer = {t.index: op for op in ops for t in op.outputs}
    notes = []
    for op in ops:
        if op.op_type not in DISCONTINUOUS or not op.inputs or op.inputs[0] is None:
            continue
        t = op.inputs[0]
        src = producer.get(t.index)
        if not t.quantized and src is not None and src.op_type == "DEQUANTIZE" and src.inputs[0] is not None:
            t = src.inputs[0]
            src = producer.get(t.index)
        if not t.quantized:
            continue
        by = f" ({src.op_type} #{src.index}'s output {t.name.split(';')[0]!r})" if src is not None else ""
        notes.append(f"output is ill-conditioned here: {op.op_type} #{op.index} jumps where its input crosses "
                     f"a step, and its input{by} is requantized to {2 ** (8 * np.dtype(t.dtype).itemsize)} "
                     f"levels of {float(t.scale.max()):.3g}: a correctly computed quantized model can flip "
                     f"these outputs; keep that op and its input in float (or leave this variant) if they "
                     f"must be exact")
    return notes


def _runtime_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("ai-edge-litert")
    except PackageNotFoundError:
        v = "?"
    return f"ai_edge_litert {v} Interpreter, builtin kernels (no XNNPACK), experimental_preserve_all_tensors=True"


def _check_one(op: OpTensors, f_op, quantization: str, acc: _Acc) -> None:
    if acc.reason:
        return
    if not op.outputs or op.output_arrays[0] is None:
        acc.reason = "output not kept by the interpreter"
        return
    out = op.outputs[0]
    if np.dtype(out.dtype).kind not in "fiu":  # int outputs (shapes, indices) compare exactly
        acc.reason = f"{out.dtype} output (not a number)"
        return
    index_inputs = INDEX_INPUTS.get(op.op_type, ())
    ins: list = []
    consts: list[bool] = []
    src = f_op.inputs if f_op is not None else (None,) * len(op.inputs)
    if f_op is not None and len(f_op.inputs) != len(op.inputs):
        acc.reason = f"{len(op.inputs)} inputs, the float model's op has {len(f_op.inputs)}"
        return
    for i, (t, a) in enumerate(zip(op.inputs, op.input_arrays)):
        ft = src[i]
        if i in index_inputs and t is not None:
            ins.append(np.asarray(a))
            consts.append(False)
        elif ft is not None and ft.constant is not None and np.dtype(ft.dtype).kind == "f":
            # The float model's weight (one copy per weight), also where this op left the input out:
            # a bias the converter omitted (all zeros in the model it came from) is still the float
            # model's bias, so the op that lost it is judged against it.
            ins.append(as_float64(ft.constant))
            consts.append(True)
        elif t is None or (f_op is not None and ft is None and t.constant is not None):
            # Absent here, or a constant the float model's op does not have (a bias the float model
            # left out): the reference is the float model's op, without it.
            ins.append(None)
            consts.append(False)
        elif a is None:
            acc.reason = f"input {t.name!r} not kept by the interpreter"
            return
        else:
            ins.append(t.dequantize(a) if t.quantized or np.dtype(t.dtype).kind == "f" else np.asarray(a))
            consts.append(False)
    got_raw = op.output_arrays[0]
    try:
        ref, terms = reference(op.op_type, op.info.options, ins, tuple(got_raw.shape))
    except KeyError:
        acc.reason = f"no reference for {op.op_type}"
        return
    except (ValueError, IndexError, AttributeError, TypeError) as e:
        acc.reason = f"reference failed on these inputs ({type(e).__name__}: {str(e)[:80]})"
        return
    ref = _clip_to_output(ref, out)
    got = out.dequantize(got_raw)
    if not out.quantized and np.dtype(out.dtype).kind == "f":
        # Past the dtype's largest finite value the correctly rounded result is ±inf; the builtin
        # kernels clamp their output to [lowest, max] (the fused activation's range), so they give
        # ±max there. Either is exact for this op (float64 would call it an error of ~1e38).
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = np.asarray(ref).astype(out.dtype)
        top = np.finfo(np.dtype(out.dtype)).max
        g = np.asarray(got)
        same_inf = np.isinf(rounded) & ((g == rounded) | (g == np.sign(rounded) * top))
        if same_inf.any():
            ref = np.where(same_inf, got, ref)
    bound = _local_bound(op, quantization, ref, terms, ins, consts)
    acc.add(got, ref, bound)
    acc.terms(ref, terms)
