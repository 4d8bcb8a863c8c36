"""The masked attention of huggingface/transformers#6915 (TF DistilBert), adapted to Keras 3.

``scores - 1e30 * (1.0 - mask)`` under mixed_float16: the Python constant 1e30 becomes
inf in float16 (max 65504), and inf * 0 = NaN where the mask keeps a position.
`healthy_attention` masks with 1e4, which float16 holds. For tests/nonfinite/test_first_nonfinite.py.
"""

import keras
import numpy as np
import tensorflow as tf

SEQ, DIM = 6, 8


class MaskedAttention(keras.layers.Layer):
    def __init__(self, big=1e30, **kw):
        super().__init__(**kw)
        self.big = big

    def build(self, shape):
        self.q = keras.layers.Dense(DIM)
        self.k = keras.layers.Dense(DIM)
        self.v = keras.layers.Dense(DIM)

    def call(self, x, mask):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = tf.matmul(q, k, transpose_b=True) / 4.0
        mask = tf.cast(mask[:, None, :], scores.dtype)
        scores = scores - 1e30 * (1.0 - mask)
        return tf.matmul(tf.nn.softmax(scores, axis=-1), v)


class HealthyAttention(MaskedAttention):
    def call(self, x, mask):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = tf.matmul(q, k, transpose_b=True) / 4.0
        mask = tf.cast(mask[:, None, :], scores.dtype)
        scores = scores - 1e4 * (1.0 - mask)
        return tf.matmul(tf.nn.softmax(scores, axis=-1), v)


def _model(layer_cls):
    x = keras.Input((SEQ, DIM))
    m = keras.Input((SEQ,), dtype="int32")
    return keras.Model([x, m], layer_cls()(x, m))


def attention():
    """The reporter's masking (the factory compare_precisions builds per policy)."""
    return _model(MaskedAttention)


def healthy_attention():
    return _model(HealthyAttention)


def inputs():
    x = np.random.RandomState(0).randn(2, SEQ, DIM).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], np.int32)
    return x, mask


def overflow_by_arithmetic(x):
    """x * 1000 with |x| ~ 100: a Mul whose output passes 65504 from finite inputs."""
    return (x * 0.0 + 100.0) * 1000.0


def square_loss(x):
    """A loss computed inside the function: square(300) = 9e4 > 65504 in float16."""
    return tf.reduce_sum(tf.square(x * 0.0 + 300.0))
