"""SavedModel names and random signatures: keras-team/keras#19458.

keras#19458 (reports_s4 row 8): `tf.saved_model.save` of a Keras 3 model with
``Input(name="x", dtype="int32")`` and an output layer ``y`` gives the SignatureDef input
``inputs`` and output ``output_0``. Measured by saving into a temporary folder; the fixes
(``model.export``, dict outputs) are checked by saving again and reading the new SignatureDef.
a signature drawing random numbers is bit-exact on the first call once a global seed is
set; the note must say so.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tflab
from tflab.saved_model.names import name_notes, signature_names


def _named_model(dict_outputs=False, input_name="x"):
    x = keras.Input((10,), name=input_name, dtype="int32")
    y = keras.layers.Dense(2, name="y")(keras.ops.cast(x, "float32"))
    return keras.Model(x, {"y": y} if dict_outputs else y)


def test_19458_plain_save_loses_the_names(tmp_path):
    model = _named_model()
    tf.saved_model.save(model, str(tmp_path / "plain"))
    assert signature_names(str(tmp_path / "plain")) == (["inputs"], ["output_0"])  # the ground truth


def test_19458_note_names_both_losses_and_the_checked_fix(tmp_path):
    check = tflab.save_and_reload(_named_model(), str(tmp_path / "sm"), {"x": np.ones((2, 10), np.int32)})
    note = next(n for n in check.notes if "plain tf.saved_model.save(model)" in n)
    assert "the input is called inputs, not x" in note and "argument is 'inputs'" in note
    assert "the output is called output_0, not y" in note
    # model.export keeps x but still names the output output_0: tried, failed, not the fix.
    assert "tried first: export with Keras instead of tf.saved_model.save: model.export(path) (failed: " \
           "the new SignatureDef has inputs ['x'] and outputs ['output_0'])" in note
    assert "fix: give the model dict outputs" in note and "(checked: the new SignatureDef has inputs ['x'] " \
           "and outputs ['y'])" in note
    assert list(check.signatures["serving_default"].inputs) == ["x"]  # tflab's own export keeps x


def test_19458_names_plain_save_keeps_get_no_note():
    # Healthy: the input already called 'inputs' (Model.call's argument) and dict outputs keyed
    # like the output layer: plain tf.saved_model.save keeps both, so nothing is claimed.
    assert name_notes(_named_model(dict_outputs=True, input_name="inputs")) == []
    # Planted: the same model with the input named x: only the input's loss is named.
    notes = name_notes(_named_model(dict_outputs=True))
    assert len(notes) == 1 and "the input is called inputs, not x" in notes[0]
    assert "the output is called" not in notes[0]

    class Sub(keras.Model):  # a subclassed model has no functional names to lose: no claim
        def call(self, x):
            return x * 2.0

    assert name_notes(Sub()) == []


class _Random(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x + tf.random.uniform(tf.shape(x))}


class _Stateless(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x + tf.random.stateless_uniform(tf.shape(x), seed=[1, 2])}


def test_seeded_random_signature_bit_exact_gets_the_random_note(tmp_path):
    tf.random.set_seed(0)
    try:
        check = tflab.save_and_reload(_Random(), str(tmp_path / "r"), {"x": np.zeros((2, 3), np.float32)})
    finally:
        tf.random.set_seed(None)
    # The state: both fresh kernels start from the seeded state, so the first calls coincide.
    assert check.bit_exact
    note = next(n for n in check.notes if "bit-exact here only because" in n)
    assert "RandomUniform" in note and "a second call of the reloaded signature changes" in note
    assert int(note.split("changes ")[1].split()[0]) > 0  # measured: the second call draws new numbers


def test_stateless_random_is_bit_exact_with_no_random_note(tmp_path):
    check = tflab.save_and_reload(_Stateless(), str(tmp_path / "s"), {"x": np.zeros((2, 3), np.float32)})
    assert check.bit_exact and not any("random" in n for n in check.notes)


class _Fixed(tf.Module):
    @tf.function
    def __call__(self, x):
        return {"y": x * 2.0}


class _NeedsItsBatch(tf.Module):
    @tf.function
    def __call__(self, x):
        return {"y": tf.reshape(x, [12])}  # 3 * 4 only: another batch size cannot reshape


def test_fixed_batch_dim_fix_is_re_traced_and_run(tmp_path):
    m = _Fixed()
    m(tf.ones([3, 4]))
    check = tflab.save_and_reload(m, str(tmp_path / "f"), {"x": np.ones((3, 4), np.float32)})
    (note,) = [n for n in check.notes if "dim 0 is fixed" in n]
    assert "fix: for any batch size, export with a None dim (signature serving_default: x: float32[None,4])" in note
    assert "(checked: re-traced with dim 0 None and ran a batch of 4 (the saved signature takes 3 only))" in note


class _FixedLoop(tf.Module):
    """A fixed batch of 3 through a TensorArray loop (TensorListReserve, as a Keras RNN's loop)."""

    @tf.function(input_signature=[tf.TensorSpec([3, 4], tf.float32, name="x")])
    def serve(self, x):
        ta = tf.TensorArray(tf.float32, size=2, element_shape=x.shape)
        ta = ta.write(0, x).write(1, x * 2.0)
        return {"y": ta.stack()}


@pytest.mark.parametrize("module,loop", [(_FixedLoop, True), (_Fixed, False)], ids=["tensor-list", "plain"])
def test_a_fixed_batch_that_tflite_needs_says_so_beside_the_none_dim_fix(tmp_path, module, loop):
    """The None-dim fix (for TF Serving) sent a GRU's user in a circle: a None batch is what TFLite's
    converter cannot take there. Where the signature runs a TensorListReserve, the note says to keep
    the fixed batch for TFLite; a signature without one (the healthy twin) says nothing of TFLite."""
    m = module()
    if not loop:
        m(tf.ones([3, 4]))
    check = tflab.save_and_reload(m, str(tmp_path / "f"), {"x": np.ones((3, 4), np.float32)})
    (note,) = [n for n in check.notes if "dim 0 is fixed" in n]
    assert "fix: for any batch size, export with a None dim" in note
    said = "for TFLite keep this fixed batch: its TensorListReserve (a Keras RNN's loop) converts only with a " \
           "static batch"
    assert (said in note) == loop, note
    if loop:  # what the note says of TFLite holds: this fixed batch converts, the None batch does not
        from tflab.litert.conversion import ConversionFailed, convert

        assert convert(str(tmp_path / "f"), "none")
        relaxed = tf.function(m.serve.python_function, input_signature=[tf.TensorSpec([None, 4], tf.float32,
                                                                                      name="x")])
        tf.saved_model.save(tf.Module(), str(tmp_path / "n"), signatures={"serving_default": relaxed})
        with pytest.raises(ConversionFailed, match="element_shape to be static"):
            convert(str(tmp_path / "n"), "none")


def test_fixed_batch_dim_fix_that_fails_is_not_printed_as_the_fix(tmp_path):
    m = _NeedsItsBatch()
    m(tf.ones([3, 4]))
    check = tflab.save_and_reload(m, str(tmp_path / "f"), {"x": np.ones((3, 4), np.float32)})
    (note,) = [n for n in check.notes if "dim 0 is fixed" in n]
    # Relaxed, the reshape to [12] fails on a batch of 4 (16 values): tried, failed, not the fix.
    assert "fix: for any batch size" not in note
    assert "none of the 1 candidate fix(es) worked on your case" in note and "(failed: raised" in note


class _Unnamed(tf.Module):
    @tf.function(input_signature=[{"image": tf.TensorSpec([None, 2]), "mask": tf.TensorSpec([None, 2])}])
    def serve(self, inputs):
        return {"y": inputs["image"] * inputs["mask"]}


def test_lost_dict_keys_fix_is_re_traced_and_its_names_read_back(tmp_path):
    feed = {"inputs": np.ones((1, 2), np.float32), "inputs_1": np.zeros((1, 2), np.float32)}
    check = tflab.save_and_reload(_Unnamed(), str(tmp_path / "u"), feed)
    (note,) = [n for n in check.notes if "are not input names" in n]
    assert "fix: give each spec name=<key> to keep the keys" in note
    assert "(checked: re-traced with named specs: the signature inputs are ['image', 'mask'])" in note


@pytest.mark.parametrize("build", ["single", "two_inputs_dict_outputs"])
def test_the_proxy_gets_the_same_signature_names_as_the_real_model(tmp_path, build):
    """name_notes saves a proxy (the model's inputs and output names, trivial layers): it must get
    the SignatureDef names the real model gets from tf.saved_model.save and model.export."""
    from tflab.saved_model.names import _proxy

    if build == "single":
        model = _named_model()
    else:
        a = keras.Input((3,), name="a")
        b = keras.Input((2,), name="b", dtype="int32")
        h = keras.layers.Concatenate()([a, keras.ops.cast(b, "float32")])
        model = keras.Model([a, b], {"p": keras.layers.Dense(1, name="p")(h), "q": keras.layers.Dense(2, name="q")(h)})
    proxy = _proxy(model)
    for label, save in (("plain", tf.saved_model.save), ("export", lambda m, p: m.export(p, verbose=False))):
        save(model, str(tmp_path / f"real_{label}"))
        save(proxy, str(tmp_path / f"proxy_{label}"))
        assert signature_names(str(tmp_path / f"real_{label}")) == signature_names(str(tmp_path / f"proxy_{label}"))
