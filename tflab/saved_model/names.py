"""What ``tf.saved_model.save(model)`` calls a Keras 3 model's inputs and outputs, and the checked fix.

keras-team/keras#19458: a model built with ``Input(name="x")`` and an output
layer named ``y`` and saved with plain ``tf.saved_model.save`` gets the
SignatureDef input ``inputs`` and output ``output_0``. Both come from TF, not
from the model:

* TF names signature inputs after the traced function's arguments
  (``signature_serialization.canonicalize_signatures`` keeps the
  ``TensorSpec`` names of the function it traces), and the function TF saves
  for a Keras 3 model is ``Model.__call__``/``call``, whose argument is
  ``inputs``;
* outputs that are not a dict are named ``output_0``, ``output_1``…
  (``signature_serialization._normalize_outputs``): the output layer's name is
  not kept.

`name_notes` measures this by saving, with ``tf.saved_model.save``, a proxy
model with the user's input structure, input names, dtypes and shapes and
output structure and names (one trivial layer per output: the names do not
depend on the layers between, and saving a MobileNetV3Small itself took 120 s)
into a temporary folder and reading the SignatureDef from ``saved_model.pb``,
then tries the fixes the same way, each a `tflab.fix.Fix` checked by saving
again and reading the new SignatureDef's names: ``model.export(path)`` (keeps
the input names; outputs are still ``output_0``), then dict outputs
(``keras.Model(model.inputs, {"y": model.outputs[0]})``, same layers and
weights) exported with ``model.export``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from tflab import fix as fx

__all__ = ["name_notes", "signature_names"]


def signature_names(path: str, key: str = "serving_default") -> tuple[list[str], list[str]]:
    """(input names, output names) of SignatureDef ``key`` in the SavedModel at ``path``, from saved_model.pb."""
    from tflab._tf.saved_model import parse_saved_model

    from tflab._io.path_checks import read_regular

    message = parse_saved_model(read_regular(os.path.join(path, "saved_model.pb"), what="saved_model.pb"))
    sig = message.meta_graphs[0].signature_def[key]
    return sorted(sig.inputs), sorted(sig.outputs)


def _model_names(model) -> tuple[list[str], list[str]] | None:
    inputs = getattr(model, "inputs", None)
    outputs = getattr(model, "output_names", None)
    if not inputs or not outputs:
        return None
    return sorted(t.name.split(":")[0] for t in inputs), sorted(outputs)


def _proxy(model):
    """A functional Keras model with ``model``'s input structure, names, dtypes and shapes and its output
    structure and output layer names, but one trivial layer per output.

    The SignatureDef names ``tf.saved_model.save`` and ``model.export`` write depend on those alone
    (``Model.call``'s argument, the input specs, the output structure and keys), not on the layers
    between; saving a MobileNetV3Small itself with ``tf.saved_model.save`` took 120 s here, the proxy
    well under one.
    """
    import keras
    import tensorflow as tf

    class _Join(keras.layers.Layer):
        def call(self, *xs):
            return sum(keras.ops.mean(keras.ops.cast(x, "float32"), axis=-1, keepdims=True) for x in xs)

    ins = tf.nest.map_structure(lambda t: keras.Input(shape=tuple(t.shape[1:]), dtype=t.dtype, name=t.name),
                                model.input)
    joined = _Join()(*tf.nest.flatten(ins))
    flat = [keras.layers.Identity(name=n)(joined) for n in model.output_names]
    return keras.Model(ins, tf.nest.pack_sequence_as(model.output, flat))


def _saved(save, tmp: str, name: str) -> tuple[list[str], list[str]]:
    path = os.path.join(tmp, name)
    save(path)
    return signature_names(path)


def name_notes(model: Any) -> list[str]:
    """Notes on the names plain ``tf.saved_model.save`` gives a functional Keras 3 model, with the checked fix.

    Returns:
        [] when the model has no functional inputs/outputs (subclassed: nothing to name)
        or when ``tf.saved_model.save`` keeps the model's names; else one note.
    """
    import tensorflow as tf

    names = _model_names(model)
    if names is None:
        return []
    want_in, want_out = names
    try:
        model = _proxy(model)
    except Exception:  # noqa: BLE001 - a structure the proxy cannot copy: no claim
        return []
    if _model_names(model) != names:
        return []
    with tempfile.TemporaryDirectory(prefix="tflab-names-") as tmp:
        try:
            got_in, got_out = _saved(lambda p: tf.saved_model.save(model, p), tmp, "plain")
        except Exception:  # noqa: BLE001 - tflab's own export is checked elsewhere; no claim here
            return []
        if (got_in, got_out) == (want_in, want_out):
            return []

        def check_names(save, label):
            def run():
                i, o = _saved(save, tmp, label)
                ok = (i, o) == (want_in, want_out)
                return ok, f"the new SignatureDef has inputs {i} and outputs {o}", {"inputs": i, "outputs": o}
            return run

        def export(p):
            model.export(p, verbose=False)

        def dict_export(p):
            import keras

            outs = dict(zip(model.output_names, model.outputs))
            keras.Model(model.inputs, outs).export(p, verbose=False)

        dict_change = "keras.Model(model.inputs, {" + ", ".join(
            f"{n!r}: model.outputs[{i}]" for i, n in enumerate(model.output_names)) + "}).export(path)"
        plan = fx.first_working([
            lambda: fx.attempt("save", "model.export(path)", "export with Keras instead of tf.saved_model.save",
                               check_names(export, "export"), how="the proxy exported into a temporary "
                               "folder, SignatureDef read from saved_model.pb"),
            lambda: fx.attempt("save", dict_change, "give the model dict outputs (keras#19771) and export it",
                               check_names(dict_export, "dict"), how="the proxy (your inputs and output names) "
                               "with dict outputs, exported into a temporary folder, SignatureDef read back"),
        ])
    lost = []
    if got_in != want_in:
        lost.append(f"the input is called {', '.join(got_in)}, not {', '.join(want_in)} (TF names signature "
                    f"inputs after the traced function's arguments, and the function it saves for a Keras 3 "
                    f"model is Model.call, whose argument is 'inputs')")
    if got_out != want_out:
        lost.append(f"the output is called {', '.join(got_out)}, not {', '.join(want_out)} (outputs that are not a "
                    f"dict are named output_0, output_1, ...: signature_serialization._normalize_outputs keeps "
                    f"no layer name)")
    return [f"plain tf.saved_model.save(model) loses the names (measured: a model with your model's inputs, "
            f"output structure and output names saved into a temporary folder, its SignatureDef read back): "
            + "; ".join(lost) + "; tflab's check uses model.export. " + "; ".join(plan.lines())]
