"""tflab.diagnose: the culprit line, the kind of mistake and the fix for a failing tf.function.

The handed cases D1-D8 and D10 of ../shared/cases/diagnosis.md, plus other
instances of each kind, live in tests/data/diagnose/cases.py. Each culprit line
carries a marker comment (``# D1 culprit``, ``# culprit: …``); the tests find
the line by its marker, so the expected line number is read from the file, not
typed here. Every kind and error below was measured on tensorflow 2.21.0 (CPU);
the classification reads the frame that raised, the culprit's AST and
AutoGraph's statement map, none of which depends on oneDNN.
"""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf

from tflab import Diagnosis, diagnose
from tflab._user.target import load_module
from tflab.errors import UsageError

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "diagnose")
CASES = os.path.join(DATA, "cases.py")
c = load_module(CASES)
LINES = open(CASES).read().splitlines()
S = tf.TensorSpec
INT = tf.TensorSpec([], tf.int32)


def line_of(marker: str) -> int:
    """1-based line of the one source line whose comment holds ``marker``."""
    (hit,) = [i + 1 for i, ln in enumerate(LINES) if ln.endswith(f"# {marker}")]
    return hit


# id, function, args, kind, culprit marker, a word the fix must contain.
HANDED = [
    ("D1", lambda: c.d1_list_in_loop, (tf.constant(5),), "python-list-in-tensor-loop", "D1 culprit", "TensorArray"),
    ("D3", lambda: c.d3_bool, (S([]),), "tensor-as-python-bool", "D3 culprit", "tf.cond"),
    ("D4", lambda: c.d4_numpy, (S([]),), "numpy-on-symbolic-tensor", "D4 culprit", "tf.print"),
    ("D5", lambda: c.d5_shape, (), "shape-dim-is-none", "D5 culprit", "tf.shape(x)[0]"),
    ("D6", lambda: c.d6_len, (), "dtype-mismatch", "D6 culprit", "tf.cast"),
    ("D7", lambda: c.d7_branch_none, (S([3]),), "branch-variable-undefined", "D7 culprit", "else"),
    ("D8", lambda: c.d8_branch_dtype, (S([3]),), "branch-dtype-mismatch", "D8 culprit", "dtype"),
]

OTHERS = [
    ("while_list", lambda: c.list_in_while, (S([4]),), "python-list-in-tensor-loop",
     "culprit: list append in a While body", "TensorArray"),
    ("bound_method", lambda: c.Accumulator().total, (INT,), "python-list-in-tensor-loop",
     "culprit: bound method, list in While", "TensorArray"),
    ("if_branch_list", lambda: c.cache_in_if, (S([3]), []), "python-state-in-tensor-if",
     "culprit: list store in an If branch", "both branches"),
    ("do_not_convert", lambda: c.calls_unconverted, (S([3]),), "tensor-as-python-bool",
     "culprit: unconverted helper", "tf.cond"),
    ("while_autograph_off", lambda: tf.function(c.while_bool_off, autograph=False), (S([]),),
     "tensor-as-python-bool", "culprit: while with autograph=False", "tf.cond"),
    ("unpack", lambda: c.unpack, (S([2]),), "tensor-iterated-in-python", "culprit: unpacking a tensor", "tf.unstack"),
    ("for_autograph_off", lambda: tf.function(c.for_over_tensor_off, autograph=False), (S([3]),),
     "tensor-iterated-in-python", "culprit: for with autograph=False", "tf.range"),
    ("dict_comprehension", lambda: c.dict_comp, (S([3]),), "comprehension-over-tensor",
     "culprit: comprehension", "tf.map_fn"),
    ("np_asarray", lambda: c.np_asarray, (S([3]),), "numpy-on-symbolic-tensor", "culprit: np.asarray", "tf.print"),
    ("keras_layer", lambda: c.NumpyLayer(), (S([2, 3]),), "numpy-on-symbolic-tensor",
     "culprit: .numpy() in a layer's call", "tf.print"),
    ("range_of_dim1", lambda: c.range_of_shape, (S([2, None]),), "shape-dim-is-none",
     "culprit: dim 1 is None", "tf.shape(x)[1]"),
    ("get_shape", lambda: c.reshape_dim, (S([None, 3]),), "shape-dim-is-none",
     "culprit: get_shape()[0] is None", "tf.shape(x)[0]"),
    ("tf_size", lambda: c.size_times, (S([3]),), "dtype-mismatch", "culprit: int32 from tf.size", "tf.cast"),
    ("loop_init_dtype", lambda: c.loop_dtype, (INT,), "loop-variable-dtype-changes", "culprit: int32 init",
     "dtype"),
    ("loop_python_int_init", lambda: c.loop_int_init, (INT,), "loop-variable-dtype-changes",
     "culprit: Python int init makes an int32 loop variable", "0.0"),
    ("loop_shape", lambda: c.loop_shape, (INT,), "loop-variable-shape-changes", "culprit: v grows",
     "shape_invariants"),
    ("return_in_while", lambda: c.return_in_while, (S([3]),), "return-in-tensor-loop", "culprit: return in While",
     "break"),
    ("main_branch_unset", lambda: c.else_branch_only, (S([3]),), "branch-variable-undefined", "culprit: z unset in the main branch",
     "main branch"),
    ("int_float_branches", lambda: c.branch_int_float, (S([3]),), "branch-dtype-mismatch", "culprit: int32 and float32 branches",
     "dtype"),
    ("runtime_op_error", lambda: c.gather_out_of_range, (S([3]),), "runtime-op-error",
     "culprit: index 10 of a length-3 vector, found at run time", "tf.debugging"),
    ("unrecognized", lambda: c.strange_error, (S([3]),), "unrecognized", "culprit: not a tflab rule", ""),
]


@pytest.mark.parametrize("case,make,args,kind,marker,word", HANDED + OTHERS,
                         ids=[row[0] for row in HANDED + OTHERS])
def test_kind_culprit_and_fix(case, make, args, kind, marker, word):
    fn = make()
    d = diagnose(fn, *args)
    assert not d.ok
    assert d.kind == kind, d.to_text()
    line = line_of(marker)
    assert (d.line, os.path.abspath(d.filename)) == (line, os.path.abspath(CASES)), d.to_text()
    assert d.statement == LINES[line - 1].split("  #")[0].strip()
    assert word in d.fix, d.fix
    assert d.error.split(":")[0].endswith(("Error", "Exception")), d.error
    head, _, copy = d.to_text().partition("  the copy that ran:")
    assert len(head.splitlines()) <= 10 and len(copy.splitlines()) <= 13
    if copy:  # the listing is the source of the printed fix, which was checked
        assert d.fix_plan.fix.checked and d.fixed_source.splitlines()[-1].strip() in copy


def test_d1_explains_the_while_op_and_the_line_tf_ended_on():
    d = diagnose(c.d1_list_in_loop, tf.constant(5))
    # TF's own traceback ends on the return line; the culprit is the append.
    assert d.line != line_of("D1 culprit") + 1 and d.statement == "digits.append(i)"
    assert f"the for at line {line_of('D1 culprit') - 1} became a While op" in d.explanation
    assert "'digits'" in d.explanation and d.error.startswith("InaccessibleTensorError")


def test_d3_says_autograph_false_is_why():
    d = diagnose(c.d3_bool, S([]))
    assert "autograph=False" in d.explanation
    # The tf.function's options are kept: the same body with AutoGraph on traces an If op.
    assert diagnose(c.plain_version_of_d3, S([])).ok


def test_d5_names_the_none_dim_of_the_signature():
    d = diagnose(c.d5_shape)
    assert "dim 0 of x is None" in d.explanation and "input_signature" in d.explanation
    assert d.error == "TypeError: Expected int32, but got None of type 'NoneType'."


def test_d6_says_len_became_int32():
    d = diagnose(c.d6_len)
    assert "len(x)" in d.explanation and "int32" in d.explanation


def test_d7_says_both_branches_of_the_if_op():
    d = diagnose(c.d7_branch_none, S([3]))
    assert "If op" in d.explanation and "'y'" in d.explanation and "else branch" in d.explanation


def test_d2_tensor_from_another_funcgraph_at_call_time():
    c.kept.clear()
    c.d2_kept(tf.ones([2]))                     # trace #1 leaves mul:0 in `kept`
    d = diagnose(c.d2_kept, tf.ones([3]))       # a new trace reads kept[0]
    c.kept.clear()
    assert (d.kind, d.stage, d.line) == ("tensor-from-another-funcgraph", "call", line_of("D2 culprit"))
    assert "mul:0" in d.explanation and "`kept`" in d.explanation
    assert "return" in d.fix and "tf.Variable" in d.fix


def test_attribute_state_across_traces():
    h = c.Holder()
    h.step(tf.ones([2]))
    d = diagnose(h.step, tf.ones([2]))
    assert d.kind == "tensor-from-another-funcgraph"
    assert d.line == line_of("culprit: attribute keeps a tensor across traces")
    assert "self.last" in d.explanation


def test_healthy_function_is_ok_and_unknown_dims_are_materialized():
    d = diagnose(c.healthy, S([None, 3]), S([], tf.int32))
    assert (d.ok, d.kind, d.line, d.stage) == (True, None, None, "")
    assert repr(d) == "<Diagnosis healthy: ok>"
    assert d.to_text().count("\n") == 0


def test_to_dict_is_json_and_repr_names_the_line():
    d = diagnose(c.d7_branch_none, S([3]))
    back = json.loads(json.dumps(d.to_dict()))
    assert back["kind"] == "branch-variable-undefined" and back["line"] == line_of("D7 culprit")
    assert repr(d) == (f"<Diagnosis d7_branch_none: branch-variable-undefined at line "
                       f"{line_of('D7 culprit')}: 'if tf.reduce_sum(x) > 0:'>")
    assert isinstance(d, Diagnosis)


def test_diagnose_exception_without_a_statement_map():
    """Other verbs catch the trace error themselves: the frames and op tracebacks suffice."""
    from tflab.diagnosis import diagnose_exception

    traced = tf.function(c.d1_list_in_loop)
    # TF's InaccessibleTensorError (a ValueError): the loop's tensor kept in a Python list left the While body.
    with pytest.raises(ValueError, match=r"<tf\.Tensor 'while/\w+:0' shape=\(\) dtype=int32> is out of scope "
                                         r"and cannot be used here") as info:
        traced.get_concrete_function(tf.TensorSpec([], tf.int32))
    assert type(info.value).__name__ == "InaccessibleTensorError"
    d = diagnose_exception(info.value, c.d1_list_in_loop)
    assert (d.kind, d.line) == ("python-list-in-tensor-loop", line_of("D1 culprit"))


def test_traceback_filtering_is_restored():
    # tf.debugging.is_traceback_filtering_enabled is traceback_utils' own flag, exported.
    before = tf.debugging.is_traceback_filtering_enabled()
    diagnose(c.d4_numpy, S([]))
    assert tf.debugging.is_traceback_filtering_enabled() == before


def test_bad_input_is_a_usage_error():
    with pytest.raises(UsageError, match="not a function|is a class"):
        diagnose(c.Holder)
    with pytest.raises(UsageError, match="input_signature"):
        diagnose(c.d5_shape, S([None, 4], tf.int32))


def test_cli_exit_codes(run_cli):
    target = f"{CASES}:d1_list_in_loop"
    code, out, err = run_cli("diagnose", target, "--arg", "n=int32[]")
    assert code == 1 and "python-list-in-tensor-loop" in out and f"cases.py:{line_of('D1 culprit')}" in out
    code, out, _ = run_cli("diagnose", f"{CASES}:d5_shape", "--json")
    assert code == 1 and json.loads(out)["kind"] == "shape-dim-is-none"
    code, out, _ = run_cli("diagnose", f"{CASES}:healthy", "--arg", "x=float32[None,3]", "--arg", "n=3")
    assert code == 0 and "ok" in out
    code, out, err = run_cli("diagnose", f"{CASES}:nope")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    code, out, err = run_cli("diagnose", target, "--arg", "n=int32[")
    assert code == 2 and "--arg n=int32[" in err


def test_tour_step5_diagnoses_a_failing_function(small_keras_file, tmp_path):
    import inspect

    from tflab._tour import s05_autograph
    from tflab.tour import run_tour

    report = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "tour"), quiet=True,
                      only=["s05_autograph"])
    d = report["diagnosis"]
    lines, start = inspect.getsourcelines(s05_autograph.running_sums)
    append = start + next(i for i, ln in enumerate(lines) if "sums.append(total)" in ln)
    assert (d["kind"], d["line"], d["statement"]) == ("python-list-in-tensor-loop", append,
                                                      "sums.append(total)")
    assert "TensorArray" in d["fix"]


# ------------------------------------------------------------- the other verbs report it


def test_trace_and_inspect_and_autograph_diff_errors_carry_the_diagnosis():
    from tflab import autograph_diff, trace_and_inspect

    with pytest.raises(UsageError) as info:
        trace_and_inspect(c.d1_list_in_loop, INT)
    d = info.value.diagnosis
    assert (d.kind, d.line) == ("python-list-in-tensor-loop", line_of("D1 culprit"))
    msg = str(info.value)
    assert "\n" not in msg and f"cases.py:{line_of('D1 culprit')} `digits.append(i)`" in msg
    assert "TensorArray" in msg
    with pytest.raises(UsageError) as info:
        autograph_diff(c.d7_branch_none, S([3]))
    assert info.value.diagnosis.kind == "branch-variable-undefined"
    assert "branch-variable-undefined at cases.py" in str(info.value)


def test_cli_inspect_prints_the_diagnosis_in_one_line(run_cli):
    code, out, err = run_cli("inspect", f"{CASES}:d8_branch_dtype", "--arg", "x=float32[3]")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"branch-dtype-mismatch at cases.py:{line_of('D8 culprit')}" in err


def test_compare_modes_graph_failure_says_why():
    from tflab import compare_modes

    r = compare_modes(c.d1_list_in_loop, tf.constant(4), repeats=1)
    assert r.modes["eager"].error is None  # a Python list of eager tensors is fine eagerly
    assert f"python-list-in-tensor-loop at cases.py:{line_of('D1 culprit')}" in r.modes["graph"].error


def test_retrace_probe_d2_names_trace_1_and_the_fix():
    from tflab import RetraceProbe

    c.kept.clear()
    probe = RetraceProbe(c.d2_kept)
    probe(tf.ones([2]))
    with pytest.raises(TypeError):
        probe(tf.ones([3]))
    c.kept.clear()
    first, second = probe.traces
    assert first.diagnosis is None
    assert second.kind == "retrace" and second.reasons == ["x: shape (2,) -> (3,)"]
    d = second.diagnosis
    assert (d.kind, d.stage, d.line) == ("tensor-from-another-funcgraph", "call", line_of("D2 culprit"))
    assert "the graph of trace #2 captured mul:0" in d.explanation
    assert "trace #1's FuncGraph" in d.explanation and "`kept`" in d.explanation
    assert "return" in d.fix and "tf.Variable" in d.fix
    assert second.to_text().splitlines()[-1].strip().startswith(
        f"diagnosis: tensor-from-another-funcgraph at cases.py:{line_of('D2 culprit')}")
    assert second.to_dict()["diagnosis"]["kind"] == "tensor-from-another-funcgraph"


def test_retrace_probe_failed_trace_carries_the_diagnosis():
    from tflab import RetraceProbe

    probe = RetraceProbe(c.d7_branch_none)
    with pytest.raises(ValueError):
        probe(tf.ones([3]))
    (t,) = probe.traces
    assert t.kind == "failed"
    assert (t.diagnosis.kind, t.diagnosis.line) == ("branch-variable-undefined", line_of("D7 culprit"))


def test_stabilize_warns_before_any_call_about_a_relaxed_dim():
    from tflab import stabilize
    from tflab.signatures import ShapeReadWarning

    with pytest.warns(ShapeReadWarning) as seen:
        f = stabilize(c.d5_shape.python_function, examples=[tf.ones([2, 8]), tf.ones([3, 8])])
    assert f.experimental_get_tracing_count() == 0  # before the first call
    (w,) = seen
    assert str(w.message) == (f"cases.py:{line_of('D5 culprit')}: x.shape[0] is None when traced: dim 0 "
                              f"of x is None in the input_signature (None, 8); use tf.shape(x)[0]")
    with pytest.warns(ShapeReadWarning, match=r"len\(x\) reads dim 0 of x"):
        stabilize(c.d6_len.python_function, examples=[tf.ones([2, 8]), tf.ones([3, 8])])


def test_stabilize_is_silent_when_the_read_dim_is_fixed():
    import warnings

    from tflab import stabilize

    def width(x):
        return tf.zeros([x.shape[1]])  # dim 1 is 8 in every example: stays 8

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = stabilize(width, examples=[tf.ones([2, 8]), tf.ones([3, 8])])
    assert f.input_signature[0].shape.as_list() == [None, 8]


def test_d9_dict_keys_renamed_in_the_signature_def(tmp_path):
    import numpy as np

    from tflab import save_and_reload, tflite_roundtrip

    examples = {"foo": np.arange(3, dtype=np.int32), "bar": np.ones(3, np.float32)}
    with pytest.raises(UsageError) as info:
        save_and_reload(c.DictServe(), str(tmp_path / "plain"), examples)
    msg = str(info.value)
    assert "missing ['inputs', 'inputs_1'] unknown ['bar', 'foo']" in msg
    assert "'bar' -> 'inputs', 'foo' -> 'inputs_1'" in msg and "tf.TensorSpec(..., name=" in msg
    m = c.DictServe()  # save_and_reload checked the examples before saving: save it here
    tf.saved_model.save(m, str(tmp_path / "plain"), signatures=m.serve)
    with pytest.raises(UsageError, match="'bar' -> 'inputs', 'foo' -> 'inputs_1'"):
        tflite_roundtrip(str(tmp_path / "plain"), examples)
    # The fix the message names works: named TensorSpecs keep the keys.
    check = save_and_reload(c.NamedDictServe(), str(tmp_path / "named"), examples)
    assert check.bit_exact


def test_stabilization_report_failure_is_one_line_with_the_diagnosis():
    import warnings

    from tflab import stabilization_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ShapeReadWarning tested above
        with pytest.raises(UsageError) as info:
            stabilization_report(c.d5_shape.python_function, [tf.ones([2, 8]), tf.ones([3, 8])],
                                 variants=("input_signature",))
    assert info.value.diagnosis.kind == "shape-dim-is-none"
    assert str(info.value).startswith("stabilization_report: the input_signature variant raised TypeError")
    assert f"cases.py:{line_of('D5 culprit')}" in str(info.value) and "\n" not in str(info.value)


def test_d10_type_hints_row_counts_what_tf_counts():
    from tflab.retrace import demo as retrace_demo

    row = retrace_demo._type_hints(tf)
    # experimental_follow_type_hints no longer converts 1 and 2: two Literals, two traces.
    assert (row.traces, row.tf_tracing_count, row.traces_after) == (2, 2, 1)
    assert row.reasons == ("#2 x: 1 -> 2",) and row.prevention == "pass tf.constant(n)"


def test_runtime_op_error_names_the_op_and_tf_detail():
    d = diagnose(c.gather_out_of_range, S([3]))
    assert d.stage == "call" and d.error == "InvalidArgumentError: indices = 10 is not in [0, 3)"
    assert "the GatherV2 op 'GatherV2' failed when the ConcreteFunction ran" in d.explanation


def _appends_outer_tensor(x):
    out = []
    for _ in tf.range(3):
        out.append(x)  # silent: the While body is traced once
    return tf.stack(out)


def _appends_in_python_loop(x):
    out = []
    for _ in range(3):  # unrolled: appends 3 times, as eager does
        out.append(x)
    return tf.stack(out)


def test_a_list_appended_in_a_while_body_without_error_is_diagnosed_not_ok():
    """TF raises nothing here, but the graph's list holds 1 entry where eager's holds 3."""
    x = tf.ones([2])
    assert (tf.function(_appends_outer_tensor)(x).shape[0], _appends_outer_tensor(x).shape[0]) == (1, 3)
    d = diagnose(_appends_outer_tensor, tf.TensorSpec([2]))
    assert (d.ok, d.kind, d.stage, d.statement) == (False, "python-list-in-tensor-loop", "silent",
                                                    "out.append(x)")
    assert "became a While op, whose body is traced once" in d.explanation and "TensorArray" in d.fix
    assert "TF said: nothing (no error)" in d.to_text()
    assert diagnose(_appends_in_python_loop, tf.TensorSpec([2])).ok  # unrolled at trace time: fine
