"""Parameter names given to infer_input_signature match the arguments, and never cut the signature.

``names=["a", "b"]`` for one argument was accepted without a word, and ``names=["a"]`` for two
arguments returned a one-spec signature (``zip`` stopped at the shorter list), so the function
lost its second input.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tflab import infer_input_signature, stabilize
from tflab.errors import UsageError

A = np.ones((2, 3), np.float32)
B = np.ones((4,), np.int32)


@pytest.mark.parametrize("examples, names, words", [
    ([(A,)], ["a", "b"], r"2 names \['a', 'b'\] for 1 argument"),  # handed: more names than arguments
    ([(A, B)], ["a"], r"1 names \['a'\] for 2 argument"),  # sibling: fewer names cut the signature
    ([(A,)], "a", r"names must be a sequence of strings"),  # sibling: a str would be its letters
])
def test_names_that_do_not_fit_the_arguments_are_refused(examples, names, words):
    with pytest.raises(UsageError, match=words):
        infer_input_signature(examples, names=names)


def test_matching_names_name_the_specs():
    """Healthy twin."""
    sig = infer_input_signature([(A, B), (A[:1], B)], names=["x", "n"])
    assert sig == (tf.TensorSpec([None, 3], tf.float32, "x"), tf.TensorSpec([4], tf.int32, "n"))


def test_stabilize_keeps_the_arguments_past_the_named_parameters():
    """A function with ``*rest`` has one parameter name for two arguments: both specs are kept."""
    def f(x, *rest):
        return x + tf.cast(tf.reduce_sum(rest[0]), tf.float32)

    with pytest.warns(UserWarning):  # every example has one shape: stabilize says the dims stay fixed
        g = stabilize(f, examples=[(A, B)])
    assert len(g.input_signature) == 2 and g.input_signature[1].dtype == tf.int32
