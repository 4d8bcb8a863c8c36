"""Functions whose if/for/while statements test_autograph_diff.py classifies.

Line numbers matter to the tests only through `ast` (they look statements up by
their source text), so editing this file keeps the tests valid.
"""

import tensorflow as tf


def mixed(x, n):
    if tf.reduce_sum(x) > 0:          # tensor condition -> If op
        x = x * 2.0
    else:
        x = x - 1.0
    for i in range(n):                # Python range -> unrolled n times
        x = x + 1.0
    for i in tf.range(3):             # tf.range -> While op
        x = x * 1.5
        if i > 1:                     # tensor condition inside the While body
            x = x + 0.5
    if n > 2:                         # Python condition -> decided at trace time
        x = x / 2.0
    return x


def countdown(x, n):
    while n > 0:                      # Python condition -> unrolled
        x = tf.sin(x) + tf.cos(x)
        n -= 1
    k = tf.constant(0)
    while k < tf.shape(x)[0]:         # tensor condition -> While op
        x = x + 1.0
        k += 1
    return x


def nested(x):
    for i in range(2):                # outer Python loop: 2 copies
        for j in range(3):            # inner: 3 per outer copy, 6 in the graph
            x = x + float(j)
        x = tf.nn.relu(x)
    return x


def uneven(x):
    for i in range(4):                # iterations trace different ops
        if i == 0:
            x = tf.exp(x)
        x = x * 0.5
    return x


def clip_step(grads, threshold):
    norm = tf.linalg.global_norm(grads)
    if norm > threshold:              # clip only when the global norm is too big
        grads = [g * (threshold / norm) for g in grads]
    total = tf.constant(0.0)
    for g in grads:                   # Python list -> one copy per gradient
        total += tf.reduce_sum(g)
    return grads, total


# Two lambdas on one line: AutoGraph cannot tell their sources apart, so it
# warns "could not transform … will run it as-is" (or raises in strict mode).
double, inc = (lambda v: v * 2.0), (lambda v: v + 1.0)


def calls_lambdas(x):
    return double(x) + inc(x)


class Gate:
    """A callable object: autograph_diff converts its __call__."""

    def __call__(self, x):
        if tf.reduce_max(x) > 1.0:        # tensor condition -> If op
            x = x / tf.reduce_max(x)
        return x


def index_if(x):
    for i in range(4):                # Python if on the loop index: 4 body runs
        if i % 2 == 0:
            x = x + 1.0
        x = x * 3.0
    return x


def every_third(x):
    for i in range(6):                # only iterations 0 and 3 make ops: still 6 runs
        if i % 3 == 0:
            x = x + 1.0
    return x


def breaks_at_4(x):
    for i in range(10):               # break in iteration 4: 5 body runs, 4 adds
        if i == 4:
            break
        x = x + 1.0
    return x


def elif_chain(x, k):
    if k == 0:                        # Python condition
        x = x + 1.0
    elif tf.reduce_sum(x) > 0:        # reached only when k != 0: then an If op
        x = x - 1.0
    return x


class Gated(tf.keras.layers.Layer):
    """A Keras layer whose weight exists only after build()."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 2))

    def call(self, x, training=False):
        if training:                  # Python bool -> decided at trace time
            x = x * 0.5
        y = x @ self.w
        if tf.reduce_sum(y) > 0:      # tensor condition -> If op
            y = tf.nn.relu(y)
        return y


@tf.function(input_signature=[tf.TensorSpec([None, 3])])
def sig_loop(x):
    for i in range(2):                # unrolled twice whatever the batch size
        x = x * 2.0
    return x


class Stepper(tf.Module):
    """tf.function methods reached through an instance."""

    def __init__(self):
        super().__init__()
        self.scale = tf.Variable(2.0)

    @tf.function
    def run(self, x):
        for i in tf.range(2):         # tensor loop -> While op
            x = x + 1.0
        return x

    @tf.function
    def __call__(self, x):
        for i in range(3):            # Python loop -> unrolled 3 times
            x = x * self.scale
        return x


class TracedCallLayer(tf.keras.layers.Layer):
    """A Keras layer whose own call is a tf.function."""

    @tf.function
    def call(self, x):
        if tf.reduce_sum(x) > 0:      # tensor condition -> If op
            x = -x
        return x
