"""Cases for tests/diagnosis/test_diagnose_fixes_run.py (every fix run on a copy).

Each culprit line ends with a ``# F…`` marker; the tests find the line by it. Adapted from
 (tensorflow/tensorflow#40537); each
broken function has a healthy twin written with TF ops, which diagnoses "ok".
"""

import keras
import numpy as np
import tensorflow as tf


def my_function(x, a):
    """tensorflow/tensorflow#40537: a NumPy call on the symbolic tf.shape(x)[0], a NumPy hyper-parameter ``a``."""
    range_lim = tf.shape(x)[0]
    range_array = np.arange(range_lim)  # F1 culprit
    return x * range_array * a


def my_function_tf(x, a):
    range_lim = tf.shape(x)[0]
    range_array = tf.cast(tf.range(range_lim), x.dtype)
    return x * range_array * a


def np_sum_of_rows(x):
    return np.sum(x, axis=1) * 2.0  # F2 culprit


def np_where(x):
    return np.where(x > 0, x, 0.0)  # F3 culprit


def layer_in_fn(x):
    """The Dense built on one line, called on the next."""
    d = keras.layers.Dense(3)  # F5 culprit
    return d(x)


_DENSE = keras.layers.Dense(3)


def layer_outside(x):
    return _DENSE(x)


def shape_none(x):
    """The static dim read into a local, used on the next line."""
    n = x.shape[0]  # F6 culprit
    return tf.zeros([n * 2])


def shape_dynamic(x):
    n = tf.shape(x)[0]
    return tf.zeros([n * 2])


def bool_tensor(x):
    """An if on a float32[3] comparison."""
    if x > 0:  # F7 culprit
        return x
    return -x


def bool_scalar(x):
    if tf.reduce_all(x > 0):
        return x
    return -x


def not_elementwise(x):
    if x > 0:  # F8 culprit
        return x * tf.reduce_sum(x)
    return -x


TOTAL = tf.Variable(0.0)


def accumulate(x):
    w = tf.Variable(1.0)  # F9 culprit
    TOTAL.assign_add(tf.reduce_sum(x) * w)
    return TOTAL * 1.0
