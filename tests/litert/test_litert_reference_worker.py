"""The float reference converted in a worker beside the bound (`tflab.litert.reference_worker`).

* the worker's bytes are the in-process conversion's, and they stay the per-op reference that
  catches a weight ×1.1 planted in the float flatbuffer under check (and the healthy twin passes);
* below `WORKER_MIN_VARIABLE_BYTES` of variables, ``isolate=None`` starts no worker (a CNN of a few
  KiB converts faster than a worker imports TF); a SavedModel without variables weighs 0.
"""

from __future__ import annotations

import pytest

from test_litert_per_op import _cnn, _examples, _plant, _save


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """(SavedModel, examples, float flatbuffer) of the per-op tests' CNN."""
    from tflab.litert.conversion import convert

    sm = _save(_cnn(), tmp_path_factory.mktemp("reference") / "cnn")
    return sm, _examples((12, 12, 3), n=4), convert(sm, "none")


@pytest.fixture
def cold():
    """Empty bound and reference caches, as a fresh ``tflab check-tflite`` process starts."""
    from tflab.litert import bounds, check

    bounds._SENSITIVITY_CACHE.clear()
    check._FLOAT_MODELS.clear()
    yield check
    bounds._SENSITIVITY_CACHE.clear()
    check._FLOAT_MODELS.clear()


def test_worker_reference_is_the_conversion_and_catches_a_planted_weight(cnn, cold):
    sm, ex, flt = cnn
    planted, index = _plant(flt, "CONV_2D", "weight_x1.1", 1)
    lines: list[str] = []
    bad = cold.check_tflite(planted, sm, [ex], "none", isolate=True, progress=lines.append)
    assert any("worker process" in line for line in lines), lines
    assert cold._FLOAT_MODELS[cold._float_key(sm)] == flt  # the worker converted what convert() makes
    assert bad.per_op is not None and [o.index for o in bad.per_op.outside] == [index], bad.per_op.to_text()
    assert bad.ok is False
    good = cold.check_tflite(flt, sm, [ex], "none", isolate=True)  # the reference is kept: no second worker
    assert good.ok, good.to_text()


def test_small_models_convert_in_process(cnn, cold, monkeypatch, tmp_path):
    from tflab.litert import reference_worker

    sm, ex, _ = cnn
    assert 0 < reference_worker.variable_bytes(sm) < reference_worker.WORKER_MIN_VARIABLE_BYTES
    assert reference_worker.variable_bytes(tmp_path) == 0  # no variables folder
    assert not reference_worker.worth_a_worker(sm)

    started = []
    monkeypatch.setattr(reference_worker, "FloatReferenceWorker", lambda *a, **k: started.append(a) or "worker")
    say = []
    assert reference_worker.reference_beside_bounds(sm, [ex], None, say.append) is None
    assert reference_worker.reference_beside_bounds(sm, [ex], False, say.append) is None
    assert not started and not say
    assert reference_worker.reference_beside_bounds(sm, [ex], True, say.append) == "worker"  # whatever the size
    assert len(started) == 1 and "worker process" in say[0]
