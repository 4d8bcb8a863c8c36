"""Cases for the diagnose rules (tensorflow/tensorflow#26812, tensorflow/tensorflow#33308).

Each culprit line ends with a ``# R…`` marker; the tests find the line by it.
"""

import numpy as np
import tensorflow as tf
import keras


def var_each_call(x):
    v = tf.Variable(1.0)  # R1 culprit
    return x * v


class Scale(tf.Module):
    """tensorflow/tensorflow#26812: a tf.Variable declared in a tf.function method, on the first call."""

    def __init__(self):
        super().__init__()
        self.b = None

    @tf.function
    def __call__(self, x):
        b = tf.Variable(12.)  # R2 culprit
        return x * b


def var_from_arg(x):
    v = tf.Variable(tf.zeros_like(x))  # R3 culprit
    return x + v


def dense_inside(x):
    return keras.layers.Dense(3)(x)  # R4 culprit


def collect_dict(x):
    out = {}
    for i in range(3):
        out[x] = x * float(i)  # R5 culprit
    return out[x]


def in_set(x):
    seen = {x}  # R6 culprit
    return x * float(len(seen))


def np_sum(x):
    return np.sum(x) + 1.0  # R7 culprit


def np_mean_axis(x):
    return np.mean(x, axis=0) * 2.0  # R8 culprit


def np_polyfit(x):
    return np.polyfit(x, x, 1)  # R9 culprit


WEIGHTS = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], dtype=np.float32)


def bands_static(bands):
    """tensorflow/tensorflow#33308: ``bands.shape[1]`` is static; WEIGHTS is NumPy, indexed by the loop index."""
    return tf.stack([bands[:, b] * WEIGHTS[b, 1] for b in tf.range(bands.shape[1])])  # R10 culprit


def bands_tensorarray(bands):
    """tflab's old fix for R10 (a for over tf.range writing a TensorArray): fails on this code."""
    ta = tf.TensorArray(tf.float32, size=bands.shape[1])
    for b in tf.range(bands.shape[1]):
        ta = ta.write(b, bands[:, b] * WEIGHTS[b, 1])
    return ta.stack()


def bands_dynamic(bands):
    """The bound is None here (input_signature [4, None]): range() cannot help."""
    return tf.stack([bands[:, b] for b in tf.range(tf.shape(bands)[1])])  # R11 culprit


class Gate(tf.Module):
    """A bound tf.function method; ``Gate().run`` leaves no reference to the instance."""

    @tf.function
    def run(self, x):
        if tf.reduce_sum(x) > 0:  # R12 tensor if
            x = -x
        return x

    @tf.function
    def broken(self, x):
        v = tf.Variable(2.0)  # R13 culprit
        return x * v
