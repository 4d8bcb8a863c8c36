"""The records of a root-cause attribution: one judgement per op, and the cause it names.

A `Cause` is named from what was measured, never from the symptom alone:

* ``constant``: a literal the dtype cannot hold (it overflows to inf,
  underflows to 0, or rounds to 0 in the low precision);
* ``overflow``: a finite value became inf inside the graph (the outputs may
  stay finite: ``(x - mean) / sqrt(inf)`` is 0);
* ``underflow``: values fell below the dtype's smallest subnormal (to 0);
* ``rounding``: the op's own error exceeds its bound and neither of the two
  above happened;
* ``ill-conditioned``: the op is exact to its bound, but amplifies an error it
  inherited (its condition number at this input, measured element by element);
* ``domain``: the op was given inputs outside its domain (``sqrt``/``log`` of a
  negative, ``0/0``): the NaN is the op's right answer;
* ``compiler``: a compiler pass, XLA flag or Grappler optimizer whose removal
  restores the reference's bits (found by turning them off one at a time);
* ``kernel``: the same op computed by another kernel (oneDNN vs Eigen, XNNPACK
  vs TFLite's builtin kernels) gives the difference;
* ``quantization-range``: a quantized variant computes its own quantized model
  faithfully, but a tensor's quantization range is set by outliers, so its
  other values fall on a few steps and the outputs no longer follow the float
  model (the whole-model effect past its threshold, `tflab.litert.whole_model`);
* ``unexplained``: the runs differ and no class above was measured.

Example:
    >>> c = Cause("normalize", "eager vs xla", "compiler", "fusion.3", "add",
    ...           detail="XLA contracted x*inv + (-m*inv) into one FMA")
    >>> c.line_text
    "cause: compiler at add 'fusion.3': XLA contracted x*inv + (-m*inv) into one FMA"
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tflab.report.base import Report, config_field

__all__ = ["CAUSE_CLASSES", "Cause", "OpJudgement", "Attribution"]

CAUSE_CLASSES = ("constant", "overflow", "underflow", "rounding", "ill-conditioned", "domain", "compiler",
                 "kernel", "unexplained", "quantization-range", "random")


@dataclasses.dataclass(frozen=True)
class OpJudgement:
    """One op of the run under test, judged against a reference on its own actual inputs.

    Attributes:
        op_name: the op's name in the graph (or the TFLite op's index and type).
        op_type: the op's type (``Mul``, ``FULLY_CONNECTED``, an HLO opcode).
        local_error: the largest |actual - reference(actual inputs)| over the
            op's output elements (inf when one side is non-finite and the other
            is not), in the output's units.
        bound: what the op's own rounding may contribute (same units), or None
            when tflab has no bound for this op type.
        inherited_error: the largest |actual - reference run| at this op's
            output, i.e. the error it received plus its own.
        line: the user's line that created the op (``file.py:12``), or "".
    """

    op_name: str
    op_type: str
    local_error: float | None = None
    bound: float | None = None
    inherited_error: float | None = None
    line: str = ""

    @property
    def ratio(self) -> float | None:
        """``local_error / bound`` (inf for a positive error against a zero bound), None without both."""
        if self.local_error is None or self.bound is None:
            return None
        if self.bound == 0:
            return 0.0 if self.local_error == 0 else float("inf")
        return self.local_error / self.bound

    @property
    def over_bound(self) -> bool:
        """True when the op's own error exceeds its bound."""
        r = self.ratio
        return r is not None and r > 1.0

    @property
    def text(self) -> str:
        """``OP_TYPE 'name': local/bound R``."""
        r = self.ratio
        return f"{self.op_type} {self.op_name!r}: " + ("no bound" if r is None else f"local/bound {r:.3g}")


@dataclasses.dataclass(frozen=True, repr=False)
class Cause(Report):
    """The root cause of a difference between two runs, named from measurements.

    Attributes:
        function_name: the user's function (or model) the runs are of.
        runs: the two runs compared, e.g. ``"float32 vs mixed_float16"``,
            ``"eager vs xla"``, ``"tf vs litert int8"``.
        kind: one of `CAUSE_CLASSES`.
        op_name: the cause op's name ("" when the cause is not one op, e.g. a flag).
        op_type: the cause op's type.
        line: the user's line (``file.py:12``), or "" when none is in the user's code.
        detail: one sentence: what was measured that names the class.
        local_error: the cause op's own error (see `OpJudgement`), or None.
        bound: its bound, or None.
        carried_by: the ops after it that only carried the error (names, in order).
        evidence: the measurements behind ``detail`` (JSON-ready).
        fix: the fix plan tried on the user's values (a `tflab.fix.FixPlan`), or None.
    """

    function_name: str
    runs: str
    kind: str
    op_name: str = ""
    op_type: str = ""
    line: str = ""
    detail: str = ""
    local_error: float | None = None
    bound: float | None = None
    carried_by: tuple[str, ...] = ()
    evidence: dict = dataclasses.field(default_factory=dict)
    fix: Any = None
    config: dict = config_field()

    def __post_init__(self) -> None:
        if self.kind not in CAUSE_CLASSES:
            raise ValueError(f"Cause.kind must be one of {CAUSE_CLASSES}, got {self.kind!r}")

    @property
    def line_text(self) -> str:
        """``cause: KIND at OP_TYPE 'name' (file.py:LINE): DETAIL``: the one line every report prints."""
        where = ""
        if self.op_type or self.op_name:
            where = " at " + " ".join(p for p in (self.op_type, repr(self.op_name) if self.op_name else "") if p)
        if self.line:
            where += f" ({self.line})"
        return f"cause: {self.kind}{where}" + (f": {self.detail}" if self.detail else "")

    def summary_line(self) -> str:
        return self.line_text

    def to_text(self) -> str:
        lines = [self.line_text]
        if self.carried_by:
            lines.append("carried by: " + ", ".join(self.carried_by[:8]) + (" …" if len(self.carried_by) > 8 else ""))
        if self.fix is not None and hasattr(self.fix, "lines"):
            lines += self.fix.lines()
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True, repr=False)
class Attribution(Report):
    """Every op of the run under test judged on its own inputs, and the cause it names.

    Attributes:
        function_name: the function the runs are of.
        runs: ``"float32 vs float16"``.
        cause: the `Cause`, or None when no op was over its bound and no error grew.
        judgements: one `OpJudgement` per judged op, in creation order.
        unchecked: ``"TYPE 'name': why"`` for each float op that was not re-evaluated.
        ops_run: float ops of the run under test.
        seconds: wall seconds of the attribution (tracing both runs included).
        error: why the runs could not be traced or judged, or "".
        config: `tflab.runtime_config()`'s dict.
    """

    function_name: str
    runs: str
    cause: Cause | None
    judgements: tuple = ()
    unchecked: tuple = ()
    ops_run: int = 0
    seconds: float = 0.0
    error: str = ""
    config: dict = config_field()

    def summary_line(self) -> str:
        if self.error:
            return f"not attributed: {self.error}"
        return self.cause.line_text if self.cause else f"{self.ops_run} ops within their bounds"

    def to_text(self) -> str:
        lines = [f"{self.function_name} ({self.runs}): {self.ops_run} ops judged on their own inputs, "
                 f"{len(self.unchecked)} unchecked"]
        if self.error:
            lines.append(f"not attributed: {self.error}")
        elif self.cause is not None:
            lines.append(self.cause.to_text())
        else:
            lines.append("no op over its bound, and no op whose error grew past rounding")
        return "\n".join(lines)
