"""Models for the NaN-origin tests, each built in code with seeded weights.

Each is a function of no arguments, so `tflab export tests/data/nan/models.py:NAME` works on it too.
"""

import numpy as np
import tensorflow as tf


def _keras_mlp():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(96, activation="relu"),
                             keras.layers.Dense(10)])


class KerasInModule(tf.Module):
    """The issue-26 snippet: a Keras 3 model wrapped in a tf.Module for a clean signature."""

    def __init__(self, track_variables: bool = False):
        super().__init__()
        self.m = _keras_mlp()
        if track_variables:
            # The fix: the backing tf.Variables, which tf.Module lists (keras.Variable is not one).
            self.tf_vars = [v.value for v in self.m.weights]

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
    def serve(self, x):
        return {"y": self.m(x, training=False)}


def keras_in_module():
    """The model as a user reported it: converts to VAR_HANDLE×4 / READ_VARIABLE×4 with no initializer."""
    return KerasInModule()


def keras_in_module_tracked():
    """The same model, its tf.Variables tracked on the module: converts to plain weights."""
    return KerasInModule(track_variables=True)


def keras_mlp():
    """The same Keras model, exported by tflab as a Keras model (Keras' own export path)."""
    return _keras_mlp()


class _Ratio(tf.Module):
    """``x / y`` (or a guarded division): a zero in ``y`` makes inf in TF and in LiteRT alike."""

    def __init__(self, guarded: bool):
        super().__init__()
        self.guarded = guarded

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x"),
                                  tf.TensorSpec([None, 8], tf.float32, name="y")])
    def serve(self, x, y):
        return {"r": tf.math.divide_no_nan(x, y) if self.guarded else x / y}


def ratio():
    return _Ratio(False)


def ratio_guarded():
    return _Ratio(True)


class _LogModel(tf.Module):
    """``log(relu(x))`` (or with an epsilon): a non-positive x makes -inf."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def serve(self, x):
        return {"l": tf.math.log(tf.nn.relu(x) + self.eps)}


def log_relu():
    return _LogModel(0.0)


def log_relu_eps():
    return _LogModel(1e-6)


class _Scaled(tf.Module):
    """``relu(x @ w) * c`` with a weight beyond float16's 65504, or the same product with the
    factor moved out of the weight (relu commutes with a positive scale)."""

    def __init__(self, big: bool):
        super().__init__()
        rng = np.random.default_rng(1)
        w = rng.standard_normal((32, 32)).astype(np.float32)
        # 1e5 · N(0, 1) > 65504 for most entries: as float16 those weights are inf.
        self.w = tf.Variable(w * np.float32(1e5) if big else w, name="w")
        self.c = np.float32(1e-6) if big else np.float32(1e-1)

    @tf.function(input_signature=[tf.TensorSpec([None, 32], tf.float32, name="x")])
    def serve(self, x):
        return {"z": tf.nn.relu(tf.matmul(x, self.w)) * self.c}


def big_weight():
    return _Scaled(True)


def big_weight_folded():
    return _Scaled(False)


class _Half(tf.Module):
    """``cast(x · k, float16)``: past 65504 the cast gives inf, in TF and in LiteRT alike."""

    def __init__(self, k: float):
        super().__init__()
        self.k = np.float32(k)

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def serve(self, x):
        return {"h": tf.cast(tf.cast(x * self.k, tf.float16), tf.float32)}


def half_overflow():
    return _Half(1e5)


def half_scaled():
    return _Half(1e3)


class Counter(tf.Module):
    """A variable the signature writes: the converter keeps it with an initializer subgraph."""

    def __init__(self):
        super().__init__()
        self.total = tf.Variable(tf.zeros([4]), name="total")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        self.total.assign_add(tf.reduce_sum(x, axis=0))
        return {"t": self.total + 0.0}


class _Weighted(tf.Module):
    """``x @ w`` with one weight NaN (a corrupt checkpoint), or the clean weight."""

    def __init__(self, corrupt: bool):
        super().__init__()
        w = np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32)
        if corrupt:
            w[3, 5] = np.nan
        self.w = tf.Variable(w, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.matmul(x, self.w)}


def nan_weight():
    return _Weighted(True)


def clean_weight():
    return _Weighted(False)


class Exp(tf.Module):
    """``exp(x)``: past x ≈ 88.7 float32 overflows, a cause tflab has no name for."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"e": tf.exp(x)}
