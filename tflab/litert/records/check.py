"""Lab step 8, the records: `OutputError` (one output, LiteRT vs TF) and `TFLiteCheck` (one variant).

`tflab.litert.check` fills them; `tflab.export` and ``tflab check-tflite`` print them.
They follow tflab's record convention (`tflab.report.base.Report`): ``config`` filled
once, data as fields and properties, ``to_text()``/``to_dict()`` with no argument,
a one-line ``repr``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tflab.report.base import Report, config_field
from tflab.report.text import table
from tflab.report.html.dispatch import renders
from tflab.report.html.export import tflite_fragment



@dataclasses.dataclass(frozen=True, repr=False)
class OutputError(Report):
    """One output of one signature, LiteRT vs TF, compared by name.

    Attributes:
        name: output key (``"sig/name"`` when the model has several signatures).
        dtype: dtype LiteRT returns (int8 outputs are dequantized before comparing).
        shape_signature: dims with -1 for dynamic ones, as LiteRT reports them.
        max_abs_error: ``max |lite − tf|`` over all examples, output units.
        max_rel_error: ``max |lite − tf| / max |tf|`` (normwise, so zeros in tf do not blow up).
        max_ulp: largest elementwise distance in float32 ULPs.
        bound: the largest elementwise bound asserted, output units.
        bound_ratio: ``max |lite − tf| / bound`` taken elementwise; ≤ 1 means within bound.
        argmax_agreement: fraction of rows where LiteRT's single top class is TF's argmax class
            (a row where LiteRT ties several classes at its top value is a tie, not an agreement,
            and is counted in ``argmax_ties``; rank ≥ 2, last dim ≥ 2), else None.
        reference_range: ``max − min`` of the TF output over all examples (0 means constant).
        quantization: (scale, zero point) when LiteRT returns it quantized, else None.
        worst_abs_error: ``|lite − tf|`` at the element with the largest ``|Δ|/bound``.
        worst_bound: the bound of that element (so ``worst_abs_error / worst_bound
            == bound_ratio``; ``max_abs_error`` and ``bound`` may come from other elements).
        argmax_ties: rows where LiteRT ties several classes at its top value.
        inner_quantization: for a float output read through a final DEQUANTIZE (and data movement
            such as RESHAPE), ``(scale, zero point, dtype, tensor name)`` of the integer tensor it
            starts from (`tflab.litert.recipe.carried_quantization`): its last rounding, which the
            bound uses as an integer output's own scale; None otherwise.
    """

    name: str
    dtype: str
    shape_signature: tuple[int, ...]
    max_abs_error: float
    max_rel_error: float
    max_ulp: int
    bound: float
    bound_ratio: float
    argmax_agreement: float | None
    reference_range: float
    quantization: tuple[float, int] | None = None
    worst_abs_error: float = 0.0
    worst_bound: float = 0.0
    argmax_ties: int = 0
    inner_quantization: tuple | None = None

    DICT_PROPERTIES = ("within_bound", "range_share")

    @property
    def range_share(self) -> float | None:
        """``max_abs_error / reference_range``: how far LiteRT moved, as a share of TF's output range
        (None when TF's output is constant)."""
        return self.max_abs_error / self.reference_range if self.reference_range else None

    @property
    def step(self) -> float | None:
        """The output's quantization step: its own scale, or the carried one (``inner_quantization``)."""
        if self.quantization:
            return self.quantization[0]
        return self.inner_quantization[0] if self.inner_quantization else None

    @property
    def within_bound(self) -> bool:
        return self.bound_ratio <= 1.0

    def summary_line(self) -> str:
        # One output's error beside that same output's bound, never another's.
        return (f"max|Δ| {self.max_abs_error:.3g}, worst |Δ|/bound {self.bound_ratio:.3g} "
                f"({'within' if self.within_bound else 'EXCEEDED'})")

    def to_text(self) -> str:
        return f"{self.name}: {self.summary_line()}"


@dataclasses.dataclass(frozen=True, repr=False)
class TFLiteCheck(Report):
    """One TFLite variant of a SavedModel, run by LiteRT and compared with TF.

    Attributes:
        quantization: ``"none"``, ``"dynamic"``, ``"float16"`` or ``"int8"``.
        bit_exact: every output byte-identical to TF (None when not run).
        max_abs_error: largest ``|lite − tf|`` over outputs (None when not run).
        bound: the bound of the worst output (largest ``|Δ|/bound``; the failing one
            when a check fails): its largest elementwise bound, in that output's units
            (None when not run). Outputs have different units, so this is not a
            maximum over outputs; see ``worst_output`` and ``outputs[...].bound``.
        within_bound: every element within its bound (None when not run).
        outputs: output name → `OutputError`.
        op_counts: op name → count in the flatbuffer (custom ops by custom code).
        flex_ops: Select-TF ops (custom code ``Flex…``).
        custom_ops: other custom ops.
        tensor_dtypes: dtype name → number of tensors.
        weights: constant (weight) buffers by dtype: ``{dtype: [count, elements]}``,
            each buffer counted once even when the tensors of several subgraphs
            (signatures) point at it.
        shared_weights: how many of those buffers several subgraphs share.
        size_bytes: flatbuffer size in bytes.
        size_ratio: ``size_bytes / float variant size`` when known (not assumed < 1).
        runtime: what ran it, e.g. ``"ai_edge_litert 2.3.0 Interpreter + XNNPACK delegate"``,
            or ``"not run: <reason>"``.
        explanation: why the bound holds, one or two sentences.
        signatures: key → ``{"inputs": {...}, "outputs": {...}}`` with dtype,
            shape_signature and quantization of each tensor.
        config: `tflab.runtime_config()` as a dict, filled in when the check is
            made: the TF build, CPU ISA and TF CPU kernel path (oneDNN or Eigen)
            the TF reference ran on.
        notes: other measured facts worth reading (constant outputs, float weights kept).
        convert_seconds: wall time of the conversion, seconds (None when not converted here).
        worst_output: the output with the largest ``|Δ|/bound`` (None when not run).
        vacuous_outputs: outputs whose check cannot fail, as measured (`tflab.litert.vacuous`): the
            bound is at least the output's reference range (``max − min`` of TF's values), or at least
            1 for a probability, or TF's output is saturated (every element within ``1e-4`` of its range
            from its min or max), AND a planted defect (TF rerun with every float weight ×1.1) moves no
            element past its bound. A note says so, with the measured move, and points to
            ``argmax_agreement``. Never listed: an output with NaN/inf on either side, fewer than 8
            elements, or over its bound (a check that has failed).
        per_op: the per-op check (`tflab.litert.per_op.PerOpCheck`): every op run on
            its own inputs with the builtin kernels and compared with a float64
            reference using the float model's weights (None when it could not run;
            a note says why).
        attribution: for a quantized variant, its output error attributed to ops and, for int8,
            the measured kept-float fix (`tflab.litert.attribution.Attribution`; None when not made).
        tf_tensors: for the float variant, each op's output through the whole model against TF's
            tensor of the same name (`tflab.litert.float_tensors.FloatTensors`; None otherwise).
        model: the flatbuffer bytes that were checked (not in ``to_dict``).
        path: where those bytes are written, when known (``tflab export`` sets it).
        simulation: for the int8 and dynamic variants, LiteRT's tensors against the float model run
            with this variant's own quantization simulated (`tflab.litert.simulate.simulation_check`):
            an end-to-end check whose bound is measured, so it can fail on deep models where the
            gradient bound cannot (None when not made; a note says why).
        whole_model: for the int8 and dynamic variants, each float output's effect in users' terms
            against stated thresholds (`tflab.litert.records.whole_model.WholeModelEffect`: top-1
            agreement on TF's decisive rows, max|Δ| as a share of TF's range); one past its threshold
            makes the verdict False even when LiteRT computes its quantized model faithfully
            (`tflab.litert.whole_model`).
        cause: the root cause of the difference (`tflab.attribution.Cause`: the first op over its own
            bound on its actual inputs, with its class, and the ops that only carry it; a kernel or
            domain cause from the NaN analysis), None when every op and output is within bound
            (`tflab.litert.cause.litert_cause`).
    """

    quantization: str
    bit_exact: bool | None
    max_abs_error: float | None
    bound: float | None
    within_bound: bool | None
    outputs: dict[str, OutputError]
    op_counts: dict[str, int]
    flex_ops: tuple[str, ...]
    custom_ops: tuple[str, ...]
    tensor_dtypes: dict[str, int]
    weights: dict[str, list[int]]
    size_bytes: int
    size_ratio: float | None
    runtime: str
    explanation: str
    signatures: dict[str, dict]
    notes: tuple[str, ...] = ()
    convert_seconds: float | None = None
    worst_output: str | None = None
    shared_weights: int = 0
    vacuous_outputs: tuple[str, ...] = ()
    per_op: Any = None
    attribution: Any = None
    tf_tensors: Any = None
    model: bytes = dataclasses.field(default=b"", repr=False, compare=False, metadata={"dict": False})
    path: str | None = None
    cause: Any = None
    simulation: Any = None
    whole_model: tuple = ()
    config: dict = config_field()

    DICT_PROPERTIES = ("ok",)

    @property
    def ops(self) -> tuple:
        """One `tflab.litert.per_op.OpCheck` per op (empty when the per-op check did not run)."""
        return () if self.per_op is None else self.per_op.ops

    @property
    def ok(self) -> bool | None:
        """The verdict: every checked op inside its local bound and no output beyond its end-to-end bound.

        False when an output exceeds its end-to-end bound (an infinite error included: NaN on one side
        only), or, for a quantized variant, when a tensor of LiteRT's left the simulation of the
        variant's own quantization (``simulation``), whatever the per-op check says: each op may be right on its own inputs while the model's
        output is not (a LOG the per-op check cannot bound). False too when a quantized variant's
        whole-model effect crosses its threshold (``whole_model``: top-1 agreement or max|Δ| as a share
        of TF's range): the variant may compute its quantized model faithfully and still not be the
        model. Else the per-op verdict, None when the per-op check did not run; where it ran but no
        op had a reference (every op unchecked), the end-to-end bound's verdict.
        """
        if self.within_bound is False or (self.simulation is not None and self.simulation.ok is False):
            return False
        if any(e.crossed for e in self.whole_model):
            return False
        if self.per_op is None:
            return None
        if not self.per_op.checked:  # no op has a reference (POW, ABS ...): the end-to-end bound decides
            return self.within_bound
        return self.per_op.ok

    def summary_line(self) -> str:
        err = "n/a" if self.max_abs_error is None else f"{self.max_abs_error:.3g}"
        per_op = "" if self.per_op is None else (
            f"ok={self.ok}, {self.per_op.checked} ops checked, {len(self.per_op.outside)} outside, ")
        # The end-to-end error and its bound belong to one output: name it.
        worst = "" if self.worst_output is None else (
            f", worst output {self.worst_output!r} at {self.outputs[self.worst_output].bound_ratio:.3g} "
            f"of its bound")
        return (f"{self.quantization}, {per_op}bit_exact={self.bit_exact}, max|Δ| {err} (all outputs)"
                f"{worst}, {self.size_bytes} bytes" + (f", flex {list(self.flex_ops)}" if self.flex_ops else ""))

    def to_text(self) -> str:
        ratio = "" if self.size_ratio is None else f" ({self.size_ratio:.2f}× float)"
        lines = [f"TFLite {self.quantization}: {self.size_bytes} bytes{ratio}, runtime: {self.runtime}"]
        ops = ", ".join(f"{k}×{v}" + (" [Flex]" if k in self.flex_ops else " [custom]" if k in self.custom_ops
                                      else "") for k, v in sorted(self.op_counts.items()))
        lines.append(f"  ops: {ops}")
        lines.append("  tensors: " + ", ".join(f"{k}×{v}" for k, v in sorted(self.tensor_dtypes.items())))
        lines.append("  weights: " + (", ".join(f"{k}: {c} tensors / {e} elements"
                                                for k, (c, e) in sorted(self.weights.items())) or "none")
                     + (f" (unique buffers; {self.shared_weights} shared by several signatures' subgraphs, "
                        f"stored once)" if self.shared_weights else ""))
        for key, sig in self.signatures.items():
            for role in ("inputs", "outputs"):
                for n, d in sig[role].items():
                    q = d.get("quantization")
                    lines.append(f"  {key} {role[:-1]} {n}: {d['dtype']}{_shape_text(d['shape_signature'])}"
                                 + (f" scale={q[0]:.6g} zero_point={q[1]}" if q else ""))
        for o in self.outputs.values():
            am = "" if o.argmax_agreement is None else f", argmax agree {o.argmax_agreement:.0%}" + (
                f" ({o.argmax_ties} tied row(s) not counted as agreeing)" if o.argmax_ties else "")
            # Each maximum is over its own worst element: label them so the ULP
            # count is not read as the ULP distance of the max |Δ| element.
            share = "" if o.range_share is None else f"; max|Δ| is {o.range_share:.1%} of TF's range"
            # The verdict's ratio beside the one element it comes from (|Δ| and bound of that
            # element divide to it); max|Δ| and the largest bound may be other elements'.
            lines.append(f"  {o.name}: max|Δ| {o.max_abs_error:.3g} (rel {o.max_rel_error:.3g}; "
                         f"max ULP {_ulp_text(o.max_ulp)}, its own worst element), largest bound {o.bound:.3g}; "
                         f"worst |Δ|/bound {o.worst_abs_error:.3g}/{o.worst_bound:.3g} = {o.bound_ratio:.3g} "
                         f"{'ok' if o.within_bound else 'EXCEEDED'}{am}{share}"
                         + (f"; bounded in steps of {o.inner_quantization[2]} tensor "
                            f"{o.inner_quantization[3].split(';')[0]!r} (scale {o.inner_quantization[0]:.4g}) "
                            f"before the final DEQUANTIZE" if o.inner_quantization else ""))
        lines.append(f"  why: {self.explanation}")
        if self.whole_model:
            lines.append("  whole model vs TF: " + "; ".join(e.text for e in self.whole_model))
        if self.cause is not None:
            lines.append(f"  {self.cause.line_text}")
        if self.per_op is not None:
            lines.append(self.per_op.to_text())
        if self.attribution is not None:
            lines.append(self.attribution.to_text())
        if self.simulation is not None:
            lines.append(self.simulation.to_text())
        if self.tf_tensors is not None:
            lines.append(self.tf_tensors.to_text())
        lines += [f"  note: {n}" for n in self.notes]
        if self.config.get("one_line"):
            lines.append(f"  measured on: {self.config['one_line']}")
        return "\n".join(lines)

def _shape_text(shape_signature) -> str:
    """LiteRT's ``[-1, 64]`` in the lab's shape notation: ``[None,64]`` (a dynamic dim is None)."""
    return "[" + ",".join("None" if int(d) < 0 else str(int(d)) for d in shape_signature) + "]"


# ---------------------------------------------------------------------- checking


# ------------------------------------------------------- the variants table


def variant_line(check: "TFLiteCheck") -> str:
    """One line per variant: the per-op verdict, then where the output error comes from and the fix.

    E.g. ``57 ops checked, 0 outside their bound (2 unchecked: SHAPE, PACK); 61% of the
    output error from CONV_2D #17 model/conv2d_5 and #31; kept float: -55% error, +4% size``.
    """
    text = "per-op check not run" if check.per_op is None else check.per_op.summary_line()
    if check.attribution is not None:
        text += f"; {check.attribution.summary_line()}"
    return text


def whole_model_line(check: "TFLiteCheck") -> str:
    """The whole model's change in users' terms: top-1 agreement with TF and max|Δ| as a share of TF's range.

    E.g. ``whole model vs TF: output_0 top-1 agreement 20%, max|Δ| 37% of TF's output range``;
    empty when no output was compared.
    """
    parts = []
    flat = {e.output: e.not_judged for e in (getattr(check, "whole_model", None) or ()) if e.not_judged}
    for o in check.outputs.values():
        if o.name in flat:
            parts.append(f"{o.name} not judged ({flat[o.name]})")
            continue
        bits = []
        if o.argmax_agreement is not None:
            bits.append(f"top-1 agreement {o.argmax_agreement:.0%}")
        if o.range_share is not None:
            bits.append(f"max|Δ| {o.range_share:.1%} of TF's output range")
        if bits:
            parts.append(f"{o.name} " + ", ".join(bits))
    return "whole model vs TF: " + "; ".join(parts) if parts else ""


def _fmt(x: float | None, spec: str = ".2g") -> str:
    return "-" if x is None else format(x, spec)


def _ulp_text(ulp: int) -> str:
    """A ULP count; the int64 maximum the record holds for NaN/inf on one side only reads as such."""
    return "inf (NaN/inf on one side only)" if ulp >= 2 ** 63 - 1 else str(ulp)


def _short_runtime(runtime: str) -> str:
    if runtime.startswith("not run"):
        return runtime
    return "LiteRT" + (" + XNNPACK" if "XNNPACK" in runtime else "")


TABLE_LEGEND = ("max|Δ|: the largest |lite − tf| of the output named in the last column (the one with the "
                "worst |Δ|/bound), over all its elements and examples; Δ/bound: that same output's largest "
                "elementwise |Δ|/bound; argmax: rows whose one top class is TF's (ties are not agreement), the lowest "
                "over the outputs, followed by its output's name when that is another output; "
                "ops: checked ops outside their local bound / checked")


def variant_table(variants: dict[str, Any]) -> str:
    """The compact table of variants, then its legend: size, error, bound ratio, argmax, per-op verdict.

    ``variants`` maps a recipe to a `tflab.export.VariantResult` (``status``,
    ``check``, ``error``, ``convert_seconds``).

    ``max|Δ|`` is the true maximum of one output, the one with the worst
    ``|Δ|/bound`` (named in the last column when there are several), and
    ``Δ/bound`` is that output's own worst ratio; ``argmax`` is the lowest
    top-1 agreement over the outputs, named when it belongs to another output.
    """
    rows = []
    for q, v in variants.items():
        c = v.check
        if c is None or not c.outputs:
            rows.append((q, v.status, "-" if c is None else c.size_bytes, "-", "-", "-", "-", "-",
                         _fmt(v.convert_seconds, ".1f"), v.error if c is None else _short_runtime(c.runtime)))
            continue
        w = c.outputs[c.worst_output] if c.worst_output in c.outputs else next(iter(c.outputs.values()))
        # The lowest top-1 agreement over the outputs with classes, named when it is not the row's output.
        agreeing = [o for o in c.outputs.values() if o.argmax_agreement is not None]
        low = min(agreeing, key=lambda o: o.argmax_agreement, default=None)
        agree_text = "-" if low is None else f"{low.argmax_agreement:.0%}" + (
            f" ({low.name})" if low.name != w.name and len(c.outputs) > 1 else "")
        nops = sum(c.op_counts.values())
        flex = f", Flex: {','.join(c.flex_ops)}" if c.flex_ops else ""
        which = f"{w.name}; " if len(c.outputs) > 1 else ""
        ops = "-" if c.per_op is None else f"{len(c.per_op.outside)}/{c.per_op.checked}"
        rows.append((q, v.status, c.size_bytes, _fmt(c.size_ratio, ".2f"), _fmt(w.max_abs_error),
                     _fmt(w.bound_ratio, ".2f"), agree_text, ops,
                     _fmt(v.convert_seconds, ".1f"), f"{which}{nops} ops{flex}; {_short_runtime(c.runtime)}"))
    head = ("variant", "status", "bytes", "×float", "max|Δ|", "Δ/bound", "argmax", "ops", "conv s",
            "worst output; ops / runtime / error")
    return table(rows, header=head, align="<<>>>>>>><") + "\n" + TABLE_LEGEND


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(TFLiteCheck)(tflite_fragment)


def variant_status(check: Any) -> str:
    """A converted variant's `VariantResult.status` from its `TFLiteCheck`: never "ok" when ``check.ok`` is False.

    The per-op check is the verdict; the end-to-end bound decides only when it did not run. An op
    outside its local bound (or a LiteRT tensor outside the simulation of the variant's own
    quantization) is OUTSIDE; an output beyond its end-to-end bound (an infinite error too) is
    EXCEEDED even when every checked op passed; a quantized variant whose whole-model effect crosses
    its threshold (top-1 agreement, max|Δ| as a share of TF's range) is CROSSED.
    """
    if check.runtime.startswith("not run"):
        return "not run"
    if check.per_op is not None and check.per_op.checked and check.per_op.ok is False:
        return "OUTSIDE"
    if check.within_bound is False:
        return "EXCEEDED"
    if check.simulation is not None and check.simulation.ok is False:
        return "OUTSIDE"
    if any(e.crossed for e in check.whole_model):
        return "CROSSED"
    if check.ok:
        return "ok"
    return "no bound" if check.within_bound is None else "ok"
