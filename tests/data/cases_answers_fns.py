"""Functions for tests/diagnosis/test_diagnose_user_cases.py."""

import tensorflow as tf


def stringy(x):
    """A string op, which XLA cannot compile; eager and graph run it."""
    return tf.strings.to_number(tf.strings.as_string(x))


def scaled_loss(x):
    """tensorflow/tensorflow#38357: a loss multiplied by a large constant: 300 * 1000 = 3e5 > float16's max 65504."""
    return tf.reduce_sum(x * 1000.0)


class Noisy(tf.Module):
    """A random op in the signature: every call draws new values."""

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x + tf.random.uniform(tf.shape(x))}


class Counter(tf.Module):
    """A stateful model; each call adds 1 to ``count``."""

    def __init__(self):
        super().__init__()
        self.count = tf.Variable(0.0, name="count")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        self.count.assign_add(1.0)
        return {"y": x * 2.0}


class Fixed(tf.Module):
    """tensorflow/tensorflow#36461: __call__ without an input_signature, traced at float32[3,4]."""

    @tf.function
    def __call__(self, x):
        return {"y": x * 2.0}


class Serve(tf.Module):
    """__call__ has an input_signature, so `tflab inspect FILE.py:serve` needs no --arg."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.ones([6, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32), tf.TensorSpec([None], tf.int32)])
    def __call__(self, x, idx):
        return tf.gather(tf.matmul(x, self.w), idx)


serve = Serve()


def _mlp():
    import keras

    inputs = keras.Input((16,))
    return keras.Model(inputs, keras.layers.Dense(3)(inputs))


mlp = _mlp()


def tan_cosh(x):
    """tensorflow/tensorflow#58752 (x passed in): tan(cosh(cosh(x))) at x = 3.3 is tan of 3.9e5, where float32's
    ULP (0.03) is a large part of tan's period pi: ill-conditioned."""
    return tf.tan(tf.cosh(tf.cosh(x)))


def off_by_one_in_graph(x):
    """A real difference, not conditioning: traced modes add 1 (Python reads executing_eagerly
    at trace time)."""
    return x * 2.0 + (0.0 if tf.executing_eagerly() else 1.0)
