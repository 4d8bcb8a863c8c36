"""Functions the CLI tests point `tflab inspect` at, as a user would."""

import tensorflow as tf

W = tf.Variable(tf.ones([8, 4]), name="w")


def dense(x, n=1):
    y = tf.nn.relu(x @ W)
    for _ in range(n):  # a Python loop: unrolled n times at trace time
        y = y * 2.0
    return y


@tf.function
def branchy(x):
    if tf.reduce_sum(x) > 0:
        return x * 2.0
    return x - 1.0


def broken(x):
    return x @ tf.ones([3, 3])  # shape mismatch for an (N, 8) input: raises while tracing


NOT_A_FUNCTION = 42
