"""The main job: `tflab tour` on a user's model, and its bad input.

The full tour on MobileNetV3Small is `make tour`; here the tracing sections
(steps 1, 2 and 4) run on a small user model saved as .keras, which is what
`tflab tour --model PATH` does with a user's file.
"""

from __future__ import annotations

import json

import pytest


def test_tour_tracing_sections_on_a_user_model(small_keras_file, tmp_path):
    from tflab.tour import run_tour

    out = tmp_path / "tour"
    report = run_tour(model_path=str(small_keras_file), out_dir=str(out), quiet=True,
                      only=["s01_trace", "s02_retrace", "s04_stabilize"])
    saved = json.loads((out / "report.json").read_text())
    assert saved["model"] == str(small_keras_file)
    # The configuration every number was measured on: TF CPU path and why.
    from tflab.runtime import runtime_config

    cfg = runtime_config()
    assert (saved["config"]["onednn_enabled"], saved["config"]["onednn_reason"]) == (
        cfg.onednn_enabled, cfg.onednn_reason)
    assert saved["config"]["tf_version"] == cfg.tf_version
    # Step 1: Conv2D kernel+bias and Dense kernel+bias are the captured variables.
    assert saved["trace"]["variables"] == 4
    assert saved["trace"]["op_counts"]["Conv2D"] == 1
    assert (out / "inference.dot").read_text().startswith("digraph")
    # Step 2: batches 4, 4, 2 with SGD(momentum=0.9): first trace, TF's variable-creation re-trace, last batch.
    assert report["retrace"]["batch_sizes"] == [4, 4, 2]
    assert [t["kind"] for t in report["retrace"]["traces"]] == ["first", "variable_creation", "retrace"]
    # Step 4: inference plain 3 / reduce_retracing 2 / input_signature 1. Training reuses
    # step 2's optimizer, whose slot variables exist: 1 trace for every batch size.
    variants = saved["stabilize"]["inference"]["variants"]
    assert [variants[k]["traces"] for k in ("plain", "reduce_retracing", "input_signature")] == [3, 2, 1]
    assert saved["stabilize"]["train_step"]["traces"] == 1
    assert saved["stabilize"]["train_step"]["batch_sizes"] == [4, 4, 2, 3]
    # Alone, step 4 makes a fresh optimizer: the first call's variable-creation pair, then none.
    alone = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "alone"), quiet=True,
                     only=["s04_stabilize"])
    assert (alone["stabilize"]["train_step"]["first_call_traces"],
            alone["stabilize"]["train_step"]["traces"]) == (2, 2)


def test_tour_prints_its_configuration_first(small_keras_file, tmp_path, capsys):
    from tflab.runtime import runtime_config
    from tflab.tour import run_tour

    run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "t"), only=[])
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"configuration: {runtime_config().one_line()}"


@pytest.mark.parametrize("model, message", [
    ("no/such/model.keras", "does not exist"),
    ("README.md", "is not a .keras file or a SavedModel folder"),
    ("tests", "without saved_model.pb"),
], ids=["missing", "not-a-model", "folder-not-savedmodel"])
def test_tour_bad_model_path_is_one_line_exit_2(run_cli, tmp_path, model, message):
    code, out, err = run_cli("tour", "--model", model, "--out", str(tmp_path / "t"))
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_tour_out_that_is_a_file(run_cli, tmp_path, small_keras_file):
    target = tmp_path / "file.txt"
    target.write_text("x")
    code, out, err = run_cli("tour", "--model", str(small_keras_file), "--out", str(target))
    assert code == 2 and "exists and is not a folder" in err and err.count("\n") == 1
    assert target.read_text() == "x"


def test_materialize_one_stream_per_call_and_size_limit():
    """CLI --arg specs become seeded random tensors; two same-shaped args must differ."""
    import numpy as np
    import tensorflow as tf

    from tflab._user.target import materialize
    from tflab.errors import UsageError

    rng = np.random.default_rng(0)
    x = materialize(tf.TensorSpec([4], name="x"), rng)
    y = materialize(tf.TensorSpec([4], name="y"), rng)
    assert not np.array_equal(x.numpy(), y.numpy())
    again = materialize(tf.TensorSpec([4], name="x"), np.random.default_rng(0))
    np.testing.assert_array_equal(x.numpy(), again.numpy())  # seeded: reproducible
    with pytest.raises(UsageError, match="needs 372.5 GiB"):
        materialize(tf.TensorSpec([100_000_000_000], name="x"))


def test_calibrate_batch_norm_reaches_nested_layers():
    """The walk over the public ``.layers`` lists finds a BatchNormalization inside a
    nested model too; each gets the batch's statistics (momentum 0) and keeps its own momentum."""
    import keras
    import numpy as np

    from tflab.models import _nested_layers, calibrate_batch_norm

    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.BatchNormalization()])
    outer = keras.Sequential([keras.Input((4,)), inner, keras.layers.BatchNormalization(momentum=0.9)])
    bns = [layer for layer in _nested_layers(outer) if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(bns) == 2 and bns[0] is inner.layers[1] and bns[1] is outer.layers[1]
    batch = np.random.default_rng(0).normal(3.0, 2.0, (64, 4)).astype("float32")
    calibrate_batch_norm(outer, batch)
    h = inner.layers[0](batch).numpy()  # what the inner BN saw
    np.testing.assert_allclose(bns[0].moving_mean.numpy(), h.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bns[0].moving_variance.numpy(), h.var(0), rtol=1e-4, atol=1e-5)
    assert [b.momentum for b in bns] == [0.99, 0.9]  # restored
