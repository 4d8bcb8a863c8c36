"""Lab step 8, attribution: the output error of a quantized variant attributed to its ops, and a measured fix.

* a defect planted in one op's weights or scales makes that op the largest share
  of the output error (its own noise, measured on its own inputs, dominates);
* on a healthy int8 model, re-quantizing with the worst ops kept in float
  (QuantizationDebugger, ``denylisted_nodes``) lowers the measured output error;
  QuantizationDebugger's per-layer MSE agrees with ours where it verifies the op;
* TFLite tensor names map to the TF graph's nodes, and the misses are counted;
* a quantized variant does not convert the float model again just for
  ``size_ratio``: one float conversion per SavedModel;
* ``tflab export`` prints one line per variant with the verdict, the shares and the
  fix, writes Model Explorer node data with ``--node-data``, and ``tflab
  check-tflite`` on that folder reuses its examples.npz, so its numbers are export's.

Every number asserted is a comparison measured in the same run (before vs after,
ours vs the debugger's, planted vs healthy), never a value from this CPU; LiteRT's
builtin kernels and the numpy reference do the arithmetic, so no oneDNN marker.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tflab.errors import UsageError

from test_litert_per_op import _cnn, _examples, _plant, _save


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """(SavedModel, examples, {variant: bytes}) of the per-op tests' CNN (non-zero biases)."""
    from tflab.litert.conversion import convert

    sm = _save(_cnn(), tmp_path_factory.mktemp("attr") / "cnn")
    ex = _examples((12, 12, 3), n=16)
    return sm, ex, {q: convert(sm, q, [ex]) for q in ("none", "dynamic", "int8")}


def _attribute(sm, ex, model, float_model, q, fix=False):
    from tflab.litert.attribution import attribute_error
    from tflab.litert.per_op import check_ops

    per_op = check_ops(model, float_model, {"serving_default": [ex]}, q)
    return per_op, attribute_error(model, float_model, sm, per_op, [ex], q, fix=fix)


@pytest.mark.parametrize("q,defect", [("int8", "scale_x1.1"), ("int8", "weight_x1.1"),
                                      ("dynamic", "weight_x1.1"), ("dynamic", "scale_x1.1")])
def test_a_planted_defect_is_attributed_to_its_op(cnn, q, defect):
    """The op holding the defect has the largest share, and a much larger one than it had healthy."""
    sm, ex, models = cnn
    planted, index = _plant(models[q], "CONV_2D", defect, 1)
    _, healthy = _attribute(sm, ex, models[q], models["none"], q)
    per_op, bad = _attribute(sm, ex, planted, models["none"], q)
    assert [o.index for o in per_op.outside] == [index]  # the verdict names it ...
    top = bad.shares[0]
    assert (top.index, top.op_type) == (index, "CONV_2D"), bad.to_text()  # ... and so does the attribution
    before = next(s for s in healthy.shares if s.index == index)
    assert top.share > 0.5 and top.local_error > 3 * before.local_error, (bad.to_text(), healthy.to_text())
    # the defect shows in the output: the measured output error grew
    assert bad.output_error > healthy.output_error
    assert f"CONV_2D #{index}" in bad.summary_line()


def test_kept_float_lowers_the_measured_error_of_a_healthy_int8_model(cnn):
    """Denylisting the top ops (QuantizationDebugger) lowers the output error vs TF, at a size cost.

    Both models come from the same calibration by the same debugger, and both are
    measured on the same examples against the same TF outputs, so the drop is the
    fix's alone. Keeping an op float removes its weight and output rounding; the
    ops around it still quantize, so the drop is partial, and the model grows by
    the float weights it now stores.
    """
    sm, ex, models = cnn
    _, a = _attribute(sm, ex, models["int8"], models["none"], "int8", fix=True)
    k = a.kept_float
    assert k is not None and k.kept == tuple(s.name for s in a.shares[:len(k.kept)]), a.to_text()
    assert k.error_after < k.error_before, a.to_text()
    assert k.size_after > k.size_before, a.to_text()
    assert k.error_change < 0 and "kept float: -" in a.summary_line()
    # The debugger's model without a denylist is our int8 recipe: same error up to calibration order.
    assert k.error_before == pytest.approx(a.output_error, rel=0.25), a.to_text()
    # Where QuantizationDebugger verifies an op, its MSE is ours: both compare the op with the float op
    # on the same dequantized inputs (float32 TFLite kernel vs our float64, averaged per example vs pooled).
    both = [s for s in a.shares if s.debugger_mse is not None and s.mse]
    assert both, a.to_text()
    for s in both:
        assert 0.5 <= s.debugger_mse / s.mse <= 2.0, (s.op_type, s.index, s.debugger_mse, s.mse)


def test_shares_sum_to_one_and_the_prediction_is_shown(cnn):
    sm, ex, models = cnn
    _, a = _attribute(sm, ex, models["int8"], models["none"], "int8")
    assert sum(s.share for s in a.shares) == pytest.approx(1.0)
    assert a.shares == tuple(sorted(a.shares, key=lambda s: -s.share))
    # sqrt(Σ r²) is what the shares are made of
    assert a.predicted_error == pytest.approx(np.sqrt(sum(s.local_error ** 2 for s in a.shares)))
    assert "predicted from the ops' own noise" in a.to_text()
    # drift: measured through the whole model, so at least as large as the op's own error is not
    # guaranteed, but an op fed by quantized ops drifts: the last FULLY_CONNECTED does
    fc = next(s for s in a.shares if s.op_type == "FULLY_CONNECTED")
    assert fc.drift is not None and fc.drift > 0
    with pytest.raises(UsageError, match=r"^attribute_error: the float variant has no quantization error to "
                                         r"attribute; pass a dynamic, float16 or int8 model$"):
        _attribute(sm, ex, models["none"], models["none"], "none")


def test_tflite_names_map_to_tf_nodes_and_misses_are_counted(cnn):
    from tflab.litert.attribution import tf_name_of

    names = {"functional/conv2d/Relu", "StatefulPartitionedCall/functional/dense/BiasAdd"}
    assert tf_name_of("functional/conv2d/BiasAdd;functional/conv2d/Relu", names) == "functional/conv2d/Relu"
    assert tf_name_of("functional/dense/BiasAdd:0", names) == "StatefulPartitionedCall/functional/dense/BiasAdd"
    assert tf_name_of("tfl.quantize", names) is None
    sm, ex, models = cnn
    _, a = _attribute(sm, ex, models["int8"], models["none"], "int8")
    ops = sum(1 for _ in a.shares)  # every checked op with error; the name counts cover all ops
    assert a.tf_matched + a.tf_unmatched >= ops and a.tf_matched > a.tf_unmatched, a.to_text()
    assert all(s.tf_name for s in a.shares if s.op_type in ("CONV_2D", "FULLY_CONNECTED")), a.to_text()


def test_a_quantized_variant_does_not_convert_the_float_model_again_for_its_size(cnn, monkeypatch):
    """One float conversion per SavedModel, shared by size_ratio and the per-op reference."""
    import tflab
    from tflab.litert import check, conversion

    sm, ex, models = cnn
    calls = []
    real = conversion.convert

    def counting(path, q="none", *a, **k):
        calls.append(q)
        return real(path, q, *a, **k)

    monkeypatch.setattr(check, "convert", counting)
    check._FLOAT_MODELS.clear()
    d = tflab.tflite_roundtrip(sm, [ex], "dynamic")
    f16 = tflab.tflite_roundtrip(sm, [ex], "float16")
    assert calls == ["dynamic", "none", "float16"], calls  # tflab without the fix: dynamic, none, float16, none
    assert d.size_ratio == pytest.approx(d.size_bytes / len(models["none"]))
    assert f16.size_ratio == pytest.approx(f16.size_bytes / len(models["none"]))
    assert d.attribution is not None and d.attribution.kept_float is None  # no fix for dynamic


def test_export_line_node_data_and_check_tflite_reuses_the_exports_examples(small_keras_file, tmp_path,
                                                                             run_cli):
    out = tmp_path / "exp"
    code, text, err = run_cli("export", str(small_keras_file), "--out", str(out), "--quantize", "none,int8",
                              "--node-data")
    assert code in (0, 1), err
    line = next(ln for ln in text.splitlines() if ln.startswith("int8: ") and "ops checked" in ln)
    import re

    assert re.search(r"^int8: \d+ ops checked, \d+ outside their bound.*; \d+% of the output error from "
                     r"[A-Z_0-9]+ #\d+ .*; kept float(: | did not help \()[+-]\d+% error, [+-]\d+% size\)?$",
                     line), line
    # The kept-float line is the fix only when it was measured to cut the error.
    k = json.loads((out / "report.json").read_text())["variants"]["int8"]["check"]["attribution"]["kept_float"]
    assert ("did not help" in line) == (k["error_after"] > 0.9 * k["error_before"]), (line, k)
    assert "max|Δ|: the largest |lite − tf|" in text  # the table's legend
    report = json.loads((out / "report.json").read_text())
    nodes = json.loads((out / "model_int8.node_data.json").read_text())
    ops = report["variants"]["int8"]["check"]["per_op"]["ops"]
    checked = {o["name"]: o["ratio"] for o in ops if o["verdict"] != "unchecked"}
    assert nodes["serving_default"]["results"].keys() == checked.keys()
    code, js, err = run_cli("check-tflite", str(out / "model_int8.tflite"), str(out / "saved_model"), "--json")
    assert code in (0, 1), err
    mine = json.loads(js)
    want = report["variants"]["int8"]["check"]
    # the same examples (the export's examples.npz), so the same measured numbers
    assert mine["max_abs_error"] == want["max_abs_error"]
    assert [o["ratio"] for o in mine["per_op"]["ops"]] == [o["ratio"] for o in ops]


def test_dynamic_attribution_names_the_only_quantized_layer(cnn):
    """Dynamic range quantizes weights of 1024+ elements only: of the CNN's layers that is the second conv
    (3·3·16·16 = 2304 weights; the first has 432, the dense head 864), so it carries all the error."""
    sm, ex, models = cnn
    _, a = _attribute(sm, ex, models["dynamic"], models["none"], "dynamic")
    convs = sorted(s.index for s in a.shares if s.op_type == "CONV_2D")
    top = a.shares[0]
    assert (top.op_type, top.index) == ("CONV_2D", convs[-1]) and top.share > 0.99, a.to_text()
    assert any("no kept-float fix for dynamic" in n for n in a.notes)


def test_float_intermediates_are_compared_with_tf_tensors_of_the_same_name(cnn):
    """Each float op output, through the whole model, beside TF's tensor of that name; a defect shows there.

    Healthy, every matched tensor is float32 rounding away from TF's. A conv weight ×1.1 planted in
    the float flatbuffer moves that conv's output by ~1e-1 of its scale, far above the healthy
    rounding, and the ops before it do not move: the first tensor that jumps is the planted op's.
    """
    from tflab.litert.float_tensors import compare_float_tensors

    sm, ex, models = cnn
    healthy = compare_float_tensors(models["none"], sm, [ex])
    kinds = {m.op_type for m in healthy.matched}
    assert {"CONV_2D", "FULLY_CONNECTED", "MAX_POOL_2D"} <= kinds, healthy.to_text()
    conv = [m for m in healthy.matched if m.op_type == "CONV_2D"]
    assert all("Relu" in m.tf_name for m in conv)  # the downstream part of the fused name
    fc = next(m for m in healthy.matched if m.op_type == "FULLY_CONNECTED")
    assert fc.tf_name.endswith("BiasAdd:0"), fc  # MatMul;BiasAdd: the output is after the bias
    planted, index = _plant(models["none"], "CONV_2D", "weight_x1.1", 1)
    bad = compare_float_tensors(planted, sm, [ex])
    base = max(m.relative for m in healthy.matched)
    first = next(m for m in bad.matched if m.relative > 100 * base)
    assert first.index == index, bad.to_text()
    c = __import__("tflab").tflite_roundtrip(sm, [ex], "none")
    assert c.tf_tensors is not None and len(c.tf_tensors.matched) == len(healthy.matched)


def test_output_error_pools_each_output_over_the_signatures_that_have_it():
    """Two signatures with different outputs: each output is pooled over its own batches (a name the
    first signature lacks is not looked up in its rows); a planted 10% error on one output shows."""
    import numpy as np

    from tflab.litert.attribution import output_error

    want = [{"z": np.array([1.0, 2.0])}, {"s": np.array([4.0])}, {"s": np.array([3.0])}]
    assert output_error([dict(w) for w in want], want) == 0.0
    got = [{"z": np.array([1.0, 2.0])}, {"s": np.array([4.4])}, {"s": np.array([3.3])}]
    # z: 0; s: ‖(0.4, 0.3)‖ / ‖(4, 3)‖ = 0.1; root mean square over the two outputs
    assert output_error(got, want) == pytest.approx(np.sqrt((0.0 + 0.01) / 2))
