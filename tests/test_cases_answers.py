"""Issue 22 items 4 and 5: exit codes, and numbers that say when nothing was measured and why.

Each test names the trial case it comes from (../shared/cases/trial_newcomer.md,
reports.md) and fails on old main. Float16 limits are IEEE binary16 (max 65504,
smallest normal 2^-14) on every CPU, so nothing here depends on the kernel path.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tflab import compare_precisions

FNS = os.path.join(os.path.dirname(__file__), "data", "cases_answers_fns.py")


def test_compare_with_a_mode_xla_cannot_compile_is_a_finding_exit_1(run_cli):
    """W4: eager and graph ran (the input is valid), XLA cannot compile AsString: exit 1,
    one 'finding' line; old main exited 2 ("bad input")."""
    code, out, err = run_cli("compare", f"{FNS}:stringy", "--arg", "x=float32[4]", "--no-grad",
                             "--repeats", "1")
    assert code == 1, err
    assert err.startswith("tflab compare: finding: stringy: xla failed: ") and err.count("\n") == 1
    assert "eager and graph still compared" in err


def test_an_error_measured_over_no_element_is_none_not_zero():
    """M8: x * 1e-6 is subnormal in float16 everywhere (|y| < 2^-14): nothing is measured,
    so the error is None; old main returned 0.0 ("perfect"). bfloat16 keeps 1e-6 normal:
    a real, positive error (8 significand bits round 1e-6-scaled values)."""
    x = np.random.RandomState(0).randn(64).astype(np.float32)
    cmp = compare_precisions(lambda x: x * 1e-6, x)
    half = cmp.policies["mixed_float16"]
    assert (half.output_error_elements, half.gradient_error_elements) == (0, 0)
    assert half.output_error is None and half.gradient_error is None and half.gradient_error_median is None
    bf16 = cmp.policies["mixed_bfloat16"]
    assert bf16.output_error_elements == 64 and bf16.output_error > 0
    assert cmp.policies["float32"].output_error == 0.0  # the reference against itself: measured, exact
    ints = compare_precisions(lambda ids: tf.reduce_sum(ids * 2), tf.constant([1, 2, 3]))
    assert ints.policies["mixed_float16"].output_error is None  # integer output: no float value


def test_float16_loss_overflow_names_computing_the_loss_in_float32():
    """#38357: sum(x * 1000) over 3 values of 100 is 3e5 > 65504: the float16 loss is inf;
    the fix must say to compute the loss in float32 (a loss scale cannot help)."""
    cmp = compare_precisions(_load("scaled_loss"), tf.fill([3], 100.0), loss_scale="dynamic")
    f16 = cmp.policies["mixed_float16"]
    assert f16.overflow.get("output") == 1
    assert "fix: compute the loss in float32" in f16.verdict
    bf16 = cmp.policies["mixed_bfloat16"]  # float32's exponent range: no overflow, no such fix
    assert bf16.overflow == {} and "compute the loss in float32" not in bf16.verdict


def _load(name):
    from tflab._target import load_module

    return getattr(load_module(FNS), name)
