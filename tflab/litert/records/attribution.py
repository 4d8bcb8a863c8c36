"""Lab step 8, the records of the output-error attribution: `OpShare`, `KeptFloat`, `Attribution`.

`tflab.litert.attribution` measures them (QuantizationDebugger, the kept-float re-conversion).
"""

from __future__ import annotations

import dataclasses

from tflab.report.base import Report, config_field
from tflab.report.text import table

__all__ = ["OpShare", "KeptFloat", "Attribution", "TOP", "KEEP_SHARE", "MIN_DROP"]


@dataclasses.dataclass(frozen=True, repr=False)
class OpShare(Report):
    """One op's part in the output error of a quantized variant.

    Attributes:
        index: op index in its subgraph (as in `tflab.litert.per_op.OpCheck`).
        op_type: builtin name, e.g. ``"CONV_2D"``.
        name: the op's first output tensor name (the converter's).
        signature: the signature key whose subgraph holds it.
        share: ``r_i² / Σ r_j²``, the op's fraction of the predicted output error power, in [0, 1].
        local_error: ``r_i``, the op's own relative RMS error on its own inputs (per-op check).
        drift: relative RMS distance of the op's output, through the whole quantized model, from
            the float model's same tensor (None when the op has no float partner).
        tf_name: the TF graph node its name maps to (None when no part of the name is a TF node).
        debugger_mse: QuantizationDebugger's ``mean_squared_error`` of this op (int8 only, else None).
        debugger_scale: the output scale QuantizationDebugger reports for it (else None).
        mse: our own local mean squared error, output units (``rms_error²`` of the per-op check).
    """

    index: int
    op_type: str
    name: str
    signature: str
    share: float
    local_error: float
    drift: float | None = None
    tf_name: str | None = None
    debugger_mse: float | None = None
    debugger_scale: float | None = None
    mse: float | None = None

    @property
    def short_name(self) -> str:
        return self.name.split(";")[0]

    def summary_line(self) -> str:
        return f"{self.op_type} #{self.index} {self.short_name}: {self.share:.0%} of the output error"

    def to_text(self) -> str:
        return self.summary_line()


TOP = 3  # ops named in the one-line summary
# Ops kept in float by the fix: the fewest of the worst ones that hold this much of the share (at most TOP).
KEEP_SHARE = 0.5
# The kept-float re-conversion is the fix only when it cuts the output error by at least this much.
MIN_DROP = 0.10


@dataclasses.dataclass(frozen=True, repr=False)
class KeptFloat(Report):
    """The measured fix: the same recipe re-quantized with the worst ops kept in float.

    Attributes:
        kept: output tensor names of the ops kept in float (``denylisted_nodes``).
        error_before: relative RMS output error vs TF of the debugger's model without a denylist.
        error_after: the same, with ``kept`` in float.
        size_before: bytes of the model without a denylist.
        size_after: bytes with ``kept`` in float.
        how: what made the models.
        model: the fixed flatbuffer (not in ``to_dict``).
    """

    kept: tuple[str, ...]
    error_before: float
    error_after: float
    size_before: int
    size_after: int
    how: str = "tf.lite.experimental.QuantizationDebugger, QuantizationDebugOptions(denylisted_nodes=kept)"
    model: bytes = dataclasses.field(default=b"", compare=False, metadata={"dict": False})

    DICT_PROPERTIES = ("error_change", "size_change", "fix")

    @property
    def error_change(self) -> float:
        """``error_after / error_before − 1`` (−0.55: the error fell by 55%)."""
        return self.error_after / self.error_before - 1.0 if self.error_before else 0.0

    @property
    def size_change(self) -> float:
        """``size_after / size_before − 1`` (0.04: 4% larger)."""
        return self.size_after / self.size_before - 1.0 if self.size_before else 0.0

    @property
    def fix(self):
        """This re-conversion as a `tflab.fix.Fix` (kind "converter"): checked when it cut the output
        error by at least `MIN_DROP`, else failed (it is then never printed as the fix)."""
        from tflab.fix import attempt

        def check():
            worked = self.error_before > 0 and self.error_after <= (1.0 - MIN_DROP) * self.error_before
            result = (f"output error {self.error_before:.3g} -> {self.error_after:.3g} ({self.error_change:+.0%}), "
                      f"size {self.size_before} -> {self.size_after} bytes ({self.size_change:+.0%})")
            if not worked:
                result += f": less than the {MIN_DROP:.0%} drop that would make it worth the float ops"
            return worked, result, {"error_before": self.error_before, "error_after": self.error_after,
                                    "size_before": self.size_before, "size_after": self.size_after}

        names = [n.split(";")[0] for n in self.kept]
        return attempt("converter", f"QuantizationDebugOptions(fully_quantize=True, denylisted_nodes={names})",
                       "keep the ops with the largest share of the output error in float", check,
                       how="re-quantized with tf.lite.experimental.QuantizationDebugger on your examples and "
                           "measured against TF")

    def summary_line(self) -> str:
        if self.fix.failed:
            return f"kept float did not help ({self.error_change:+.0%} error, {self.size_change:+.0%} size)"
        return f"kept float: {self.error_change:+.0%} error, {self.size_change:+.0%} size"

    def to_text(self) -> str:
        from tflab.fix import first_working

        return " ".join(first_working([self.fix]).lines()) + f" (by {self.how})"


@dataclasses.dataclass(frozen=True, repr=False)
class Attribution(Report):
    """The output error of one quantized variant, attributed to its ops.

    Attributes:
        quantization: ``"dynamic"``, ``"float16"`` or ``"int8"``.
        shares: every checked op with a non-zero share, largest first.
        output_error: measured relative RMS error of the outputs vs TF (root mean square over
            outputs of ``‖lite − tf‖ / ‖tf‖``), on the examples, builtin kernels.
        predicted_error: ``sqrt(Σ r_i²)``, what the per-op noise predicts for it.
        tf_matched: ops whose output name maps to a TF graph node.
        tf_unmatched: ops whose name maps to none (e.g. a QUANTIZE the converter added).
        kept_float: the measured fix (int8), else None.
        notes: why there is no fix, where the debugger's numbers differ, ...
        config: `tflab.runtime_config()` as a dict.
    """

    quantization: str
    shares: tuple[OpShare, ...]
    output_error: float
    predicted_error: float
    tf_matched: int
    tf_unmatched: int
    kept_float: KeptFloat | None = None
    notes: tuple[str, ...] = ()
    config: dict = config_field()

    @property
    def top(self) -> tuple[OpShare, ...]:
        return self.shares[:TOP]

    def summary_line(self) -> str:
        if not self.shares:
            return "no op adds error"
        top = self.top
        first = top[0]
        rest = "".join(f" and #{s.index}" for s in top[1:])
        text = (f"{sum(s.share for s in top):.0%} of the output error from {first.op_type} #{first.index} "
                f"{first.short_name}{rest}")
        if self.kept_float is not None:
            text += f"; {self.kept_float.summary_line()}"
        return text

    def to_text(self) -> str:
        lines = [f"  attribution: {self.summary_line()}",
                 f"    output error (relative RMS vs TF) {self.output_error:.3g}, predicted from the ops' own "
                 f"noise {self.predicted_error:.3g}; TFLite tensors named after a TF node: {self.tf_matched}, "
                 f"not: {self.tf_unmatched}"]
        rows = [(f"#{s.index}", s.op_type, f"{s.share:.0%}", f"{s.local_error:.3g}",
                 "-" if s.drift is None else f"{s.drift:.3g}", "-" if s.mse is None else f"{s.mse:.3g}",
                 "-" if s.debugger_mse is None else f"{s.debugger_mse:.3g}",
                 "-" if s.debugger_scale is None else f"{s.debugger_scale:.3g}", s.short_name)
                for s in self.shares[:8]]
        if rows:
            lines.append(table(rows, header=("op", "type", "share", "own rel err", "drift", "our MSE",
                                             "debugger MSE", "scale", "tensor"), indent="    "))
        if self.kept_float is not None:
            lines.append(f"    {self.kept_float.to_text()}")
        lines += [f"    note: {n}" for n in self.notes]
        return "\n".join(lines)
