"""A function with no floating-point value to judge is refused, not passed for every policy.

``tflab precision`` on ``x * 2 + 1`` over int32 printed "no underflow or overflow" for float16 and
bfloat16 (exit 0): every error was measured over nothing. The check is on what the float32 reference
run gave (float output elements, gradients), so it holds for every way of having none.
"""

from __future__ import annotations

import pytest
import tensorflow as tf

import tflab
from tflab.errors import UsageError


@pytest.mark.parametrize("fn, spec, kinds", [
    (lambda x: x * 2 + 1, tf.TensorSpec([4], tf.int32), "int32"),                       # the handed case
    (lambda b: tf.logical_not(b), tf.TensorSpec([4], tf.bool), "bool"),                 # sibling: bool only
    (lambda x: tf.cast(tf.round(x * 3.0), tf.int32), tf.TensorSpec([4]), "int32"),      # sibling: float in,
], ids=["int-only", "bool-only", "float-in-int-out"])                                   # no gradient flows
def test_no_float_value_to_judge_is_refused(fn, spec, kinds):
    with pytest.raises(UsageError, match=rf"there is no floating-point value to judge: its outputs are {kinds}"):
        tflab.compare_precisions(fn, spec)


def test_healthy_twin_with_float_outputs_is_judged():
    """A float output (even next to an integer one) is judged under every policy."""
    cmp = tflab.compare_precisions(lambda x: (tf.exp(x) * 2.0, tf.shape(x)), tf.TensorSpec([4]))
    assert cmp.policies["mixed_float16"].output_error is not None
