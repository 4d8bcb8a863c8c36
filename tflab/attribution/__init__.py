"""Root causes of a numeric difference between two runs of the user's graph.

Two runs of one function disagree: float32 against a mixed policy, eager
against graph (Grappler) against XLA, TF against a LiteRT variant. The
symptom is where the difference shows (an output, the first non-finite op);
the cause is the **first op whose own error, on the inputs it actually
received in the run under test, exceeds that op's rounding bound**. Every op
after it only carries the error along.

`tflab.attribution.records.Cause` is the one record every comparison prints
for it (``cause: CLASS at OP_TYPE 'name' (file.py:LINE): ...``), and the
classes it may name are `CAUSE_CLASSES`.
"""

from tflab.attribution.records import CAUSE_CLASSES, Cause, OpJudgement

__all__ = ["CAUSE_CLASSES", "Cause", "OpJudgement"]
