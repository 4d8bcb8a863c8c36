"""pymc-devs/pymc4#312 adapted: a NumPy dataset read by a traced log-density.

``X`` is 20000 x 50 float64 (8,000,000 bytes); ``tf.cast(X.T, tf.float32)`` converts
``X.T`` while tracing, so its bytes become a Const op of the FuncGraph (``Cast/x``).
"""

import numpy as np
import tensorflow as tf

X = np.random.RandomState(0).randn(20000, 50)
SMALL = np.arange(50, dtype=np.float64)


def logp(beta):
    xt = tf.cast(X.T, tf.float32)  # culprit
    mu = tf.linalg.matvec(xt, beta, transpose_a=True)
    return tf.reduce_sum(-0.5 * tf.square(mu))


def logp_arg(beta, data):
    xt = tf.cast(tf.transpose(data), tf.float32)
    mu = tf.linalg.matvec(xt, beta, transpose_a=True)
    return tf.reduce_sum(-0.5 * tf.square(mu))


def small_const(beta):
    return tf.reduce_sum(beta * tf.cast(SMALL, tf.float32))
