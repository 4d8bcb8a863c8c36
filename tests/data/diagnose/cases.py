"""The handed cases D1-D8 of ../shared/cases/diagnosis.md, for tests/diagnosis/test_diagnose.py.

Line numbers matter: the tests assert the culprit line of each function.
"""
import keras
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


# Other instances of each kind (not the handed snippets).

def list_in_while(x):
    vals = []
    i = tf.constant(0)
    while i < tf.shape(x)[0]:
        vals.append(x[i] * 2.0)  # culprit: list append in a While body
        i += 1
    return tf.stack(vals)


def cache_in_if(x, cache):
    if tf.reduce_sum(x) > 0:
        cache.append(x + 1.0)  # culprit: list store in an If branch
    return cache[0]


class Holder:
    def __init__(self):
        self.last = None

    @tf.function
    def step(self, x):
        if self.last is None:
            self.last = x * 3.0  # culprit: attribute keeps a tensor across traces
        return self.last + x


@tf.autograph.experimental.do_not_convert
def _positive(x):
    if tf.reduce_sum(x) > 0:  # culprit: unconverted helper
        return x
    return -x


def calls_unconverted(x):
    return _positive(x) * 2.0


def while_bool_off(x):
    while x > 1.0:  # culprit: while with autograph=False
        x = x / 2.0
    return x


def unpack(x):
    a, b = x  # culprit: unpacking a tensor
    return a + b


def for_over_tensor_off(x):
    total = 0.0
    for row in x:  # culprit: for with autograph=False
        total += row
    return total


def dict_comp(x):
    return {i: v for i, v in enumerate(x)}  # culprit: comprehension


def np_asarray(x):
    import numpy as np
    return tf.constant(np.asarray(x) + 1)  # culprit: np.asarray


def range_of_shape(x):
    total = tf.zeros([])
    for i in range(x.shape[1]):  # culprit: dim 1 is None
        total += x[0, i]
    return total


def reshape_dim(x):
    return tf.reshape(x, [x.get_shape()[0], -1])  # culprit: get_shape()[0] is None


def size_times(x):
    s = tf.size(x)  # culprit: int32 from tf.size
    return x / s


def loop_dtype(n):
    acc = tf.constant(0)  # culprit: int32 init
    for i in tf.range(n):
        acc = tf.cast(i, tf.float32) * 0.5
    return acc


def loop_int_init(n):
    s = 0  # culprit: Python int init makes an int32 loop variable
    for _ in tf.range(n):
        s = s + 0.5
    return s


def loop_shape(n):
    v = tf.zeros([1])
    for _ in tf.range(n):  # culprit: v grows
        v = tf.concat([v, [1.0]], 0)
    return v


def return_in_while(x):
    i = tf.constant(0)
    while i < 10:
        if tf.reduce_sum(x) > tf.cast(i, tf.float32):
            return x  # culprit: return in While
        i += 1
    return -x


def else_branch_only(x):
    if tf.reduce_max(x) > 1.0:  # culprit: z unset in the main branch
        pass
    else:
        z = x + 1.0
    return z


def branch_int_float(x):
    if tf.reduce_sum(x) > 0:  # culprit: int32 and float32 branches
        r = tf.constant(1)
    else:
        r = tf.constant(2.0)
    return r


def strange_error(x):
    return tf.reshape(x, [7, 5])  # culprit: not a tflab rule


def plain_version_of_d3(x):
    if x > 0:  # converted by AutoGraph when autograph is on: an If op
        return x
    return -x


class NumpyLayer(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        scale = float(tf.reduce_max(x).numpy())  # culprit: .numpy() in a layer's call
        return x * self.w * scale


class Accumulator:
    def total(self, n):
        parts = []
        i = tf.constant(0)
        while i < n:
            parts.append(tf.cast(i, tf.float32))  # culprit: bound method, list in While
            i += 1
        return tf.add_n(parts)


class DictServe(tf.Module):
    """Case D9: a dict input; the SignatureDef names its leaves inputs, inputs_1."""

    @tf.function(input_signature=[{"foo": tf.TensorSpec([None], tf.int32),
                                   "bar": tf.TensorSpec([None], tf.float32)}])
    def serve(self, inputs):
        return {"foo2": inputs["foo"] * 2, "bar2": inputs["bar"] + 1.0}


class NamedDictServe(tf.Module):
    """D9's fix: each TensorSpec keeps its key as the input name."""

    @tf.function(input_signature=[{"foo": tf.TensorSpec([None], tf.int32, name="foo"),
                                   "bar": tf.TensorSpec([None], tf.float32, name="bar")}])
    def serve(self, inputs):
        return {"foo2": inputs["foo"] * 2, "bar2": inputs["bar"] + 1.0}


def gather_out_of_range(x):
    return tf.gather(x, 10)  # culprit: index 10 of a length-3 vector, found at run time
