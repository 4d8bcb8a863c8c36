"""Small functions for test_compare_modes.py and the ``tflab compare`` CLI tests."""

import numpy as np
import tensorflow as tf

# A seeded variable so gradients with respect to trainable variables are measured.
W = tf.Variable(np.random.default_rng(1).standard_normal((128, 32)).astype(np.float32), name="w")
FROZEN = tf.Variable(np.ones((32,), np.float32), trainable=False, name="frozen")


def dense_tanh(x):
    return tf.tanh(x @ W) * FROZEN


def softmax_matmul(x):
    return tf.nn.softmax(x @ tf.transpose(x))


def relu_chain(x):
    # matmul, then three elementwise ops XLA can fuse into one kLoop fusion
    return tf.nn.relu(x @ tf.transpose(x)) * 2.0 + 1.0


def with_py_function(x):
    y = tf.py_function(lambda a: a * 2.0, [x], tf.float32)
    y.set_shape(x.shape)
    return y + 1.0


def with_string_op(x):
    return tf.cast(tf.strings.length(tf.strings.as_string(x)), tf.float32) + x


def noisy(x):
    # unseeded random op: eager, graph and XLA draw different numbers
    return x + tf.random.uniform(tf.shape(x))


@tf.custom_gradient
def clip_grad(x):
    """Identity forward; the gradient flowing back is clipped to [-1, 1]."""
    def grad(upstream):
        return tf.clip_by_value(upstream, -1.0, 1.0)
    return tf.identity(x), grad


def scaled_clip(x):
    # upstream gradient of 5*… is 5 per element: clipped to 1 by clip_grad
    return 5.0 * clip_grad(x)


def two_args(x, scale):
    return x * scale


W16 = tf.Variable(np.random.default_rng(2).standard_normal((16, 16)).astype(np.float32), name="w16")


def residual_sum(x):
    # three terms added: Grappler's arithmetic optimizer regroups the add tree
    h = x @ W16
    return h * tf.sigmoid(h) + x + h


def hard_swish(x):
    # MobileNetV3's activation: x * relu6(x + 3) / 6
    h = x @ W16
    return h * tf.nn.relu6(h + 3.0) / 6.0


def with_custom_op(x):
    # the project's WarpSoftmax op: CPU/GPU kernels only, no XLA kernel
    from custom_ops.python.ops import warp_softmax_ops

    return warp_softmax_ops.warp_softmax(x)


# ---- state and odd outputs (user-test findings)

COUNTER = tf.Variable(1.0, name="counter")
MOVING = tf.Variable(0.0, trainable=False, name="moving")


def counter(x):
    # each call changes the state the next call reads
    COUNTER.assign_add(1.0)
    return x * COUNTER


def moving_mean(x):
    # a non-trainable variable updated like BatchNorm's moving mean: the tape
    # does not watch it, the traced FuncGraph captures it
    MOVING.assign(0.5 * MOVING + 0.5 * tf.reduce_mean(x))
    return x - MOVING


def graph_only_bug(x):
    if tf.executing_eagerly():
        return x * 2.0
    raise ValueError("graph-only bug")


def constant_three(x):
    return 3.0  # a Python float, not a tensor


def named_outputs(x):
    return {"sum": tf.reduce_sum(x), "double": x * 2.0}


def with_seed(x, seed):
    return x * seed


@tf.function(input_signature=[tf.TensorSpec([None, 3])])
def sig_rows(x):
    return tf.reduce_sum(x * x, axis=1)


@tf.function(input_signature=[tf.TensorSpec([2, 3])])
def sig_fixed(x):
    return tf.reduce_sum(x * x, axis=1)


class Scaler:
    def scale(self, x):
        return x * 2.0


# Random streams.
def stateless_noise(x):
    # the same numbers eager and as a graph; XLA lowers the RNG itself
    return x + tf.random.stateless_uniform([8], seed=[1, 2])


def noise_as_argument(x, noise):
    # the fix the report suggests: the noise comes in, every mode adds the same numbers
    return x + noise

