"""Root causes of a numeric difference between two runs of the user's graph.

Two runs of one function disagree: float32 against a mixed policy, eager
against graph (Grappler) against XLA, TF against a LiteRT variant. The
symptom is where the difference shows (an output, the first non-finite op);
the cause is the **first op whose own error, on the inputs it actually
received in the run under test, exceeds that op's rounding bound**. Every op
after it only carries the error along.

`tflab.attribution.records.Cause` is the one record every comparison prints
for it (``cause: CLASS at OP_TYPE 'name' (file.py:LINE): ...``), and the
classes it may name are `CAUSE_CLASSES`. `tflab.attribution.engine` measures
it on a TF graph (`attribute`, `attribute_calls`, `Attribution`); `bounds` is
the rounding arithmetic, `reeval` one op re-run in float64, `judge` one op's
verdict. Importing the package imports none of them: each name loads its
module on first use.
"""

import importlib

from tflab._api.lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(("CAUSE_CLASSES", "Cause", "OpJudgement", "Attribution"), "records"),
    **dict.fromkeys(("attribute", "attribute_calls", "attribute_runs"), "engine"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.attribution.{part}"))
