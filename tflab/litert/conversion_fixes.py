"""The fixes for a failed TFLite conversion, each tried by converting again.

When the converter fails (`tflab.litert.converter_errors.ConverterFailure`), `try_fixes` tries:

* **a fixed batch size** (a Keras model whose signature has a None batch dim): the model is
  exported again the way ``model.export`` does (`keras.export.ExportArchive`, the same ``serve``
  endpoint and input names) with the batch dim set to the examples' batch, and converted with the
  same recipe. A Keras RNN layer's loop keeps a ``TensorList`` whose element shape then is static,
  so the converter can lower it. It is *checked* only when LiteRT's outputs on the examples of that
  batch size are within the bound of TF's outputs from the original SavedModel (`check_tflite`,
  TF as the independent reference); the ops it became are named (``UNIDIRECTIONAL_SEQUENCE_LSTM``
  when the converter fused the loop, ``WHILE`` when it kept it).
* **Select TF ops** (``SELECT_TF_OPS`` with ``_experimental_lower_tensor_list_ops = False``, the
  converter's own advice for tensor lists): the conversion is run; the Flex ops it needs are named.
  Its values cannot be checked here: the Python LiteRT interpreter has no Flex delegate.

Each is a `tflab.fix.Fix` made through `tflab.fix.attempt` (in this process: the converter, like
XLA, is not safe in a forked child of a process that ran TF).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from typing import Any

from tflab import fix as fx
from tflab.examples import Examples
from tflab.litert.converter_errors import ConverterFailure

__all__ = ["try_fixes", "explain_failure", "layer_of", "NO_FLEX_DELEGATE"]

NO_FLEX_DELEGATE = "values not checked: the Python LiteRT has no Flex delegate"


def layer_of(model: Any, scope: str) -> str:
    """The Keras layer a node's name scope belongs to: the innermost scope part that names one of
    ``model``'s layers (Keras 3 may add ``_1`` to a layer's name scope), else ""."""
    names: set[str] = set()
    todo = list(getattr(model, "layers", None) or [])
    while todo:  # nested models' layers too
        layer = todo.pop()
        names.add(getattr(layer, "name", ""))
        todo += list(getattr(layer, "layers", None) or [])
    for part in reversed([p for p in scope.split("/") if p]):
        for name in (part, re.sub(r"_\d+$", "", part)):
            if name in names:
                return name
    return ""


def _keras3_model(model: Any) -> bool:
    try:
        import keras
    except ImportError:
        return False
    return isinstance(model, keras.Model)


def _static_batch(model: Any, saved_model_dir: str, batches: Examples, quantization: str) -> fx.Fix:
    import tensorflow as tf

    from tflab._tf.saved_model import keras_input_signature
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import analyze_flatbuffer, convert

    first = batches[0]
    size = int(next(iter(first.values())).shape[0])
    same = Examples(tuple(b for b in batches if all(a.shape[:1] == (size,) for a in b.values())))
    desc = f"export with a fixed batch of {size} (Keras' model.export makes the batch dim None)"

    def fixed(spec):
        shape = tf.TensorShape(spec.shape)
        dims = shape.as_list() if shape.rank else []
        return tf.TensorSpec([size if not i and d is None else d for i, d in enumerate(dims)],
                             tf.as_dtype(spec.dtype), name=getattr(spec, "name", None))

    try:
        signature = tf.nest.map_structure(fixed, keras_input_signature(model))
    except (TypeError, ValueError) as e:  # an unbuilt model, a structure Keras cannot sign
        return fx.unchecked("converter", "", desc, f"the model's input signature could not be read: {e}")
    # With the input's name: without it the SignatureDef calls it args_0, and --examples no longer matches.
    specs = ", ".join(f"tf.TensorSpec({s.shape.as_list()}, tf.{s.dtype.name}" + (f", name={s.name!r})" if s.name else ")")
                      for s in tf.nest.flatten(signature))
    change = f"model.export(path, input_signature=[{specs}])" if len(tf.nest.flatten(signature)) == 1 else \
        f"model.export(path, input_signature=…) with {specs}"

    def check():
        from keras.export import ExportArchive

        with tempfile.TemporaryDirectory(prefix="tflab-static-batch-") as tmp:
            archive = ExportArchive()
            archive.track_and_add_endpoint("serve", model, signature)
            archive.write_out(os.path.join(tmp, "sm"), verbose=False)
            data = convert(os.path.join(tmp, "sm"), quantization, same)
        ops = analyze_flatbuffer(data).op_counts
        fused = "UNIDIRECTIONAL_SEQUENCE_LSTM" in ops or "UNIDIRECTIONAL_SEQUENCE_RNN" in ops
        # the op the loop became first (a fused sequence op, or WHILE), then the most frequent ones
        first = [k for k in ("UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "WHILE") if k in ops]
        rest = [k for k, _ in sorted(ops.items(), key=lambda kv: -kv[1]) if k not in first]
        shown = ", ".join(f"{k}×{ops[k]}" for k in (first + rest)[:6])
        # TF on the ORIGINAL SavedModel is the reference, on the examples of that batch size.
        check = check_tflite(data, saved_model_dir, same, quantization, per_op=False, tf_tensors=False)
        measured = {"batch": size, "ops": dict(ops), "max_abs_error": check.max_abs_error,
                    "within_bound": check.within_bound, "fused": fused}
        how = (f"converts with builtins ({'fused: ' if fused else 'the loop kept as '}{shown}); LiteRT vs TF on "
               f"{len(same)} example batch(es) of {size}: max|Δ| {check.max_abs_error:.3g}")
        if check.within_bound:
            return True, how + " within the float bound", measured
        return False, how + (" beyond the float bound" if check.within_bound is False else " (no bound)"), measured

    return fx.attempt("converter", change, desc, check, how=f"re-exported with batch {size} and converted",
                      apart=False)


def _select_tf_ops(saved_model_dir: str, batches: Examples, quantization: str) -> fx.Fix:
    from tflab.litert.conversion import analyze_flatbuffer, convert

    change = ("converter.target_spec.supported_ops = [TFLITE_BUILTINS, SELECT_TF_OPS]; "
              "converter._experimental_lower_tensor_list_ops = False")

    def check():
        data = convert(saved_model_dir, quantization, batches, select_tf_ops=True, lower_tensor_lists=False)
        flex = analyze_flatbuffer(data).flex_ops
        return True, (f"converts ({len(data)} bytes; Flex ops: {', '.join(flex) or 'none'}); {NO_FLEX_DELEGATE}"), \
            {"bytes": len(data), "flex_ops": list(flex)}

    done = fx.attempt("converter", change, "convert with Select TF ops", check, how="converted", apart=False)
    if done.checked:  # it converts, but LiteRT here cannot run it: the values are not checked
        return dataclasses.replace(done, status=fx.NOT_CHECKED, why=done.result, result="")
    return done


def try_fixes(model: Any, saved_model_dir: str | os.PathLike, batches: Examples, quantization: str,
              failure: ConverterFailure | None = None) -> tuple[fx.Fix, ...]:
    """Tries the fixes for a failed conversion of ``saved_model_dir`` with recipe ``quantization``.

    Args:
        model: the object exported (a Keras 3 model gets the fixed-batch fix; others cannot be
            traced again here, which the fix says).
        saved_model_dir: the SavedModel that failed to convert (TF's reference).
        batches: the export's example batches (`tflab.examples.Examples`).
        quantization: the recipe that failed.
        failure: the parsed failure, or None.

    Returns:
        One `tflab.fix.Fix` per fix: "checked" (converted, LiteRT within the bound of TF on the
        examples), "failed" (what the converter or the check said) or "not checked" (why; Select TF
        ops: "converts; values not checked: the Python LiteRT has no Flex delegate").
    """
    import tensorflow as tf

    from tflab.saved_model import load_saved_model

    saved_model_dir = os.fspath(saved_model_dir)
    batches = Examples.of(batches)
    fixes = []
    loaded = load_saved_model(saved_model_dir)
    dynamic = any(s.shape.rank and s.shape[0] is None for fn in loaded.signatures.values()
                  for s in tf.nest.flatten(fn.structured_input_signature) if isinstance(s, tf.TensorSpec))
    if dynamic:
        if _keras3_model(model):
            fixes.append(_static_batch(model, saved_model_dir, batches, quantization))
        else:
            fixes.append(fx.unchecked("converter", "", "export with a fixed batch size (an input_signature whose "
                                      "batch dim is a number)", "tflab re-exports a Keras 3 model only; "
                                      + _fixed_batch_how(model)))
    fixes.append(_select_tf_ops(saved_model_dir, batches, quantization))
    return tuple(fixes)


def _fixed_batch_how(model: Any) -> str:
    """How the user fixes the batch of what they exported (tflab re-traces a Keras 3 model only)."""
    from tflab.saved_model import is_tf_keras

    if is_tf_keras(model):
        return ("build the tf-keras model on an Input with a fixed batch (tf.keras.Input(shape, batch_size=N)) "
                "and export it again")
    if hasattr(model, "signatures") and not callable(getattr(model, "fit", None)):  # a loaded SavedModel
        return "save it again from its source with a fixed batch in its signature's input_signature"
    return "give your tf.function's input_signature a fixed batch"


def explain_failure(model: Any, saved_model_dir: str | os.PathLike, batches: Examples, quantization: str,
                    failure: ConverterFailure | dict, progress: Any = None, *,
                    fixes: bool = True) -> tuple[str, tuple[fx.Fix, ...]]:
    """The one line of a failed conversion, with the Keras layer of its op, and the fixes tried.

    Args:
        model, saved_model_dir, batches, quantization: as for `try_fixes`.
        failure: the `ConverterFailure` (or its ``to_dict()``, as a converter worker sends it).
        progress: called with one line before the fixes are tried, or None.
        fixes: False gives the line only (the fixes were tried for another variant).

    Returns:
        ``(line, fixes)``: ``TFLite none conversion failed: 'tf.TensorListReserve' op requires
        element_shape to be static … (op TensorListReserve in layer lstm, node …)`` and the `Fix` es.
    """
    if isinstance(failure, dict):
        failure = ConverterFailure(**failure)
    line = failure.line(quantization, layer_of(model, failure.scope))
    if not fixes:
        return line, ()
    if progress is not None:
        # within the variant's step (a failed variant has no LiteRT check): the total stays true
        getattr(progress, "note", progress)(
            f"{quantization} conversion failed: trying a fixed batch size and Select TF ops")
    return line, try_fixes(model, saved_model_dir, batches, quantization, failure)
