"""A user's own replica step for `tflab distribute FILE.py:STEP` (tests/distribute/test_distribute_user_step.py).

``w`` is created at import; tflab imports this file inside strategy.scope(), so
it becomes one MirroredVariable with a component per replica. The step is the
lab's own (`tflab.distribute.make_replica_step`: a squared loss, its gradient
all-reduced across replicas, one SGD step on ``w``), so the user path and the
lab measure the same step.
"""

import tensorflow as tf

from tflab.distribute import make_replica_step

w = tf.Variable(tf.ones([4, 1]), name="w")

replica_step = make_replica_step(w)


def broken_step(x, y):
    return x.numpy()  # fails while tracing: a symbolic tensor has no value


NOT_A_FUNCTION = 3
