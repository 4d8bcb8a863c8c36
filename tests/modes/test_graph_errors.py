"""compare_modes on graph/XLA failures: TF's innermost error, and the tf.cond branch eager skipped.

tensorflow/tensorflow#109015 (reports_s4 row 10), adapted without a GPU: a Keras model whose
tf.cond false branch calls ``tf.config()`` (a module). Eager runs only the branch its predicate
picks (the sum of ones is > 0: the true branch), tracing builds both, so graph and XLA raise
TypeError. Also: the one-line repr splits outputs and gradients.
"""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

import tflab
from tflab._graph.failures import cond_branch_at, innermost_error
from tflab._user.target import load_module

FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "modes_cond_branch.py")
cases = load_module(FILE)
BRANCH_LINE = next(i for i, ln in enumerate(open(FILE), 1) if "tf.config()" in ln and "float16" in ln)


@pytest.fixture(scope="module")
def reporter():
    return tflab.compare_modes(cases.TestModel(), tf.ones([2, 3]), hlo=False, repeats=1)


def test_109015_quotes_tfs_error_not_keras_wrapper(reporter):
    for mode in ("graph", "xla"):
        err = reporter.modes[mode].error
        assert err.startswith("TypeError: 'module' object is not callable"), err
        assert "Exception encountered" not in err
        assert f"modes_cond_branch.py:{BRANCH_LINE} in <lambda>" in err
    assert reporter.modes["eager"].error is None


def test_109015_says_eager_passes_because_it_runs_one_branch(reporter):
    notes = [f for f in reporter.findings if "eager passes only because eager tf.cond runs one branch" in f]
    assert [n.split(":")[0] for n in notes] == ["graph", "xla"]
    assert "false_fn branch (<lambda> at modes_cond_branch.py:" in notes[0]
    assert "measured: 0 calls" in notes[0]
    assert "(not checked: " in notes[0]  # the fix is the user's code: said, not claimed checked
    assert "eager passes only" in reporter.to_text()


def test_an_error_eager_would_also_see_is_not_blamed_on_tf_cond():
    # Planted: the same tf.config() call in the branch eager *does* take (all-negative input picks
    # the false branch): eager itself raises, so compare_modes reports the eager error instead.
    with pytest.raises(tflab.errors.UsageError, match="not callable"):
        tflab.compare_modes(cases.TestModel(), -tf.ones([2, 3]), hlo=False, repeats=1)


def test_healthy_cond_runs_in_every_mode_with_no_branch_note():
    cmp = tflab.compare_modes(cases.BothBranchesRun(), tf.ones([2, 3]), hlo=False, repeats=1)
    assert all(r.error is None for r in cmp.modes.values()) and cmp.findings == ()


def test_two_branches_on_one_line_make_no_claim():
    # cond(p, lambda: a, lambda: b) on one line: the line cannot tell which branch failed.
    line = next(i for i, ln in enumerate(open(FILE), 1) if "x * tf.config()" in ln)
    assert cond_branch_at(FILE, line) is None
    assert cond_branch_at(FILE, BRANCH_LINE).which == "false_fn"
    assert cond_branch_at(FILE, 1) is None


def test_innermost_error_walks_context_and_strips_keras_layers():
    try:
        try:
            raise TypeError("'module' object is not callable")
        except TypeError:
            raise TypeError("Exception encountered when calling TestModel.call().\n\n\x1b[1mouter\x1b[0m\n\n"
                            "Arguments received by TestModel.call():\n  • x=tf.Tensor(shape=(2, 3))") from None
    except TypeError as e:
        assert innermost_error(e) == "TypeError: 'module' object is not callable"
    # Only the wrapper (no inner exception): its own line under the wrapper text.
    assert innermost_error(TypeError("Exception encountered when calling M.call().\n\n\x1b[1mbad dtype\x1b[0m")) \
        == "TypeError: bad dtype"


def test_repr_says_out_and_grad():
    w = tf.Variable(tf.random.stateless_normal([128, 32], seed=[1, 2]))
    m = tflab.compare_modes(lambda x: tf.tanh(x @ w), tf.random.stateless_normal([64, 128], seed=[3, 4]),
                            repeats=1, hlo=False)
    xla = m.modes["xla"].ulp_above_atol
    assert f"xla: out {xla.outputs} ULP, grad {xla.gradients} ULP above atol" in repr(m)
    no_grads = tflab.compare_modes(lambda x: tf.tanh(x), tf.ones([4]), repeats=1, hlo=False, gradients=False)
    assert "eager: out 0 ULP above atol" in repr(no_grads) and " ULP, grad " not in repr(no_grads)


def _tensor_while(x):
    i = tf.constant(0)
    while i < 3:  # a tensor condition: a While op with no maximum_iterations
        x = tf.tanh(x) * 1.5
        i += 1
    return x


def test_xla_while_loop_gradient_fixes_are_fix_records_and_forward_only_is_run():
    m = tflab.compare_modes(_tensor_while, tf.constant([-1.0, 0.0, 1.0]), repeats=1, hlo=False,
                            modes=("eager", "xla"))
    err = m.modes["xla"].error
    # The loop bound is the user's to give: said as not checked, never as checked.
    assert "fix: give the loop a bound XLA can read" in err and "(not checked: the number of iterations" in err
    # gradients=False was run: XLA compiled the forward pass and its outputs were compared with eager's.
    assert "or: compare the forward pass only: gradients=False (checked: XLA compiles and runs the forward " \
           "pass: outputs within" in err
