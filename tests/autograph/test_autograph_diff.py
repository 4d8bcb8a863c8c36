"""Lab step 5: autograph_diff says what each Python if/for/while became.

Every outcome and count here was measured on tensorflow 2.21.0 (CPU). The
fixture functions live in tests/data/autograph/control_flow.py; statements are
looked up by their source text, so the tests do not depend on line numbers.
"""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf

from tflab import AutographDiff, autograph_diff
from tflab._user.target import load_module
from tflab.errors import UsageError

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "autograph")
FIXTURE = os.path.join(DATA, "control_flow.py")
cf = load_module(FIXTURE)  # by path: no sys.path entry, no module-name clash

VEC4 = tf.TensorSpec([4], tf.float32)


def by_source(diff: AutographDiff, start: str):
    (stmt,) = [s for s in diff.statements if s.source.startswith(start)]
    return stmt


def op_types_by_name(fn, *args):
    """name → type of every op in the FuncGraph and its branch/body FuncGraphs."""
    from tflab._user.source_map import walk_ops

    graph = tf.function(fn).get_concrete_function(*args).graph
    return {op.name: op.type for op in walk_ops(graph)}


def test_mixed_function_table():
    d = autograph_diff(cf.mixed, VEC4, 3)
    got = [(s.kind, s.outcome, s.op_type, s.unrolled) for s in d.statements]
    # A tensor condition and a tf.range loop become StatelessIf/StatelessWhile
    # (stateless: no stateful op inside, cond_v2/while_v2 pick the stateless
    # form); range(3) and `if n > 2` are decided by Python at trace time.
    assert got == [("if", "graph", "StatelessIf", None),
                   ("for", "python", None, 3),
                   ("for", "graph", "StatelessWhile", None),
                   ("if", "graph", "StatelessIf", None),
                   ("if", "python", None, None)]
    # The If inside the tf.range loop lives in the While's body FuncGraph.
    assert by_source(d, "if i > 1").op == "while/cond"
    assert by_source(d, "if n > 2").note == "Python condition; then branch traced"
    # The op names the report gives are the ops of the traced graph.
    ops = op_types_by_name(cf.mixed, VEC4, 3)
    for s in d.statements:
        if s.op is not None:
            assert ops[s.op] == s.op_type, f"{s.op} is not a {s.op_type} in the FuncGraph"


@pytest.mark.parametrize("n", [0, 1, 3, 7], ids=lambda n: f"range({n})")
def test_python_range_unrolls_n_copies(n):
    d = autograph_diff(cf.mixed, VEC4, n)
    loop = by_source(d, "for i in range(n)")
    # Each unrolled iteration adds one `x + 1.0` (a Const and an AddV2).
    assert loop.unrolled == n
    ops = op_types_by_name(cf.mixed, VEC4, n)
    assert sum(1 for name in ops if name == "add" or name.startswith("add_")) >= n
    # The `if n > 2` branch is traced only when the Python condition holds.
    # (AutoGraph's if_stmt is wrapped while tracing, so the branch taken is
    # recorded, not guessed from ops.)
    expected = "then branch traced" if n > 2 else "condition False (then branch skipped)"
    assert by_source(d, "if n > 2").note.endswith(expected)


def test_python_while_unrolls_and_tensor_while_is_a_while_op():
    d = autograph_diff(cf.countdown, VEC4, 3)
    assert by_source(d, "while n > 0").unrolled == 3  # n is a Python int: 3, 2, 1
    w = by_source(d, "while k < tf.shape(x)[0]")
    assert (w.outcome, w.op_type, w.op, w.unrolled) == ("graph", "StatelessWhile", "while", None)


def test_nested_python_loops_count_copies_in_the_graph():
    d = autograph_diff(cf.nested, VEC4)
    # 2 outer copies; the inner loop body is in the graph 2 × 3 = 6 times.
    assert by_source(d, "for i in range(2)").unrolled == 2
    assert by_source(d, "for j in range(3)").unrolled == 6


def test_uneven_iterations_are_counted_by_the_statement_that_always_runs():
    d = autograph_diff(cf.uneven, VEC4)
    loop = by_source(d, "for i in range(4)")
    # Iteration 0 adds tf.exp, the others do not: the body still ran 4 times.
    assert loop.unrolled == 4
    assert by_source(d, "if i == 0").note == (
        "Python condition; then branch traced 1× and condition False 3× (then branch skipped)")


def count_ops(fn, op_type, *args):
    return sum(1 for t in op_types_by_name(fn, *args).values() if t == op_type)


@pytest.mark.parametrize("fn, runs, adds", [
    ("index_if", 4, 2),       # tester's case: read as 2 from op periods before
    ("every_third", 6, 2),    # read as 2 before: only 2 iterations make ops
    ("breaks_at_4", 5, 4),    # the 5th run stops at `break` before its add
], ids=["index-if", "every-third", "break"])
def test_unrolled_counts_body_runs_exactly(fn, runs, adds):
    d = autograph_diff(getattr(cf, fn), VEC4)
    loop = next(s for s in d.statements if s.kind == "for")
    assert (loop.outcome, loop.unrolled) == ("python", runs)
    # The graph holds one AddV2 per body run that reached `x + 1.0`.
    assert count_ops(getattr(cf, fn), "AddV2", VEC4) == adds


@pytest.mark.parametrize("k, first_note, elif_outcome", [
    (0, "Python condition; then branch traced", ("python", None)),
    (1, "Python condition; else branch traced", ("graph", "StatelessIf")),
], ids=["k=0", "k=1"])
def test_elif_not_reached_is_said(k, first_note, elif_outcome):
    d = autograph_diff(cf.elif_chain, VEC4, k)
    assert by_source(d, "if k == 0").note == first_note
    elif_ = by_source(d, "elif tf.reduce_sum")
    assert (elif_.outcome, elif_.op_type) == elif_outcome
    if k == 0:
        # The elif's tensor condition was never evaluated: no If op, no branch.
        assert elif_.note == "not reached at trace time (no branch traced)"
        assert count_ops(cf.elif_chain, "StatelessIf", VEC4, 0) == 0


def test_gradient_clipping_if_and_python_list_loop():
    d = autograph_diff(cf.clip_step, [tf.TensorSpec([3]), tf.TensorSpec([2, 2])], 1.0)
    clip = by_source(d, "if norm > threshold")
    assert (clip.outcome, clip.op_type, clip.op) == ("graph", "StatelessIf", "cond")
    # A Python list of 2 tensors: the loop is unrolled once per element.
    assert by_source(d, "for g in grads").unrolled == 2


def test_diff_is_a_unified_diff_of_original_and_to_code():
    d = autograph_diff(cf.mixed, VEC4, 2)
    assert d.original.startswith("def mixed(x, n):")
    assert d.converted == tf.autograph.to_code(cf.mixed)
    added = [ln for ln in d.unified_diff.splitlines() if ln.startswith("+")]
    removed = [ln for ln in d.unified_diff.splitlines() if ln.startswith("-")]
    assert any("ag__.if_stmt(" in ln for ln in added)
    assert sum("ag__.for_stmt(" in ln for ln in added) == 2  # range(n) and tf.range(3)
    assert any(ln.startswith("-    if tf.reduce_sum(x) > 0:") for ln in removed)
    assert d.unified_diff.startswith(f"--- {FIXTURE} (mixed)\n+++ tf.autograph.to_code(mixed)")


def test_repr_text_and_json():
    d = autograph_diff(cf.countdown, VEC4, 2)
    assert repr(d) == ("<AutographDiff countdown: while@27 → python ×2, "
                       "while@31 → StatelessWhile 'while'>")
    text = d.to_text(diff_lines=3)
    assert text.splitlines()[3].startswith("… (")
    assert "\x1b[" not in text and "\x1b[32m+" in d.to_text(color=True)
    payload = json.loads(json.dumps(d.to_dict()))
    assert [s["unrolled"] for s in payload["statements"]] == [2, None]
    assert payload["statements"][1]["op"] == "while"


def test_lambda_fallback_warns_and_strict_mode_raises(monkeypatch):
    # Two lambdas on one line: AutoGraph cannot find each one's source.
    d = autograph_diff(cf.calls_lambdas, tf.TensorSpec([2]))
    assert len(d.warnings) == 2 and not d.strict
    assert all(w.startswith("AutoGraph could not transform <function <lambda>> and will run it as-is.")
               for w in d.warnings)
    # The fallback was cached by AutoGraph; autograph_diff still reports it each time.
    assert len(autograph_diff(cf.calls_lambdas, tf.TensorSpec([2])).warnings) == 2
    with pytest.raises(UsageError, match=r"strict AutoGraph conversion .*could not parse the source code"):
        autograph_diff(cf.calls_lambdas, tf.TensorSpec([2]), strict=True)
    monkeypatch.setenv("AUTOGRAPH_STRICT_CONVERSION", "1")
    with pytest.raises(UsageError, match="UnsupportedLanguageElementError"):
        autograph_diff(cf.calls_lambdas, tf.TensorSpec([2]))
    # strict=False wins over the environment variable.
    assert len(autograph_diff(cf.calls_lambdas, tf.TensorSpec([2]), strict=False).warnings) == 2
    assert os.environ["AUTOGRAPH_STRICT_CONVERSION"] == "1"


@pytest.mark.parametrize("filename, why", [
    ("<string>", "defined with exec"),
    ("<stdin>", "typed into an interactive session"),
], ids=["exec", "repl"])
def test_function_without_source_is_one_clear_error(filename, why):
    ns: dict = {}
    exec(compile("def g(x):\n    return x + 1\n", filename, "exec"), {"tf": tf}, ns)
    message = f"g has no retrievable source: it was {why}.*put the function in a .py file"
    with pytest.raises(UsageError, match=message):
        autograph_diff(ns["g"], VEC4)


def test_tf_function_and_its_input_signature():
    f = tf.function(cf.countdown, input_signature=None)
    d = autograph_diff(f, VEC4, 1)  # a tf.function's python_function is converted
    assert by_source(d, "while n > 0").unrolled == 1
    sig = tf.function(cf.nested, input_signature=[tf.TensorSpec([None], tf.float32)])
    assert by_source(autograph_diff(sig), "for i in range(2)").unrolled == 2
    with pytest.raises(UsageError, match="needs a function"):
        autograph_diff(3)


def test_callable_object_converts_its_call_method():
    d = autograph_diff(cf.Gate(), VEC4)
    assert d.function_name == "Gate.__call__"
    assert [(s.kind, s.outcome, s.op_type) for s in d.statements] == [("if", "graph", "StatelessIf")]


def test_trace_error_names_the_user_line():
    def bad(x):
        if x > 0:  # a tensor condition with a non-scalar tensor
            return x
        return -x
    with pytest.raises(UsageError, match=r"tracing .*bad raised .*test_autograph_diff.py:\d+ in bad"):
        autograph_diff(bad, VEC4)


# ---------------------------------------------------------------- CLI


def test_cli_prints_table_without_colour_when_not_a_tty(run_cli):
    code, out, err = run_cli("autograph", f"{FIXTURE}:mixed", "--arg", "x=float32[4]", "--arg", "n=2")
    assert code == 0, err
    assert out.startswith(f"--- {FIXTURE} (mixed)") and "\x1b[" not in out
    table = out[out.index("line  kind"):].splitlines()
    assert set(table[1].replace(" ", "")) == {"-"}  # the header's rule (tflab.report.text.table)
    assert table[3].split()[:5] == ["15", "for", "python", "-", "2"]
    assert table[2].split()[:4] == ["11", "if", "graph", "StatelessIf"]


def test_cli_colours_the_diff_on_a_terminal(run_cli, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run_cli("autograph", f"{FIXTURE}:nested", "--arg", "x=float32[3]")
    assert code == 0
    assert "\x1b[32m+def tf__nested(x):\x1b[0m" in out and "\x1b[31m-def nested(x):\x1b[0m" in out


def test_cli_json_and_no_diff(run_cli):
    code, out, _ = run_cli("autograph", f"{FIXTURE}:nested", "--arg", "x=float32[3]", "--json")
    assert code == 0
    assert [s["unrolled"] for s in json.loads(out)["statements"]] == [2, 6]
    code, out, _ = run_cli("autograph", f"{FIXTURE}:nested", "--arg", "x=float32[3]", "--no-diff")
    assert out.startswith("line  kind")


@pytest.mark.parametrize("argv, message", [
    (["--arg", "x=float32[4]", "--arg", "m=2"], "--arg m: the function takes no parameter 'm'"),
    (["--arg", "x=float32[4]"], "missing --arg n="),
], ids=["unknown-name", "missing-arg"])
def test_cli_arg_not_matching_signature_exits_2(run_cli, argv, message):
    code, out, err = run_cli("autograph", f"{FIXTURE}:mixed", *argv)
    assert code == 2 and out == ""
    assert err.startswith("tflab autograph: error: " + message) and err.count("\n") == 1


def test_cli_strict_and_no_source_exit_2(run_cli):
    code, _, err = run_cli("autograph", f"{FIXTURE}:calls_lambdas", "--arg", "x=float32[2]", "--strict")
    assert code == 2 and "AUTOGRAPH_STRICT_CONVERSION=1" in err and err.count("\n") == 1
    code, _, err = run_cli("autograph", os.path.join(DATA, "no_source.py") + ":made_by_exec",
                           "--arg", "x=float32[2]")
    assert code == 2 and "made_by_exec has no retrievable source" in err and err.count("\n") == 1


# ---------------------------------------------------------------- user-test findings


def test_unbuilt_keras_layer_is_built_from_the_argument_shape():
    layer = cf.Gated()
    assert not layer.built
    d = autograph_diff(layer, tf.TensorSpec([2, 3]), training=True)
    assert layer.built and tuple(layer.w.shape) == (3, 2)  # build((2, 3)) ran first
    assert [(s.kind, s.outcome, s.op_type) for s in d.statements] == [
        ("if", "python", None), ("if", "graph", "StatelessIf")]
    assert by_source(d, "if training").note == "Python condition; then branch traced"


def test_class_and_unbound_method_are_one_clear_error(run_cli):
    with pytest.raises(UsageError, match="Gate is a class; name an instance"):
        autograph_diff(cf.Gate, VEC4)
    code, out, err = run_cli("autograph", f"{FIXTURE}:Gate.__call__", "--arg", "x=float32[4]")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("tflab autograph: error: Gate.__call__ is a method of class Gate, not bound")


def test_cli_falls_back_to_input_signature_and_checks_it(run_cli):
    code, out, err = run_cli("autograph", f"{FIXTURE}:sig_loop", "--no-diff")
    assert code == 0, err
    assert out.splitlines()[2].split()[:5] == [str(by_source(autograph_diff(cf.sig_loop), "for").lineno),
                                               "for", "python", "-", "2"]
    code, out, err = run_cli("autograph", f"{FIXTURE}:sig_loop", "--arg", "x=float32[None,4]")
    assert code == 2 and "x does not match sig_loop's input_signature" in err


def test_exec_defined_helper_with_tensor_if_gets_a_hint():
    ns = load_module(os.path.join(DATA, "no_source.py"))
    with pytest.raises(UsageError) as info:
        autograph_diff(ns.calls_exec_helper, VEC4)
    msg = str(info.value)
    # TF's own error is a tensor used as a Python bool; the hint says why.
    assert "OperatorNotAllowedInGraphError" in msg
    assert "hint: sign_flip (<string>, line 2) has no source file (defined with exec), " \
           "so AutoGraph ran it unconverted" in msg


def test_bound_tf_function_method_converts_the_users_method():
    """``m.run`` where ``run`` is a @tf.function method is a new
    Function whose python_function is TF's bound_method_wrapper; the user's
    method bound to ``m`` is what must be converted and traced."""
    m = cf.Stepper()
    d = autograph_diff(m.run, tf.TensorSpec([3]))
    assert d.function_name == "Stepper.run"
    loop = by_source(d, "for i in tf.range(2)")
    assert (loop.outcome, loop.op_type, loop.unrolled) == ("graph", "StatelessWhile", None)
    # The same statement in TF's own trace of m.run is that op.
    graph = m.run.get_concrete_function(tf.TensorSpec([3])).graph
    assert graph.get_operation_by_name(loop.op).type == loop.op_type
    assert "bound_method_wrapper" not in d.converted and "def tf__run(self, x)" in d.converted
    # The instance itself, its tf.function __call__, and a Keras layer whose call
    # is a tf.function: the same unwrapping.
    for target in (m, m.__call__):
        d = autograph_diff(target, tf.TensorSpec([3]))
        assert d.function_name == "Stepper.__call__"
        assert [(s.kind, s.outcome, s.unrolled) for s in d.statements] == [("for", "python", 3)]
    d = autograph_diff(cf.TracedCallLayer(), tf.TensorSpec([3]))
    assert d.function_name == "TracedCallLayer.call"
    assert [(s.kind, s.outcome, s.op_type) for s in d.statements] == [("if", "graph", "StatelessIf")]


def _dataset_sum(ds):
    s = tf.constant(0, tf.int64)
    for x in ds:  # a dataset reduction: ReduceDataset, the body traced once
        s += x
    return s


def _dataset_sum_until(ds):
    s = tf.constant(0, tf.int64)
    for x in ds:
        if x > 2:  # a tensor condition inside the scan function: an If op there
            break
        s += x
    return s


def test_a_for_loop_over_a_dataset_is_a_reduce_dataset_op_not_python():
    """It was reported as 'python ×1' (unrolled once); TF makes it a ReduceDataset op."""
    ds = tf.data.Dataset.range(5)
    (loop,) = autograph_diff(_dataset_sum, ds).statements
    graph_ops = {op.type for op in tf.function(_dataset_sum).get_concrete_function(ds).graph.get_operations()}
    assert "ReduceDataset" in graph_ops and not graph_ops & {"While", "StatelessWhile"}
    assert (loop.kind, loop.outcome, loop.op_type, loop.unrolled) == ("for", "graph", "ReduceDataset", None)
    loop, branch = autograph_diff(_dataset_sum_until, ds).statements
    assert (loop.outcome, loop.op_type) == ("graph", "ReduceDataset")
    assert (branch.kind, branch.outcome, branch.op_type) == ("if", "graph", "StatelessIf")
    assert int(tf.function(_dataset_sum_until)(ds)) == 0 + 1 + 2
