"""The float variant's tensors against TF's by name (`tflab.litert.float_tensors`) on activations the
converter decomposes or the frozen graph cannot fetch.

A tf_keras model with swish and softplus activations: the converter writes a Softplus as EXP, ADD and
LOG named ``Softplus``, ``Softplus1`` and ``Softplus2`` (its name uniquing), and the first, an EXP,
was compared with TF's Softplus (|Δ| 1.8e5); the frozen graph's Session could not fetch the swish's
Sigmoid, and the whole comparison was given up with the note "Graph execution error:". Now the last
op of a decomposition carries TF's value, a tensor the Session cannot fetch is left unmatched, and
the others are compared.
"""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def acts(tmp_path_factory):
    import tensorflow as tf
    import tf_keras as keras

    from tflab.examples import Examples
    from tflab.litert.conversion import convert

    keras.utils.set_random_seed(3)
    inp = keras.Input((8,), name="feat")
    parts = [keras.layers.Dense(8, activation=a)(inp) for a in ("swish", "softplus", "tanh")]
    x = keras.layers.Concatenate()(parts)
    model = keras.Model(inp, keras.layers.Dense(4, activation="softmax", name="probs")(x))
    path = str(tmp_path_factory.mktemp("acts") / "sm")
    tf.saved_model.save(model, path)
    ex = Examples.of([{"feat": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)}])
    return path, convert(path, "none"), ex


def test_a_decomposed_activation_is_matched_at_its_last_op_and_the_rest_compared(acts):
    from tflab.litert.float_tensors import compare_float_tensors
    from tflab.litert.ops import read_ops

    path, model, ex = acts
    r = compare_float_tensors(model, path, ex)
    ops = {op.index: op for op in read_ops(model).subgraphs[0]}
    matched = {m.index: m for m in r.matched}
    softplus = [i for i, op in ops.items() if op.outputs and "Softplus" in op.outputs[0].name]
    assert len(softplus) > 1, [op.op_type for op in ops.values()]  # the converter decomposes it
    assert min(softplus) not in matched, r.to_text()  # its first step (EXP) is not TF's Softplus
    assert r.worst is not None and r.worst.relative < 1e-5, r.to_text()  # float32 kernels, not another value
    assert len(r.matched) >= 3


def test_a_tensor_the_session_cannot_fetch_is_dropped_not_the_whole_run():
    import tensorflow as tf

    from tflab.litert.float_tensors import _run_fetches

    class Session:
        def __init__(self):
            self.asked = []

        def run(self, fetches, feed):
            self.asked.append(list(fetches))
            if "gone/Sigmoid:0" in fetches:
                raise tf.errors.InvalidArgumentError(None, None, "Graph execution error:\n\nTensor gone/Sigmoid:0, "
                                                     "specified in either feed_devices or fetch_devices was not "
                                                     "found in the Graph")
            return [f.upper() for f in fetches]

    fetches = {1: "a:0", 2: "gone/Sigmoid:0", 3: "b:0"}
    s = Session()
    assert _run_fetches(s, fetches, [{}, {}]) == [["A:0", "B:0"], ["A:0", "B:0"]]
    assert fetches == {1: "a:0", 3: "b:0"}
    with pytest.raises(tf.errors.InvalidArgumentError):  # any other failure is raised as it was
        _run_fetches(type("S", (), {"run": lambda self, f, d: (_ for _ in ()).throw(
            tf.errors.InvalidArgumentError(None, None, "other"))})(), {1: "x:0"}, [{}])
