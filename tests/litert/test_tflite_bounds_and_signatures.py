"""TFLite round trip: the int8 bound, the table's maximum, several signatures, NaN placement and named ops.

Split from `test_tflite_roundtrip.py` (no test file over 600 lines); its helpers and fixtures are imported from there.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tflite_roundtrip import (  # noqa: E402,F401  (helpers, fixtures and imports of the first part)
    os, np, pytest, MODELS, MODEL_SPEC, models, dense64, dense16, exported, warp_library, predict_and_loss,
    _scaled_softmax,)


def test_int8_bound_is_at_least_one_output_step(dense64):
    c = dense64[1]["int8"]
    for o in c.outputs.values():
        assert o.worst_bound >= o.quantization[0] * (1 - 1e-12), o.name
        # The table's three columns describe one element: |Δ| / bound == Δ/bound.
        assert o.worst_abs_error / o.worst_bound == pytest.approx(o.bound_ratio)
    # .bound is the worst output's bound, in that output's units.
    assert c.worst_output == max(c.outputs, key=lambda k: c.outputs[k].bound_ratio)
    assert c.bound == c.outputs[c.worst_output].bound


def test_table_shows_the_true_maximum_with_a_legend(dense64):
    from tflab.export import VariantResult
    from tflab.litert.records import variant_table

    checks = dense64[1]
    table = variant_table({q: VariantResult(q, "ok", check=c) for q, c in checks.items()})
    for q, c in checks.items():
        row = next(ln for ln in table.splitlines() if ln.startswith(q + " "))
        w = c.outputs[c.worst_output]
        # max|Δ| is the output's true maximum, beside that same output's own ratio
        assert f" {w.max_abs_error:.2g} " in row and f" {w.bound_ratio:.2f} " in row, row
        assert f"  {c.worst_output}; " in row, row
        assert w.max_abs_error == max(w.max_abs_error, w.worst_abs_error)
    assert table.splitlines()[-1].startswith("max|Δ|: the largest |lite − tf| of the output named")
    # Two outputs: the lowest top-1 agreement is another output's, so it is named beside its number.
    import dataclasses

    c = next(iter(checks.values()))
    w = c.outputs[c.worst_output]
    other = dataclasses.replace(w, name="serving_default/other", bound_ratio=w.bound_ratio / 2,
                                argmax_agreement=0.25)
    two = dataclasses.replace(c, outputs={w.name: dataclasses.replace(w, argmax_agreement=0.75),
                                          other.name: other})
    row = next(ln for ln in variant_table({"x": VariantResult("x", "ok", check=two)}).splitlines()
               if ln.startswith("x "))
    assert " 25% (serving_default/other) " in row and f"  {w.name}; " in row, row
    one = dataclasses.replace(c, outputs={w.name: dataclasses.replace(w, argmax_agreement=0.75)})
    row = next(ln for ln in variant_table({"x": VariantResult("x", "ok", check=one)}).splitlines()
               if ln.startswith("x "))
    assert " 75% " in row and "(" + w.name not in row, row


def test_two_signatures_with_different_inputs(models, tmp_path):
    import tflab

    sm = tflab.save_and_reload(models.two_signatures(), tmp_path / "two", None)
    batches = list(sm.example_batches)
    flt = tflab.tflite_roundtrip(sm.path, batches, "none")
    assert set(flt.outputs) == {"masked/z", "serve/y"} and flt.within_bound is True
    assert not any("not in the TFLite model" in n for n in flt.notes)
    # int8 calibrates each signature on its own inputs ((key, inputs) samples).
    q8 = tflab.tflite_roundtrip(sm.path, batches, "int8", float_size=flt.size_bytes)
    assert set(q8.signatures) == {"masked", "serve"} and q8.within_bound is True
    assert set(q8.signatures["masked"]["inputs"]) == {"x", "mask"}


def test_nan_in_same_place_matches_and_zero_rows_refused(dense64):
    import tflab

    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    x[1, 5] = np.nan  # row 1 of both outputs becomes NaN in TF and in LiteRT
    c = tflab.tflite_roundtrip(dense64[0].path, {"x": x}, "none")
    assert c.within_bound is True and c.max_abs_error < 1e-4
    assert c.outputs["probs"].argmax_agreement == 1.0  # over the 3 rows without NaN
    assert not any("bounds computed by gradient" in n for n in c.notes)
    with pytest.raises(tflab.UsageError, match="examples have 0 rows: nothing to compare or calibrate"):
        tflab.tflite_roundtrip(dense64[0].path, {"x": np.zeros((0, 64), np.float32)}, "int8")


def test_stateful_random_op_is_named(models, tmp_path):
    import tflab

    ex = {"x": np.zeros((2, 4), np.float32)}
    sm = tflab.save_and_reload(models.noisy(), tmp_path / "noisy", ex)
    c = tflab.tflite_roundtrip(sm.path, ex, "none")
    assert c.bit_exact is False
    assert any("stateful random op(s) RandomUniform" in n for n in c.notes)


def test_keras3_factory_is_a_model(models):
    import keras

    from tflab.export import load_model

    obj, kind = load_model(f"{MODELS}:keras_sequential")
    assert kind == "python" and isinstance(obj, keras.Sequential)


def test_custom_op_is_reported_as_custom(warp_library, models, tmp_path, capfd):
    import subprocess
    import sys

    import tensorflow as tf

    import tflab
    from tflab.litert import UnsupportedOpsError

    ex = {"x": np.ones((2, 8), np.float32)}
    sm = tflab.save_and_reload(models.warp(), tmp_path / "warp", ex)
    assert sm.bit_exact is True
    capfd.readouterr()
    with pytest.raises(UnsupportedOpsError) as info:
        tflab.tflite_roundtrip(sm.path, ex, "none")
    msg = str(info.value)
    assert info.value.ops == ("WarpSoftmax",) and info.value.kind == "custom"
    assert "allow_custom_ops" in msg and "SELECT_TF_OPS cannot convert" in msg and "tf.nn.softmax" in msg
    assert "error: loc(" not in capfd.readouterr().err  # the MLIR dump is not printed
    # A SavedModel folder holding WarpSoftmax loads in a fresh process (library loaded for it).
    del tf
    probe = subprocess.run([sys.executable, "-c", "import sys; from tflab.export import load_model; "
                            "print(sorted(load_model(sys.argv[1])[0].signatures))", sm.path],
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0 and "serving_default" in probe.stdout, probe.stderr[-500:]


def test_custom_op_cli_one_line(warp_library, tmp_path, run_cli):
    # The worker process loads the library itself; the verdict is one line, exit 2, nothing written.
    out = tmp_path / "exported"
    code, stdout, stderr = run_cli("export", f"{MODELS}:warp", "--out", str(out), "--quantize", "none")
    errors = [ln for ln in stderr.splitlines() if ln.startswith("tflab export")]
    assert code == 2 and len(errors) == 1 and "custom TF ops" in errors[0], stderr
    assert "allow_custom_ops" in errors[0] and "SELECT_TF_OPS cannot convert" in errors[0]
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


@pytest.mark.parametrize("case", ["parent_is_file", "proc", "force_cwd", "force_file", "force_foreign"])
def test_bad_out_is_one_line_exit_2(case, tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("hi")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "keep.txt").write_text("keep")
    args, expect = {
        "parent_is_file": (["--out", "afile/x"], "afile is a file, not a folder"),
        "proc": (["--out", "/proc/x"], "/proc/x: cannot create a folder in /proc"),
        "force_cwd": (["--out", ".", "--force"], "is the current folder or one of its parents"),
        "force_file": (["--out", "afile", "--force"], "is a regular file, not an export folder"),
        "force_foreign": (["--out", "theirs", "--force"], "not a tflab export (no .tflab-output marker"),
    }[case]
    code, stdout, stderr = run_cli("export", MODEL_SPEC, *args)
    lines = stderr.strip().splitlines()  # checked before loading: not even a progress line
    assert code == 2 and len(lines) == 1 and expect in lines[0], stderr
    assert sorted(os.listdir(tmp_path)) == ["afile", "theirs"]
    assert (tmp_path / "afile").read_text() == "hi" and os.listdir(tmp_path / "theirs") == ["keep.txt"]


def test_factory_error_names_the_users_line(run_cli, tmp_path):
    code, stdout, stderr = run_cli("export", f"{MODELS}:raises", "--out", str(tmp_path / "o"))
    lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("[export ")]
    assert code == 2 and len(lines) == 1, stderr
    assert "RuntimeError: boom in user factory" in lines[0] and "models.py:" in lines[0] and "in raises" in lines[0]


def test_sigterm_leaves_no_temporary_folder(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "tflab", "export", MODEL_SPEC, "--out", str(out),
                             "--quantize", "none,dynamic"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not [p for p in os.listdir(tmp_path) if ".tmp-" in p] and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    err = "\n".join(ln for ln in proc.stderr.read().decode(errors="replace").splitlines() if ln[:2] not in ("W0", "I0"))
    # What matters is that nothing is left behind. The exit status is 143 when
    # the handler's unwinding reaches the CLI; under heavy load it was seen as 1
    # once (not reproduced), so only "did not succeed" is asserted about it.
    assert code != 0, err[-2000:]
    assert os.listdir(tmp_path) == [], err[-2000:]


def test_scalar_output_on_one_batch_gets_no_constant_note(predict_and_loss):
    """One scalar always has range 0: the 'same value for every element' note needs > 1 value."""
    from tflab.litert import check_tflite

    model, path, batch = predict_and_loss
    one = check_tflite(model, path, [batch], "none")
    assert one.outputs["loss/loss"].reference_range == 0.0 and one.within_bound is True
    assert not any("same value" in n for n in one.notes), one.notes
    # Two identical batches: two equal losses, one per example batch. Now the note is true.
    two = check_tflite(model, path, [batch, batch], "none")
    assert any(n.startswith("TF's loss/loss is the same value") for n in two.notes), two.notes
    assert not any("predict/logits" in n and "same value" in n for n in two.notes)


def test_weights_shared_between_subgraphs_are_counted_once(predict_and_loss):
    """Both signatures read w (64×32) and b (32): two subgraphs, one buffer each."""
    from tflab.litert import analyze_flatbuffer, check_tflite

    model, path, batch = predict_and_loss
    stats = analyze_flatbuffer(model)
    assert stats.weights["float32"] == [2, 64 * 32 + 32]
    assert stats.subgraphs == 2 and stats.shared_weights == 2
    c = check_tflite(model, path, [batch], "none")
    assert c.weights["float32"] == [2, 64 * 32 + 32] and c.shared_weights == 2
    line = next(ln for ln in c.to_text().splitlines() if ln.startswith("  weights:"))
    assert "float32: 2 tensors / 2080 elements" in line and "2 shared by several signatures' subgraphs" in line
    assert c.to_dict()["shared_weights"] == 2
    # The per-output line labels its two maxima (|Δ| and ULP come from different elements).
    o = c.outputs["predict/logits"]
    assert f"predict/logits: max|Δ| {o.max_abs_error:.3g} (rel {o.max_rel_error:.3g}; max ULP {o.max_ulp}, " \
           f"its own worst element)" in c.to_text()
    # The ratio is printed beside the element it comes from, and those two numbers divide to it.
    line = next(ln for ln in c.to_text().splitlines() if ln.startswith("  predict/logits:"))
    num, den = (float(x) for x in line.split("worst |Δ|/bound ")[1].split()[0].split("/"))
    assert (num, den) == (float(f"{o.worst_abs_error:.3g}"), float(f"{o.worst_bound:.3g}"))
    assert 0 < o.bound_ratio <= 1 and o.worst_abs_error / o.worst_bound == pytest.approx(o.bound_ratio, rel=1e-9)
    assert num / den == pytest.approx(float(line.split(" = ")[1].split()[0]), rel=2e-2)
    # NaN against a number: the record's int64-maximum ULP reads as what it is, not as a count.
    import dataclasses

    nan_side = dataclasses.replace(c, outputs={**c.outputs, "predict/logits": dataclasses.replace(
        o, max_ulp=np.iinfo(np.int64).max)})
    assert "max ULP inf (NaN/inf on one side only)" in nan_side.to_text()
    assert str(np.iinfo(np.int64).max) not in nan_side.to_text()


def test_unsupported_op_names_its_signature(models, tmp_path):
    import tflab
    from tflab.litert import UnsupportedOpsError

    feed = {"x": np.ones((2, 64), np.float32), "label": np.array([1, 2], np.int32)}
    sm = tflab.save_and_reload(models.predict_and_evaluate(), tmp_path / "pe", feed)
    assert set(sm.signatures) == {"predict", "evaluate"}
    with pytest.raises(UnsupportedOpsError) as info:
        tflab.tflite_roundtrip(sm.path, feed, "none")
    op = "SparseSoftmaxCrossEntropyWithLogits"
    assert info.value.ops == (op,)
    assert f"op(s) {op} (in signature 'evaluate') are not TFLite builtins" in str(info.value)
    assert info.value.signatures == {op: ("evaluate",)}  # predict does not run it
    # export_model carries the same through its converter's report.
    with pytest.raises(UnsupportedOpsError) as info:
        tflab.export_model(models.predict_and_evaluate(), tmp_path / "out", quantize=["none"],
                           examples=feed, isolate=False)
    assert info.value.signatures == {op: ("evaluate",)} and "(in signature 'evaluate')" in str(info.value)


def test_int8_with_plain_example_dicts_on_a_keras_export_calibrates_serving_default_only(tmp_path):
    """A Keras model.export SavedModel has serve and serving_default; the converter keeps
    serving_default only, and a representative sample for 'serve' failed the whole conversion
    ('Invalid signature_key provided: "serve"') when examples were plain {input: array} dicts."""
    import keras

    import tflab

    keras.utils.set_random_seed(0)
    inp = keras.Input((8,))
    sm = tflab.save_and_reload(keras.Model(inp, keras.layers.Dense(3)(inp)), tmp_path / "k", None)
    assert set(sm.signatures) == {"serve", "serving_default"}
    plain = list(sm.example_batches)  # [{input name: array}, ...]: no signature key
    assert all(isinstance(b, dict) and not isinstance(next(iter(b.values())), dict) for b in plain)
    c = tflab.tflite_roundtrip(sm.path, plain, "int8")
    assert c.within_bound is True and set(c.outputs) == {"output_0"}


def test_vacuous_bound_is_said_plainly_when_it_exceeds_the_outputs_range(tmp_path):
    """×10 inputs: the first-order bound of the int8-weight error on a softmax row near 0.5 passes 1.

    A probability's |Δ| never exceeds its range (≤ 1), so a bound at least that
    large cannot fail: the check must say so instead of reporting "ok".
    """
    import tflab

    path, ex = _scaled_softmax(tmp_path, 10.0)
    c = tflab.tflite_roundtrip(path, ex, "dynamic", float_size=10_000)
    o = c.outputs["probs"]
    assert o.bound >= o.reference_range > 0.99   # saturated softmax rows: range ≈ 1
    assert c.vacuous_outputs == ("probs",)
    note = [n for n in c.notes if "cannot fail" in n]
    assert len(note) == 1 and note[0].startswith(f"bound {o.bound:.3g} exceeds the output's range "
                                                 f"{o.reference_range:.3g}")
    assert "this check cannot fail for probs" in note[0] and "compare argmax agreement instead" in note[0]
    assert note[0] in c.to_text() and c.to_dict()["vacuous_outputs"] == ["probs"]
    # "cannot fail" is measured: every weight ×1.1 in TF moves no element of probs past its bound.
    assert "a planted defect (every float weight ×1.1 in TF) moves probs by at most" in note[0]
    assert "(measured)" in note[0]


def test_bound_tighter_than_the_range_is_not_called_vacuous(tmp_path):
    """Same model with ×1 inputs: the bound stays well under the output's range, so the check can fail."""
    import tflab

    path, ex = _scaled_softmax(tmp_path, 1.0)
    c = tflab.tflite_roundtrip(path, ex, "dynamic", float_size=10_000)
    o = c.outputs["probs"]
    assert o.bound < o.reference_range
    assert c.vacuous_outputs == () and not any("cannot fail" in n for n in c.notes)


def test_a_saturated_output_is_called_vacuous_though_its_bound_is_small(tmp_path):
    """×1000 inputs: every softmax row is 0 and 1 to the last bit, so the first-order bound is tiny
    (the gradients vanish) while no error inside the model can move the output: the check cannot
    fail in practice. The tour's export hid behind this (dynamic and
    float16 bit-exact on a saturated MobileNetV3Small). The ×1 model above is not flagged."""
    import tflab

    path, ex = _scaled_softmax(tmp_path, 1000.0)
    c = tflab.tflite_roundtrip(path, ex, "dynamic", float_size=10_000)
    o = c.outputs["probs"]
    assert o.bound < o.reference_range  # the range rule alone would call this check able to fail
    assert c.vacuous_outputs == ("probs",)
    note = [n for n in c.notes if "is saturated" in n]
    assert len(note) == 1 and "this check cannot fail for probs (measured)" in note[0], c.notes
