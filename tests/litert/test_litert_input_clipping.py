"""An int8 variant checked on examples unlike its calibration data: the cause is the input's clipping.

A healthy int8 model calibrated on images in [0, 1] was called CROSSED (0% top-1) when checked on other
inputs (standard normal, as ``tflab check-tflite`` draws them without ``--examples``; or real images
after a calibration on [0, 0.01]), and the cause named was a LayerNorm's all-zero constant, "set by
outliers". What changed the outputs is the input: LiteRT clips every value outside the input's int8
grid, TF does not. Handed case: a Conv → LayerNormalization → softmax model calibrated on [0, 0.01] and
checked on [0, 1]; sibling: calibrated on [0, 1] and checked on tflab's standard-normal draws (the CLI);
twin: checked on data like the calibration's, ok. An all-zero tensor is never "set by outliers".
"""

from __future__ import annotations

import numpy as np
import pytest


def _cnn():
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 3), name="img")
    h = keras.layers.Conv2D(8, 3, activation="relu")(x)
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(x, keras.layers.Dense(5, activation="softmax")(h))


def _images(scale: float, seed: int) -> dict:
    return {"img": (np.random.default_rng(seed).uniform(0, 1, (16, 8, 8, 3)) * scale).astype(np.float32)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tflab.examples import Examples
    from tflab.litert.conversion import convert

    root = tmp_path_factory.mktemp("clip")
    path = str(root / "saved_model")
    _cnn().export(path, verbose=False)
    none = convert(path, "none")
    out = {"path": path, "none": none}
    for name, scale in (("calibrated_01", 1.0), ("calibrated_001", 0.01)):
        out[name] = convert(path, "int8", Examples.of([_images(scale, 1)]))
        (root / f"{name}.tflite").write_bytes(out[name])
    out["root"] = root
    return out


@pytest.mark.parametrize("model,scale,clips", [("calibrated_001", 1.0, True), ("calibrated_01", 1.0, False),
                                               ("calibrated_001", 0.01, False)],
                         ids=["unlike_calibration", "twin_like_calibration", "twin_small_like_calibration"])
def test_examples_outside_the_input_grid_are_named_as_the_cause(exported, model, scale, clips):
    from tflab.examples import Examples
    from tflab.litert.check import check_tflite
    from tflab.litert.whole_model import MIN_CLIPPED

    c = check_tflite(exported[model], exported["path"], Examples.of([_images(scale, 2)]), "int8",
                     float_model=exported["none"])
    inputs = [r for r in c.simulation.ranges if r.role == "input"]
    assert len(inputs) == 1
    if not clips:
        assert inputs[0].clipped < MIN_CLIPPED and c.ok is True, c.to_text()
        return
    assert inputs[0].clipped > 0.9, inputs  # 99% of [0, 1] lies past a grid calibrated on [0, 0.01]
    assert c.ok is False and c.cause is not None and c.cause.kind == "quantization-range", c.to_text()
    assert c.cause.evidence["role"] == "input" and c.cause.evidence["clipped"] == inputs[0].clipped
    assert "lie outside" in c.cause.line_text and "zeros" not in c.cause.line_text, c.cause.line_text
    low, high = c.cause.evidence["range"]
    assert low == pytest.approx(0.0, abs=1e-4) and high == pytest.approx(0.01, rel=0.05)


def test_check_tflite_without_examples_says_it_drew_them_and_names_the_clipping(exported):
    """The CLI draws standard-normal inputs: on a [0, 1]-calibrated input most fall outside its grid."""
    import re
    import subprocess
    import sys

    root = exported["root"]
    p = subprocess.run([sys.executable, "-m", "tflab", "check-tflite", str(root / "calibrated_01.tflite"),
                        exported["path"]], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert "drawn by tflab" in p.stderr and "--examples" in p.stderr, p.stderr
    assert p.returncode == 1, p.stdout + p.stderr
    assert "set by outliers" not in p.stdout, p.stdout
    # Standard-normal draws outside [0, 1]: P(x < 0) + P(x > 1) = 0.66, less those within half a step.
    share = re.search(r"cause: quantization-range at \S+ 'serving_default_img:0'.*?([0-9.]+)% of its values lie "
                      r"outside \[0, ", p.stdout)
    assert share is not None, p.stdout
    assert 55.0 < float(share.group(1)) < 75.0, share.group(0)


def test_an_all_zero_tensor_has_no_range_to_judge():
    from tflab.litert.ops import TensorInfo
    from tflab.litert.whole_model import range_use

    t = TensorInfo(0, "zeros/Const", "int8", (4,), np.array([0.004]), np.array([-128]), 0, None)
    assert range_use(np.zeros(4), t) is None
    assert range_use(np.array([0.0, 0.0, 0.0, 0.5]), t) is not None
