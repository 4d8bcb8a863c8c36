"""The handed cases D1-D8 of ../shared/cases/diagnosis.md, for tests/test_12_diagnose.py.

Line numbers matter: the tests assert the culprit line of each function.
"""
import tensorflow as tf


def d1_list_in_loop(n):
    digits = []
    for i in tf.range(n):
        digits.append(i)  # D1 culprit
    return tf.add_n(digits)


kept = []


@tf.function
def d2_kept(x):
    kept.append(x * 2)  # D2 culprit
    return kept[0] + 1


@tf.function(autograph=False)
def d3_bool(x):
    if x > 0:  # D3 culprit
        return x
    return -x


def d4_numpy(x):
    return x.numpy() * 2  # D4 culprit


@tf.function(input_signature=[tf.TensorSpec([None, 8])])
def d5_shape(x):
    return tf.zeros([x.shape[0], 4])  # D5 culprit


@tf.function(input_signature=[tf.TensorSpec([None, 8])])
def d6_len(x):
    n = len(x)  # D6 culprit
    return x * n


def d7_branch_none(x):
    y = None
    if tf.reduce_sum(x) > 0:  # D7 culprit
        y = x * 2
    return y


def d8_branch_dtype(x):
    if tf.reduce_sum(x) > 0:  # D8 culprit
        return x
    return "neg"


def healthy(x, n):
    for _ in tf.range(n):
        x = x * 0.5
    if tf.reduce_sum(x) > 0:
        x = -x
    return x
