"""A gather's gradient (an Embedding's) is IndexedSlices: compared dense in every mode.

It was fetched as an object and every mode "differed from eager (non-float values)", a false finding
on any model with an Embedding, followed by a bisection of every Grappler optimizer.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tflab import compare_modes


def _reference_grad(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """d/dE sum(sin(E[ids]) * 3): 3 cos(E[i]) added once per occurrence of row i (float64)."""
    g = np.zeros_like(table, dtype=np.float64)
    for i in ids.reshape(-1):
        g[i] += 3.0 * np.cos(table[i].astype(np.float64))
    return g


def test_gather_gradient_is_compared_dense_and_graph_has_no_false_finding():
    table = tf.Variable(np.random.RandomState(0).randn(4, 8).astype(np.float32))
    ids = np.array([[0, 1, 1], [3, 0, 2]], np.int32)  # row 0 and 1 gathered twice: summed

    def f(ids):
        return tf.reduce_sum(tf.sin(tf.gather(table, ids)) * 3.0, axis=-1)

    c = compare_modes(f, tf.constant(ids), repeats=1, hlo=False, attribute=False, modes=("graph",))
    (name,) = [n for n in c.gradient_names if n.startswith("var:")]
    g = np.asarray(c.modes["eager"].gradients[name])
    assert g.dtype == np.float32 and g.shape == (4, 8)
    np.testing.assert_allclose(g, _reference_grad(table.numpy(), ids), rtol=1e-5, atol=1e-6)
    assert not [f for f in c.findings if "non-float" in str(f)], c.to_text()


def test_dense_gradient_twin_is_unchanged():
    w = tf.Variable(np.random.RandomState(1).randn(8, 4).astype(np.float32))

    def f(x):
        return tf.reduce_sum(tf.sin(x @ w))

    c = compare_modes(f, tf.ones([2, 8]), repeats=1, hlo=False, attribute=False, modes=("graph",))
    (name,) = [n for n in c.gradient_names if n.startswith("var:")]
    assert np.asarray(c.modes["eager"].gradients[name]).shape == (8, 4) and not c.findings
