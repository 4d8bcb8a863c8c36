"""The cause record: one line per cause, classes from a closed list, a judgement's ratio against its bound."""

from __future__ import annotations

import math

import pytest

from tflab.attribution import CAUSE_CLASSES, Cause, OpJudgement


def test_cause_line_names_class_op_and_line():
    c = Cause("normalize", "eager vs xla", "compiler", "fusion.3", "add", line="bn.py:7",
              detail="XLA contracted x*inv + (-m*inv) into one FMA")
    assert c.line_text == "cause: compiler at add 'fusion.3' (bn.py:7): XLA contracted x*inv + (-m*inv) into one FMA"
    assert c.to_dict()["kind"] == "compiler"


def test_cause_refuses_a_class_outside_the_list():
    assert "overflow" in CAUSE_CLASSES and "underflow" in CAUSE_CLASSES
    with pytest.raises(ValueError, match="Cause.kind"):
        Cause("f", "a vs b", "bad luck")


@pytest.mark.parametrize("local, bound, ratio, over", [(2.0, 1.0, 2.0, True), (0.5, 1.0, 0.5, False),
                                                      (1.0, 0.0, math.inf, True), (0.0, 0.0, 0.0, False),
                                                      (1.0, None, None, False)],
                         ids=["over", "within", "zero-bound", "exact", "no-bound"])
def test_judgement_ratio(local, bound, ratio, over):
    j = OpJudgement("mul", "Mul", local_error=local, bound=bound)
    assert j.ratio == ratio and j.over_bound is over
