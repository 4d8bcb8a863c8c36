"""Retrace fixes are "checked" only on the user's values: symptom gone AND outputs equal eager's on every call.

Cases: a global tf.Variable rebound inside the function (tensorflow/tensorflow#30768) and its nonlocal and
attribute kin; one retrace with several causes that only work together; a tensor or Python value read
through ``self`` and replaced later (tensorflow/tensorflow#44980); a Keras-made step function that
retraces under ``predict`` (tensorflow/tensorflow#34907). Each next to a healthy twin.
"""

from __future__ import annotations

import os

import pytest

tf = pytest.importorskip("tensorflow")

import tflab  # noqa: E402
from tflab import fix as fx  # noqa: E402

# --- a rebound tf.Variable name ----------------------------------------------------------------

v = None


def _global_case():
    global v
    v = tf.Variable(0.0)

    @tf.function
    def f(x):
        global v
        v = v + x
        return v

    p = tflab.RetraceProbe(f)
    p(42.0)
    with pytest.raises(TypeError):  # TF 2.21: the second trace reads a tensor of the first graph
        p(1.0)
    return p


@pytest.fixture(scope="module")
def global_probe():
    return _global_case()


def test_pass_a_tensor_is_failed_on_values_because_eager_accumulates(global_probe):
    r = global_probe.traces[1].details[0]
    tensor = next(f for f in r.plan.tried if f.change == "x = tf.constant(x, tf.float32)")
    assert tensor.failed  # one trace, but the graph returns 1.0 where eager returns 43.0
    assert "call 2: output[0] is 1.0 where eager gave 43.0" in tensor.result


def test_the_rebinding_line_is_named_with_assign_add_checked_against_eager(global_probe):
    (rb,) = global_probe.rebinds
    assert rb.source == "v = v + x" and rb.scope == "global" and rb.name == "v"
    assert rb.line == _global_case.__code__.co_firstlineno + 7
    assert rb.change == "v.assign_add(x)"
    assert rb.plan.fix.checked and "outputs equal eager's on your 2 calls (bit for bit)" in rb.plan.fix.result
    assert "rebind: `v = v + x`" in global_probe.to_text()


def test_the_retrace_fix_combines_the_tensor_and_the_assign(global_probe):
    fix = global_probe.traces[1].details[0].plan.fix
    assert fix.checked and "x = tf.constant(x, tf.float32)" in fix.change and "v.assign_add(x)" in fix.change
    assert "1 trace for your 2 calls" in fix.result and "bit for bit" in fix.result


@pytest.fixture(scope="module")
def kin_probes():
    def make_counter():
        c = tf.Variable(1.0)

        def step(x):
            nonlocal c
            c = c * x
            return c
        return step

    class Acc:
        def __init__(self):
            self.total = tf.Variable(0.0)

        @tf.function
        def add(self, x):
            self.total = self.total - x
            return self.total

    acc = Acc()  # TF binds the method to a weak reference: the instance must stay alive
    out = {"instance": acc}
    for name, fn, args in (("nonlocal", make_counter(), (tf.constant(2.0), tf.constant(3.0))),
                           ("attribute", acc.add, (tf.constant(2.0), tf.constant(3.0)))):
        p = tflab.RetraceProbe(fn)
        for a in args:
            try:
                p(a)
            except Exception:  # noqa: BLE001 - TF may refuse the rebound tensor; the probe still records
                pass
        out[name] = p
    return out


def test_nonlocal_product_rebind_gets_assign_of_the_product(kin_probes):
    (rb,) = kin_probes["nonlocal"].rebinds
    assert rb.scope == "nonlocal" and rb.change == "c.assign(c * x)"
    assert rb.plan.fix.checked, rb.plan.fix.line()


def test_attribute_rebind_gets_assign_sub(kin_probes):
    (rb,) = kin_probes["attribute"].rebinds
    assert rb.scope == "attribute" and rb.change == "self.total.assign_sub(x)"
    assert rb.plan.fix.checked, rb.plan.fix.line()


def test_healthy_twin_assign_add_is_not_a_rebind_and_its_fix_is_checked_bit_for_bit():
    w = tf.Variable(0.0)

    def f(x):
        w.assign_add(x)
        return w.read_value()

    p = tflab.RetraceProbe(f)
    p(42.0), p(1.0)
    assert p.rebinds == []
    fix = p.traces[1].details[0].plan.fix
    assert fix.checked and "outputs equal eager's on your 2 calls (bit for bit)" in fix.result


# --- several causes: searched together -----------------------------------------------------------


@pytest.fixture(scope="module")
def shape_and_number():
    def fm(x, k):
        return x * k

    p = tflab.RetraceProbe(fm)
    p(tf.ones([2]), 1), p(tf.ones([3]), 2), p(tf.ones([4]), 3)
    return p


def test_the_number_s_fix_is_checked_with_the_shape_held_fixed_and_together(shape_and_number):
    k = next(r for r in shape_and_number.traces[1].details if r.parameter == "k")
    assert k.plan.fix.checked and "k = tf.constant(k, tf.float32)" in k.plan.fix.change
    assert "input_signature=[tf.TensorSpec([None], tf.float32)" in k.plan.fix.change
    held = [f for f in k.plan.tried if "held fixed" in f.description]
    assert held and held[0].checked and "bit for bit" in held[0].result


def test_several_python_numbers_that_change_together_are_converted_together():
    def g(x, a, b):
        return x * a + b

    p = tflab.RetraceProbe(g)
    x = tf.ones([2])
    p(x, 1.0, 2.0), p(x, 2.0, 3.0), p(x, 3.0, 4.0)
    for r in p.traces[1].details:
        f = r.plan.fix
        assert f.checked, f.line()
        assert "a = tf.constant(a, tf.float32)" in f.change and "b = tf.constant(b, tf.float32)" in f.change
        assert "1 trace for your 3 calls" in f.result and "bit for bit" in f.result


def test_healthy_twin_one_cause_keeps_its_own_fix():
    def fm(x, k):
        return x * k

    p = tflab.RetraceProbe(fm)
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    f = p.traces[1].details[0].plan.fix
    assert f.checked and f.change == "k = tf.constant(k, tf.float32)"
    assert "outputs equal eager's on your 2 calls (bit for bit)" in f.result


def test_no_values_kept_says_so_never_plain_checked():
    def fm(x, k):
        return x * k

    p = tflab.RetraceProbe(fm)
    p._values.max_bytes = 4  # a budget the first tensor passes
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    f = p.traces[1].details[0].plan.fix
    assert f.checked and fx.VALUES_NOT_KEPT in f.result


# --- stale reads through self ---------------------------------------------------------------------


class _Net:
    def __init__(self):
        self.weights = tf.ones([4, 5], tf.float64)

    def _w(self):
        return self.weights

    @tf.function
    def encode(self, x):
        return x * tf.reduce_sum(self._w())


class _Cfg:
    scale = None


class _Scaled:
    def __init__(self):
        self.cfg = _Cfg()
        self.cfg.scale = 2.0

    def __call__(self, x):
        return x * self.cfg.scale


@pytest.fixture(scope="module")
def stale_probes():
    net = _Net()
    p = tflab.RetraceProbe(net.encode)
    one = tf.constant(1.0, tf.float64)
    p(one)
    net.weights = tf.ones([2, 3], tf.float64)
    p(one)
    s = _Scaled()
    q = tflab.RetraceProbe(s)
    q(tf.constant(1.0))
    s.cfg.scale = 3.0
    q(tf.constant(1.0))
    return p, q


def test_a_tensor_attribute_replaced_later_is_a_stale_read_with_a_checked_variable_fix(stale_probes):
    p, _ = stale_probes
    (s,) = p.stale
    assert s.name == "self.weights" and s.call == 2
    assert "`self.weights` was baked into the graph at trace #1 (a tensor, not part of the cache key)" in s.text
    f = s.fix_record
    assert f.checked and "self.weights.assign(new)" in f.change and "tf.TensorShape(None)" in f.change
    assert "outputs equal eager's on your 2 calls (bit for bit)" in f.result


def test_the_unfixed_graph_fails_the_same_values_check(stale_probes):
    p, _ = stale_probes
    vals = p._case_values()
    check = vals.compare(vals.run(tf.function(p._python_fn)))  # the graph as the user has it
    assert not check.ok and "call 2: output[0] is 20.0 where eager gave 6.0" in check.text


def test_a_python_float_on_an_object_held_by_self_is_a_stale_read(stale_probes):
    _, q = stale_probes
    (s,) = q.stale
    assert s.name == "self.cfg.scale" and "(a Python float, not part of the cache key)" in s.text
    assert s.fix_record.checked, s.fix_record.line()


def test_healthy_twin_attribute_kept_in_a_variable_and_assigned_is_not_stale():
    net = _Net()
    net.weights = tf.Variable(tf.ones([4, 5], tf.float64))
    p = tflab.RetraceProbe(net.encode)
    one = tf.constant(1.0, tf.float64)
    p(one)
    net.weights.assign(tf.ones([4, 5], tf.float64) * 2)
    assert float(p(one)) == 40.0
    assert p.stale == []


# --- a Keras-made function ---------------------------------------------------------------------------

_SCRIPT = """
import numpy as np, keras, tensorflow as tf
m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
X = np.ones((8, 6), np.float32)
for n in (3, 5, 7):
    m.predict(X[:n], verbose=0)

@tf.function
def mine(x):
    return x * 2.0

for n in (2, 3, 4):
    mine(tf.ones([n]))
"""


@pytest.fixture(scope="module")
def keras_script(tmp_path_factory):
    from tflab.retrace.log import trace_script

    path = tmp_path_factory.mktemp("keras") / "predict_sizes.py"
    path.write_text(_SCRIPT)
    return trace_script(str(path)).to_text()


def test_keras_step_function_gets_no_input_signature_but_fixes_at_the_users_call(keras_script):
    block = keras_script.split("one_step_on_data", 1)[1].split("\nmine", 1)[0]
    fix_lines = [ln for ln in block.splitlines() if "fix:" in ln or "also:" in ln]
    assert fix_lines and not any("give the tf.function an input_signature" in ln for ln in fix_lines)
    # a script's trace log keeps no values: the line says the outputs were not compared
    assert "nothing to fix" in fix_lines[0] and "(checked on traces only, outputs not compared:" in fix_lines[0]
    assert any("batch_size=3 for every call" in ln for ln in fix_lines)


def test_healthy_twin_the_users_own_function_still_gets_its_input_signature(keras_script):
    block = keras_script.split("\nmine", 1)[1]
    assert "input_signature=[tf.TensorSpec([None], tf.float32)] (checked on traces only, outputs not compared: " \
        "1 trace" in block


# --- what the values check leaves as it found it, and where eager is no reference ------------------


class _Holder:
    def __init__(self):
        self.w = tf.Variable(1.0)


def test_a_replayed_training_step_leaves_the_users_weights_as_they_were():
    holder = _Holder()  # reached through an argument: not a name the body reads

    def step(model, x):
        model.w.assign_sub(0.5 * tf.reduce_sum(x))
        return model.w * 2.0

    p = tflab.RetraceProbe(step)
    p(holder, tf.ones([2])), p(holder, tf.ones([3])), p(holder, tf.ones([4]))
    before = holder.w.numpy()
    fix = p.traces[1].details[0].plan.fix  # the reference and each candidate ran the step again
    assert fix.checked and "outputs equal eager's on your 3 calls (bit for bit)" in fix.result
    assert holder.w.numpy() == before


def test_random_numbers_make_eager_no_reference_and_say_so():
    def noisy(x, k):
        return x * k + tf.random.uniform(tf.shape(x))

    p = tflab.RetraceProbe(noisy)
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    f = p.traces[1].details[0].plan.fix
    assert f.checked and fx.VALUES_NOT_KEPT in f.result and "two eager runs of your function differ" in f.result


def test_the_json_report_carries_the_rebind_and_the_stale_fix(global_probe, stale_probes):
    import json

    d = json.loads(json.dumps(global_probe.to_dict(), default=str))
    assert d["rebinds"][0]["change"] == "v.assign_add(x)" and d["rebinds"][0]["fix_record"]["status"] == "checked"
    s = stale_probes[0].to_dict()["stale"][0]
    assert s["name"] == "self.weights" and s["fix_record"]["status"] == "checked" and "plan" not in s


def test_a_global_int_read_as_a_float_gets_its_variable_as_float32_checked():
    ns = {"tf": tf}
    exec("N = 2\ndef scaled(x):\n    return x * N\n", ns)  # noqa: S102 - a module of its own: N is its global
    p = tflab.RetraceProbe(ns["scaled"])
    p(tf.ones([2]))
    ns["N"] = 3
    p(tf.ones([2]))
    (s,) = p.stale
    f = s.fix_record
    assert f.checked and "N = tf.Variable(N, dtype=tf.float32)" in f.change, f.line()
    assert [t.status for t in s.plan.tried][:2] == ["failed", "checked"]  # int32 first: x * N then fails


def test_three_python_ints_that_change_together_are_all_converted():
    def h(x, a, b, c):
        return x * a + b - c

    p = tflab.RetraceProbe(h)
    x = tf.ones([2])
    p(x, 1, 2, 3), p(x, 2, 3, 4)
    f = p.traces[1].details[0].plan.fix
    assert f.checked, f.line()
    assert all(f"{n} = tf.constant({n}, tf.float32)" in f.change for n in "abc"), f.change
    assert "bit for bit" in f.result


_GLOBAL_SCRIPT = """
import tensorflow as tf
v = tf.Variable(0.0)
w = tf.Variable(0.0)

@tf.function
def f(x):
    global v
    v = v + x
    return v

@tf.function
def g(x):
    w.assign_add(x)
    return w.read_value()

f(42.0)
try:
    f(1.0)
except TypeError:
    pass
g(42.0), g(1.0)
"""


def test_tflab_retrace_names_the_rebinding_line_from_the_log_and_not_a_healthy_assign(tmp_path):
    from tflab.retrace.log import trace_script

    path = tmp_path / "rebind.py"
    path.write_text(_GLOBAL_SCRIPT)
    result = trace_script(str(path))
    by = {f.function_name: f for f in result.functions}
    (line, fix) = by["f"].rebinds
    assert "`v = v + x` (rebind.py:9) rebinds global v" in line
    assert "v.assign_add(x) (line 9)" in fix and f"not checked: {fx.VALUES_NOT_KEPT}" in fix
    assert by["g"].rebinds == ()


def test_a_graph_that_differs_from_eager_by_itself_sets_a_printed_bound_not_a_failure():
    def f(x, k):  # the graph computes a little differently from eager, as fused or reordered kernels may
        return x * k + (0.0 if tf.executing_eagerly() else 1e-6)

    p = tflab.RetraceProbe(f)
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    fix = p.traces[1].details[0].plan.fix
    assert fix.checked and "ULP, bound" in fix.result and "graph vs eager rounding" in fix.result, fix.line()
    assert 0 < fix.measured["max_ulp"] == fix.measured["ulp_bound"]


@pytest.mark.parametrize("loop", ["predict", "fit", "predict_on_batch"])
def test_a_keras_loop_is_refused_with_what_works(loop):
    import keras

    from tflab.errors import UsageError

    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    with pytest.raises(UsageError, match=f"{loop} is Keras' own loop.*tflab retrace SCRIPT.py"):
        tflab.RetraceProbe(getattr(m, loop))
    tflab.RetraceProbe(m)  # the healthy twin: the model's own call is probed


def test_a_rebound_variable_is_not_called_a_trace_counter(tmp_path):
    from tflab._user.target import load_module
    from tflab.retrace.sideeffects import trace_time_effects

    src = tmp_path / "acc_mod.py"
    src.write_text("import tensorflow as tf\nacc = tf.Variable(tf.zeros([3]))\nn = 0\n\n\n"
                   "def accumulate(x):\n    global acc, n\n    acc = acc + x\n    n = n + 1\n    return acc\n")
    mod = load_module(str(src))
    kinds = {e.base: e.kind for e in trace_time_effects(mod.accumulate)}
    assert kinds == {"acc": "variable", "n": "global"}  # the int stays a trace counter (healthy twin)


def test_each_reference_part_gets_the_whole_time_limit(monkeypatch):
    """Eager's outputs and eager's again are made in one child with the whole ``TFLAB_FIX_TIMEOUT_S``;
    the candidate's child then has the whole limit for its run and the graph-vs-eager floor it needs.
    Here a call takes 1 s in Python (the sleep runs on every eager call and on every trace) and the
    limit is 5.5 s: the parts take ~4 s and ~3 s. Under one shared limit no reference was kept, the
    candidate's own child had to make it again (7 s) and the fix came back not checked."""
    import time

    monkeypatch.setenv("TFLAB_FIX_TIMEOUT_S", "5.5")

    def f(x, k):  # the graph differs from eager by a little, so the floor is needed, as for a training step
        time.sleep(1.0)
        return x * k + (0.0 if tf.executing_eagerly() else 1e-6)

    p = tflab.RetraceProbe(f)
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    fix = p.traces[1].details[0].plan.fix
    assert fix.checked and "graph vs eager rounding" in fix.result, fix.line()
    assert fix.measured["values_kept"] and fix.measured["calls_compared"] == 2


def test_the_graph_floor_is_made_only_for_a_candidate_that_differs_from_eager(monkeypatch, tmp_path):
    """The floor costs a fresh trace per recorded call; a candidate whose outputs equal eager's never
    reads it, so no child makes it (the twin above, whose graph differs, gets its bound)."""
    from tflab.retrace.values import CaseValues

    marks = tmp_path / "floor_made"
    real = CaseValues._graph_floor

    def counted(self):
        fd = os.open(marks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # os.open: a forked child's write lands here
        os.write(fd, b"x")
        os.close(fd)
        return real(self)

    monkeypatch.setattr(CaseValues, "_graph_floor", counted)

    def f(x, k):
        return x * k

    p = tflab.RetraceProbe(f)
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    fix = p.traces[1].details[0].plan.fix
    assert fix.checked and fix.measured["values_kept"] and fix.measured["calls_compared"] == 2, fix.line()
    assert "graph vs eager rounding" not in fix.result
    assert not marks.exists()


def test_the_graph_floor_stops_at_the_first_call_that_reaches_the_candidates_distance(tmp_path):
    """Each fresh trace of the floor costs what the user's first call did (a training step: seconds).
    Here the graph differs from eager on every call, so the first call's fresh trace already reaches
    the candidate's distance: one fresh trace, not one per call (3); the bound printed says it was
    measured on the first call. The twin where only the last call differs needs every call."""
    marks = tmp_path / "traces"

    def run(differs_on):
        def f(x, k):
            if not tf.executing_eagerly():  # one byte per trace, from any process (os.open is not redirected)
                fd = os.open(marks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.write(fd, b"x")
                os.close(fd)
            bump = 0.0 if tf.executing_eagerly() else 1e-6
            return x * k + tf.where(tf.reduce_max(k) >= differs_on, bump, 0.0)

        if marks.exists():
            marks.unlink()
        p = tflab.RetraceProbe(f)
        x = tf.ones([2])
        p(x, 1.0), p(x, 2.0), p(x, 3.0)
        fix = p.traces[1].details[0].plan.fix
        return fix, marks.stat().st_size

    fix, traces = run(differs_on=1.0)
    assert fix.checked and "graph vs eager rounding" in fix.result, fix.line()
    assert "traced afresh for your first call, is that far from eager on it" in fix.result, fix.result
    probe_and_candidate = traces - 1
    fix, traces = run(differs_on=3.0)
    assert fix.checked and "traced afresh for each call" in fix.result, fix.line()
    assert traces == probe_and_candidate + 3


def test_the_floor_and_the_candidate_are_each_their_largest_distance_over_every_call():
    """The graph adds 2^-20·k² where eager adds nothing: exactly 8 ULP on call 1 (k=1, at 1.0) and
    16 ULP on call 2 (k=2, at 2.0), in the candidate and in the unchanged function alike. The floor
    is 16, not call 1's 8: a bound taken from the first call that differs failed call 2."""
    def f(x, k):
        return x * k + (0.0 if tf.executing_eagerly() else 2.0 ** -20 * k * k)

    p = tflab.RetraceProbe(f)
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    fix = p.traces[1].details[0].plan.fix
    assert fix.checked and "within 16 ULP, bound 16" in fix.result, fix.line()
    assert "traced afresh for each call" in fix.result
    assert fix.measured["max_ulp"] == fix.measured["ulp_bound"] == 16
