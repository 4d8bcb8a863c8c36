"""Why a function retraced: the CLI and the probe agree, container paths, no raw TraceType repr, identity and per-replica specs.

Split from `test_retrace_why.py` (no test file over 600 lines); its helpers and fixtures are imported from there.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_retrace_why import (  # noqa: E402,F401  (helpers, fixtures and imports of the first part)
    dataclasses, runpy, textwrap, pytest, tf, UsageError, RetraceProbe, TraceEvent, capture_trace_events,
    expect_traces, group_logged_traces, reasons_between, trace_script, RAW_REPRS, _no_raw_repr, Cfg, _script,
    _SAME, _Plain, _use, _NewcomerCfg, _BUMP, _factory,)


def test_tflab_retrace_and_the_probe_give_the_same_reasons(tmp_path):
    path = _script(tmp_path, "same.py", _SAME)
    script = trace_script(path)
    assert script.error is None
    (fn,) = script.functions
    ns = runpy.run_path(path, run_name="not_main")
    probe = RetraceProbe(ns["body"])
    for a in ns["calls"]():
        probe(*a)
    assert fn.trace_count == probe.trace_count == 6
    assert [t.reasons for t in fn.traces] == [t.reasons for t in probe.traces]
    assert [t.fixes for t in fn.traces] == [t.fixes for t in probe.traces]
    kinds = [[d.kind for d in t.details] for t in probe.traces]
    assert kinds[1:] == [["shape"], ["value"], ["object_value"], ["ragged_shape"],
                         ["dtype", "function", "ragged_shape"]], kinds
    _no_raw_repr(probe.traces)


def test_nested_container_paths_and_text_fallback():
    old = {"batch": {"boxes": tf.TensorSpec([2, 4]), "ids": [tf.TensorSpec([2], tf.int32), 1]}}
    from tflab._tf.function import trace_type_of

    a = {k: trace_type_of(v) for k, v in {"batch": {"boxes": tf.ones([2, 4]),
                                                            "ids": [tf.ones([2], tf.int32), 1]}}.items()}
    b = {k: trace_type_of(v) for k, v in {"batch": {"boxes": tf.ones([3, 4]),
                                                            "ids": [tf.ones([2], tf.int32), 2]}}.items()}
    got = [(r.parameter, r.kind, r.old, r.new) for r in reasons_between(a, b)]
    assert got == [("batch['boxes']", "shape", "(2, 4)", "(3, 4)"), ("batch['ids'][1]", "value", "1", "2")]
    # The text fallback (a saved log) gives the same reasons.
    ta = {k: repr(v) for k, v in a.items()}
    tb = {k: repr(v) for k, v in b.items()}
    assert [(r.parameter, r.kind) for r in reasons_between(ta, tb)] == [(p, k) for p, k, _, _ in got]
    assert old  # the specs themselves are TraceTypes too
    assert [r.kind for r in reasons_between(old, old)] == []


def test_bogus_keyword_raises_usage_error_naming_it():
    with pytest.raises(UsageError, match="'bogus_kw'"):
        RetraceProbe(lambda x: x, bogus_kw=3)
    RetraceProbe(lambda x: x, reduce_retracing=True)  # a real tf.function option is fine


def test_no_raw_trace_type_repr_anywhere_in_the_retrace_corpus():
    """Every reason and fix of test_02's reason cases, the fixture script, expect_traces
    messages and the cases above: no TraceType repr (Weakref[, TensorSpec(shape=…)."""
    import test_retrace_probe as t02

    traces = []
    for _, fn, drive, *_ in t02.REASON_CASES:
        p = RetraceProbe(fn)
        drive(p)
        traces += p.traces
    script = trace_script(t02.SCRIPT)
    traces += [t for f in script.functions for t in f.traces]
    with capture_trace_events() as logged:
        f = tf.function(lambda fn, x: fn(x))
        f(lambda t: t, tf.ones([1])), f(lambda t: t, tf.ones([1]))
    traces += [t for g in group_logged_traces(logged) for t in g.traces]
    assert len(traces) > 20
    _no_raw_repr(traces)
    g = tf.function(lambda x: x * 2.0)
    g(tf.ones([2]))
    with pytest.raises(AssertionError) as info:
        with expect_traces(g, at_most=0):
            g(tf.ones([3]))
    assert not RAW_REPRS.search(str(info.value)), str(info.value)
    # The check can fail: a planted raw repr is caught.
    planted = dataclasses.replace(traces[1], reasons=["fn: Weakref[<weakref at 0x1; to 'function'>]"])
    with pytest.raises(AssertionError):
        _no_raw_repr([planted])


def test_weakref_identity_live_object_vs_collected_object():
    p = RetraceProbe(_use)
    a, b = _Plain(), _Plain()
    p(tf.ones([1]), a), p(tf.ones([1]), b)  # both alive, not ==: a new object
    (r,) = p.traces[1].details
    assert (r.kind, r.text) == ("object", "obj: new object each call (_Plain object; TF matches it by weak reference)")
    p(tf.ones([1]), a)  # the same live object: TF's cache hit
    assert p.trace_count == 2
    del a
    import gc

    gc.collect()
    p(tf.ones([1]), _Plain())  # trace #1's object is gone; #2's (b) is alive but another object
    kinds = {d.kind for d in p.traces[2].details}
    assert kinds <= {"object", "collected"} and p.trace_count == 3
    _no_raw_repr(p.traces)


def test_per_replica_specs_are_diffed_from_the_objects():
    from tflab._tf.function import make_per_replica_spec

    spec = lambda *rows: make_per_replica_spec([tf.TensorSpec([r, 4]) for r in rows])  # noqa: E731
    (r,) = reasons_between({"x": spec(2, 2)}, {"x": spec(2, 1)})
    assert (r.kind, r.text) == ("per_replica_shape",
                                "x: per-replica shape replica 1 (2, 4) -> (1, 4) (of 2 replicas)")
    assert "element_spec" in r.fix
    assert reasons_between({"x": spec(2, 2)}, {"x": spec(2, 2)}) == []


def test_a_changed_dataclass_value_is_the_cause_even_after_the_old_object_is_collected():
    """Cfg(1.0) then Cfg(2.0), each dropped after its call. TF matches the frozen
    dataclass by ==, so the value change retraced; garbage collection is named only when the values
    were equal (then TF could not look the old object up), and no "#N" placeholder leaks."""
    Cfg = _NewcomerCfg

    @tf.function
    def d(x, cfg):
        return x * cfg.scale

    probe = RetraceProbe(d)
    x = tf.ones([2])
    for s in (1.0, 2.0, 3.0):
        probe(x, Cfg(s))
    assert probe.trace_count == 3
    r2, r3 = probe.traces[1].reasons, probe.traces[2].reasons
    assert r2 == ["cfg: _NewcomerCfg(scale=1.0) -> _NewcomerCfg(scale=2.0) (TF matches it by ==; the earlier object has "
                  "since been garbage-collected)"]
    assert r3[0].startswith("cfg: _NewcomerCfg(scale=2.0) -> _NewcomerCfg(scale=3.0)")
    assert all("#N" not in t for tr in probe.traces for t in (*tr.reasons, *tr.runner_up_reasons))


def test_stabilize_count_consumes_the_trace_event_the_log_sees():
    """stabilization.count_traces is the probe's trace-time trigger (on_each_trace): each trace gives the
    TraceEvent read from TF's tracing frame, the same one capture_trace_events makes for that trace.
    On tflab without the fix count_traces took no events and made none (its own side effect, args only)."""
    from tflab import stabilization_report
    from tflab.stabilization import count_traces

    log, events = [], []
    f = tf.function(count_traces(lambda x: x * 2.0, log, events), reduce_retracing=True)
    with capture_trace_events() as logged:
        for n in (2, 3, 4):
            f(tf.ones([n]))
    assert log == ["(float32[2])", "(float32[None])"]  # TF relaxed the 2nd trace; the 3rd call reused it
    assert len(events) == 2 and all(isinstance(e, TraceEvent) for e in events)
    mine = [e for e in logged if e.function_id == id(f)]
    assert [e.lookup_type for e in events] == [e.lookup_type for e in mine]
    assert [e.traced_type for e in events] == [e.traced_type for e in mine]
    assert [e.relaxed for e in events] == [False, True] and events[1].options["reduce_retracing"] is True

    r = stabilization_report(lambda x: tf.reduce_sum(x), [tf.zeros([4, 8]), tf.zeros([2, 8]), tf.zeros([3, 8])])
    assert r.variants["reduce_retracing"].relaxed == (False, True)
    assert r.variants["plain"].relaxed == (False, False, False)
    (only,) = r.variants["input_signature"].events
    assert only.options["input_signature"] is True and not only.relaxed
    assert r.to_dict()["variants"]["reduce_retracing"]["relaxed"] == [False, True]


def test_tflab_retrace_reports_the_same_side_effects_as_the_probe(tmp_path, run_cli):
    """tensorflow/tensorflow#31362 through the CLI: tflab without the fix's `tflab retrace` printed no side effect (no call count)."""
    path = _script(tmp_path, "bump.py", _BUMP)
    script = trace_script(path)
    (fn,) = script.functions
    ns = runpy.run_path(path, run_name="not_main")
    probe = RetraceProbe(ns["bump"])
    for _ in range(5):
        probe(tf.ones([2]))
    assert fn.calls == probe.calls == 5 and fn.trace_count == probe.trace_count == 1
    assert [t.reasons for t in fn.traces] == [t.reasons for t in probe.traces]
    assert list(fn.side_effects) == probe.side_effects and len(probe.side_effects) == 2
    line_no = textwrap.dedent(_BUMP).splitlines().index("    o.value += 1") + 1
    assert probe.side_effects[0].startswith(f"`o.value += 1` (line {line_no}) ran 1 time in 5 calls: it "
                                            f"runs only while tracing")
    code, out, err = run_cli("retrace", path)
    assert code == 0, err
    assert "value 1" in out  # what TF did: the statement ran once
    assert "bump: 1 trace(s) in 5 call(s)" in out
    for line in probe.side_effects:
        assert f"  side effect: {line}" in out
    code, out, err = run_cli("retrace", "--json", path)
    (d,) = __import__("json").loads(out)["functions"]
    assert d["calls"] == 5 and d["side_effects"] == probe.side_effects


def test_every_call_traced_means_no_side_effect_line_and_the_call_patch_is_undone():
    """The probe's rule: a side effect is only news when some call skipped the body. Inside the block
    Function.__call__ is wrapped; after it (also after an error) it is TF's own again."""
    from tflab._tf import function as tf_function

    cls = tf.__internal__.function.Function
    original = cls.__dict__["__call__"]
    seen = []
    with pytest.raises(RuntimeError, match="boom"):
        with tf_function.count_eager_calls(seen.append):
            assert cls.__dict__["__call__"] is not original
            g = tf.function(lambda x: x + 1.0)
            g(tf.ones([1]))
            raise RuntimeError("boom")
    assert cls.__dict__["__call__"] is original and seen == [g]


def test_two_tf_functions_at_one_reused_address_get_two_keys_and_two_labels():
    """CPython gives a freed object's address to the next object. The tflab without the fix keyed the two apart
    but printed one label, `scaled of @0x…`, for both."""
    import gc

    # Two tf.functions, the first freed before the second is made; TF records each at its own
    # address here, so the reuse is recreated on the second's record (the owner text is the address).
    with capture_trace_events() as logged:
        f = _factory(1.0)
        f(tf.ones([2]))
        del f
        gc.collect()
        g = _factory(2.0)
        g(tf.ones([2]))
    one, two = [e for e in logged if e.function.endswith("scaled")]
    assert one.key != two.key
    groups = group_logged_traces([one, dataclasses.replace(two, owner=one.owner)])
    labels = [grp.label for grp in groups]
    assert len(set(labels)) == 2, labels
    assert labels == [f"scaled of {one.owner} (object 1 at this address)",
                      f"scaled of {one.owner} (object 2 at this address)"]

    # What makes the keys differ: ObjectSerials, not id(), names an object.
    from tflab.retrace.event import ObjectSerials

    class Plain:
        pass

    serials = ObjectSerials()
    a = Plain()
    first, address = serials(a), id(a)
    del a
    b = Plain()  # pymalloc hands the block just freed to the next object of its size (LIFO)
    assert id(b) == address, "no address reuse to test against"
    assert serials(b) != first and serials(b) == serials(b)


def test_the_adapter_instance_names_exist():
    """tflab._tf.function.INSTANCE_NAMES: the private instance attributes it reads exist on live objects
    of the pinned TF (PRIVATE_NAMES covers module-level names; tests/house/test_tf_internals.py checks those)."""
    from tflab._tf import function as tf_function

    f = tf.function(lambda x: x)
    f(tf.ones([1]))
    live = {"Function": f, "FunctionCache": tf_function.function_cache(f),
            "Weakref": tf_function.trace_type_of(tf.nest),  # a module: hashable, so a Weakref TraceType
            "PerReplicaSpec": tf_function.make_per_replica_spec([tf.TensorSpec([2])])}
    assert type(live["Weakref"]).__name__ == "Weakref"
    missing = [f"{cls}.{attr}" for cls, attr in tf_function.INSTANCE_NAMES if not hasattr(live[cls], attr)]
    assert missing == []
    assert type(live["FunctionCache"]).__name__ == "FunctionCache"
    # The check can fail: a name TF does not have is missing (built at run time, so the
    # tests/house/test_tf_internals.py scan does not count it as a private read).
    assert not hasattr(f, "_no_such" + "_attribute_in_tf")
