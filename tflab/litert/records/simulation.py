"""Lab step 8, the record of the end-to-end check of a quantized variant: `SimulatedTensor`, `Simulation`.

`tflab.litert.simulate.simulation_check` measures them: LiteRT's tensors against the float
model run with the variant's own quantization simulated.
"""

from __future__ import annotations

import dataclasses

from tflab.report.base import Report, config_field
from tflab.report.text import table

__all__ = ["SimulatedTensor", "Simulation"]


@dataclasses.dataclass(frozen=True)
class SimulatedTensor:
    """One op output of the quantized variant: LiteRT against the simulation.

    Attributes:
        index: op index in its subgraph (execution order).
        op_type: builtin name.
        name: the tensor's name in the flatbuffer.
        signature: the signature key.
        max_abs_error: ``max |lite − simulated|`` over all elements and examples, the tensor's units.
        bound: the bound at that worst ratio: `tflab.litert.simulate.DITHER_MARGIN` × the largest
            move of the dithered runs + `tflab.litert.simulate.OUTPUT_STEPS` steps of the tensor's scale
            (+ float32 noise), same units.
        bound_ratio: the largest ``max|Δ| / bound`` over the examples; > 1 is a failure.
        step: the tensor's quantization step (its largest scale; 0 for a float tensor).
        output: True for a signature output.
    """

    index: int
    op_type: str
    name: str
    signature: str
    max_abs_error: float
    bound: float
    bound_ratio: float
    step: float
    output: bool = False

    @property
    def within_bound(self) -> bool:
        return self.bound_ratio <= 1.0


@dataclasses.dataclass(frozen=True, repr=False)
class Simulation(Report):
    """LiteRT against the float model with this variant's quantization simulated (`tflab.litert.simulate`).

    Attributes:
        quantization: the variant's recipe.
        tensors: one `SimulatedTensor` per op output compared, in op order per signature.
        carried: ops with no reference, whose LiteRT output the simulation carried on as is
            (``"TYPE #index"``).
        seconds: wall time of the simulation runs.
        ranges: how much of its integer range each quantized op output uses on the examples
            (`tflab.litert.records.whole_model.RangeUse`, from LiteRT's values), in op order.
        config: `tflab.runtime_config()` as a dict.
    """

    quantization: str
    tensors: tuple[SimulatedTensor, ...]
    carried: tuple[str, ...] = ()
    seconds: float = 0.0
    ranges: tuple = ()
    config: dict = config_field()

    DICT_PROPERTIES = ("ok", "first_outside")

    @property
    def ok(self) -> bool | None:
        """Every compared tensor within its bound (None when nothing was compared)."""
        return None if not self.tensors else all(t.within_bound for t in self.tensors)

    @property
    def first_outside(self) -> SimulatedTensor | None:
        """The first tensor, in execution order, beyond its bound: where LiteRT left the simulation."""
        return next((t for t in self.tensors if not t.within_bound), None)

    @property
    def outputs(self) -> tuple[SimulatedTensor, ...]:
        return tuple(t for t in self.tensors if t.output)

    def summary_line(self) -> str:
        first = self.first_outside
        outs = ", ".join(f"{t.name.split(';')[0]} {t.bound_ratio:.2g}" for t in self.outputs)
        head = (f"end to end against the simulated {self.quantization} model: {len(self.tensors)} tensors, "
                f"{sum(not t.within_bound for t in self.tensors)} beyond their bound")
        if first is not None:
            head += (f"; first at {first.op_type} #{first.index} {first.name.split(';')[0]!r}: |Δ| "
                     f"{first.max_abs_error:.3g} = {first.bound_ratio:.2g}× its bound {first.bound:.3g}")
        return head + (f"; outputs at {outs} of their bound" if outs else "")

    def to_text(self) -> str:
        lines = [f"  simulation: {self.summary_line()}"]
        ranked = sorted(self.tensors, key=lambda t: -t.bound_ratio)[:5]
        if ranked and not self.ok:
            lines.append(table([(f"#{t.index}", t.op_type, f"{t.max_abs_error:.3g}", f"{t.bound:.3g}",
                                 f"{t.bound_ratio:.2g}", t.name.split(";")[0]) for t in ranked],
                               header=("op", "type", "max|Δ|", "bound", "ratio", "tensor"), indent="    "))
        if self.carried:
            lines.append("    not simulated (LiteRT's output carried): " + ", ".join(self.carried[:8])
                         + (f" … ({len(self.carried)})" if len(self.carried) > 8 else ""))
        return "\n".join(lines)
