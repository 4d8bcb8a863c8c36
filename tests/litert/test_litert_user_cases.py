"""Handed cases E1–E6 (../shared/cases/export.md), each as a test."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tflab._user.target import load_module

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "export", "models.py")


@pytest.fixture(scope="module")
def models():
    return load_module(MODELS)


@pytest.fixture(scope="module")
def dense64_sm(models, tmp_path_factory):
    import tflab

    rng = np.random.default_rng(1)
    ex = [{"x": rng.standard_normal((b, 64)).astype(np.float32)} for b in (1, 4)]
    sm = tflab.save_and_reload(models.dense64(), tmp_path_factory.mktemp("cases") / "dense64", ex)
    return sm, ex


def test_e1_named_outputs_compared_by_name(models, dense64_sm):
    from ai_edge_litert.interpreter import Interpreter

    import tflab
    from tflab.litert import convert

    sm, ex = dense64_sm
    assert sm.bit_exact
    assert set(sm.signatures["serving_default"].outputs) == {"probs", "logits"}
    c = tflab.tflite_roundtrip(sm.path, ex, "none")
    assert set(c.outputs) == {"probs", "logits"}
    assert all(o.within_bound for o in c.outputs.values())
    # The orders really differ (TF: the function's dict order; LiteRT: sorted by name),
    # so matching by position would pair logits with probs.
    tf_order = list(models.dense64().serve(ex[0]["x"]))
    lite_order = Interpreter(model_content=convert(sm.path)).get_signature_list()["serving_default"]["outputs"]
    assert tf_order == ["probs", "logits"] and lite_order == ["logits", "probs"]
    text = c.to_text()
    assert "probs: max|Δ|" in text and "logits: max|Δ|" in text


def test_e2_dict_inputs_keep_their_names(models, tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    import tflab
    from tflab.litert import convert

    rng = np.random.default_rng(2)
    feed = {"image": rng.standard_normal((3, 8)).astype(np.float32),
            "mask": (rng.random((3, 8)) > 0.5).astype(np.float32)}
    sm = tflab.save_and_reload(models.dict_inputs(), tmp_path / "dict", feed)
    assert sm.bit_exact and set(sm.signatures["serving_default"].inputs) == {"image", "mask"}
    sigs = Interpreter(model_content=convert(sm.path)).get_signature_list()
    assert sorted(sigs["serving_default"]["inputs"]) == ["image", "mask"]
    c = tflab.tflite_roundtrip(sm.path, feed, "none")
    assert c.within_bound is True
    assert set(c.signatures["serving_default"]["inputs"]) == {"image", "mask"}


def test_e3_dynamic_batch(dense64_sm):
    from ai_edge_litert.interpreter import Interpreter

    import tflab
    from tflab.litert import convert

    sm, _ = dense64_sm
    rng = np.random.default_rng(3)
    b1, b4 = (rng.standard_normal((b, 64)).astype(np.float32) for b in (1, 4))
    c = tflab.tflite_roundtrip(sm.path, [{"x": b1}, {"x": b4}], "none")
    assert c.within_bound is True
    assert c.signatures["serving_default"]["inputs"]["x"]["shape_signature"] == (-1, 64)
    assert c.outputs["probs"].shape_signature == (-1, 64)
    runner = Interpreter(model_content=convert(sm.path)).get_signature_runner("serving_default")
    assert runner(x=b1)["probs"].shape == (1, 64)
    assert runner(x=b4)["probs"].shape == (4, 64)  # the same runner, resized by the call


def test_e4_quantization_needs_big_weights(models, tmp_path):
    import tflab

    rng = np.random.default_rng(4)
    results = {}
    for name, n in (("dense64", 64), ("dense16", 16)):
        ex = {"x": rng.standard_normal((4, n)).astype(np.float32)}
        sm = tflab.save_and_reload(getattr(models, name)(), tmp_path / name, ex)
        none = tflab.tflite_roundtrip(sm.path, ex, "none")
        results[name] = (none, tflab.tflite_roundtrip(sm.path, ex, "dynamic", float_size=none.size_bytes))
    big_none, big = results["dense64"]
    assert big.bit_exact is False and big.within_bound is True
    assert big.max_abs_error > 100 * big_none.max_abs_error
    assert big.weights["int8"][1] == 64 * 64
    small_none, small = results["dense16"]
    assert "int8" not in small.weights and small.weights["float32"][1] == 16 * 16 + 16
    assert small.size_ratio == pytest.approx(1.0, abs=0.02)
    assert any("at least 1024 elements" in n for n in small.notes)
    assert small.max_abs_error == small_none.max_abs_error


def test_e5_op_outside_builtins(models, tmp_path, run_cli):
    import tflab
    from tflab.litert import UnsupportedOpsError

    feed = {"text": np.array([b"ab", b"tflab"], dtype=object)}
    sm = tflab.save_and_reload(models.string_length(), tmp_path / "strings", feed)
    assert sm.bit_exact
    with pytest.raises(UnsupportedOpsError) as info:
        tflab.tflite_roundtrip(sm.path, feed, "none")
    msg = str(info.value)
    assert info.value.ops == ("StringLength",)
    assert "StringLength" in msg and "SELECT_TF_OPS" in msg and "cannot run Flex ops" in msg
    # SELECT_TF_OPS does convert it, and the Python LiteRT interpreter then refuses to run it.
    flex = tflab.tflite_roundtrip(sm.path, feed, "none", select_tf_ops=True)
    assert flex.flex_ops == ("FlexStringLength",)
    assert flex.runtime.startswith("not run: Flex op(s) FlexStringLength")
    assert flex.within_bound is None and flex.bit_exact is None
    # The CLI: one line, exit 2, nothing left behind.
    out = tmp_path / "exported"
    code, stdout, stderr = run_cli("export", f"{MODELS}:string_length", "--out", str(out))
    errors = [ln for ln in stderr.splitlines() if ln.startswith("tflab export")]
    assert code == 2 and len(errors) == 1 and "StringLength" in errors[0] and "SELECT_TF_OPS" in errors[0]
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_e6_keras3_two_inputs(models, tmp_path):
    import tflab

    rng = np.random.default_rng(6)
    feed = [{"a": rng.standard_normal((b, 8)).astype(np.float32),
             "b": rng.standard_normal((b, 4)).astype(np.float32)} for b in (1, 5)]
    sm = tflab.save_and_reload(models.keras_two_inputs(), tmp_path / "k3", feed)
    assert sm.kind == "keras" and sm.bit_exact is True
    c = tflab.tflite_roundtrip(sm.path, feed, "none")
    assert c.within_bound is True
    assert set(c.signatures["serving_default"]["inputs"]) == {"a", "b"}
    assert c.outputs["output_0"].argmax_agreement == 1.0
    # 'serve' is an alias of 'serving_default' (one function): no note that it was left out.
    assert sm.signatures.keys() == {"serve", "serving_default"}
    assert not any("not in the TFLite model" in n for n in c.notes)
