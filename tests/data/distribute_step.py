"""A user's own replica step for `tflab distribute FILE.py:STEP` (tests/test_11_distribute_user_step.py).

``w`` is created at import; tflab imports this file inside strategy.scope(), so
it becomes one MirroredVariable with a component per replica.
"""

import tensorflow as tf

w = tf.Variable(tf.ones([4, 1]), name="w")


def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)[:, 0] - y))
    grad = tf.distribute.get_replica_context().all_reduce("SUM", tape.gradient(loss, w))
    w.assign_sub(0.01 * grad)
    return loss


def broken_step(x, y):
    return x.numpy()  # fails while tracing: a symbolic tensor has no value


NOT_A_FUNCTION = 3
