"""Lab step 2: RetraceProbe counts traces and names, per changed parameter, why TF traced again.

Every count below was measured on TF 2.21 and is asserted as measured; the
reason texts are the probe's own output for those traces.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os

import pytest

tf = pytest.importorskip("tensorflow")

from tflab.errors import UsageError  # noqa: E402
from tflab.retrace import (  # noqa: E402
    RetraceError, RetraceProbe, capture_trace_events, expect_traces, parse_trace_log_message,
    parse_trace_type)

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "retrace")
SCRIPT = os.path.join(DATA, "retrace_script.py")


class _Obj:
    def method(self, x):
        return x + 1.0


def _shape(p):
    for n in (3, 4):
        p(tf.ones([n]))


def _dtype(p):
    p(tf.constant([1.0]))
    p(tf.constant([1]))


def _value(p):
    p(tf.ones([2]), 4)
    p(tf.ones([2]), 8)


def _bound_method(p):
    obj = _Obj()
    for _ in range(2):
        p(obj.method, tf.ones([2]))


def _list_len(p):
    p([tf.ones([2])] * 2)
    p([tf.ones([2])] * 3)


def _dict_keys(p):
    p({"a": tf.ones([2])})
    p({"a": tf.ones([2]), "b": tf.ones([2])})


Point = collections.namedtuple("Point", ["x", "y"])


def _namedtuple_field(p):
    p(Point(tf.ones([2]), 1))
    p(Point(tf.ones([2]), 2))


def _kind(p):
    p(tf.ones([2]), 4)
    p(tf.ones([2]), tf.constant(4))


# (id, function, driver, expected trace count, expected reason of trace #2, fix keyword)
REASON_CASES = [
    ("shape", lambda x: x * 2.0, _shape, 2, "x: shape (3,) -> (4,)", "input_signature"),
    ("dtype", lambda x: x + x, _dtype, 2, "x: dtype float32 -> int32", "tf.cast"),
    ("python_value", lambda x, n: x * n, _value, 2, "n: 4 -> 8", "tf.constant"),
    ("bound_method", lambda fn, x: fn(x), _bound_method, 2,
     "fn: new object each call (bound method _Obj.method; TF matches it by weak reference)",
     "outside the loop"),
    ("list_length", lambda xs: tf.add_n(xs), _list_len, 2, "xs: list length 2 -> 3", "tf.stack"),
    ("dict_keys", lambda d: d["a"], _dict_keys, 2, "d: dict keys ['a'] -> ['a', 'b']", "same keys"),
    ("namedtuple_field", lambda pt: pt.x * pt.y, _namedtuple_field, 2, "pt.y: 1 -> 2", "tf.constant"),
    ("literal_to_tensor", lambda x, n: x * tf.cast(n, tf.float32), _kind, 2,
     "n: Python value 4 -> tensor int32()", "same kind"),
]


@pytest.mark.parametrize("fn,drive,count,reason,fix", [c[1:] for c in REASON_CASES],
                         ids=[c[0] for c in REASON_CASES])
def test_one_reason_per_changed_parameter(fn, drive, count, reason, fix):
    probe = RetraceProbe(fn)
    drive(probe)
    # The side-effect count and TF's cache-entry count agree when no trace fails.
    assert (probe.trace_count, probe.tf_tracing_count) == (count, count)
    assert probe.traces[0].kind == "first" and probe.traces[0].reasons == []
    second = probe.traces[1]
    assert second.kind == "retrace"
    assert second.reasons == [reason]
    assert len(second.fixes) == 1 and fix in second.fixes[0]
    assert second.compared_with == 1


def test_multi_dim_shape_names_the_changed_dim():
    probe = RetraceProbe(lambda x: tf.reduce_sum(x, axis=1))
    for b in (4, 4, 2):
        probe(tf.ones([b, 3]))
    assert probe.trace_count == 2
    assert probe.traces[1].reasons == ["x: shape (4, 3) -> (2, 3) (dim 0: 4 -> 2)"]


def test_variable_creation_retrace_is_labelled_as_tf_own():
    holder = {}

    def f(x):
        if "v" not in holder:
            holder["v"] = tf.Variable(1.0)
        return x * holder["v"]

    probe = RetraceProbe(f)
    probe(tf.ones([2]))
    # Measured: one call, two traces (VARIABLE_CREATION then NO_VARIABLE_CREATION scope).
    assert probe.trace_count == 2 and probe.tf_tracing_count == 2
    assert [t.kind for t in probe.traces] == ["first", "variable_creation"]
    assert [t.scope for t in probe.traces] == ["VARIABLE_CREATION", "NO_VARIABLE_CREATION"]
    assert probe.traces[1].reasons[0].startswith("TF's own re-trace")
    assert "not caused by the inputs" in probe.traces[1].reasons[0]
    # A later new shape is the user's retrace, compared with TF's second trace.
    probe(tf.ones([3]))
    assert probe.traces[2].kind == "retrace" and probe.traces[2].compared_with == 2
    assert probe.traces[2].reasons == ["x: shape (2,) -> (3,)"]


def test_tf_function_options_are_kept():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def f(x):
        return x * 2.0

    probe = RetraceProbe(f)
    for n in (2, 3, 4):
        probe(tf.ones([n]))
    assert probe.trace_count == 1  # the None dim serves every length
    with pytest.raises((TypeError, ValueError)):
        probe(tf.ones([2], tf.int32))  # the signature still rejects int32, as TF does


def test_reduce_retracing_records_the_relaxed_type():
    probe = RetraceProbe(tf.function(lambda x: x * 2.0, reduce_retracing=True))
    for n in range(1, 6):
        probe(tf.ones([n]))
    assert probe.trace_count == 2
    # The reason names the shapes TF looked up, and the relaxed spec TF traced for them.
    assert probe.traces[1].reasons == ["x: shape (1,) -> (2,); TF traced it relaxed, as float32(None,)"]
    (r,) = probe.traces[1].details
    assert (r.traced, r.relaxed) == ("relaxed", "float32(None,)")
    assert probe.traces[1].traced_as == (("x", "TensorSpec(shape=(None,), dtype=tf.float32, name=None)"),)


def test_a_keras_model_is_a_callable_object():
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    probe = RetraceProbe(model)
    probe(tf.ones([2, 4]))
    probe(tf.ones([3, 4]))
    assert probe.function_name == "Sequential" and probe.trace_count == 2
    # Layer.__call__(*args, **kwargs): TF names the first positional args_0.
    assert probe.traces[1].reasons == ["args_0: shape (2, 4) -> (3, 4) (dim 0: 2 -> 3)"]


def test_autograph_still_converts_the_user_function():
    def relu_ish(x):
        if tf.reduce_sum(x) > 0:  # tensor-dependent: only works if AutoGraph converted it
            return x
        return -x

    probe = RetraceProbe(relu_ish)
    assert probe(tf.constant([-1.0, -2.0])).numpy().tolist() == [1.0, 2.0]
    graph = probe.function.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph
    assert any(op.type in ("If", "StatelessIf") for op in graph.get_operations())


def test_stale_global_and_closure_are_reported():
    scale = 2.0

    def f(x):
        return x * scale * GLOBAL_OFFSET

    probe = RetraceProbe(f)
    x = tf.constant([1.0])
    assert probe(x).numpy().tolist() == [2.0]
    scale = 3.0
    globals()["GLOBAL_OFFSET"] = 10.0
    assert probe(x).numpy().tolist() == [2.0]  # no retrace: the graph keeps 2.0 and 1.0
    assert probe.trace_count == 1
    stale = {(s.scope, s.name): (s.traced, s.current, s.trace, s.call) for s in probe.stale}
    assert stale == {("closure", "scale"): ("2.0", "3.0", 1, 2),
                     ("global", "GLOBAL_OFFSET"): ("1.0", "10.0", 1, 2)}
    # The same change is reported once, not on every call.
    probe(x)
    assert len(probe.stale) == 2
    globals()["GLOBAL_OFFSET"] = 1.0


GLOBAL_OFFSET = 1.0


def test_rebound_tensor_and_variable_are_stale_but_assign_is_not():
    bias = tf.constant([1.0])
    weight = tf.Variable([2.0])

    def f(x):
        return x * weight + bias

    probe = RetraceProbe(f)
    x = tf.constant([1.0])
    assert probe(x).numpy().tolist() == [3.0]
    weight.assign([5.0])  # same variable: the graph reads its new value
    assert probe(x).numpy().tolist() == [6.0] and probe.stale == []
    bias = tf.constant([100.0])
    weight = tf.Variable([7.0])
    # Measured: the FuncGraph still uses the captured old tensor and old variable.
    assert probe(x).numpy().tolist() == [6.0]
    assert probe.trace_count == 1
    assert sorted(s.name for s in probe.stale) == ["bias", "weight"]
    assert all(s.traced.startswith(("<tf.Tensor float32(1,)", "<tf.Variable")) for s in probe.stale)


def test_stale_value_set_back_is_not_reported():
    limit = 0.5

    def f(x):
        return x > limit

    probe = RetraceProbe(f)
    probe(tf.constant([0.7]))
    limit = float("0.5")  # a new float object, equal value: the graph is right
    probe(tf.constant([0.7]))
    assert probe.stale == []
    assert limit == 0.5


def test_non_frozen_dataclass_is_one_usage_error_line():
    @dataclasses.dataclass
    class Cfg:
        scale: float = 2.0

    probe = RetraceProbe(lambda x, cfg: x * cfg.scale)
    with pytest.raises(UsageError) as info:
        probe(tf.ones([2]), Cfg())
    msg = str(info.value)
    assert "\n" not in msg
    assert "argument 'cfg' (Cfg) has no TraceType" in msg
    assert "frozen=True" in msg and "__tf_tracing_type__" in msg and "tensors" in msg


def test_not_callable_is_usage_error():
    with pytest.raises(UsageError, match="needs a callable"):
        RetraceProbe(3)


def test_options_for_a_tf_function_are_refused():
    with pytest.raises(UsageError, match="already a tf.function"):
        RetraceProbe(tf.function(lambda x: x), reduce_retracing=True)


def test_reports_render_and_serialize():
    probe = RetraceProbe(lambda x, n: x * n)
    probe(tf.ones([2]), 1)
    probe(tf.ones([2]), 2)
    assert repr(probe) == "<RetraceProbe <lambda>: 2 trace(s) in 2 call(s), last reason: 'n: 1 -> 2'>"
    text = probe.to_text()
    assert "2 trace(s) in 2 call(s)" in text and "#2 retrace vs #1: n: 1 -> 2" in text and "fix:" in text
    assert [repr(t) for t in probe.traces] == ["<Trace #1 first: x=float32(2,), n=1>",
                                               "<Trace #2 retrace: n: 1 -> 2>"]
    d = json.loads(json.dumps(probe.to_dict()))
    assert d["trace_count"] == 2 and d["traces"][1]["reasons"] == ["n: 1 -> 2"]
    assert d["traces"][1]["inputs"]["n"] == "Literal[2]"


def test_expect_traces_raises_with_reasons_for_a_probe():
    probe = RetraceProbe(lambda x: x * 2.0)
    probe(tf.ones([1]))
    with pytest.raises(RetraceError) as info:
        with expect_traces(probe, at_most=1):
            for n in (2, 3):
                probe(tf.ones([n]))
    err = info.value
    assert isinstance(err, AssertionError)
    assert err.count == 2 and err.at_most == 1
    lines = str(err).splitlines()
    assert lines[0] == ("<lambda> traced 2 time(s) in the block, expected at most 1 "
                        "(#1 was traced before the block):")
    assert lines[1].startswith("  #2 vs #1: x: shape (1,) -> (2,)  (fix: give the tf.function an input_signature")
    assert lines[2].startswith("  #3 vs #2: x: shape (2,) -> (3,)")


def test_expect_traces_reads_the_log_for_a_tf_function():
    @tf.function
    def g(x, n):
        return x * n

    with pytest.raises(RetraceError) as info:
        with expect_traces(g, at_most=1):
            g(tf.ones([2]), 1)
            g(tf.ones([2]), 2)
    assert info.value.count == 2
    assert "#2 vs #1: n: 1 -> 2" in str(info.value)


def test_expect_traces_passes_within_the_limit():
    probe = RetraceProbe(lambda x: x + 1.0)
    with expect_traces(probe, at_most=1) as seen:
        for _ in range(3):
            probe(tf.ones([4]))
    assert seen.count == 1


def test_expect_traces_bad_input():
    with pytest.raises(UsageError, match="needs a tf.function or a RetraceProbe"):
        with expect_traces(lambda x: x, at_most=1):
            pass
    with pytest.raises(UsageError, match="at_most must be an int >= 0"):
        with expect_traces(RetraceProbe(lambda x: x), at_most=-1):
            pass


def test_log_text_parser_matches_the_in_process_record():
    import logging

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            if str(record.msg).startswith("Creating new FuncGraph"):
                seen.append(record.getMessage())

    keep = Keep(level=1)
    logger = logging.getLogger("tensorflow")
    with capture_trace_events() as logged:
        logger.addHandler(keep)
        try:
            @tf.function
            def h(x, cfg):
                return x * cfg["s"]

            h(tf.ones([2, 3]), {"s": 2.0})
        finally:
            logger.removeHandler(keep)
    assert len(logged) == 1 and len(seen) == 1
    from_text = parse_trace_log_message(seen[0])
    assert from_text.function == logged[0].function
    assert from_text.function.endswith(".<locals>.h")
    assert from_text.scope == "VARIABLE_CREATION" == logged[0].scope
    assert from_text.inputs == logged[0].inputs == (
        ("x", "TensorSpec(shape=(2, 3), dtype=tf.float32, name=None)"),
        ("cfg", "Dict[['s', Literal[2.0]]]"))


def test_trace_type_parser_handles_weakref_repr():
    node = parse_trace_type("List[Weakref[<weakref at 0x7f00; to 'method' at 0x7f01>]), Literal[1]]")
    assert node.kind == "seq" and [c.kind for _, c in node.children] == ["object", "literal"]
    assert node.children[0][1].what == "bound_method"


def test_retrace_cli_explains_each_function(run_cli):
    code, out, err = run_cli("retrace", SCRIPT)
    assert code == 0, err
    assert "script done" in out
    assert "retrace_script.py: 6 trace(s) in 3 tf.function(s)" in out
    assert "step: 2 trace(s)" in out
    assert "#2 retrace vs #1: x: shape (4, 3) -> (2, 3) (dim 0: 4 -> 2)" in out
    assert "scale: 2 trace(s)" in out and "#2 retrace vs #1: n: 1 -> 2" in out
    assert "make_var: 2 trace(s)" in out and "#2 variable_creation: TF's own re-trace" in out


def test_retrace_cli_json(run_cli):
    code, out, err = run_cli("retrace", "--json", SCRIPT)
    assert code == 0, err
    report = json.loads(out)  # the script's own print went to stderr
    assert "script done" in err
    counts = {f["function"]: f["trace_count"] for f in report["functions"]}
    assert counts == {"step": 2, "scale": 2, "make_var": 2}
    kinds = {f["function"]: [t["kind"] for t in f["traces"]] for f in report["functions"]}
    assert kinds["make_var"] == ["first", "variable_creation"]
    assert report["error"] is None



def test_retrace_options_after_the_script_are_the_scripts_and_said_so(run_cli):
    """argparse hands what follows SCRIPT.py to the script: text, not JSON, and one note saying where --json goes."""
    code, out, err = run_cli("retrace", SCRIPT, "--json")
    assert code == 0, err
    assert "retrace_script.py: 6 trace(s) in 3 tf.function(s)" in out  # the text report
    note = [ln for ln in err.splitlines() if "note: --json after" in ln]
    assert len(note) == 1 and "tflab retrace --json " in note[0], err


def test_retrace_cli_script_that_raises(run_cli):
    code, out, err = run_cli("retrace", SCRIPT, "fail")
    assert code == 2
    assert "step: 2 trace(s)" in out  # what traced before the failure is still reported
    err_lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(err_lines) == 1
    assert err_lines[0].startswith("tflab retrace: error: ")
    assert "raised ValueError: fixture asked to fail (at " in err_lines[0]
    assert "retrace_script.py:" in err_lines[0] and "in main)" in err_lines[0]


def test_retrace_cli_notes_a_script_that_silences_tf_logging(run_cli):
    code, out, err = run_cli("retrace", SCRIPT, "quiet")
    assert code == 0, err
    assert "retrace_script.py: 2 trace(s) in 1 tf.function(s)" in out  # only step's, before the change
    assert "note: the script set the tensorflow logger to level ERROR" in out


@pytest.mark.parametrize("path,message", [
    ("does/not/exist.py", "does not exist; give a path to a .py file"),
    (DATA, "is not a .py file"),
], ids=["missing", "directory"])
def test_retrace_cli_bad_script_path(run_cli, path, message):
    code, out, err = run_cli("retrace", path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_variable_created_on_every_call_is_a_failed_trace_with_its_cause():
    @tf.function
    def creates(x):
        v = tf.Variable(1.0)
        return x * v

    probe = RetraceProbe(creates)
    with pytest.raises(ValueError, match="only supports singleton tf.Variables"):
        probe(tf.ones([2]))
    # Measured: trace #1 (variable creation allowed) succeeds and is cached;
    # TF's second trace, with creation disabled, raises and is not cached.
    assert (probe.trace_count, probe.tf_tracing_count) == (2, 1)
    assert [t.kind for t in probe.traces] == ["first", "failed"]
    failed = probe.traces[1]
    assert failed.scope == "NO_VARIABLE_CREATION" and failed.compared_with == 1
    assert failed.reasons == [
        "raised ValueError because the function creates a tf.Variable on every trace: after the "
        "first trace created one, TF traced again with variable creation disabled (TF: \"tf.function "
        "only supports singleton tf.Variables created on the first call\")"]
    assert failed.fixes == ["create it once outside the function, or guard it with "
                            "`if self.v is None` so only the first trace creates it (not checked: tflab "
                            "cannot move your tf.Variable for you)"]
    assert failed.details[-1].fix_record.status == "not checked"
    assert "garbage-collected" not in probe.to_text()
    # Each later call traces again (nothing was cached for creation disabled) and fails the same way.
    with pytest.raises(ValueError):
        probe(tf.ones([2]))
    assert (probe.trace_count, probe.tf_tracing_count) == (3, 1)
    assert probe.traces[2].kind == "failed" and probe.traces[2].reasons == failed.reasons


def test_the_suggested_guard_fixes_it():
    class Scale:
        def __init__(self):
            self.v = None

        @tf.function
        def __call__(self, x):
            if self.v is None:
                self.v = tf.Variable(2.0)
            return x * self.v

    scale = Scale()  # kept alive: TF binds a tf.function method to a weak reference of self
    probe = RetraceProbe(scale.__call__)
    assert probe(tf.ones([2])).numpy().tolist() == [2.0, 2.0]
    probe(tf.ones([2]))
    assert [t.kind for t in probe.traces] == ["first", "variable_creation"]
    assert probe.tf_tracing_count == 2


def test_another_error_while_tracing_is_named():
    def picky(x):
        if x.shape[0] == 3:
            raise NotImplementedError("length 3 not supported")
        return x * 2.0

    probe = RetraceProbe(picky)
    probe(tf.ones([2]))
    with pytest.raises(NotImplementedError):
        probe(tf.ones([3]))
    assert (probe.trace_count, probe.tf_tracing_count) == (2, 1)
    failed = probe.traces[1]
    assert failed.kind == "failed"
    assert failed.reasons == ["x: shape (2,) -> (3,)", "raised NotImplementedError: length 3 not supported"]
    assert "TF caches no ConcreteFunction for a failed trace" in failed.fixes[1]


def test_nearest_trace_counts_dtype_and_shape_as_two_changes():
    probe = RetraceProbe(lambda x: x * 2)
    probe(tf.ones([2]))
    probe(tf.ones([2], tf.int32))
    probe(tf.ones([3]))
    # #3 differs from #1 by its shape only, from #2 by dtype and shape.
    third = probe.traces[2]
    assert third.compared_with == 1 and third.reasons == ["x: shape (2,) -> (3,)"]
    assert len(third.fixes) == 1 and "input_signature" in third.fixes[0]


CREATES_SCRIPT = '''
import tensorflow as tf

@tf.function
def creates(x):
    v = tf.Variable(1.0)
    return x * v

try:
    creates(tf.ones([2]))
except ValueError as e:
    print("caught", type(e).__name__)
'''


# ---------------------------------------------------------------------------
# wrong answers on one's own code
# ---------------------------------------------------------------------------

TWO_INSTANCES = os.path.join(DATA, "two_instances.py")


def _factory(k):
    @tf.function
    def scaled(x):
        return x * k

    return scaled


def _warm_train_step():
    """The README's pattern: a training step, warmed up on the full batch before the test's block."""
    w = tf.Variable(tf.zeros([4, 1]))

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ w - y) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    x = tf.reshape(tf.range(38 * 4, dtype=tf.float32), [38, 4]) / 100.0
    dataset = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, 1, keepdims=True))).batch(32)
    train_step(*next(iter(dataset)))  # the README's warm-up line
    return train_step, dataset  # batches of 32 and 6


def _direct_step():
    @tf.function
    def train_step(x):
        return tf.reduce_sum(x)

    return train_step


LR_SCRIPT = '''
import tensorflow as tf

@tf.function
def update(x, k, lr):
    return x * k * lr

update(tf.ones([2]), 1, 0.1)
update(tf.ones([3]), 2, 0.1)
update(tf.ones([2]), 1, 0.05)
update(tf.ones([3]), 2, 0.05)
'''


def test_a_script_that_exits_says_so_in_its_repr_and_text(tmp_path):
    """``trace_script`` on a script that calls ``sys.exit(4)`` before any trace gave
    ``<ScriptTraces s.py: >`` and "no tf.function traced": the exit was only in ``.error``."""
    import tflab

    script = tmp_path / "s_exit.py"
    script.write_text("import sys\nsys.exit(4)\n")
    traces = tflab.trace_script(str(script))
    assert traces.error and "4" in traces.error, traces.error
    assert repr(traces).startswith(f"<ScriptTraces {script}: no tf.function traced; ") and traces.error in repr(traces)
    assert traces.error in traces.to_text().splitlines()[0]
