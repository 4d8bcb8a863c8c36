"""The bound's gradients and the float conversion that `tflab export` stores with its SavedModel.

A later check of the same SavedModel on the same examples reads them (and says so) and states the same
numbers as a check that computes everything again; anything that changed what they were computed from
(a weight, an example, the float flatbuffer's bytes, a damaged file) makes the check compute them again.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "export", "models.py")
STORED = "the gradients stored with this SavedModel by tflab export"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tflab.export import export_model

    out = tmp_path_factory.mktemp("store") / "e"
    report = export_model(f"{MODELS}:dense64", os.fspath(out), quantize=["none", "dynamic"])
    return out, report


def _fresh_check(model_path, saved_model, batches):
    """check_tflite as a new process starts it: no gradients or float reference cached in memory."""
    from tflab.litert import bounds, check

    bounds._SENSITIVITY_CACHE.clear()
    check._FLOAT_MODELS.clear()
    said: list[str] = []
    rep = check.check_tflite(open(model_path, "rb").read(), saved_model, batches, progress=said.append)
    return rep, said


def _numbers(rep):
    outs = {k: (o.bound, o.max_abs_error) for k, o in rep.outputs.items()}
    ops = [(r.index, r.op_type, r.max_abs_error, r.bound, r.verdict) for r in rep.per_op.ops]
    return outs, ops


def _move_a_weight(sm, tmp_path):
    """The same graph file, one weight ×1.5: the SavedModel's variables/ replaced by a re-save's."""
    import tensorflow as tf

    loaded = tf.saved_model.load(os.fspath(sm))
    v = loaded.signatures["serving_default"].variables[0]
    v.assign(v * 1.5)
    tf.saved_model.save(loaded, os.fspath(tmp_path / "resaved"), signatures=loaded.signatures)
    shutil.rmtree(sm / "variables")
    shutil.copytree(tmp_path / "resaved" / "variables", sm / "variables")


def _copy(exported, tmp_path):
    out, report = exported
    dst = tmp_path / "e"
    shutil.copytree(out, dst)
    return dst, report.saved_model.example_batches


def test_a_check_after_export_reads_the_stored_gradients_and_states_the_same_numbers(exported, tmp_path):
    from tflab.litert import bounds

    out, batches = _copy(exported, tmp_path)
    stored, said = _fresh_check(out / "model_dynamic.tflite", out / "saved_model", batches)
    assert any(STORED in line for line in said), said
    assert not any("converting the float reference" in line for line in said), said  # export's none variant
    os.remove(out / "saved_model" / "assets.extra" / "tflab_bound_gradients.npz")
    computed, said_again = _fresh_check(out / "model_dynamic.tflite", out / "saved_model", batches)
    assert not any(STORED in line for line in said_again)
    assert any("backward passes" in line for line in said_again), said_again
    assert _numbers(stored) == _numbers(computed)
    assert stored.within_bound is computed.within_bound is True
    del bounds


def test_the_exports_examples_npz_path_is_the_same_examples(exported, tmp_path):
    """check_tflite given export's examples.npz by path (as the CLI's --examples) reads the stored gradients too."""
    out, batches = _copy(exported, tmp_path)
    by_arrays, _ = _fresh_check(out / "model_dynamic.tflite", out / "saved_model", batches)
    by_path, said = _fresh_check(out / "model_dynamic.tflite", out / "saved_model", out / "examples.npz")
    assert any(STORED in line for line in said), said
    assert _numbers(by_path) == _numbers(by_arrays)


@pytest.mark.parametrize("change", ["weight", "examples", "damaged", "deflate", "negative", "other-tf-budget"])
def test_anything_the_gradients_came_from_changed_means_they_are_computed_again(exported, tmp_path, change,
                                                                              monkeypatch):
    from tflab.litert import bounds

    out, batches = _copy(exported, tmp_path)
    sm = out / "saved_model"
    if change == "weight":  # the same graph, one weight moved: the checkpoint index's CRC changes
        _move_a_weight(sm, tmp_path)
    elif change == "examples":
        batches = [{k: a + np.float32(0.5) for k, a in b.items()} for b in batches]
    elif change == "damaged":
        p = sm / "assets.extra" / "tflab_bound_gradients.npz"
        p.write_bytes(p.read_bytes()[:100])
    elif change == "deflate":  # the zip's structure whole, a compressed member's bytes flipped (zlib.error)
        import zipfile

        p = sm / "assets.extra" / "tflab_bound_gradients.npz"
        with zipfile.ZipFile(p) as z:
            info = z.getinfo("rel0.npy")
        data = bytearray(p.read_bytes())
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        for i in range(start + 2, start + 40):
            data[i] ^= 0xFF
        p.write_bytes(bytes(data))
    elif change == "negative":  # the right key, a sum that cannot be one (|g|·|w| < 0)
        import json

        from tflab.litert import bound_store

        p = sm / "assets.extra" / "tflab_bound_gradients.npz"
        with np.load(p) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["rel0"] = -np.nan_to_num(arrays["rel0"]) - 1.0
        with open(p, "wb") as f:
            np.savez_compressed(f, **arrays)
        assert json.loads(arrays["index"].tobytes())["key"] == bound_store.content_key(
            sm, batches, bounds._budget_now())
    else:
        monkeypatch.setattr(bounds, "MIN_GRADIENT_ELEMENTS", bounds.MIN_GRADIENT_ELEMENTS + 1)
    rep, said = _fresh_check(out / "model_dynamic.tflite", sm, batches)
    assert not any(STORED in line for line in said), said
    assert any("backward passes" in line for line in said), said
    if change == "weight":
        # Computed for the new weights: the stored (old) bound would have been another number.
        old = exported[1].variants["dynamic"].check.outputs
        assert any(rep.outputs[k].bound != old[k].bound for k in old)


def test_a_changed_float_flatbuffer_is_not_the_per_op_reference(exported, tmp_path, monkeypatch):
    """Its SHA-256 is not the one export recorded: the reference is converted again from the SavedModel."""
    from tflab.litert import check
    from tflab.litert.bound_store import float_reference

    out, batches = _copy(exported, tmp_path)
    sm = out / "saved_model"
    good = float_reference(sm)
    assert good == (out / "model_none.tflite").read_bytes()
    data = bytearray(good)
    data[-1] ^= 1
    (out / "model_none.tflite").write_bytes(bytes(data))
    assert float_reference(sm) is None
    converted = []
    real = check.float_reference
    monkeypatch.setattr(check, "float_reference", lambda d: converted.append(d) or real(d))
    rep, said = _fresh_check(out / "model_dynamic.tflite", sm, batches)
    assert converted and rep.per_op is not None and rep.per_op.ops
    assert all(op.verdict == "ok" for op in rep.per_op.ops)  # against the new conversion, not the flipped byte


def test_new_weights_under_the_same_graph_file_are_checked_anew_in_the_same_process(exported, tmp_path):
    """The in-process cache: the same folder and saved_model.pb, other weights (variables/ replaced)."""
    from tflab.litert import bounds, check

    out, batches = _copy(exported, tmp_path)
    sm = out / "saved_model"
    os.remove(sm / "assets.extra" / "tflab_bound_gradients.npz")
    bounds._SENSITIVITY_CACHE.clear()
    check._FLOAT_MODELS.clear()
    model = open(out / "model_dynamic.tflite", "rb").read()
    first = check.check_tflite(model, sm, batches)
    _move_a_weight(sm, tmp_path)
    again = check.check_tflite(model, sm, batches)  # same process: nothing cleared
    fresh, _ = _fresh_check(out / "model_dynamic.tflite", sm, batches)
    assert [o.bound for o in again.outputs.values()] == [o.bound for o in fresh.outputs.values()]
    assert [o.bound for o in again.outputs.values()] != [o.bound for o in first.outputs.values()]
