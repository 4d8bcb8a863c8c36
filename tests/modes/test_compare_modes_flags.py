"""compare_modes' switches and time limit take only what they mean.

``gradients="no"`` is truthy, so the gradients the caller declined ran; ``attribute_seconds=nan``
was taken as a time limit; ``grappler={"bogus_opt": True}`` was dropped by TF without a word while
the report said graph mode ran with the caller's options.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import tensorflow as tf

from tflab import compare_modes
from tflab.errors import UsageError
from tflab.modes.api import GRAPPLER_OPTIONS


def f(x):
    return x * 2.0


SPEC = tf.TensorSpec([3])


@pytest.mark.parametrize("kwargs, words", [
    ({"gradients": "no"}, r"gradients must be True or False, got 'no' \(str\)"),  # handed
    ({"attribute": 1}, r"attribute must be True or False, got 1 \(int\)"),  # sibling
    ({"attribute_seconds": math.nan}, r"attribute_seconds must be a finite number > 0, got nan"),  # handed
    ({"attribute_seconds": -3.0}, r"attribute_seconds must be a finite number > 0"),  # sibling
    ({"grappler": {"bogus_opt": True}}, r"grappler has no option \['bogus_opt'\]"),  # handed
    ({"grappler": {"constant_foldng": False}}, r"grappler has no option \['constant_foldng'\].*constant_folding"),
])
def test_a_switch_or_limit_that_means_something_else_is_refused(kwargs, words):
    with pytest.raises(UsageError, match=words):
        compare_modes(f, SPEC, repeats=1, **kwargs)


def test_healthy_switches_run():
    """The twin: real booleans, a finite time limit and a real Grappler option."""
    r = compare_modes(f, SPEC, repeats=1, gradients=False, attribute=False, attribute_seconds=5.0,
                      grappler={"constant_folding": False}, modes=("graph",))
    assert r.to_dict()["grappler"] == {"constant_folding": False}


def test_grappler_options_are_the_ones_tf_reads():
    """The list is TF's own: every ``rewriter_toggle``/``rewriter_bool`` of eager/context.py, and
    ``min_graph_nodes`` (read apart)."""
    source = (Path(tf.__file__).parent / "python" / "eager" / "context.py").read_text()  # read, not imported
    read = set(re.findall(r'rewriter_(?:toggle|bool)\("(\w+)"\)', source)) | {"min_graph_nodes"}
    assert read == GRAPPLER_OPTIONS
