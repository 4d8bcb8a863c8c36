"""`tflab.lower` on a small Keras model: a fusion names its layer (one child-process XLA dump)."""

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
    assert p["source"] == [relu[0].source_lines[0]] and relu[0].source_lines[0].startswith("test_lower_keras.py:")
    assert any("ag__.converted_call(ag__.ld(model)" in t for t in p["autograph"]), p.get("autograph")


def _layer_of_activation(model) -> dict:
    """Ground truth from the models themselves: activation op type → the Dense layer that applies it."""
    types = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "elu": "Elu"}
    return {types[layer.activation.__name__]: layer.name for layer in model.layers}


def _check_layers(low, truth: dict) -> None:
    """Every fusion holding a layer's activation names exactly that layer (its own ``name``)."""
    seen = set()
    for f in low.fusions:
        acts = [t for t in f.tf_op_types if t in truth]
        for t in acts:
            assert truth[t] in f.layers, (f.name, f.tf_op_types, f.layers, truth)
            seen.add(t)
        if len(acts) == 1:
            others = {truth[t] for t in truth} - {truth[acts[0]]}
            assert not others & set(f.layers), (f.name, f.layers)
    assert seen == set(truth), (seen, [(f.name, f.tf_op_types) for f in low.fusions])


def test_two_sequential_models_in_one_process_each_fusion_names_its_own_layer():
    """Keras uniquifies scopes: layer ``enc`` of a model traces under ``…/enc_1/`` (another layer's name).

    The layer comes from the layer call that created each op, not from the scope
    string: a planted scope-string guess, and a planted swap, both fail the check.
    """
    import dataclasses
    import re

    keras.utils.set_random_seed(2)
    # Model a's names make Keras' scopes collide: its layer "enc" traces under ".../enc_1/".
    a = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="enc"),
                          keras.layers.Dense(8, activation="tanh", name="enc_1")])
    b = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="sigmoid"),
                          keras.layers.Dense(8, activation="elu")])
    assert len({layer.name for m in (a, b) for layer in m.layers}) == 4  # uniquified across the models

    def both(x):
        return b(a(x, training=False), training=False)

    low = lower(both, tf.TensorSpec([2, 8], tf.float32))
    assert low.stopped_at == "", low.why
    truth = {**_layer_of_activation(a), **_layer_of_activation(b)}
    _check_layers(low, truth)
    # The library-call dots: the one reading a's first kernel (8x16) is a's first layer.
    dot = [f for f in low.fusions if f.kind == "library call" and f.bytes_read == (2 * 8 + 8 * 16) * 4]
    assert dot and dot[0].layers == (a.layers[0].name,), [(f.name, f.bytes_read, f.layers) for f in low.fusions]
    names = {layer.name for m in (a, b) for layer in m.layers}

    # Planted: the two layers of model a swapped in every record.
    swap = {truth["Relu"]: truth["Tanh"], truth["Tanh"]: truth["Relu"]}
    swapped = dataclasses.replace(low, fusions=tuple(
        dataclasses.replace(f, layers=tuple(swap.get(x, x) for x in f.layers)) for f in low.fusions))
    with pytest.raises(AssertionError):
        _check_layers(swapped, truth)

    # Planted: the old guess from the scope string (a component that is a layer name, else without _N).
    def guess(op_name):
        for part in op_name.split("/")[:-1]:
            if part in names:
                return part
            if re.sub(r"_\d+$", "", part) in names:
                return re.sub(r"_\d+$", "", part)
        return ""

    guessed = dataclasses.replace(low, fusions=tuple(
        dataclasses.replace(f, layers=tuple(dict.fromkeys(g for g in map(guess, f.tf_op_names) if g)))
        for f in low.fusions))
    with pytest.raises(AssertionError):  # it credits enc's Relu to enc_1
        _check_layers(guessed, truth)
