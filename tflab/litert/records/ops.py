"""Lab step 8, the records of the per-op check: `OpCheck` (one op) and `PerOpCheck` (every op).

`tflab.litert.per_op` measures them (each op against a float64 reference on its actual inputs).
"""

from __future__ import annotations

import dataclasses

from tflab.report.base import Report, config_field
from tflab.report.text import table

__all__ = ["OpCheck", "PerOpCheck", "ILL_CONDITIONED"]


@dataclasses.dataclass(frozen=True, repr=False)
class OpCheck(Report):
    """One op of a TFLite variant against its float reference.

    Attributes:
        index: op index in the checked subgraph (execution order).
        op_type: builtin name, e.g. ``"CONV_2D"``.
        name: the op's first output tensor name (the converter's, e.g. ``"model/conv2d_5/BiasAdd"``).
        worst_abs_error: ``|lite − reference|`` at the element with the largest ``|Δ|/bound``, output
            units (as `tflab.litert.records.OutputError.worst_abs_error`).
        bound: the local bound at that same element (so ``worst_abs_error / bound == ratio``).
        ratio: the largest ``|Δ|/bound`` over the op's output elements and all examples.
        max_abs_error: the largest ``|lite − reference|`` anywhere in the output (may be another element).
        verdict: ``"ok"``, ``"OUTSIDE"`` (some element beyond its bound) or ``"unchecked"``.
        reason: why unchecked, else "".
        float_index: index of the matching op in the float model (None when unmatched).
        weights: names of the float model's constants used as this op's weights.
        signature: the signature key whose subgraph holds the op.
        condition: ``max|y| / max Σ|x||w|`` over the op's output (None for ops without such
            terms): much below 1 means the output cancels, so any float32 evaluation of it,
            TF's own included, carries rounding noise of about ``γ_K·Σ|x||w|``.
        noise: that noise, ``γ_K·max Σ|x||w|``, output units (None with ``condition``).
        rms_error: root mean square of ``lite − reference`` over the output's finite elements and
            all examples, output units: the op's own (local) error power (None when unchecked).
        rms_reference: root mean square of the reference output, same elements (None when unchecked).
    """

    index: int
    op_type: str
    name: str
    worst_abs_error: float = 0.0
    bound: float = 0.0
    ratio: float = 0.0
    max_abs_error: float = 0.0
    verdict: str = "unchecked"
    reason: str = ""
    float_index: int | None = None
    weights: tuple[str, ...] = ()
    signature: str = ""
    condition: float | None = None
    noise: float | None = None
    rms_error: float | None = None
    rms_reference: float | None = None

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def summary_line(self) -> str:
        if self.verdict == "unchecked":
            return f"#{self.index} {self.op_type} {self.name!r} unchecked: {self.reason}"
        return (f"#{self.index} {self.op_type} {self.name!r} |Δ| {self.worst_abs_error:.3g} bound {self.bound:.3g} "
                f"(ratio {self.ratio:.3g}, same element) {self.verdict}")

    def to_text(self) -> str:
        return self.summary_line()


# An op output below this fraction of Σ|x||w| is cancellation (float32 keeps ~24 bits; 2**-10 leaves 14).
ILL_CONDITIONED = 2.0 ** -10


@dataclasses.dataclass(frozen=True, repr=False)
class PerOpCheck(Report):
    """All ops of one variant checked on their own inputs.

    Attributes:
        ops: one `OpCheck` per op, signature by signature, in execution order.
        unchecked: op type → how many ops of that type have no verdict.
        matched: ops paired with an op of the float model.
        unmatched: ops (QUANTIZE/DEQUANTIZE aside) the alignment left without a float partner.
        named_alike: of the matched pairs, how many have the same first output tensor name.
        runtime: what ran the per-op pass (builtin kernels, every tensor preserved).
        seconds: wall time of the per-op pass.
        notes: conditioning, said plainly: cancelling ops (`conditioning_note`) and
            discontinuous ops (FLOOR_MOD, FLOOR, ROUND, ...) fed by a quantized tensor.
        config: `tflab.runtime_config()` as a dict.
    """

    ops: tuple[OpCheck, ...]
    unchecked: dict[str, int]
    matched: int
    unmatched: int
    named_alike: int
    runtime: str
    seconds: float
    notes: tuple[str, ...] = ()
    config: dict = config_field()

    @property
    def checked(self) -> int:
        return sum(1 for o in self.ops if o.verdict != "unchecked")

    @property
    def outside(self) -> tuple[OpCheck, ...]:
        return tuple(o for o in self.ops if o.verdict == "OUTSIDE")

    @property
    def ill_conditioned(self) -> tuple[OpCheck, ...]:
        """Checked ops whose output is under `ILL_CONDITIONED` of the magnitude of its terms."""
        return tuple(o for o in self.ops if o.verdict != "unchecked" and o.condition is not None
                     and o.condition < ILL_CONDITIONED)

    @property
    def conditioning_note(self) -> str:
        """A sentence naming the cancelling ops, or "" (the verdict does not depend on it)."""
        ops = sorted(self.ill_conditioned, key=lambda o: o.condition)
        if not ops:
            return ""
        o = ops[0]
        more = f" (and {len(ops) - 1} more op(s))" if len(ops) > 1 else ""
        return (f"output is ill-conditioned here: {o.op_type} #{o.index} {o.name.split(';')[0]} gives values "
                f"{o.condition:.2g} of the size of the terms it sums{more}, so float32 itself, in TF as in "
                f"LiteRT, carries about {o.noise:.2g} of rounding noise there; judge this model by the "
                f"per-op verdict, not by the end-to-end error")

    @property
    def ok(self) -> bool:
        """Every checked op inside its bound (and at least one op checked)."""
        return self.checked > 0 and not self.outside

    def summary_line(self) -> str:
        un = ", ".join(f"{k}×{v}" if v > 1 else k for k, v in sorted(self.unchecked.items()))
        worst = max((o for o in self.ops if o.verdict != "unchecked"), key=lambda o: o.ratio, default=None)
        text = (f"{self.checked} ops checked, {len(self.outside)} outside their bound"
                + (f" ({sum(self.unchecked.values())} unchecked: {un})" if un else ""))
        if not self.checked and self.unchecked:
            text += "; no op has a reference here, so the end-to-end bound is the verdict"
        if self.outside:
            text += "; outside: " + ", ".join(f"{o.op_type} #{o.index} {o.name.split(';')[0]} "
                                              f"(ratio {o.ratio:.3g})" for o in self.outside[:3])
        elif worst is not None:
            text += f"; worst {worst.op_type} #{worst.index} at {worst.ratio:.2g} of its bound"
        return text

    def to_text(self, limit: int = 12) -> str:
        lines = [f"  per-op: {self.summary_line()}",
                 f"    matched to the float model: {self.matched} ops ({self.named_alike} with the same output "
                 f"name), {self.unmatched} unmatched; run: {self.runtime}",
                 "    |Δ| and bound are at the same element (the op's worst |Δ|/bound); max|Δ| is the op's "
                 "largest error anywhere"]
        lines += [f"    {n}" for n in self.notes]
        ranked = sorted((o for o in self.ops if o.verdict != "unchecked"), key=lambda o: -o.ratio)[:limit]
        if ranked:
            lines.append(table([(f"#{o.index}", o.op_type, f"{o.worst_abs_error:.3g}", f"{o.bound:.3g}",
                                 f"{o.ratio:.3g}", f"{o.max_abs_error:.3g}", o.verdict, o.name.split(";")[0])
                                for o in ranked],
                               header=("op", "type", "|Δ|", "bound", "ratio", "max|Δ|", "verdict", "tensor"),
                               indent="    "))
        return "\n".join(lines)

    @property
    def node_data(self) -> dict:
        """The per-op ``|Δ|/bound`` as Model Explorer node data, keyed by each op's output tensor name.

        The layout of ``model_explorer.node_data_builder.ModelNodeData`` (package
        ``ai-edge-model-explorer``): ``{graph id: {"results": {tensor name: {"value": ratio}},
        "thresholds": [...]}}``, one graph per signature key. Ratios above 1 are the ops
        outside their bound (red); unchecked ops are left out. Load the file in Model
        Explorer's "node data" panel next to the .tflite to see the hot ops on the graph.

        Returns:
            A JSON-ready dict.
        """
        graphs: dict[str, dict] = {}
        for o in self.ops:
            if o.verdict == "unchecked" or not o.name:
                continue
            g = graphs.setdefault(o.signature or "main", {
                "results": {},
                "thresholds": [{"value": 0.5, "bgColor": "#c8e6c9"}, {"value": 1.0, "bgColor": "#fff59d"},
                               {"value": float("1e300"), "bgColor": "#ef9a9a"}]})
            g["results"][o.name] = {"value": round(o.ratio, 6)}
        return graphs

    DICT_PROPERTIES = ("checked", "ok")

    def to_dict(self) -> dict:
        return super().to_dict() | {"outside": len(self.outside), "seconds": round(self.seconds, 3)}
