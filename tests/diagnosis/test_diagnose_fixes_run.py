"""Every diagnose fix is a `tflab.fix.Fix` applied to a copy of the function and run.

Rows: (tensorflow/tensorflow#40537, a NumPy call on ``tf.shape(x)[0]``) and
a Keras layer built on the line before its call, ``n = x.shape[0]``
used on the next line) (``if x > 0`` on a float32[3]). Each broken case has a healthy
twin written with TF ops that diagnoses "ok". The cases live in
tests/data/diagnose/fixes_run_cases.py; culprit lines are found by their ``# F…`` marker.

Planted defects, one set per rule of `RULES`: a failing candidate put first (it must never be
the printed fix), a rewrite that raises, and a rewrite whose output is off by 10% (the eager
comparison must catch it). Nothing here depends on the CPU kernel path: the values are exact
small sums and products, and the ULP comparison only needs "equal up to reordering".
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import tflab.fix as fx
from tflab import diagnose
from tflab._user.target import load_module
from tflab.diagnosis import RULES

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "diagnose")
F = load_module(os.path.join(DATA, "fixes_run_cases.py"))
C = load_module(os.path.join(DATA, "cases.py"))
R = load_module(os.path.join(DATA, "rules_cases.py"))
FLINES = open(os.path.join(DATA, "fixes_run_cases.py")).read().splitlines()
S = tf.TensorSpec
INT = S([], tf.int32)


def fline(marker: str) -> int:
    (hit,) = [i + 1 for i, ln in enumerate(FLINES) if ln.endswith(f"# {marker}")]
    return hit


def run_copy(d, name, *values, module=F):
    """The printed fix's source, executed in a copy of the case module, traced and run (the test's
    own check, independent of tflab's)."""
    assert d.fix_plan.fix.checked and d.fixed_source
    import linecache

    ns = dict(vars(module))
    source, filename = d.fixed_source + "\n", f"<fixed {name}>"
    # AutoGraph reads a function's source through linecache: the test's copy is converted on its own
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), ns)
    return tf.function(ns[name])(*values), ns


def fix_line(d) -> str:
    return d.fix_lines[0]


# ------------------------------------------------------------------ tensorflow/tensorflow#40537: the NumPy call


def test_40537_np_arange_becomes_tf_range_cast_and_tnp_is_tried_and_not_printed():
    d = diagnose(F.my_function, S([3]), 2.0)
    assert (d.kind, d.line) == ("numpy-on-symbolic-tensor", fline("F1 culprit")), d.to_text()
    plan = d.fix_plan
    assert plan.fix.checked and plan.fix.change == "tf.cast(tf.range(range_lim), x.dtype)"
    assert "outputs equal eager's on" in plan.fix.result
    tried = {f.change: f for f in plan.tried}
    tnp = tried["tf.experimental.numpy.arange(range_lim)"]
    assert tnp.failed and "OperatorNotAllowedInGraphError" in tnp.result
    assert tried["tf.range(range_lim)"].failed and "int32" in tried["tf.range(range_lim)"].result
    # NumPy's own dtype for np.arange(int) is int64, which fails the float32 Mul too.
    assert tried["tf.cast(tf.range(range_lim), tf.int64)"].failed
    assert "experimental.numpy" not in fix_line(d) and "checked:" in fix_line(d)
    assert "tf.cast(tf.range(range_lim), x.dtype)" in d.fix and d.fix_traced is True
    out, _ = run_copy(d, "my_function", tf.constant([1.0, 2.0, 3.0]), 2.0)
    np.testing.assert_array_equal(out.numpy(), np.array([1.0, 2.0, 3.0]) * [0, 1, 2] * 2)  # x·[0,1,2]·2


def test_40537_healthy_twin_with_tf_ops_is_ok():
    d = diagnose(F.my_function_tf, S([3]), 2.0)
    assert d.ok and d.fix_plan is None


@pytest.mark.parametrize("fn,spec,op,values,expected", [
    ("np_sum_of_rows", [2, 3], "tf.reduce_sum(x, axis=1)", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [12.0, 30.0]),
    ("np_where", [3], "tf.where(x > 0, x, 0.0)", [-1.0, 2.0, -3.0], [0.0, 2.0, 0.0]),
])
def test_numpy_reductions_and_where_become_the_core_op_checked(fn, spec, op, values, expected):
    d = diagnose(getattr(F, fn), S(spec))
    assert d.kind == "numpy-on-symbolic-tensor" and d.fix_plan.fix.change == op
    assert d.fix_plan.fix.checked and len(d.fix_plan.tried) == 1  # the first candidate worked
    out, _ = run_copy(d, fn, tf.constant(values))
    np.testing.assert_array_equal(out.numpy(), expected)


# ------------------------------------------------------------------ the layer built in the function


def test_layer_built_on_the_line_before_its_call_is_blamed_on_the_constructor():
    d = diagnose(F.layer_in_fn, S([2, 4]))
    assert (d.kind, d.line, d.statement) == ("layer-created-in-function", fline("F5 culprit"),
                                             "d = keras.layers.Dense(3)"), d.to_text()
    assert "self.v" not in d.fix and "tf.Variable(" not in d.fix
    assert "`d = keras.layers.Dense(3)` at module level" in d.fix
    assert d.fix_plan.fix.checked and d.fix_plan.fix.kind == "move"
    # Both runs build the Dense under one Python seed: the copy's output equals eager's.
    assert "outputs equal eager's on" in d.fix_plan.fix.result
    assert d.fixed_source.splitlines()[0] == "d = keras.layers.Dense(3)"
    out, ns = run_copy(d, "layer_in_fn", tf.ones([2, 4]))
    assert out.shape == (2, 3) and len(ns["d"].weights) == 2
    f = tf.function(ns["layer_in_fn"])
    f(tf.ones([2, 4]))
    assert len(ns["d"].weights) == 2  # built once: no new variables on another call


def test_healthy_twin_built_once_outside_is_ok():
    assert diagnose(F.layer_outside, S([2, 4])).ok


# ------------------------------------------------------------------ a static dim read into a local


def test_shape_local_is_shape_dim_is_none_with_tf_shape_checked():
    d = diagnose(F.shape_none, S([None]))
    assert (d.kind, d.line, d.statement) == ("shape-dim-is-none", fline("F6 culprit"), "n = x.shape[0]")
    assert "'n' holds that None" in d.explanation
    assert d.fix_plan.fix.checked and d.fix_plan.fix.change == "n = tf.shape(x)[0]"
    out, _ = run_copy(d, "shape_none", tf.ones([5]))
    assert out.shape == (10,)


def test_healthy_twin_is_ok():
    assert diagnose(F.shape_dynamic, S([None])).ok


# ------------------------------------------------------------------ a vector condition


def test_vector_if_is_non_scalar_condition_and_each_candidate_says_what_it_gave():
    d = diagnose(F.bool_tensor, S([3]))
    assert (d.kind, d.line) == ("non-scalar-condition", fline("F7 culprit")), d.to_text()
    assert "shape (3,)" in d.explanation
    fix = d.fix_plan.fix
    assert fix.checked and fix.change == "return tf.where(x > 0, x, -x)"
    # tf.where's reference is the function run eagerly on each element, where eager has semantics.
    assert "your function's run eagerly on each element" in fix.result
    also = {f.change: f for f in d.also}
    assert set(also) == {"if tf.reduce_any(x > 0):", "if tf.reduce_all(x > 0):"}
    for f in also.values():  # eager `if` on a vector raises too: no equality is claimed
        assert f.checked and "raises eagerly too" in f.result and "equal" not in f.result
    assert sum(ln.startswith("also: ") for ln in d.fix_lines) == 2
    out, _ = run_copy(d, "bool_tensor", tf.constant([-1.0, 2.0, -3.0]))
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])


def test_where_is_not_printed_when_the_function_is_not_elementwise():
    """Planted: a body that reads the whole vector; tf.where's output then differs from the
    function run on each element, so it fails and reduce_any is printed."""
    d = diagnose(F.not_elementwise, S([3]))
    (where,) = [f for f in d.fix_plan.tried if "tf.where" in f.change]
    assert where.failed and "the reference is your function's run eagerly on each element" in where.result and "where eager gave" in where.result
    assert d.fix_plan.fix.change == "if tf.reduce_any(x > 0):" and d.fix_plan.fix.checked
    assert "tf.where" not in fix_line(d)


def test_healthy_twin_with_reduce_all_is_ok():
    assert diagnose(F.bool_scalar, S([3])).ok


# ------------------------------------------------------------------ every rule: planted defects


def _d2():
    C.kept.clear()
    C.d2_kept(tf.ones([2]))
    return C.d2_kept, (tf.ones([3]),)


# rule name -> (make, args, kind, has a rewrite that is run)
PER_RULE = {
    "created-in-function": (lambda: (R.var_each_call, (S([3]),)), "variable-created-in-function", True),
    "unhashable-tensor": (lambda: (R.collect_dict, (S([3]),)), "tensor-as-dict-key", True),
    "escaped-tensor": (lambda: (C.d1_list_in_loop, (tf.constant(5),)), "python-list-in-tensor-loop", True),
    "foreign-capture": (_d2, "tensor-from-another-funcgraph", False),
    "bool-or-iteration": (lambda: (C.d3_bool, (S([]),)), "tensor-as-python-bool", True),
    "non-scalar-condition": (lambda: (F.bool_tensor, (S([3]),)), "non-scalar-condition", True),
    "numpy": (lambda: (F.my_function, (S([3]), 2.0)), "numpy-on-symbolic-tensor", True),
    "cond-vars": (lambda: (C.branch_int_float, (S([3]),)), "branch-dtype-mismatch", True),
    "loop-vars": (lambda: (C.loop_shape, (INT,)), "loop-variable-shape-changes", True),
    "loop-init": (lambda: (C.return_in_while, (S([3]),)), "return-in-tensor-loop", False),
    "shape-none": (lambda: (F.shape_none, (S([None]),)), "shape-dim-is-none", True),
    "dtype-mismatch": (lambda: (C.d6_len, ()), "dtype-mismatch", True),
    "runtime-op": (lambda: (C.gather_out_of_range, (S([3]),)), "runtime-op-error", False),
}


def test_every_rule_has_a_planted_case():
    assert set(PER_RULE) == {r.name for r in RULES}


@pytest.mark.parametrize("rule", sorted(PER_RULE))
def test_a_planted_failing_candidate_is_never_the_printed_fix(rule, monkeypatch):
    """A candidate that was applied and failed is put first in every plan: it is in ``tried``,
    never ``fix``, and the printed fix line does not name it."""
    make, kind, rewrites = PER_RULE[rule]
    real = fx.first_working
    planted = fx.Fix("code", "PLANTED_CHANGE", "a planted fix", status=fx.FAILED, result="planted: off by 10%")
    monkeypatch.setattr(fx, "first_working", lambda cands: real([planted] + list(cands)))
    fn, args = make()
    d = diagnose(fn, *args)
    C.kept.clear()
    assert d.kind == kind, d.to_text()
    assert planted in d.fix_plan.tried and d.fix_plan.fix is not planted
    assert "PLANTED_CHANGE" not in fix_line(d) and "(failed" not in fix_line(d)
    assert d.fix_plan.fix.checked == rewrites, d.to_text()
    if not rewrites:  # advice only: it says why it was not run
        assert d.fix_plan.fix.status == fx.NOT_CHECKED and d.fix_plan.fix.why and d.fixed_source == ""


@pytest.mark.parametrize("rule", sorted(r for r, v in PER_RULE.items() if v[2]))
def test_a_rewrite_that_raises_is_not_printed(rule, monkeypatch):
    """Planted: every run of a copy raises. No fix is then printed: not a "checked" one, and not
    the advice either (its rewrites were run and failed); the plan says none worked and shows
    what each candidate gave (the failed advice printed as "not checked")."""
    from tflab.diagnosis import fixes

    def boom(*a, **k):
        raise RuntimeError("planted: the copy does not trace")

    monkeypatch.setattr(fixes, "run_fixed", boom)
    make, kind, _ = PER_RULE[rule]
    fn, args = make()
    d = diagnose(fn, *args)
    assert d.kind == kind
    assert d.fix_plan.fix is None and d.fix_plan.none_worked and d.fix_traced is False
    assert d.fixed_source == ""
    assert d.fix_plan.failures and all("planted: the copy does not trace" in f.result
                                         for f in d.fix_plan.failures)
    assert not d.also and "checked:" not in "\n".join(d.fix_lines).replace("not checked:", "")
    assert d.fix_lines[0].startswith("fix: none of the "), d.fix_lines
    assert "none of the" in d.headline and "worked" in d.headline, d.headline


# Rules whose copy is compared with the function run eagerly (eager runs there), on cases whose
# output is not all zeros (0 * 1.1 == 0 would hide the plant).
COMPARED = {
    "created-in-function": (lambda: (R.var_each_call, (S([3]),)), "variable-created-in-function"),
    "escaped-tensor": (lambda: (C.d1_list_in_loop, (tf.constant(5),)), "python-list-in-tensor-loop"),
    "bool-or-iteration": (lambda: (C.d3_bool, (S([]),)), "tensor-as-python-bool"),
    "numpy": (lambda: (F.my_function, (S([3]), 2.0)), "numpy-on-symbolic-tensor"),
    "cond-vars": (lambda: (C.branch_int_float, (S([3]),)), "branch-dtype-mismatch"),
    "loop-vars": (lambda: (C.loop_shape, (tf.constant(3),)), "loop-variable-shape-changes"),
    "shape-none": (lambda: (C.range_of_shape, (S([2, None]),)), "shape-dim-is-none"),
    "dtype-mismatch": (lambda: (C.d6_len, ()), "dtype-mismatch"),
}


@pytest.mark.parametrize("rule", sorted(COMPARED))
def test_a_rewrite_off_by_ten_percent_fails_the_eager_comparison(rule, monkeypatch):
    """Planted: each copy's output scaled by 1.1. The comparison with eager catches it."""
    from tflab.diagnosis import fixes

    real = fixes.run_fixed

    def off(*a, **k):
        out, concrete = real(*a, **k)
        return tf.nest.map_structure(lambda t: t * tf.cast(1.1, t.dtype) if t.dtype.is_floating
                                     else t + tf.ones_like(t), out), concrete

    monkeypatch.setattr(fixes, "run_fixed", off)
    make, kind = COMPARED[rule]
    fn, args = make()
    d = diagnose(fn, *args)
    assert d.kind == kind
    assert d.fix_plan.none_worked, d.to_text()  # each rewrite ran and differed: none is printed
    assert any("where eager gave" in f.result for f in d.fix_plan.failures), d.to_text()


def test_the_fix_is_json_and_the_old_fields_are_derived():
    import json

    d = diagnose(F.shape_none, S([None]))
    back = json.loads(json.dumps(d.to_dict()))
    assert back["fix_plan"]["fix"]["status"] == "checked" and back["fix_traced"] is True
    assert back["fixed_source"] == d.fixed_source and "tf.shape(x)[0]" in back["fixed_source"]
    adv = diagnose(C.d7_branch_none, S([3]))
    assert adv.fix_traced is None and adv.fixed_source == "" and adv.fix_plan.fix.why
    assert fix_line(adv).endswith(f"(not checked: {adv.fix_plan.fix.why})")


def test_a_fix_tried_on_a_step_that_assigns_to_a_variable_leaves_the_variable_as_it_was():
    """The copy runs once (its captured tf.Variables get their values back) and the function is
    not run eagerly a second time for a reference: an optimizer step would move the weights."""
    F.TOTAL.assign(0.0)
    d = diagnose(F.accumulate, S([3]))
    assert (d.kind, d.line) == ("variable-created-in-function", fline("F9 culprit"))
    assert d.fix_plan.fix.checked and "not compared with eager: it assigns to tf.Variables" in d.fix_plan.fix.result
    assert float(F.TOTAL.numpy()) == 0.0


def test_a_do_not_convert_helper_is_run_without_its_decorator():
    d = diagnose(C.calls_unconverted, S([3]))
    assert d.kind == "tensor-as-python-bool" and d.fix_plan.fix.checked
    assert d.fix_plan.fix.change == "drop @tf.autograph.experimental.do_not_convert from _positive"
    out, _ = run_copy(d, "calls_unconverted", tf.constant([1.0, -2.0, 3.0]), module=C)
    np.testing.assert_array_equal(out.numpy(), [2.0, -4.0, 6.0])  # sum 2 > 0: x * 2


def test_a_comprehension_over_a_dynamic_range_becomes_map_fn_checked():
    d = diagnose(R.bands_dynamic, S([4, None]))
    assert d.kind == "comprehension-over-tensor" and d.fix_plan.fix.checked
    assert d.fix_plan.fix.change.startswith("tf.map_fn(lambda b: bands[:, b], ")
    bands = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3])
    out, _ = run_copy(d, "bands_dynamic", bands, module=R)
    np.testing.assert_array_equal(out.numpy(), bands.numpy().T)


def _mixes_dtypes(x):
    return x + tf.reduce_sum(tf.constant(np.ones(3)))  # a float64 operand made on this line


def test_a_dtype_mismatch_is_not_blamed_on_the_caller_in_the_same_file():
    """Without the fix: the operand's creation traceback also held the calling line of this file, and
    the culprit became `d = diagnose(...)`. Now the culprit stays in the function, and the cast
    is run on a copy."""
    d = diagnose(_mixes_dtypes, S([3]))
    assert d.kind == "dtype-mismatch"
    assert d.statement == "return x + tf.reduce_sum(tf.constant(np.ones(3)))", d.to_text()
    assert d.fix_plan.fix.checked and "tf.cast(" in d.fix_plan.fix.change


def test_a_rewrite_tflab_cannot_write_still_gives_the_diagnosis(monkeypatch):
    """Planted: tflab's own AST rewrite raises. The kind and line stand; the fix says why nothing ran."""
    from tflab.diagnosis import fixes

    def broken(*a, **k):
        raise AssertionError("planted rewrite bug")

    monkeypatch.setattr(fixes, "replace_expr", broken)
    d = diagnose(F.shape_none, S([None]))
    assert (d.kind, d.line) == ("shape-dim-is-none", fline("F6 culprit"))
    assert d.fix_plan.fix.status == fx.NOT_CHECKED and "planted rewrite bug" in d.fix_plan.fix.why
    assert not d.fix_plan.tried[:-1]  # nothing was run
