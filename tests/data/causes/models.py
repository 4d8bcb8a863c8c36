"""Models for tests/litert/test_litert_causes.py: each built in code, random weights, non-zero biases.

* `ExpNet`: ``exp(x)`` (tensorflow#120299: XNNPACK's EXP and the builtin one on NaN).
* `TwoHeads`: logits and softmax(logits) (the softmax must be matched to TF's softmax).
* `Linear`: ``x @ w + b`` with large weights of both signs, for a full-integer uint8 model whose output
  saturates on inputs outside the calibration range (tensorflow#53278).
* `LogNet`: ``log(x @ w)`` with 4×3 weights (NaN from log of negatives,
  weights too small for dynamic-range quantization).
"""

import numpy as np
import tensorflow as tf


class ExpNet(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.exp(x)}


class TwoHeads(tf.Module):
    def __init__(self, bias: bool = True, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.w1 = tf.Variable(rng.standard_normal((16, 32)).astype(np.float32) * 0.3)
        self.b1 = tf.Variable((rng.standard_normal(32) * 0.5 + 0.3).astype(np.float32) * bias)
        self.w2 = tf.Variable(rng.standard_normal((32, 5)).astype(np.float32) * 0.3)
        self.b2 = tf.Variable((rng.standard_normal(5) * 0.5 + 0.5).astype(np.float32) * bias)

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def serve(self, x):
        h = tf.nn.relu(x @ self.w1 + self.b1)
        logits = h @ self.w2 + self.b2
        return {"logits": logits, "p": tf.nn.softmax(logits)}


class Linear(tf.Module):
    def __init__(self, seed: int = 2):
        rng = np.random.default_rng(seed)
        w = np.abs(rng.standard_normal((16, 6))).astype(np.float32) + 0.5
        w[:, 1::2] *= -1.0  # columns of both signs: all-ones inputs push outputs past both ends
        self.w = tf.Variable(w)
        self.b = tf.Variable((rng.standard_normal(6) * 0.5 + 0.25).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x @ self.w + self.b}


class LogNet(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.ones([4, 3]) * 0.5)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.math.log(x @ self.w)}


model = LogNet()
