"""Lab step 8, the records of a quantized variant's whole-model effect: `RangeUse`, `WholeModelEffect`.

`tflab.litert.whole_model` measures them: how far the variant moved the model's outputs in the terms
a user reads (top-1 agreement with the float model, max|Δ| as a share of TF's output range), whether
that crosses the thresholds past which the variant's outputs are no longer the model's, and which
quantized tensor's range is set by outliers.
"""

from __future__ import annotations

import dataclasses

__all__ = ["RangeUse", "WholeModelEffect"]


@dataclasses.dataclass(frozen=True)
class RangeUse:
    """How much of one quantized tensor's integer range its values use.

    Attributes:
        name: the tensor's name in the flatbuffer.
        op_type: the op writing it (an activation) or the first op reading it (a weight).
        index: that op's index in its subgraph.
        role: ``"activation"`` (an op output: LiteRT's values on the examples), ``"input"`` (a signature
            input: the float examples, which were the calibration data) or ``"weight"`` (a constant:
            the float model's values where it has the same tensor, else the stored ones).
        range_used: the 99.9th percentile of the values' magnitudes (``bulk_max``) over the farthest
            value the integer grid reaches from zero (``largest``); for a per-channel weight the median
            channel's. A range set by outliers leaves the other values a small share of it.
        bulk_max: that 99.9th percentile (``lower`` interpolation, so a lone outlier among fewer than
            1000 values is left out), the tensor's units.
        largest: the farthest value from zero the grid holds (``max(|qmin − z|, |qmax − z|)·s``),
            same units.
        clipped: the share of the values outside the grid's range ``[(qmin − z)·s, (qmax − z)·s]``
            (by more than half a step): what LiteRT clips and TF does not. For an input, examples
            unlike the calibration data.
        low, high: that range, the tensor's units (per-channel: the first channel's).
    """

    name: str
    op_type: str
    index: int
    role: str
    range_used: float
    bulk_max: float
    largest: float
    clipped: float = 0.0
    low: float = 0.0
    high: float = 0.0

    @property
    def clip_text(self) -> str:
        """The clipping, in words: ``input 'x' (CONV_2D #0): 67% of its values lie outside [0, 1] …``."""
        return (f"{self.role} {self.name.split(';')[0]!r} ({self.op_type} #{self.index}): {self.clipped:.1%} of its "
                f"values lie outside [{self.low:.4g}, {self.high:.4g}], the range its int8 grid holds, and LiteRT "
                f"clips them where TF does not")

    @property
    def text(self) -> str:
        return (f"{self.role} {self.name.split(';')[0]!r} ({self.op_type} #{self.index}) is set by outliers: "
                f"99.9% of its values have |x| ≤ {self.bulk_max:.3g}, {self.range_used:.1%} of the {self.largest:.3g} "
                f"its int8 range reaches")


@dataclasses.dataclass(frozen=True)
class WholeModelEffect:
    """One output of a quantized variant against TF, in users' terms, judged against stated thresholds.

    Attributes:
        output: the output key.
        top1_agreement: the share of rows where LiteRT's one top class is TF's (ties are not
            agreement; rows with NaN in TF, or where TF ties its top classes, are left out), None for
            outputs that are not class scores (rank < 2 or one column) or with no such row.
        decisive_rows: rows where TF's top class leads its second by more than one step of the
            output's quantization (a smaller lead one rounding may undo); reported, not left out.
        rows: the rows judged (TF finite, one top class).
        range_share: ``max|lite − tf| / (max − min of TF's output)``, None when TF's output is constant.
        min_top1_agreement: the threshold on ``top1_agreement`` (`tflab.litert.whole_model.MIN_TOP1_AGREEMENT`).
        max_range_share: the threshold on ``range_share`` (`tflab.litert.whole_model.MAX_RANGE_SHARE`).
        not_judged: why neither threshold applies, or "" (TF's own output is flat at int8's
            resolution: `tflab.litert.whole_model.output_effect`).
    """

    output: str
    top1_agreement: float | None
    decisive_rows: int
    rows: int
    range_share: float | None
    min_top1_agreement: float
    max_range_share: float
    not_judged: str = ""

    @property
    def crossed(self) -> bool:
        """True when the variant's outputs are no longer the model's: top-1 agreement below its threshold
        for an output of class scores (rows judged), else max|Δ| past its share of TF's range."""
        return not self.not_judged and (self._low or self._far)

    @property
    def _judged_by_class(self) -> bool:
        return self.top1_agreement is not None and self.rows > 0

    @property
    def _low(self) -> bool:
        return self._judged_by_class and self.top1_agreement < self.min_top1_agreement

    @property
    def _far(self) -> bool:
        # An output of class scores is judged by its class (top-1): its max|Δ| is set by one worst element
        # whatever class each row keeps, and sits at the threshold's edge on a healthy classifier (the tour
        # model's int8 softmax: 100% top-1, max|Δ| 0.1 of a 0.4 range). The range share judges the rest.
        return (not self._judged_by_class and self.range_share is not None
                and self.range_share > self.max_range_share)

    @property
    def text(self) -> str:
        if self.not_judged:
            return f"{self.output}: not judged: {self.not_judged}"
        bits = []
        low, far = self._low, self._far
        if self.top1_agreement is not None:
            bits.append(f"top-1 agreement {self.top1_agreement:.0%} of {self.rows} rows (threshold "
                        f"{self.min_top1_agreement:.0%}; TF leads by more than an output step on {self.decisive_rows})"
                        + (" CROSSED" if low else ""))
        if self.range_share is not None:
            bits.append(f"max|Δ| {self.range_share:.1%} of TF's range (threshold {self.max_range_share:.0%})"
                        + (" CROSSED" if far else ""))
        return f"{self.output}: " + ", ".join(bits)
