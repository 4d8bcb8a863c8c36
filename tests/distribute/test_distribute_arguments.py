"""inspect_distributed names a step that is not callable before judging its arguments.

``inspect_distributed(3, spec)`` said the arguments held no PerReplica value and never that 3 is
not a function.
"""

from __future__ import annotations

import pytest
import tensorflow as tf

from tflab import inspect_distributed
from tflab.errors import UsageError


@pytest.mark.parametrize("fn, got", [(3, r"3 \(int\)"), ("step", r"'step' \(str\)")])  # handed, sibling
def test_a_step_that_is_not_callable_is_named(fn, got):
    with pytest.raises(UsageError, match=rf"inspect_distributed: fn must be a callable, got {got}"):
        inspect_distributed(fn, tf.TensorSpec([2]))


def test_a_callable_step_reaches_the_argument_check():
    """Healthy twin: a real step goes on to the per-replica check (plain specs run on no replica)."""
    with pytest.raises(UsageError, match="PerReplica"):
        inspect_distributed(lambda x: x * 2.0, tf.TensorSpec([2]))
