"""Small models for the export tests (lab steps 7–8 and cases E1–E6).

Each is a function of no arguments, so `tflab export tests/data/export/models.py:NAME`
works on it too. Weights are seeded: every run builds the same model.
"""

import numpy as np
import tensorflow as tf


class _Dense(tf.Module):
    """``x @ w + b`` with named outputs ``logits`` and ``probs`` (E1)."""

    def __init__(self, n: int, seed: int = 1):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.w = tf.Variable(rng.standard_normal((n, n)).astype(np.float32) / np.float32(np.sqrt(n)), name="w")
        self.b = tf.Variable(rng.standard_normal(n).astype(np.float32) * 0.1, name="b")
        self.serve = tf.function(self._serve, input_signature=[tf.TensorSpec([None, n], tf.float32, name="x")])

    def _serve(self, x):
        logits = tf.matmul(x, self.w) + self.b
        return {"probs": tf.nn.softmax(logits), "logits": logits}


def dense64():
    """One 64×64 Dense layer: 4096 weights, so dynamic-range quantization quantizes it (E4)."""
    return _Dense(64)


def dense16():
    """One 16×16 Dense layer: 256 weights < 1024, so dynamic-range quantization leaves it float (E4)."""
    return _Dense(16)


class _DictInputs(tf.Module):
    """A serving function taking ``{"image", "mask"}`` as named TensorSpecs (E2)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(2)
        self.w = tf.Variable(rng.standard_normal((8, 4)).astype(np.float32), name="w")
        spec = {"image": tf.TensorSpec([None, 8], tf.float32, name="image"),
                "mask": tf.TensorSpec([None, 8], tf.float32, name="mask")}
        self.serve = tf.function(self._serve, input_signature=[spec])

    def _serve(self, inputs):
        return {"score": tf.matmul(inputs["image"] * inputs["mask"], self.w)}


def dict_inputs():
    return _DictInputs()


class _StringLength(tf.Module):
    """Calls ``tf.strings.length``: StringLength is not a TFLite builtin (E5)."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        return {"length": tf.strings.length(text)}


def string_length():
    return _StringLength()


def keras_two_inputs():
    """A functional Keras 3 model with two inputs (E6)."""
    import keras

    keras.utils.set_random_seed(3)
    a = keras.Input((8,), name="a")
    b = keras.Input((4,), name="b")
    h = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([a, b]))
    out = keras.layers.Dense(3, activation="softmax", name="class")(h)
    return keras.Model([a, b], out)


class _TwoSignatures(tf.Module):
    """Signatures with different inputs: ``serve(x)`` and ``masked(x, mask)``."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(5)
        self.w = tf.Variable(rng.standard_normal((16, 8)).astype(np.float32) / 4, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.matmul(x, self.w)}

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x"),
                                  tf.TensorSpec([None, 16], tf.float32, name="mask")])
    def masked(self, x, mask):
        return {"z": tf.reduce_sum(tf.matmul(x * mask, self.w), axis=-1)}


def two_signatures():
    return _TwoSignatures()


def keras_sequential():
    """A Keras 3 Sequential model returned by a factory (``tflab export FILE.py:keras_sequential``)."""
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((20,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])


def raises():
    """A factory that fails: the CLI names this line."""
    raise RuntimeError("boom in user factory")


class _Noisy(tf.Module):
    """Adds ``tf.random.uniform`` noise: TF and LiteRT draw different numbers."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x + tf.random.uniform(tf.shape(x))}


def noisy():
    return _Noisy()


class _Warp(tf.Module):
    """Uses the project's custom op WarpSoftmax (custom_ops/)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(7)
        self.w = tf.Variable(rng.standard_normal((8, 5)).astype(np.float32), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def serve(self, x):
        from custom_ops import warp_softmax

        return {"p": warp_softmax(tf.matmul(x, self.w))}


def warp():
    return _Warp()


class _PredictAndLoss(tf.Module):
    """Two signatures sharing one Dense layer: ``predict(x)`` and a scalar ``loss(x, y)``
    (a scalar output; weights shared by two TFLite subgraphs)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(9)
        self.w = tf.Variable(rng.standard_normal((64, 32)).astype(np.float32) / 8, name="w")
        self.b = tf.Variable(rng.standard_normal(32).astype(np.float32), name="b")

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
    def predict(self, x):
        return {"logits": tf.matmul(x, self.w) + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x"),
                                  tf.TensorSpec([None, 32], tf.float32, name="y")])
    def loss(self, x, y):
        log_probs = tf.nn.log_softmax(tf.matmul(x, self.w) + self.b)
        return {"loss": -tf.reduce_mean(tf.reduce_sum(y * log_probs, axis=-1))}


def predict_and_loss():
    return _PredictAndLoss()


class _PredictAndEvaluate(_PredictAndLoss):
    """``evaluate`` uses SparseSoftmaxCrossEntropyWithLogits, not a TFLite builtin."""

    loss = None  # only predict and evaluate are signatures

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x"),
                                  tf.TensorSpec([None], tf.int32, name="label")])
    def evaluate(self, x, label):
        logits = tf.matmul(x, self.w) + self.b
        return {"loss": tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(label, logits))}


def predict_and_evaluate():
    return _PredictAndEvaluate()
