"""Diagnose rules for what users hit, each with a fix that traces on *that* code.

For every rule the test asserts the kind, the culprit line (found by its
marker in tests/data/diagnose/rules_cases.py, not typed here), and that the
fix works: tflab's own check (``fix_traced``) and, independently, the test
executes the rewritten source (``fixed_source``) in the case module's
namespace, traces it with tf.function and runs it, and compares the result
with what the rewrite means in plain NumPy. Without the fix every case below was
``unrecognized`` (variables, layers, tensor keys), or had a generic fix
("TF ops instead of NumPy"; "tf.range + TensorArray", which fails on tensorflow/tensorflow#33308's
code: `test_the_old_tensorarray_fix_fails_on_33308`). None of it depends on
the CPU kernel path: the rules read frames and ASTs, the values are exact
small sums and products.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tflab import autograph_diff, diagnose
from tflab._user.target import load_module
from tflab.diagnosis import NUMPY_TO_TF, numpy_equivalent

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "diagnose", "rules_cases.py")
c = load_module(CASES)
LINES = open(CASES).read().splitlines()
S = tf.TensorSpec


def line_of(marker: str) -> int:
    (hit,) = [i + 1 for i, ln in enumerate(LINES) if ln.endswith(f"# {marker}")]
    return hit


def run_fixed(d, name, *values):
    """Executes the diagnosis' rewritten source in a copy of the case module's globals,
    traces the function with tf.function and runs it on ``values``."""
    assert d.fixed_source, d
    ns = dict(vars(c))
    exec(compile(d.fixed_source + "\n", f"<fixed {name}>", "exec"), ns)
    return tf.function(ns[name])(*values)


X3 = tf.constant([1.0, 2.0, 3.0])
BANDS = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3])

# id, function, args, kind, marker, words the fix must name, the fixed function's name,
# the values it runs on, its expected output (NumPy of the same rewrite).
RULES = [
    ("var_every_call", lambda: c.var_each_call, (S([3]),), "variable-created-in-function", "R1",
     ["v = tf.Variable(1.0)", "if self.v is None"], "var_each_call", (X3,), np.array([1.0, 2.0, 3.0])),
    ("var_from_argument", lambda: c.var_from_arg, (S([3]),), "variable-created-in-function", "R3",
     ["first trace only", "if v is None"], "var_from_arg", (X3,), np.array([1.0, 2.0, 3.0])),
    ("keras_layer", lambda: c.dense_inside, (S([2, 4]),), "layer-created-in-function", "R4",
     ["dense = keras.layers.Dense(3)", "dense(...)"], "dense_inside", None, None),
    ("dict_key", lambda: c.collect_dict, (S([3]),), "tensor-as-dict-key", "R5",
     ["x.ref()"], "collect_dict", (X3,), np.array([2.0, 4.0, 6.0])),
    ("set_element", lambda: c.in_set, (S([3]),), "tensor-in-set", "R6",
     ["x.ref()"], "in_set", (X3,), np.array([1.0, 2.0, 3.0])),
    ("np_sum", lambda: c.np_sum, (S([3]),), "numpy-on-symbolic-tensor", "R7",
     ["np.sum", "tf.reduce_sum", "tf.numpy_function"], "np_sum", (X3,),
     np.array(7.0)),
    ("np_mean_axis", lambda: c.np_mean_axis, (S([2, 3]),), "numpy-on-symbolic-tensor", "R8",
     ["tf.reduce_mean"], "np_mean_axis", (tf.reshape(tf.range(6, dtype=tf.float32), [2, 3]),),
     np.array([3.0, 5.0, 7.0])),
    ("static_range_33308", lambda: c.bands_static, (S([4, 3]),), "comprehension-over-tensor", "R10",
     ["range(bands.shape[1])", "unrolls"], "bands_static", (BANDS,),
     np.stack([np.arange(12, dtype=np.float32).reshape(4, 3)[:, b] * c.WEIGHTS[b, 1] for b in range(3)])),
]


@pytest.mark.parametrize("case", RULES, ids=[r[0] for r in RULES])
def test_rule_names_kind_line_and_a_fix_that_traces(case):
    _id, fn, args, kind, marker, words, name, values, expected = case
    d = diagnose(fn(), *args)
    assert (d.kind, d.line, d.stage) == (kind, line_of(f"{marker} culprit"), "trace"), d.to_text()
    for w in words:
        assert w in d.fix, (w, d.fix)
    # tflab's own check of its fix, then the test's: run the rewritten function.
    assert d.fix_traced is True, d.to_text()
    if values is None:  # a layer with random weights: the trace and the shape are what hold
        ns = dict(vars(c))
        exec(compile(d.fixed_source + "\n", "<fixed>", "exec"), ns)
        out = tf.function(ns[name])(tf.ones([2, 4]))
        assert out.shape == (2, 3)
        # Built once: a second call (and TF's second trace on the first call) makes no new variable.
        n_vars = len(ns["dense"].weights)
        tf.function(ns[name])(tf.ones([2, 4]))
        assert len(ns["dense"].weights) == n_vars == 2
        return
    out = run_fixed(d, name, *values)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_variable_in_a_tf_function_method_on_the_first_call_26812():
    """tensorflow/tensorflow#26812: the method form; the fix names self and traces (the instance was freed:
    tflab traces it with self=None, as TF does)."""
    d = diagnose(c.Scale().__call__, S([3]))
    assert (d.kind, d.line) == ("variable-created-in-function", line_of("R2 culprit"))
    assert "self.b" in d.fix and d.fix_traced is True


def test_variable_in_a_live_method_names_self_and_leaves_the_instance_as_it_was():
    g = c.Gate()
    before = dict(vars(g))
    d = diagnose(g.broken, S([3]))
    assert (d.kind, d.line) == ("variable-created-in-function", line_of("R13 culprit"))
    assert "if self.v is None: self.v = tf.Variable(2.0)" in d.fix and d.fix_traced is True
    assert vars(g).keys() == before.keys()  # did not touch the user's object


def test_numpy_without_tf_equivalent_says_so_and_names_numpy_function():
    d = diagnose(c.np_polyfit, S([3]))
    assert (d.kind, d.line) == ("numpy-on-symbolic-tensor", line_of("R9 culprit"))
    assert "np.polyfit has no TF equivalent" in d.fix and "tf.numpy_function(np.polyfit" in d.fix
    assert d.fix_traced is None and d.fixed_source == ""


def test_dynamic_range_bound_keeps_the_map_fn_fix():
    """A bound that is a tensor at trace time: range() would fail, so it is not suggested."""
    d = diagnose(c.bands_dynamic, S([4, None]))
    assert (d.kind, d.line) == ("comprehension-over-tensor", line_of("R11 culprit"))
    assert "range(" not in d.fix.replace("tf.range", "") and "tf.map_fn" in d.fix


def test_the_old_tensorarray_fix_fails_on_33308():
    """Why the static-range rule exists: the fix tflab used to give fails on this code
    (WEIGHTS is NumPy, indexed by a tensor)."""
    traced = tf.function(c.bands_tensorarray)  # looked up here: a renamed case is an error, not a pass
    # Inside the While body `b` is a symbolic tensor, and NumPy's WEIGHTS[b, 1] asks TF for its value.
    with pytest.raises(NotImplementedError, match=r"(?s)rules_cases\.py\", line \d+, in bands_tensorarray.*"
                       r"ta = ta\.write\(b, bands\[:, b\] \* WEIGHTS\[b, 1\]\).*"
                       r"Cannot convert a symbolic tf\.Tensor \(while/\w+:0\) to a numpy array"):
        traced.get_concrete_function(S([4, 3]))


@pytest.mark.parametrize("np_name", ["sum", "mean", "max", "exp", "sqrt", "argmax", "concatenate",
                                     "clip", "where", "matmul"])
def test_numpy_table_names_tf_ops_that_exist(np_name):
    """Each table entry resolves to a real TF symbol (a typo in the table fails here)."""
    op, tnp = numpy_equivalent(np_name)
    obj = tf
    for part in op.split(".")[1:]:
        obj = getattr(obj, part)
    assert callable(obj) and tnp is not None


def test_every_table_entry_is_a_tf_symbol():
    for np_name, op in NUMPY_TO_TF.items():
        obj = tf
        for part in op.split("(")[0].split(".")[1:]:
            obj = getattr(obj, part, None)
        assert callable(obj), (np_name, op)
        assert callable(getattr(np, np_name.split(".")[-1], None) or getattr(np.linalg, np_name.split(".")[-1])), np_name


def test_a_planted_wrong_fix_is_reported_as_not_tracing():
    """The check can fail: a rewrite that does not trace gives fix_traced False."""
    from tflab.diagnosis import FunctionSource, trace_fixed
    from tflab.diagnosis.context import materialize_specs

    src = FunctionSource(c.bands_static)
    broken = "def bands_static(bands):\n    return tf.stack([bands[:, b] * WEIGHTS[b, 1] for b in tf.range(3)])\n"
    err = trace_fixed(src, broken, (S([4, 3]),), {}, materialize_specs)
    assert err is not None and err.startswith("OperatorNotAllowedInGraphError")
    ok = "def bands_static(bands):\n    return tf.stack([bands[:, b] * WEIGHTS[b, 1] for b in range(3)])\n"
    assert trace_fixed(src, ok, (S([4, 3]),), {}, materialize_specs) is None


# ------------------------------------------------------------------ short-lived instances


def test_autograph_diff_of_a_method_of_a_freed_instance_sees_the_tensor_if():
    """Without the fix: ``Gate.run`` reported the tensor if as a Python if (it converted TF's
    bound_method_wrapper, since the weakly held instance was gone)."""
    (st,) = autograph_diff(c.Gate().run, S([3])).statements
    assert (st.lineno, st.outcome, st.op_type) == (line_of("R12 tensor if"), "graph", "StatelessIf")
    g = c.Gate()
    (held,) = autograph_diff(g.run, S([3])).statements
    assert (held.outcome, held.op_type) == (st.outcome, st.op_type)


def test_diagnose_of_a_method_of_a_freed_instance_finds_the_user_line():
    d = diagnose(c.Gate().broken, S([3]))
    assert (d.kind, d.line) == ("variable-created-in-function", line_of("R13 culprit"))


def test_the_other_tools_on_a_method_of_a_freed_instance_trace_the_tensor_if():
    """trace_and_inspect, compare_modes and stabilize trace through TF's own bound Function
    (self=None once the instance is freed), so they already saw the If op; kept here so the
    five tools stay in agreement."""
    from tflab import compare_modes, stabilize, trace_and_inspect

    assert [o.type for o in trace_and_inspect(c.Gate().run, S([3])).control_flow] == ["StatelessIf"]
    m = compare_modes(c.Gate().run, tf.constant([1.0, 2.0, 3.0]), gradients=False)
    assert m.findings == () and all(r.error is None for r in m.modes.values())
    np.testing.assert_array_equal(m.modes["graph"].outputs[0], [-1.0, -2.0, -3.0])  # the If took x = -x
    st = stabilize(c.Gate().run, examples=[(tf.ones([3]),), (tf.ones([4]),)])
    assert [s.shape.as_list() for s in st.input_signature] == [[None]]
