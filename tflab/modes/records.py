"""The records `tflab.compare_modes` returns: `Distance`, `ModeResult`, `ModeComparison`.

`ModeComparison` follows the report convention of `tflab.report.base`: ``function_name``,
``config`` (filled once), data as fields and properties, ``to_text()`` (tables from
`tflab.report.text.table`), ``to_dict()`` and a one-line ``repr``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tflab._api.deprecations import deprecated_fields
from tflab.modes.defaults import MODES
from tflab.report.base import Report, config_field
from tflab.report.text import table
from tflab.report.html.dispatch import renders
from tflab.report.html.lab import modes_fragment

__all__ = ["Distance", "ModeResult", "ModeComparison", "speed_text"]


@dataclasses.dataclass(frozen=True)
class Distance:
    """A distance from eager, split into outputs and gradients, that acts as its overall maximum.

    ``float(d)``, comparisons with numbers and with other Distances (``d <= 8``,
    ``sorted(...)``), and format specs (``f"{d:.3g}"``) use ``overall``; ``max(d)``
    iterates over ``(outputs, gradients)``. Two Distances are ``==`` when both
    parts are; a Distance ``==`` a number when its overall maximum is.

    Attributes:
        outputs: the maximum over all output elements.
        gradients: the maximum over all gradient elements (0 when there are none).

    Example:

    >>> d = Distance(outputs=3, gradients=120)
    >>> d <= 128, float(d), max(d), f"{d:.0f}"
    (True, 120.0, 120, '120')
    """

    outputs: float
    gradients: float

    @property
    def overall(self) -> float:
        """``max(outputs, gradients)``."""
        return max(self.outputs, self.gradients)

    def __repr__(self) -> str:
        return f"(outputs={fmt_num(self.outputs)}, gradients={fmt_num(self.gradients)})"

    def __float__(self) -> float:
        return float(self.overall)

    def __iter__(self):
        return iter((self.outputs, self.gradients))

    def __format__(self, spec: str) -> str:
        return format(self.overall, spec) if spec else repr(self)

    @staticmethod
    def _value(other: Any) -> float | None:
        if isinstance(other, Distance):
            return other.overall
        if isinstance(other, (int, float, np.integer, np.floating)) and not isinstance(other, bool):
            return float(other)
        return None

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Distance):
            return (self.outputs, self.gradients) == (other.outputs, other.gradients)
        v = self._value(other)
        return NotImplemented if v is None else float(self.overall) == v

    def __hash__(self) -> int:
        return hash((self.outputs, self.gradients))

    def __lt__(self, other: Any) -> bool:
        v = self._value(other)
        return NotImplemented if v is None else float(self.overall) < v

    def __le__(self, other: Any) -> bool:
        v = self._value(other)
        return NotImplemented if v is None else float(self.overall) <= v

    def __gt__(self, other: Any) -> bool:
        v = self._value(other)
        return NotImplemented if v is None else float(self.overall) > v

    def __ge__(self, other: Any) -> bool:
        v = self._value(other)
        return NotImplemented if v is None else float(self.overall) >= v


def speed_text(ratio: float) -> str:
    """``1.75× faster`` or ``0.97×, slower``: a speed ratio (> 1: faster) said with its direction."""
    return f"{ratio:.2f}× faster" if ratio >= 1 else f"{ratio:.2f}×, slower"


def fmt_num(x: float) -> str:
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.3g}"


@deprecated_fields  # its old field names: tflab/_api/deprecations.py
@dataclasses.dataclass(frozen=True, repr=False)
class ModeResult:
    """One mode's run of the function.

    Attributes:
        mode: ``"eager"``, ``"graph"`` or ``"xla"``.
        outputs: the function's outputs, flattened with `tf.nest.flatten`, as numpy
            arrays; None when the mode failed.
        gradients: `tf.GradientTape` gradients of the sum of all float outputs,
            name → numpy array (None where the source is not connected). Names are
            ``"arg:NAME"`` for float tensor arguments and ``"var:NAME"`` for
            trainable variables. None when the mode failed.
        abs_error: largest absolute difference from eager, outputs and gradients
            apart (`Distance`); zeros for eager itself; None when the mode failed.
            Its overall maximum, a float, is ``max_abs_error``.
        ulp: largest ULP distance from eager over all elements, outputs and
            gradients apart (`Distance`; its overall maximum is ``max_ulp``);
            ``inf`` when a NaN appears on one side only. Dominated by values near
            zero, where a 1e-8 absolute difference is 1e9 ULP: see
            ``ulp_above_atol``.
        ulp_above_atol: largest ULP distance over the elements whose eager
            or mode value has magnitude above the comparison's ``atol``: the
            number the repr and table show.
        first_call_seconds: the first call, including tracing (graph, XLA) and XLA
            compilation, seconds.
        median_seconds: median seconds per warm call (forward + backward, results
            fetched to host).
        error: None, or why the mode could not run (for XLA: the op name, type and
            TF's reason).
        ulp_by_tensor: tensor name → max ULP from eager (every tensor, random
            streams included).
        random_streams: tensors that differ from eager because this mode draws
            other random numbers (they depend on a random op this mode does not
            reproduce: any under XLA, stateful ones in graph mode; see
            `ModeComparison.random_ops`). They are left out of ``abs_error``,
            ``ulp``, ``ulp_above_atol`` and the findings: their
            difference is not arithmetic.
    """

    mode: str
    outputs: tuple | None
    gradients: dict | None
    abs_error: Distance | None
    ulp: Distance | None
    first_call_seconds: float | None
    median_seconds: float | None
    error: str | None = None
    ulp_by_tensor: dict = dataclasses.field(default_factory=dict)
    ulp_above_atol: Distance | None = None
    random_streams: tuple[str, ...] = ()

    def __repr__(self) -> str:
        if self.error:
            return f"<{self.mode}: error: {self.error}>"
        return (f"<{self.mode}: ulp(|v|>atol)={self.ulp_above_atol!r} "
                f"raw ulp={self.ulp!r} abs_error={self.abs_error!r} "
                f"first={self.first_call_seconds:.3g}s median={self.median_seconds:.3g}s>")

    def to_dict(self, arrays: bool = True) -> dict[str, Any]:
        """JSON-ready dict; ``arrays=False`` gives ``outputs`` and ``gradients`` as shapes only.

        The shapes are taken without converting the arrays: a MobileNet's
        gradients are 1.5 million floats, whose conversion to JSON lists took
        seconds only to be thrown away.
        """
        from tflab.report.jsonable import to_jsonable

        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not arrays and f.name == "outputs":
                out[f.name] = None if v is None else [list(np.shape(o)) for o in v]
            elif not arrays and f.name == "gradients":
                out[f.name] = None if v is None else {
                    k: (None if g is None else list(np.shape(g))) for k, g in v.items()}
            else:
                out[f.name] = to_jsonable(v)
        out["max_abs_error"] = to_jsonable(self.max_abs_error)
        out["max_ulp"] = to_jsonable(self.max_ulp)
        return out

    @property
    def max_abs_error(self) -> float | None:
        """The largest ``|mode − eager|`` over outputs and gradients (``abs_error.overall``); None when it failed."""
        return None if self.abs_error is None else float(self.abs_error.overall)

    @property
    def max_ulp(self) -> float | None:
        """The largest ULP distance from eager over outputs and gradients (``ulp.overall``; ``inf`` for a NaN
        on one side only); None when the mode failed."""
        return None if self.ulp is None else float(self.ulp.overall)


@dataclasses.dataclass(frozen=True, repr=False)
class ModeComparison(Report):
    """Eager vs graph vs XLA for one function: numbers, timings, HLO and findings.

    Attributes:
        function_name: the function's name (its qualified name).
        device: the device eager ran on (e.g. ``/job:localhost/…/device:CPU:0``).
        modes: ``"eager"``, ``"graph"``, ``"xla"`` → `ModeResult`.
        gradient_names: the gradient sources, in order (``"arg:x"``, ``"var:dense/kernel"``).
        hlo: HLO stage name → text, for the stages fetched (``compare_modes``'s
            ``hlo``: by default ``hlo`` and ``optimized_hlo``, among the stages
            ``experimental_get_compiler_ir`` offers here); empty when XLA failed.
        hlo_stages: every stage name the probe found (serialized ones included).
        fusion_count: number of ``fusion`` instructions in the ``optimized_hlo``
            stage; None when there is no such stage.
        fusion_kinds: fusion kind (``kLoop``, ``kInput``, ``kOutput``…) → count.
        ulp_bound: the ULP bound used for findings.
        atol: the absolute tolerance used for findings.
        findings: one line per mode and tensor that disagrees with eager beyond
            both bounds, or per mode that failed.
        config: `tflab.runtime_config()` as a dict, filled in when the
            comparison is made: the TF CPU kernel path (oneDNN or Eigen) and CPU
            ISA the numbers were measured on.
        output_names: one name per flattened output: ``"output"`` for a single
            tensor, else ``"output[KEY]"`` with the `tf.nest` path (dict keys,
            tuple indices).
        variables_restored: names of the variables the function touches
            (trainable or not) that were saved before the comparison and put
            back before each mode's first call and at the end.
        random_ops: tensor name (output or gradient) → the random op types of
            the traced FuncGraph its values depend on (e.g.
            ``("StatelessRandomUniformV2",)``); tensors without any are absent.
        notes: one line per mode and tensor left out as a random stream, with
            how to compare it anyway.
        grappler: how graph mode ran Grappler: True (TF's default
            optimizations), False (meta optimizer disabled) or the
            ``tf.config.optimizer`` options given; in ``to_text()`` and
            ``to_dict()`` too.
        nonfinite: when some mode's outputs hold inf/NaN, the first non-finite op of
            the function's traced graph (`tflab.nonfinite.FirstNonFinite`); else None.
        causes: one `tflab.attribution.Cause` per traced mode that disagrees with
            eager beyond the bound, found by turning one transformation off at a
            time (`tflab.modes.causes`); empty when every mode agrees (no
            bisection ran) or ``attribute=False``.
    """

    function_name: str
    device: str
    modes: dict
    gradient_names: tuple[str, ...]
    hlo: dict
    hlo_stages: tuple[str, ...]
    fusion_count: int | None
    fusion_kinds: dict
    ulp_bound: int
    atol: float
    findings: tuple[str, ...]
    output_names: tuple[str, ...] = ()
    variables_restored: tuple[str, ...] = ()
    random_ops: dict = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    grappler: Any = True
    nonfinite: Any = None
    causes: tuple = ()
    config: dict = config_field()

    @property
    def cause(self) -> Any:
        """The first `tflab.attribution.Cause` of ``causes`` (XLA's before graph's), or None."""
        for mode in ("xla", "graph"):
            for c in self.causes:
                if c.runs == f"eager vs {mode}":
                    return c
        return self.causes[0] if self.causes else None

    @property
    def grappler_text(self) -> str:
        """``Grappler on`` / ``Grappler off (meta optimizer disabled)`` / ``Grappler options {…}``."""
        if self.grappler is True:
            return "Grappler on (TF's default graph optimizations)"
        if self.grappler is False:
            return "Grappler off (meta optimizer disabled)"
        return "Grappler options " + ", ".join(f"{k}={v}" for k, v in sorted(self.grappler.items()))

    def summary_line(self) -> str:
        """``eager: out 0 ULP, grad 0 ULP above atol, 1.2 ms; xla: out 6 ULP, grad 110694 ULP …; 10 fusions,
        0 finding(s)`` (the ``repr``)."""
        parts = []
        for m in MODES:
            r = self.modes.get(m)
            if r is None:
                continue
            # Outputs and gradients apart ("110694 ULP" was the gradient's).
            if r.error:
                parts.append(f"{m}: error")
                continue
            sig = r.ulp_above_atol
            grad = f", grad {fmt_num(sig.gradients)} ULP" if self.gradient_names else ""
            parts.append(
                         f"{m}: out {fmt_num(sig.outputs)} ULP{grad} above atol, "
                         f"{r.median_seconds * 1e3:.3g} ms")
        extra = f", {self.fusion_count} fusions" if self.fusion_count is not None else ""
        if self.grappler is not True and "graph" in self.modes:
            extra += ", graph: " + self.grappler_text
        return "; ".join(parts) + extra + f", {len(self.findings)} finding(s)"

    def speed_ratio(self, mode: str, baseline: str = "eager") -> float | None:
        """How many times faster ``mode`` runs than ``baseline``, per warm call.

        One convention in code and text: ``speed_ratio("xla", "graph")`` is
        ``median_seconds["graph"] / median_seconds["xla"]``, printed
        ``xla vs graph: 1.75× faster``; below 1 ``mode`` is slower
        (``xla vs graph: 0.97×, slower``).

        Args:
            mode: the mode timed (``"graph"``, ``"xla"``, ``"eager"``).
            baseline: the mode it is compared with.

        Returns:
            The ratio, or None when either mode did not run or failed.

        Raises:
            UsageError: a mode name that is not one of `MODES` ("XLA" for "xla").
        """
        from tflab._api.argcheck import check_choice

        # A typo ("XLA") is not "did not run": None would read as a mode that failed.
        known = list(dict.fromkeys([*MODES, *self.modes]))
        check_choice(mode, known, "mode", "speed_ratio")
        check_choice(baseline, known, "baseline", "speed_ratio")
        a, b = self.modes.get(mode), self.modes.get(baseline)
        if not a or not b or a.error or b.error or not a.median_seconds:
            return None
        return b.median_seconds / a.median_seconds

    @property
    def speedups(self) -> dict[str, float | None]:
        """``{"graph vs eager": speed_ratio("graph", "eager"), "xla vs graph": speed_ratio("xla", "graph")}``."""
        return {f"{m} vs {b}": self.speed_ratio(m, b) for m, b in (("graph", "eager"), ("xla", "graph"))}

    def to_text(self) -> str:
        """A table of modes, then XLA's fusion count and the findings."""
        # ULP columns count only elements above atol in magnitude (raw maxima,
        # near-zero noise included, are in a footnote when they differ).
        header = ("mode", "ULP>atol out", "ULP>atol grad", "max |diff|", "first call s", "median ms", "")
        eager = self.modes.get("eager")
        grads = (eager.gradients or {}) if eager is not None and not eager.error else {}
        unconnected = [n for n, g in grads.items() if g is None]
        no_gradient = bool(grads) and len(unconnected) == len(grads)  # nothing measured: "-", not 0
        rows = []
        raw_notes = []
        for m in MODES:
            r = self.modes.get(m)
            if r is None:
                continue
            if r.error:
                rows.append((m, "-", "-", "-", "-", "-", f"error: {r.error}"))
                continue
            sig, raw = r.ulp_above_atol, r.ulp
            if (sig.outputs, sig.gradients) != (raw.outputs, raw.gradients):
                raw_notes.append(f"{m} {fmt_num(raw.outputs)} / {fmt_num(raw.gradients)}")
            rows.append((m, fmt_num(sig.outputs), "-" if no_gradient else fmt_num(sig.gradients),
                         f"{r.abs_error.overall:.3g}", f"{r.first_call_seconds:.3f}",
                         f"{r.median_seconds * 1e3:.3f}", ""))
        lines = [f"{self.function_name} on {self.device.rsplit('device:', 1)[-1] or 'unknown device'}, "
                 f"gradients wrt {len(self.gradient_names)} source(s)"
                 + (f" (none connected: TF's gradient is None for {', '.join(unconnected)}; no gradient compared)"
                    if no_gradient else f" ({len(unconnected)} not connected: None for {', '.join(unconnected)})"
                    if unconnected else "")
                 + (f"; restored {len(self.variables_restored)} variable(s) before each mode"
                    if self.variables_restored else "")
                 + (f"; graph mode: {self.grappler_text}" if "graph" in self.modes else "")]
        if self.config.get("one_line"):
            lines.append(f"measured on: {self.config['one_line']}")
        lines.append(table(rows, header, align="<>>>>><", rule=False))
        lines.append(f"ULP columns: the largest ULP distance over elements with |value| > atol {self.atol:g} "
                     f"(worst element by ULP; max |diff| is the worst by absolute difference, "
                     f"often another element)"
                     + (f"; all elements (out / grad): {', '.join(raw_notes)}" if raw_notes else ""))
        for label, ratio in self.speedups.items():
            if ratio is not None:
                lines.append(f"{label}: {speed_text(ratio)} per call")
        if self.fusion_count is not None:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.fusion_kinds.items()))
            lines.append(f"XLA optimized HLO: {self.fusion_count} fusions ({kinds})")
        if self.hlo_stages:
            lines.append("HLO stages: " + ", ".join(self.hlo_stages))
        compared = " and ".join(m.replace("xla", "XLA") for m in MODES[1:] if m in self.modes)
        lines += [f"random stream: {n}" for n in self.notes]
        if self.nonfinite is not None and self.nonfinite.found:
            lines.append(f"non-finite: {self.nonfinite.cause_text} (the function traced once more, every op's "
                         f"output looked at)")
        left_out = " (random streams left out, above)" if self.notes else ""
        for c in self.causes:
            lines.append(f"{c.line_text} [{c.runs}]")
            lines += ["  " + ln for ln in c.to_text().splitlines()[1:]]
        lines += [f"finding: {f}" for f in self.findings] or [
            f"no findings: {compared} within {self.ulp_bound} ULP or {self.atol:g} of eager{left_out}"
            if compared else "no findings: only eager ran"]
        return "\n".join(lines)

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """JSON-ready dict. ``arrays=False`` leaves out outputs/gradients values
        (shapes only) and HLO text (stage names and sizes only) to stay small."""
        from tflab.report.jsonable import to_jsonable

        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "modes" and not arrays:
                v = {m: r.to_dict(arrays=False) for m, r in v.items()}
            elif f.name == "nonfinite" and v is not None:
                v = v.to_dict()
            elif f.name == "causes":
                v = [c.to_dict() for c in v]
            elif f.name == "hlo" and not arrays:
                v = {k: f"{len(t)} characters" for k, t in v.items()}
            out[f.name] = to_jsonable(v)
        out["speed"] = {k.replace(" vs ", "_vs_"): v for k, v in self.speedups.items()}
        out["function"] = self.function_name  # the old key
        return out


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(ModeComparison)(modes_fragment)
