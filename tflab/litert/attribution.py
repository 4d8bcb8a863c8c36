"""Lab step 8, attribution: which ops the output error of a quantized variant comes from, and a measured fix.

How the share of each op is measured:

* the per-op check (`tflab.litert.per_op`) runs every op on its own inputs and
  compares it with a float64 reference that uses the float model's weights; its
  ``rms_error / rms_reference`` is the op's own relative noise ``r_i`` (nothing
  upstream is in it);
* quantization noise of independent ops adds in power, so the output's relative
  error is predicted as ``sqrt(Σ r_i²)`` and each op's share of the output error
  is ``r_i² / Σ r_j²``. The prediction is printed next to the measured output
  error, so a model where the assumption fails (an op that amplifies noise, a
  discontinuous op) shows it;
* each op's *drift* is measured too: how far its output, run through the whole
  quantized model, is from the same tensor of the float model (the float
  conversion of the same SavedModel, ops matched by `tflab.litert.per_op.match_ops`).

The TFLite tensors are mapped to the TF graph's by name: the converter names a
tensor after the TF ops it was fused from (``"model/conv2d_5/BiasAdd;model/conv2d_5/
Conv2D"``); a tensor is matched when one of those parts is a node of the
signature's FuncGraph or of a function it calls. `Attribution.tf_matched` and
``tf_unmatched`` say how often that works.

The fix, for int8: ``tf.lite.experimental.QuantizationDebugger`` calibrates
once, then quantizes with the worst ops denylisted
(``QuantizationDebugOptions(denylisted_nodes=...)``: they stay float, with
DEQUANTIZE/QUANTIZE around them). The output error of that model and of the
same debugger's model without a denylist are measured on the same examples
against TF, so the drop and the size cost are measured, not estimated. The
debugger's own per-layer ``mean_squared_error`` (its NumericVerify ops compare
each quantized op with the float op on the same dequantized inputs) is shown
next to ours. Dynamic-range and float16 variants have no such debugger: their
attribution is reported without a fix.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from tflab.litert.records.attribution import (  # noqa: F401 (the records live there)
    KEEP_SHARE, MIN_DROP, TOP, Attribution, KeptFloat, OpShare)


def _tf_node_names(loaded, key: str) -> set[str]:
    """Every node name of a signature's FuncGraph and of the functions it calls."""
    gd = loaded.signatures[key].graph.as_graph_def()
    names = {n.name for n in gd.node}
    for f in gd.library.function:
        names.update(n.name for n in f.node_def)
    return names


def tf_name_of(tflite_name: str, tf_names: set[str]) -> str | None:
    """The TF node a TFLite tensor name comes from, or None.

    The converter joins the names of the TF ops it fused with ``;`` and may add a
    ``:N`` output index or a leading signature prefix; a part matches a node of the
    same name, or a node whose name ends with ``/part`` (an inlined call's scope).
    """
    for part in tflite_name.split(";"):
        part = part.split(":")[0]
        if part in tf_names:
            return part
    for part in tflite_name.split(";"):
        part = part.split(":")[0]
        hit = next((n for n in tf_names if n.endswith("/" + part)), None)
        if hit:
            return hit
    return None


def _feeds_for(details: Mapping, feed: Mapping[str, np.ndarray]) -> dict:
    from tflab.litert.per_op import quantize_feed

    return quantize_feed(feed, details)


def _run_outputs(model: bytes, key: str, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict]:
    """Each feed through ``model``'s signature ``key`` (builtin kernels), outputs dequantized to float64."""
    from tflab.litert.ops import preserving_interpreter

    interp = preserving_interpreter(model)
    runner = interp.get_signature_runner(key)
    ins, outs = runner.get_input_details(), runner.get_output_details()
    got = []
    for feed in feeds:
        raw = runner(**_feeds_for(ins, feed))
        row = {}
        for name, a in raw.items():
            scale, zp = outs[name].get("quantization", (0.0, 0))
            a = np.asarray(a)
            row[name] = (a.astype(np.float64) - zp) * scale if scale and a.dtype.kind in "iu" \
                else a.astype(np.float64)
        got.append(row)
    return got


def _tf_outputs(loaded, key: str, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict]:
    import tensorflow as tf

    fn = loaded.signatures[key]
    return [{k: np.asarray(v, np.float64) for k, v in fn(**{n: tf.constant(a) for n, a in feed.items()}).items()}
            for feed in feeds]


def output_error(got: Sequence[Mapping], want: Sequence[Mapping]) -> float:
    """Root mean square over outputs of ``‖lite − tf‖ / ‖tf‖`` (every example of each output pooled).

    ``got``/``want`` hold one dict per example batch, of every signature in turn: an output is pooled
    over the batches whose dicts name it (two signatures have different outputs).
    """
    rel = []
    names = list(dict.fromkeys(n for w in want for n in w))
    for name in names:
        pairs = [(g[name], w[name]) for g, w in zip(got, want) if name in w and name in g]
        if not pairs:
            continue
        d = np.concatenate([(g - w).ravel() for g, w in pairs])
        r = np.concatenate([w.ravel() for _, w in pairs])
        keep = np.isfinite(d) & np.isfinite(r)
        ref = float(np.sqrt(np.mean(np.square(r[keep])))) if keep.any() else 0.0
        err = float(np.sqrt(np.mean(np.square(d[keep])))) if keep.any() else 0.0
        rel.append(err / ref if ref else err)
    return float(np.sqrt(np.mean(np.square(rel)))) if rel else 0.0


def _drifts(model: bytes, float_model: bytes, key: str, feeds, pairs: Mapping[int, int],
            wanted: set[int]) -> dict[int, float]:
    """Relative RMS distance of each wanted op's output from its float partner's, through the whole model."""
    from tflab.litert.ops import preserving_interpreter, read_ops, run_ops

    pq, pf = read_ops(model), read_ops(float_model)
    iq, iff = preserving_interpreter(model), preserving_interpreter(float_model)
    details = iq.get_signature_runner(key).get_input_details()
    err2 = dict.fromkeys(wanted, 0.0)
    ref2 = dict.fromkeys(wanted, 0.0)
    for feed in feeds:
        q_ops = run_ops(model, _feeds_for(details, feed), key, parsed=pq, interpreter=iq)
        f_ops = run_ops(float_model, feed, key, parsed=pf, interpreter=iff)
        for i in wanted:
            fi = pairs.get(i)
            if fi is None or fi >= len(f_ops):
                continue
            q, f = q_ops[i], f_ops[fi]
            if not q.outputs or q.output_arrays[0] is None or f.output_arrays[0] is None:
                continue
            a = q.outputs[0].dequantize(q.output_arrays[0]) if q.outputs[0].quantized else \
                np.asarray(q.output_arrays[0], np.float64)
            b = np.asarray(f.output_arrays[0], np.float64)
            if a.shape != b.shape:
                continue
            keep = np.isfinite(a) & np.isfinite(b)
            err2[i] += float(np.sum(np.square(a[keep] - b[keep])))
            ref2[i] += float(np.sum(np.square(b[keep])))
    return {i: (err2[i] / ref2[i]) ** 0.5 for i in wanted if ref2[i] > 0}


def attribute_error(model: bytes, float_model: bytes, saved_model_dir: str | os.PathLike, per_op: Any,
                    examples: Any, quantization: str, *, fix: bool = True) -> Attribution:
    """Attributes a quantized variant's output error to its ops; for int8, measures the kept-float fix.

    Args:
        model: the quantized flatbuffer (``"dynamic"``, ``"float16"`` or ``"int8"``).
        float_model: the float conversion of the same SavedModel (`tflab.litert.check.float_reference`).
        saved_model_dir: the SavedModel both were converted from (the TF reference).
        per_op: ``model``'s `tflab.litert.per_op.PerOpCheck` (its ``rms_error``/``rms_reference``).
        examples: a `tflab.examples.Examples` (the same batches the check used; for int8 also
            the debugger's calibration and debug dataset).
        quantization: the recipe of ``model``.
        fix: for int8, re-quantize with the worst ops kept in float and measure it.

    Returns:
        An `Attribution`.

    Raises:
        UsageError: ``quantization`` is ``"none"`` (a float variant has no quantization error).
    """
    from tflab.errors import UsageError
    from tflab.examples import Examples
    from tflab.litert.ops import read_ops
    from tflab.litert.per_op import match_ops
    from tflab.saved_model import load_saved_model, signature_inputs

    if quantization == "none":
        raise UsageError("attribute_error: the float variant has no quantization error to attribute; "
                         "pass a dynamic, float16 or int8 model")
    loaded = load_saved_model(saved_model_dir)
    examples = Examples.of(examples).check({k: signature_inputs(f) for k, f in loaded.signatures.items()})
    pq, pf = read_ops(model), read_ops(float_model)
    keys = [k for k in pq.signatures if k in examples.signatures and k in loaded.signatures]
    notes: list[str] = []
    got, want = [], []
    shares_raw: list[tuple[Any, float]] = []
    tf_matched = tf_unmatched = 0
    tf_names_of: dict[tuple[str, int], str | None] = {}
    drifts: dict[tuple[str, int], float] = {}
    for key in keys:
        feeds = examples.feeds(key)
        got += _run_outputs(model, key, feeds)
        want += _tf_outputs(loaded, key, feeds)
        names = _tf_node_names(loaded, key)
        for op in pq.subgraphs[pq.signatures[key]]:
            if not op.outputs:
                continue
            hit = tf_name_of(op.outputs[0].name, names)
            tf_names_of[(key, op.index)] = hit
            tf_matched += hit is not None
            tf_unmatched += hit is None
        ops = [o for o in per_op.ops if o.signature == key and o.verdict != "unchecked"
               and o.rms_error is not None and o.rms_reference]
        for o in ops:
            r = o.rms_error / o.rms_reference
            if r > 0:
                shares_raw.append((o, r))
        pairs, _ = match_ops(pq.subgraphs[pq.signatures[key]], pf.subgraphs[pf.signatures[key]]) \
            if key in pf.signatures else ({}, 0)
        wanted = {o.index for o, _ in sorted((x for x in shares_raw if x[0].signature == key),
                                             key=lambda x: -x[1])[:8]}
        for i, d in _drifts(model, float_model, key, feeds, pairs, wanted).items():
            drifts[(key, i)] = d
    total = sum(r * r for _, r in shares_raw)
    shares = tuple(sorted((OpShare(o.index, o.op_type, o.name, o.signature, r * r / total, r,
                                   drift=drifts.get((o.signature, o.index)),
                                   tf_name=tf_names_of.get((o.signature, o.index)), mse=o.rms_error ** 2)
                           for o, r in shares_raw), key=lambda s: -s.share)) if total else ()
    measured = output_error(got, want) if got else 0.0
    kept = None
    if quantization == "int8" and fix and shares:
        if len(keys) != 1 or len(pq.signatures) != 1:
            notes.append("no kept-float fix: QuantizationDebugger takes a model with one signature")
        else:
            try:
                kept, shares, more = _kept_float(saved_model_dir, examples, keys[0], shares, loaded)
                notes += more
            except Exception as e:  # noqa: BLE001  the shares stand; the fix is a measurement that failed
                first = (str(e).strip().splitlines() or [""])[0][:200]
                notes.append(f"no kept-float fix: QuantizationDebugger failed ({type(e).__name__}: {first})")
    elif quantization != "int8":
        notes.append(f"no kept-float fix for {quantization}: QuantizationDebugger (denylisted_nodes) covers "
                     f"full-integer int8 models only")
    return Attribution(quantization, shares, measured, float(np.sqrt(total)), tf_matched, tf_unmatched,
                       kept, tuple(notes))


def _to_keep(shares: Sequence[OpShare]) -> list[OpShare]:
    keep, held = [], 0.0
    for s in shares[:TOP]:
        keep.append(s)
        held += s.share
        if held >= KEEP_SHARE:
            break
    return keep


def _kept_float(saved_model_dir, examples, key: str, shares: tuple[OpShare, ...], loaded):
    """QuantizationDebugger: its per-layer statistics, and the model with the worst ops denylisted."""
    import tensorflow as tf

    from tflab._tf.calibration import calibrate_only, debugger_models, quantize_calibrated
    from tflab.litert.conversion import make_converter, recorded_calibration

    notes: list[str] = []
    feeds = examples.feeds(key)
    order: list[str] = []

    def dataset():
        for feed in feeds:
            rows = min(len(a) for a in feed.values())
            for i in range(rows):
                yield [np.asarray(feed[n][i:i + 1]) for n in order]

    # The debugger's first step, the calibrate-only conversion, is the int8 variant's own conversion up to
    # its calibration: taken from it when it was kept (`tflab._tf.calibration`), else converted here; its
    # instrumented and plain models come from the int8 conversion's worker when it made them.
    from tflab._io.progress import step_note

    kept = recorded_calibration(saved_model_dir, examples, models=True) or {}
    step_note("int8: QuantizationDebugger: re-quantizing with the worst ops kept in float ("
              + ("from the variant's own calibration)" if kept else "converting and calibrating once more)"))
    calibrated = kept.get("calibrated") or calibrate_only(make_converter(saved_model_dir, "int8", examples))
    models = kept if "debug" in kept and "nondebug" in kept else debugger_models(calibrated)
    before = models["nondebug"]
    order[:] = _input_order(before, key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the debugger runs TF's deprecated tf.lite.Interpreter
        debugger = tf.lite.experimental.QuantizationDebugger(
            quant_debug_model_content=models["debug"], debug_dataset=dataset,
            debug_options=tf.lite.experimental.QuantizationDebugOptions(fully_quantize=True))
        debugger.run()
        dump = io.StringIO()
        debugger.layer_statistics_dump(dump)
        stats = {row["tensor_name"]: row for row in csv.DictReader(io.StringIO(dump.getvalue()))}
    keep = _to_keep(shares)
    after = quantize_calibrated(calibrated, denylisted_nodes=[s.name for s in keep])
    shares = tuple(dataclasses.replace(s, debugger_mse=float(stats[s.name]["mean_squared_error"]),
                                       debugger_scale=float(stats[s.name]["scale"]))
                   if s.name in stats else s for s in shares)
    missing = [s for s in shares[:TOP] if s.name not in stats]
    if missing:
        notes.append(f"QuantizationDebugger has no statistics for {', '.join(s.op_type for s in missing)} "
                     f"(it verifies ops with a quantized output only)")
    want = _tf_outputs(loaded, key, feeds)
    e0 = output_error(_run_outputs(before, key, feeds), want)
    e1 = output_error(_run_outputs(after, key, feeds), want)
    differ = [s for s in shares[:TOP] if s.debugger_mse is not None and s.mse
              and not 0.5 <= s.debugger_mse / s.mse <= 2.0]
    if differ:
        s = differ[0]
        notes.append(f"QuantizationDebugger's MSE differs from ours at {s.op_type} #{s.index} "
                     f"({s.debugger_mse:.3g} vs {s.mse:.3g}): it compares with a float32 TFLite kernel on the "
                     f"same dequantized inputs and averages per example; ours is float64, pooled over examples")
    return (KeptFloat(tuple(s.name for s in keep), e0, e1, len(before), len(after), model=after),
            shares, notes)


def _input_order(model: bytes, key: str) -> list[str]:
    """The signature's input names in the order of the interpreter's input tensors (the debugger's order)."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=bytes(model))
    by_index = {d["index"]: n for n, d in interp.get_signature_runner(key).get_input_details().items()}
    return [by_index[d["index"]] for d in interp.get_input_details()]
