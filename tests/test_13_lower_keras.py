"""Issue 35: `tflab.lower` on a small Keras model: a fusion names its layer (one child-process XLA dump)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tflab import lower  # noqa: E402


@pytest.fixture(scope="module")
def model_and_lowering():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                              keras.layers.Dense(4, activation="softmax", name="head")])
    return model, lower(model, tf.TensorSpec([2, 8], tf.float32))


def test_a_fusion_of_a_keras_model_names_its_layer(model_and_lowering):
    model, low = model_and_lowering
    assert low.stopped_at == "", low.why
    relu = [f for f in low.fusions if "Relu" in f.tf_op_types]
    assert relu, [(f.name, f.tf_op_types) for f in low.fusions]
    assert relu[0].layers == ("hidden",), relu[0]  # the layer whose ops it fused, not "head"
    assert all("/hidden" in n for n in relu[0].tf_op_names), relu[0].tf_op_names  # scope hidden or hidden_N
    assert relu[0].source_lines == ()  # Keras made these ops: no user line (never the lower() call)
    head = [f for f in low.fusions if "head" in f.layers]
    assert head and all("Relu" not in f.tf_op_types for f in head)
    # A Functional/Sequential model has no Python body: the python level lists its layers.
    assert low.stage("python").ops == {"Dense": 2} and "hidden: Dense" in low.stage("python").text
    assert low.stage("autograph").why
    # Every fused TF op exists in the FuncGraph (no name from the child's call levels).
    names = {r.name for r in low._index}
    assert all(n in names for f in low.fusions for n in f.tf_op_names), [
        n for f in low.fusions for n in f.tf_op_names if n not in names]


def test_the_largest_kernel_traffic_is_measured_from_shapes(model_and_lowering):
    _, low = model_and_lowering
    dots = [f for f in low.fusions if f.kind == "library call" and "hidden" in f.layers]
    assert dots and dots[0].bytes_read == (2 * 8 + 8 * 16) * 4 and dots[0].bytes_written == 2 * 16 * 4
    var_bytes = (8 * 16 + 16 + 16 * 4 + 4) * 4
    assert low.memory["total_bytes"] >= var_bytes + 2 * 8 * 4


def test_a_function_that_calls_a_model_names_its_layers_too(model_and_lowering):
    """The tour's shape: ``def serve(x): return model(x)``; the layers come from the model it reads."""
    model, _ = model_and_lowering

    def serve(x):
        return model(x, training=False)

    low = lower(serve, tf.TensorSpec([2, 8], tf.float32))
    relu = [f for f in low.fusions if "Relu" in f.tf_op_types]
    assert relu and relu[0].layers == ("hidden",), [(f.name, f.layers) for f in low.fusions]
    assert low.stage("python").ops == {"model": 1}  # the function's own source: one call
    p = low.provenance(relu[0].name)
    assert p["source"] == [relu[0].source_lines[0]] and relu[0].source_lines[0].startswith("test_13_lower_keras.py:")
    assert any("ag__.converted_call(ag__.ld(model)" in t for t in p["autograph"]), p.get("autograph")
