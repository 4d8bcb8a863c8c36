"""Functions whose diagnose fix must give eager's own values. Culprit lines end in `# V…` markers."""

import keras
import tensorflow as tf


# --- branch dtypes: the fix must keep every branch's values ---------------------------------

def branch_dtype2(x):
    if tf.reduce_sum(x) > 100:  # V1
        y = tf.constant(1)
    else:
        y = tf.constant(0.5)
    return y


def branch_int64_float(x):
    if tf.reduce_sum(x) > 0:  # V2
        y = tf.constant(3, tf.int64)
    else:
        y = tf.reduce_sum(x) * 0.25
    return y


def branch_bool_int(x):
    if tf.reduce_sum(x) > 0:  # V3
        y = x[0] > 0
    else:
        y = tf.constant(2)
    return y


def branch_same_dtype(x):  # healthy twin: one dtype in both branches
    if tf.reduce_sum(x) > 100:
        y = tf.constant(1.0)
    else:
        y = tf.constant(0.5)
    return y


def while_dtype(x):
    s = tf.constant(0)  # V4
    while s < 3:
        s = tf.cast(s, tf.float32) + 0.75
    return s


# --- state rebound to a tensor inside the function (tensorflow/tensorflow#30768) ------------

v = tf.Variable(1.0)


@tf.function
def accumulate(x):
    global v
    v = v + x  # V5
    return v


w = tf.Variable(2.0)


@tf.function
def scale(x):
    global w
    w = w * x  # V6
    return w


def make_countdown():
    c = tf.Variable(5.0)

    @tf.function
    def countdown(x):
        nonlocal c
        c = c - x  # V7
        return c

    return countdown


class Total(tf.Module):
    def __init__(self):
        super().__init__()
        self.total = tf.Variable(10.0)

    @tf.function
    def add(self, x):
        self.total = self.total + x  # V8
        return self.total


fresh = tf.Variable(1.0)


@tf.function
def accumulate_fresh(x):
    global fresh
    fresh = fresh + x  # V12
    return fresh


probed = tf.Variable(0.0)


@tf.function
def accumulate_probed(x):
    global probed
    probed = probed + x  # V13
    return probed


guarded = None


@tf.function
def create_once(x):  # healthy twin: the global is rebound once, from None to a tf.Variable
    global guarded
    if guarded is None:
        guarded = tf.Variable(2.0)
    return guarded * x


u = tf.Variable(1.0)


@tf.function
def accumulate_healthy(x):  # healthy twin: assigns to the tf.Variable
    u.assign_add(x)
    return u.read_value()


# --- layers and variables built in a Python loop --------------------------------------------

def keras_in_loop(x):
    for i in range(2):
        x = keras.layers.Dense(4)(x)  # V9
    return x


def keras_enumerate(x):
    for k, units in enumerate([3, 4]):
        x = keras.layers.Dense(units)(x)  # V10
    return x


def variable_in_loop(x):
    for step in range(3):
        scale_w = tf.Variable(tf.ones([4]) * (step + 1.0))  # V11
        x = x * scale_w
    return x


LAYERS = [keras.layers.Dense(4) for _ in range(2)]


def layers_built_outside(x):  # healthy twin: the layers exist before the trace
    for i in range(2):
        x = LAYERS[i](x)
    return x
