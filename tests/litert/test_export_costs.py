"""The export's repeated work, done once: each .tflite parsed once, the SavedModel loaded once per process.

* one `check_tflite` of a quantized variant reads its bytes and the float
  reference's through ``read_ops``/``analyze_flatbuffer``/``read_graphs`` a dozen
  times; the schema's object API (``ModelT.InitFromPackedBuf``) now runs once per
  distinct model, and a changed byte (a planted defect) is a new model, parsed again;
* the shared parse equals a fresh one field by field, and its arrays are read-only,
  so no caller can change what the next one reads;
* the converter tflab builds from the keys of the SavedModel it already loaded
  gives the same bytes as ``tf.lite.TFLiteConverter.from_saved_model`` (its
  conversion metadata included) without that call's own ``tf.saved_model.load``;
* `tflab.litert.float_tensors._downstream` with its memo walks the same ancestors
  as the walk it replaced (reimplemented here as it was).

Every number asserted is a count or a comparison made in the same run.
"""

from __future__ import annotations

import numpy as np
import pytest

from test_litert_per_op import _cnn, _examples, _plant, _save


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """(SavedModel, examples, {variant: bytes}) of the per-op tests' CNN."""
    from tflab.litert.conversion import convert

    sm = _save(_cnn(), tmp_path_factory.mktemp("costs") / "cnn")
    ex = _examples((12, 12, 3), n=8)
    return sm, ex, {q: convert(sm, q, [ex]) for q in ("none", "dynamic")}


@pytest.fixture
def unpacks(monkeypatch):
    """Counts the schema's object-API parses (``ModelT.InitFromPackedBuf``), from empty caches."""
    from tflab._tf import lite
    from tflab.litert import flatbuffer_notes, ops

    fb = lite.schema()  # tensorflow/lite/python/schema_py_generated.py
    lite._unpack.cache_clear()
    ops._parse_ops.cache_clear()
    flatbuffer_notes.read_graphs.cache_clear()
    calls = []
    real = fb.ModelT.InitFromPackedBuf

    def counted(buf, pos=0):
        calls.append(len(buf))
        return real(buf, pos)

    monkeypatch.setattr(fb.ModelT, "InitFromPackedBuf", staticmethod(counted))
    yield calls
    lite._unpack.cache_clear()  # nothing parsed through the counter stays behind
    ops._parse_ops.cache_clear()
    flatbuffer_notes.read_graphs.cache_clear()


def test_a_check_parses_each_flatbuffer_once(cnn, unpacks, monkeypatch):
    """check_tflite of the dynamic variant against the float one: two models, two parses."""
    from tflab.litert import ops
    from tflab.litert.check import check_tflite

    sm, ex, models = cnn
    reads = []
    real_read = ops.read_ops
    monkeypatch.setattr(ops, "read_ops", lambda m: reads.append(1) or real_read(m))
    c = check_tflite(models["dynamic"], sm, [ex], "dynamic", float_model=models["none"])
    assert c.per_op is not None and c.attribution is not None, c.notes  # the passes that read the models ran
    assert len(reads) >= 4, reads  # asked for again and again ...
    assert len(unpacks) == 2 and set(unpacks) == {len(models["dynamic"]), len(models["none"])}, unpacks  # once each
    check_tflite(models["dynamic"], sm, [ex], "dynamic", float_model=models["none"])
    assert len(unpacks) == 2, unpacks  # a second check of the same bytes parses nothing


def test_a_changed_byte_is_another_model(cnn, unpacks):
    """The cache is keyed by content: a planted weight is parsed anew and read as planted."""
    from tflab.litert.ops import read_ops

    _, _, models = cnn
    planted, index = _plant(models["none"], "CONV_2D", "weight_x1.1", 1)
    assert planted != models["none"]
    healthy, bad = read_ops(models["none"]), read_ops(bytearray(planted))
    assert len(unpacks) == 2, unpacks
    w_ok = healthy.subgraphs[0][index].inputs[1].constant
    w_bad = bad.subgraphs[0][index].inputs[1].constant
    np.testing.assert_allclose(w_bad, w_ok * np.float32(1.1), rtol=1e-6)
    assert read_ops(bytes(bytearray(models["none"]))) is healthy  # equal bytes, another object: the same parse


def test_the_shared_parse_equals_a_fresh_one_and_is_read_only(cnn):
    from tflab.litert import ops

    _, _, models = cnn
    for q, model in models.items():
        shared, fresh = ops.read_ops(model), ops._parse_ops.__wrapped__(model)
        assert shared.signatures == fresh.signatures
        for sa, sb in zip(shared.subgraphs, fresh.subgraphs, strict=True):
            for a, b in zip(sa, sb, strict=True):
                assert (a.index, a.op_type, type(a.options)) == (b.index, b.op_type, type(b.options))
                for ta, tb in zip((*a.inputs, *a.outputs), (*b.inputs, *b.outputs), strict=True):
                    if ta is None:
                        assert tb is None
                        continue
                    assert (ta.index, ta.name, ta.dtype, ta.shape, ta.quantized_dimension) == \
                           (tb.index, tb.name, tb.dtype, tb.shape, tb.quantized_dimension)
                    np.testing.assert_array_equal(ta.scale, tb.scale)
                    np.testing.assert_array_equal(ta.zero_point, tb.zero_point)
                    assert (ta.constant is None) == (tb.constant is None)
                    if ta.constant is not None:
                        assert ta.constant.tobytes() == tb.constant.tobytes()
    quantized = next(t for op in ops.read_ops(models["dynamic"]).subgraphs[0] for t in op.inputs
                     if t is not None and t.quantized)
    with pytest.raises(ValueError, match="read-only"):
        quantized.scale[0] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        quantized.constant.flat[0] = 0


def test_converter_from_loaded_keys_is_from_saved_models(cnn):
    """Same bytes as TF's from_saved_model, and no tf.saved_model.load of its own."""
    import tensorflow as tf

    from tflab._tf.lite import (conversion_model_type, counting_saved_model_loads, from_saved_model_keys,
                                saved_model_converter_class)
    from tflab.litert.conversion import _converter
    from tflab.saved_model import load_saved_model

    sm, _, models = cnn
    loaded = load_saved_model(sm)
    assert sorted(loaded.signatures) == ["serve", "serving_default"]
    assert from_saved_model_keys(loaded) == ["serving_default"]  # a model.export artifact: TF's rule
    with counting_saved_model_loads() as loads:  # tensorflow/lite/python/lite.py's _load
        theirs = tf.lite.TFLiteConverter.from_saved_model(sm)
        assert len(loads) == 1  # TF loads the SavedModel in Python to read its keys ...
        conv = _converter(sm)
        assert len(loads) == 1  # ... tflab reads them off the load it keeps (convert() itself loads once more)
    assert type(conv) is type(theirs) is saved_model_converter_class()  # lite.TFLiteSavedModelConverterV2
    assert conversion_model_type(theirs) == conversion_model_type(conv) == "TF_SAVED_MODEL"
    with counting_saved_model_loads() as loads:
        want, got = theirs.convert(), conv.convert()
    assert len(loads) == 2  # TF's convert() loads the SavedModel in Python for its debug info
    assert got == want and got == models["none"]


@pytest.mark.parametrize("quantization", ["none", "dynamic", "float16", "int8"])
def test_convert_reuses_the_kept_load_for_the_debug_info_and_writes_the_same_bytes(cnn, quantization):
    """`convert` lends the converter's ``_load`` the load tflab keeps: no Python load (the
    converter's own would be counted), and the bytes of a plain ``convert()`` for every recipe."""
    from tflab._tf.lite import counting_saved_model_loads
    from tflab.litert.conversion import convert, make_converter

    sm, examples, models = cnn
    with counting_saved_model_loads() as loads:
        got = convert(sm, quantization, [examples])
    assert loads == []
    want = make_converter(sm, quantization, [examples]).convert()  # TF's own load of the folder
    assert got == want


def test_module_with_two_signatures_keeps_both_keys(tmp_path):
    """A tf.Module saved with two signatures and no ``serve``: every key, as from_saved_model converts."""
    import tensorflow as tf

    from tflab._tf.lite import from_saved_model_keys
    from tflab.litert.conversion import convert
    from tflab.litert.ops import read_ops
    from tflab.saved_model import load_saved_model

    class Two(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def double(self, x):
            return {"y": x * self.w}

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def plus(self, x):
            return {"y": x + self.w}

    m = Two()
    path = str(tmp_path / "two")
    tf.saved_model.save(m, path, signatures={"double": m.double, "plus": m.plus})
    assert sorted(from_saved_model_keys(load_saved_model(path))) == ["double", "plus"]
    assert sorted(read_ops(convert(path, "none")).signatures) == ["double", "plus"]


def _old_walk(candidates, graph):
    """The ancestor walk `_downstream` did before its memo (the same cut at 2000 nodes)."""
    if len(candidates) == 1:
        return candidates[0]
    ancestors = {}
    for c in candidates:
        seen, todo = set(), [graph.get_operation_by_name(c)]
        while todo and len(seen) < 2000:
            op = todo.pop()
            for t in op.inputs:
                if t.op.name not in seen:
                    seen.add(t.op.name)
                    todo.append(t.op)
        ancestors[c] = seen
    for c in candidates:
        if all(c == d or d in ancestors[c] for d in candidates):
            return c
    return candidates[0]


def test_downstream_with_memo_picks_what_the_old_walk_picked():
    """On a chain of 3000 ops (past the 2000-node cut) and a diamond, every candidate order."""
    import itertools

    import tensorflow as tf

    from tflab.litert.float_tensors import _downstream

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        h = x
        for i in range(3000):
            h = tf.identity(h, name=f"c{i}")
        a = tf.math.abs(x, name="a")
        b = tf.math.negative(x, name="b")
        tf.math.add(a, b, name="join")
    memo: dict = {}
    sets = [["c10", "c2999", "c1500"], ["c2999", "c0"], ["c500", "c2999"], ["a", "b"], ["a", "join", "b"], ["join", "x"]]
    for cands in sets:
        for order in itertools.permutations(cands):
            order = list(order)
            assert _downstream(order, g, memo) == _old_walk(order, g) == _downstream(order, g), order
    assert _downstream(["c1500", "c2999"], g, memo) == "c2999"  # within 2000 nodes: found upstream
    # 2999 nodes apart: the walk stops at 2000, finds neither above the other, keeps the first (as before)
    assert _downstream(["c0", "c2999"], g, memo) == "c0" and _downstream(["c2999", "c0"], g, memo) == "c2999"
    assert _downstream(["c500", "c2999"], g, memo) == "c500"  # 2499 apart: beyond the cut too
    assert _downstream(["a", "join", "b"], g, memo) == "join"


# ------------------------------------------------ weights prepared once, calibration kept once


def _conv_as_it_was(x, w, b, o):
    """The CONV_2D reference as written before the weights were prepared once (np.tensordot per call)."""
    from tflab.litert.references import _act, _fused, _windows

    win, _ = _windows(x, w.shape[1], w.shape[2], o.strideH, o.strideW, 1, 1, o.padding)
    wt = np.transpose(w, (3, 1, 2, 0))
    y = np.tensordot(win, wt, axes=([3, 4, 5], [0, 1, 2]))
    aw = np.abs(win)
    dot = np.tensordot(aw, np.abs(wt), axes=([3, 4, 5], [0, 1, 2]))
    return _act(y + b, _fused(o)), dot + np.abs(b), aw.sum(axis=(3, 4, 5)), np.abs(w).sum(axis=(1, 2, 3))


def test_prepared_conv_weights_give_tensordots_bits_and_never_another_weights():
    """Within one check a weight is laid out once; its products equal np.tensordot's to the bit, and a
    second weight of the same shape (a planted one) gets its own products, not the first one's."""
    from types import SimpleNamespace

    from tflab.litert.references import PREPARED, reference

    rng = np.random.default_rng(0)
    o = SimpleNamespace(strideH=2, strideW=1, dilationHFactor=1, dilationWFactor=1, padding=0,
                        fusedActivationFunction=1)
    x = rng.standard_normal((2, 7, 6, 5))
    w, b = rng.standard_normal((4, 3, 3, 5)), rng.standard_normal(4)
    planted = w * 1.1
    with PREPARED.keeping():
        for weight in (w, w, planted, w):  # the same object again, then another one, then back
            y, terms = reference("CONV_2D", o, [x, weight, b], (2, 4, 6, 4))
            want_y, want_dot, want_x, want_w = _conv_as_it_was(x, weight, b, o)
            assert y.tobytes() == want_y.tobytes() and terms.dot.tobytes() == want_dot.tobytes()
            assert np.array_equal(terms.x_abs[..., 0], want_x) and np.array_equal(terms.w_abs[0, 0, 0], want_w)
            y_only, bare = reference("CONV_2D", o, [x, weight, b], (2, 4, 6, 4), terms=False)
            assert y_only.tobytes() == y.tobytes() and bare.dot is None and bare.k == terms.k
        assert PREPARED._entries  # kept while the check runs ...
    assert not PREPARED._entries  # ... and dropped when it ends


def test_per_op_check_and_simulation_are_the_same_with_weights_prepared_once(cnn, monkeypatch):
    """The per-op rows and the simulated tensors equal those of a run that prepares every weight anew;
    each pass says it starts on the progress line of the work around it (none outside one)."""
    from tflab._io.progress import reporting
    from tflab.litert.per_op import check_ops
    from tflab.litert.references import PREPARED
    from tflab.litert.simulate import simulation_check

    _, ex, models = cnn
    feeds = {"serving_default": [ex, {k: v[:3] for k, v in ex.items()}]}

    def both():
        return (check_ops(models["dynamic"], models["none"], feeds, "dynamic").to_dict(),
                simulation_check(models["dynamic"], models["none"], feeds, "dynamic").to_dict())

    def strip(d):  # wall time is the one field that may differ
        return {k: strip(v) for k, v in d.items() if k != "seconds"} if isinstance(d, dict) else d

    lines: list[str] = []
    with reporting(lines.append):  # the export's progress line hears each of these long passes
        kept = both()
    assert [ln.split(",")[0] for ln in lines] == ["dynamic: per-op check", "dynamic: simulating its quantization end "
                                                  "to end (1 + 3 dithered runs per example batch)"], lines
    monkeypatch.setattr(PREPARED, "MAX_BYTES", 0)  # nothing kept: every call prepares its weight
    assert strip(both()[0]) == strip(kept[0]) and strip(both()[1]) == strip(kept[1])


def test_the_debugger_starts_from_the_int8_conversions_own_calibration(cnn):
    """The calibrated model kept from the int8 conversion is the debugger's own calibrate-only conversion,
    byte for byte; other examples (another representative dataset) find none, and the variant is unchanged."""
    import tensorflow as tf

    from tflab.litert.conversion import convert, make_converter, recorded_calibration

    sm, ex, _ = cnn
    plain = convert(sm, "int8", [ex])
    assert recorded_calibration(sm, [ex]) is None  # not asked to keep it: nothing kept
    kept = convert(sm, "int8", [ex], keep_calibration=True)
    assert kept == plain
    other = {k: v * 2 for k, v in ex.items()}
    assert recorded_calibration(sm, [other]) is None  # calibrated on other rows: not this one
    calibrated = recorded_calibration(sm, [ex])
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=make_converter(sm, "int8", [ex]),
        debug_dataset=lambda: ([v[i:i + 1] for v in ex.values()] for i in range(len(next(iter(ex.values()))))))
    assert calibrated is not None and calibrated == debugger.calibrated_model


def test_the_workers_debugger_models_are_the_debuggers_own(cnn):
    """`debugger_models` quantizes the calibration as QuantizationDebugger does (fully_quantize, the
    export's option): its instrumented model and its plain model, byte for byte; and the denylisted
    model `quantize_calibrated` makes is the debugger's own with that option."""
    import tensorflow as tf

    from tflab._tf.calibration import debugger_models, quantize_calibrated
    from tflab.litert.conversion import make_converter

    sm, ex, _ = cnn
    rows = len(next(iter(ex.values())))
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=make_converter(sm, "int8", [ex]),
        debug_dataset=lambda: ([v[i:i + 1] for v in ex.values()] for i in range(rows)),
        debug_options=tf.lite.experimental.QuantizationDebugOptions(fully_quantize=True))
    made = debugger_models(debugger.calibrated_model)
    assert made["debug"] == debugger.quant_model
    assert made["nondebug"] == debugger.get_nondebug_quantized_model()
    from tflab.litert.ops import read_ops

    first = next(op for op in read_ops(made["nondebug"]).subgraphs[0] if op.op_type == "CONV_2D")
    name = first.outputs[0].name
    debugger._debug_options = tf.lite.experimental.QuantizationDebugOptions(  # what nondebug_model did
        fully_quantize=True, denylisted_nodes=[name])
    denied = quantize_calibrated(debugger.calibrated_model, denylisted_nodes=[name])
    assert denied == debugger.get_nondebug_quantized_model() and denied != made["nondebug"]


def test_an_export_takes_the_debugger_models_from_the_int8_worker(cnn, tmp_path, monkeypatch):
    """With worker processes, the int8 worker quantizes the debugger's two models after its conversions:
    the export's own process quantizes once (the denylisted model), the kept-float fix is measured,
    and no worker file is left in the published folder."""
    from tflab._tf import calibration
    from tflab.export import export_model
    from tflab.saved_model import load_saved_model

    sm, ex, _ = cnn
    calls = []
    real = calibration.quantize_calibrated

    def counted(calibrated, **kw):
        calls.append(kw)
        return real(calibrated, **kw)

    monkeypatch.setattr(calibration, "quantize_calibrated", counted)
    lines = []
    report = export_model(load_saved_model(sm), tmp_path / "out", quantize=["none", "int8"], examples=ex,
                          progress=lines.append)
    kept = report.variants["int8"].check.attribution.kept_float
    assert kept is not None and kept.kept and kept.error_after < kept.error_before
    assert [bool(kw.get("denylisted_nodes")) for kw in calls] == [True]  # debug and plain came from the worker
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if ".part" in p.name or ".tmp" in p.name) == []


def test_the_pool_event_is_none_when_the_worker_ends_without_it():
    """`ConversionPool.event` returns a worker's later event, and None (no wait forever) when the worker
    converting that variant ended without reporting it."""
    from tflab.litert.pool import ConversionPool

    def convert(subset, done):
        for q in subset:
            done(q, {"event": "done"})
            if q == "int8":
                done("int8/debugger", {"event": "debugger", "files": {}})

    pool = ConversionPool(["none", "int8"], convert, workers=2)
    assert pool.event("int8", "debugger") == {"event": "debugger", "files": {}}
    assert pool.event("none", "debugger") is None
    pool.join()
