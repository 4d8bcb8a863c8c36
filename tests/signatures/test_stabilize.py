"""Lab step 4: stabilize with an input_signature; compare with reduce_retracing.

Includes handed case T10 (../shared/cases/tracing.md): the smaller last batch
of a tf.data pipeline. Every number was measured on tensorflow 2.21.0 (CPU).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tflab import RetraceProbe, infer_input_signature, stabilization_report, stabilize
from tflab.errors import UsageError
from tflab.stabilization import count_traces


def _pipeline(n=10, batch=4, width=8):
    x = np.arange(n * width, dtype=np.float32).reshape(n, width)
    return tf.data.Dataset.from_tensor_slices((x, np.arange(n))).batch(batch)


def test_infer_input_signature_relaxes_only_varying_dims():
    sig = infer_input_signature(_pipeline(), names=["x", "y"])
    assert sig == (tf.TensorSpec([None, 8], tf.float32, "x"), tf.TensorSpec([None], tf.int64, "y"))
    nested = infer_input_signature([({"a": tf.zeros([2, 3]), "b": tf.zeros([5])},),
                                    ({"a": tf.zeros([2, 4]), "b": tf.zeros([5])},)])
    assert nested == ({"a": tf.TensorSpec([2, None]), "b": tf.TensorSpec([5])},)
    rank = infer_input_signature([tf.zeros([2]), tf.zeros([2, 2])])
    assert rank[0].shape.rank is None  # ranks differ: unknown rank


def test_one_trace_serves_every_batch_size():
    log: list[str] = []

    def step(x):
        return tf.reduce_sum(x, axis=1)

    f = stabilize(count_traces(step, log), input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    for b in range(1, 8):
        np.testing.assert_array_equal(f(tf.ones([b, 8])).numpy(), np.full(b, 8.0))
    assert len(log) == 1 and log == ["(float32[None,8])"]
    assert f.experimental_get_tracing_count() == 1


def test_report_plain_vs_reduce_retracing_vs_signature():
    def step(x, y):
        return tf.reduce_sum(x, axis=1) + tf.cast(y, tf.float32)

    r = stabilization_report(step, _pipeline())
    v = r.variants
    # Batches 4, 4, 2: the plain function traces [4,8] then [2,8].
    assert (v["plain"].traces, v["plain"].later_traces) == (2, 1)
    assert v["plain"].traced_specs == ("(float32[4,8], int64[4])", "(float32[2,8], int64[2])")
    # reduce_retracing on 2.21: the exact shape first, then a relaxed FunctionType.
    assert v["reduce_retracing"].traced_specs == ("(float32[4,8], int64[4])", "(float32[None,8], int64[None])")
    # input_signature: one trace, before any shape is seen.
    assert (v["input_signature"].traces, v["input_signature"].later_traces) == (1, 0)
    assert r.max_abs_error == 0.0  # same graph modulo static shapes: identical kernels
    assert "input_signature=1" in repr(r)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "needs input_signature"),
    ({"examples": [(tf.zeros([2]), 3)]}, "y of example 0 is a Python int"),
    ({"examples": [(tf.zeros([2]), tf.zeros([2])), (tf.zeros([2], tf.int32), tf.zeros([2]))]},
     "disagree on dtype"),
    ({"input_signature": [tf.TensorSpec([None, 3]), tf.TensorSpec([None])],
      "examples": [(tf.zeros([2, 4]), tf.zeros([2]))]}, "does not fit input_signature"),
    ({"examples": [(tf.zeros([2]),), (tf.zeros([2]), tf.zeros([2]))]}, "example 1 has 2 arguments"),
], ids=["nothing", "python-value", "dtype-varies", "signature-mismatch", "arity"])
def test_stabilize_bad_input(kwargs, message):
    def step(x, y):
        return x + y

    with pytest.raises(UsageError, match=message):
        stabilize(step, **kwargs)


def test_t10_plain_step_last_batch_retraces_and_stabilize_fixes_it():
    def step(x):
        return tf.reduce_mean(x * 2.0)

    probe = RetraceProbe(step)
    for x, _ in _pipeline():
        probe(x)
    assert probe.trace_count == 2
    assert probe.traces[1].kind == "retrace"
    assert any("4" in r and "2" in r and "x" in r for r in probe.traces[1].reasons), probe.traces[1].reasons

    log: list[str] = []
    f = stabilize(count_traces(step, log), examples=[x for x, _ in _pipeline()])
    for x, _ in _pipeline():
        f(x)
    assert len(log) == 1


@pytest.mark.tflab_max_traces(2, function="train_step")  # the variable-creation pair
def test_t10_training_step_of_a_conv_classifier():
    """T10: stabilized, the training step traces the variable-creation pair on its first call
    (a fresh Adam creates its slot variables) and nothing for any later batch size.

    The model is a small conv classifier of the tour model's kind (conv, batch norm, pooling, softmax
    head) at 16×16: what is measured is TF's tracing of the step, which does not depend on the
    image size or depth. The tour's own MobileNet step on the same batches (4, 4, 2, then 3) is
    checked by the full-tour facts test (``stabilize.train_step.*``), and the unstabilized half of
    T10 (RetraceProbe over batches 4, 4, 2: "first", "variable_creation", "retrace" with the 4 -> 2
    reason) is the tour's step 2 there, so neither is traced a second time here.
    """
    import keras

    from tflab.tour import make_train_step, tour_dataset

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(4, 3, padding="same"),
                              keras.layers.BatchNormalization(), keras.layers.ReLU(),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10, activation="softmax")])
    spec = tf.TensorSpec([None, 16, 16, 3], tf.float32)
    ds = tour_dataset(spec, num_classes=10)  # 10 images, batch 4: sizes 4, 4, 2
    # The one graph serves every size because TF traced it with the batch dim None (its TraceEvent).
    log: list[str] = []
    events: list = []
    step = stabilize(count_traces(make_train_step(model, keras.optimizers.Adam()), log, events),
                     examples=ds)
    weights_before = [w.numpy().copy() for w in model.trainable_weights]
    for x, y in ds:
        step(x, y)
    first_pair = len(log)
    x3, y3 = next(iter(tour_dataset(spec, num_classes=10, n=3, batch=3, seed=1)))
    step(x3, y3)
    assert first_pair == 2 and len(log) == 2
    traced_x = events[-1].traced_type.parameters["x"].type_constraint
    assert traced_x.shape.as_list() == [None, 16, 16, 3] and events[-1].options["input_signature"]
    # the one graph trained: every weight moved (a step that traced but did nothing would pass above)
    assert all(np.any(w.numpy() != b) for w, b in zip(model.trainable_weights, weights_before))


def test_stabilize_keeps_a_tf_functions_own_signature():
    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
    def signed(x):
        return x + 1.0

    f = stabilize(signed)
    assert f.input_signature == (tf.TensorSpec([4], tf.float32),)
    with pytest.raises(UsageError, match="does not fit input_signature"):
        stabilize(signed, examples=[tf.zeros([2]), tf.zeros([3])])


@pytest.mark.parametrize("kwargs, message", [
    ({"input_signature": "x"}, "must be a list"),
    ({"input_signature": [tf.TensorSpec([None])] * 3}, "3 specs but the function takes 2"),
    ({"input_signature": [3, 4]}, "holds a int; use tf.TensorSpec"),
    ({"examples": tf.zeros([3, 2])}, "examples must be a list"),
    ({"examples": [({"a": tf.zeros([2])}, tf.zeros([1])), ({"b": tf.zeros([2])}, tf.zeros([1]))]},
     "nested differently"),
], ids=["string", "too-many", "not-specs", "tensor-as-examples", "dict-keys"])
def test_stabilize_rejects_malformed_signatures_and_examples(kwargs, message):
    def step(x, y):
        return x

    with pytest.raises(UsageError, match=message):
        stabilize(step, **kwargs)


def test_stabilization_report_on_a_lambda_converts_the_users_code(caplog):
    """The trace counter is a tf_decorator, so AutoGraph converts the lambda, not tflab's code."""
    import logging

    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        r = stabilization_report(lambda x: tf.reduce_sum(x), [tf.zeros([4, 8]), tf.zeros([2, 8])])
    assert not [rec for rec in caplog.records if "could not" in rec.getMessage().lower()]
    assert r.variants["input_signature"].traces == 1 and r.variants["plain"].traces == 2


def test_equal_shaped_examples_warn_which_dims_stayed_fixed():
    """Nothing varies, so every dim is pinned; say so, and how to relax it."""
    from tflab import FixedShapeWarning

    def step(x):
        return tf.reduce_sum(x)

    with pytest.warns(FixedShapeWarning) as caught:
        f = stabilize(step, examples=[tf.zeros([32, 8]), tf.zeros([32, 8])])
    (w,) = caught
    msg = str(w.message)
    assert msg.startswith("stabilize: no dim varies across the 2 example(s), so the inferred "
                          "input_signature pins every dim (x (32, 8))")
    assert "another batch size" in msg and "tf.TensorSpec([None, 8], tf.float32)" in msg
    assert w.filename == __file__  # points at the user's call
    assert f.input_signature == (tf.TensorSpec([32, 8], tf.float32, "x"),)
    # What the warning predicts, measured: the smaller last batch fails TF's input binding.
    with pytest.raises(TypeError, match="Binding inputs to tf.function failed"):
        f(tf.zeros([6, 8]))
    # The report says it too (as a note, not a second warning).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FixedShapeWarning)
        r = stabilization_report(step, [tf.zeros([32, 8])])
    assert r.note is not None and r.note.startswith("stabilize: no dim varies across the 1 example(s)")
    assert r.to_text().endswith("note: " + r.note) and r.to_dict()["note"] == r.note


def test_examples_with_a_varying_dim_do_not_warn():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = stabilize(lambda x: x, examples=[tf.zeros([4, 8]), tf.zeros([2, 8])])
        r = stabilization_report(lambda x: x * 2.0, [tf.zeros([4, 8]), tf.zeros([2, 8])])
        g = stabilize(lambda x: x, input_signature=[tf.TensorSpec([32, 8])])  # given, not inferred
    assert f.input_signature[0].shape.as_list() == [None, 8] and r.note is None
    assert g.input_signature[0].shape.as_list() == [32, 8]


def test_a_datasets_element_spec_relaxes_what_its_batches_did_not_show():
    """The sibling: 8 rows in batches of 4 show only 4, but batch(4) can yield fewer (element_spec None)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither dataset warns: its element_spec is the authority
        even = _pipeline(n=8)
        assert [int(x.shape[0]) for x, _ in even] == [4, 4]
        assert infer_input_signature(even, names=["x", "y"]) == (tf.TensorSpec([None, 8], tf.float32, "x"),
                                                                 tf.TensorSpec([None], tf.int64, "y"))
        f = stabilize(lambda x, y: x, examples=even)
        assert f.input_signature[0].shape.as_list() == [None, 8]
        f(tf.zeros([2, 8]), tf.zeros([2], tf.int64))  # the smaller batch binds
        dropped = tf.data.Dataset.from_tensor_slices(tf.zeros([10, 8])).batch(4, drop_remainder=True)
        assert stabilize(lambda x: x, examples=dropped).input_signature == (tf.TensorSpec([4, 8], tf.float32, "x"),)


def test_ragged_and_sparse_examples_give_their_own_typespecs():
    """A RaggedTensor/SparseTensor example is a tensor, not a Python value: an input_signature
    takes its RaggedTensorSpec/SparseTensorSpec, relaxed like TF's TraceType supertype."""
    traced = []

    def row_sums(r):
        traced.append(1)
        return tf.reduce_sum(r, axis=1)

    step = stabilize(row_sums, examples=[tf.ragged.constant([[1.0, 2.0], [3.0]]),
                                         tf.ragged.constant([[1.0], [2.0], [3.0, 4.0, 5.0]])])
    assert step.input_signature == (tf.RaggedTensorSpec([None, None], tf.float32, 1, tf.int64),)
    assert step(tf.ragged.constant([[1.0, 2.0, 3.0, 4.0], [5.0]])).numpy().tolist() == [10.0, 5.0]
    assert step(tf.ragged.constant([[1.0]])).numpy().tolist() == [1.0]
    assert len(traced) == 1  # one trace for every batch size and row length
    sparse = infer_input_signature([tf.sparse.from_dense(tf.eye(3)), tf.sparse.from_dense(tf.ones([5, 3]))])
    assert sparse == (tf.SparseTensorSpec([None, 3], tf.float32),)
    with pytest.raises(UsageError, match="mix RaggedTensorSpec and TensorSpec"):
        infer_input_signature([tf.ragged.constant([[1.0]]), tf.ones([2, 2])])
