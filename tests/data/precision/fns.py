"""Functions for tests/precision/test_precision.py and the `tflab precision` CLI tests."""

import keras
import tensorflow as tf


def issue_loss(x, w):
    """The issue's example: loss = reduce_sum(x @ w) * 2^-20."""
    return tf.reduce_sum(x @ w) * 2.0 ** -20


def tiny(x):
    """dL/dx = 2^-12 * 2^-14 = 2^-26 for every element, whatever x is: below float16's 2^-24
    (each constant alone is a float16 normal)."""
    return tf.reduce_sum(x * 2.0 ** -12) * 2.0 ** -14


def overflows(x):
    """100 * 1000 per element, whatever x is: 1e5 > float16's max 65504."""
    return (x * 0.0 + 100.0) * 1000.0


def mul(a, b):
    return a * b


def mlp():
    """A well-scaled MLP factory: Glorot-initialized Dense layers on unit-variance inputs."""
    return keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(64, activation="relu"), keras.layers.Dense(8)])


def factory_that_fails():
    """Raises when built under a mixed policy: the global policy must still be restored."""
    if keras.mixed_precision.dtype_policy().name != "float32":
        raise RuntimeError("no mixed precision here")
    return mlp()


def plain_variable_fn(x):
    """A float32 tf.Variable used with a cast argument: fails under mixed policies."""
    return tf.reduce_sum(x @ W)


W = tf.Variable(tf.ones([4, 2]))


def tf_keras_mlp():
    """A tf_keras factory that imports tf_keras itself (set_global_policy must still apply)."""
    import tf_keras

    return tf_keras.Sequential([tf_keras.Input((32,)), tf_keras.layers.Dense(64, activation="relu"),
                                tf_keras.layers.Dense(8)])
