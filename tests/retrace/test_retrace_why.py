"""Why it retraced, from TF's own structures (TraceEvent, TraceType diff, side effects).

Each (tensorflow/tensorflow#38561,
tensorflow/tensorflow#46012, tensorflow/tensorflow#31362) is here with what TF itself does on the same input, so each
test failed on tflab without the fix (raw reprs, wrong kind, blamed a relaxed dim,
reported the user's counter as stale, saw no side effect).
"""

from __future__ import annotations

import dataclasses
import os
import re
import runpy
import textwrap

import pytest

tf = pytest.importorskip("tensorflow")

from tflab.errors import UsageError  # noqa: E402
from tflab.retrace import (  # noqa: E402
    RetraceProbe, TraceEvent, capture_trace_events, expect_traces, group_logged_traces,
    reasons_between, trace_script)

# What no reason or fix may contain: TraceType reprs (TF 2.21 default_types.py,
# tensor_spec.py, ragged_tensor.py, sparse_tensor.py, values.py).
# (A fix may name the constructor the user writes, ``tf.RaggedTensorSpec([None, None], …)``.)
RAW_REPRS = re.compile(r"Weakref\[|TensorSpec\(shape=|Literal\[|(?<!tf\.)RaggedTensorSpec\(|"
                       r"(?<!tf\.)SparseTensorSpec\(|TensorShape\(|PerReplicaSpec\(|Dict\[\[|List\[|"
                       r"Tuple\[|<weakref at")


def _no_raw_repr(traces):
    for t in traces:
        for text in [*t.reasons, *t.fixes, *t.runner_up_reasons, *(v for _, v in t.labels)]:
            assert not RAW_REPRS.search(text), text


# --- a new lambda per call ----------------------------------------------


def _apply(fn, x):
    return fn(x)


def test_a_new_lambda_per_call_is_a_new_function_not_a_raw_weakref():
    p = RetraceProbe(_apply)
    for _ in range(2):
        p(lambda t: t * 2.0, tf.ones([2]))
    assert (p.trace_count, p.tf_tracing_count) == (2, 2)  # TF itself retraced: Weakref identity
    (r,) = p.traces[1].details
    assert r.kind == "function" and r.parameter == "fn"
    assert r.text.startswith("fn: a new lambda each call (lambda at test_retrace_why.py:")
    assert "define the function once" in r.fix
    _no_raw_repr(p.traces)
    # Healthy case: the same function object every call traces once.
    same = RetraceProbe(_apply)
    double = lambda t: t * 2.0  # noqa: E731
    for _ in range(3):
        same(double, tf.ones([2]))
    assert same.trace_count == 1


# --- RaggedTensor / SparseTensor shape changes ---------------------------


def test_a_ragged_batch_change_is_a_ragged_shape_and_the_fix_works():
    p = RetraceProbe(lambda x: tf.reduce_sum(x))
    small, big = tf.ragged.constant([[1., 2.], [3.]]), tf.ragged.constant([[1., 2.], [3.], [4., 5., 6.]])
    p(small), p(big)
    (r,) = p.traces[1].details
    assert (r.kind, r.old, r.new) == ("ragged_shape", "(2, None)", "(3, None)")
    spec_text = re.search(r"tf\.RaggedTensorSpec\([^)]*\)", r.fix).group(0)
    assert spec_text == "tf.RaggedTensorSpec([None, None], tf.float32, 1, tf.int64)"
    # The fix is real: that input_signature gives one trace for both batches.
    spec = eval(spec_text, {"tf": tf})
    fixed = RetraceProbe(tf.function(lambda x: tf.reduce_sum(x), input_signature=[spec]))
    fixed(small), fixed(big)
    assert fixed.trace_count == 1
    _no_raw_repr(p.traces)


def test_a_sparse_shape_change_is_a_sparse_shape():
    p = RetraceProbe(lambda x: tf.sparse.reduce_sum(x))
    a = tf.sparse.SparseTensor([[0, 0]], [1.0], [2, 2])
    b = tf.sparse.SparseTensor([[0, 0]], [1.0], [2, 3])
    p(a), p(b)
    (r,) = p.traces[1].details
    assert (r.kind, r.text) == ("sparse_shape", "x: sparse shape (2, 2) -> (2, 3) (dim 1: 2 -> 3)")
    assert "tf.SparseTensorSpec([2, None], tf.float32)" in r.fix
    _no_raw_repr(p.traces)


class MaskedTensor(tf.experimental.ExtensionType):
    values: tf.Tensor
    mask: tf.Tensor


def test_an_extension_type_field_shape_change_names_the_field():
    p = RetraceProbe(lambda m: tf.reduce_sum(tf.where(m.mask, m.values, 0.0)))
    p(MaskedTensor(tf.ones([2]), tf.ones([2], tf.bool)))
    p(MaskedTensor(tf.ones([3]), tf.ones([3], tf.bool)))
    texts = p.traces[1].reasons
    assert texts and all(t.startswith("m.") for t in texts), texts
    assert {d.kind for d in p.traces[1].details} == {"spec"}
    assert any("values" in t for t in texts) and any("mask" in t for t in texts)
    _no_raw_repr(p.traces)


# --- reduce_retracing compares with the relaxed trace ----------------------


def test_only_the_dim_that_was_not_relaxed_is_blamed():
    p = RetraceProbe(lambda x: tf.reduce_sum(x, -1), reduce_retracing=True)
    for s in ((2, 3), (4, 3), (5, 3), (5, 7)):
        p(tf.ones(s))
    assert p.trace_count == 3  # TF: (2,3), relaxed (None,3) serves (5,3), then (None,None)
    third = p.traces[2]
    (r,) = third.details
    assert "dim 1: 3 -> 7" in r.text and "dim 0" not in r.text, r.text
    assert r.old == "(None, 3)" and (r.traced, r.relaxed) == ("relaxed", "float32(None, None)")
    # reduce_retracing is on: the fix never suggests turning it on.
    assert "already on" in r.fix and "use reduce_retracing=True" not in r.fix


# --- dataclass values, and the fix by literal type --------------------------


@dataclasses.dataclass(frozen=True)
class Cfg:
    scale: float
    n: int


def _scaled(x, cfg):
    return x * cfg.scale


def test_a_different_live_dataclass_value_is_a_value_change():
    p = RetraceProbe(_scaled)
    a, b = Cfg(2.0, 1), Cfg(3.0, 1)  # both alive
    p(tf.ones([2]), a), p(tf.ones([2]), b)
    (r,) = p.traces[1].details
    assert r.kind == "object_value"
    assert r.text == "cfg: Cfg(scale=2.0, n=1) -> Cfg(scale=3.0, n=1) (TF matches it by ==)"
    # Healthy case: an EQUAL new instance while the first is alive matches (Weakref ==).
    p(tf.ones([2]), Cfg(2.0, 1))
    assert p.trace_count == 2


def test_the_value_fix_fits_the_literal_type():
    p = RetraceProbe(lambda x, mode: x * 2.0 if mode == "a" else x)
    p(tf.ones([1]), "a"), p(tf.ones([1]), "b")
    (r,) = p.traces[1].details
    assert (r.kind, r.text) == ("string", "mode: 'a' -> 'b'")
    assert "Python number" not in r.fix and "str" in r.fix
    q = RetraceProbe(lambda x, flag=None: x if flag is None else -x)
    q(tf.ones([1]), None), q(tf.ones([1]), True)
    (r,) = q.traces[1].details
    assert r.kind == "none" and "Python number" not in r.fix and "None" in r.fix
    n = RetraceProbe(lambda x, k: x * k)
    n(tf.ones([1]), 4), n(tf.ones([1]), 8)
    assert n.traces[1].details[0].kind == "value" and "tf.constant" in n.traces[1].fixes[0]


# --- the user's own trace counter ---------------------------------------------

TRACES = 0


def _counting(x):
    global TRACES
    TRACES += 1
    return x * 2


def test_a_global_the_body_writes_is_not_a_stale_read():
    p = RetraceProbe(_counting)
    p(tf.ones([2])), p(tf.ones([2]))
    assert p.stale == [] and "stale" not in repr(p)
    # It is a side effect that ran only while tracing: once in two calls.
    (line,) = p.side_effects
    assert line.startswith("`TRACES += 1` (line ") and "ran 1 time in 2 calls" in line
    assert "counts traces, not calls" in line


SCALE = 2.0


def _reads_scale(x):
    return x * SCALE


def test_a_global_the_body_only_reads_is_still_a_stale_read():
    """The planted defect the fix must not hide: a read-only global changed without a retrace."""
    global SCALE
    p = RetraceProbe(_reads_scale)
    try:
        p(tf.ones([1]))
        SCALE = 3.0
        out = p(tf.ones([1]))
    finally:
        SCALE = 2.0
    assert float(out[0]) == 2.0  # TF 2.21 kept the traced value
    assert [s.name for s in p.stale] == ["SCALE"]


# --- tensorflow/tensorflow#31362: o.value += 1 runs only while tracing ----------------------------------


class _Obj:
    value = 0


def test_31362_attribute_store_on_a_python_object_runs_once_in_five_calls():
    o = _Obj()

    def bump(x):
        o.value += 1
        return x + 1.0

    p = RetraceProbe(bump)
    for _ in range(5):
        p(tf.ones([2]))
    assert o.value == 1  # what TF did: the Python statement ran at trace time only
    (line,) = p.side_effects
    assert line.startswith("`o.value += 1` (line ")
    assert "ran 1 time in 5 calls: it runs only while tracing; use a tf.Variable" in line
    assert line in p.to_text() and p.to_dict()["side_effects"] == [line]


def test_appends_and_prints_are_side_effects_but_tf_state_is_not():
    seen = []

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.v = None

        def __call__(self, x):
            if self.v is None:
                self.v = tf.Variable(1.0)  # made once at trace time: the documented pattern
            seen.append(x)
            print("tracing")
            return x * self.v

    p = RetraceProbe(M())
    for _ in range(3):
        p(tf.ones([2]))
    kinds = [e.kind for e in p.side_effect_records]
    assert kinds == ["append", "print"], kinds
    assert len(seen) == p.trace_count < 3  # the append ran only while tracing
    assert all(f"in 3 calls" in s for s in p.side_effects)


# --- one TraceEvent, at one place -----------------------------------------------------


def test_the_probe_and_the_log_make_the_same_trace_event():
    f = tf.function(lambda x: x * 2.0, reduce_retracing=True)
    p = RetraceProbe(f)
    with capture_trace_events() as logged:
        p(tf.ones([2])), p(tf.ones([3]))  # this line is the call site
    site_line = __import__("inspect").currentframe().f_lineno - 1
    mine = [e for e in logged if e.function_id == id(p.function)]
    assert len(mine) == 2 and len(p.events) == 2
    for a, b in zip(p.events, mine):
        assert isinstance(a, TraceEvent) and a.function_object() is p.function
        assert a.lookup_type == b.lookup_type and a.traced_type == b.traced_type
        assert a.options == b.options == {"reduce_retracing": True, "input_signature": False,
                                          "jit_compile": None}
        assert a.site == b.site == f"{__file__}:{site_line}"
    assert not p.events[0].relaxed and p.events[1].relaxed  # TF relaxed the 2nd: (None,)
    assert [str(s) for s in p.events[1].traced_type.parameters["x"].type_constraint.shape] == ["None"]


# --- tensorflow/tensorflow#46012: a new model per loop step; tensorflow/tensorflow#38561: Keras predict over lengths ----------------

_NEW_MODEL = """
import numpy as np, keras
for i in range(3):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.predict(np.ones((2, 4), "float32"), verbose=0)
"""

_LENGTHS = """
import numpy as np, keras
model = keras.Sequential([keras.Input((None, 1)), keras.layers.Dense(1)])
for n in (10, 12, 14, 16):
    model.predict(np.ones((1, n, 1), "float32"), verbose=0)
"""


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_46012_a_new_model_per_step_is_a_new_tf_function_each_time(tmp_path):
    result = trace_script(_script(tmp_path, "new_model.py", _NEW_MODEL))
    assert result.error is None
    groups = result.shared_names
    assert len(groups) == 1, result.to_text()
    (g,) = groups
    assert g.objects == 3 and g.retraced == 0
    assert "a new tf.function each time" in g.text and "none of them retraced" in g.text
    assert "predict_on_batch" in g.fix
    assert g.text in result.to_text() and result.to_dict()["shared_names"][0]["objects"] == 3


def test_38561_keras_predict_over_lengths_is_one_relaxed_trace(tmp_path):
    result = trace_script(_script(tmp_path, "lengths.py", _LENGTHS))
    assert result.error is None
    traced = [f for f in result.functions if f.trace_count >= 2]
    assert len(traced) == 1, result.to_text()
    second = traced[0].traces[1]
    (r,) = [d for d in second.details if d.kind == "shape"]
    assert r.traced == "relaxed" and "None" in r.relaxed, r
    # Keras 3's predict_function has reduce_retracing=True already: never suggested again, and
    # Keras made it, so no input_signature on it either (tensorflow/tensorflow#34907)
    assert second.options["reduce_retracing"] is True
    assert "nothing to fix" in r.fix and "use reduce_retracing=True" not in r.fix
    assert "give the tf.function an input_signature" not in r.fix
    assert second.to_dict()["traced_as"] is not None
    assert traced[0].trace_count == 2  # the relaxed trace served 14 and 16


# --- tflab retrace and RetraceProbe agree -------------------------------------------------

_SAME = """
import dataclasses
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Cfg:
    scale: float


def body(x, n, fn, cfg, r):
    return tf.cast(fn(x), tf.float32) * n * cfg.scale + tf.reduce_sum(r)


def calls():
    keep = [Cfg(2.0), Cfg(3.0)]
    double = lambda t: t * 2.0
    yield tf.ones([2]), 1, double, keep[0], tf.ragged.constant([[1.0], [2.0, 3.0]])
    yield tf.ones([3]), 1, double, keep[0], tf.ragged.constant([[1.0], [2.0, 3.0]])
    yield tf.ones([3]), 2, double, keep[0], tf.ragged.constant([[1.0], [2.0, 3.0]])
    yield tf.ones([3]), 2, double, keep[1], tf.ragged.constant([[1.0], [2.0, 3.0]])
    yield tf.ones([3]), 2, double, keep[1], tf.ragged.constant([[1.0], [2.0, 3.0], [4.0]])
    yield tf.ones([3], tf.int32), 2, lambda t: t, keep[1], tf.ragged.constant([[1.0]])


if __name__ == "__main__":
    f = tf.function(body)
    for a in calls():
        f(*a)
"""


# --- containers and paths; the corpus has no raw TraceType repr -------------------------


class _Plain:  # no __eq__: TF's Weakref matches only the same live object
    pass


def _use(x, obj):
    return x + 1.0


@dataclasses.dataclass(frozen=True)
class _NewcomerCfg:
    scale: float


# ---, finished: every consumer takes the TraceEvent; CLI side effects; labels ------


_BUMP = """
import tensorflow as tf


class Obj:
    value = 0


o = Obj()
seen = []


def bump(x):
    o.value += 1
    seen.append(x)
    return x + 1.0


if __name__ == "__main__":
    f = tf.function(bump)
    for _ in range(5):
        f(tf.ones([2]))
    print("value", o.value)
"""


def _factory(k):
    @tf.function
    def scaled(x):
        return x * k

    return scaled
