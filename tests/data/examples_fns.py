"""Functions whose integer input indexes a table: tflab's random ints (uniform in [0, 10)) break the
small tables, which real inputs (--examples) do not; the large table is the healthy twin."""

import keras
import tensorflow as tf

small = keras.layers.Embedding(2, 4)      # 2 rows: ids 2..9 are out of range
large = keras.layers.Embedding(100, 4)    # 100 rows: every id in [0, 10) is fine
table = tf.reshape(tf.range(12, dtype=tf.float32), [3, 4])  # 3 rows


def emb(ids):
    return small(ids)


def gather_rows(idx):
    # A different op (GatherNd) and a different TF message ("does not index into param shape").
    return tf.gather_nd(table, idx[..., None])


def healthy(ids):
    return large(ids)


def scaled(x, factor=3.0):
    return x * factor


def pair(a, b):
    return a + b
