"""Lab step 8: a TFLite/LiteRT round trip is close, within a bound we can defend.

`tflite_roundtrip` converts a SavedModel with
``tf.lite.TFLiteConverter.from_saved_model``, runs each SignatureDef with the
LiteRT interpreter (``ai_edge_litert.interpreter.Interpreter``, by signature
runner, feeding and reading tensors by name) and compares every output with
the reloaded SavedModel run by TF.

Why it is not bit-exact, and the bound each variant asserts (elementwise, per
output; ``u = 2**-24`` is float32's unit roundoff):

* ``none`` (float32): the converter folds BatchNorm into weights and fuses
  bias/activations, and XNNPACK accumulates dot products in its own order. A
  length-K dot product summed in any order is the exact product of weights
  perturbed by at most ``γ_K = K·u/(1−K·u)`` relatively (Higham, *Accuracy and
  Stability of Numerical Algorithms*, §3.1), so two orders differ by at most
  ``2·γ_K`` relative weight perturbation. Propagated to the output to first
  order with TF's own gradients: ``Σ_w 2·γ_K(w)·|∂y/∂w|·|w|`` plus 4 ULP of
  ``max(|y|, max over the output of |y|)`` for elementwise kernels (exp, tanh)
  that differ in their last bits, measured at the scale of the tensor.
* ``float16``: every float weight is rounded to float16 (relative step
  ``2**-11``) and dequantized back: ``Σ_w 2**-11·|∂y/∂w|·|w|`` + the float bound.
* ``dynamic`` (dynamic-range): weight tensors of at least 1024 elements are
  stored as int8 with step ``s = max|w|/127``; rounding moves each weight by at
  most ``s/2``: ``Σ_w (s/2)·|∂y/∂w|``. The hybrid kernels also quantize each
  activation row to int8 at run time; we estimate that as a second term of
  the same size (``×2``: an estimate, not a proof), plus the float bound.
  Smaller weight tensors stay float (``QuantizationSpecs.
  minimum_elements_for_weights`` defaults to 1024 in TF's MLIR quantizer,
  tensorflow/compiler/mlir/lite); when none is large enough the variant is
  the float model and the bound is the float one.
* ``int8`` (full integer, int8 inputs and outputs, calibrated by a
  representative dataset made from the examples): half an output step for the
  final rounding, plus the first-order effect of the weight steps and of the
  input quantization step, doubled to estimate the requantization of the
  intermediate tensors (an estimate, not a proof), and never less than one
  output step (TFLite's int8 softmax is measured one step off for correctly
  computed inputs): a small multiple of the output scale, which the report
  states in output steps.

NaN outputs in the same positions on both sides count as a match (zero
error); a NaN on one side only is an infinite error.

The first-order gradient terms use the unfolded TF variables and per-tensor
steps ``max|w|/127``, an upper bound of the per-channel steps the converter
uses; they are computed once per SavedModel and example set and shared by the
four variants.

Select-TF (Flex) ops convert only with ``SELECT_TF_OPS``, and the Python
LiteRT interpreter cannot run them (it has no Flex delegate linked): such a
variant is reported as not checked, with the interpreter's reason.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import time
import warnings
from typing import Mapping

import numpy as np

from tflab.errors import TflabError, UsageError
from tflab.saved_model import (Examples, check_examples, check_unused, feed_for, load_saved_model,
                               normalize_examples, signature_inputs, ulp_distance)

QUANTIZATIONS = ("none", "dynamic", "float16", "int8")
UNIT_ROUNDOFF = 2.0 ** -24  # float32
FLOAT16_STEP = 2.0 ** -11  # relative rounding error of float16 (round to nearest)
MIN_WEIGHT_ELEMENTS = 1024  # dynamic-range quantization leaves smaller weights in float
ELEMENTWISE_ULPS = 4
# Bounds need one backward pass per output element; beyond this many per
# output, the remaining elements get the largest computed bound (an estimate).
MAX_GRADIENT_ELEMENTS = 1024


class UnsupportedOpsError(UsageError):
    """The model uses ops outside the TFLite builtins.

    Attributes:
        ops: the TF op names, e.g. ``("StringLength",)``.
        kind: ``"flex"`` (a TF op ``SELECT_TF_OPS`` would convert as a Flex op)
            or ``"custom"`` (an op TF itself does not define, e.g. the project's
            WarpSoftmax: the converter reports ERROR_NEEDS_CUSTOM_OPS; it needs
            ``allow_custom_ops=True`` and a TFLite kernel).
    """

    def __init__(self, message: str, ops: tuple[str, ...], kind: str = "flex"):
        super().__init__(message)
        self.ops = ops
        self.kind = kind


# --------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class OutputError:
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
        argmax_agreement: fraction of rows where TF's argmax class also has LiteRT's top value
            (ties count as agreement; rank ≥ 2, last dim ≥ 2), else None.
        reference_range: ``max − min`` of the TF output over all examples (0 means constant).
        quantization: (scale, zero point) when LiteRT returns it quantized, else None.
        worst_abs_error: ``|lite − tf|`` at the element with the largest ``|Δ|/bound``.
        worst_bound: the bound of that element (so ``worst_abs_error / worst_bound
            == bound_ratio``; ``max_abs_error`` and ``bound`` may come from other elements).
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

    @property
    def within_bound(self) -> bool:
        return self.bound_ratio <= 1.0


@dataclasses.dataclass(frozen=True)
class TFLiteCheck:
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
        weights: constant tensors by dtype: ``{dtype: [count, elements]}``.
        size_bytes: flatbuffer size in bytes.
        size_ratio: ``size_bytes / float variant size`` when known (not assumed < 1).
        runtime: what ran it, e.g. ``"ai_edge_litert 2.3.0 Interpreter + XNNPACK delegate"``,
            or ``"not run: <reason>"``.
        explanation: why the bound holds, one or two sentences.
        signatures: key → ``{"inputs": {...}, "outputs": {...}}`` with dtype,
            shape_signature and quantization of each tensor.
        notes: other measured facts worth reading (constant outputs, float weights kept).
        convert_seconds: wall time of the conversion, seconds (None when not converted here).
        worst_output: the output with the largest ``|Δ|/bound`` (None when not run).
        config: `tflab.runtime_config()` as a dict: the TF build, CPU ISA and
            TF CPU kernel path (oneDNN or Eigen) the TF reference ran on.
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
    config: dict = dataclasses.field(default_factory=dict)

    def __repr__(self) -> str:
        err = "n/a" if self.max_abs_error is None else f"{self.max_abs_error:.3g}"
        bound = "n/a" if self.bound is None else f"{self.bound:.3g}"
        return (f"TFLiteCheck(quantization={self.quantization!r}, bit_exact={self.bit_exact}, "
                f"max_abs_error={err}, bound={bound}, within_bound={self.within_bound}, "
                f"size_bytes={self.size_bytes}, flex_ops={list(self.flex_ops)})")

    def to_text(self) -> str:
        ratio = "" if self.size_ratio is None else f" ({self.size_ratio:.2f}× float)"
        lines = [f"TFLite {self.quantization}: {self.size_bytes} bytes{ratio}, runtime: {self.runtime}"]
        ops = ", ".join(f"{k}×{v}" + (" [Flex]" if k in self.flex_ops else " [custom]" if k in self.custom_ops
                                      else "") for k, v in sorted(self.op_counts.items()))
        lines.append(f"  ops: {ops}")
        lines.append("  tensors: " + ", ".join(f"{k}×{v}" for k, v in sorted(self.tensor_dtypes.items())))
        lines.append("  weights: " + (", ".join(f"{k}: {c} tensors / {e} elements"
                                                for k, (c, e) in sorted(self.weights.items())) or "none"))
        for key, sig in self.signatures.items():
            for role in ("inputs", "outputs"):
                for n, d in sig[role].items():
                    q = d.get("quantization")
                    lines.append(f"  {key} {role[:-1]} {n}: {d['dtype']}{list(d['shape_signature'])}"
                                 + (f" scale={q[0]:.6g} zero_point={q[1]}" if q else ""))
        for o in self.outputs.values():
            am = "" if o.argmax_agreement is None else f", argmax agree {o.argmax_agreement:.0%}"
            lines.append(f"  {o.name}: max|Δ| {o.max_abs_error:.3g} (rel {o.max_rel_error:.3g}, "
                         f"{o.max_ulp} ULP) bound {o.bound:.3g} ratio {o.bound_ratio:.3g} "
                         f"{'ok' if o.within_bound else 'EXCEEDED'}{am}")
        lines.append(f"  why: {self.explanation}")
        lines += [f"  note: {n}" for n in self.notes]
        if self.config.get("one_line"):
            lines.append(f"  measured on: {self.config['one_line']}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["outputs"] = {k: dict(dataclasses.asdict(o), within_bound=o.within_bound)
                        for k, o in self.outputs.items()}
        return d


def _runtime_config_dict() -> dict:
    from tflab.runtime import runtime_config

    return runtime_config().to_dict()


# -------------------------------------------------------------------- conversion


def _representative(batches: list[dict[str, np.ndarray]], takes: Mapping[str, list[str]] | None = None):
    """Representative dataset: one sample per example row, per signature.

    With several signatures the calibrator needs ``(signature key, inputs)``
    samples (tensorflow/lite/python/optimize/calibrator.py); each gets only
    the names it takes.
    """
    takes = takes or {}

    def rows_of(batch):
        # One sample per row: calibration sees every example row.
        rows = min(len(a) for a in batch.values()) if all(a.ndim for a in batch.values()) else 1
        for i in range(rows):
            yield {k: (a[i:i + 1] if a.ndim else a) for k, a in batch.items()}

    def gen():
        for batch in batches:
            if len(takes) > 1:
                for key, names in takes.items():
                    for sample in rows_of(feed_for(batch, names)):
                        yield key, sample
            else:
                names = next(iter(takes.values())) if takes else list(batch)
                yield from rows_of(feed_for(batch, names))
    return gen


def _converter(saved_model_dir: str):
    """``TFLiteConverter.from_saved_model``, for every signature.

    TF 2.21's from_saved_model (tensorflow/lite/python/lite.py) takes any
    SavedModel with several signatures and a root attribute ``serve`` for a
    Keras ``model.export`` artifact and converts ``serving_default`` only,
    which fails when there is none (a tf.Module with methods ``serve`` and
    ``masked``). Then we build the same converter it would, with all keys.
    """
    import tensorflow as tf
    from tensorflow.lite.python import lite

    try:
        return tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
    except ValueError as e:
        if "Invalid signature key 'serving_default'" not in str(e):
            raise
    loaded = load_saved_model(saved_model_dir)
    keys = list(loaded.signatures)
    conv = lite.TFLiteSavedModelConverterV2(saved_model_dir, {tf.saved_model.SERVING}, keys)
    if conv.saved_model_dir:
        return conv
    return tf.lite.TFLiteConverter([loaded.signatures[k] for k in keys], loaded)


class _captured_stderr:
    """Captures file descriptor 2 (the MLIR converter prints multi-line diagnostics there from C++)."""

    def __enter__(self) -> dict:
        import tempfile

        self.box: dict = {}
        try:
            self.saved = os.dup(2)
        except OSError:
            self.saved = None
            return self.box
        self.tmp = tempfile.TemporaryFile()
        os.dup2(self.tmp.fileno(), 2)
        return self.box

    def __exit__(self, *exc) -> None:
        if self.saved is None:
            return
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.tmp.seek(0)
        self.box["text"] = self.tmp.read().decode(errors="replace")
        self.tmp.close()


def convert(saved_model_dir: str | os.PathLike, quantization: str = "none",
            examples: Examples | None = None, *, select_tf_ops: bool = False) -> bytes:
    """Converts a SavedModel to a TFLite flatbuffer with one of the four recipes.

    Args:
        saved_model_dir: a SavedModel folder (every SignatureDef is converted).
        quantization: ``"none"``, ``"dynamic"`` (``optimizations=[DEFAULT]``),
            ``"float16"`` (``supported_types=[tf.float16]``) or ``"int8"`` (full
            integer: ``TFLITE_BUILTINS_INT8``, int8 inputs/outputs, calibrated by
            a representative dataset made of the examples' rows).
        examples: required for ``"int8"``: ``{name: array}`` or a list of them.
        select_tf_ops: also allow ``SELECT_TF_OPS`` (Flex ops).

    Returns:
        The flatbuffer bytes.

    Raises:
        UnsupportedOpsError: ops outside the TFLite builtins (named in the message).
        UsageError: unknown quantization, or ``"int8"`` without examples.
        TflabError: any other converter failure (its first line quoted).
    """
    import tensorflow as tf

    if quantization not in QUANTIZATIONS:
        raise UsageError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    from tflab.export import load_custom_ops_for

    load_custom_ops_for(saved_model_dir)  # the converter loads the SavedModel: its ops must be registered
    conv = _converter(os.fspath(saved_model_dir))
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization != "none":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "float16":
        conv.target_spec.supported_types = [tf.float16]
    if quantization == "int8":
        if examples is None:
            raise UsageError("int8 quantization needs examples for its representative dataset")
        loaded = load_saved_model(saved_model_dir)
        takes: dict[str, list[str]] = {}
        seen_targets: set = set()
        # The converter keeps one of several keys calling the same function
        # (Keras' serve/serving_default): calibrate that one, serving_default first.
        for k in sorted(loaded.signatures, key=lambda k: (k != "serving_default", k)):
            target = _call_target(loaded.signatures[k])
            if target is not None and target in seen_targets:
                continue
            seen_targets.add(target)
            takes[k] = list(signature_inputs(loaded.signatures[k]))
        conv.representative_dataset = _representative(normalize_examples(examples), takes)
        ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    if select_tf_ops:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    conv.target_spec.supported_ops = ops
    captured: dict = {}
    try:
        with warnings.catch_warnings():
            # int8 calibration runs TF's own deprecated tf.lite.Interpreter; not ours to fix.
            warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated")
            with _captured_stderr() as captured:
                return conv.convert()
    except Exception as e:  # ConverterError carries structured errors; others are quoted
        err = _explain_converter_error(e, quantization)
        if type(err) is TflabError and captured.get("text"):
            # Not an error we explain: keep the converter's own diagnostics visible.
            os.write(2, captured["text"].encode(errors="replace"))
        raise err from e


def _explain_converter_error(e: Exception, quantization: str) -> TflabError:
    import re

    flex: list[str] = []
    custom: list[str] = []
    for err in getattr(e, "errors", None) or []:
        code = str(getattr(err, "error_code", ""))
        # error_code is an enum int in the proto; its name appears in str(err).
        kind = ("custom" if "NEEDS_CUSTOM_OPS" in str(err) else
                "flex" if "NEEDS_FLEX_OPS" in str(err) or "NEEDS_FLEX_OPS" in code else None)
        if kind is None:
            continue
        name = err.operator.name if err.HasField("operator") else ""
        name = name[3:] if name.startswith("tf.") else name
        target = custom if kind == "custom" else flex
        if name and name not in target:
            target.append(name)
    if not flex and not custom and "neither a custom op nor a flex op" in str(e):
        found = sorted(set(re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op", str(e))))
        listed = re.search(r"Custom ops: ([\w, ]+)", str(e))
        customs = set(listed.group(1).replace(" ", "").split(",")) if listed else set()
        custom = [n for n in found if n in customs]
        flex = [n for n in found if n not in customs]
    if custom:
        names = ", ".join(custom)
        hint = " (or use tf.nn.softmax in the exported model)" if "WarpSoftmax" in custom else ""
        return UnsupportedOpsError(
            f"op(s) {names} are custom TF ops, neither TFLite builtins nor Flex ops, so the {quantization} "
            f"conversion failed; SELECT_TF_OPS cannot convert them: converting needs "
            f"converter.allow_custom_ops=True plus a TFLite kernel for {names} registered in the runtime, "
            f"which the Python LiteRT interpreter does not have{hint}", tuple(custom), kind="custom")
    if flex:
        names = ", ".join(flex)
        return UnsupportedOpsError(
            f"op(s) {names} are not TFLite builtins, so the {quantization} conversion with builtins only "
            f"failed; converter.target_spec.supported_ops=[TFLITE_BUILTINS, SELECT_TF_OPS] would convert "
            f"them as Flex ops, but the Python LiteRT interpreter cannot run Flex ops, so the round trip "
            f"cannot be checked here", tuple(flex))
    text = str(e).strip()
    from tflab.export import unregistered_op

    missing = unregistered_op(text)
    if missing:
        from tflab.export import PROJECT_CUSTOM_OPS

        lib = PROJECT_CUSTOM_OPS.get(missing, "the library that defines it (tf.load_op_library('....so'))")
        return UsageError(f"the SavedModel uses op {missing}, which is not registered in the converter's "
                          f"process: load {lib} first")
    first = next((ln for ln in text.splitlines() if "error" in ln.lower()), text.splitlines()[0] if text else "")
    return TflabError(f"TFLite {quantization} conversion failed: {type(e).__name__}: {first.strip()[:300]}")


# ------------------------------------------------------------- flatbuffer analysis


@dataclasses.dataclass(frozen=True)
class FlatbufferStats:
    """What the flatbuffer holds, read with TF's generated schema (schema_py_generated)."""

    op_counts: dict[str, int]
    flex_ops: tuple[str, ...]
    custom_ops: tuple[str, ...]
    tensor_dtypes: dict[str, int]
    weights: dict[str, list[int]]  # dtype -> [constant tensors, elements]


def analyze_flatbuffer(model: bytes) -> FlatbufferStats:
    """Op histogram, tensor dtypes and constant (weight) tensors of a TFLite flatbuffer.

    We read the flatbuffer itself rather than the interpreter's op list
    because a model with Flex ops cannot even be prepared by the Python
    interpreter, and a delegate (XNNPACK) replaces the ops it runs by
    ``DELEGATE`` nodes.
    """
    from tensorflow.lite.python import schema_py_generated as fb

    m = fb.ModelT.InitFromPackedBuf(bytearray(model), 0)
    builtin = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    names = []
    for oc in m.operatorCodes or []:
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)
        if code == fb.BuiltinOperator.CUSTOM:
            names.append(oc.customCode.decode() if isinstance(oc.customCode, bytes) else str(oc.customCode))
        else:
            names.append(builtin.get(code, f"BUILTIN_{code}"))
    ops: collections.Counter = collections.Counter()
    dtypes: collections.Counter = collections.Counter()
    weights: dict[str, list[int]] = {}
    for sg in m.subgraphs or []:
        for op in sg.operators or []:
            ops[names[op.opcodeIndex]] += 1
        for t in sg.tensors or []:
            dt = types.get(t.type, str(t.type))
            dtypes[dt] += 1
            buf = m.buffers[t.buffer] if t.buffer < len(m.buffers) else None
            has_data = buf is not None and ((buf.data is not None and len(buf.data) > 0) or buf.size > 0)
            if has_data:
                entry = weights.setdefault(dt, [0, 0])
                entry[0] += 1
                entry[1] += int(np.prod(t.shape)) if t.shape is not None else 0
    opcodes = set(ops)
    custom = {n for n in opcodes if n not in builtin.values()}
    flex = tuple(sorted(n for n in custom if n.startswith("Flex")))
    return FlatbufferStats(dict(sorted(ops.items())), flex, tuple(sorted(custom - set(flex))),
                           dict(sorted(dtypes.items())), weights)


# ------------------------------------------------------- first-order sensitivities


@dataclasses.dataclass
class _Sensitivity:
    """Per output element: Σ|∂y/∂w|·|w| and Σ|∂y/∂w| per variable, Σ|∂y/∂x| per input."""

    rel: dict[str, np.ndarray]  # output key -> [elements, variables]
    abs: dict[str, np.ndarray]  # output key -> [elements, variables]
    inputs: dict[str, dict[str, np.ndarray]]  # output key -> input -> [elements] (per-row input step applied later)
    fan_in: np.ndarray  # [variables] reduction length K of each variable
    quantizable: np.ndarray  # [variables] bool: rank ≥ 2 and ≥ MIN_WEIGHT_ELEMENTS
    step: np.ndarray  # [variables] max|w|/127


_SENSITIVITY_CACHE: dict[str, _Sensitivity] = {}


def _cache_key(saved_model_dir: str, batches) -> str:
    h = hashlib.sha256(os.path.realpath(saved_model_dir).encode())
    pb = os.path.join(saved_model_dir, "saved_model.pb")
    h.update(str(os.stat(pb).st_mtime_ns if os.path.exists(pb) else 0).encode())
    for b in batches:
        for k in sorted(b):
            h.update(k.encode())
            h.update(np.ascontiguousarray(b[k]).tobytes() if b[k].dtype.kind not in "OU" else repr(b[k]).encode())
    return h.hexdigest()


def _call_target(fn) -> str | None:
    """Name of the one function a signature wrapper calls (Keras' serve and serving_default share it)."""
    calls = [op for op in fn.graph.get_operations() if op.type in ("StatefulPartitionedCall", "PartitionedCall")]
    return calls[0].get_attr("f").name if len(calls) == 1 else None


def _sensitivity(saved_model_dir: str, loaded, batches) -> _Sensitivity:
    """Gradients of every output element of every signature, keyed ``"<signature>/<output>"``."""
    import tensorflow as tf

    key = _cache_key(saved_model_dir, batches)
    keys = sorted(loaded.signatures)
    if key in _SENSITIVITY_CACHE:
        return _SENSITIVITY_CACHE[key]
    variables = []
    seen = set()
    for sig in loaded.signatures.values():
        for v in sig.variables:
            if id(v) not in seen and v.dtype.is_floating:
                seen.add(id(v))
                variables.append(v)
    values = [v.numpy() for v in variables]
    fan_in = np.array([max(1, a.size // a.shape[-1]) if a.ndim >= 2 and a.shape[-1] else 1 for a in values],
                      dtype=np.float64)
    quantizable = np.array([a.ndim >= 2 and a.size >= MIN_WEIGHT_ELEMENTS for a in values], dtype=bool)
    step = np.array([float(np.abs(a).max()) / 127.0 if a.size else 0.0 for a in values])
    abs_vals = [np.abs(a).astype(np.float64) for a in values]
    rel: dict[str, list] = collections.defaultdict(list)
    absl: dict[str, list] = collections.defaultdict(list)
    ins: dict[str, dict[str, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
    computed: collections.Counter = collections.Counter()
    done: dict[str, str] = {}  # call target -> signature key already differentiated
    for sig_key in keys:
        fn = loaded.signatures[sig_key]
        target = _call_target(fn)
        if target is not None and target in done:
            # Same FuncGraph behind another key: same gradients, copy them.
            for out_name in fn.structured_outputs:
                src, dst = f"{done[target]}/{out_name}", f"{sig_key}/{out_name}"
                rel[dst], absl[dst], ins[dst] = rel[src], absl[src], ins[src]
            continue
        if target is not None:
            done[target] = sig_key
        names = signature_inputs(fn)
        for batch in batches:
            # NaN inputs would make every gradient that mixes rows NaN; rows with NaN
            # have NaN outputs (compared by position, no bound needed), so their
            # gradients are taken at 0 and the other rows keep theirs.
            feed = {n: tf.constant(np.nan_to_num(a, nan=0.0) if a.dtype.kind == "f" else a)
                    for n, a in feed_for(batch, names).items()}
            float_inputs = {n: t for n, t in feed.items() if t.dtype.is_floating}
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(variables)
                tape.watch(list(float_inputs.values()))
                outs = fn(**feed)
            for out_name, y in outs.items():
                okey = f"{sig_key}/{out_name}"
                n = int(np.prod(y.shape))
                if not y.dtype.is_floating:
                    rel[okey].append(np.zeros((n, len(variables))))
                    absl[okey].append(np.zeros((n, len(variables))))
                    for name in float_inputs:
                        ins[okey][name].append(np.zeros(n))
                    continue
                r = np.zeros((n, len(variables)))
                a_ = np.zeros((n, len(variables)))
                per_in = {name: np.zeros(n) for name in float_inputs}
                for i in range(n):
                    if computed[okey] >= MAX_GRADIENT_ELEMENTS:
                        # One backward pass per element: cap the cost for large outputs.
                        r[i], a_[i] = np.nan, np.nan
                        for name in float_inputs:
                            per_in[name][i] = np.nan
                        continue
                    computed[okey] += 1
                    seed = tf.reshape(tf.one_hot(i, n, dtype=y.dtype), y.shape)
                    grads = tape.gradient(y, variables + list(float_inputs.values()), output_gradients=seed,
                                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
                    for j in range(len(variables)):
                        # NaN gradients (a NaN output) count as 0: NaN marks only elements not computed.
                        g = np.nan_to_num(np.abs(tf.convert_to_tensor(grads[j]).numpy().astype(np.float64)))
                        r[i, j] = float((g * abs_vals[j]).sum())
                        a_[i, j] = float(g.sum())
                    for name, g in zip(float_inputs, grads[len(variables):]):
                        per_in[name][i] = float(np.nan_to_num(np.abs(g.numpy())).sum())
                rel[okey].append(r)
                absl[okey].append(a_)
                for name in float_inputs:
                    ins[okey][name].append(per_in[name])
            del tape
    sens = _Sensitivity(
        rel={k: np.concatenate(v) for k, v in rel.items()},
        abs={k: np.concatenate(v) for k, v in absl.items()},
        inputs={k: {n: np.concatenate(v) for n, v in d.items()} for k, d in ins.items()},
        fan_in=fan_in, quantizable=quantizable, step=step)
    if len(_SENSITIVITY_CACHE) >= 8:
        _SENSITIVITY_CACHE.clear()
    _SENSITIVITY_CACHE[key] = sens
    return sens


def prepare_bounds(saved_model_dir: str | os.PathLike, examples: Examples) -> None:
    """Computes the gradients the bounds need, ahead of `check_tflite` (which then finds them cached).

    `tflab.export` calls it while the converter works in its worker process.
    """
    saved_model_dir = os.fspath(saved_model_dir)
    _sensitivity(saved_model_dir, load_saved_model(saved_model_dir), normalize_examples(examples))


def _gamma(k: np.ndarray) -> np.ndarray:
    ku = k * UNIT_ROUNDOFF
    return ku / (1.0 - ku)


def _ulp32(x: np.ndarray) -> np.ndarray:
    x = np.abs(x.astype(np.float32))
    return np.spacing(np.maximum(x, np.finfo(np.float32).tiny)).astype(np.float64)


def _bounds(quantization: str, okey: str, ref: np.ndarray, sens: _Sensitivity, dyn_quantized: bool,
            input_scales: Mapping[str, float], output_scale: float | None) -> np.ndarray:
    """Elementwise bound for one output (flattened, all examples concatenated).

    Elements beyond `MAX_GRADIENT_ELEMENTS` have no gradients; they get the
    largest bound computed for this output.
    """
    b = _bounds_computed(quantization, okey, ref, sens, dyn_quantized, input_scales, output_scale)
    missing = np.isnan(b)
    if missing.any() and (~missing).any():
        b[missing] = b[~missing].max()
    return b


def _bounds_computed(quantization: str, okey: str, ref: np.ndarray, sens: _Sensitivity, dyn_quantized: bool,
                     input_scales: Mapping[str, float], output_scale: float | None) -> np.ndarray:
    if ref.dtype.kind not in "f":
        return np.zeros(ref.size)
    rel, ab = sens.rel[okey], sens.abs[okey]
    # A NaN reference element has no ULP: its bound is 0 (only a NaN in LiteRT matches it).
    # The elementwise term is 4 ULP of the element or of the output's largest
    # magnitude, whichever is larger: exp(x - max) in a softmax carries the
    # absolute rounding of its argument (≈ u·|x - max|) as a *relative* error,
    # so a 1e-33 probability can be ~50 of its own ULPs off while being exact
    # at the scale of the tensor (measured: 6.6e-39 on a 1e-33 element).
    finite = np.abs(ref[np.isfinite(ref)])
    scale = _ulp32(np.array([finite.max()]))[0] if finite.size else 0.0
    float_b = rel @ (2.0 * _gamma(sens.fan_in)) + ELEMENTWISE_ULPS * np.maximum(
        np.nan_to_num(_ulp32(ref)), scale)
    if quantization == "none":
        return float_b
    if quantization == "float16":
        return float_b + FLOAT16_STEP * rel.sum(axis=1)
    weight_term = ab @ (np.where(sens.quantizable, sens.step, 0.0) / 2.0)
    if quantization == "dynamic":
        return float_b + (2.0 * weight_term if dyn_quantized else 0.0)
    # int8: weights, input quantization, intermediate requantization, final rounding.
    input_term = np.zeros(ref.size)
    for name, s in input_scales.items():
        if name in sens.inputs.get(okey, {}):
            input_term = input_term + sens.inputs[okey][name] * (s / 2.0)
    # At least one output step: TFLite's int8 kernels (softmax in particular)
    # routinely land one step away from the correctly rounded value.
    return np.maximum(float_b + 2.0 * (weight_term + input_term) + (output_scale or 0.0) / 2.0,
                      output_scale or 0.0)


# ---------------------------------------------------------------------- checking


def _runtime_name(interp) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("ai-edge-litert")
    except PackageNotFoundError:
        v = "?"
    delegated = any(d.get("op_name") == "DELEGATE" for d in interp._get_ops_details())  # noqa: SLF001
    return f"ai_edge_litert {v} Interpreter" + (" + XNNPACK delegate" if delegated else " (builtin kernels)")


def _details(d: Mapping) -> dict:
    scale, zp = d.get("quantization", (0.0, 0))
    return {"dtype": np.dtype(d["dtype"]).name, "shape_signature": tuple(int(x) for x in d["shape_signature"]),
            "quantization": (float(scale), int(zp)) if scale else None}


def _quantize(a: np.ndarray, detail: Mapping) -> np.ndarray:
    dt = np.dtype(detail["dtype"])
    scale, zp = detail.get("quantization", (0.0, 0))
    if dt.kind in "iu" and scale and a.dtype.kind == "f":
        info = np.iinfo(dt)
        return np.clip(np.round(a / scale + zp), info.min, info.max).astype(dt)
    return a


def _dequantize(a: np.ndarray, detail: Mapping) -> np.ndarray:
    scale, zp = detail.get("quantization", (0.0, 0))
    if a.dtype.kind in "iu" and scale:
        return ((a.astype(np.float32) - zp) * scale).astype(np.float32)
    return a


def argmax_agreement(got: np.ndarray, want: np.ndarray) -> tuple[float, int]:
    """(fraction of rows where TF's argmax class has LiteRT's top value, rows where LiteRT ties).

    A quantized output can tie several classes at its top value; plain argmax
    would pick the first of them, so TF's class counts as agreeing when it is
    among the tied ones.

    Args:
        got: LiteRT output rows, shape ``(rows, classes)``.
        want: TF output rows, same shape.
    """
    wa = want.argmax(axis=-1)
    top = got.max(axis=-1)
    agree = float((got[np.arange(len(wa)), wa] == top).mean()) if len(wa) else 1.0
    tied = int(((got == top[:, None]).sum(axis=-1) > 1).sum())
    return agree, tied


def _run_signatures(runners, loaded, batches, notes):
    """Runs every signature in TF and LiteRT on every example; collects outputs by name."""
    import tensorflow as tf

    missing = set(loaded.signatures) - set(runners)
    # Keras signs its endpoint as both 'serve' and 'serving_default': an alias
    # of a converted signature (same function called) is not missing.
    targets = {_call_target(loaded.signatures[k]) for k in runners if k in loaded.signatures}
    missing = {k for k in missing if _call_target(loaded.signatures[k]) not in targets - {None}}
    if missing:
        notes.append(f"TFLiteConverter.from_saved_model converted signature(s) {sorted(runners)} only; "
                     f"{sorted(missing)} are not in the TFLite model (pass signature_keys to convert them)")
    multi = len(runners) > 1
    signatures: dict[str, dict] = {}
    collected: dict[str, dict[str, list]] = {}
    out_details: dict[str, Mapping] = {}
    in_scales: dict[str, float] = {}
    full_keys: dict[str, str] = {}
    for key, runner in runners.items():
        in_d = runner.get_input_details()
        o_d = runner.get_output_details()
        signatures[key] = {"inputs": {n: _details(d) for n, d in sorted(in_d.items())},
                           "outputs": {n: _details(d) for n, d in sorted(o_d.items())}}
        fn = loaded.signatures[key]
        sig_in = signature_inputs(fn)
        check_examples(batches, sig_in, f"signature {key!r}")
        for n, d in in_d.items():
            if d["quantization"][0]:
                in_scales[n] = float(d["quantization"][0])
        for batch in batches:
            feed = feed_for(batch, sig_in)
            want = {k: v.numpy() for k, v in fn(**{n: tf.constant(a) for n, a in feed.items()}).items()}
            got = runner(**{n: _quantize(a, in_d[n]) for n, a in feed.items()})
            if set(got) != set(want):
                raise TflabError(f"signature {key!r}: LiteRT outputs {sorted(got)} are not TF's {sorted(want)}, "
                                 f"so they cannot be compared by name")
            for n, w in want.items():
                okey = f"{key}/{n}" if multi else n
                collected.setdefault(okey, {"got": [], "want": []})
                collected[okey]["got"].append(_dequantize(np.asarray(got[n]), o_d[n]))
                collected[okey]["want"].append(w)
                out_details[okey] = o_d[n]
                full_keys[okey] = f"{key}/{n}"
    return signatures, collected, out_details, in_scales, full_keys


def check_tflite(model: bytes, saved_model_dir: str | os.PathLike, examples: Examples,
                 quantization: str = "none", *, float_size: int | None = None,
                 convert_seconds: float | None = None) -> TFLiteCheck:
    """Runs a converted flatbuffer with LiteRT and compares it with the SavedModel in TF.

    Args:
        model: flatbuffer bytes from `convert`.
        saved_model_dir: the SavedModel it was converted from (the TF reference).
        examples: ``{name: array}`` or a list of them, matching every signature.
        quantization: which recipe made ``model`` (selects the bound).
        float_size: size in bytes of the float variant, for ``size_ratio``.
        convert_seconds: recorded in the report as is.

    Returns:
        A `TFLiteCheck` (see `tflite_roundtrip`).

    Raises:
        UsageError: examples do not match a signature.
    """
    from ai_edge_litert.interpreter import Interpreter

    saved_model_dir = os.fspath(saved_model_dir)
    batches = normalize_examples(examples)
    stats = analyze_flatbuffer(model)
    size_ratio = None if not float_size else len(model) / float_size
    notes: list[str] = []
    dyn_quantized = stats.weights.get("int8", [0, 0])[0] > 0
    float_w = stats.weights.get("float32", [0, 0])
    base = dict(op_counts=stats.op_counts, flex_ops=stats.flex_ops, custom_ops=stats.custom_ops,
                tensor_dtypes=stats.tensor_dtypes, weights=stats.weights, size_bytes=len(model),
                size_ratio=size_ratio, convert_seconds=convert_seconds, config=_runtime_config_dict())
    if quantization == "dynamic" and not dyn_quantized:
        notes.append(f"no weight tensor was quantized: dynamic-range quantization only quantizes weight "
                     f"tensors of at least {MIN_WEIGHT_ELEMENTS} elements, so all {float_w[0]} weight "
                     f"tensors ({float_w[1]} elements) stayed float32 and this variant is the float model"
                     + (f" (size ratio {size_ratio:.2f})" if size_ratio else ""))
    loaded = load_saved_model(saved_model_dir)
    check_rows(batches)
    check_unused(batches, {k: signature_inputs(f) for k, f in loaded.signatures.items()})
    try:
        # The signature runner resizes inputs to each example's shape and
        # allocates on call, so a None batch dim needs no allocate_tensors here.
        interp = Interpreter(model_content=model)
        runners = {k: interp.get_signature_runner(k) for k in interp.get_signature_list()}
        signatures, collected, out_details, in_scales, full_keys = _run_signatures(runners, loaded, batches,
                                                                                   notes)
    except (RuntimeError, ValueError) as e:
        if isinstance(e, UsageError):
            raise
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if stats.flex_ops:
            reason = (f"Flex op(s) {', '.join(stats.flex_ops)} need the Flex delegate, which the Python "
                      f"LiteRT interpreter does not have ({reason[:200]})")
        return TFLiteCheck(quantization=quantization, bit_exact=None, max_abs_error=None, bound=None,
                           within_bound=None, outputs={}, runtime=f"not run: {reason}",
                           explanation="not checked: LiteRT could not run this model in Python",
                           signatures={}, notes=tuple(notes), **base)
    runtime = _runtime_name(interp)
    need_bounds = any(np.concatenate([w.ravel() for w in c["want"]]).dtype.kind == "f" for c in collected.values())
    sens, no_bound = None, ""
    if need_bounds:
        try:
            sens = _sensitivity(saved_model_dir, loaded, batches)
        except LookupError as e:  # an op without a registered gradient
            no_bound = str(e).strip().splitlines()[0][:200]

    outputs = {}
    exact = True
    for okey, c in collected.items():
        got = np.concatenate([g.ravel() for g in c["got"]])
        want = np.concatenate([w.ravel() for w in c["want"]])
        det = out_details[okey]
        scale = float(det["quantization"][0]) or None
        if got.dtype != want.dtype or got.tobytes() != want.tobytes():
            exact = False
        if want.dtype.kind == "f":
            g32, w32 = got.astype(np.float32), want.astype(np.float32)
            both_nan = np.isnan(g32) & np.isnan(w32)
            with np.errstate(invalid="ignore"):
                diff = np.abs(g32.astype(np.float64) - w32.astype(np.float64))
            # NaN in the same place on both sides matches; NaN on one side is infinitely off.
            diff = np.where(both_nan | (g32 == w32), 0.0, np.where(np.isnan(diff), np.inf, diff))
            ulps = np.where(both_nan, 0, ulp_distance(g32, w32))
            one_nan = int((np.isnan(g32) != np.isnan(w32)).sum())
            if one_nan:
                notes.append(f"{okey}: {one_nan} element(s) are NaN on one side only (TF "
                             f"{int(np.isnan(w32).sum())} NaN, LiteRT {int(np.isnan(g32).sum())}): an infinite "
                             f"error; e.g. dynamic-range and int8 kernels quantize a NaN input to an integer")
            bound = (np.full(want.size, np.nan) if sens is None else
                     _bounds(quantization, full_keys[okey], want, sens, dyn_quantized, in_scales, scale))
            if sens is not None:
                estimated = int(np.isnan(sens.rel[full_keys[okey]][:, :1]).sum()) if len(sens.fan_in) else 0
                if estimated:
                    notes.append(f"{okey}: bounds computed by gradient for {want.size - estimated} of "
                                 f"{want.size} elements; the other {estimated} use the largest of those "
                                 f"(an estimate; give fewer or smaller examples for a full bound)")
        else:
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            ulps = np.zeros(1, dtype=np.int64)
            bound = np.zeros(want.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / bound)
        ref_max = float(np.nanmax(np.abs(want))) if want.size and not np.isnan(want).all() else 0.0
        agree = None
        if c["want"][0].ndim >= 2 and c["want"][0].shape[-1] >= 2 and want.dtype.kind == "f":
            g_rows = np.concatenate([g.reshape(-1, g.shape[-1]) for g in c["got"]])
            w_rows = np.concatenate([w.reshape(-1, w.shape[-1]) for w in c["want"]])
            # Rows where TF has a NaN have no class to agree on.
            keep = ~np.isnan(w_rows).any(axis=-1)
            agree, tied = argmax_agreement(np.nan_to_num(g_rows[keep], nan=-np.inf), w_rows[keep])
            if not keep.any():
                agree = None
            if tied and scale:
                notes.append(f"{okey}: {tied} LiteRT row(s) tie several classes at the top value "
                             f"(argmax agreement counts TF's class as agreeing when it is among them)")
        finite = want[np.isfinite(want)] if want.dtype.kind == "f" else want
        rng = float(np.ptp(finite)) if finite.size and want.dtype.kind in "fiu" else 0.0
        if want.size and want.dtype.kind == "f" and not finite.size:
            notes.append(f"TF's {okey} is NaN or ±inf everywhere (NaN examples?): only whether LiteRT has "
                         f"NaN/inf in the same places is checked")
        elif want.size and want.dtype.kind == "f" and rng == 0.0:
            notes.append(f"TF's {okey} is the same value ({want[0]:.6g}) for every element of every example, "
                         f"so these errors say little about the variant (e.g. a random-weight model whose "
                         f"logits collapse)")
        worst = int(np.argmax(ratio)) if ratio.size else 0
        outputs[okey] = OutputError(
            name=okey, dtype=np.dtype(det["dtype"]).name,
            shape_signature=tuple(int(x) for x in det["shape_signature"]),
            max_abs_error=float(diff.max()) if diff.size else 0.0,
            max_rel_error=float(diff.max() / ref_max) if ref_max else float(diff.max() if diff.size else 0.0),
            max_ulp=int(ulps.max()) if ulps.size else 0,
            bound=float(bound.max()) if bound.size else 0.0,
            bound_ratio=float(ratio.max()) if ratio.size else 0.0,
            argmax_agreement=agree, reference_range=rng,
            quantization=(scale, int(det["quantization"][1])) if scale else None,
            worst_abs_error=float(diff[worst]) if diff.size else 0.0,
            worst_bound=float(bound[worst]) if bound.size else 0.0)
    explanation = _explanation(quantization, dyn_quantized, outputs)
    worst_output = max(outputs, key=lambda k: outputs[k].bound_ratio, default=None)
    if not exact and quantization == "none":
        rng_ops = _stateful_random_ops(loaded)
        if rng_ops:
            notes.append(f"the graph uses stateful random op(s) {', '.join(rng_ops)}: TF and LiteRT draw "
                         f"different random numbers, which is the likely cause of any difference here")
    if no_bound:
        explanation = (f"no bound: the first-order propagation needs TF gradients, and {no_bound}; "
                       f"the errors are measured but not judged")
    return TFLiteCheck(
        quantization=quantization, bit_exact=exact,
        max_abs_error=max((o.max_abs_error for o in outputs.values()), default=0.0),
        bound=outputs[worst_output].bound if worst_output else 0.0, worst_output=worst_output,
        within_bound=None if no_bound else all(o.within_bound for o in outputs.values()),
        outputs=outputs, runtime=runtime, explanation=explanation, signatures=signatures,
        notes=tuple(notes), **base)


_RANDOM_OPS = ("RandomUniform", "RandomStandardNormal", "RandomUniformInt", "TruncatedNormal",
               "Multinomial", "RandomShuffle", "RandomGamma", "RandomPoisson")


def _stateful_random_ops(loaded) -> list[str]:
    """Random ops in the signatures' graphs and the functions they call."""
    found: set[str] = set()
    for fn in loaded.signatures.values():
        graph = fn.graph
        defs = [graph.as_graph_def()]
        for g in defs:
            for node in g.node:
                if node.op in _RANDOM_OPS:
                    found.add(node.op)
            for f in g.library.function:
                for node in f.node_def:
                    if node.op in _RANDOM_OPS:
                        found.add(node.op)
    return sorted(found)


def check_rows(batches: list[dict[str, np.ndarray]]) -> None:
    """Refuses examples with zero rows: nothing would be compared or calibrated.

    Raises:
        UsageError: a batch whose first dimension is 0.
    """
    for b in batches:
        rows = [a.shape[0] for a in b.values() if a.ndim]
        if rows and min(rows) == 0:
            raise UsageError("examples have 0 rows: nothing to compare or calibrate; give at least one row")


def _explanation(quantization: str, dyn_quantized: bool, outputs: Mapping[str, OutputError]) -> str:
    float_why = ("XNNPACK and the converter's fusions (BatchNorm folded into weights, bias and activation "
                 "fused) reorder float32 sums; a length-K sum in another order is off by at most 2·γ_K "
                 "relative weight error (Higham §3.1), propagated to the output with TF's gradients "
                 f"(Σ 2γ_K·|∂y/∂w|·|w|) plus {ELEMENTWISE_ULPS} ULP for exp/tanh kernels")
    if quantization == "none":
        return float_why
    if quantization == "float16":
        return ("weights are stored as float16 (relative step 2^-11) and dequantized to float32: "
                "Σ 2^-11·|∂y/∂w|·|w| to first order, plus the float bound")
    if quantization == "dynamic":
        if not dyn_quantized:
            return (f"no weight tensor has ≥ {MIN_WEIGHT_ELEMENTS} elements, so none was quantized and the "
                    f"float bound applies: {float_why}")
        return ("int8 weights with step s = max|w|/127 move each weight by ≤ s/2: Σ (s/2)·|∂y/∂w| to first "
                "order; the hybrid kernels also quantize activations to int8 at run time, which we estimate "
                "as a second term of the same size (×2, an estimate, not a proof), plus the float bound")
    steps = [f"{o.name} {o.bound / o.quantization[0]:.1f}" for o in outputs.values() if o.quantization]
    in_steps = f"; in output steps: {', '.join(steps)}" if steps else ""
    return ("full-integer: half an output step for the final rounding, plus the first-order effect of the "
            "weight steps and of the input quantization step, doubled to estimate the requantization of "
            f"intermediate tensors (an estimate, not a proof){in_steps}")


def tflite_roundtrip(saved_model_dir: str | os.PathLike, examples: Examples,
                     quantization: str = "none", *, select_tf_ops: bool = False,
                     float_size: int | None = None) -> TFLiteCheck:
    """Converts a SavedModel to TFLite, runs it with LiteRT, and checks it against TF.

    Args:
        saved_model_dir: a SavedModel folder (e.g. from `save_and_reload`).
        examples: ``{input name: array}`` (one batch), a list of such dicts,
            or ``{signature key: {input name: array}}``; each signature is fed
            the names it takes (dtypes and shapes must match its SignatureDef;
            0 rows is an error). For ``"int8"`` they also form the
            representative dataset (one sample per row and signature).
        quantization: ``"none"``, ``"dynamic"``, ``"float16"`` or ``"int8"``.
        select_tf_ops: convert ops outside the builtins as Flex ops (the
            result is reported as not run: Python LiteRT cannot run Flex ops).
        float_size: the float variant's size in bytes, to report ``size_ratio``;
            for a quantized variant it is measured by converting ``"none"`` too
            when not given.

    Returns:
        A `TFLiteCheck`: ``.bit_exact``, ``.max_abs_error``, ``.bound``,
        ``.within_bound``, ``.outputs`` by name, ``.op_counts``, ``.flex_ops``,
        ``.size_bytes``, ``.runtime``, ``.explanation``.

    Raises:
        UnsupportedOpsError: an op is not a TFLite builtin (and ``select_tf_ops`` is
            False), or is a custom op (``.kind == "custom"``: needs allow_custom_ops
            and a TFLite kernel).
        UsageError: a bad quantization name, or examples that do not match the signature.
        TflabError: the converter failed otherwise.

    Example (the SavedModel of `tflab.save_and_reload`'s example):

    >>> c = tflab.tflite_roundtrip("/tmp/scale_sm", {"x": np.ones(3, np.float32)}, "none")
    >>> c
    TFLiteCheck(quantization='none', bit_exact=True, max_abs_error=0, bound=1.19e-06, within_bound=True, size_bytes=936, flex_ops=[])
    >>> c.op_counts
    {'MUL': 1}
    """
    check_rows(normalize_examples(examples))
    t0 = time.perf_counter()
    model = convert(saved_model_dir, quantization, examples, select_tf_ops=select_tf_ops)
    seconds = time.perf_counter() - t0
    if float_size is None:
        float_size = len(model) if quantization == "none" else len(
            convert(saved_model_dir, "none", select_tf_ops=select_tf_ops))
    return check_tflite(model, saved_model_dir, examples, quantization, float_size=float_size,
                        convert_seconds=seconds)
