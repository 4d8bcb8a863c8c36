"""tensorflow/tensorflow#109015, adapted (no GPU): a tf.cond branch that eager never takes calls
`tf.config()` (a module, not callable). Eager runs only the branch its predicate picks; tracing
(graph, XLA) builds both, so graph and XLA raise TypeError. For tests/modes/test_graph_errors.py."""

import keras
import tensorflow as tf


class TestModel(keras.Model):
    def call(self, x):
        return tf.cond(tf.reduce_sum(x) > 0.0,
                       lambda: x * 2.0,
                       lambda: tf.cast(x, tf.float16 if tf.config() == "GPU" else tf.float32))


class BothBranchesRun(keras.Model):
    """The healthy twin: both branches are valid, every mode runs."""

    def call(self, x):
        return tf.cond(tf.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: x * 3.0)


def plain_cond(x):
    """The same bug without Keras: no 'Exception encountered when calling' wrapper."""
    return tf.cond(tf.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: x * tf.config())


def fails_everywhere_in_graph(x):
    """A graph error outside any tf.cond branch (eager fails too, differently: not a cond case)."""
    return x * 2.0
