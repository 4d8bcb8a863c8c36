"""The handed tracing cases T1–T9 (../shared/cases/tracing.md), measured on TF 2.21.

Each test measures the bare tf.function (TF's own ``experimental_get_tracing_count()``)
and the same calls through `RetraceProbe`, whose reasons and fixes the case asks for.
T10 (the smaller last batch, with stabilize) is lab step 4's.
"""

from __future__ import annotations

import dataclasses

import pytest

tf = pytest.importorskip("tensorflow")

from tflab.errors import UsageError  # noqa: E402
from tflab.retrace import RetraceProbe  # noqa: E402


def _count(fn, calls):
    """Makes the calls (a generator, so no argument outlives its call); returns TF's count."""
    for args, kwargs in calls:
        fn(*args, **kwargs)
    if isinstance(fn, RetraceProbe):
        return fn.tf_tracing_count
    return fn.experimental_get_tracing_count()


def test_t1_one_trace_per_python_scalar_value():
    x = tf.ones([2])
    calls = [((x, n), {}) for n in (1, 2, 3)]  # ints: nothing to garbage-collect
    assert _count(tf.function(lambda x, n: x * n), calls) == 3
    probe = RetraceProbe(lambda x, n: x * n)
    _count(probe, calls)
    assert probe.trace_count == 3
    assert [t.reasons for t in probe.traces] == [[], ["n: 1 -> 2"], ["n: 2 -> 3"]]
    assert all("tf.constant" in t.fixes[0] for t in probe.traces[1:])
    # The fix, measured: a tensor's value is not in its TraceType.
    fixed = RetraceProbe(lambda x, n: x * tf.cast(n, tf.float32))
    _count(fixed, (((x, tf.constant(n)), {}) for n in (1, 2, 3)))
    assert fixed.trace_count == 1


def test_t2_python_float_repeats_hit_the_cache():
    x = tf.ones([2])
    calls = [((x, s), {}) for s in (0.1, 0.2, 0.1)]
    assert _count(tf.function(lambda x, s: x * s), calls) == 2
    probe = RetraceProbe(lambda x, s: x * s)
    _count(probe, calls)
    assert (probe.trace_count, probe.calls) == (2, 3)
    assert [t.call for t in probe.traces] == [1, 2]  # the third call reused trace #1
    assert probe.traces[1].reasons == ["s: 0.1 -> 0.2"]


class _Model:
    def method(self, x):
        return x + 1.0


def test_t3_bound_method_is_a_new_object_each_call():
    obj, x = _Model(), tf.ones([2])
    step = tf.function(lambda fn, x: fn(x))
    assert _count(step, (((obj.method, x), {}) for _ in range(3))) == 3
    probe = RetraceProbe(lambda fn, x: fn(x))
    for _ in range(3):
        probe(obj.method, x)
    assert probe.trace_count == 3
    for t in probe.traces[1:]:
        assert t.reasons == ["fn: new object each call (bound method _Model.method; TF matches it by weak reference)"]
        assert "bind the method once outside the loop" in t.fixes[0]
    # The fix, measured: one bound method, bound once.
    hoisted = RetraceProbe(lambda fn, x: fn(x))
    method = obj.method
    for _ in range(3):
        hoisted(method, x)
    assert hoisted.trace_count == 1
    # Measured nuance: TF's Weakref TraceType compares live referents with ==,
    # and two bound methods of one object are ==. Kept alive, they share one
    # trace: the 3 traces come from each earlier bound method being freed.
    alive = [obj.method for _ in range(3)]
    assert _count(tf.function(lambda fn, x: fn(x)), (((m, x), {}) for m in alive)) == 1


@dataclasses.dataclass(frozen=True)
class _Cfg:
    scale: float = 2.0


@dataclasses.dataclass
class _MutableCfg:
    scale: float = 2.0


class _CfgType(tf.types.experimental.TraceType):
    """A TraceType by value: equal scales share one trace."""

    def __init__(self, scale):
        self.scale = scale

    def is_subtype_of(self, other):
        return self == other

    def most_specific_common_supertype(self, others):
        return self if all(self == o for o in others) else None

    def placeholder_value(self, placeholder_context):
        return _ValueCfg(self.scale)

    def __eq__(self, other):
        return isinstance(other, _CfgType) and self.scale == other.scale

    def __hash__(self):
        return hash(self.scale)


@dataclasses.dataclass(frozen=True)
class _ValueCfg:
    scale: float = 2.0

    def __tf_tracing_type__(self, context):
        return _CfgType(self.scale)


def test_t4_frozen_dataclass_config_each_call():
    x = tf.ones([2])
    f = tf.function(lambda x, cfg: x * cfg.scale)
    assert _count(f, (((x, _Cfg(scale=2.0)), {}) for _ in range(3))) == 3
    probe = RetraceProbe(lambda x, cfg: x * cfg.scale)
    for _ in range(3):
        probe(x, _Cfg(scale=2.0))
    assert probe.trace_count == 3
    # Each call's instance is freed after the call: TF's Weakref to it is dead.
    assert probe.traces[1].reasons == ["cfg: the object trace #1 was made for was garbage-collected "
                                       "(TF keeps a weak reference); now _Cfg(scale=2.0)"]
    assert "__tf_tracing_type__" in probe.traces[1].fixes[0]
    # Measured nuance: TF's Weakref TraceType compares live referents with ==,
    # so equal instances that are all still alive share ONE trace; the three
    # traces come from each earlier instance being garbage-collected.
    alive = [_Cfg(scale=2.0) for _ in range(3)]
    g = tf.function(lambda x, cfg: x * cfg.scale)
    assert _count(g, (((x, c), {}) for c in alive)) == 1
    # The fix offered, measured: __tf_tracing_type__ by value -> one trace.
    h = tf.function(lambda x, cfg: x * cfg.scale)
    assert _count(h, (((x, _ValueCfg(2.0)), {}) for _ in range(3))) == 1


def test_t4_non_frozen_dataclass_error():
    x = tf.ones([2])
    with pytest.raises(TypeError, match="Could not generate a generic TraceType for "
                                        r"_MutableCfg\(scale=2.0\).*immutable/hashable"):
        tf.function(lambda x, cfg: x * cfg.scale)(x, _MutableCfg())
    probe = RetraceProbe(lambda x, cfg: x * cfg.scale)
    with pytest.raises(UsageError) as info:
        probe(x, _MutableCfg())
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("<lambda>: argument 'cfg' (_MutableCfg) has no TraceType")
    assert "@dataclass(frozen=True) makes it traceable (TF keeps a weak reference and matches " \
           "equal live instances)" in msg
    assert "add __tf_tracing_type__ to trace it by value and avoid a retrace per new instance" in msg
    assert "tensors" in msg


def test_t4_what_frozen_alone_gives_and_what_tracing_type_adds():
    """Measures each clause of the UsageError's advice above."""
    from tflab._tf.function import trace_type_of  # trace_type.from_value

    # frozen=True alone: hashable, so TF builds a Weakref TraceType (no error).
    assert hash(_Cfg()) == hash(_Cfg()) and _Cfg() == _Cfg()
    assert repr(trace_type_of(_Cfg())).startswith("Weakref[")
    x = tf.ones([2])
    # Equal live instances share a trace; a different value gets its own.
    alive = [_Cfg(2.0), _Cfg(3.0), _Cfg(2.0)]
    f = tf.function(lambda x, cfg: x * cfg.scale)
    assert _count(f, (((x, c), {}) for c in alive)) == 2
    # A new instance per call (the previous one freed): one trace per call.
    g = tf.function(lambda x, cfg: x * cfg.scale)
    assert _count(g, (((x, _Cfg(2.0)), {}) for _ in range(3))) == 3
    # With __tf_tracing_type__ (by value): one trace for the same calls.
    h = tf.function(lambda x, cfg: x * cfg.scale)
    assert _count(h, (((x, _ValueCfg(2.0)), {}) for _ in range(3))) == 1


def test_t5_none_dim_concrete_functions_dispatch_later_calls():
    f = tf.function(lambda x: x * 2)
    f.get_concrete_function(tf.TensorSpec([None], tf.int32))
    f.get_concrete_function(tf.TensorSpec([None], tf.int64))
    assert f.experimental_get_tracing_count() == 2
    f(tf.constant([0, 2]))
    assert f.experimental_get_tracing_count() == 2  # 0 new traces
    probe = RetraceProbe(lambda x: x * 2)
    probe.get_concrete_function(tf.TensorSpec([None], tf.int32))
    probe.get_concrete_function(tf.TensorSpec([None], tf.int64))
    before = probe.trace_count
    probe(tf.constant([0, 2]))
    assert (before, probe.trace_count, probe.tf_tracing_count) == (2, 2, 2)
    assert [t.kind for t in probe.traces] == ["concrete", "concrete"]
    assert probe.traces[1].reasons == ["x: dtype int32 -> int64"]


class _Scaler:
    @tf.function(reduce_retracing=True)
    def __call__(self, x):
        return x * 2.0


def test_t6_reduce_retracing_method_and_free_function():
    method_owner = _Scaler()
    free = tf.function(lambda x: x * 2.0, reduce_retracing=True)
    for n in range(1, 21):
        method_owner(tf.zeros([n]))
        free(tf.zeros([n]))
    assert method_owner.__call__.experimental_get_tracing_count() == 2
    assert free.experimental_get_tracing_count() == 2
    for fn in (_Scaler().__call__, tf.function(lambda x: x * 2.0, reduce_retracing=True)):
        probe = RetraceProbe(fn)
        for n in range(1, 21):
            probe(tf.zeros([n]))
        assert probe.trace_count == 2
        assert probe.traces[0].traced_as is None  # the exact shape first
        assert probe.traces[1].reasons == ["x: shape (1,) -> (2,); TF traced it relaxed, as float32(None,)"]
        assert probe.traces[1].traced_as == (
            ("x", "TensorSpec(shape=(None,), dtype=tf.float32, name=None)"),)  # then [None]


def test_t7_variable_created_on_first_call_traces_twice():
    holder = {}

    def make(x):
        if "v" not in holder:
            holder["v"] = tf.Variable(1.0)
        return x * holder["v"]

    f = tf.function(make)
    f(tf.ones([2]))
    assert f.experimental_get_tracing_count() == 2
    holder.clear()
    probe = RetraceProbe(make)
    probe(tf.ones([2]))
    assert probe.trace_count == 2
    second = probe.traces[1]
    assert second.kind == "variable_creation"
    assert second.reasons == ["TF's own re-trace: the first call created tf.Variables, so TF traced "
                              "again with variable creation disabled (not caused by the inputs)"]
    assert second.fixes[0].startswith("nothing to fix")


def test_t8_stale_closure():
    threshold = 0.5

    def above(x):
        return x > threshold

    f = tf.function(above)
    probe = RetraceProbe(above)
    x = tf.constant([0.7])
    assert f(x).numpy().tolist() == [True] and probe(x).numpy().tolist() == [True]
    threshold = 0.9
    assert above(x).numpy().tolist() == [False]  # eager sees the new value
    assert f(x).numpy().tolist() == [True]       # the graph does not: stale
    assert probe(x).numpy().tolist() == [True]
    assert f.experimental_get_tracing_count() == 1 and probe.trace_count == 1
    assert len(probe.stale) == 1
    s = probe.stale[0]
    assert (s.name, s.scope, s.traced, s.current, s.trace, s.call) == ("threshold", "closure", "0.5", "0.9", 1, 2)
    assert s.text == ("closure 'threshold' was 0.5 at trace #1, now 0.9: no retrace, "
                      "the graph still uses 0.5")


def test_t9_training_keyword_default_is_bound():
    x = tf.ones([2])

    def f(x, training=False):
        return x * 2.0 if training else x

    calls = [((x,), {}), ((x,), {"training": False}), ((x,), {"training": True})]
    assert _count(tf.function(f), calls) == 2
    probe = RetraceProbe(f)
    _count(probe, calls)
    assert probe.trace_count == 2
    assert [t.call for t in probe.traces] == [1, 3]  # f(x) and f(x, training=False) share trace #1
    assert probe.traces[1].reasons == ["training: False -> True"]
