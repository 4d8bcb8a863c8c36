"""A diagnose fix is "checked" only when it gives the ORIGINAL function's eager values, on
tflab's input and on draws that take the other branch, compared by `tflab.fix.values_match`
(the reference is never cast to the fix's dtype).

Rows: a branch dtype mismatch whose narrowing cast turns eager's 0.5 into 0; a global rebound to
a tensor inside a tf.function (tensorflow/tensorflow#30768), whose fix is `v.assign_add(x)` at the
user's line; a Keras layer built in a Python loop, built once per iteration outside under a name
that is not the function's input. Each has a sibling it does not name and a healthy twin; each
check is shown able to fail with a planted defect. Cases: tests/data/diagnose/values_cases.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import tflab.fix as fx
from tflab import diagnose
from tflab._user.target import load_module

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "diagnose")
V = load_module(os.path.join(DATA, "values_cases.py"))
VLINES = open(os.path.join(DATA, "values_cases.py")).read().splitlines()
S = tf.TensorSpec


TOTAL = V.Total()  # held: a tf.function method of a freed instance is called with self=None


def vline(marker: str) -> int:
    (hit,) = [i + 1 for i, ln in enumerate(VLINES) if ln.endswith(f"# {marker}")]
    return hit


# --- the comparison itself -------------------------------------------------------------------

def test_judge_never_casts_eager_to_the_fix_dtype():
    """Planted: an int32 0 where eager gave float32 0.5 fails, with values_match's own words."""
    from tflab.diagnosis.context import judge

    ok, text, _ = judge([np.float32(0.5)], [np.int32(0)])
    assert not ok and text.startswith("call 1: output[0] is 0 where eager gave 0.5")
    ok, text, _ = judge([np.float32(0.5), np.int32(1)], [np.float32(0.5), np.float32(1.0)])
    assert ok and "int32 → float32: exact" in text and "ULP bound 0" in text


def test_dtype_bound_is_zero_for_exact_casts_and_half_an_ulp_for_a_narrowing_float():
    from tflab.diagnosis.reference import dtype_bound, widest_first

    assert dtype_bound("int32", "float32")[0] == 0 and dtype_bound("bool", "int32")[0] == 0
    assert dtype_bound("float64", "float32")[0] == 2.0 ** 28  # half a float32 ULP in float64 ULP
    assert widest_first(["int32", "float32"]) == ["float32", "int32"]
    assert widest_first(["bool", "int32"]) == ["int32", "bool"]


# --- branch dtypes -------------------------------------------------------------------------

def test_branch_dtype_fix_keeps_the_float_branch_and_covers_both_branches():
    d = diagnose(V.branch_dtype2, S([3]))
    assert (d.kind, d.line) == ("branch-dtype-mismatch", vline("V1"))
    f = d.fix_plan.fix
    assert f.checked and "tf.cast(tf.constant(1), tf.float32)" in f.change, d.to_text()
    assert f.result.startswith("outputs equal eager's on your 2 calls (bit for bit)")
    assert "int32 → float32" in f.result and "ULP bound 0" in f.result
    # the draw scaled to take the main branch (sum > 100) was run too
    assert "×" in f.result and f"both branches of the if at line {vline('V1')} ran" in f.result


def test_branch_dtype_narrowing_cast_fails_on_eagers_values(monkeypatch):
    """Planted: the candidates tried narrowest first. The int32 cast now runs and FAILS
    (0 where eager gave 0.5); the float32 one is still printed, checked."""
    from tflab.diagnosis import reference

    monkeypatch.setattr(reference, "widest_first", lambda dts: sorted(dict.fromkeys(dts), key=lambda d: d != "int32"))
    d = diagnose(V.branch_dtype2, S([3]))
    (bad,) = d.fix_plan.failures
    assert "tf.int32" in bad.change and "output[0] is 0 where eager gave 0.5" in bad.result
    assert d.fix_plan.fix.checked and "tf.float32" in d.fix_plan.fix.change


@pytest.mark.parametrize("fn, marker, want", [
    ("branch_int64_float", "V2", "tf.cast(tf.constant(3, tf.int64), tf.float32)"),
    ("branch_bool_int", "V3", "tf.cast(x[0] > 0, tf.int32)"),
])
def test_branch_dtype_siblings_promote_to_the_dtype_that_keeps_both(fn, marker, want):
    d = diagnose(getattr(V, fn), S([3]))
    assert (d.kind, d.line) == ("branch-dtype-mismatch", vline(marker))
    assert d.fix_plan.fix.checked and want in d.fix_plan.fix.change, d.to_text()


def test_branch_same_dtype_is_healthy():
    assert diagnose(V.branch_same_dtype, S([3])).ok


def test_while_loop_variable_dtype_fix_is_checked_on_eagers_float():
    d = diagnose(V.while_dtype, S([3]))
    assert (d.kind, d.line) == ("loop-variable-dtype-changes", vline("V4"))
    assert d.fix_plan.fix.checked and "tf.float32" in d.fix_plan.fix.change
    assert "int32 → float32" not in d.fix_plan.fix.result  # the output keeps eager's float32: no dtype change


def test_an_uncovered_branch_is_said(monkeypatch):
    """With no extra draws, the main branch of `sum > 100` never runs: the fix line says so."""
    from tflab.diagnosis import reference

    monkeypatch.setattr(reference, "_VARIANTS", ())
    d = diagnose(V.branch_dtype2, S([3]))
    assert d.fix_plan.fix.checked
    assert f"the main branch of the if at line {vline('V1')} never ran on these inputs" in d.fix_plan.fix.result


# --- state rebound to a tensor ----------------------------------------------------------------

def test_30768_global_rebound_is_named_and_assign_add_is_checked():
    """tensorflow/tensorflow#30768: after a first call, the culprit is `v = v + x`, and the fix
    `v.assign_add(x)` gives eager's 2, 3, 4 from the Variable's own 1.0."""
    V.accumulate(42.0)
    d = diagnose(V.accumulate, 1.0)
    assert (d.kind, d.line) == ("tensor-from-another-funcgraph", vline("V5"))
    f = d.fix_plan.fix
    assert f.checked and f.change == "v.assign_add(x)", d.to_text()
    assert "from v = 1, your tf.Variable's value; eager gives 2, 3, 4" in f.result


@pytest.mark.parametrize("make, marker, change, eager", [
    (lambda: V.scale, "V6", "w.assign(w * x)", "4, 8, 16"),
    (V.make_countdown, "V7", "c.assign_sub(x)", "3, 1, -1"),
    (lambda: TOTAL.add, "V8", "self.total.assign_add(x)", "12, 14, 16"),
])
def test_rebound_siblings_multiply_nonlocal_and_attribute(make, marker, change, eager):
    f = make()
    f(2.0)
    d = diagnose(f, 2.0)
    assert (d.kind, d.line) == ("tensor-from-another-funcgraph", vline(marker)), d.to_text()
    assert d.fix_plan.fix.checked and d.fix_plan.fix.change == change, d.to_text()
    assert f"eager gives {eager}" in d.fix_plan.fix.result


def test_rebound_fix_that_drops_the_carried_value_fails(monkeypatch):
    """Planted: the fix assigns x alone (the state is not carried): 1, 1, 1 against eager's 2, 3, 4."""
    from tflab.diagnosis import rebind

    monkeypatch.setattr(rebind, "_assign_call", lambda target, op, value, s: f"{target}.assign(x)")
    V.v = tf.Variable(1.0)
    V.accumulate(41.0)  # a new Python value: a new trace rebinds the fresh Variable
    d = diagnose(V.accumulate, 1.0)
    assert d.line == vline("V5") and d.fix_plan.none_worked
    assert "call 1: output[0] is 1.0 where eager gave 2.0" in d.fix_plan.failures[0].result


def test_a_rebinding_before_any_failure_is_said_and_the_users_variable_is_put_back():
    """No call has failed yet: diagnose's own trace rebinds the global (a silent diagnosis), and
    the user's tf.Variable object is what the global holds afterwards."""
    before = V.fresh
    d = diagnose(V.accumulate_fresh, S([]))
    assert (d.kind, d.stage, d.line) == ("state-rebound-to-tensor", "silent", vline("V12")), d.to_text()
    assert d.fix_plan.fix.checked and d.fix_plan.fix.change == "fresh.assign_add(x)"
    assert V.fresh is before and float(V.fresh.numpy()) == 1.0


def test_the_retrace_probe_names_the_rebinding_line_too():
    """tensorflow/tensorflow#30768 as the report ran it: RetraceProbe over f(42.0), f(1.0). The
    probe's diagnosis of trace #2 names `probed = probed + x`; it has no call arguments to run
    the fix with, so the fix says so instead of "checked"."""
    import tflab

    p = tflab.RetraceProbe(V.accumulate_probed)
    p(42.0)
    with pytest.raises(TypeError):
        p(1.0)
    (d,) = [t.diagnosis for t in p.traces if getattr(t, "diagnosis", None) is not None]
    assert (d.kind, d.line) == ("tensor-from-another-funcgraph", vline("V13"))
    assert d.fix_plan.fix.status == fx.NOT_CHECKED and d.fix_plan.fix.change == "probed.assign_add(x)"


def test_assigning_to_the_variable_is_healthy():
    V.accumulate_healthy(42.0)
    assert diagnose(V.accumulate_healthy, 1.0).ok


def test_a_global_created_once_under_a_none_guard_is_healthy():
    assert diagnose(V.create_once, S([])).ok


# --- layers and variables in a Python loop ------------------------------------------------------

def test_layer_in_loop_is_built_once_per_iteration_under_a_class_name():
    d = diagnose(V.keras_in_loop, S([2, 4]))
    assert (d.kind, d.line) == ("layer-created-in-function", vline("V9"))
    f = d.fix_plan.fix
    assert f.checked, d.to_text()
    assert f.change == "dense_layers = [keras.layers.Dense(4) for i in range(2)]; x = dense_layers[i](x)"
    assert "`x = keras" not in d.fix and "x_1" not in d.fix  # never named after the function's input


@pytest.mark.parametrize("fn, marker, change", [
    ("keras_enumerate", "V10",
     "dense_layers = [keras.layers.Dense(units) for k, units in enumerate([3, 4])]; x = dense_layers[k](x)"),
    ("variable_in_loop", "V11",
     "variables = [tf.Variable(tf.ones([4]) * (step + 1.0)) for step in range(3)]; scale_w = variables[step]"),
])
def test_in_loop_siblings_enumerate_and_a_variable(fn, marker, change):
    d = diagnose(getattr(V, fn), S([2, 4]))
    assert d.line == vline(marker) and d.fix_plan.fix.checked, d.to_text()
    assert d.fix_plan.fix.change == change


def test_layers_in_the_wrong_order_fail_the_eager_comparison(monkeypatch):
    """Planted: the per-iteration list reversed. Eager's weights are drawn in iteration order
    under the same seed, so the swapped layers give other values and the fix fails."""
    from tflab.diagnosis import per_iteration as pi

    real = pi.per_iteration

    def reversed_layers(*a, **k):
        text, made, inner = real(*a, **k)
        return text.replace("for i in range(2)]", "for i in range(2)][::-1]"), made, inner

    monkeypatch.setattr(pi, "per_iteration", reversed_layers)
    d = diagnose(V.keras_in_loop, S([2, 4]))
    assert d.fix_plan.none_worked and "where eager gave" in d.fix_plan.failures[0].result


def test_layers_built_outside_are_healthy():
    assert diagnose(V.layers_built_outside, S([2, 4])).ok


def test_cli_prints_the_float_fix_checked_and_exits_1(run_cli):
    """`tflab diagnose FILE.py:branch_dtype2 --arg x=float32[3]`: the printed fix keeps eager's 0.5."""
    code, out, err = run_cli("diagnose", os.path.join(DATA, "values_cases.py") + ":branch_dtype2",
                             "--arg", "x=float32[3]")
    assert code == 1, err
    (fix,) = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("fix: ")]
    assert "tf.cast(tf.constant(1), tf.float32) (checked: outputs equal eager's on your 2 calls (bit for bit)" in fix
    assert "tf.int32" not in fix
