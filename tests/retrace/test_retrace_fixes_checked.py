"""Every fix the probe and ``tflab retrace`` print was run on the user's calls.

Each test adapts one report row (a user-reported retrace case) and
asserts it in that row's "what tflab would need" terms. Each Fix kind printed has a
failing candidate planted beside it (a spec that rejects a call, a cast that breaks
the body, a tensor of the wrong dtype, an object that cannot be shared, a shared
tf.function that cannot serve every object): the test shows it was tried, failed,
and is not the printed fix. Every "checked" claim is then verified by hand with a
tf.function the test builds itself.
"""

from __future__ import annotations

import textwrap

import pytest

tf = pytest.importorskip("tensorflow")

from tflab.retrace import RetraceProbe, trace_script  # noqa: E402
from tflab.retrace.check import Bench, Recorded, recorded_calls  # noqa: E402
from tflab.retrace.diff import like_trace, same_types  # noqa: E402


def _plan(trace, i=0):
    return trace.details[i].plan


def _tf_count(fn, calls):
    for c in calls:
        fn(*c)
    return fn.experimental_get_tracing_count()


# --- input_signature: rank change (healthy: tensorflow/tensorflow#33434; broken: a body that needs the rank) ----------


def add(a, b):
    return a + b


def test_row1_the_printed_signature_accepts_every_call_and_the_old_spec_is_tried_and_fails():
    calls = [(tf.constant(1), tf.constant(2)), (tf.constant([1, 2]), tf.constant([3, 4])),
             (tf.constant([5, 6]), tf.constant([7, 8]))]
    p = RetraceProbe(add)
    for c in calls:
        p(*c)
    plan = _plan(p.traces[1])
    assert plan.fix.change == "input_signature=[tf.TensorSpec(None, tf.int32), tf.TensorSpec(None, tf.int32)]"
    assert plan.fix.checked and plan.fix.measured["traces"] == 1 and plan.fix.result.startswith(
        "1 trace for your 3 calls")
    # The old candidate, relaxed between #1 and #2 only, keeps the new rank: tried, rejected, not printed.
    old = plan.tried[0]
    assert old.change == "input_signature=[tf.TensorSpec([2], tf.int32), tf.TensorSpec([2], tf.int32)]"
    assert old.failed and "rejects call 1 (trace #1)" in old.result
    assert "Can not cast TensorSpec(shape=(), dtype=tf.int32" in old.result
    text = p.to_text()
    assert "tried first: " in text and "fix: give the tf.function an input_signature: input_signature=[" \
        "tf.TensorSpec(None, tf.int32)" in text
    assert p.traces[1].fixes[0].count("TensorSpec([2]") == 0
    # By hand: the printed signature, on the reporter's calls: one trace, the right sums.
    fixed = tf.function(add, input_signature=[tf.TensorSpec(None, tf.int32)] * 2)
    assert [fixed(*c).numpy().tolist() for c in calls] == [3, [4, 6], [12, 14]]
    assert fixed.experimental_get_tracing_count() == 1
    d = p.to_dict()["traces"][1]["details"][0]
    assert d["fix_record"]["status"] == "checked" and d["fix_tried"][0]["status"] == "failed"


def test_rank_and_dtype_change_the_signature_has_unknown_rank_and_one_dtype():
    g = tf.function(lambda x, n: x * n)
    p = RetraceProbe(g)
    calls = [(tf.ones([2]), 2), (tf.ones([3]), 2), (tf.ones([3], tf.float64), 2), (tf.ones([3, 1]), 2)]
    for c in calls:
        p(*c)
    four = p.traces[3]
    assert four.reasons == ["x: shape (3,) -> (3, 1) (rank 1 -> 2)"]
    fix = _plan(four).fix
    assert fix.checked and "tf.TensorSpec(None, tf.float32)" in fix.change and "[3, 1]" not in fix.change
    assert "tf.cast(x, tf.float32)" in fix.change  # the float64 call needs the cast, not a None dim
    # Every candidate tried before it failed on a recorded call: none was printed.
    assert all(f.failed for f in _plan(four).tried[:_plan(four).tried.index(fix)])
    # The dtype change's own fix is a cast, never "None dims".
    cast = _plan(p.traces[2]).fix
    assert cast.kind == "cast" and cast.change == "tf.cast(x, tf.float32)" and "None" not in cast.change
    assert cast.checked and cast.measured["traces"] == 3  # the dtype retrace gone, the shapes remain
    # By hand: tf.TensorSpec(None, tf.float32) takes every call once x is cast.
    sig = eval(fix.change.split(", with ")[0].split("=", 1)[1], {"tf": tf})
    by_hand = tf.function(lambda x, n: x * n, input_signature=sig)
    assert _tf_count(by_hand, [(tf.cast(x, tf.float32), n) for x, n in calls]) == 1


def test_a_rank_change_where_no_signature_can_work_prints_no_fix():
    p = RetraceProbe(lambda x: x * float(x.shape.rank))   # needs the rank at trace time
    p(tf.ones([2]))
    p(tf.ones([2, 2]))
    plan = _plan(p.traces[1])
    assert plan.fix is None and plan.none_worked and len(plan.tried) >= 2
    assert all(f.failed for f in plan.tried)
    assert p.traces[1].fixes[0].startswith("none of the ")
    assert "checked" not in p.traces[1].fixes[0].replace("(failed", "")


# --- cast: a dtype change (healthy; broken: casting one input alone breaks the body) -------------


def test_a_dtype_change_is_fixed_by_a_cast_and_a_cast_of_one_input_alone_is_tried_and_fails():
    healthy = RetraceProbe(lambda x: x * 2.0)
    healthy(tf.ones([2], tf.float32))
    healthy(tf.ones([2], tf.float64))
    fix = _plan(healthy.traces[1]).fix
    # float32 and float64 once each: the wider, which holds both calls' values
    assert (fix.kind, fix.change, fix.status) == ("cast", "tf.cast(x, tf.float64)", "checked")
    assert fix.measured["traces"] == 1
    broken = RetraceProbe(lambda x, y: x + y)
    broken(tf.ones([2], tf.float32), tf.ones([2], tf.float32))
    broken(tf.ones([2], tf.float64), tf.ones([2], tf.float64))
    plan = _plan(broken.traces[1])
    assert [f.status for f in plan.tried] == ["failed", "failed", "checked"]
    assert plan.tried[0].change == "tf.cast(x, tf.float64)" and "raised" in plan.tried[0].result
    assert plan.fix.change == "tf.cast(x, tf.float32), tf.cast(y, tf.float32)"
    assert "tried first: " in broken.to_text()


# --- code: a Python scalar that varies becomes a tensor ------------------------------------------


def test_a_varying_python_scalar_becomes_a_tensor_and_the_wrong_dtype_is_tried_first():
    p = RetraceProbe(lambda x, n: x * n)
    for n in (1, 2, 3):
        p(tf.ones([2]), n)
    plan = _plan(p.traces[1])
    assert plan.tried[0].change == "n = tf.constant(n, tf.int32)" and plan.tried[0].failed
    assert "Mul" in plan.tried[0].result  # float32 * int32: the planted failing candidate
    assert plan.fix.change == "n = tf.constant(n, tf.float32)" and plan.fix.checked
    assert plan.fix.measured["traces"] == 1
    by_hand = tf.function(lambda x, n: x * n)
    assert _tf_count(by_hand, [(tf.ones([2]), tf.constant(n, tf.float32)) for n in (1, 2, 3)]) == 1


# --- code: the structure an earlier trace had;: a tie headlines the trace the call hits ------


def test_the_tie_headline_is_the_trace_the_call_would_hit():
    h = tf.function(lambda d: d["a"] + tf.add_n(d["l"]))
    p = RetraceProbe(h)
    p({"a": tf.ones([2]), "l": [tf.ones([2])]})
    p({"a": tf.ones([2]), "l": [tf.ones([2]), tf.ones([2])]})
    p({"a": tf.ones([2]), "l": [tf.ones([2]), tf.ones([2])], "b": 1})
    p({"a": tf.ones([2]), "l": (tf.ones([2]), tf.ones([2]))})
    four = p.traces[3]
    assert four.compared_with == 2 and four.reasons == ["d['l']: list of 2 -> tuple of 2"]
    assert four.runner_up == 3
    fix = _plan(four).fix
    # a list passed as a tuple runs other data than the user's call: counted on traces, never called values-checked
    assert fix.checked and fix.result == "call 4 then hits trace #2's graph (1 trace for both); traces only, values not kept"
    # The runner-up's fix (same keys as #3) is the planted failure: applied, call 4 still misses #3.
    nodes = {t.index: t.nodes for t in p.traces}
    keys = next(r for r in p.traces[2].details if r.kind == "keys")   # d's keys, as #3's runner-up
    fixed = like_trace(nodes[4], keys, nodes[3])
    assert not same_types(fixed, nodes[3])
    bench = Bench(h.python_function, [], 4, 4)
    o = bench.run("keys", [Recorded(3, 3, nodes[3]), Recorded(4, 4, fixed)])
    assert o.traces == 2
    # By hand: passing a list, as the fix says, hits trace #2 (TF's own count does not grow).
    before = p.tf_tracing_count
    p({"a": tf.ones([2]), "l": [tf.ones([2]), tf.ones([2])]})
    assert p.tf_tracing_count == before


# --- move: a new object per call; where it is made is named ------------------------------------


def make_scale():
    return lambda t: t * 2.0


def apply(fn, x):
    return fn(x)


def test_a_new_lambda_per_call_names_the_function_that_makes_it_and_is_checked():
    p = RetraceProbe(apply)
    alive = [make_scale() for _ in range(3)]
    for fn in alive:
        p(fn, tf.ones([2]))
    fix = _plan(p.traces[1]).fix
    assert fix.kind == "move" and "it is made inside `make_scale`: make it once, at module level" in fix.description
    assert fix.checked and fix.result.startswith("1 trace for your 3 calls, instead of 3")


# --- row 6 (tensorflow/tensorflow#42000): a new model + Adam per experiment ------------------------------------------


def _make_model():
    import keras

    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])


def train_step(model, x, y, optimizer):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def test_row6_a_new_adam_per_experiment_gets_optimizer_build_and_a_function_per_experiment_both_run():
    import keras

    p = RetraceProbe(train_step)
    x, y = tf.random.stateless_normal([8, 4], seed=[1, 2]), tf.zeros([8, 1])
    kept, raised = [], []
    for exp in range(2):
        model, opt = _make_model(), keras.optimizers.Adam(1e-3)
        kept.append((model, opt))
        try:
            for _ in range(2):
                p(model, x, y, opt)
        except ValueError as e:
            raised.append((exp, "singleton" in str(e)))
    assert raised == [(1, True)]
    n_vars = len(kept[1][1].variables)
    failed = p.traces[-1]
    assert failed.kind == "failed"
    plan = next(r.plan for r in failed.details if r.kind == "variable_per_trace")
    assert plan.fix.change == "optimizer.build(model.trainable_variables)" and plan.fix.checked
    per_experiment = [f for f in plan.tried if f.change.startswith("step = tf.function(train_step)")]
    assert per_experiment and per_experiment[0].checked
    assert "also: make a new tf.function per experiment" in p.to_text()
    # "pass the same object" is the planted failure here: the experiment needs a new model.
    same = next(r.plan for r in failed.details if r.parameter == "model")
    assert same.fix is None and "ValueError" in same.tried[0].result
    # The user's optimizer was not touched by the checks (they trace fresh copies).
    assert len(kept[1][1].variables) == n_vars
    # The diagnosis names the optimizer fix too (diagnose's variable-created-in-function rule).
    assert "optimizer.build(model.trainable_variables)" in failed.diagnosis.fix
    # By hand: with optimizer.build before the loop, one tf.function runs both experiments.
    step = tf.function(train_step)
    for _ in range(2):
        model, opt = _make_model(), keras.optimizers.Adam(1e-3)
        opt.build(model.trainable_variables)
        step(model, x, y, opt)


def train_step_with_a_layer(model, x, y, optimizer):
    import keras

    extra = keras.layers.Dense(1)   # a new layer, and new tf.Variables, on every trace
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) + extra(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def test_the_optimizer_fixes_fail_and_are_not_printed_when_the_step_also_builds_a_layer():
    import keras

    p = RetraceProbe(train_step_with_a_layer)
    model, opt = _make_model(), keras.optimizers.Adam(1e-3)
    with pytest.raises(ValueError, match="singleton"):
        p(model, tf.ones([8, 4]), tf.zeros([8, 1]), opt)
    plan = next(r.plan for r in p.traces[-1].details if r.kind == "variable_per_trace")
    assert [f.kind for f in plan.tried] == ["optimizer_build", "move"]
    assert plan.fix is None and all(f.failed and "singleton" in f.result for f in plan.tried)
    assert "optimizer.build" not in p.traces[-1].fixes[-1].split("worked on your case")[0]


# --- a retrace with equal TraceTypes names the part of TF's cache key -------------------


class _Scaled(tf.Module):
    def __init__(self):
        super().__init__()
        self.v = tf.Variable(2.0)

    @tf.function
    def f(self, x):
        return x * self.v


def test_a_trace_inside_saved_model_save_names_the_save_context(tmp_path):
    m = _Scaled()
    p = RetraceProbe(m.f)
    p(tf.ones([2]))
    m.g = p.function
    tf.saved_model.save(m, str(tmp_path / "sm"))
    p(tf.ones([2]))
    t = p.traces[1]
    assert (t.kind, t.call, t.details[0].kind) == ("retrace", 0, "context")
    assert "save context" in t.reasons[0] and "variable_policy None ->" in t.reasons[0]
    assert "garbage-collected" not in p.to_text()
    assert p.trace_count == len(p.traces) == p.tf_tracing_count == 2


def test_a_trace_inside_another_graph_names_the_graph():
    p = RetraceProbe(lambda x: x * 2.0)
    p(tf.ones([2]))
    with tf.Graph().as_default():   # (inside an outer tf.function, init_scope lifts to eager: no retrace)
        p(tf.ones([2]))
    t = p.traces[1]
    assert t.details[0].kind == "context" and "graph: called from inside another graph" in t.reasons[0]
    assert "parent_graph eager -> a graph" in t.reasons[0]


# --- tflab retrace: row 4 (epitome#43), a shared function that cannot serve all ----------


EPITOME = """
import tensorflow as tf
class Predictor:
    def __init__(self):
        self.w = tf.Variable(tf.ones([3, 2]))
    def run_predictions(self, x):
        @tf.function
        def predict_step(inputs):
            return inputs @ self.w
        return predict_step(x)
p = Predictor()
for i in range(4):
    p.run_predictions(tf.ones([2, 3]))
"""

SHAPES = """
import tensorflow as tf
def run(n):
    w = tf.ones([n, 2])
    @tf.function
    def predict_step(inputs):
        return inputs @ w
    return predict_step(tf.ones([2, n]))
for n in (3, 4):
    run(n)
"""

INSTANCES = """
import tensorflow as tf
class A:
    def __init__(self, k): self.k = k
    @tf.function
    def go(self, x): return x * self.k
for k in ({k1}, {k2}):
    a = A(k); a.go(tf.ones([2])); a.go(tf.ones([3]))
"""


ROW1 = """
import tensorflow as tf
@tf.function
def add(a, b):
    return a + b
add(tf.constant(1), tf.constant(2)); add(tf.constant([1, 2]), tf.constant([3, 4]))
add(tf.constant([5, 6]), tf.constant([7, 8]))
"""


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return trace_script(str(path))


def test_row1_through_tflab_retrace_the_log_path_runs_the_same_fix(tmp_path):
    (f,) = _script(tmp_path, "row1.py", ROW1).functions
    plan = _plan(f.traces[1])
    assert plan.fix.checked and "tf.TensorSpec(None, tf.int32)" in plan.fix.change
    assert plan.tried[0].failed and plan.tried[0].result.startswith("rejects call 1 (trace #1): Can not cast")
    assert plan.fix.result == "1 trace for your 3 calls, instead of 2; traces only, values not kept"  # a log has no values


def test_row4_names_the_enclosing_function_and_checks_one_tf_function(tmp_path):
    (g,) = _script(tmp_path, "epitome.py", EPITOME).shared_names
    assert not g.configured and "a new tf.function each time" in g.text
    fix = g.plan.fix
    assert fix.description.startswith("`predict_step` is defined inside `Predictor.run_predictions`")
    assert "create it once, in `Predictor.__init__`" in fix.description
    assert fix.checked and fix.result == "1 trace for your 4 calls, instead of 4; traces only, values not kept"


def test_a_shared_tf_function_that_cannot_serve_every_object_is_not_printed(tmp_path):
    (g,) = _script(tmp_path, "shapes.py", SHAPES).shared_names
    assert g.plan.fix is None and g.plan.tried[0].failed   # one closure's w cannot take the other's inputs
    assert g.fix.startswith("none of the 1 candidate fix(es) worked")


def test_configured_instances_need_their_own_traces_only_the_shape_retrace_is_fixed(tmp_path):
    report = _script(tmp_path, "inst.py", INSTANCES.format(k1=1, k2=2))
    (g,) = report.shared_names
    assert g.configured and "(k: 1, 2)" in g.text and "a new tf.function each time" not in g.text
    assert "build it once" not in g.fix and "nothing to change across them" in g.fix
    second = report.functions[1].traces[1]
    assert second.reasons == ["x: shape (2,) -> (3,)"] and _plan(second).fix.checked
    first = report.functions[0].traces[1]   # that instance was freed: its fix cannot be run
    assert _plan(first).fix.status == "not checked" and "freed" in _plan(first).fix.why
    # Healthy counterpart: equal instances are "a new tf.function each time".
    (same,) = _script(tmp_path, "same.py", INSTANCES.format(k1=1, k2=1)).shared_names
    assert not same.configured and "a new tf.function each time" in same.text


# --- cost: the checks trace the body a counted number of times, once -----------------------------


def test_checking_costs_one_trace_per_signature_candidate_and_nothing_on_a_second_read():
    traced = []

    def body(a, b):
        traced.append(1)
        return a + b

    p = RetraceProbe(body)
    for s in ([], [2], [2], [3]):
        p(tf.zeros(s, tf.int32), tf.zeros(s, tf.int32))
    assert len(traced) == p.trace_count == 3
    from tflab.process import apart

    children = []
    real_run_apart = apart.run_apart

    def counted(fn, timeout_s=None):
        children.append(fn)
        return real_run_apart(fn, timeout_s)

    apart.run_apart = counted
    try:
        p.to_text()
        plan = _plan(p.traces[1])
        assert [f.status for f in plan.tried] == ["failed", "checked"]   # the pair spec, then the history's
        assert plan.fix.measured["traces"] == 1  # the signature traced once, in the check's child
        assert len(traced) == 3                  # ... so the user's list is as the user's calls left it
        n = len(children)
        p.to_text(), p.to_dict()
        assert len(children) == n                # memoized: a second read runs no check again
    finally:
        apart.run_apart = real_run_apart
    assert len(recorded_calls(p.traces)) == 3
    # reduce_retracing is run only when no input_signature works (it costs a trace per shape)
    assert all(f.change != "reduce_retracing=True" for f in plan.tried)


def test_a_structure_fix_that_drops_data_is_not_printed_as_checked():
    """"pass d with the keys ['a']" hit the cache (measured) but dropped d['b']."""
    import tflab

    p = tflab.RetraceProbe(tf.function(lambda d: tf.add_n(list(d.values()))))
    p({"a": tf.ones([2])})
    p({"a": tf.ones([2]), "b": tf.ones([2])})
    [r] = [r for r in p.traces[1].details if r.kind == "keys"]
    f = r.fix_record
    assert f.status == "not checked", f.line()
    assert "hits trace #1's graph" in f.why and "drops the keys" in f.why, f.line()
    # The healthy twin: list -> tuple keeps every item, so its cache hit is a checked fix.
    q = tflab.RetraceProbe(tf.function(lambda xs: tf.add_n(xs)))
    q([tf.ones([2]), tf.ones([2])])
    q((tf.ones([2]), tf.ones([2])))
    [k] = [r for r in q.traces[1].details if r.kind == "kind"]
    assert k.fix_record.status == "checked", k.fix_record.line()


VARIABLE_INSTANCES = """
import tensorflow as tf


class Layer:
    def __init__(self, v):
        self.w = tf.Variable(v)

    @tf.function
    def __call__(self, x):
        return x * self.w


a, b = Layer({v1}), Layer({v2})
a(tf.ones([2]))
b(tf.ones([2]))
"""


def test_instances_holding_their_own_variables_are_configured_not_told_to_share_one(tmp_path):
    """Layer(1.0) and Layer(2.0), each with its own tf.Variable, were told to build
    one Layer and reuse it ("checked: 1 trace"), which would give b's caller a's 1x. A variable attribute
    is configuration, by value: different values need their own graphs; equal ones may share."""
    (g,) = _script(tmp_path, "vars.py", VARIABLE_INSTANCES.format(v1=1.0, v2=2.0)).shared_names
    assert g.configured, g.text
    assert "w: tf.Variable(1.0, float32), tf.Variable(2.0, float32)" in g.text, g.text
    assert "build the Layer once" not in g.fix and "nothing to change across them" in g.fix
    (same,) = _script(tmp_path, "same_vars.py", VARIABLE_INSTANCES.format(v1=1.0, v2=1.0)).shared_names
    assert not same.configured and "a new tf.function each time" in same.text


def test_every_trace_of_a_dtype_history_names_one_cast_and_never_a_float_to_an_integer():
    """Float32, int32, float64, int32 calls; trace #3 said cast to int32 (4.5 -> 4)."""
    p = RetraceProbe(lambda x: x * 2)
    for v in (tf.constant(1.5), tf.constant(2), tf.constant(2.25, tf.float64), tf.constant(3)):
        p(v)
    changes = {_plan(t).fix.change for t in p.traces[1:] if t.reasons and "dtype" in t.reasons[0]}
    assert changes == {"tf.cast(x, tf.float64)"}, changes
