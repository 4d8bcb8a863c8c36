"""Lab step 8: a TFLite/LiteRT round trip is close, within a bound we can defend.

`tflite_roundtrip` converts a SavedModel (`tflab.litert.conversion.convert`), runs
each SignatureDef with the LiteRT interpreter
(``ai_edge_litert.interpreter.Interpreter``, by signature runner, feeding and
reading tensors by name) and compares every output with the reloaded
SavedModel run by TF (`check_tflite`), each element against the bound of
`tflab.litert.bounds` (read that module for how each bound is derived).

NaN outputs in the same positions on both sides count as a match (zero
error); a NaN on one side only is an infinite error.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable

import numpy as np

from tflab.errors import UsageError
from tflab.litert import bound_store
from tflab.litert.bounds import (MIN_WEIGHT_ELEMENTS, output_bounds, bound_explanation, sensitivity,
                                 with_stored_weights)
from tflab.litert.conversion import QUANTIZATIONS, analyze_flatbuffer, convert, signature_op_types
from tflab.examples import Examples
from tflab._graph.numeric import ulp_distance
from tflab.saved_model import load_saved_model, signature_inputs
from tflab.litert.records import OutputError, TFLiteCheck
from tflab.litert.recipe import feed_note, fixed_output_step, saturation, saturation_note
from tflab.litert.reference_worker import reference_beside_bounds
from tflab.litert.vacuous import planted_outputs, vacuous_note as _vacuous_note
from tflab.litert.whole_model import output_effect, stored_integer_sizes, whole_model_cause
from tflab.litert.runner import (  # noqa: F401 (re-exported)
    run_signatures, runtime_name, argmax_agreement, read_signature_keys, require_matching_signatures)


def check_tflite(model: bytes, saved_model_dir: str | os.PathLike, examples: Examples | Any,
                 quantization: str | None = None, *, float_size: int | None = None,
                 convert_seconds: float | None = None, float_model: bytes | None = None,
                 per_op: bool = True, keep_float: bool = False, tf_tensors: bool = True,
                 isolate: bool | None = None, progress: Callable[[str], None] | None = None) -> TFLiteCheck:
    """Runs a converted flatbuffer with LiteRT and compares it with the SavedModel in TF.

    Args:
        model: flatbuffer bytes from `convert`.
        saved_model_dir: the SavedModel it was converted from (the TF reference).
        examples: a `tflab.examples.Examples` (used as is; ``save_and_reload(...).example_batches``
            is one) or any form `Examples.of` takes, matching every signature.
        quantization: which recipe made ``model`` (selects the bound); None reads it from the
            flatbuffer's tensors (`tflab.litert.recipe.read_recipe`: int8 or uint8 activations and no
            float kernel is full-integer, bounded as int8). A recipe the tensors contradict is refused.
        float_size: size in bytes of the float variant, for ``size_ratio``.
        convert_seconds: recorded in the report as is.
        float_model: a float (``"none"``) conversion of the same SavedModel, whose
            weights are the per-op reference; converted here when not given (for
            the float variant too: the bytes checked may not be what the
            converter makes).
        per_op: run the per-op check (`tflab.litert.per_op.check_ops`); for a quantized
            variant its output error is then also attributed to ops (``.attribution``,
            `tflab.litert.attribution.attribute_error`).
        keep_float: for int8, also measure the fix: re-quantize with the worst ops kept in
            float (QuantizationDebugger; one more calibration conversion) and report the
            error drop and size cost (``.attribution.kept_float``).
        tf_tensors: for the float variant, compare each op's output with TF's tensor of the
            same name (``.tf_tensors``; freezes the signature once).
        isolate: where ``float_model`` is not given and the bound's gradients are not cached,
            convert the float reference in a worker process while this one computes them
            (`tflab.litert.reference_worker`; a converter abort then costs the reference only):
            True always, False never (in-process, after the bound), None when the SavedModel's
            variables hold at least ``WORKER_MIN_VARIABLE_BYTES`` (1 MiB), below which the
            worker's start-up costs more than it saves. The bytes are the same either way.
        progress: called with one line per step that can take seconds (the bound's backward
            passes, the float reference, the per-op check), e.g. ``Progress.note``.

    Returns:
        A `TFLiteCheck` (see `tflite_roundtrip`).

    Raises:
        UsageError: examples do not match a signature.
    """
    from tflab._api.argcheck import check_bytes  # a bytearray would be "unhashable"

    model = check_bytes(model, "model", "check_tflite") if isinstance(model, (bytearray, memoryview)) else model
    from ai_edge_litert.interpreter import Interpreter

    saved_model_dir = os.fspath(saved_model_dir)
    if not isinstance(model, (bytes, bytearray, memoryview)):
        raise UsageError(f"check_tflite takes the flatbuffer's bytes (open(path, 'rb').read()), "
                         f"got {type(model).__name__}")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UsageError(f"unknown quantization {quantization!r}; use one of {', '.join(QUANTIZATIONS)}")
    from tflab.litert.ops import read_ops

    from tflab.saved_model import require_saved_model_dir

    try:
        parsed = read_ops(bytes(model))
    except UsageError as e:
        raise UsageError(f"the model is {e}") from None
    except Exception as e:  # noqa: BLE001 - the identifier is there, a table is broken
        parsed = None
    if parsed is None or not parsed.subgraphs:
        raise UsageError("the model is not a readable TFLite flatbuffer (no subgraph could be read); "
                         "give the bytes of the .tflite file tf.lite.TFLiteConverter wrote")
    quantization = _recipe(model, quantization)
    saved_model_dir = require_saved_model_dir(saved_model_dir)
    batches = Examples.of(examples).check_rows()
    stats = analyze_flatbuffer(model)
    if float_model is None and per_op:  # export's own float conversion of this SavedModel, unchanged
        float_model = bound_store.float_reference(saved_model_dir)
    if not float_size and float_model is not None:
        float_size = len(float_model)  # the per-op reference is the float variant: its size is known
    size_ratio = None if not float_size else len(model) / float_size
    notes: list[str] = []
    dyn_quantized = stats.weights.get("int8", [0, 0])[0] > 0
    float_w = stats.weights.get("float32", [0, 0])
    base = dict(op_counts=stats.op_counts, flex_ops=stats.flex_ops, custom_ops=stats.custom_ops,
                tensor_dtypes=stats.tensor_dtypes, weights=stats.weights,
                shared_weights=stats.shared_weights, size_bytes=len(model),
                size_ratio=size_ratio, convert_seconds=convert_seconds, model=bytes(model))
    from tflab.litert.flatbuffer_notes import conversion_notes
    from tflab.litert.nan import nan_findings

    notes += conversion_notes(model, stats.op_counts)  # known before running: said first
    if quantization == "dynamic" and not dyn_quantized:
        notes.append(f"no weight tensor was quantized: dynamic-range quantization only quantizes weight "
                     f"tensors of at least {MIN_WEIGHT_ELEMENTS} elements, so all {float_w[0]} weight "
                     f"tensors ({float_w[1]} elements) stayed float32 and this variant is the float model"
                     + (f" (size ratio {size_ratio:.2f})" if size_ratio else ""))
    loaded = load_saved_model(saved_model_dir)
    # once, against every SignatureDef (as is when save_and_reload already checked it)
    batches = batches.check({k: signature_inputs(f) for k, f in loaded.signatures.items()})
    try:
        # The signature runner resizes inputs to each example's shape and
        # allocates on call, so a None batch dim needs no allocate_tensors here.
        interp = Interpreter(model_content=model)
        runners = {k: interp.get_signature_runner(k) for k in interp.get_signature_list()}
        signatures, collected, out_details, in_scales, full_keys = run_signatures(runners, loaded, batches,
                                                                                   notes)
    except (RuntimeError, ValueError) as e:
        if isinstance(e, UsageError):
            raise
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        refused = None if stats.flex_ops else _domain_refusal(model, batches, quantization)
        if refused is not None:  # a kernel that checks its domain refused the examples: measured, not "not run"
            return TFLiteCheck(quantization=quantization, bit_exact=None, max_abs_error=None, bound=None,
                               within_bound=False, outputs={},
                               runtime=f"refused by LiteRT's {refused.op_type} kernel: {reason}",
                               explanation=f"failed: {refused.op_type} got inputs outside its domain "
                                           f"({refused.detail})", signatures={}, notes=tuple(notes),
                               cause=refused, **base)
        if stats.flex_ops:
            reason = (f"Flex op(s) {', '.join(stats.flex_ops)} need the Flex delegate, which the Python "
                      f"LiteRT interpreter does not have ({reason[:200]})")
        return TFLiteCheck(quantization=quantization, bit_exact=None, max_abs_error=None, bound=None,
                           within_bound=None, outputs={}, runtime=f"not run: {reason}",
                           explanation="not checked: LiteRT could not run this model in Python",
                           signatures={}, notes=tuple(notes), **base)
    runtime = runtime_name(interp)
    carried = _carried(model, runners, out_details, full_keys, signatures, in_scales)
    moved: dict = {}

    def _planted(okey: str):
        if "all" not in moved:
            try:
                moved["all"] = planted_outputs(loaded, batches, full_keys)
            except Exception as e:  # noqa: BLE001  no measurement, no claim: the note is left out
                moved["all"] = None
                notes.append(f"planted-defect run failed ({type(e).__name__}), so no bound is called vacuous")
        return None if moved["all"] is None else moved["all"].get(okey)
    need_bounds = any(np.concatenate([w.ravel() for w in c["want"]]).dtype.kind == "f" for c in collected.values())
    sens, no_bound = None, ""
    say = progress or (lambda msg: None)
    if need_bounds:
        worker = None if not per_op or float_model is not None or _float_key(saved_model_dir) in _FLOAT_MODELS \
            else reference_beside_bounds(saved_model_dir, batches, isolate, say)
        with worker if worker is not None else contextlib.nullcontext():  # stopped if the bound fails
            try:
                sens = sensitivity(saved_model_dir, loaded, batches, progress=say)
                if quantization == "int8":  # every weight is stored in int8, not only the large ones
                    sens = with_stored_weights(sens, loaded, stored_integer_sizes(model))
            except LookupError as e:  # an op without a registered gradient
                no_bound = str(e).strip().splitlines()[0][:200]
            data = worker.result(say) if worker is not None else None
        if data is not None:
            remember_float_reference(saved_model_dir, data)

    outputs = {}
    effects: list = []  # the quantized variants' whole-model effect per output (`tflab.litert.whole_model`)
    nan_found: list = []
    vacuous: list[str] = []
    exact = True
    for okey, c in collected.items():
        got = np.concatenate([g.ravel() for g in c["got"]])
        want = np.concatenate([w.ravel() for w in c["want"]])
        det = out_details[okey]
        scale = float(det["quantization"][0]) or None
        inner = carried.get(okey)
        bound_scale = scale or (inner.scale if inner is not None else None)
        if got.dtype != want.dtype or got.tobytes() != want.tobytes():
            exact = False
        if want.dtype.kind == "f":
            g32, w32 = got.astype(np.float32), want.astype(np.float32)
            both_nan = np.isnan(g32) & np.isnan(w32)
            with np.errstate(invalid="ignore"):
                diff = np.abs(g32.astype(np.float64) - w32.astype(np.float64))
            # NaN in the same place on both sides matches; NaN on one side is infinitely off.
            diff = np.where(both_nan | (g32 == w32), 0.0, np.where(np.isnan(diff), np.inf, diff))
            ulps = np.where(both_nan, 0, ulp_distance(g32, w32))
            bad_g, bad_w = ~np.isfinite(g32), ~np.isfinite(w32)
            if bad_g.any() or (bad_w & ~bad_g).any():  # the first op that makes (or drops) it, measured
                key = max((k for k in runners if full_keys[okey].startswith(k + "/")), key=len)
                found = nan_findings(model, okey, key, batches.feeds(key), int((bad_g & ~bad_w).sum()),
                                     int((bad_w & ~bad_g).sum()), int((bad_g & bad_w).sum()),
                                     output=full_keys[okey][len(key) + 1:], got=g32, want=w32)
                notes.append(found[0])
                nan_found.append(found[1:])
            bound = (np.full(want.size, np.nan) if sens is None else
                     output_bounds(quantization, full_keys[okey], want, sens, dyn_quantized, in_scales,
                                   bound_scale))
            if sens is not None:
                estimated = int(np.isnan(sens.rel[full_keys[okey]][:, :1]).sum()) if len(sens.fan_in) else 0
                if estimated:
                    notes.append(f"{okey}: bounds computed by gradient for {want.size - estimated} of "
                                 f"{want.size} elements; the other {estimated} use the largest of those "
                                 f"(an estimate; give fewer or smaller examples for a full bound)")
        else:
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            ulps = np.zeros(1, dtype=np.int64)
            bound = np.zeros(want.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / bound)
        ref_max = float(np.nanmax(np.abs(want))) if want.size and not np.isnan(want).all() else 0.0
        agree, tied = None, 0
        if c["want"][0].ndim >= 2 and c["want"][0].shape[-1] >= 2 and want.dtype.kind == "f":
            g_rows = np.concatenate([g.reshape(-1, g.shape[-1]) for g in c["got"]])
            w_rows = np.concatenate([w.reshape(-1, w.shape[-1]) for w in c["want"]])
            # Rows where TF has a NaN have no class to agree on.
            keep = ~np.isnan(w_rows).any(axis=-1)
            agree, tied = argmax_agreement(g_rows[keep], w_rows[keep])
            if not keep.any():
                agree = None
            if tied:
                notes.append(f"{okey}: {tied} of {int(keep.sum())} LiteRT row(s) tie several classes at the top "
                             f"value: counted as ties, not as argmax agreement ({agree:.0%})")
        finite = want[np.isfinite(want)] if want.dtype.kind == "f" else want
        rng = float(np.ptp(finite)) if finite.size and want.dtype.kind in "fiu" else 0.0
        if want.size and want.dtype.kind == "f" and not finite.size:
            notes.append(f"TF's {okey} is NaN or ±inf everywhere (NaN examples?): only whether LiteRT has "
                         f"NaN/inf in the same places is checked")
        elif want.size > 1 and want.dtype.kind == "f" and rng == 0.0:
            # Only with more than one value: a single value (a scalar loss on one
            # batch) always has range 0 and says nothing about the model.
            notes.append(f"TF's {okey} is the same value ({want[0]:.6g}) for every element of every example, "
                         f"so these errors say little about the variant (e.g. a random-weight model whose "
                         f"logits collapse)")
        vacuous_note, is_vacuous = _vacuous_note(okey, got, want, bound, rng, agree,
                                                 lambda k=okey: _planted(k))
        if vacuous_note:
            notes.append(vacuous_note)
        if is_vacuous:
            vacuous.append(okey)
        if scale and np.dtype(det["dtype"]).kind in "iu" and want.dtype.kind == "f":
            codes = np.round(got.astype(np.float64) / scale + int(det["quantization"][1]))
            sat = saturation_note(okey, _writer(model, runners, okey, full_keys, det),
                                  saturation(codes, want, np.dtype(det["dtype"]).name, scale,
                                             int(det["quantization"][1])))
            if sat:
                notes.append(sat)
        worst = int(np.argmax(ratio)) if ratio.size else 0
        outputs[okey] = OutputError(
            name=okey, dtype=np.dtype(det["dtype"]).name,
            shape_signature=tuple(int(x) for x in det["shape_signature"]),
            max_abs_error=float(diff.max()) if diff.size else 0.0,
            max_rel_error=float(diff.max() / ref_max) if ref_max else float(diff.max() if diff.size else 0.0),
            max_ulp=int(min(ulps.max(), np.iinfo(np.int64).max)) if ulps.size else 0,  # NaN vs number: int64 max
            bound=float(bound.max()) if bound.size else 0.0,
            bound_ratio=float(ratio.max()) if ratio.size else 0.0,
            argmax_agreement=agree, argmax_ties=tied if agree is not None else 0, reference_range=rng,
            quantization=(scale, int(det["quantization"][1])) if scale else None,
            worst_abs_error=float(diff[worst]) if diff.size else 0.0,
            worst_bound=float(bound[worst]) if bound.size else 0.0,
            inner_quantization=None if scale or inner is None else (inner.scale, inner.zero_point, inner.dtype,
                                                                    inner.tensor))
        if quantization in ("int8", "dynamic"):
            fixed = fixed_output_step(_writer(model, runners, okey, full_keys, det)) if quantization == "int8" else None
            effects.append(output_effect(outputs[okey], c["got"], c["want"], fixed))
    fed = feed_note(signatures)
    if fed:
        notes.append(fed)
    explanation = bound_explanation(quantization, dyn_quantized, outputs)
    if per_op:
        say("per-op check: every op against the float reference on its own inputs")
    per_op_check = _per_op(model, saved_model_dir, batches, quantization, float_model, notes) if per_op else None
    attribution = float_tensors = None
    if per_op_check is not None and quantization == "none" and tf_tensors:
        say("the float variant's tensors against TF's of the same name")
        float_tensors = _float_tensors(model, saved_model_dir, batches, notes)
    if per_op_check is not None and quantization == "dynamic" and not dyn_quantized:
        # Nothing was quantized: the variant is the float model, its error is float rounding (the
        # float bound applies), and there is no quantization error to attribute to ops.
        notes.append("no error attribution: this variant quantized nothing, so its error is float32 rounding "
                     "(as the float variant's), not quantization error")
    elif per_op_check is not None and quantization != "none":
        attribution = _attribution(model, saved_model_dir, batches, quantization, float_model, per_op_check,
                                   keep_float, notes)
    simulation = None
    if per_op_check is not None and quantization in ("int8", "dynamic") and (quantization == "int8" or dyn_quantized):
        simulation = _simulation(model, saved_model_dir, batches, quantization, float_model, notes)
    worst_output = max(outputs, key=lambda k: outputs[k].bound_ratio, default=None)
    if not exact and quantization == "none":
        rng_ops = _stateful_random_ops(loaded)
        if rng_ops:
            notes.append(f"the graph uses stateful random op(s) {', '.join(rng_ops)}: TF and LiteRT draw "
                         f"different random numbers, which is the likely cause of any difference here")
    if no_bound:
        explanation = (f"no bound: the first-order propagation needs TF gradients, and {no_bound}; "
                       f"the errors are measured but not judged")
    from tflab.litert.cause import litert_cause

    cause = litert_cause({"per_op": per_op_check, "outputs": outputs, "nan": nan_found}, model,
                         float_model if float_model is not None else _FLOAT_MODELS.get(_float_key(saved_model_dir)),
                         quantization, os.path.basename(saved_model_dir.rstrip(os.sep)))
    effects = [e for e in effects if e is not None]
    cause = whole_model_cause(cause, effects, simulation, model, quantization,
                              os.path.basename(saved_model_dir.rstrip(os.sep)), float_model)
    return TFLiteCheck(
        quantization=quantization, bit_exact=exact, cause=cause,
        max_abs_error=max((o.max_abs_error for o in outputs.values()), default=0.0),
        bound=outputs[worst_output].bound if worst_output else 0.0, worst_output=worst_output,
        within_bound=None if no_bound else all(o.within_bound for o in outputs.values()),
        outputs=outputs, runtime=runtime, explanation=explanation, signatures=signatures,
        notes=tuple(notes), vacuous_outputs=tuple(vacuous), per_op=per_op_check, attribution=attribution,
        tf_tensors=float_tensors, simulation=simulation, whole_model=tuple(effects), **base)


def _carried(model: bytes, runners, out_details, full_keys, signatures, in_scales: dict) -> dict:
    """Each float output's `CarriedQuantization` (the int8 tensor before its final DEQUANTIZE), by report key.

    Float inputs read through a QUANTIZE get that tensor's scale in ``in_scales`` (the input's
    quantization step enters the int8 bound as an int8 input's own does).
    """
    from tflab._tf.lite import signature_subgraph
    from tflab.litert.flatbuffer_notes import read_graphs
    from tflab.litert.recipe import carried_quantization

    found: dict = {}
    try:
        graphs = read_graphs(bytes(model))
        for key, runner in runners.items():
            g = graphs[signature_subgraph(runner)]
            for name, d in runner.get_input_details().items():
                c = None if d["quantization"][0] else carried_quantization(g, int(d["index"]), "input")
                if c is not None and name not in in_scales:
                    in_scales[name] = c.scale
            for okey, det in out_details.items():
                if full_keys[okey].startswith(key + "/") and not float(det["quantization"][0]):
                    c = carried_quantization(g, int(det["index"]), "output")
                    if c is not None:
                        found[okey] = c
    except Exception:  # noqa: BLE001 - unreadable tables: the float bound stands, as before
        return {}
    return found


def _writer(model: bytes, runners, okey: str, full_keys, det) -> str:
    """The op that computes an output, past a final QUANTIZE/DEQUANTIZE: ``"SOFTMAX #3"``."""
    from tflab._tf.lite import signature_subgraph
    from tflab.litert.flatbuffer_notes import read_graphs

    try:
        key = max((k for k in runners if full_keys[okey].startswith(k + "/")), key=len)
        g = read_graphs(model)[signature_subgraph(runners[key])]
        writer = {t: op for op in g.ops for t in op.outputs}
        op = writer.get(int(det["index"]))
        while op is not None and op.name in ("QUANTIZE", "DEQUANTIZE") and op.inputs and op.inputs[0] in writer:
            op = writer[op.inputs[0]]
        return f"{op.name} #{op.index}" if op is not None else "the output op"
    except Exception:  # noqa: BLE001 - the name is a courtesy; the measurement stands without it
        return "the output op"


def _recipe(model: bytes, quantization: str | None) -> str:
    """``quantization``, or the recipe read from the tensors when None; refuses one they contradict."""
    from tflab.litert.recipe import read_recipe, recipe_mismatch

    if quantization is None:
        return read_recipe(bytes(model)).name
    why = recipe_mismatch(bytes(model), quantization)
    if why:
        raise UsageError(why)
    return quantization


def _float_tensors(model: bytes, saved_model_dir: str, batches: Examples, notes: list):
    """The float variant's intermediates vs TF's tensors of the same name, or None with a note."""
    from tflab._graph.failures import innermost_error  # TF's own line, not "Graph execution error:"
    from tflab.litert.float_tensors import compare_float_tensors

    try:
        return compare_float_tensors(model, saved_model_dir, batches)
    except Exception as e:  # noqa: BLE001  a measurement: the verdict stands without it, and says why
        notes.append(f"float intermediates not compared with TF's: {innermost_error(e, 240)}")
        return None


def _attribution(model: bytes, saved_model_dir: str, batches: Examples, quantization: str,
                 float_model: bytes | None, per_op_check, keep_float: bool, notes: list):
    """The output error attributed to ops (and, for int8, the kept-float fix), or None with a note."""
    from tflab.litert.attribution import attribute_error

    try:
        ref = float_model if float_model is not None else float_reference(saved_model_dir)
        return attribute_error(model, ref, saved_model_dir, per_op_check, batches, quantization, fix=keep_float)
    except Exception as e:  # noqa: BLE001  a measurement: the verdict stands without it, and says why
        if isinstance(e, UsageError):
            raise
        first = (str(e).strip().splitlines() or [""])[0][:200]
        notes.append(f"output error not attributed to ops: {type(e).__name__}: {first}")
        return None


def _simulation(model: bytes, saved_model_dir: str, batches: Examples, quantization: str,
                float_model: bytes | None, notes: list):
    """LiteRT against the simulated quantization of the float model (`tflab.litert.simulate`), or None with a note."""
    from tflab.litert.simulate import simulation_check

    try:
        ref = float_model if float_model is not None else float_reference(saved_model_dir)
        keys = read_signature_keys(model)
        return simulation_check(model, ref, {k: batches.feeds(k) for k in keys if k in batches.signatures},
                                quantization)
    except Exception as e:  # noqa: BLE001  a second end-to-end check: the others stand without it
        if isinstance(e, UsageError):
            raise
        first = (str(e).strip().splitlines() or [""])[0][:200]
        notes.append(f"quantization not simulated end to end: {type(e).__name__}: {first}")
        return None


_FLOAT_MODELS: dict = {}


def _float_key(saved_model_dir) -> tuple:
    pb = os.path.join(os.fspath(saved_model_dir), "saved_model.pb")
    return os.path.realpath(pb), os.stat(pb).st_mtime_ns


def remember_float_reference(saved_model_dir: str | os.PathLike, model: bytes) -> None:
    """Keeps ``model``, the float conversion just made of ``saved_model_dir``, for `float_reference`."""
    _FLOAT_MODELS.clear()
    _FLOAT_MODELS[_float_key(saved_model_dir)] = bytes(model)


def float_reference(saved_model_dir: str | os.PathLike) -> bytes:
    """The float (``"none"``) conversion of a SavedModel, cached per folder and ``saved_model.pb`` mtime."""
    key = _float_key(saved_model_dir)
    if key not in _FLOAT_MODELS:
        _FLOAT_MODELS.clear()  # one SavedModel at a time: the bytes can be large
        _FLOAT_MODELS[key] = convert(saved_model_dir, "none")
    return _FLOAT_MODELS[key]


def _per_op(model: bytes, saved_model_dir: str, batches: Examples, quantization: str,
            float_model: bytes | None, notes: list):
    """The per-op check, or None with a note saying why it did not run."""
    from tflab.litert.per_op import check_ops

    try:
        ref = float_model if float_model is not None else float_reference(saved_model_dir)
        keys = read_signature_keys(model)
        result = check_ops(model, ref, {k: batches.feeds(k) for k in keys if k in batches.signatures},
                           quantization)
        notes.extend(result.notes)  # conditioning, said plainly
        return result
    except Exception as e:  # noqa: BLE001  the end-to-end check stands; ok stays None and says why
        if isinstance(e, UsageError) and not str(e).startswith("not a TFLite"):
            raise
        first = (str(e).strip().splitlines() or [""])[0][:200]
        notes.append(f"per-op check not run, so there is no per-op verdict (ok=None): {type(e).__name__}: {first}")
        return None


from tflab.litert.vacuous import SATURATED  # noqa: E402,F401 (public here before it moved)


# The smallest possible .tflite file: root offset + "TFL3" identifier (see tflite_roundtrip).
MIN_TFLITE_BYTES = 8

_RANDOM_OPS = ("RandomUniform", "RandomStandardNormal", "RandomUniformInt", "TruncatedNormal",
               "Multinomial", "RandomShuffle", "RandomGamma", "RandomPoisson")


def _stateful_random_ops(loaded) -> list[str]:
    """Random ops in the signatures' graphs and the functions they call."""
    found: set[str] = set()
    for types in signature_op_types(loaded).values():
        found.update(t for t in types if t in _RANDOM_OPS)
    return sorted(found)


def _domain_refusal(model: bytes, batches, quantization: str):
    """A domain `Cause` when LiteRT refused to run because an op's inputs lie outside its domain, else None."""
    from tflab.attribution.records import Cause
    from tflab.fix import first_working
    from tflab.litert.nan import refusal_origin

    try:
        origin = refusal_origin(model, [(k, batches.feeds(k)) for k in batches.signatures])
    except Exception:  # noqa: BLE001 - no measurement, no claim: the variant stays "not run"
        return None
    if origin is None:
        return None
    return Cause("", f"tf vs litert {quantization}", "domain", origin.tensor, origin.op, detail=origin.why,
                 evidence={"nan_cause": origin.cause, "op_index": origin.op_index, "signature": origin.signature},
                 fix=None if origin.fix_record is None else first_working([origin.fix_record]))


def tflite_roundtrip(saved_model_dir: str | os.PathLike, examples: Examples | Any,
                     quantization: str = "none", *, select_tf_ops: bool = False,
                     float_size: int | None = None, tf_tensors: bool = True) -> TFLiteCheck:
    """Converts a SavedModel to TFLite, runs it with LiteRT, and checks it against TF.

    Args:
        saved_model_dir: a SavedModel folder (e.g. from `save_and_reload`).
        examples: ``{input name: array}`` (one batch), a list of such dicts,
            ``{signature key: {input name: array}}``, or a `tflab.examples.Examples`
            (read once here and passed on as is); each signature is fed
            the names it takes (dtypes and shapes must match its SignatureDef;
            0 rows is an error). For ``"int8"`` they also form the
            representative dataset (one sample per row and signature).
        quantization: ``"none"``, ``"dynamic"``, ``"float16"`` or ``"int8"``.
        select_tf_ops: convert ops outside the builtins as Flex ops (the
            result is reported as not run: Python LiteRT cannot run Flex ops).
        float_size: the float variant's size in bytes, to report ``size_ratio``;
            when not given, the length of the float conversion the per-op check
            uses anyway (made once per SavedModel and kept, `float_reference`).
        tf_tensors: as for `check_tflite`.

    Returns:
        A `TFLiteCheck`: ``.ok`` (the verdict: every op inside its local bound and no output beyond
        its end-to-end bound), ``.ops`` (one `OpCheck` per op),
        ``.bit_exact``, ``.max_abs_error``, ``.bound``, ``.within_bound``, ``.outputs`` by name, ``.op_counts``, ``.flex_ops``,
        ``.size_bytes``, ``.runtime``, ``.explanation``.

    Raises:
        UnsupportedOpsError: an op is not a TFLite builtin (and ``select_tf_ops`` is
            False), or is a custom op (``.kind == "custom"``: needs allow_custom_ops
            and a TFLite kernel).
        UsageError: a bad quantization name, a ``float_size`` that is not an
            int of at least 8 bytes, examples that do not match the
            signature, or ``saved_model_dir`` missing, a file, or a folder
            without ``saved_model.pb`` (`tflab.saved_model.require_saved_model_dir`).
        TflabError: the converter failed otherwise.

    Example (the SavedModel of `tflab.save_and_reload`'s example):

    >>> c = tflab.tflite_roundtrip("/tmp/scale_sm", {"x": np.ones((4, 64), np.float32)}, "none")
    >>> c
    <TFLiteCheck: none, ok=True, 1 ops checked, 0 outside, bit_exact=True, max|Δ| 0 (all outputs), worst output 'y' at 0 of its bound, 952 bytes>
    >>> c.op_counts
    {'MUL': 1}
    """
    from tflab.saved_model import require_readable_saved_model

    # A .tflite flatbuffer starts with a 4-byte root offset and the 4-byte file
    # identifier "TFL3" (tensorflow/lite/python/util.py _TFLITE_FILE_IDENTIFIER), so no
    # float model is smaller than 8 bytes: 2, 3 or 4 is a dtype width, not a size.
    if float_size is not None and (isinstance(float_size, bool) or not isinstance(float_size, (int, np.integer))
                                   or float_size < MIN_TFLITE_BYTES):
        raise UsageError(f"tflite_roundtrip: float_size is the float .tflite model's size in bytes "
                         f"(an int >= {MIN_TFLITE_BYTES}, e.g. len(float_model)), got {float_size!r}; "
                         f"omit it to measure it, and pass quantization='float16' for a float16 model")
    saved_model_dir = require_readable_saved_model(saved_model_dir)  # TF's OSError from the converter before
    examples = Examples.of(examples).check_rows()  # read once; convert and check_tflite take it as is
    t0 = time.perf_counter()
    model = convert(saved_model_dir, quantization, examples, select_tf_ops=select_tf_ops)
    seconds = time.perf_counter() - t0
    from tflab.litert.flatbuffer_notes import warn_after_conversion

    warn_after_conversion(model, f"tflite_roundtrip {quantization}")  # before LiteRT runs it
    # One float conversion per SavedModel serves both the size ratio and the per-op reference
    # weights (never a second whole-model conversion just for size_ratio).
    if quantization == "none":
        float_model = model
        if not select_tf_ops:
            remember_float_reference(saved_model_dir, model)
    elif select_tf_ops:
        float_model = convert(saved_model_dir, "none", select_tf_ops=True)
    else:
        float_model = float_reference(saved_model_dir)
    if float_size is None:
        float_size = len(float_model)
    return check_tflite(model, saved_model_dir, examples, quantization, float_size=float_size,
                        convert_seconds=seconds, float_model=float_model, tf_tensors=tf_tensors)
