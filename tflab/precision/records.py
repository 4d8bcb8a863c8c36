"""The records `tflab.compare_precisions` returns: `PolicyResult` per policy, `PrecisionComparison`;
and `tflab.demonstrate_loss_scaling`'s `LossScalingRow` and `LossScalingDemo`.

`PrecisionComparison` follows the report convention of `tflab.report.base`
(``function_name``, ``config`` filled once, data as fields and properties,
``to_text()`` with `tflab.report.text.table`, ``to_dict()``, a one-line ``repr``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tflab.precision.policy import REFERENCE
from tflab.report.base import Report, config_field
from tflab.report.text import table
from tflab.precision.float_formats import float_info, pow2_text
from tflab.report.html.dispatch import renders
from tflab.report.html.lab import precision_notebook_fragment

# Cause classes that flag a policy (its values left the dtype's range), even with finite outputs.
RANGE_CAUSES = ("constant", "overflow", "underflow", "domain")

__all__ = ["RANGE_CAUSES", "PolicyResult", "PrecisionComparison", "LossScalingRow", "LossScalingDemo", "fmt_err", "fmt_scale"]


def fmt_err(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return "0" if x == 0 else f"{x:.2g}"


def fmt_scale(s: float | None) -> str:
    return "-" if s is None else pow2_text(s)


@dataclasses.dataclass(frozen=True, repr=False)
class PolicyResult:
    """One policy's forward and backward pass, measured against float32.

    Attributes:
        policy: the Keras policy name (``"mixed_float16"``, …).
        compute_dtype: the dtype the arithmetic ran in.
        variable_dtype: the dtype of the variables (float32 in the ``mixed_*`` policies).
        outputs: output name → float32 numpy array (cast back from the compute dtype).
        gradients: gradient name (``"arg:x"``, ``"var:dense/kernel"``) → float32 numpy
            array, divided back by the loss scale in float32; None where not connected.
        output_error: the maximum relative error |p - r| / |r| against float32 over the
            output elements whose float32 magnitude |r| is at least the compute dtype's
            ``smallest_normal`` (inf where the policy gave inf/NaN there); None
            when no element was measured (``output_error_elements`` 0 or None):
            nothing measured is not "no error".
        gradient_error: the same over the gradient elements (None likewise).
        gradient_error_median: the median of those relative errors (the maximum is often
            one nearly-cancelled element); None likewise.
        underflow: gradient name → number of elements non-zero in float32 and 0 here
            (only names with some).
        underflow_below_normal: of those, the elements whose float32 magnitude is below the
            compute dtype's ``smallest_normal``: lost to range, which a loss scale fixes;
            the rest were lost to rounding (a sum that cancels to exactly 0).
        overflow: output or gradient name → number of elements inf/NaN here and finite in
            float32 (only names with some).
        loss_scale: the loss scale the gradients were taken with (the last one for dynamic
            scaling); None when none was applied.
        loss_scale_history: every scale tried, in order (dynamic: 2^15, 2^14, … until the
            gradients were finite or the scale reached 1).
        seconds: forward plus backward pass(es), loss-scale retries included; wall seconds.
        unscaled: for a loss-scaled run, the same forward pass's gradients without
            scaling (a `PolicyResult`), else None.
        nonzero_gradient_elements: gradient elements non-zero in float32 (the underflow
            denominator).
        output_error_elements: how many output elements ``output_error`` was measured
            over (|float32 value| >= smallest normal); 0 means every non-zero float32
            value is below that, so it measured nothing, and the tables print
            ``n/a``, not 0. None when there is no non-zero float value at all
            (integer outputs; tables print ``-``).
        gradient_error_elements: the same for ``gradient_error``.
        gradient_error_floor: the float32 magnitude from which gradient elements are
            measured: the compute dtype's smallest normal, or for a loss-scaled run its
            smallest subnormal divided by the scale (the scaled gradient g·S is what
            the compute dtype holds).
        nonfinite: for outputs that overflowed, the first non-finite op of this
            policy's traced graph (`tflab.nonfinite.FirstNonFinite`), else None.
        fix: for outputs that overflowed, the candidate fixes applied to this case
            and measured (`tflab.fix.FixPlan`; its ``fix`` is the first that worked).
        loss_scale_fix: for float16 gradients zeroed below its range without a loss
            scale, loss_scale='dynamic' run on the same backward pass (a `FixPlan`),
            tried only when the cause is an underflow (or none was named).
        cause: when this policy and float32 disagree, the root cause measured by
            `tflab.attribution` (a `tflab.attribution.Cause`: class, op, user's
            line, what was measured), else None.
        attribution: the `tflab.attribution.engine.Attribution` behind ``cause``
            (every op judged on its own inputs), or None.
        reference_noise_elements: float32 gradient elements left out because they
            are below float32's own noise floor (their distance to a float64 run
            is half their value or more; `tflab.precision.causes`); None when that
            floor was not measured (nothing was zeroed, or the float64 run failed).
    """

    policy: str
    compute_dtype: str
    variable_dtype: str
    outputs: dict
    gradients: dict
    output_error: float | None
    gradient_error: float | None
    gradient_error_median: float | None
    underflow: dict
    underflow_below_normal: dict
    overflow: dict
    loss_scale: float | None
    loss_scale_history: tuple
    seconds: float
    nonzero_gradient_elements: int
    unscaled: "PolicyResult | None" = None
    output_error_elements: int | None = None
    gradient_error_elements: int | None = None
    gradient_error_floor: float | None = None
    nonfinite: Any = None
    fix: Any = None
    loss_scale_fix: Any = None
    cause: Any = None
    attribution: Any = None
    reference_noise_elements: int | None = None
    _nonzero_by_name: dict = dataclasses.field(default_factory=dict)

    def _err_text(self, which: str) -> str:
        """``output_error``/``gradient_error`` as a table cell: ``n/a`` when no element was measured."""
        n = getattr(self, f"{which}_error_elements")
        return "n/a" if n == 0 else "-" if n is None else fmt_err(getattr(self, f"{which}_error"))

    @property
    def underflow_count(self) -> int:
        return sum(self.underflow.values())

    @property
    def overflow_count(self) -> int:
        return sum(self.overflow.values())

    @property
    def underflow_fraction(self) -> float:
        """underflow_count / nonzero_gradient_elements (0 when there are none)."""
        return self.underflow_count / self.nonzero_gradient_elements if self.nonzero_gradient_elements else 0.0

    @property
    def verdict(self) -> str:
        """One line: what underflowed or overflowed, and what the loss scale changed."""
        if self.policy == REFERENCE:
            return "reference"
        dt = self.compute_dtype
        parts = []
        base = self.unscaled if self.unscaled is not None else self
        below_all = sum(base.underflow_below_normal.values())
        if base.underflow:
            # "underflows" only for elements whose float32 value is below the dtype's range
            verb = "underflows" if below_all == base.underflow_count else "zeroes"
            parts.append(f"{dt} {verb} {self._where(base)}"
                         + (f" ({below_all} of them below {dt}'s smallest normal)" if verb == "zeroes" and below_all
                            else ""))
            if self.unscaled is not None:
                rescued = base.underflow_count - self.underflow_count
                scale = f"loss scale {pow2_text(self.loss_scale)}"
                parts.append(f"{scale} rescues them" if not self.underflow else
                             f"{scale} rescues {max(rescued, 0)} ({self.underflow_count} left)")
            elif self.loss_scale_fix is not None:
                parts += self.loss_scale_fix.lines()
            lost = self.underflow_count - sum(self.underflow_below_normal.values())
            if self.underflow and lost and self.cause is None:
                parts.append(f"{lost} of the {self.underflow_count} zeroed are >= {dt}'s smallest "
                             "normal in float32: not lost to range")
        if self.overflow:
            out = sum(v for k, v in self.overflow.items() if k in self.outputs)
            grad = self.overflow_count - out
            what = " and ".join(s for s in (f"{out} output" if out else "",
                                            f"{grad} gradient" if grad else "") if s)
            parts.append(f"{dt} overflows {what} element(s) to inf/NaN (float32 finite; "
                         f"{dt} max {float_info(dt).max:.6g})")
            if self.nonfinite is not None and self.nonfinite.cause_text:
                parts.append(self.nonfinite.cause_text)
            elif self.nonfinite is not None and self.nonfinite.error:
                parts.append(f"first non-finite op not found: {self.nonfinite.error}")
            if self.fix is not None and self.nonfinite is not None:
                parts += self.fix.lines()
        if self.cause is not None:
            parts.append(self.cause.line_text)
        if self.fix is not None and not (self.overflow and self.nonfinite is not None):
            parts += self.fix.lines()  # the fix of the cause (an overflow's fix is printed with it above)
        if self.reference_noise_elements:
            parts.append(f"{self.reference_noise_elements} float32 gradient element(s) below float32's own "
                         "noise floor (vs float64) not counted")
        if len(self.loss_scale_history) > 1:
            parts.append(f"dynamic loss scale halved {len(self.loss_scale_history) - 1}× to "
                         f"{pow2_text(self.loss_scale)} on inf/NaN gradients")
        return "; ".join(parts) or "no underflow or overflow"

    def _where(self, r: "PolicyResult") -> str:
        worst = max(r.underflow, key=r.underflow.get)
        name = worst.split(":", 1)[-1]
        if len(r.underflow) == 1:
            return f"{r.underflow[worst]}/{r._nonzero_by_name.get(worst, '?')} gradient elements of {name}"
        return (f"{r.underflow_count}/{r.nonzero_gradient_elements} gradient elements in "
                f"{len(r.underflow)} tensors (most in {name}: {r.underflow[worst]}/"
                f"{r._nonzero_by_name.get(worst, '?')})")

    def __repr__(self) -> str:
        return (f"<{self.policy}: output_error={fmt_err(self.output_error)} "
                f"gradient_error={fmt_err(self.gradient_error)} underflow={self.underflow_count}/"
                f"{self.nonzero_gradient_elements} overflow={self.overflow_count} "
                f"loss_scale={fmt_scale(self.loss_scale)} {self.seconds:.3g}s>")

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """JSON-ready dict; ``arrays=False`` gives output and gradient shapes, not values."""
        from tflab.report.jsonable import to_jsonable

        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name.startswith("_"):
                continue
            v = getattr(self, f.name)
            if f.name in ("outputs", "gradients") and not arrays:
                v = {k: (None if a is None else list(np.shape(a))) for k, a in v.items()}
            elif f.name == "unscaled" and v is not None:
                v = v.to_dict(arrays)
            elif f.name in ("nonfinite", "fix", "loss_scale_fix", "cause", "attribution") and v is not None:
                v = v.to_dict()
            out[f.name] = to_jsonable(v)
        out["underflow_count"] = self.underflow_count
        out["overflow_count"] = self.overflow_count
        out["verdict"] = self.verdict
        return out


@dataclasses.dataclass(frozen=True, repr=False)
class PrecisionComparison(Report):
    """float32 vs mixed_bfloat16 vs mixed_float16 (or other policies) for one function.

    Attributes:
        function_name: the function's (or factory's) name.
        kind: ``"function"`` or ``"keras model factory"``.
        policies: policy name → `PolicyResult`; float32 first (the reference).
        loss_scale: the setting: None, a number, or ``"dynamic"`` (applied to the
            policies that compute in float16, as Keras' ``compile`` does).
        output_names: the flattened outputs' names.
        gradient_names: the gradient sources: ``"arg:NAME"`` float arguments,
            ``"var:PATH"`` trainable variables.
        device: the device the float32 outputs are on.
        random_ops: the random op types the float32 run ran (``StatelessRandomUniformV2``: a
            Dropout or noise layer in training mode). Each policy draws its numbers in its own
            compute dtype, so its errors then include other draws, not only rounding.
        config: `tflab.runtime_config()`'s dict, filled when the comparison is made.
    """

    function_name: str
    kind: str
    policies: dict
    loss_scale: Any
    output_names: tuple
    gradient_names: tuple
    device: str = ""
    random_ops: tuple = ()
    config: dict = config_field()

    @property
    def flagged(self) -> tuple[str, ...]:
        """Policies with underflow or overflow (after loss scaling, where applied), or whose
        measured cause is a range problem (a constant the dtype cannot hold, an overflow or
        an underflow inside the graph, NaN from inputs outside an op's domain) even where
        the outputs stay finite; an underflow a loss scale rescued does not flag."""
        return tuple(p for p, r in self.policies.items() if r.underflow or r.overflow or (
            r.cause is not None and r.cause.kind in RANGE_CAUSES
            and not (r.cause.kind == "underflow" and r.loss_scale is not None and not r.underflow)))

    def summary_line(self) -> str:
        """``mixed_bfloat16: out 0.0039, grad 0, underflow 0, overflow 0; …`` (the ``repr``)."""
        return "; ".join(f"{p}: out {r._err_text('output')}, grad {r._err_text('gradient')}, "
                         f"underflow {r.underflow_count}, overflow {r.overflow_count}"
                         for p, r in self.policies.items() if p != REFERENCE)

    def to_text(self) -> str:
        """A table, one row per policy, ending with its verdict."""
        setting = ("none" if self.loss_scale is None else
                   "dynamic (from 2^15, halved on inf/NaN; float16 policies)" if self.loss_scale == "dynamic"
                   else f"{pow2_text(self.loss_scale)} (float16 policies)")
        lines = [f"{self.function_name} ({self.kind}): gradients of sum(outputs) wrt "
                 f"{len(self.gradient_names)} source(s); loss scale: {setting}"]
        header = ("policy", "compute", "out err", "grad err", "underflow", "overflow", "loss scale",
                  "seconds", "verdict")
        rows = [(p, r.compute_dtype, r._err_text("output"), r._err_text("gradient"),
                 f"{r.underflow_count}/{r.nonzero_gradient_elements}", str(r.overflow_count),
                 fmt_scale(r.loss_scale), f"{r.seconds:.3f}", r.verdict) for p, r in self.policies.items()]
        lines.append(table(rows, header, align="<<>>>>>><", rule=False))
        lines.append("err: max relative error vs float32 over elements with |float32 value| >= the "
                     "compute dtype's smallest normal; underflow: non-zero in float32, 0 here")
        if self.random_ops:
            lines.append(f"random: the float32 run drew random numbers ({', '.join(self.random_ops)}; a Dropout or "
                         f"noise layer in training mode?), and each policy draws them in its own dtype, so its "
                         f"errors include other draws, not only rounding: run it with training=False, or "
                         f"without its random layers, to measure rounding alone")
        unmeasured = sorted({f"{r.compute_dtype} {pow2_text(float_info(r.compute_dtype).smallest_normal)}"
                             for r in self.policies.values()
                             if 0 in (r.output_error_elements, r.gradient_error_elements)})
        if unmeasured:
            lines.append("n/a: every float32 value is below the compute dtype's smallest normal ("
                         + ", ".join(unmeasured) + "), so no relative error was measured: the values "
                         "there are subnormal or 0, not exact")
        return "\n".join(lines)

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """JSON-ready dict (``arrays=False``: shapes instead of values). ``function`` repeats
        ``function_name``: the key the tour's ``report.json`` has always had."""
        from tflab.report.jsonable import to_jsonable

        return {"function_name": self.function_name, "function": self.function_name, "kind": self.kind,
                "loss_scale": to_jsonable(self.loss_scale), "output_names": list(self.output_names),
                "gradient_names": list(self.gradient_names), "device": self.device,
                "random_ops": list(self.random_ops),
                "flagged": list(self.flagged), "config": to_jsonable(self.config),
                "policies": {p: r.to_dict(arrays) for p, r in self.policies.items()}}


# --------------------------------------------------------------------------- Keras policies


@dataclasses.dataclass(frozen=True, repr=False)
class LossScalingRow:
    """One row of `demonstrate_loss_scaling`.

    Attributes:
        label: ``"float32"``, ``"mixed_bfloat16"``, ``"mixed_float16"``,
            ``"mixed_float16 + dynamic loss scale"``.
        underflow_fraction: gradient elements non-zero in float32 and 0 here, over
            the non-zero ones (0..1).
        range_underflow_fraction: the part of those below the compute dtype's smallest
            normal in float32 magnitude (range, which a loss scale fixes), same denominator.
        gradient_error: maximum relative gradient error against float32.
        gradient_error_median: median relative gradient error against float32.
        overflow: gradient/output elements inf/NaN here and finite in float32.
        loss_scale: the final loss scale (None: no scaling).
        loss_scale_history: the scales tried.
        seconds: forward + backward pass(es), seconds.
    """

    label: str
    underflow_fraction: float
    range_underflow_fraction: float
    gradient_error: float
    gradient_error_median: float
    overflow: int
    loss_scale: float | None
    loss_scale_history: tuple
    seconds: float

    def __repr__(self) -> str:
        return (f"<{self.label}: underflow {self.underflow_fraction:.3%} (range "
                f"{self.range_underflow_fraction:.3%}), grad err max {fmt_err(self.gradient_error)} "
                f"median {fmt_err(self.gradient_error_median)}, loss scale {fmt_scale(self.loss_scale)}>")

    def to_dict(self) -> dict[str, Any]:
        from tflab.report.jsonable import to_jsonable

        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, repr=False)
class LossScalingDemo(Report):
    """Measured: why mixed_float16 needs loss scaling and mixed_bfloat16 does not.

    Attributes:
        function_name: what ran, ``"MobileNetV3Small train step"``.
        model: ``MobileNetV3Small(weights=None, input_shape=…, classes=10)``.
        step: the training step's forward and loss.
        rows: `LossScalingRow` per configuration, float32 first.
        keras_version: ``keras.__version__``.
        input: the batch, ``"batch×H×W×C"``.
        comparison: the underlying `PrecisionComparison` (arrays included; not in ``to_dict()``).
        config: `tflab.runtime_config()`'s dict (TF build, CPU ISA, oneDNN on/off and why,
            allocator, threads), filled when the demo is made.
    """

    function_name: str
    model: str
    step: str
    rows: tuple
    keras_version: str
    input: str
    comparison: PrecisionComparison = dataclasses.field(metadata={"dict": False})
    config: dict = config_field()

    def row(self, label: str) -> LossScalingRow:
        """The row of one configuration (``"mixed_float16 + dynamic loss scale"``, …)."""
        return next(r for r in self.rows if r.label == label)

    def summary_line(self) -> str:
        """``float32: underflow 0.00%, scale -; …`` (the ``repr``)."""
        return "; ".join(f"{r.label}: underflow {r.underflow_fraction:.2%}, scale {fmt_scale(r.loss_scale)}"
                         for r in self.rows)

    def to_text(self) -> str:
        """A table, one row per configuration, then what ran and where."""
        header = ("configuration", "underflow", "of it: range", "grad err max", "grad err median",
                  "overflow", "loss scale")
        rows = []
        for r in self.rows:
            scale = fmt_scale(r.loss_scale)
            if len(r.loss_scale_history) > 1:
                scale += f" (from {pow2_text(r.loss_scale_history[0])})"
            rows.append((r.label, f"{r.underflow_fraction:.3%}", f"{r.range_underflow_fraction:.3%}",
                         fmt_err(r.gradient_error), fmt_err(r.gradient_error_median), str(r.overflow), scale))
        lines = [f"{self.model}, {self.step}", table(rows, header, align="<>>>>>>", rule=False)]
        lines.append("underflow: gradient elements non-zero in float32 and 0 (share of the non-zero ones); "
                     "range: of those, |float32 value| below the compute dtype's smallest normal")
        lines.append(f"ran on: {self.config.get('one_line', '?')} · Keras {self.keras_version} · "
                     f"input {self.input}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The fields (``comparison`` left out) plus ``configuration``: ``config`` with
        ``keras_version`` and ``input``, the key the tour's ``report.json`` has always had."""
        from tflab.report.jsonable import to_jsonable

        out = super().to_dict()
        out["configuration"] = to_jsonable({**self.config, "keras_version": self.keras_version,
                                            "input": self.input})
        return out


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(PrecisionComparison)(precision_notebook_fragment)
