"""Exit codes, and numbers that say when nothing was measured and why.

Each test is a case users met, and fails without the fix. Float16 limits are IEEE binary16 (max 65504,
smallest normal 2^-14) on every CPU, so nothing here depends on the kernel path.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tflab import compare_precisions
from tflab.errors import UsageError

FNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "cases_answers_fns.py")


def test_compare_with_a_mode_xla_cannot_compile_is_a_finding_exit_1(run_cli):
    """Eager and graph ran (the input is valid), XLA cannot compile AsString: exit 1,
    one 'finding' line; tflab without the fix exited 2 ("bad input")."""
    code, out, err = run_cli("compare", f"{FNS}:stringy", "--arg", "x=float32[4]", "--no-grad",
                             "--repeats", "1")
    assert code == 1, err
    assert err.startswith("tflab compare: finding: stringy: xla failed: ") and err.count("\n") == 1
    assert "eager and graph still compared" in err


def test_an_error_measured_over_no_element_is_none_not_zero():
    """X * 1e-6 is subnormal in float16 everywhere (|y| < 2^-14): nothing is measured,
    so the error is None; tflab without the fix returned 0.0 ("perfect"). bfloat16 keeps 1e-6 normal:
    a real, positive error (8 significand bits round 1e-6-scaled values)."""
    x = np.random.RandomState(0).randn(64).astype(np.float32)
    cmp = compare_precisions(lambda x: x * 1e-6, x)
    half = cmp.policies["mixed_float16"]
    assert (half.output_error_elements, half.gradient_error_elements) == (0, 0)
    assert half.output_error is None and half.gradient_error is None and half.gradient_error_median is None
    bf16 = cmp.policies["mixed_bfloat16"]
    assert bf16.output_error_elements == 64 and bf16.output_error > 0
    assert cmp.policies["float32"].output_error == 0.0  # the reference against itself: measured, exact
    with pytest.raises(UsageError, match="there is no floating-point value to judge"):  # integer output
        compare_precisions(lambda ids: tf.reduce_sum(ids * 2), tf.constant([1, 2, 3]))


def test_float16_loss_overflow_names_computing_the_loss_in_float32():
    """tensorflow/tensorflow#38357: sum(x * 1000) over 3 values of 100 is 3e5 > 65504: the float16 loss is inf;
    the fix must say to compute the loss in float32 (a loss scale cannot help).: the
    fix is run: casting the function's output cannot help (the float16 sum is already inf), the
    loss line computed in float32 does, and only that one is printed as the fix."""
    cmp = compare_precisions(_load("scaled_loss"), tf.fill([3], 100.0), loss_scale="dynamic")
    f16 = cmp.policies["mixed_float16"]
    assert f16.overflow.get("output") == 1
    assert "fix: compute cases_answers_fns.py:13 in float32 and keep the result float32 (the loss in float32" \
        in f16.verdict and "(checked: NaN/inf gone" in f16.verdict
    assert "tried first: compute the loss in float32" in f16.verdict  # the output cast: failed
    bf16 = cmp.policies["mixed_bfloat16"]  # float32's exponent range: no overflow, no such fix
    assert bf16.overflow == {} and "compute the loss in float32" not in bf16.verdict


def _load(name):
    from tflab._user.target import load_module

    return getattr(load_module(FNS), name)


# ------------------------------------------------------------------ save_and_reload


def _fns():
    from tflab._user.target import load_module

    return load_module(FNS)


def test_save_and_reload_names_the_random_op_when_not_bit_exact(tmp_path):
    """Without the fix, tflab said 'NOT bit-exact' with no note. A healthy model must get no such note."""
    from tflab import save_and_reload

    m = _fns()
    x = {"x": np.zeros((2, 3), np.float32)}
    check = save_and_reload(m.Noisy(), str(tmp_path / "noisy"), x)
    assert not check.bit_exact
    (note,) = [n for n in check.notes if "random" in n]
    assert "RandomUniform" in note and "stateless" in note
    healthy = save_and_reload(m.Counter(), str(tmp_path / "counter"), x)
    assert healthy.bit_exact and not any("random" in n for n in healthy.notes)


def test_save_and_reload_gives_a_stateful_model_its_state_back_and_says_so(tmp_path):
    """The check calls the in-process model once per batch (here 1): tflab without the fix left
    count at 1 with no note. It is assigned back to 0, and the note says so."""
    from tflab import save_and_reload

    counter = _fns().Counter()
    check = save_and_reload(counter, str(tmp_path / "c"), {"x": np.zeros((2, 3), np.float32)})
    assert float(counter.count.numpy()) == 0.0
    (note,) = [n for n in check.notes if "changed" in n]
    assert "count:0: 0 -> 1" in note and "assigned the values" in note


def test_save_and_reload_warns_about_a_fixed_traced_batch_dim(tmp_path):
    """tensorflow/tensorflow#36461: the signature is float32[3,4] (the traced shape): another batch size fails.
    The warning shows the None-dim signature; a None-dim model gets no warning."""
    import tensorflow as tf

    from tflab import save_and_reload

    m = _fns()
    fixed = m.Fixed()
    fixed(tf.ones([3, 4]))  # the user's one call: its trace is what tflab saves
    check = save_and_reload(fixed, str(tmp_path / "f"), {"x": np.ones((3, 4), np.float32)})
    (note,) = [n for n in check.notes if "dim 0 is fixed" in n]
    assert "x: float32[3,4]" in note and "x: float32[None,4]" in note
    # What the warning claims, measured: the reloaded signature refuses a batch of 2.
    loaded = tf.saved_model.load(str(tmp_path / "f"))
    try:
        loaded.signatures["serving_default"](x=np.ones((2, 4), np.float32))
        refused = False
    except (TypeError, ValueError, tf.errors.InvalidArgumentError):
        refused = True
    assert refused
    relaxed = save_and_reload(m.Counter(), str(tmp_path / "n"), {"x": np.ones((3, 3), np.float32)})
    assert not any("dim 0 is fixed" in n for n in relaxed.notes)


# ------------------------------------------------------------------ inspect


def test_inspect_a_module_whose_call_has_an_input_signature_needs_no_arg(run_cli):
    """Without the fix, tflab said 'missing --arg x=…'; the signature's specs are used."""
    code, out, err = run_cli("inspect", f"{FNS}:serve")
    assert code == 0, err
    assert "inputs:  (x: float32[None,6], idx: int32[None])" in out
    assert "MatMul×1" in out and "GatherV2×1" in out


def test_inspect_a_keras_model_with_a_wrong_arg_name_names_its_parameter(run_cli):
    """Without the fix pointed into keras/src/utils/traceback_utils.py."""
    code, out, err = run_cli("inspect", f"{FNS}:mlp", "--arg", "x=float32[2,16]")
    assert code == 2 and out == ""
    assert err == ("tflab inspect: error: --arg x: Functional.call takes no parameter 'x'; its parameters "
                   "are (inputs, training, mask): pass --arg inputs=float32[2,16]\n")
    assert "traceback_utils" not in err
    code, out, err = run_cli("inspect", f"{FNS}:mlp", "--arg", "inputs=float32[2,16]")
    assert code == 0 and "MatMul×1" in out, err


# ------------------------------------------------------------------ export


def test_export_of_a_keras_file_with_an_unknown_custom_layer_quotes_keras_whole_and_names_the_fix(
        run_cli, tmp_path):
    """Without the fix cut Keras's error at 200 characters, mid-word, with no fix. The custom
    layer is registered while saving and unregistered before loading (as in a fresh process
    that never imported the module defining it)."""
    import keras

    @keras.saving.register_keras_serializable(package="tflab_m7")
    class Scale(keras.layers.Layer):
        def call(self, x):
            return x * 2.0

    inputs = keras.Input((4,))
    path = tmp_path / "custom.keras"
    keras.Model(inputs, Scale()(inputs)).save(path)
    registry = keras.saving.get_custom_objects()
    key = next(k for k in registry if k.endswith("Scale") and k.startswith("tflab_m7"))
    del registry[key]
    code, out, err = run_cli("export", str(path), "--out", str(tmp_path / "out"))
    (line,) = [ln for ln in err.splitlines() if not ln.startswith("[export ")]  # one error line
    assert code == 2 and line.startswith("tflab export: error: "), err
    assert "tflab export FILE.py:OBJ" in err and "register_keras_serializable" in err
    # The whole of Keras's first line is quoted: its last word is there, not cut.
    try:
        keras.models.load_model(path)
    except Exception as e:  # the same error, read from Keras itself
        first = str(e).strip().splitlines()[0]
    assert first in err and len(first) > 200


# ------------------------------------------------------------------ compare_modes


@pytest.mark.onednn
def test_a_residual_xla_difference_at_an_ill_conditioned_point_gets_a_condition_note():
    """tensorflow/tensorflow#58752: the finding at tan(cosh(cosh(3.3))) (float32 ULP of 3.9e5 is 0.03, tan's
    period is pi) is within what one ULP of the input does to eager itself: said outright.
    That XLA's tan differs from eager's there at all is the kernel path's doing (measured on
    AVX2 here ,; the note's condition is not: one input ULP
    moves tan's argument by ~1 output-scale unit on every ISA."""
    from tflab import compare_modes

    # the note is written before any cause search (bisection) or HLO fetch: neither is needed here
    r = compare_modes(_fns().tan_cosh, tf.constant([0.5, 3.3, 1.0], tf.float32), gradients=False,
                      attribute=False, hlo=False, repeats=1)
    flagged = [f for f in r.findings if f.startswith("xla:")]
    assert flagged and all("ill-conditioned there" in f for f in flagged), r.findings


def test_a_real_difference_gets_no_condition_note():
    """The note can be absent: a planted +1 in the traced modes is not conditioning (one ULP
    of x moves eager's 2x by ~1e-7, far below 1), on any ISA."""
    from tflab import compare_modes

    bug = compare_modes(_fns().off_by_one_in_graph, tf.constant([0.5, 3.3, 1.0]), gradients=False,
                        attribute=False, hlo=False, repeats=1)
    assert len(bug.findings) == 2 and not any("ill-conditioned" in f for f in bug.findings), bug.findings


# ------------------------------------------------------------------ diagnose / inspect

DIAG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "diagnose")


def test_40537_diagnose_prints_the_tf_range_cast_it_ran_not_the_tnp_that_failed(run_cli):
    """: tflab without the fix printed `tf.experimental.numpy.arange` as the fix and then said its
    own check of it failed. Now tnp is tried, fails (OperatorNotAllowedInGraphError), and the
    printed fix is the core op with its dtype cast, run on a copy and equal to eager."""
    code, out, err = run_cli("diagnose", os.path.join(DIAG, "fixes_run_cases.py") + ":my_function",
                             "--arg", "x=float32[3]", "--arg", "a=2.0")
    assert code == 1, err
    (fix,) = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("fix: ")]
    assert "tf.cast(tf.range(range_lim), x.dtype)" in fix and "(checked: outputs equal eager's on your 1 call (bit for bit)" in fix
    assert "experimental.numpy" not in fix
    (tried,) = [ln for ln in out.splitlines() if ln.strip().startswith("tried first: ")]
    assert "tf.experimental.numpy.arange(range_lim) (failed: raised OperatorNotAllowedInGraphError" in tried


def test_312_inspect_sizes_the_baked_dataset_and_prints_the_fix_it_ran(run_cli):
    """: without the fix, tflab said "eager tensors: none" and gave no size for `Cast/x`."""
    code, out, err = run_cli("inspect", os.path.join(DIAG, "baked_cases.py") + ":logp", "--arg", "beta=float32[50]")
    assert code == 0, err
    assert "8.0 MB of data baked into the GraphDef as 1 Const op(s) (GraphDef limit 2 GB)" in out
    assert "Const Cast/x: float64[50, 20000], 8,000,000 bytes baked into the GraphDef at baked_cases.py:" in out
    (fix,) = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("fix: ")]
    assert "pass the array as an argument" in fix
    assert "(checked: re-traced with X.T passed as an argument: 0 bytes of large Const data left (was 8,000,000)" in fix
