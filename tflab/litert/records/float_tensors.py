"""Lab step 8, the records of the float variant against TF: `TensorMatch` and `FloatTensors`.

`tflab.litert.float_tensors` measures them (`compare_float_tensors`).
"""

from __future__ import annotations

import dataclasses

from tflab.report.base import Report, config_field
from tflab.report.text import table

__all__ = ["TensorMatch", "FloatTensors"]


@dataclasses.dataclass(frozen=True)
class TensorMatch:
    """One float TFLite op output beside TF's tensor of the same name.

    Attributes:
        index: op index in its subgraph.
        op_type: builtin name.
        name: the TFLite tensor name (first part shown in text).
        tf_name: the TF tensor it matched, ``node:0``.
        max_abs_error: ``max |lite − tf|`` over all elements and examples.
        tf_max: ``max |tf|`` over the same elements (the scale of the tensor).
    """

    index: int
    op_type: str
    name: str
    tf_name: str
    max_abs_error: float
    tf_max: float

    @property
    def relative(self) -> float:
        """``max_abs_error / tf_max`` (0 when the tensor is all zeros and equal)."""
        return self.max_abs_error / self.tf_max if self.tf_max else float(self.max_abs_error > 0)


@dataclasses.dataclass(frozen=True, repr=False)
class FloatTensors(Report):
    """The float variant's intermediates vs TF's, by name (a measurement; the per-op check is the verdict).

    Attributes:
        signature: the signature key compared.
        matched: one `TensorMatch` per op output that found its TF tensor, in op order.
        unmatched: ops whose output name names no TF node (or with another shape), by op type.
        config: `tflab.runtime_config()` as a dict.
    """

    signature: str
    matched: tuple[TensorMatch, ...]
    unmatched: dict[str, int]
    config: dict = config_field()

    @property
    def worst(self) -> TensorMatch | None:
        return max(self.matched, key=lambda m: m.relative, default=None)

    DICT_PROPERTIES = ("worst",)

    def summary_line(self) -> str:
        w = self.worst
        un = sum(self.unmatched.values())
        text = (f"{len(self.matched)} float tensors matched TF's (signature outputs by SignatureDef name, the "
                f"others by op name; {un} unmatched)")
        if w is not None:
            text += (f"; largest |Δ| {w.max_abs_error:.3g} ({w.relative:.2g} of max|tf|) at {w.op_type} "
                     f"#{w.index} {w.name.split(';')[0]}")
        return text

    def to_text(self) -> str:
        lines = [f"  TF tensors: {self.summary_line()}"]
        ranked = sorted(self.matched, key=lambda m: -m.relative)[:6]
        if ranked:
            lines.append(table([(f"#{m.index}", m.op_type, f"{m.max_abs_error:.3g}", f"{m.relative:.2g}",
                                 m.tf_name) for m in ranked],
                               header=("op", "type", "max|Δ|", "of max|tf|", "TF tensor"), indent="    "))
        if self.unmatched:
            lines.append("    unmatched: " + ", ".join(f"{k}×{v}" for k, v in sorted(self.unmatched.items())))
        return "\n".join(lines)
