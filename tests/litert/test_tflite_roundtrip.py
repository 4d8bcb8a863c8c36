"""Lab step 8: TFLite/LiteRT round trips are close within a stated bound; `tflab export`.

Each variant of the 64×64 Dense model is converted once (module fixture)
and every test reads the measured `TFLiteCheck`.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np
import pytest

from tflab._user.target import load_module

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "export", "models.py")
MODEL_SPEC = f"{MODELS}:dense64"


@pytest.fixture(scope="module")
def models():
    return load_module(MODELS)


def _examples(n: int, batches=(1, 4, 4)):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((b, n)).astype(np.float32)} for b in batches]


@pytest.fixture(scope="module")
def dense64(models, tmp_path_factory):
    """(SavedModelCheck, {quantization: TFLiteCheck}) for the 64×64 Dense model."""
    import tflab
    from tflab.litert import QUANTIZATIONS

    ex = _examples(64)
    sm = tflab.save_and_reload(models.dense64(), tmp_path_factory.mktemp("sm08") / "dense64", ex)
    none = tflab.tflite_roundtrip(sm.path, ex, "none")
    checks = {"none": none}
    for q in QUANTIZATIONS[1:]:
        checks[q] = tflab.tflite_roundtrip(sm.path, ex, q, float_size=none.size_bytes)
    return sm, checks


@pytest.fixture(scope="module")
def dense16(models, tmp_path_factory):
    import tflab

    ex = _examples(16)
    sm = tflab.save_and_reload(models.dense16(), tmp_path_factory.mktemp("sm08") / "dense16", ex)
    none = tflab.tflite_roundtrip(sm.path, ex, "none")
    return {"none": none, "dynamic": tflab.tflite_roundtrip(sm.path, ex, "dynamic", float_size=none.size_bytes)}


def test_seed_pair_savedmodel_exact_dynamic_close_not_exact(dense64):
    """The seed's two assertions: SavedModel bit-exact; dynamic-range close but perturbed."""
    sm, checks = dense64
    dyn, flt = checks["dynamic"], checks["none"]
    assert sm.bit_exact is True
    assert dyn.bit_exact is False
    assert dyn.within_bound is True and all(o.max_abs_error <= o.bound for o in dyn.outputs.values())
    # The int8 weights moved the outputs far more than float reordering did.
    assert dyn.max_abs_error > 1e-3
    assert dyn.max_abs_error > 1000 * flt.max_abs_error
    # The 4096-element kernel became int8; the 64-element bias stayed float32.
    assert dyn.weights["int8"] == [1, 4096]
    assert dyn.weights["float32"] == [1, 64]
    assert 0.3 < dyn.size_ratio < 0.45


def test_float_variant_within_reordering_bound(dense64):
    flt = dense64[1]["none"]
    assert flt.within_bound is True
    assert flt.size_ratio == 1.0
    for name, out in flt.outputs.items():
        assert out.max_abs_error <= out.bound, name
        # A rounding-level bound, not a loose tolerance: K=64 sums, u = 2^-24.
        assert out.bound < 1e-4, name
        # No ULP count is asserted: TF's MatMul (oneDNN or Eigen, by CPU) and
        # XNNPACK sum in different orders, and near-zero outputs turn the same
        # absolute error into any number of ULP (README, "Configurations").
    assert "Higham" in flt.explanation and "XNNPACK" in flt.explanation
    # The TF reference ran on one CPU path (oneDNN or Eigen): the check says which.
    assert isinstance(flt.config["onednn_enabled"], bool) and flt.config["tf_version"].startswith("2.21")
    assert flt.to_text().splitlines()[-1] == f"  measured on: {flt.config['one_line']}"


def test_bounds_are_not_vacuous(dense64):
    # Each quantized variant's measured error uses a visible part of its bound.
    for q in ("dynamic", "float16", "int8"):
        worst = max(o.bound_ratio for o in dense64[1][q].outputs.values())
        assert 0.02 < worst <= 1.0, q
        assert dense64[1][q].vacuous_outputs == (), q   # every bound is under its output's range


def test_float16_variant(dense64):
    c = dense64[1]["float16"]
    assert c.within_bound is True and c.bit_exact is False
    assert c.op_counts["DEQUANTIZE"] == 2  # weight and bias dequantized to float32 at load
    assert c.weights["float16"] == [2, 4160]
    assert 0.5 < c.size_ratio < 0.6
    assert "2^-11" in c.explanation


def test_int8_variant_full_integer(dense64):
    c = dense64[1]["int8"]
    sig = c.signatures["serving_default"]
    assert sig["inputs"]["x"]["dtype"] == "int8"
    assert sig["inputs"]["x"]["quantization"][0] > 0
    # TFLite fixes the int8 softmax output to scale 1/256, zero point -128.
    assert sig["outputs"]["probs"]["quantization"] == (1 / 256, -128)
    assert c.within_bound is True
    probs = c.outputs["probs"]
    steps = probs.bound / probs.quantization[0]
    assert 0.5 < steps < 64  # a small multiple of the output scale
    assert probs.max_abs_error >= probs.quantization[0] / 4
    assert probs.argmax_agreement >= 0.8
    assert "float32" not in c.tensor_dtypes


def test_op_and_dtype_histograms(dense64):
    flt = dense64[1]["none"]
    assert flt.op_counts == {"FULLY_CONNECTED": 1, "SOFTMAX": 1}
    assert flt.flex_ops == () and flt.custom_ops == ()
    assert flt.tensor_dtypes == {"float32": 5}
    assert flt.runtime.startswith("ai_edge_litert")
    assert flt.outputs["probs"].argmax_agreement == 1.0
    text = flt.to_text()
    assert "FULLY_CONNECTED×1" in text and "shape" not in repr(flt)


def test_gradient_cost_is_capped_for_large_outputs(dense64, monkeypatch):
    import tflab
    from tflab.litert import bounds

    monkeypatch.setattr(bounds, "MAX_GRADIENT_ELEMENTS", 100)
    ex = {"x": np.random.default_rng(9).standard_normal((3, 64)).astype(np.float32)}  # 192 elements per output
    c = tflab.tflite_roundtrip(dense64[0].path, ex, "none")
    assert c.within_bound is True
    assert sum("bounds computed by gradient for 100 of 192 elements" in n for n in c.notes) == 2


def test_argmax_agreement_counts_ties():
    from tflab.litert import argmax_agreement

    want = np.array([[0.1, 0.3, 0.2], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6]], np.float32)
    # Row 0: int8 ties classes 1 and 2 at the top value; TF's class 1 is among them, yet a tie is
    # a tie, not an agreement (plain argmax would say class 1 by position only). Row 1 disagrees.
    got = np.array([[0.0, 0.3, 0.3], [0.1, 0.2, 0.3], [0.2, 0.2, 0.6]], np.float32)
    assert argmax_agreement(got, want) == (1 / 3, 1)
    # The same rows without the tie: row 0 agrees.
    assert argmax_agreement(np.array([[0.0, 0.3, 0.2], *got[1:]], np.float32), want) == (2 / 3, 0)
    assert argmax_agreement(want, want) == (1.0, 0)
    # A LiteRT row that is NaN in every class names no class: it disagrees and is no tie
    # (as -inf everywhere it tied all classes); a NaN beside numbers ranks below them.
    nan_rows = np.array([[np.nan] * 3, [np.nan, 0.1, 0.05], [0.2, np.nan, 0.6]], np.float32)
    assert argmax_agreement(nan_rows, want) == (1 / 3, 0)
    assert argmax_agreement(np.full((2, 3), np.nan, np.float32), want[:2]) == (0.0, 0)
    # Where TF itself ties (a softmax of equal logits: 1/3 each), LiteRT agrees when its top classes are
    # TF's very ones or one of them alone; a variant equal to TF bit for bit agrees on every row.
    tf_tie = np.array([[1 / 3, 1 / 3, 1 / 3, 0.0], [0.1, 0.7, 0.2, 0.0]], np.float32)
    assert argmax_agreement(tf_tie, tf_tie) == (1.0, 0)
    assert argmax_agreement(np.array([[0.4, 0.3, 0.3, 0.0], tf_tie[1]], np.float32), tf_tie) == (1.0, 0)
    # a part of TF's tied set (still a tie), and a class outside it (disagrees)
    assert argmax_agreement(np.array([[0.4, 0.4, 0.2, 0.0], tf_tie[1]], np.float32), tf_tie) == (0.5, 1)
    assert argmax_agreement(np.array([[0.0, 0.0, 0.0, 0.9], tf_tie[1]], np.float32), tf_tie) == (0.5, 0)
    # One row as a 1-D array, rows of the last dimension, no rows; bad arrays are one UsageError.
    assert argmax_agreement(got[2], want[2]) == (1.0, 0)
    assert argmax_agreement(got.reshape(1, 3, 3), want.reshape(1, 3, 3)) == (1 / 3, 1)
    assert argmax_agreement(np.zeros((0, 3)), np.zeros((0, 3))) == (1.0, 0)
    from tflab.errors import UsageError

    for bad_got, bad_want in ((got[:2], want), (got[:, :2], want), (np.zeros((2, 0)), np.zeros((2, 0))),
                              (np.array([[None, 1.0]], object), want[:1, :2]), (np.float32(1), np.float32(1))):
        with pytest.raises(UsageError, match="argmax_agreement"):
            argmax_agreement(bad_got, bad_want)


def test_small_weights_stay_float_under_dynamic_range(dense16):
    """E4's other half: < 1024 weights → no int8 weights, size ratio 1.0, same numbers as float."""
    dyn, flt = dense16["dynamic"], dense16["none"]
    assert "int8" not in dyn.weights
    assert dyn.weights["float32"] == [2, 16 * 16 + 16]
    assert dyn.size_ratio == pytest.approx(1.0, abs=0.02)
    assert any("at least 1024 elements" in n for n in dyn.notes)
    assert "1024" in dyn.explanation
    assert dyn.max_abs_error == flt.max_abs_error
    assert dyn.within_bound is True


def test_bad_quantization_name(dense64):
    import tflab

    with pytest.raises(tflab.UsageError, match="not one of none, dynamic, float16, int8"):
        tflab.tflite_roundtrip(dense64[0].path, _examples(64), "int4")


# --------------------------------------------------------------------- tflab export


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One full `tflab export` of the 64×64 model through the CLI (worker processes and all)."""
    from tflab.cli import main

    out = tmp_path_factory.mktemp("export") / "dense64"
    code = main(["export", MODEL_SPEC, "--out", str(out), "--quantize", "none,dynamic"])
    return code, out


def test_export_writes_every_artifact(exported):
    code, out = exported
    assert code == 0
    # .tflab-output: the marker that lets a later --force replace this folder (and only such a one)
    assert sorted(os.listdir(out)) == [".tflab-output", "examples.npz", "model_dynamic.tflite",
                                       "model_none.tflite", "report.json", "saved_model"]
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] is True
    assert report["saved_model"]["bit_exact"] is True
    assert report["variants"]["dynamic"]["check"]["within_bound"] is True
    assert report["variants"]["dynamic"]["check"]["bit_exact"] is False
    assert not [p for p in os.listdir(out.parent) if ".tmp-" in p]


def test_export_refuses_to_overwrite_without_force(exported, run_cli):
    _, out = exported
    before = (out / "report.json").read_text()
    code, stdout, stderr = run_cli("export", MODEL_SPEC, "--out", str(out), "--quantize", "none")
    assert code == 2 and "already exists: pass --force" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert (out / "report.json").read_text() == before


def test_export_force_replaces_atomically(exported, tmp_path, run_cli):
    out = tmp_path / "m"
    out.mkdir()
    (out / "old.txt").write_text("old")
    (out / "report.json").write_text("{}")  # --force replaces only a previous export
    from tflab._io.paths import write_marker

    write_marker(out)  # ... that tflab wrote: its marker lists every entry
    # An export's examples.npz (batches "0/x", "1/x") can be given back.
    examples = str(exported[1] / "examples.npz")
    code, stdout, _ = run_cli("export", MODEL_SPEC, "--out", str(out), "--quantize", "none", "--force", "--json",
                              "--examples", examples)
    assert code == 0
    report = json.loads(stdout)
    assert report["variants"]["none"]["status"] == "ok"
    assert report["saved_model"]["examples"] == 2 and report["examples"] == examples
    assert not (out / "old.txt").exists() and (out / "model_none.tflite").exists()
    assert sorted(os.listdir(tmp_path)) == ["m"]


def test_converter_crash_is_isolated(tmp_path, run_cli, monkeypatch):
    from tflab.litert.workers import CRASH_ENV

    from tflab.litert.pool import schedulable_cpus
    from tflab.process.forks import ForkServer

    # The worker aborts (SIGABRT, as an LLVM fatal error does) on the dynamic variant.
    monkeypatch.setenv(CRASH_ENV, "dynamic")
    monkeypatch.delenv("TFLAB_FORK_WORKERS", raising=False)  # the default: forked workers
    forked = []
    spawn = ForkServer.spawn
    monkeypatch.setattr(ForkServer, "spawn", lambda self, *a, **k: forked.append(spawn(self, *a, **k)) or forked[-1])
    out = tmp_path / "crash"
    code, stdout, stderr = run_cli("export", MODEL_SPEC, "--out", str(out), "--quantize", "dynamic,none")
    assert code == 1
    # With two CPUs, the two workers are forks of one server that imported TF (tflab.process.forks): a
    # crash in one still costs its own variant only.
    if schedulable_cpus() > 1 and sys.platform.startswith("linux"):
        assert len(forked) == 2 and sorted(c.wait(30) for c in forked) == [-signal.SIGABRT, 0]
    assert "crashed" in stdout and "SIGABRT" in stdout
    # The fresh worker converted the variant after the crash; no partial file is left.
    assert sorted(p.name for p in out.glob("model_*")) == ["model_none.tflite"]
    report = json.loads((out / "report.json").read_text())
    assert report["variants"]["dynamic"]["status"] == "crashed"
    assert report["variants"]["none"]["status"] == "ok"
    # What crashed, that the others went on, and how to leave it out; never TF's import-time log lines.
    error = report["variants"]["dynamic"]["error"]
    assert "TF's converter crashed" in error and "--quantize without dynamic" in error, error
    assert "cuInit" not in error and "E0000" not in error, error


def test_export_loads_each_model_kind(models, tmp_path):
    import keras
    import tensorflow as tf

    from tflab.export import load_model

    model = models.keras_two_inputs()
    model.save(tmp_path / "two.keras")
    obj, kind = load_model(str(tmp_path / "two.keras"))
    assert kind == "keras" and isinstance(obj, keras.Model) and len(obj.inputs) == 2
    tf.saved_model.save(models.dense16(), str(tmp_path / "sm"))
    obj, kind = load_model(str(tmp_path / "sm"))
    assert kind == "saved_model" and set(obj.signatures) == {"serving_default"}
    obj, kind = load_model(f"{MODELS}:dense16")
    assert kind == "python" and isinstance(obj, tf.Module)


@pytest.mark.parametrize("case", ["missing", "not_a_model", "corrupt_pb", "corrupt_keras", "examples", "quantize",
                                  "no_such_obj", "text_npz", "bad_zip_keras"])
def test_export_bad_input_is_one_line_exit_2(case, tmp_path, run_cli):
    out = tmp_path / "out"
    args = [MODEL_SPEC]
    if case == "missing":
        args, expect = [str(tmp_path / "nope.keras")], "does not exist"
    elif case == "not_a_model":
        (tmp_path / "folder").mkdir()
        args, expect = [str(tmp_path / "folder")], "without saved_model.pb, so not a SavedModel"
    elif case == "corrupt_pb":
        (tmp_path / "sm").mkdir()
        (tmp_path / "sm" / "saved_model.pb").write_bytes(b"\x00not a protobuf\xff" * 10)
        args, expect = [str(tmp_path / "sm")], "is not a readable SavedModel"
    elif case == "quantize":
        args, expect = [MODEL_SPEC, "--quantize", "none,int4"], "unknown variant(s) 'int4'; use a comma list of none, dynamic, float16, int8"
    elif case == "no_such_obj":
        args, expect = [f"{MODELS}:dense65"], "has no 'dense65' (did you mean 'dense64'?); callables defined there: dense16, dense64"
    elif case == "corrupt_keras":
        (tmp_path / "m.keras").write_bytes(b"PK\x03\x04 truncated zip")
        args, expect = [str(tmp_path / "m.keras")], "is not a valid .keras file: a .keras file is a zip archive"
    elif case == "bad_zip_keras":
        import zipfile

        with zipfile.ZipFile(tmp_path / "m.keras", "w") as z:
            z.writestr("junk.txt", "not a model")
        args, expect = [str(tmp_path / "m.keras")], "is not a loadable .keras file"
    elif case == "text_npz":
        (tmp_path / "ex.npz").write_text("x,y\n1,2\n")
        args += ["--examples", str(tmp_path / "ex.npz")]
        expect = "is not an .npz archive"
    else:
        np.savez(tmp_path / "ex.npz", x=np.ones((2, 63), np.float32))
        args += ["--examples", str(tmp_path / "ex.npz")]
        expect = "examples['x'] has shape [2, 63] but signature 'serving_default' wants x: float32[None,64]"
    code, stdout, stderr = run_cli("export", *args, "--out", str(out))
    assert code == 2
    lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("[export ")]  # progress lines
    assert len(lines) == 1 and lines[0].startswith("tflab export: error:") and expect in lines[0]
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


# ----------------------------------------------------- what users met


@pytest.fixture(scope="module")
def warp_library():
    from _warp_build import load_warp_library_or_skip

    load_warp_library_or_skip()  # skips only without a C++ compiler; a build error fails


# ------------------------------------------- two signatures sharing weights


@pytest.fixture(scope="module")
def predict_and_loss(models, tmp_path_factory):
    """(float flatbuffer, SavedModel path, one example batch) of predict(x) + scalar loss(x, y)."""
    import tflab
    from tflab.litert import convert

    rng = np.random.default_rng(11)
    batch = {"x": rng.standard_normal((4, 64)).astype(np.float32),
             "y": np.eye(32, dtype=np.float32)[[3, 1, 4, 1]]}
    sm = tflab.save_and_reload(models.predict_and_loss(), tmp_path_factory.mktemp("sm08") / "pl", batch)
    assert set(sm.signatures) == {"predict", "loss"}
    return convert(sm.path, "none"), sm.path, batch


def _scaled_softmax(tmp_path, scale: float):
    """SavedModel of softmax(scale·x @ w): 256×4 = 1024 weights, the least dynamic-range quantization takes."""
    import tensorflow as tf

    import tflab

    class ScaledSoftmax(tf.Module):
        def __init__(self):
            super().__init__()
            rng = np.random.default_rng(1)
            self.w = tf.Variable(rng.standard_normal((256, 4)).astype(np.float32) / np.float32(16.0))
            self.serve = tf.function(lambda x: {"probs": tf.nn.softmax(tf.matmul(x * scale, self.w))},
                                     input_signature=[tf.TensorSpec([None, 256], tf.float32, name="x")])

    ex = [{"x": np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)}]
    return tflab.save_and_reload(ScaledSoftmax(), tmp_path / "sm", ex).path, ex
