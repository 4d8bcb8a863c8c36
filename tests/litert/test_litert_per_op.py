"""Lab step 8, per op: every TFLite op checked against a float reference on its own inputs.

Defects of the kind converter and kernel regressions produce are planted in
the flatbuffer bytes (a weight or its per-channel scales ×1.1, a non-zero
bias dropped or doubled, 3% of a weight's signs flipped, two output channels
swapped), in each of the four variants; each must be caught at the op that
holds it and only there, because every op is judged on the inputs it really
read. The same models unplanted, and the models of the user reports
(tensorflow#117542 cancellation, ``x * 0.01 + 1`` under float16), must pass.

Models are small (tens of ops at most) and built with non-zero biases:
Keras initializes biases to zero, which would hide a dropped bias.

No test here carries the ``onednn`` marker: every number judged comes from
LiteRT's builtin kernels and the numpy reference, not from TF's CPU kernel
path (TF only exports the models). The bounds hold for any summation order
(``γ_K``), so a different ISA's kernel blocking cannot break them.
"""

from __future__ import annotations

import numpy as np
import pytest

VARIANTS = ("none", "float16", "dynamic", "int8")


# ------------------------------------------------------------------ models


def _nonzero_biases(model, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if any(k in w.path for k in ("bias", "beta", "moving_mean")):
            w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))
        elif "moving_variance" in w.path or "gamma" in w.path:
            w.assign(rng.uniform(0.5, 1.5, w.shape).astype("float32"))


def _mlp():
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((32,), name="x")
    h = keras.layers.Dense(64, activation="relu")(x)
    h = keras.layers.Dense(64, activation="relu")(h)  # 4096 weights: dynamic-range quantizes it
    y = keras.layers.Dense(10)(h)
    return keras.Model(x, y)


def _cnn():
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((12, 12, 3), name="x")
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    h = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(h)  # 2304 weights
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    y = keras.layers.Dense(6, activation="softmax")(h)
    return keras.Model(x, y)


def _mobilenet_block():
    import keras

    keras.utils.set_random_seed(0)
    x = keras.Input((16, 16, 3), name="x")
    h = keras.layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(x)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.ReLU(6.0)(h)
    h = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(h)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.ReLU(6.0)(h)
    h = keras.layers.Conv2D(96, 1, use_bias=False)(h)  # 1536 weights
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Activation("hard_swish")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    y = keras.layers.Dense(10, activation="softmax")(h)
    return keras.Model(x, y)


def _cancellation_module():
    """tensorflow#117542: ``(p1 − p2) @ W2`` with ``p1 = (X@A)@B``, ``p2 = X@(A@B)``: exactly 0."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    a = tf.constant(rng.standard_normal((32, 32)).astype("float32"))
    b = tf.constant(rng.standard_normal((32, 32)).astype("float32"))
    w2 = tf.constant(rng.standard_normal((32, 8)).astype("float32"))

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 32], tf.float32, name="x")])
        def serve(self, x):
            x = tf.identity(x)
            p1 = tf.matmul(tf.matmul(x, a), b)
            p2 = tf.matmul(x, tf.matmul(a, b))
            return {"y": tf.matmul(p1 - p2, w2)}
    return M()


def _scale_module():
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * 0.01 + 1.0}
    return M()


def _save(model, path, keras_model: bool = True) -> str:
    import tensorflow as tf

    if keras_model:
        _nonzero_biases(model)
        model.export(str(path), verbose=False)
    else:
        tf.saved_model.save(model, str(path), signatures={"serving_default": model.serve})
    return str(path)


def _examples(shape, n: int = 8, seed: int = 0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    return {"x": (rng.random((n, *shape)) * scale).astype(np.float32)}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """name → (examples, {variant: flatbuffer bytes}, SavedModel path) for the MLP, CNN and MobileNet-like block."""
    from tflab.litert.conversion import convert

    root = tmp_path_factory.mktemp("per_op")
    out = {}
    for name, build, shape in (("mlp", _mlp, (32,)), ("cnn", _cnn, (12, 12, 3)),
                               ("mobilenet_block", _mobilenet_block, (16, 16, 3))):
        sm = _save(build(), root / name)
        ex = _examples(shape)
        out[name] = (ex, {q: convert(sm, q, [ex]) for q in VARIANTS}, sm)
    return out


def _check(model: bytes, float_model: bytes, ex, q: str):
    from tflab.litert.per_op import check_ops

    return check_ops(model, float_model, {"serving_default": [ex]}, q)


# ------------------------------------------------------------------ planting


def _plant(model: bytes, op_type: str, defect: str, nth: int = -1) -> tuple[bytes, int]:
    """``model`` with one defect in the weight/bias of the ``nth`` ``op_type`` op; returns (bytes, op index)."""
    from tensorflow.lite.tools import flatbuffer_utils

    from tflab._tf.lite import schema

    fb = schema()  # the flatbuffer schema's generated classes (tensorflow/lite/python/schema_py_generated.py)
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(model))
    builtin = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    sg = m.subgraphs[0]
    types = [builtin[max(m.operatorCodes[o.opcodeIndex].builtinCode,
                         m.operatorCodes[o.opcodeIndex].deprecatedBuiltinCode)] for o in sg.operators]
    index = [i for i, t in enumerate(types) if t == op_type][nth]
    op = sg.operators[index]
    np_types = {fb.TensorType.FLOAT32: np.float32, fb.TensorType.FLOAT16: np.float16,
                fb.TensorType.INT8: np.int8, fb.TensorType.INT32: np.int32}

    def source(ti: int) -> int:
        """The constant tensor behind input ``ti`` (through a float16 DEQUANTIZE)."""
        buf = m.buffers[sg.tensors[ti].buffer]
        if buf.data is not None and len(buf.data):
            return ti
        producer = next(o for o in sg.operators if list(o.outputs) == [ti])
        return source(producer.inputs[0])

    def edit(ti: int, fn) -> None:
        t = sg.tensors[ti]
        buf = m.buffers[t.buffer]
        a = np.frombuffer(bytes(bytearray(buf.data)), np_types[t.type]).reshape(t.shape).copy()
        a = fn(a)
        buf.data = np.frombuffer(a.astype(np_types[t.type]).tobytes(), np.uint8)

    w = source(op.inputs[1])
    b = source(op.inputs[2]) if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    wt = sg.tensors[w]
    channel_axis = 3 if op_type == "DEPTHWISE_CONV_2D" else 0
    rng = np.random.default_rng(7)
    if defect == "weight_x1.1":
        if wt.type == fb.TensorType.INT8:
            edit(w, lambda a: np.clip(np.round(a.astype(np.float64) * 1.1), -127, 127))
        else:
            edit(w, lambda a: a * 1.1)
    elif defect == "scale_x1.1":
        wt.quantization.scale = (np.asarray(wt.quantization.scale) * 1.1).tolist()
    elif defect in ("bias_dropped", "bias_doubled"):
        edit(b, (lambda a: a * 0) if defect == "bias_dropped" else (lambda a: a * 2))
    elif defect == "signs_3pct":
        def flip(a):
            mask = rng.random(a.shape) < 0.03
            return np.where(mask, -a.astype(np.float64), a)
        edit(w, flip)
    elif defect == "channels_swapped":
        def swap(a, axis=channel_axis):
            a = np.swapaxes(a, 0, axis).copy()
            a[[0, 1]] = a[[1, 0]]
            return np.swapaxes(a, 0, axis)
        edit(w, swap)
        q = wt.quantization
        if q is not None and q.scale is not None and len(q.scale) > 1:
            s = list(q.scale)
            s[0], s[1] = s[1], s[0]
            q.scale = s
        if b is not None:
            edit(b, lambda a: swap(a, 0))
    else:
        raise ValueError(defect)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m)), index


# The op each model's defects go into: a layer dynamic-range quantizes (≥ 1024 weights).
TARGET = {"mlp": ("FULLY_CONNECTED", 1), "cnn": ("CONV_2D", 1), "mobilenet_block": ("CONV_2D", 1)}
DEFECTS = ("weight_x1.1", "bias_dropped", "bias_doubled", "signs_3pct", "channels_swapped")
CASES = [(m, q, d) for m in ("mlp", "cnn") for q in VARIANTS for d in DEFECTS]
CASES += [(m, q, "scale_x1.1") for m in ("mlp", "cnn") for q in ("dynamic", "int8")]
CASES += [("mobilenet_block", q, d) for q in VARIANTS for d in ("weight_x1.1", "channels_swapped")]


@pytest.mark.parametrize("name,q,defect", CASES, ids=[f"{m}-{q}-{d}" for m, q, d in CASES])
def test_planted_defect_caught_at_its_op(converted, name, q, defect):
    """A defect in one op's weight, scale or bias is outside that op's local bound, and only there.

    Every op is judged on the inputs it actually read, with the float model's
    weights: the op holding the defect sees a reference it cannot agree with,
    and every op after it sees its own (already wrong) inputs, so it is not
    charged. The bias defects use non-zero biases (set by `_nonzero_biases`).
    The mobilenet block's convs have no bias (folded BatchNorm gives them one).
    """
    ex, models, _ = converted[name]
    op_type, nth = TARGET[name]
    planted, index = _plant(models[q], op_type, defect, nth)
    healthy = _check(models[q], models["none"], ex, q)
    assert healthy.ok, healthy.to_text()  # the same model unplanted passes: the check can pass
    r = _check(planted, models["none"], ex, q)
    outside = [o.index for o in r.outside]
    assert outside == [index], (defect, r.to_text())
    assert not r.ok


HEALTHY = [(m, q) for m in ("mlp", "cnn", "mobilenet_block") for q in VARIANTS]


@pytest.mark.parametrize("name,q", HEALTHY, ids=[f"{m}-{q}" for m, q in HEALTHY])
def test_healthy_models_pass_every_op(converted, name, q):
    """Unplanted conversions: every op within its local bound, and every op of these models checked.

    The builtins these Keras models produce (CONV_2D, DEPTHWISE_CONV_2D,
    FULLY_CONNECTED, MEAN, MAX_POOL_2D, HARD_SWISH, SOFTMAX, RESHAPE, ADD, MUL,
    QUANTIZE, DEQUANTIZE ...) all have references, so nothing is left unchecked.
    """
    ex, models, _ = converted[name]
    r = _check(models[q], models["none"], ex, q)
    assert r.ok, r.to_text()
    assert r.unchecked == {}, r.unchecked
    assert r.unmatched == 0
    assert r.checked == len(r.ops)


def test_mobilenet_block_batchnorm_folded_and_matched(converted):
    """BatchNorm is folded into the convs in every variant, so op-by-position matching pairs all ops."""
    from tflab.litert.ops import read_ops

    _, models, _ = converted["mobilenet_block"]
    types = {q: [o.op_type for o in read_ops(b).subgraphs[0] if o.op_type not in ("QUANTIZE", "DEQUANTIZE")]
             for q, b in models.items()}
    assert len({tuple(t) for t in types.values()}) == 1, types
    assert "DEPTHWISE_CONV_2D" in types["none"] and "HARD_SWISH" in types["none"]


def test_cancellation_117542_float_passes_per_op(tmp_path):
    """tensorflow#117542: the exact output is 0, TF float32 itself is ~1e-4 from it; LiteRT float is right.

    The old end-to-end check called the float model thousands of times out of
    bound because the summed gradient cancels along with the output. Per op,
    the SUB is judged on its own two inputs (``u·(|a|+|b|)``: magnitudes), and
    the last matmul on the SUB's actual output, so no op fails.
    """
    from tflab.litert.conversion import convert

    sm = _save(_cancellation_module(), tmp_path / "cancel", keras_model=False)
    ex = _examples((32,), n=4)
    fm = convert(sm, "none")
    r = _check(fm, fm, ex, "none")
    assert r.ok, r.to_text()
    assert r.checked >= 3  # FULLY_CONNECTED/BATCH_MATMUL ×≥2, SUB
    # Conditioning, said plainly: the SUB's output is a tiny fraction of |p1| + |p2|.
    sub = next(o for o in r.ops if o.op_type == "SUB")
    assert sub.condition < 2.0 ** -10 and sub in r.ill_conditioned
    assert r.notes and r.notes[0].startswith("output is ill-conditioned here: SUB")
    # only the cancelling op is flagged: the note does not fire on ordinary ops
    assert not any(o.condition is not None and o.condition < 2.0 ** -10 for o in r.ops if o.op_type != "SUB")


def test_floormod_58206_int8_verdict_and_explanation(tmp_path):
    """tensorflow#58206: int8 ``floormod(bits @ G, 2)``. Every op is right; the flips come from conditioning.

    The FULLY_CONNECTED output is requantized to 256 levels, within one step
    of its reference, and FLOOR_MOD is exact on the input it got: the
    verdict is ok, and the note names the discontinuous op and the
    requantized tensor feeding it (the cause the issue asked to be named).
    """
    import tensorflow as tf

    from tflab.litert.conversion import convert

    rng = np.random.default_rng(0)
    g = tf.constant(rng.integers(0, 2, (16, 8)).astype("float32"))

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.math.floormod(tf.matmul(x, g), 2.0)}

    sm = _save(M(), tmp_path / "floormod", keras_model=False)
    ex = {"x": rng.integers(0, 2, (32, 16)).astype("float32")}
    fm = convert(sm, "none")
    r = _check(convert(sm, "int8", [ex]), fm, ex, "int8")
    assert r.ok, r.to_text()
    assert any("FLOOR_MOD" in n and "FULLY_CONNECTED" in n and "256 levels" in n for n in r.notes), r.notes
    assert not _check(fm, fm, ex, "none").notes  # float: nothing requantized, nothing to say


def test_scale_float16_passes_per_op(tmp_path):
    """``x * 0.01 + 1`` under float16 is right; the constant 0.01 is stored as float16.

    The MUL's bound has the float16 step on its constant operand
    (``2**-11·|x|·|c|``), which the old end-to-end bound left out.
    """
    from tflab.litert.conversion import convert

    sm = _save(_scale_module(), tmp_path / "scale", keras_model=False)
    ex = _examples((8,), n=4, scale=100.0)
    fm = convert(sm, "none")
    f16 = convert(sm, "float16")
    r = _check(f16, fm, ex, "float16")
    assert r.ok, r.to_text()
    # and the check is not vacuous: the constant really is float16 in the flatbuffer
    from tflab.litert.ops import read_ops

    assert any(t.dtype == "float16" for op in read_ops(f16).subgraphs[0] for t in op.inputs if t is not None)
    # a wrong constant there (×1.01: 20× the float16 step) is caught at the MUL
    planted, index = _plant_scalar(f16, 1.01)
    bad = _check(planted, fm, ex, "float16")
    assert [o.index for o in bad.outside] and bad.outside[0].op_type in ("MUL", "ADD"), bad.to_text()


def _plant_scalar(model: bytes, factor: float) -> tuple[bytes, int]:
    """Every float16 constant of ``model`` multiplied by ``factor``."""
    from tensorflow.lite.tools import flatbuffer_utils

    from tflab._tf.lite import schema

    fb = schema()  # the flatbuffer schema's generated classes (tensorflow/lite/python/schema_py_generated.py)
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(model))
    for t in m.subgraphs[0].tensors:
        buf = m.buffers[t.buffer]
        if t.type == fb.TensorType.FLOAT16 and buf.data is not None and len(buf.data):
            a = np.frombuffer(bytes(bytearray(buf.data)), np.float16) * np.float16(factor)
            buf.data = np.frombuffer(a.astype(np.float16).tobytes(), np.uint8)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m)), -1


def test_run_ops_returns_every_intermediate(converted):
    """`run_ops` keeps every tensor: each op's output equals the next op's input it feeds, by tensor index."""
    from tflab.litert.ops import run_ops

    ex, models, _ = converted["cnn"]
    ops = run_ops(models["none"], ex)
    assert [o.op_type for o in ops][:2] == ["CONV_2D", "CONV_2D"]
    for prev, nxt in zip(ops, ops[1:]):
        if nxt.inputs[0] is not None and nxt.inputs[0].index == prev.outputs[0].index:
            np.testing.assert_array_equal(nxt.input_arrays[0], prev.output_arrays[0])
    assert ops[0].output_arrays[0].shape == (8, 12, 12, 16)


# ------------------------------------------------------------------ TFLiteCheck and the CLI


def test_tflite_check_carries_the_per_op_verdict(converted):
    """`check_tflite` runs the per-op pass: ``.ok`` is its verdict, ``.ops`` its records, ``.model`` the bytes."""
    from tflab.litert.check import check_tflite

    ex, models, sm = converted["mlp"]
    good = check_tflite(models["int8"], sm, [ex], "int8", float_model=models["none"])
    assert good.ok is True and len(good.ops) == good.per_op.checked > 0
    assert good.model == models["int8"]
    planted, index = _plant(models["int8"], "FULLY_CONNECTED", "scale_x1.1", 1)
    bad = check_tflite(planted, sm, [ex], "int8", float_model=models["none"])
    assert bad.ok is False and [o.index for o in bad.ops if o.verdict == "OUTSIDE"] == [index]
    # The old verdict (end-to-end, first-order bound summed over all weights) passes this very
    # defect: it is the row "int8 MLP, per-channel weight scales ×1.1 ... caught: no".
    assert bad.within_bound is True
    assert "ok=False" in repr(bad) and "1 outside their bound" in bad.to_text()
    d = bad.to_dict()
    assert d["ok"] is False and d["per_op"]["outside"] == 1 and "model" not in d


@pytest.fixture(scope="module")
def cli_files(converted, tmp_path_factory):
    ex, models, sm = converted["mlp"]
    root = tmp_path_factory.mktemp("check_cli")
    paths = {}
    for q in ("none", "int8"):
        paths[q] = root / f"mlp_{q}.tflite"
        paths[q].write_bytes(models[q])
    paths["bad"] = root / "bad.tflite"
    paths["bad"].write_bytes(_plant(models["int8"], "FULLY_CONNECTED", "weight_x1.1", 1)[0])
    paths["npz"] = root / "ex.npz"
    np.savez(paths["npz"], **ex)
    paths["other_cnn"] = root / "cnn.tflite"
    paths["other_cnn"].write_bytes(converted["cnn"][1]["none"])
    paths["text"] = root / "notes.tflite"
    paths["text"].write_text("not a model\n")
    return sm, paths


def test_cli_check_tflite_exit_codes(run_cli, cli_files):
    """``tflab check-tflite``: 0 for a healthy flatbuffer, 1 for a planted defect (named), JSON on --json."""
    import json

    sm, p = cli_files
    code, out, err = run_cli("check-tflite", str(p["int8"]), sm, "--examples", str(p["npz"]))
    assert code == 0, out + err
    assert "0 outside their bound" in out
    code, out, err = run_cli("check-tflite", str(p["bad"]), sm, "--examples", str(p["npz"]), "--json")
    assert code == 1, err
    d = json.loads(out)
    assert d["ok"] is False and d["quantization"] == "int8" and d["path"].endswith("bad.tflite")
    assert [o["op_type"] for o in d["per_op"]["ops"] if o["verdict"] == "OUTSIDE"] == ["FULLY_CONNECTED"]


@pytest.mark.parametrize("case", ["not_flatbuffer", "signature_mismatch", "missing_examples", "missing_model"])
def test_cli_check_tflite_bad_input_one_line_exit_2(run_cli, cli_files, case):
    """Bad input: one ``tflab check-tflite: error: …`` line, exit 2, before any conversion."""
    sm, p = cli_files
    argv = {"not_flatbuffer": [str(p["text"]), sm],
            "signature_mismatch": [str(p["other_cnn"]), sm],
            "missing_examples": [str(p["none"]), sm, "--examples", str(p["npz"]) + ".missing"],
            "missing_model": [str(p["none"]) + ".missing", sm]}[case]
    code, out, err = run_cli("check-tflite", *argv)
    assert code == 2, (out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tflab check-tflite: error:"), err
    assert "Traceback" not in err
    word = {"not_flatbuffer": "TFLite flatbuffer", "signature_mismatch": "differs",
            "missing_examples": "does not exist", "missing_model": "does not exist"}[case]
    assert word in lines[0], lines[0]


def test_node_data_is_model_explorer_node_data(run_cli, cli_files, tmp_path):
    """``--node-data`` writes what Model Explorer's own builder writes for the same values.

    Rebuilt with ``model_explorer.node_data_builder`` (optional extra
    ``explorer``; skipped without it) from our ratios, the JSON must be equal:
    same keys (output tensor names), values, thresholds (it adds display defaults).
    """
    import json

    ndb = pytest.importorskip("model_explorer.node_data_builder")
    sm, p = cli_files
    out = tmp_path / "nodes.json"
    code, _, err = run_cli("check-tflite", str(p["bad"]), sm, "--examples", str(p["npz"]), "--node-data", str(out))
    assert code == 1, err
    ours = json.loads(out.read_text())
    (graph, data), = ours.items()
    assert max(r["value"] for r in data["results"].values()) > 1  # the planted op is red
    theirs = ndb.ModelNodeData(graphsData={graph: ndb.GraphNodeData(
        results={k: ndb.NodeDataResult(value=v["value"]) for k, v in data["results"].items()},
        thresholds=[ndb.ThresholdItem(value=t["value"], bgColor=t["bgColor"]) for t in data["thresholds"]])})
    built = json.loads(theirs.to_json_string())[graph]
    # the builder adds its display defaults (gradient, hide… flags); the data itself must be equal
    assert {k: built[k] for k in data} == data


def test_an_op_of_constants_is_checked_once_and_the_others_per_batch(converted, monkeypatch):
    """With two example batches, a float16 weight's DEQUANTIZE (constant inputs only: the same output
    for every example) is checked once, every op fed by the examples once per batch; the verdicts
    and errors are those of one batch checked alone where the op is constant."""
    from tflab.litert import per_op

    ex, models, _ = converted["cnn"]
    calls: dict = {}
    real = per_op._check_one

    def counted(op, f_op, quantization, acc):
        calls[(op.op_type, op.index)] = calls.get((op.op_type, op.index), 0) + 1
        return real(op, f_op, quantization, acc)

    monkeypatch.setattr(per_op, "_check_one", counted)
    halves = [{"x": ex["x"][:4]}, {"x": ex["x"][4:]}]
    both = per_op.check_ops(models["float16"], models["none"], {"serving_default": halves}, "float16")
    deq = {k: n for k, n in calls.items() if k[0] == "DEQUANTIZE"}
    fed = {k: n for k, n in calls.items() if k[0] != "DEQUANTIZE"}
    assert deq and set(deq.values()) == {1}
    assert fed and set(fed.values()) == {2}
    calls.clear()
    one = per_op.check_ops(models["float16"], models["none"], {"serving_default": halves[:1]}, "float16")
    for a, b in zip(both.ops, one.ops):
        if a.op_type == "DEQUANTIZE":
            assert (a.verdict, a.max_abs_error, a.ratio) == (b.verdict, b.max_abs_error, b.ratio)
    assert all(o.verdict == "ok" for o in both.ops if o.op_type == "DEQUANTIZE")


def _while_model(tmp_path, weight: float = 1.5):
    """``h ← tanh(h @ w)·0.5 + 0.25`` four times in a tf.while_loop: LiteRT keeps it as a WHILE whose body
    runs FULLY_CONNECTED (reading the loop variable ``h``), TANH, MUL and ADD."""
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.random.default_rng(3).standard_normal((3, 3)).astype(np.float32) * weight)

        @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
        def serve(self, x):
            def body(i, h):
                return i + 1, tf.tanh(tf.matmul(h, self.w)) * 0.5 + 0.25

            _, h = tf.while_loop(lambda i, h: i < 4, body, [tf.constant(0), x])
            return {"y": h}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"serving_default": m.serve})
    from tflab.litert.conversion import convert

    return convert(str(tmp_path / "sm"), "none")


def _plant_in_body(model: bytes, factor: float, op_type: str) -> bytes:
    """``model`` with the float constants of the WHILE body's ``op_type`` ops (subgraph 2 on) scaled by ``factor``."""
    from tensorflow.lite.tools import flatbuffer_utils

    from tflab._tf.lite import schema

    fb = schema()
    m = flatbuffer_utils.read_model_from_bytearray(bytearray(model))
    builtin = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    for sg in m.subgraphs[2:]:
        for o in sg.operators:
            code = m.operatorCodes[o.opcodeIndex]
            if builtin[max(code.builtinCode, code.deprecatedBuiltinCode)] != op_type:
                continue
            for ti in o.inputs:
                t = sg.tensors[ti] if ti >= 0 else None
                buf = m.buffers[t.buffer] if t is not None else None
                if t is not None and t.type == fb.TensorType.FLOAT32 and buf.data is not None and len(buf.data):
                    a = np.frombuffer(bytes(bytearray(buf.data)), np.float32) * np.float32(factor)
                    buf.data = np.frombuffer(a.astype(np.float32).tobytes(), np.uint8)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


def test_a_while_body_is_checked_op_by_op_on_its_last_iteration(tmp_path):
    """The WHILE was "unchecked" with its whole body. Its body's ops that read only what the body wrote
    (TANH, MUL, ADD) are checked on the last iteration; the ops that read a loop variable (the
    FULLY_CONNECTED on ``h``, the counter's ADD) have their weights compared with the float model's
    (LiteRT hands the next value to their input buffer, so their outputs cannot be). Healthy: the
    WHILE stays unchecked (not all of it was), the note says how far it was checked. Planted: the
    MUL's constant ×1.01 is OUTSIDE at the checked op; the recurrent kernel ×1.1 (the FC reading
    ``h``) is OUTSIDE at its weight, named."""
    from tflab.litert.ops import read_ops
    from tflab.litert.per_op import check_ops

    model = _while_model(tmp_path)
    parsed = read_ops(model)
    assert [o.op_type for o in parsed.subgraphs[0]] == ["WHILE"]
    assert [o.op_type for o in parsed.subgraphs[2]] == ["ADD", "FULLY_CONNECTED", "TANH", "MUL", "ADD"]
    x = {"x": np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)}
    ok = check_ops(model, model, {"serving_default": [x]}, "none")
    (loop,) = [o for o in ok.ops if o.op_type == "WHILE"]
    assert loop.verdict == "unchecked" and "3 of its body's 5 ops checked on the loop's last iteration" in loop.reason
    assert "2 read a loop variable" in loop.reason and "(1 with weights)" in loop.reason
    mul = check_ops(_plant_in_body(model, 1.01, "MUL"), model, {"serving_default": [x]}, "none")
    (loop,) = [o for o in mul.ops if o.op_type == "WHILE"]
    assert loop.verdict == "OUTSIDE" and loop.ratio > 10, loop
    assert any("the worst, MUL #3" in n for n in mul.notes), mul.notes
    fc = check_ops(_plant_in_body(model, 1.1, "FULLY_CONNECTED"), model, {"serving_default": [x]}, "none")
    (loop,) = [o for o in fc.ops if o.op_type == "WHILE"]
    assert loop.verdict == "OUTSIDE" and loop.ratio > 1e3, loop
    (note,) = [n for n in fc.notes if n.startswith("WHILE #0:")]
    assert "FULLY_CONNECTED #1" in note and "its weight" in note and "differs from the float model's" in note


def test_a_recurrent_weight_defect_is_the_cause_named_in_the_loop_body(tmp_path):
    """check_tflite on a model whose loop-body kernel was changed (×1.1) names that constant as the
    cause, in its body op, where it said "kernel at WHILE" (a WHILE's own inputs hold no weight); the
    healthy model has no cause."""
    from tflab.litert.check import check_tflite

    model = _while_model(tmp_path)
    x = {"x": np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)}
    healthy = check_tflite(model, tmp_path / "sm", x, "none", float_model=model)
    assert healthy.cause is None
    bad = check_tflite(_plant_in_body(model, 1.1, "FULLY_CONNECTED"), tmp_path / "sm", x, "none", float_model=model)
    assert bad.cause is not None and bad.cause.kind == "constant", bad.cause
    assert "in FULLY_CONNECTED #1 of WHILE #0's body (subgraph 2)" in bad.cause.detail
