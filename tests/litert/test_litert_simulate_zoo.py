"""The end-to-end check of int8 variants on two real architectures (keras.applications, random weights).

MobileNetV2 (alpha 0.35) and ResNet50 at 32×32, ``weights=None``, seed 0, with one training-mode pass
that sets BatchNormalization's moving statistics (a random-weight deep CNN with the default statistics
collapses to a constant output). The gradient bound of their int8 variants is far above the output's range
(it cannot fail); the simulation's can: a weight scale ×1.1 and a dropped bias are caught end to end, and
the healthy variant passes. Marked slow: two conversions of each model. MobileNetV2 costs about 30 s
on 2 idle cores; ResNet50 (25.6 M parameters: its conversions and the numpy simulation of its convolutions)
several minutes, so it runs only with ``TFLAB_ZOO_TESTS=1``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from test_litert_simulate import plant

pytestmark = pytest.mark.slow


def _build(name: str):
    import keras

    keras.utils.set_random_seed(0)
    shape = (32, 32, 3)
    if name == "mobilenetv2":
        m = keras.applications.MobileNetV2(weights=None, input_shape=shape, alpha=0.35)
    else:
        m = keras.applications.ResNet50(weights=None, input_shape=shape)
    bns = [l for l in m.layers if isinstance(l, keras.layers.BatchNormalization)]
    for l in bns:
        l.momentum = 0.0
    m(np.random.default_rng(123).standard_normal((8, *shape)).astype("float32"), training=True)
    return m


@pytest.fixture(scope="module", params=["mobilenetv2", pytest.param("resnet50", marks=pytest.mark.skipif(
    os.environ.get("TFLAB_ZOO_TESTS") != "1", reason="ResNet50 takes minutes: set TFLAB_ZOO_TESTS=1"))])
def zoo(request, tmp_path_factory):
    from tflab.litert.conversion import convert
    from tflab.saved_model import save_and_reload

    sm = save_and_reload(_build(request.param), tmp_path_factory.mktemp(request.param) / "sm", None)
    key = "serving_default"
    feeds = {key: list(sm.example_batches.feeds(key))[:1]}  # the one-row batch: the simulation runs in numpy
    return request.param, feeds, convert(sm.path, "none"), convert(sm.path, "int8", sm.example_batches)


def _conv_with_bias(model: bytes, steps: float) -> int:
    """The position among CONV_2D ops of the first one whose bias is at least ``steps`` output steps."""
    from tflab.litert.ops import read_ops

    convs = [o for o in read_ops(model).subgraphs[0] if o.op_type == "CONV_2D"]
    for n, op in enumerate(convs):
        b = op.inputs[2]
        if b is not None and b.constant is not None and np.abs(b.dequantize(b.constant)).max() >= \
                steps * float(op.outputs[0].scale.max()):
            return n
    raise AssertionError("no CONV_2D with a bias that matters")


def test_zoo_int8_healthy_planted_scale_and_dropped_bias(zoo):
    from tflab.litert.ops import read_ops
    from tflab.litert.simulate import simulation_check

    name, feeds, float_model, int8 = zoo
    healthy = simulation_check(int8, float_model, feeds, "int8")
    assert healthy.ok is True, healthy.to_text()
    convs = [o for o in read_ops(int8).subgraphs[0] if o.op_type == "CONV_2D"]
    nth = _conv_with_bias(int8, 8.0)
    for defect, n in (("scale_x1.1", 1), ("bias_dropped", nth)):
        sim = simulation_check(plant(int8, "CONV_2D", n, defect), float_model, feeds, "int8")
        assert sim.ok is False, (name, defect)
        # Caught where it is, not only somewhere downstream.
        assert sim.first_outside.index == convs[n].index, (name, defect, sim.to_text())
