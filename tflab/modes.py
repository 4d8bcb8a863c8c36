"""Lab step 6: one function run eagerly, as a graph, and compiled by XLA, compared.

The same Python function can run three ways:

* eager: each op dispatches its kernel at once (``eager/execute.py``);
* graph: `tf.function` traces it into a FuncGraph, Grappler rewrites the graph
  (``grappler/optimizers/meta_optimizer.cc``: constant folding, arithmetic and
  layout passes, the remapper's fused kernels), and the executor runs it;
* XLA: ``tf.function(jit_compile=True)`` lowers the whole FuncGraph to HLO
  (``tf2xla``), XLA optimizes it (fusion among others) and runs the compiled
  program.

`compare_modes` runs one forward pass plus a `tf.GradientTape` backward pass
in each mode, and measures how far graph and XLA outputs and gradients are
from eager ones, in absolute terms and in ULP (units in the last place: how
many representable floats lie between two values), and how long each mode
takes. For XLA it also returns the HLO text of every text stage that
``experimental_get_compiler_ir`` offers, and counts the fusions XLA made.

A stateful function (``v.assign_add``, BatchNorm's moving statistics with
``training=True``) would give each mode a different starting state: every
variable the function touches is saved first and put back before each mode's
first call and at the end, so the modes are compared on equal terms and the
user's variables are left as they were.

What tests/test_06_compare_modes.py measures on TF 2.21 (CPU): graph mode gives
eager's bits unless a Grappler pass rewrites the arithmetic (the arithmetic
optimizer regrouping an add tree, constant folding turning ``/ 6`` into a
multiply); with that pass off the bits match again. XLA differs by a few ULP
where it emits its own code for transcendental functions (tanh, exp, softmax).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import re
import statistics
import time
from typing import Any, Callable

import numpy as np

# The user-function helpers live in tflab._target (tflab.diagnosis uses them too);
# kept importable from here.
from tflab._target import _check_target, _function_name, _parameter_names, signature_args  # noqa: F401
from tflab._usercode import user_entry
from tflab._numeric import ulp_distance  # noqa: F401  (tflab.modes.ulp_distance)
from tflab.errors import UsageError

# MODES, and the default disagreement bound: an element is a finding when it is more than
# DEFAULT_ULP_BOUND ULP *and* more than DEFAULT_ATOL away from eager (see tflab/_mode_defaults.py).
from tflab._mode_defaults import DEFAULT_ATOL, DEFAULT_ULP_BOUND, MODES  # noqa: E402,F401

_XLA_UNSUPPORTED_RE = re.compile(r"(\w+) \((.*?)\)\{\{node ([^}]+)\}\}")
_XLA_TENSOR_LIST_SIZE = "XLA compilation requires a fixed tensor list size"
_NODE_REF_RE = re.compile(r"\{\{node ([^}]+)\}\}")

# Random-number ops by type (tensorflow/core/ops/random_ops.cc, stateless_random_ops.cc,
# stateless_random_ops_v2.cc, stateful_random_ops.cc; tf2xla's XlaRngBitGenerator).
# Stateful ones draw from a per-kernel (or per-variable) stream: eager and graph
# kernels are seeded apart, so their numbers differ even between eager and graph.
# Stateless ones are a pure function of (seed, counter, algorithm) on one kernel:
# graph mode reproduces eager's numbers, but XLA lowers every random op with its
# own RNG code (tf2xla/kernels/random_ops.cc, stateless_random_ops*.cc), so its
# numbers differ. Keras Dropout (keras.random.dropout) draws its mask with
# StatelessRandomUniformV2 from a SeedGenerator variable; tf.nn.dropout with RandomUniform.
STATEFUL_RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "ParameterizedTruncatedNormal", "RandomGamma", "RandomPoisson", "RandomPoissonV2",
    "RandomShuffle", "RandomCrop", "Multinomial", "SampleDistortedBoundingBox",
    "SampleDistortedBoundingBoxV2", "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt",
    "StatefulStandardNormal", "StatefulStandardNormalV2", "StatefulTruncatedNormal",
    "StatefulRandomBinomial", "RandomIndexShuffle"})
STATELESS_RANDOM_OPS = frozenset({
    "StatelessRandomUniform", "StatelessRandomUniformInt", "StatelessRandomUniformFullInt",
    "StatelessRandomNormal", "StatelessTruncatedNormal", "StatelessRandomUniformV2",
    "StatelessRandomUniformIntV2", "StatelessRandomUniformFullIntV2", "StatelessRandomNormalV2",
    "StatelessTruncatedNormalV2", "StatelessMultinomial", "StatelessParameterizedTruncatedNormal",
    "StatelessRandomBinomial", "StatelessRandomPoisson", "StatelessRandomGammaV2",
    "StatelessRandomGammaV3", "StatelessShuffle", "StatelessSampleDistortedBoundingBox",
    "RngBitGenerator", "XlaRngBitGenerator"})
RANDOM_OPS = STATEFUL_RANDOM_OPS | STATELESS_RANDOM_OPS
# Ops whose output depends on their input's shape only, not its values: a
# gradient that reads the shape of a random tensor does not depend on its numbers.
_SHAPE_ONLY_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike",
                             "BroadcastGradientArgs"})


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
        return f"(outputs={_fmt_num(self.outputs)}, gradients={_fmt_num(self.gradients)})"

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


def _fmt_num(x: float) -> str:
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.3g}"


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
        max_abs_diff: largest absolute difference from eager (`Distance`); zeros for
            eager itself; None when the mode failed.
        max_ulp: largest ULP distance from eager over all elements (`Distance`);
            ``inf`` when a NaN appears on one side only. Dominated by values near
            zero, where a 1e-8 absolute difference is 1e9 ULP: see
            ``max_ulp_above_atol``.
        max_ulp_above_atol: largest ULP distance over the elements whose eager
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
            `ModeComparison.random_ops`). They are left out of ``max_abs_diff``,
            ``max_ulp``, ``max_ulp_above_atol`` and the findings: their
            difference is not arithmetic.
    """

    mode: str
    outputs: tuple | None
    gradients: dict | None
    max_abs_diff: Distance | None
    max_ulp: Distance | None
    first_call_seconds: float | None
    median_seconds: float | None
    error: str | None = None
    ulp_by_tensor: dict = dataclasses.field(default_factory=dict)
    max_ulp_above_atol: Distance | None = None
    random_streams: tuple[str, ...] = ()

    def __repr__(self) -> str:
        if self.error:
            return f"<{self.mode}: error: {self.error}>"
        return (f"<{self.mode}: max_ulp(|v|>atol)={self.max_ulp_above_atol!r} "
                f"raw max_ulp={self.max_ulp!r} max_abs_diff={self.max_abs_diff!r} "
                f"first={self.first_call_seconds:.3g}s median={self.median_seconds:.3g}s>")

    def to_dict(self) -> dict[str, Any]:
        from tflab._jsonutil import to_jsonable

        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, repr=False)
class ModeComparison:
    """Eager vs graph vs XLA for one function: numbers, timings, HLO and findings.

    Attributes:
        function_name: the function's name (``function``, its old name, is a
            deprecated alias).
        device: the device eager ran on (e.g. ``/job:localhost/…/device:CPU:0``).
        modes: ``"eager"``, ``"graph"``, ``"xla"`` → `ModeResult`.
        gradient_names: the gradient sources, in order (``"arg:x"``, ``"var:dense/kernel"``).
        hlo: HLO stage name → text, for the text stages XLA offers here (probed:
            ``experimental_get_compiler_ir``'s list of valid stages); empty when
            XLA failed.
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
    config: dict = dataclasses.field(default_factory=lambda: _runtime_config_dict())
    output_names: tuple[str, ...] = ()
    variables_restored: tuple[str, ...] = ()
    random_ops: dict = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    grappler: Any = True

    @property
    def function(self) -> str:
        """Deprecated alias of `function_name`."""
        from tflab._compat import deprecated

        return deprecated("ModeComparison.function", "ModeComparison.function_name", self.function_name)

    @property
    def grappler_text(self) -> str:
        """``Grappler on`` / ``Grappler off (meta optimizer disabled)`` / ``Grappler options {…}``."""
        if self.grappler is True:
            return "Grappler on (TF's default graph optimizations)"
        if self.grappler is False:
            return "Grappler off (meta optimizer disabled)"
        return "Grappler options " + ", ".join(f"{k}={v}" for k, v in sorted(self.grappler.items()))

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        parts = []
        for m in MODES:
            r = self.modes.get(m)
            if r is None:
                continue
            parts.append(f"{m}: error" if r.error else
                         f"{m}: {_fmt_num(r.max_ulp_above_atol.overall)} ULP above atol, "
                         f"{r.median_seconds * 1e3:.3g} ms")
        extra = f", {self.fusion_count} fusions" if self.fusion_count is not None else ""
        if self.grappler is not True and "graph" in self.modes:
            extra += ", graph: " + self.grappler_text
        return (f"ModeComparison({self.function_name}: " + "; ".join(parts) + extra
                + f", {len(self.findings)} finding(s))")

    def speed_ratio(self, mode: str | None = None, baseline: str = "eager",
                    **deprecated: str) -> float | None:
        """How many times faster ``mode`` runs than ``baseline``, per warm call.

        One convention in code and text: ``speed_ratio("xla", "graph")`` is
        ``median_seconds["graph"] / median_seconds["xla"]``, printed
        ``xla vs graph: 1.75× faster``; below 1 ``mode`` is slower
        (``xla vs graph: 0.97×, slower``).

        Args:
            mode: the mode timed (``"graph"``, ``"xla"``, ``"eager"``).
            baseline: the mode it is compared with.
            **deprecated: the old keywords ``slow=``/``fast=`` (ratio
                slow/fast, the same number as ``speed_ratio(fast, slow)``),
                kept with a DeprecationWarning.

        Returns:
            The ratio, or None when either mode did not run or failed.

        Raises:
            UsageError: an unknown keyword, no mode, or a mode name that is
                not one of `MODES` ("XLA" for "xla").
        """
        if deprecated:
            unknown = set(deprecated) - {"slow", "fast"}
            if unknown:
                raise UsageError(f"speed_ratio: unknown argument(s) {sorted(unknown)}; "
                                 f"call speed_ratio(mode, baseline)")
            import warnings

            warnings.warn("speed_ratio(slow=, fast=) is deprecated: speed_ratio(mode, baseline) says how "
                          "many times faster mode is", DeprecationWarning, stacklevel=2)
            mode, baseline = deprecated.get("fast", mode), deprecated.get("slow", baseline)
        if mode is None:
            raise UsageError("speed_ratio needs the mode to time: speed_ratio(mode, baseline)")
        from tflab._argcheck import check_choice

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
        rows = [("mode", "ULP>atol out", "ULP>atol grad", "max |diff|", "first call s", "median ms", "")]
        raw_notes = []
        for m in MODES:
            r = self.modes.get(m)
            if r is None:
                continue
            if r.error:
                rows.append((m, "-", "-", "-", "-", "-", f"error: {r.error}"))
                continue
            sig, raw = r.max_ulp_above_atol, r.max_ulp
            if (sig.outputs, sig.gradients) != (raw.outputs, raw.gradients):
                raw_notes.append(f"{m} {_fmt_num(raw.outputs)} / {_fmt_num(raw.gradients)}")
            rows.append((m, _fmt_num(sig.outputs), _fmt_num(sig.gradients),
                         f"{r.max_abs_diff.overall:.3g}", f"{r.first_call_seconds:.3f}",
                         f"{r.median_seconds * 1e3:.3f}", ""))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines = [f"{self.function_name} on {self.device.rsplit('device:', 1)[-1] or 'unknown device'}, "
                 f"gradients wrt {len(self.gradient_names)} source(s)"
                 + (f"; restored {len(self.variables_restored)} variable(s) before each mode"
                    if self.variables_restored else "")
                 + (f"; graph mode: {self.grappler_text}" if "graph" in self.modes else "")]
        if self.config.get("one_line"):
            lines.append(f"measured on: {self.config['one_line']}")
        lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                  + (f"  {r[6]}" if r[6] else "") for r in rows]
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
        left_out = " (random streams left out, above)" if self.notes else ""
        lines += [f"finding: {f}" for f in self.findings] or [
            f"no findings: {compared} within {self.ulp_bound} ULP or {self.atol:g} of eager{left_out}"
            if compared else "no findings: only eager ran"]
        return "\n".join(lines)

    def to_dict(self, arrays: bool = False) -> dict[str, Any]:
        """JSON-ready dict. ``arrays=False`` leaves out outputs/gradients values
        (shapes only) and HLO text (stage names and sizes only) to stay small."""
        from tflab._jsonutil import to_jsonable

        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "modes" and not arrays:
                v = {m: {**r.to_dict(),
                         "outputs": None if r.outputs is None else [list(np.shape(o)) for o in r.outputs],
                         "gradients": None if r.gradients is None else
                         {k: (None if g is None else list(np.shape(g))) for k, g in r.gradients.items()}}
                     for m, r in v.items()}
            elif f.name == "hlo" and not arrays:
                v = {k: f"{len(t)} characters" for k, t in v.items()}
            out[f.name] = to_jsonable(v)
        out["speed"] = {k.replace(" vs ", "_vs_"): v for k, v in self.speedups.items()}
        out["function"] = self.function_name  # the old key
        return out


# --------------------------------------------------------------------------- ULP


def _abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fa, fb = np.asarray(a).astype(np.complex128 if np.iscomplexobj(a) else np.float64), \
        np.asarray(b).astype(np.complex128 if np.iscomplexobj(b) else np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(fa - fb)
    nan_a, nan_b = np.isnan(fa), np.isnan(fb)
    d = np.where(nan_a & nan_b, 0.0, d)
    d = np.where(nan_a ^ nan_b, np.inf, d)
    # inf - inf of one sign is nan; equal infinities agree.
    return np.where(np.isnan(d), np.where(fa == fb, 0.0, np.inf), d)


# --------------------------------------------------------------------------- XLA errors


def xla_reason(exc: BaseException) -> str:
    """One line naming the ops XLA could not compile and TF's reason, from a tf2xla error.

    TF's message reads ``Detected unsupported operations when trying to compile
    graph … on XLA_CPU_JIT: OpType (reason){{node name}}`` followed by where the
    op was created (``tf2xla/kernels``, ``compiler/jit/xla_compilation_cache``).
    """
    text = str(getattr(exc, "message", None) or exc)
    found = _XLA_UNSUPPORTED_RE.findall(text)
    if found:
        where = re.search(r'The op is created at:.*?((?:File "[^"]+", line \d+, in \S+\s*)+)', text, re.S)
        last = ""
        if where:
            frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', where.group(1))
            # The innermost frame with a real file: op wrappers that
            # tf.load_op_library generates run from "<string>".
            frames = [fr for fr in frames if not fr[0].startswith("<")] or frames
            if frames:
                f, ln, fn = frames[-1]
                last = f" (created at {f}:{ln} in {fn})"
        ops = "; ".join(f"{op_type} op {node!r}: " + _NODE_REF_RE.sub(r"'\1'", reason)
                        for op_type, reason, node in found)
        return f"XLA cannot compile {ops}{last}"
    if _XLA_TENSOR_LIST_SIZE in text:
        node = _NODE_REF_RE.search(text)
        name = node.group(1) if node else ""
        if "/accumulator" in name:
            # while_v2's gradient: the forward loop pushes every iteration's intermediates
            # onto a TensorList accumulator (while_v2.py _WhileBodyGradFuncGraph); XLA needs
            # its size, which only maximum_iterations gives (tf2xla tensor_list_utils).
            return ("XLA cannot compile the gradient of a while loop without maximum_iterations "
                    f"(TensorList accumulator {name!r}; TF says \"{_XLA_TENSOR_LIST_SIZE}\" and names a "
                    "TensorArray, but this list is the gradient's, not one in the code): the backward pass stores every iteration's values in a "
                    "list whose size XLA must know; write the loop as `for _ in tf.range(n)` (AutoGraph "
                    "sets maximum_iterations) or tf.while_loop(..., maximum_iterations=n), or compare "
                    "the forward pass only (gradients=False)")
    from tflab._target import error_summary, user_frame

    where = user_frame(exc)
    return error_summary(exc)[:300] + (f" (at {where})" if where else "")


# --------------------------------------------------------------------------- HLO


def probe_hlo_stages(ir_generator: Callable) -> tuple[str, ...]:
    """Stage names ``experimental_get_compiler_ir(...)(stage=…)`` accepts on this TF.

    An unknown stage makes TF raise ``Invalid stage selected: … Valid values
    are: 'hlo', …`` (``eager/pywrap_tfe_src.cc``); the list is read from there.
    """
    try:
        ir_generator(stage="tflab-probe-not-a-stage")
    except Exception as e:  # the message is the only place TF lists the stages
        names = re.findall(r"'([a-z_]+)'", str(e).split("Valid values are:", 1)[-1])
        if "Valid values are:" in str(e) and names:
            return tuple(names)
    return ()


def count_fusions(hlo_text: str) -> tuple[int, dict[str, int]]:
    """Number of ``fusion`` instructions in HLO text, and their kinds.

    A fusion instruction reads ``%name = f32[…] fusion(…), kind=kLoop,
    calls=%fused_computation…``; the fused computations it calls are not counted.
    """
    kinds: dict[str, int] = {}
    n = 0
    for line in hlo_text.splitlines():
        if re.search(r"=\s*\S.*?\sfusion\(", line) and "kind=" in line:
            n += 1
            m = re.search(r"kind=(k\w+)", line)
            if m:
                kinds[m.group(1)] = kinds.get(m.group(1), 0) + 1
    return n, kinds


# --------------------------------------------------------------------------- running


def _flatten_sources(fn: Callable, args: tuple, kwargs: dict):
    """Float tensor leaves of the arguments (gradient sources) with names, and a
    function that rebuilds (args, kwargs) from replacement leaves."""
    import tensorflow as tf

    names = _parameter_names(fn)
    structure = (list(args), dict(kwargs))
    leaves = tf.nest.flatten(structure, expand_composites=False)
    # Leaf names follow the argument they came from.
    labels = []
    for i, a in enumerate(args):
        base = names[i] if i < len(names) else f"arg{i}"
        sub = tf.nest.flatten(a)
        labels += [base if len(sub) == 1 else f"{base}[{j}]" for j in range(len(sub))]
    for k in sorted(kwargs):  # tf.nest sorts dict keys
        sub = tf.nest.flatten(kwargs[k])
        labels += [k if len(sub) == 1 else f"{k}[{j}]" for j in range(len(sub))]
    idx = [i for i, v in enumerate(leaves)
           if isinstance(v, tf.Tensor) and v.dtype.is_floating]

    def rebuild(new: list) -> tuple[tuple, dict]:
        flat = list(leaves)
        for i, v in zip(idx, new):
            flat[i] = v
        a, k = tf.nest.pack_sequence_as(structure, flat)
        return tuple(a), k

    return [leaves[i] for i in idx], [f"arg:{labels[i]}" for i in idx], rebuild


def _prepare(args: tuple, kwargs: dict, seed: int):
    import tensorflow as tf

    from tflab._target import materialize

    rng = np.random.default_rng(seed)  # one stream for all arguments: x and y differ

    def conv(v):
        if isinstance(v, tf.TensorSpec):
            return materialize(v, rng)
        if isinstance(v, np.ndarray):
            return tf.constant(v)
        return v

    return tf.nest.map_structure(conv, args), tf.nest.map_structure(conv, kwargs)


def _to_numpy(x):
    return None if x is None else np.asarray(x.numpy() if hasattr(x, "numpy") else x)


MAX_REPEATS = 100_000  # warm calls timed per mode, at most


@user_entry("while running eagerly, as a graph or under XLA")
def compare_modes(fn: Callable, *args: Any, seed: int = 0, repeats: int = 10,
                  ulp_bound: int = DEFAULT_ULP_BOUND, atol: float = DEFAULT_ATOL,
                  hlo: bool | tuple[str, ...] = True, gradients: bool = True,
                  modes: tuple[str, ...] = MODES, grappler: bool | dict = True,
                  state_variables: Any = None, **kwargs: Any) -> ModeComparison:
    """Runs ``fn`` forward and backward eagerly, as a graph and under XLA, and compares.

    Each mode computes the outputs and, with a `tf.GradientTape`, the gradients
    of the sum of every float output with respect to the float tensor arguments
    (watched with ``tape.watch``) and the trainable variables the eager run
    touched (``tape.watched_variables()``). Graph and XLA run the same
    forward+backward step under ``tf.function`` and ``tf.function(jit_compile=True)``.

    Args:
        fn: a Python function, `tf.function` (its ``python_function`` is used so
            eager really is eager) or Keras model.
        *args: arguments; fully defined `tf.TensorSpec`s become seeded random
            tensors (`tflab._target.materialize`), numpy arrays become tensors.
        seed: seed for TensorSpec arguments.
        repeats: warm calls timed per mode (the median is reported).
        ulp_bound: an element is a finding when it is more than ``ulp_bound`` ULP
            and more than ``atol`` away from eager.
        atol: absolute tolerance for findings (same units as the values).
        hlo: True fetches every text stage the probe finds, a tuple of stage
            names only those, False none. Each optimized stage compiles the XLA
            program again (seconds for a CNN), so pass ``("optimized_hlo",)``
            when only the fusion count matters.
        gradients: False runs the forward pass only (no tape; ``gradients`` stay
            empty), which makes XLA's compile much cheaper for big models.
        modes: which modes to run; ``"eager"`` (the reference) always runs.
        grappler: False runs graph mode with Grappler's meta optimizer disabled;
            a dict sets those `tf.config.optimizer.set_experimental_options`
            instead (e.g. ``{"arithmetic_optimization": False}``) for graph mode
            only. Shows whether a graph-vs-eager difference comes from a
            Grappler rewrite.
        state_variables: the variables to save before the comparison and put
            back before each mode's first call and at the end (e.g. a Keras
            model's ``variables``). None (default) finds them by tracing ``fn``
            once (`ConcreteFunction.variables`: every captured variable,
            trainable or not); a variable that trace misses but the eager
            run's tape watches is saved after that first eager run.
        **kwargs: keyword arguments for ``fn``. ``seed``, ``repeats``,
            ``ulp_bound``, ``atol``, ``hlo``, ``gradients``, ``modes``,
            ``grappler``, ``state_variables`` are taken by compare_modes; wrap
            ``fn`` in `functools.partial` to pass such names to it.

    Returns:
        A `ModeComparison`. A mode that cannot run (XLA on a ``tf.py_function``
        or string op) has ``error`` set and is a finding; the others still run.
        An output or gradient that depends on a random op (found by op type in
        the traced FuncGraph: `RANDOM_OPS`, e.g. ``tf.random.*``, Keras
        Dropout's mask) and differs from eager is labelled a different random
        stream (``ModeResult.random_streams``, ``.notes``), not a finding: XLA
        lowers every random op with its own RNG, and stateful random ops in a
        graph are seeded apart from eager's. To compare such a function's
        arithmetic, pass the noise in as an argument.

    Raises:
        UsageError: ``fn`` is not callable, a class or an unbound method; a
            TensorSpec has unknown dims (also an ``input_signature`` used
            because no arguments were given); the arguments do not match the
            ``input_signature``; ``repeats`` < 1 or a negative bound; or the
            eager run itself raised (the message names the user's line).

    Example:

    >>> def attention(x):
    ...     return tf.nn.softmax(x @ tf.transpose(x))
    >>> cmp = tflab.compare_modes(attention, tf.TensorSpec([64, 128]))
    >>> cmp.modes["graph"].max_ulp.outputs, cmp.modes["xla"].max_ulp.outputs, cmp.fusion_count
    (0, 2, 10)
    """
    import tensorflow as tf

    from tflab._target import error_summary, user_frame

    if not callable(fn):
        raise UsageError(f"compare_modes needs a callable, got {type(fn).__name__}")
    if isinstance(modes, str):  # modes="xla": one mode, not the letters x, l, a
        modes = (modes,)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        # numpy's default_rng said only "ValueError: expected non-negative integer", 10 frames down
        raise UsageError(f"seed must be an int in [0, 2**63), got {seed!r}")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise UsageError(f"unknown mode(s) {unknown}; choose from {list(MODES)}")
    from tflab._argcheck import check_int

    repeats = check_int(repeats, "repeats", "compare_modes", minimum=1)
    if repeats > MAX_REPEATS:  # 10**30 warm calls would run for ever: a mistake, said at once
        raise UsageError(f"compare_modes: repeats must be at most {MAX_REPEATS} (timed warm calls per mode; "
                         f"the median needs a few), got {repeats}")
    ulp_bound = check_int(ulp_bound, "ulp_bound", "compare_modes", minimum=0)
    if isinstance(atol, bool) or not isinstance(atol, (int, float)):
        raise UsageError(f"compare_modes: atol must be a float >= 0, got {atol!r} ({type(atol).__name__})")
    if not [m for m in modes if m != "eager"]:  # eager against itself: nothing would be compared
        raise UsageError(f"compare_modes: modes={modes!r} names no mode to compare with eager (the reference "
                         f"always runs); give one or more of 'graph', 'xla'")
    if ulp_bound < 0 or not atol >= 0:
        raise UsageError(f"ulp_bound and atol must be >= 0, got {ulp_bound} and {atol}")
    run_modes = [m for m in MODES if m == "eager" or m in modes]
    python_fn = getattr(fn, "python_function", fn)
    name = _function_name(fn)
    _check_target(fn, name)
    args, kwargs = signature_args(fn, args, kwargs)
    if any(isinstance(v, tf.TensorSpec) and not v.shape.is_fully_defined()
           for v in tf.nest.flatten((args, kwargs))) and getattr(fn, "input_signature", None):
        raise UsageError(f"{name}'s input_signature has unknown (None) dims: "
                         f"{', '.join(str(s) for s in fn.input_signature)}; "
                         f"pass arguments with every dim given to run it")
    args, kwargs = _prepare(args, kwargs, seed)
    sources, source_names, rebuild = _flatten_sources(fn, args, kwargs)
    want_grads = gradients

    # Save every variable the function touches, trainable or not, BEFORE any
    # run: a stateful function (v.assign_add, BatchNorm moving statistics)
    # would otherwise start each mode from a different state, and the user's
    # variables would be left changed. The traced FuncGraph captures them all.
    saved = _VariableSnapshot(_touched_variables(python_fn, args, kwargs)
                              if state_variables is None else list(state_variables))

    # Eager run once to learn which trainable variables the function reads.
    try:
        with tf.GradientTape() as probe:
            probe.watch(sources)
            out = python_fn(*args, **kwargs)
        variables = [v for v in probe.watched_variables() if v.trainable] if want_grads else []
    except Exception as e:
        saved.restore()
        where = user_frame(e)
        raise UsageError(f"{name} failed when run eagerly: {error_summary(e)}"
                         + (f" (at {where})" if where else "")) from e
    saved.add_missing(probe.watched_variables())  # missed by the trace: saved after one run
    saved.restore()
    out = tf.nest.map_structure(_as_tensor, out)
    device = next((t.device for t in tf.nest.flatten(out) if getattr(t, "device", "")), "") or \
        next((t.device for t in sources), "")
    output_names = _output_names(out)
    var_names = [f"var:{getattr(v, 'path', None) or v.name}" for v in variables]
    grad_names = tuple(source_names + var_names) if want_grads else ()

    def step(srcs):
        a, k = rebuild(list(srcs))
        if not want_grads:
            return tf.nest.map_structure(_as_tensor, python_fn(*a, **k)), []
        with tf.GradientTape() as tape:
            tape.watch(srcs)
            # A Python number returned eagerly would be float64 in numpy but a
            # float32 tensor from tf.function: convert the same way in all modes.
            outputs = tf.nest.map_structure(_as_tensor, python_fn(*a, **k))
            targets = [tf.reduce_sum(o) for o in tf.nest.flatten(outputs)
                       if isinstance(o, tf.Tensor) and o.dtype.is_floating]
        grads = tape.gradient(targets, list(srcs) + variables) if targets else \
            [None] * (len(srcs) + len(variables))
        return outputs, grads

    step.user_function = python_fn  # what tflab.diagnosis reads when a traced mode fails
    runners = {"eager": step, "graph": tf.function(step),
               "xla": tf.function(step, jit_compile=True)}
    results: dict[str, ModeResult] = {}
    quiet = _RetracingNote()
    logging.getLogger("tensorflow").addFilter(quiet)
    try:
        hlo_text, stages, fusions, kinds = _run_modes(
            run_modes, runners, sources, grad_names, results, name, hlo, repeats, grappler,
            saved.restore, output_names, atol)
    finally:
        logging.getLogger("tensorflow").removeFilter(quiet)
        saved.restore()
    reference = (results["eager"].outputs, results["eager"].gradients)
    random_ops = _random_ops_by_tensor(runners, results, sources, output_names, grad_names)
    notes = _separate_random_streams(results, reference, random_ops, output_names, atol)
    findings = _findings(results, reference, ulp_bound, atol, output_names)
    if findings and any(not r.error for m, r in results.items() if m != "eager"):
        findings = _with_conditioning(findings, python_fn, sources, rebuild, results, reference,
                                      output_names, ulp_bound, atol, saved.restore)
    return ModeComparison(function_name=name, device=device, modes=results,
                          gradient_names=grad_names, hlo=hlo_text, hlo_stages=stages,
                          fusion_count=fusions, fusion_kinds=kinds, ulp_bound=ulp_bound,
                          atol=atol, findings=tuple(findings), output_names=tuple(output_names),
                          variables_restored=saved.names(), random_ops=random_ops, notes=tuple(notes),
                          grappler=grappler if isinstance(grappler, bool) else dict(grappler))


def _called_functions(attrs) -> list[str]:
    """Names of the functions a node's attrs call (``f`` of a call op, ``body``/``cond``
    of a While, ``then_branch``/``else_branch`` of an If, ``branches`` of a Case)."""
    names = []
    for attr in attrs.values():
        if attr.HasField("func"):
            names.append(attr.func.name)
        if attr.HasField("list"):
            names += [f.name for f in attr.list.func]
    return names


def random_dependencies(graph, tensors) -> list[tuple[str, ...]]:
    """For each tensor of a FuncGraph, the random op types its values depend on.

    Walks the data flow from the tensor back to the graph's inputs in the
    graph's creation order (a topological order: an op is made after its
    inputs). An op is random when its type is in `RANDOM_OPS` or a function
    it calls (a ``While`` body, an ``If`` branch, a ``PartitionedCall``) holds
    one. Shape-only ops (``Shape``, ``ZerosLike``, ``BroadcastGradientArgs`` …)
    do not carry the dependency: a gradient that reads the shape of a random
    tensor does not depend on its numbers.

    Args:
        graph: a `FuncGraph` (``ConcreteFunction.graph``).
        tensors: tensors of that graph (None entries allowed).

    Returns:
        One sorted tuple of op types per tensor (empty: no random op upstream).
    """
    gdef = graph.as_graph_def()
    library = {f.signature.name: f for f in gdef.library.function}
    inner: dict[str, frozenset] = {}

    def in_function(fname: str) -> frozenset:
        if fname in inner:
            return inner[fname]
        inner[fname] = frozenset()  # a function calling itself adds nothing new
        found: set[str] = set()
        fdef = library.get(fname)
        for node in (fdef.node_def if fdef is not None else ()):
            if node.op in RANDOM_OPS:
                found.add(node.op)
            for callee in _called_functions(node.attr) + ([node.op] if node.op in library else []):
                found |= in_function(callee)
        inner[fname] = frozenset(found)
        return inner[fname]

    deps: dict[str, frozenset] = {}
    empty: frozenset = frozenset()
    for op in graph.get_operations():
        own = {op.type} if op.type in RANDOM_OPS else set()
        # A call op names its function in an attr; a node may also use a
        # library function's name as its op type.
        for callee in _called_functions(op.node_def.attr) + ([op.type] if op.type in library else []):
            own |= in_function(callee)
        if op.type not in _SHAPE_ONLY_OPS:
            for t in op.inputs:
                own |= deps.get(t.op.name, empty)
        deps[op.name] = frozenset(own)
    return [tuple(sorted(deps.get(t.op.name, empty))) if t is not None else () for t in tensors]


def _random_ops_by_tensor(runners, results, sources, output_names, grad_names) -> dict[str, tuple]:
    """Output/gradient name → random op types it depends on, read from the FuncGraph
    the graph or XLA mode traced (both trace the same step); {} when neither ran."""
    import tensorflow as tf

    mode = next((m for m in ("xla", "graph") if m in results and results[m].error is None), None)
    if mode is None:
        return {}
    try:
        concrete = runners[mode].get_concrete_function(sources)
        outs, grads = concrete.structured_outputs
    except Exception:  # the comparison stands without the labels
        return {}

    def components(value):  # an IndexedSlices gradient: its values and indices
        return [t for t in tf.nest.flatten(value, expand_composites=True) if isinstance(t, tf.Tensor)]

    names, tensors = [], []
    for name, value in list(zip(output_names, tf.nest.flatten(outs))) + list(zip(grad_names, grads)):
        for t in components(value) if value is not None else ():
            names.append(name)
            tensors.append(t)
    found: dict[str, set] = {}
    for name, ops in zip(names, random_dependencies(concrete.graph, tensors)):
        if ops:
            found.setdefault(name, set()).update(ops)
    return {n: tuple(sorted(ops)) for n, ops in found.items()}


def _separate_random_streams(results, reference, random_ops, output_names, atol) -> list[str]:
    """Moves tensors that differ because a mode draws other random numbers out of
    that mode's distances (they stay in ``ulp_by_tensor``) and says so, one note each.

    Under XLA every random op is compiled by XLA's own RNG lowering; in graph mode
    stateless ops run eager's kernel on eager's seed (same numbers), stateful ones
    a kernel seeded apart from eager's."""
    notes = []
    for mode in MODES[1:]:
        r = results.get(mode)
        if r is None or r.error:
            continue
        kinds = RANDOM_OPS if mode == "xla" else STATEFUL_RANDOM_OPS
        streams = {n: [o for o in ops if o in kinds] for n, ops in random_ops.items()}
        streams = {n: ops for n, ops in streams.items() if ops and r.ulp_by_tensor.get(n, 0) > 0}
        if not streams:
            continue
        abs_d, ulp_d, _, ulp_sig = _distances(reference, list(r.outputs), r.gradients, output_names, atol,
                                              skip=set(streams))
        results[mode] = dataclasses.replace(r, max_abs_diff=abs_d, max_ulp=ulp_d, max_ulp_above_atol=ulp_sig,
                                            random_streams=tuple(streams))
        why = ("XLA compiles random ops with its own RNG code (tf2xla), so it draws other numbers than "
               "TF's kernels" if mode == "xla" else
               "stateful random ops in a graph are seeded apart from the eager kernels, so they draw "
               "other numbers")
        where = "under XLA" if mode == "xla" else "in graph mode"
        for n, ops in streams.items():
            notes.append(f"{mode}: {n} is a different random stream {where} (not arithmetic): it depends on "
                         f"{', '.join(ops)}; {why}. Left out of the ULP columns and findings "
                         f"({_fmt_num(r.ulp_by_tensor[n])} ULP). To compare the arithmetic, pass the noise "
                         f"in as an argument: draw it (or Dropout's mask) outside the function and give it "
                         f"to every mode")
    return notes


def _runtime_config_dict() -> dict:
    from tflab.runtime import runtime_config

    return runtime_config().to_dict()


def _as_tensor(value):
    import tensorflow as tf

    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic)):
        return tf.convert_to_tensor(value)
    return value


def _touched_variables(python_fn: Callable, args: tuple, kwargs: dict) -> list:
    """Every variable a trace of the function captures (`ConcreteFunction.variables`:
    trainable and not), or [] when it cannot be traced (e.g. it creates variables)."""
    import tensorflow as tf

    own = getattr(python_fn, "variables", None)
    if own is not None and hasattr(python_fn, "trainable_variables"):  # a Keras layer/model
        return list(own)
    try:
        return list(tf.function(python_fn).get_concrete_function(*args, **kwargs).variables)
    except Exception:  # the eager run reports real errors; this is only a probe
        return []


class _VariableSnapshot:
    """Values of some variables, saved once and put back on `restore`."""

    def __init__(self, variables: list) -> None:
        self._saved: dict[int, tuple] = {}
        self.add_missing(variables)

    def add_missing(self, variables) -> None:
        import tensorflow as tf

        for v in variables:
            # A Keras 3 Variable wraps a tf.Variable (its ``value``); the tape
            # and the FuncGraph see the inner one: save each underlying variable once.
            inner = getattr(v, "value", None)
            v = inner if isinstance(inner, tf.Variable) else v
            if id(v) not in self._saved:
                self._saved[id(v)] = (v, tf.identity(v))

    def restore(self) -> None:
        for v, value in self._saved.values():
            v.assign(value)

    def names(self) -> tuple[str, ...]:
        return tuple(getattr(v, "path", None) or v.name for v, _ in self._saved.values())


@contextlib.contextmanager
def _grappler_options(grappler: bool | dict):
    """Sets Grappler options while a graph-mode function is first instantiated
    and run (False: the whole meta optimizer off); restores them afterwards."""
    import tensorflow as tf

    wanted = {"disable_meta_optimizer": True} if grappler is False else dict(grappler)
    old = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(wanted)
    try:
        yield
    finally:
        # The public API cannot unset an option, so one that was unset goes back
        # to its default value: passes on, "disable_*" and auto mixed precision off.
        tf.config.optimizer.set_experimental_options(
            {k: old.get(k, not (k.startswith("disable_") or k.startswith("auto_mixed_precision")))
             for k in wanted})


class _RetracingNote(logging.Filter):
    """Drops TF's "N out of the last M calls … triggered tf.function retracing"
    warning: each comparison builds fresh tf.functions on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


def _run_modes(run_modes, runners, sources, grad_names, results, name, hlo, repeats, grappler,
               restore, output_names, atol):
    """Runs each mode (eager first: the reference), fills ``results``, then fetches HLO.
    ``restore`` puts the function's variables back before each mode's first call."""
    from tflab.diagnosis import diagnosis_note

    from tflab._target import error_summary, user_frame

    reference = None
    for mode in run_modes:
        run = runners[mode]
        options = (_grappler_options(grappler) if mode == "graph" and grappler is not True
                   else contextlib.nullcontext())
        try:
            with options:
                restore()
                t0 = time.perf_counter()
                outputs, grads = _fetch(run(sources))
                first = time.perf_counter() - t0
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    _fetch(run(sources))
                    times.append(time.perf_counter() - t0)
        except Exception as e:  # a mode that cannot run is a result, not a crash
            if mode == "xla":
                reason = xla_reason(e)
            else:
                where = user_frame(e)
                reason = error_summary(e)[:300] + (f" (at {where})" if where else "")
                if mode != "eager":  # a failed trace: kind, culprit line and fix (tflab.diagnosis)
                    reason += diagnosis_note(e, getattr(runners["eager"], "user_function", None))
            if mode == "eager":
                raise UsageError(f"{name}'s eager forward+backward step raised {reason}") from e
            results[mode] = ModeResult(mode, None, None, None, None, None, None, error=reason)
            continue
        grad_map = dict(zip(grad_names, grads))
        if reference is None:
            reference = (outputs, grad_map)
        abs_d, ulp_d, per, ulp_sig = _distances(reference, outputs, grad_map, output_names, atol)
        results[mode] = ModeResult(mode, tuple(outputs), grad_map, abs_d, ulp_d, first,
                                   statistics.median(times), ulp_by_tensor=per,
                                   max_ulp_above_atol=ulp_sig)

    hlo_text: dict[str, str] = {}
    stages: tuple[str, ...] = ()
    fusions, kinds = None, {}
    if hlo and "xla" in results and results["xla"].error is None:
        gen = runners["xla"].experimental_get_compiler_ir(sources)
        stages = probe_hlo_stages(gen)
        for stage in stages:
            if "serialized" in stage:
                continue  # bytes of a proto, not text
            if not isinstance(hlo, bool) and stage not in hlo:
                continue
            try:
                hlo_text[stage] = gen(stage=stage)
            except Exception as e:  # one stage failing must not hide the others
                hlo_text[stage] = f"<{stage} unavailable: {type(e).__name__}: {str(e)[:200]}>"
        if "optimized_hlo" in hlo_text:
            fusions, kinds = count_fusions(hlo_text["optimized_hlo"])
    return hlo_text, stages, fusions, kinds


def _fetch(result) -> tuple[list, list]:
    """Copies outputs and gradients to numpy, which also waits for the device."""
    import tensorflow as tf

    outputs, grads = result
    return [_to_numpy(o) for o in tf.nest.flatten(outputs)], [_to_numpy(g) for g in grads]


def _output_names(out) -> list[str]:
    """``output`` for one tensor, else ``output[KEY]`` by `tf.nest` path (dict keys
    sorted as tf.nest flattens them, tuple/list indices)."""
    import tensorflow as tf

    try:  # public tf.nest has no path API; TF's own nest module has had it since 1.x
        from tensorflow.python.util import nest

        paths = [p for p, _ in nest.flatten_with_joined_string_paths(out)]
    except (ImportError, AttributeError):
        paths = [str(i) for i in range(len(tf.nest.flatten(out)))]
    if len(paths) == 1 and not isinstance(out, (dict, list, tuple)):
        return ["output"]
    return [f"output[{p}]" for p in paths]


def _pairs(reference, outputs, grad_map, output_names):
    ref_out, ref_grads = reference
    for name, a, b in zip(output_names, ref_out, outputs):
        yield "outputs", name, a, b
    for name, a in ref_grads.items():
        yield "gradients", name, a, grad_map.get(name)


def _distances(reference, outputs, grad_map, output_names, atol, skip=frozenset()):
    """Max |diff|, max ULP, per-tensor ULP and max ULP above atol; tensors named
    in ``skip`` (random streams) are left out of all but the per-tensor numbers."""
    abs_max = {"outputs": 0.0, "gradients": 0.0}
    ulp_max = {"outputs": 0.0, "gradients": 0.0}
    sig_max = {"outputs": 0.0, "gradients": 0.0}
    per: dict[str, float] = {}
    for group, name, a, b in _pairs(reference, outputs, grad_map, output_names):
        if name in skip:
            continue
        if a is None or b is None:
            if (a is None) != (b is None):
                per[name] = math.inf
                abs_max[group] = ulp_max[group] = sig_max[group] = math.inf
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            per[name] = math.inf
            abs_max[group] = ulp_max[group] = sig_max[group] = math.inf
            continue
        if a.dtype.kind not in "fciub" and a.dtype.name not in ("bfloat16",):
            # strings and objects: equal or not
            same = bool(np.all(a == b))
            per[name] = 0.0 if same else math.inf
            continue
        ulps = ulp_distance(a, b)
        u = float(ulps.max(initial=0.0))
        d = float(_abs_diff(a, b).max(initial=0.0))
        with np.errstate(invalid="ignore"):
            big = (np.abs(a) > atol) | (np.abs(b) > atol) | np.isnan(a) | np.isnan(b)
        per[name] = u
        ulp_max[group] = max(ulp_max[group], u)
        sig_max[group] = max(sig_max[group], float(np.where(big, ulps, 0.0).max(initial=0.0)))
        abs_max[group] = max(abs_max[group], d)
    return (Distance(abs_max["outputs"], abs_max["gradients"]),
            Distance(_int_if_whole(ulp_max["outputs"]), _int_if_whole(ulp_max["gradients"])), per,
            Distance(_int_if_whole(sig_max["outputs"]), _int_if_whole(sig_max["gradients"])))


def _int_if_whole(x: float):
    return int(x) if math.isfinite(x) else x


def _with_conditioning(findings: list[str], python_fn, sources, rebuild, results, reference,
                       output_names, ulp_bound: int, atol: float, restore) -> list[str]:
    """Adds a condition note to an output finding whose worst element is ill-conditioned.

    The function is run eagerly once more with every floating input moved by one
    ULP (``np.nextafter`` toward +inf). Where that moves eager's own output element
    by at least the mode's difference there, the difference is inside what one
    rounding of the input already does: the function is ill-conditioned at that
    point (tensorflow/tensorflow#58752: ``tan`` of 3.3e23, where one ULP of the
    argument spans millions of periods), and no mode can be expected to agree.
    """
    import tensorflow as tf

    nudged = []
    for t in sources:
        a = np.asarray(t.numpy()) if hasattr(t, "numpy") else np.asarray(t)
        if a.dtype.kind == "f":
            a = np.nextafter(a, np.asarray(np.inf, a.dtype))
            nudged.append(tf.constant(a, dtype=t.dtype))
        else:
            nudged.append(t)
    try:
        a, k = rebuild(nudged)
        moved = [None if o is None else np.asarray(o) for o in
                 tf.nest.flatten(tf.nest.map_structure(_as_tensor, python_fn(*a, **k)))]
    except Exception:  # the nudged inputs fail (a domain edge): no note
        return findings
    finally:
        restore()
    ref_out = list(reference[0])
    out = list(findings)
    for mode in MODES[1:]:
        r = results.get(mode)
        if r is None or r.error:
            continue
        for k_, (name, a0, b0) in enumerate(zip(output_names, ref_out, r.outputs)):
            m1 = moved[k_] if k_ < len(moved) else None
            if a0 is None or b0 is None or m1 is None or a0.shape != b0.shape or a0.shape != m1.shape \
                    or a0.dtype.kind != "f" or name in r.random_streams:
                continue
            d = _abs_diff(a0, b0)
            bad = (ulp_distance(a0, b0) > ulp_bound) & (d > atol)
            if not bad.any():
                continue
            i = int(np.argmax(np.where(bad, d, -1.0)))
            step = float(np.abs(m1.astype(np.float64).flat[i] - a0.astype(np.float64).flat[i]))
            if not (np.isfinite(step) and step >= float(d.flat[i])):
                continue
            prefix = f"{mode}: "
            for j, line in enumerate(out):
                if line.startswith(prefix) and f" of {name} differ" in line:
                    out[j] = (line + f"; ill-conditioned there: moving the inputs by one ULP moves eager's "
                              f"{name} at flat index {i} by {step:.3g}, at least the {mode} difference "
                              f"{float(d.flat[i]):.3g}, so the difference is within one rounding of the "
                              f"input (a large condition number: e.g. tan of a huge argument, where one ULP "
                              f"spans many periods)")
    return out


def _findings(results, reference, ulp_bound: int, atol: float, output_names) -> list[str]:
    out = []
    for mode in MODES[1:]:
        r = results.get(mode)
        if r is None:
            continue
        if r.error:
            out.append(f"{mode} did not run: {r.error}")
            continue
        for group, name, a, b in _pairs(reference, r.outputs, r.gradients, output_names):
            if name in r.random_streams:  # not arithmetic: reported in the notes
                continue
            if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
                if a is not None or b is not None:
                    out.append(f"{mode}: {name} does not match eager in presence, shape or dtype")
                continue
            if a.dtype.kind not in "fc" and a.dtype.name != "bfloat16":
                if r.ulp_by_tensor.get(name, 0) > 0:
                    out.append(f"{mode}: {name} differs from eager (non-float values)")
                continue
            u, d = ulp_distance(a, b), _abs_diff(a, b)
            bad = (u > ulp_bound) & (d > atol)
            if bad.any():
                # Two worsts, each labelled: the element with the largest |diff| and
                # the one with the largest ULP distance (near zero, a small |diff|
                # is many ULP), among the elements beyond both bounds.
                i = int(np.argmax(np.where(bad, d, -1.0)))
                j = int(np.argmax(np.where(bad, u, -1.0)))
                by_diff = (f"{float(d.flat[i]):.3g} ({_fmt_num(float(u.flat[i]))} ULP) at flat index {i}")
                worst = (f"largest |diff| and largest ULP: {by_diff}" if u.flat[j] == u.flat[i] else
                         f"largest |diff| {by_diff}; largest ULP {_fmt_num(float(u.flat[j]))} "
                         f"(|diff| {float(d.flat[j]):.3g}) at flat index {j}")
                out.append(f"{mode}: {int(bad.sum())} element(s) of {name} differ from eager by more "
                           f"than {ulp_bound} ULP and {atol:g}; {worst}")
    return out
