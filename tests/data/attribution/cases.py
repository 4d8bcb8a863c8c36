"""Functions whose low-precision runs have a known root cause (and healthy twins), for tests/attribution.

Each planted case names one cause class; the line numbers matter (the tests
read the cause's line back from this file).
"""

import keras
import tensorflow as tf


def instance_norm(x):
    """Normalizes each row; squared deviations of inputs ~300 pass float16's 65504."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-3)


def l2_normalize(x):
    """Divides by the norm: the sum of squares overflows, the output is 0 (a sibling of the above)."""
    sq = x * x
    return x / tf.sqrt(tf.reduce_sum(sq, axis=-1, keepdims=True))


def eps_norm(x):
    """An epsilon float16 rounds to 0: constant rows give 0/0."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / tf.sqrt(var + 1e-12)


def eps_norm_ok(x):
    """The same with an epsilon float16 holds."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / tf.sqrt(var + 1e-3)


def safe_ratio(x):
    """A denominator guarded by 1e-8 (0 in float16): x / (|x| + 1e-8) at x = 0."""
    return x / (tf.abs(x) + 1e-8)


def masked(scores, mask):
    """A mask constant beyond float16's range."""
    return scores - 1e30 * (1.0 - mask)


def tiny_square(x):
    """(1e-4·x)² is ~1e-8: below float16's smallest subnormal."""
    a = x * 1e-4
    p = a * a
    return tf.sqrt(p) * 100.0


def tiny_grad(x, w):
    """dL/dx = 2^-20 · 2^-8: zero in float16's backward MatMul."""
    return tf.reduce_sum(x @ w) * 2.0 ** -20


def cancelling_filter(x):
    """dL/dx = 1 + 2^-9 - 1 = 2^-9, far above bfloat16's normal range: bfloat16's backward conv adds it to 0."""
    w = tf.constant([1.0, 2.0 ** -9, -1.0], x.dtype)
    return tf.reduce_sum(tf.nn.conv2d(x, tf.reshape(w, [1, 1, 1, 3]), 1, "VALID"))


def one_minus_cos(x):
    """1 - cos(x) for small x: cos(x) rounds to 1 (one ULP), the subtraction amplifies it."""
    c = tf.cos(x)
    return (1.0 - c) / (x * x)


def near_difference(x, y):
    """Two nearly equal rounded values subtracted, then divided (a sibling of the above)."""
    a = x * 1.0001
    d = a - y
    return d / (x * 1e-4)


def sqrt_shift(x):
    """sqrt of negative inputs: NaN is the right answer."""
    return tf.sqrt(x - 0.5)


def log_shift(x):
    """log of negative inputs (a sibling)."""
    return tf.math.log(x - 0.5) + 1.0


def healthy_sqrt(x):
    return tf.sqrt(x + 1.0)


def softmax_head(x):
    return tf.nn.softmax(x)


def exp_sum(x):
    return tf.reduce_sum(tf.exp(x * 12.0))


class InstanceNorm(keras.layers.Layer):
    """Instance normalization as tensorflow/tensorflow#47156's reporter wrote it (per-channel over axis 1)."""

    def __init__(self, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, shape):
        self.gamma = self.add_weight(shape=(shape[-1],), initializer="ones")
        self.beta = self.add_weight(shape=(shape[-1],), initializer="zeros")

    def call(self, x):
        mean = tf.reduce_mean(x, axis=[1], keepdims=True)
        var = tf.reduce_mean(tf.square(x - mean), axis=[1], keepdims=True)
        return self.gamma * (x - mean) / tf.sqrt(var + self.epsilon) + self.beta


def make_instance_norm_model():
    inp = keras.Input((16, 4))
    h = keras.layers.Dense(4)(inp)
    return keras.Model(inp, InstanceNorm()(h))
