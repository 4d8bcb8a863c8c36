"""Lab step 8: the LiteRT interpreter run on every SignatureDef, and the signatures it must match.

`run_signatures` feeds each example batch to each signature runner of
``ai_edge_litert.interpreter.Interpreter`` (quantizing an int8/uint8 input with
its scale and zero point, dequantizing the outputs) and collects the outputs
beside the SavedModel's; `runtime_name` names the kernels that ran (XNNPACK
or builtin); `argmax_agreement` is the top-1 agreement of a classifier's
outputs; `require_matching_signatures` refuses a flatbuffer whose signatures
are not the SavedModel's. `tflab.litert.check` compares the outputs and
re-exports these names.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from tflab._user.usercode import run_signature
from tflab.errors import TflabError, UsageError
from tflab.litert.conversion import call_target
from tflab.examples import Examples
from tflab.saved_model import signature_inputs, signature_outputs


def runtime_name(interp) -> str:
    from tflab._tf.lite import ops_details

    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("ai-edge-litert")
    except PackageNotFoundError:
        v = "?"
    delegated = any(d.get("op_name") == "DELEGATE" for d in ops_details(interp))
    return f"ai_edge_litert {v} Interpreter" + (" + XNNPACK delegate" if delegated else " (builtin kernels)")


def _details(d: Mapping) -> dict:
    scale, zp = d.get("quantization", (0.0, 0))
    return {"dtype": np.dtype(d["dtype"]).name, "shape_signature": tuple(int(x) for x in d["shape_signature"]),
            "quantization": (float(scale), int(zp)) if scale else None}


def _quantize(a: np.ndarray, detail: Mapping) -> np.ndarray:
    dt = np.dtype(detail["dtype"])
    scale, zp = detail.get("quantization", (0.0, 0))
    if dt.kind in "iu" and scale and a.dtype.kind == "f":
        info = np.iinfo(dt)
        return np.clip(np.round(a / scale + zp), info.min, info.max).astype(dt)
    return a


def _dequantize(a: np.ndarray, detail: Mapping) -> np.ndarray:
    scale, zp = detail.get("quantization", (0.0, 0))
    if a.dtype.kind in "iu" and scale:
        return ((a.astype(np.float32) - zp) * scale).astype(np.float32)
    return a


def argmax_agreement(got: np.ndarray, want: np.ndarray) -> tuple[float, int]:
    """(fraction of rows where LiteRT keeps TF's top class, rows where LiteRT ties and TF does not).

    A quantized output can tie several classes at its top value. Such a row is
    a tie, not an agreement, even when TF's class is among the tied ones
    (plain argmax would pick the first of them, which may or may not be TF's):
    it is counted in the second number and not in the first. Where TF's own
    row ties (its top value held by several classes, as a softmax of equal
    logits is), LiteRT agrees when its top classes are TF's very ones, or one
    of them alone: a float variant equal to TF bit for bit agrees on every row.
    A NaN ranks below every number; a LiteRT row that is NaN in every class
    names no class: it disagrees, and is no tie.

    Args:
        got: LiteRT output rows, shape ``(rows, classes)`` (a 1-D array is one row; more
            dimensions are rows of the last one, as a sequence model's per-token logits).
        want: TF output rows, the same shape.

    Returns:
        ``(agreement, tied)``: agreement in [0, 1] over all rows (1.0 for no rows),
        and the number of rows where LiteRT's top value is held by two or more classes
        that are not TF's own tied top classes.

    Raises:
        UsageError: arrays that are not numbers, of different shapes, or with no class.
    """
    from tflab.errors import UsageError

    try:
        got, want = np.asarray(got), np.asarray(want)
        if got.dtype.kind not in "biuf" or want.dtype.kind not in "biuf":
            raise TypeError
    except (TypeError, ValueError):
        raise UsageError("argmax_agreement takes two numeric arrays of LiteRT and TF outputs, got "
                         f"{type(got).__name__} and {type(want).__name__}") from None
    if got.shape != want.shape or got.ndim == 0 or got.shape[-1] == 0:
        raise UsageError(f"argmax_agreement needs LiteRT's and TF's outputs of one shape with at least one class "
                         f"(the last dimension), got {got.shape} and {want.shape}")
    got, want = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    if want.dtype.kind == "f":
        want = np.where(np.isnan(want), -np.inf, want)
    wa = want.argmax(axis=-1)
    blank = np.isnan(got).all(axis=-1) if got.dtype.kind == "f" else np.zeros(len(wa), bool)
    if got.dtype.kind == "f":
        got = np.where(np.isnan(got), -np.inf, got)
    top = got.max(axis=-1) if got.size else np.zeros(len(wa))
    lite_top = (got == top[:, None]) & ~blank[:, None]
    tf_top = want == want.max(axis=-1, keepdims=True) if want.size else np.zeros_like(lite_top)
    # LiteRT's top classes all among TF's, and either one class or exactly TF's tied set.
    inside = ~(lite_top & ~tf_top).any(axis=-1)
    alone = lite_top.sum(axis=-1) == 1
    same = (lite_top == tf_top).all(axis=-1)
    agree_rows = lite_top.any(axis=-1) & inside & (alone | same)
    ties = (lite_top.sum(axis=-1) > 1) & ~agree_rows
    agree = float(agree_rows.mean()) if len(wa) else 1.0
    return agree, int(ties.sum())


def run_signatures(runners, loaded, examples: Examples, notes):
    """Runs every signature in TF and LiteRT on every example; collects outputs by name."""
    import tensorflow as tf

    missing = set(loaded.signatures) - set(runners)
    # Keras signs its endpoint as both 'serve' and 'serving_default': an alias
    # of a converted signature (same function called) is not missing.
    targets = {call_target(loaded.signatures[k]) for k in runners if k in loaded.signatures}
    missing = {k for k in missing if call_target(loaded.signatures[k]) not in targets - {None}}
    if missing:
        notes.append(f"TFLiteConverter.from_saved_model converted signature(s) {sorted(runners)} only; "
                     f"{sorted(missing)} are not in the TFLite model (pass signature_keys to convert them)")
    multi = len(runners) > 1
    signatures: dict[str, dict] = {}
    collected: dict[str, dict[str, list]] = {}
    out_details: dict[str, Mapping] = {}
    in_scales: dict[str, float] = {}
    full_keys: dict[str, str] = {}
    for key, runner in runners.items():
        in_d = runner.get_input_details()
        o_d = runner.get_output_details()
        signatures[key] = {"inputs": {n: _details(d) for n, d in sorted(in_d.items())},
                           "outputs": {n: _details(d) for n, d in sorted(o_d.items())}}
        fn = loaded.signatures[key]
        for n, d in in_d.items():
            if d["quantization"][0]:
                in_scales[n] = float(d["quantization"][0])
        for feed in examples.feeds(key):  # checked against the SignatureDefs once, by check_tflite
            want = {k: v.numpy() for k, v in run_signature(
                fn, key, {n: tf.constant(a) for n, a in feed.items()}).items()}
            got = runner(**{n: _quantize(a, in_d[n]) for n, a in feed.items()})
            if set(got) != set(want):
                raise TflabError(f"signature {key!r}: LiteRT outputs {sorted(got)} are not TF's {sorted(want)}, "
                                 f"so they cannot be compared by name")
            for n, w in want.items():
                okey = f"{key}/{n}" if multi else n
                collected.setdefault(okey, {"got": [], "want": []})
                collected[okey]["got"].append(_dequantize(np.asarray(got[n]), o_d[n]))
                collected[okey]["want"].append(w)
                out_details[okey] = o_d[n]
                full_keys[okey] = f"{key}/{n}"
    return signatures, collected, out_details, in_scales, full_keys

def require_matching_signatures(model: bytes, loaded) -> None:
    """Refuses a flatbuffer whose signatures are not the SavedModel's (same keys, input and output names).

    Args:
        model: TFLite flatbuffer bytes.
        loaded: the SavedModel, loaded (`tflab.saved_model.load_saved_model`).

    Raises:
        UsageError: a TFLite signature key the SavedModel lacks, or different input/output names.
    """
    from ai_edge_litert.interpreter import Interpreter

    try:
        interp = Interpreter(model_content=bytes(model))
        lite = interp.get_signature_list()
    except (RuntimeError, ValueError) as e:
        raise UsageError(f"LiteRT cannot load this flatbuffer ({str(e).strip().splitlines()[0][:200]}): "
                         f"give a .tflite file tf.lite.TFLiteConverter wrote") from None
    have = sorted(loaded.signatures)
    if not lite:
        raise UsageError("the flatbuffer has no signatures (SignatureDefs), so its tensors cannot be matched to "
                         "the SavedModel's by name: convert with TFLiteConverter.from_saved_model")
    for key, sig in lite.items():
        if key not in loaded.signatures:
            raise UsageError(f"the flatbuffer's signature {key!r} is not in the SavedModel (it has {have}): "
                             f"give the SavedModel this .tflite was converted from")
        fn = loaded.signatures[key]
        want_in = sorted(signature_inputs(fn))
        want_out = sorted(fn.structured_outputs)
        if sorted(sig["inputs"]) != want_in or sorted(sig["outputs"]) != want_out:
            raise UsageError(f"signature {key!r} differs: the flatbuffer takes {sorted(sig['inputs'])} and "
                             f"returns {sorted(sig['outputs'])}, the SavedModel takes {want_in} and returns "
                             f"{want_out}: give the SavedModel this .tflite was converted from")
        # Same names, other shapes (two Keras exports both take 'x' and return 'output_0'):
        # every static dim must agree; a dynamic dim (-1 / None) matches anything.
        runner = interp.get_signature_runner(key)
        specs = {**signature_inputs(fn), **signature_outputs(fn)}
        for name, d in {**runner.get_input_details(), **runner.get_output_details()}.items():
            lite_shape = [int(x) for x in d["shape_signature"]]
            tf_shape = [None if x is None else int(x) for x in (specs[name].shape or ())]
            if len(lite_shape) != len(tf_shape) or any(
                    a >= 0 and b is not None and a != b for a, b in zip(lite_shape, tf_shape)):
                shown = [None if a < 0 else a for a in lite_shape]
                raise UsageError(f"signature {key!r} differs: tensor {name!r} has shape {shown} in the "
                                 f"flatbuffer and {tf_shape} in the SavedModel: give the SavedModel this "
                                 f".tflite was converted from")


def read_signature_keys(model: bytes) -> list[str]:
    from tflab.litert.ops import read_ops

    return list(read_ops(model).signatures)
