"""Every verb agrees with plain TF and LiteRT on real third-party architectures.

Small versions of the architectures users bring, built from their classes with
random weights (no download): the Keras applications MobileNetV2 (alpha 0.35)
and ResNet50 at 32×32 (their minimum input), keras-hub's BERT, GPT-2, ViT and Gemma backbones from tiny configs
(skipped when keras-hub is not installed), and a Keras LSTM. Each verb's
answer is compared with the same work done in plain TF or LiteRT: inspect's op
counts with the FuncGraph's, retrace's trace counts with
``experimental_get_tracing_count()``, compare_modes' ULP with eager/graph/XLA
runs made here, stabilize's outputs with eager's, and export's max|Δ| with a
plain LiteRT ``Interpreter`` run of the file it wrote against its SavedModel. One model per verb keeps
the module cheap; each model is built once (module-scoped fixtures).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

IMAGE = (32, 32, 3)   # the smallest input every keras.applications class here accepts
CLASSES = 10


def _ulp(a, b) -> int:
    """Largest ULP distance between two float32 arrays, computed here from their bits (not tflab's)."""
    a = np.ascontiguousarray(a, np.float32).ravel().view(np.int32).astype(np.int64)
    b = np.ascontiguousarray(b, np.float32).ravel().view(np.int32).astype(np.int64)
    a = np.where(a < 0, -(a & 0x7FFFFFFF), a)
    b = np.where(b < 0, -(b & 0x7FFFFFFF), b)
    return int(np.max(np.abs(a - b))) if a.size else 0


def _floats(y) -> list:
    import tensorflow as tf

    return [np.asarray(v) for v in tf.nest.flatten(y) if v.dtype.is_floating]


def _application(name: str, **kwargs):
    import keras

    from tflab.models import calibrate_batch_norm

    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=IMAGE, classes=CLASSES,
                                              classifier_activation=None, **kwargs)
    # BatchNormalization's default moving statistics (mean 0, variance 1) make a random-weight CNN's
    # signal vanish through depth, every output the same value: no ULP or max|Δ| would mean anything.
    # One training-mode batch sets them as training would.
    calibrate_batch_norm(model, _images(4, 123))
    return model


def _images(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, *IMAGE)).astype(np.float32)


@pytest.fixture(scope="module")
def lstm():
    """A Keras LSTM(8) + Dense(3) on sequences of 6 steps of 4 features: retrace and compare_modes share it."""
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((6, 4)), keras.layers.LSTM(8), keras.layers.Dense(3)])


@pytest.fixture(scope="module")
def keras_hub():
    return pytest.importorskip("keras_hub", reason="keras-hub is not installed (pip install -e '.[test]')")


def _tokens(batch: int, seed: int, segments: bool = False) -> dict:
    """Valid ids: tokens < the vocabulary of 100, segment ids in {0, 1}, a mask of ones."""
    rng = np.random.default_rng(seed)
    feed = {"token_ids": rng.integers(0, 100, (batch, 8)).astype(np.int32),
            "padding_mask": np.ones((batch, 8), np.int32)}
    if segments:
        feed["segment_ids"] = rng.integers(0, 2, (batch, 8)).astype(np.int32)
    return feed


# ---------------------------------------------------------------------------------------------
# inspect: the FuncGraph's op counts and captured variables, as TF's own ConcreteFunction has them
# ---------------------------------------------------------------------------------------------


def _inspect_matches_tf(fn, *specs, **kwspecs) -> None:
    import tensorflow as tf

    import tflab

    report = tflab.trace_and_inspect(fn, *specs, **kwspecs)
    graph = report.concrete_function.graph
    plain = tf.function(fn).get_concrete_function(*specs, **kwspecs)
    assert dict(report.op_counts) == dict(collections.Counter(op.type for op in plain.graph.get_operations()))
    assert len(report.ops) == len(graph.get_operations())
    assert len(report.variables) == len(plain.variables)
    assert sum(v.bytes for v in report.variables) == sum(v.dtype.size * int(np.prod(v.shape)) for v in plain.variables)


def test_inspect_counts_resnet50_ops_and_variables_as_tf_does():
    import tensorflow as tf

    model = _application("ResNet50")
    _inspect_matches_tf(lambda x: model(x, training=False), tf.TensorSpec([None, *IMAGE], tf.float32))


def test_inspect_counts_gpt2_ops_and_variables_as_tf_does(keras_hub):
    import tensorflow as tf

    model = keras_hub.models.GPT2Backbone(vocabulary_size=100, num_layers=1, num_heads=2, hidden_dim=16,
                                          intermediate_dim=32, max_sequence_length=8)
    spec = tf.TensorSpec([None, 8], tf.int32)
    _inspect_matches_tf(lambda token_ids, padding_mask: model({"token_ids": token_ids, "padding_mask": padding_mask}),
                        token_ids=spec, padding_mask=spec)


# ---------------------------------------------------------------------------------------------
# retrace: the probe's trace count is TF's own, its reason names the dim that changed, and its
# input_signature fix is checked on the calls' values against eager
# ---------------------------------------------------------------------------------------------


def test_retrace_on_an_lstm_gives_tfs_count_the_changed_dim_and_a_checked_fix(lstm):
    import tensorflow as tf

    import tflab
    from tflab import fix as fx

    model = lstm
    batches = [np.random.default_rng(b).standard_normal((b, 6, 4)).astype(np.float32) for b in (1, 2, 3)]

    def serve(x):
        return model(x, training=False)

    plain = tf.function(serve)
    for x in batches:
        plain(x)
    probe = tflab.RetraceProbe(tf.function(serve))
    for x in batches:
        probe(x)
    traces = probe.traces
    assert probe.trace_count == int(plain.experimental_get_tracing_count()) == len(traces) == 3
    assert "dim 0: 1 -> 2" in " ".join(traces[1].reasons)
    record = traces[1].details[0].fix_record
    assert "input_signature" in record.change
    assert record.status == fx.CHECKED, record.result


# ---------------------------------------------------------------------------------------------
# stabilize: one trace for every batch size, and the outputs of eager on every call
# ---------------------------------------------------------------------------------------------


def _stabilize_matches_plain_tf(serve, calls) -> None:
    import tensorflow as tf

    import tflab

    step = tflab.stabilize(serve, examples=calls)
    outs = [_floats(step(*c)) for c in calls]
    assert int(step.experimental_get_tracing_count()) == 1
    specs = tf.nest.flatten(step.input_signature)
    assert [s.shape.as_list() for s in specs] == [[None, *np.shape(a)[1:]] for a in calls[0]]
    plain = tf.function(serve, input_signature=step.input_signature)  # what TF runs with that signature
    for got, c in zip(outs, calls):
        want = _floats(plain(*c))
        assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_stabilize_mobilenetv2_one_trace_and_plain_tfs_outputs():
    model = _application("MobileNetV2", alpha=0.35)  # its smallest width
    _stabilize_matches_plain_tf(lambda x: model(x, training=False), [(_images(b, 10 + b),) for b in (1, 2, 3)])


def test_stabilize_gemma_one_trace_and_plain_tfs_outputs(keras_hub):
    model = keras_hub.models.GemmaBackbone(vocabulary_size=100, num_layers=1, num_query_heads=2,
                                           num_key_value_heads=1, hidden_dim=16, intermediate_dim=32, head_dim=8)

    def serve(token_ids, padding_mask):
        return model({"token_ids": token_ids, "padding_mask": padding_mask}, training=False)

    _stabilize_matches_plain_tf(serve, [tuple(_tokens(b, b).values()) for b in (1, 2, 3)])


# ---------------------------------------------------------------------------------------------
# compare_modes: graph's and XLA's ULP from eager, as plain TF runs of the three modes measure them
# ---------------------------------------------------------------------------------------------


def _modes_match_plain_tf(serve, *args, **kwargs) -> None:
    import tensorflow as tf

    import tflab

    eager = _floats(serve(*args, **kwargs))
    graph = _floats(tf.function(serve)(*args, **kwargs))
    xla = _floats(tf.function(serve, jit_compile=True)(*args, **kwargs))
    plain = {"graph": max(_ulp(a, b) for a, b in zip(eager, graph)),
             "xla": max(_ulp(a, b) for a, b in zip(eager, xla))}
    m = tflab.compare_modes(serve, *args, gradients=False, hlo=False, repeats=1, attribute=False, **kwargs)
    assert {mode: m.modes[mode].ulp.outputs for mode in ("graph", "xla")} == plain


def test_compare_modes_lstm_ulp_is_plain_tfs(lstm):
    x = np.random.default_rng(7).standard_normal((2, 6, 4)).astype(np.float32)
    _modes_match_plain_tf(lambda x: lstm(x, training=False), x)


def test_compare_modes_bert_ulp_is_plain_tfs(keras_hub):
    model = keras_hub.models.BertBackbone(vocabulary_size=100, num_layers=1, num_heads=2, hidden_dim=16,
                                          intermediate_dim=32, max_sequence_length=8)

    def serve(token_ids, segment_ids, padding_mask):
        return model({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask},
                     training=False)

    feed = _tokens(2, 3, segments=True)
    _modes_match_plain_tf(serve, **feed)


# ---------------------------------------------------------------------------------------------
# export: the float variant's max|Δ| is what a plain LiteRT run of the written file measures
# ---------------------------------------------------------------------------------------------


def _plain_litert_error(export, file: str, examples: list[dict]) -> float:
    """max|Δ| of LiteRT's Interpreter on the .tflite against TF's run of the exported SavedModel."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    serving = tf.saved_model.load(str(export / "saved_model")).signatures["serving_default"]
    runner = Interpreter(model_path=str(export / file)).get_signature_runner("serving_default")
    worst = 0.0
    for feed in examples:
        got = runner(**feed)
        want = {k: v.numpy() for k, v in serving(**{k: tf.constant(v) for k, v in feed.items()}).items()}
        assert sorted(got) == sorted(want)
        for name, w in want.items():
            worst = max(worst, float(np.max(np.abs(got[name].astype(np.float64) - w.astype(np.float64)))))
    return worst


def test_export_vit_max_error_is_plain_litert_s(keras_hub, tmp_path):
    import tflab

    model = keras_hub.models.ViTBackbone(image_shape=(16, 16, 3), patch_size=8, num_layers=1, num_heads=2,
                                         hidden_dim=16, mlp_dim=32)
    name = model.inputs[0].name
    examples = [{name: np.random.default_rng(b).standard_normal((b, 16, 16, 3)).astype(np.float32)} for b in (1, 2)]
    report = tflab.export_model(model, tmp_path / "export", quantize=("none",), examples=examples, isolate=False)
    variant = report.variants["none"]
    assert variant.status == "ok", report.to_text()
    assert variant.check.max_abs_error == _plain_litert_error(tmp_path / "export", variant.file, examples)
