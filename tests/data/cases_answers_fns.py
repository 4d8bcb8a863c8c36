"""Functions for tests/test_cases_answers.py (issue 22 items 4 and 5)."""

import tensorflow as tf


def stringy(x):
    """W4: a string op, which XLA cannot compile; eager and graph run it."""
    return tf.strings.to_number(tf.strings.as_string(x))


def scaled_loss(x):
    """#38357: a loss multiplied by a large constant: 300 * 1000 = 3e5 > float16's max 65504."""
    return tf.reduce_sum(x * 1000.0)
