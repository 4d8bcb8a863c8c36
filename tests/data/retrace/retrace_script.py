"""Fixture for `tflab retrace`: a few classic retraces, counts known in advance.

step: 3 calls, batch sizes 4, 4, 2 -> 2 traces (x: shape (4, 3) -> (2, 3)).
scale: n = 1, 2 -> 2 traces (n: 1 -> 2).
make_var: creates a tf.Variable on its first call -> 2 traces, the second TF's own.
With the argument "fail", the script raises ValueError after the traces.
With "quiet", it sets the tensorflow logger to ERROR after `step`, as many
scripts do, which hides the later trace records.
"""

import sys

import tensorflow as tf


@tf.function
def step(x):
    return tf.reduce_sum(x, axis=1)


@tf.function
def scale(x, n):
    return x * n


_v = None


@tf.function
def make_var(x):
    global _v
    if _v is None:
        _v = tf.Variable(2.0)
    return x * _v


def main(argv):
    for b in (4, 4, 2):
        step(tf.ones([b, 3]))
    if "quiet" in argv:
        tf.get_logger().setLevel("ERROR")
    scale(tf.ones([2]), 1)
    scale(tf.ones([2]), 2)
    make_var(tf.ones([2]))
    print("script done")
    if "fail" in argv:
        raise ValueError("fixture asked to fail")


if __name__ == "__main__":
    main(sys.argv[1:])
