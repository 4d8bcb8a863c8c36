"""Lab step 7: the SavedModel round trip is bit-exact, and the lab says what was not saved."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tflab._user.target import load_module

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "export", "models.py")


@pytest.fixture(scope="module")
def models():
    return load_module(MODELS)


@pytest.fixture(scope="module")
def examples64():
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((b, 64)).astype(np.float32)} for b in (1, 4)]


@pytest.fixture(scope="module")
def dense64_check(models, examples64, tmp_path_factory):
    import tflab

    path = tmp_path_factory.mktemp("sm07") / "dense64"
    return tflab.save_and_reload(models.dense64(), path, examples64)


def test_module_round_trip_is_bit_exact(dense64_check):
    # Same FuncGraph, same variable values, same kernels: every byte must match.
    c = dense64_check
    assert c.kind == "tf.Module"
    assert c.bit_exact is True
    sig = c.signatures["serving_default"]
    assert str(sig.inputs["x"]) == "x: float32[None,64]"
    assert sig.inputs["x"].shape == (None, 64)
    assert set(sig.outputs) == {"logits", "probs"}
    for out in sig.outputs.values():
        assert out.bit_exact and out.mismatched == 0 and out.max_ulp == 0
        assert out.shape == (None, 64) and out.dtype == "float32"
    assert c.batch_count == 2 and c.to_dict()["examples"] == 2
    assert "bit-exact" in c.to_text() and "serving_default" in repr(c)


def test_the_check_follows_the_record_convention(dense64_check):
    """tflab.report.base's convention on a real check: one-line repr, JSON dict with config, to_text a table."""
    import json

    import tflab

    c = dense64_check
    assert repr(c) == (f"<SavedModelCheck tf.Module {c.path}: bit-exact; signatures [serving_default(exact)]; "
                       f"{len(c.notes)} note(s)>")
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["config"] == tflab.runtime_config().to_dict()
    assert (d["batch_count"], d["examples"], d["bit_exact"]) == (2, 2, True)  # "examples": report.json's key
    assert d["signatures"]["serving_default"]["outputs"]["logits"]["bit_exact"] is True
    assert "example_batches" not in d  # the batches are arrays: not in the JSON
    # one table per signature (tflab.report.text.table): the verdicts line up after the widest tensor
    assert sorted(c.to_text().splitlines()[1:5]) == ["    in   x: float32[None,64]",
                                                     "    out  logits: float32[None,64]  bit-exact",
                                                     "    out  probs: float32[None,64]   bit-exact",
                                                     "  signature serving_default"]


def test_bytes_not_values_are_compared():
    from tflab._graph.numeric import compare_bits, ulp_distance

    # -0.0 == 0.0 as numbers but not as bytes.
    assert np.array([0.0], np.float32) == np.array([-0.0], np.float32)
    assert compare_bits(np.array([0.0], np.float32), np.array([-0.0], np.float32))[0] == 1
    # Two quiet NaNs with different payloads: NaN != NaN numerically either way, bytes differ.
    a = np.array([0x7FC00000], np.uint32).view(np.float32)
    b = np.array([0x7FC00001], np.uint32).view(np.float32)
    assert compare_bits(a, b)[0] == 1
    assert compare_bits(a, a.copy())[0] == 0
    # Neighbouring floats are 1 ULP apart; the smallest subnormals around 0 are 2 apart.
    one = np.array([1.0], np.float32)
    assert ulp_distance(one, np.nextafter(one, np.float32(2)))[0] == 1
    tiny = np.array([np.float32(1e-45)], np.float32)
    assert ulp_distance(tiny, -tiny)[0] == 2


def test_a_difference_is_detected(tmp_path):
    """The check can fail: an unseeded stateful random op gives other values on every call."""
    import tensorflow as tf

    import tflab

    class Noisy(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x + tf.random.uniform(tf.shape(x))}

    c = tflab.save_and_reload(Noisy(), tmp_path / "noisy", {"x": np.zeros((2, 4), np.float32)})
    out = c.signatures["serving_default"].outputs["y"]
    assert c.bit_exact is False and out.bit_exact is False
    assert out.mismatched == 8 and 0 < out.max_abs_error < 1
    # Two maxima, each over its own worst element, each labelled (the kind).
    assert (f"8 element(s) differ, max |Δ| {out.max_abs_error:.3g}, max ULP {out.max_ulp} "
            f"(each its own worst element)") in c.to_text()


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_keras_models_are_bit_exact(flavour, models, tmp_path):
    import tflab

    feed = {"a": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8),
            "b": np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)}
    if flavour == "keras3":
        model, out_name = models.keras_two_inputs(), "output_0"  # Keras 3 export names outputs output_i
    else:
        import tf_keras

        a, b = tf_keras.Input((8,), name="a"), tf_keras.Input((4,), name="b")
        h = tf_keras.layers.Concatenate()([a, b])
        model, out_name = tf_keras.Model([a, b], tf_keras.layers.Dense(3, name="class")(h)), "class"
    c = tflab.save_and_reload(model, tmp_path / flavour, feed)
    assert c.kind == ("keras" if flavour == "keras3" else "tf_keras")
    assert c.bit_exact is True
    sig = c.signatures["serving_default"]
    assert set(sig.inputs) == {"a", "b"}
    assert list(sig.outputs) == [out_name]
    assert sig.outputs[out_name].shape == (None, 3)
    if flavour == "keras3":
        import tensorflow as tf

        assert any("forward pass only" in n for n in c.notes)
        loaded = tf.saved_model.load(c.path)
        assert hasattr(loaded, "serve") and not hasattr(loaded, "optimizer")
        assert set(loaded.signatures) == {"serve", "serving_default"}


def test_notes_say_what_was_not_saved(tmp_path):
    import tensorflow as tf

    import tflab

    class Partial(tf.Module):
        def __init__(self):
            super().__init__()
            self.scale = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * self.scale}

        @tf.function
        def step(self, x, training=False):
            return x * self.scale if training else x

        @tf.function
        def never(self, x):
            return x

    m = Partial()
    m.step(tf.constant([1.0]), training=True)
    c = tflab.save_and_reload(m, tmp_path / "partial", {"x": np.ones(3, np.float32)})
    assert c.bit_exact
    text = " ".join(c.notes)
    assert "never: never traced" in text
    assert "step: Python argument training was traced only as training=True" in text
    # The notes are what TF does: check them on the reloaded object.
    loaded = tf.saved_model.load(str(tmp_path / "partial"))
    x = tf.constant([1.0])
    assert float(loaded.step(x, training=True)[0]) == 2.0
    with pytest.raises(ValueError, match="Could not find matching concrete function"):
        loaded.step(x, training=False)
    with pytest.raises(ValueError, match="zero restored functions"):
        loaded.never(x)


def test_dict_keys_are_lost_without_spec_names(tmp_path):
    import tensorflow as tf

    import tflab

    class Unnamed(tf.Module):
        @tf.function(input_signature=[{"image": tf.TensorSpec([None, 2]), "mask": tf.TensorSpec([None, 2])}])
        def serve(self, inputs):
            return {"y": inputs["image"] * inputs["mask"]}

    feed = {"inputs": np.ones((1, 2), np.float32), "inputs_1": np.zeros((1, 2), np.float32)}
    c = tflab.save_and_reload(Unnamed(), tmp_path / "unnamed", feed)
    assert set(c.signatures["serving_default"].inputs) == {"inputs", "inputs_1"}
    assert any("dict keys ['image', 'mask'] are not input names" in n for n in c.notes)


def test_untracked_resource_is_one_clear_error(tmp_path):
    import tensorflow as tf

    import tflab

    outside = tf.Variable(3.0)

    class Leaky(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * outside}

    with pytest.raises(tflab.UsageError, match=r"no attribute of the saved object holds.*assign it to an attribute"):
        tflab.save_and_reload(Leaky(), tmp_path / "leaky", {"x": np.ones(2, np.float32)})
    assert not (tmp_path / "leaky").exists()


@pytest.mark.parametrize("feed, match", [
    ({"x": np.ones((2, 64))}, "is float64 but signature 'serving_default' wants float32"),
    ({"y": np.ones((2, 64), np.float32)}, r"missing \['x'\] unknown \['y'\]"),
    ({"x": np.ones((2, 63), np.float32)}, r"has shape \[2, 63\] but .* wants x: float32\[None,64\]"),
], ids=["dtype", "name", "shape"])
def test_examples_must_match_the_signature(feed, match, models, tmp_path):
    import tflab

    with pytest.raises(tflab.UsageError, match=match):
        tflab.save_and_reload(models.dense64(), tmp_path / "bad", feed)
    assert not (tmp_path / "bad").exists()


def test_refuses_a_non_empty_folder(models, tmp_path):
    import tflab

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(tflab.UsageError, match="already exists"):
        tflab.save_and_reload(models.dense64(), tmp_path / "full", {"x": np.ones((1, 64), np.float32)})
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


# ------------------------------------------------- signatures with different inputs


@pytest.fixture(scope="module")
def two_sig_check(models, tmp_path_factory):
    import tflab

    # examples=None: random batches holding every signature's inputs.
    return tflab.save_and_reload(models.two_signatures(), tmp_path_factory.mktemp("sm07") / "two", None)


def test_random_examples_cover_every_signature(two_sig_check):
    c = two_sig_check
    assert c.bit_exact is True and set(c.signatures) == {"serve", "masked"}
    assert set(c.signatures["masked"].inputs) == {"x", "mask"} and set(c.signatures["serve"].inputs) == {"x"}
    assert [sorted(b) for b in c.example_batches] == [["mask", "x"], ["mask", "x"]]
    assert [b["x"].shape for b in c.example_batches] == [(1, 16), (4, 16)]


def test_per_signature_examples(models, tmp_path):
    import tflab

    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    mask = (rng.random((3, 16)) > 0.5).astype(np.float32)
    c = tflab.save_and_reload(models.two_signatures(), tmp_path / "a",
                              {"serve": {"x": x}, "masked": [{"x": x, "mask": mask}]})
    assert c.bit_exact is True and c.batch_count == 1
    # Two signatures giving different arrays for one name cannot share a batch.
    with pytest.raises(tflab.UsageError, match="signatures sharing an input name must share its examples"):
        tflab.save_and_reload(models.two_signatures(), tmp_path / "b",
                              {"serve": {"x": x}, "masked": {"x": x + 1, "mask": mask}})
    # A name no signature takes is a mistake, not silently ignored.
    with pytest.raises(tflab.UsageError, match=r"signature 'masked': missing \['mask'\] unknown \['msk'\]"):
        tflab.save_and_reload(models.two_signatures(), tmp_path / "c", {"x": x, "msk": mask})
    # A signature's required input missing: named, with what it takes.
    with pytest.raises(tflab.UsageError, match=r"examples does not match signature 'masked': missing \['mask'\]"):
        tflab.save_and_reload(models.two_signatures(), tmp_path / "d", {"x": x})
    with pytest.raises(tflab.UsageError, match=r"examples: no signature takes \['extra'\]"):
        tflab.save_and_reload(models.two_signatures(), tmp_path / "e", {"x": x, "mask": mask, "extra": x})
    assert not any((tmp_path / n).exists() for n in "bcde")


# ------------------------------------- which functions become signatures


def _signature_zoo():
    """tf.Modules whose signatures tf.saved_model.save(obj) chooses by its own rules."""
    import tensorflow as tf

    spec = tf.TensorSpec([None, 3], tf.float32, name="x")

    class Lin(tf.Module):  # __call__ with an input_signature: TF exports it as serving_default
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones([3, 2]))

        @tf.function(input_signature=[spec])
        def __call__(self, x):
            return x @ self.w

    class ServeAndUpdate(Lin):  # update returns nothing: not a valid signature, __call__ still is
        @tf.function(input_signature=[tf.TensorSpec([], tf.float32, name="v")])
        def update(self, v):
            self.w.assign_add(tf.fill([3, 2], v))

    class Explicit(Lin):  # _default_save_signature wins over every other function
        @tf.function(input_signature=[spec])
        def _default_save_signature(self, x):
            return {"doubled": x * 2.0}

    return {"call": Lin, "call+update": ServeAndUpdate, "default_attr": Explicit}


@pytest.mark.parametrize("name", ["call", "call+update", "default_attr"])
def test_signatures_follow_tf_saved_model_save(name, tmp_path):
    import tensorflow as tf

    import tflab

    cls = _signature_zoo()[name]
    tf.saved_model.save(cls(), str(tmp_path / "tf"))  # TF's own choice, no signatures=
    by_tf = tf.saved_model.load(str(tmp_path / "tf")).signatures
    assert set(by_tf) == {"serving_default"}
    c = tflab.save_and_reload(cls(), tmp_path / "lab", {"x": np.ones((2, 3), np.float32)})
    assert set(c.signatures) == {"serving_default"} and c.bit_exact
    assert set(c.signatures["serving_default"].outputs) == set(by_tf["serving_default"].structured_outputs)
    if name == "call+update":
        assert any(n.startswith("update: has an input_signature but tf.saved_model.save does not make it "
                                "a signature: it returns no tensor") for n in c.notes)


def test_several_signature_functions_none_is_serving_default(two_sig_check, models, tmp_path):
    """TF exports no signature when two functions qualify; tflab checks both under
    their names, says that neither is serving_default, and its docs say the same."""
    import tensorflow as tf

    import tflab

    tf.saved_model.save(models.two_signatures(), str(tmp_path / "tf"))
    assert not tf.saved_model.load(str(tmp_path / "tf")).signatures
    assert set(two_sig_check.signatures) == {"serve", "masked"}
    assert set(tf.saved_model.load(two_sig_check.path).signatures) == {"serve", "masked"}
    (note,) = [n for n in two_sig_check.notes if "can be signatures" in n]
    assert "exports none of them" in note and "none as serving_default" in note
    doc = " ".join(tflab.save_and_reload.__doc__.split())
    assert "one becomes" not in doc and "TF exports none" in doc
