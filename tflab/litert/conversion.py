"""Lab step 8, conversion: a SavedModel → a TFLite flatbuffer, and what the flatbuffer holds.

`convert` runs ``tf.lite.TFLiteConverter.from_saved_model`` with one of four
recipes (``none``, ``dynamic``, ``float16``, ``int8``; the int8 one calibrated
by a representative dataset made of the examples' rows) and turns the
converter's failures into one clear error (`UnsupportedOpsError` names the
ops outside the builtins and the signatures that hold them).
`analyze_flatbuffer` reads the result with TF's generated schema: op
histogram, tensor dtypes, weight buffers.

Select-TF (Flex) ops convert only with ``SELECT_TF_OPS``, and the Python
LiteRT interpreter cannot run them (it has no Flex delegate linked): such a
variant is reported as not checked, with the interpreter's reason.

The error bounds are in `tflab.litert.bounds`; running the flatbuffer with
LiteRT and checking it against TF is `tflab.litert.check`.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import warnings
from typing import Any, Callable, Mapping

import numpy as np

from tflab.errors import TflabError, UsageError
from tflab.examples import Examples, feed_for
from tflab._tf.lite import keep_tensor_lists, reusing_saved_model_load
from tflab.litert.converter_errors import ConversionFailed, parse_converter_error
from tflab.saved_model import load_saved_model, signature_inputs

QUANTIZATIONS = ("none", "dynamic", "float16", "int8")


class UnsupportedOpsError(UsageError):
    """The model uses ops outside the TFLite builtins.

    Attributes:
        ops: the TF op names, e.g. ``("StringLength",)``.
        kind: ``"flex"`` (a TF op ``SELECT_TF_OPS`` would convert as a Flex op)
            or ``"custom"`` (an op TF itself does not define, e.g. the project's
            WarpSoftmax: the converter reports ERROR_NEEDS_CUSTOM_OPS; it needs
            ``allow_custom_ops=True`` and a TFLite kernel).
        signatures: op → the signature keys whose graphs hold it, e.g.
            ``{"SparseSoftmaxCrossEntropyWithLogits": ("evaluate",)}`` (empty
            tuple when unknown); the message names them too.
    """

    def __init__(self, message: str, ops: tuple[str, ...], kind: str = "flex",
                 signatures: Mapping[str, tuple[str, ...]] | None = None):
        super().__init__(message)
        self.ops = ops
        self.kind = kind
        self.signatures = dict(signatures or {})


# -------------------------------------------------------------------- conversion


def _representative(batches: Examples, takes: Mapping[str, list[str]] | None = None):
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
    from tflab._tf.lite import (from_saved_model_keys, saved_model_converter,
                                saved_model_converter_as_from_saved_model)

    # from_saved_model loads the whole SavedModel in Python (tf.saved_model.load) only to
    # read its signature keys, on every call; the worker that converts two variants, and
    # int8's calibration setup, loaded it again each time. The same keys from the load
    # this process keeps (`load_saved_model`) give the same converter.
    keys = from_saved_model_keys(load_saved_model(saved_model_dir))
    if keys is not None:
        conv = saved_model_converter_as_from_saved_model(saved_model_dir, {tf.saved_model.SERVING}, keys)
        if conv.saved_model_dir:
            return conv
    try:
        return tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
    except ValueError as e:
        if "Invalid signature key 'serving_default'" not in str(e):
            raise
    loaded = load_saved_model(saved_model_dir)
    keys = list(loaded.signatures)
    conv = saved_model_converter(saved_model_dir, {tf.saved_model.SERVING}, keys)
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
            examples: Examples | Any = None, *, select_tf_ops: bool = False, lower_tensor_lists: bool = True,
            keep_calibration: bool = False) -> bytes:
    """Converts a SavedModel to a TFLite flatbuffer with one of the four recipes.

    Args:
        saved_model_dir: a SavedModel folder (every SignatureDef is converted).
        quantization: ``"none"``, ``"dynamic"`` (``optimizations=[DEFAULT]``),
            ``"float16"`` (``supported_types=[tf.float16]``) or ``"int8"`` (full
            integer: ``TFLITE_BUILTINS_INT8``, int8 inputs/outputs, calibrated by
            a representative dataset made of the examples' rows).
        examples: required for ``"int8"``: a `tflab.examples.Examples` (used as is) or any
            form `Examples.of` takes (``{name: array}``, a list of them, per signature).
        select_tf_ops: also allow ``SELECT_TF_OPS`` (Flex ops).
        lower_tensor_lists: False keeps tensor-list ops as Flex ops
            (``converter._experimental_lower_tensor_list_ops = False``, with ``select_tf_ops``).
        keep_calibration: for ``"int8"``, also keep the calibrated model this conversion made, for
            `recorded_calibration` (QuantizationDebugger's starting point, `tflab.litert.attribution`).

    Returns:
        The flatbuffer bytes.

    Raises:
        UnsupportedOpsError: ops outside the TFLite builtins (named in the message).
        UsageError: unknown quantization, or ``"int8"`` without examples.
        ConversionFailed: any other converter failure: the converter's cause, op and node in one line
            (`tflab.litert.converter_errors`), the parts in ``.failure``.
    """
    conv = make_converter(saved_model_dir, quantization, examples, select_tf_ops=select_tf_ops)
    if not lower_tensor_lists:
        keep_tensor_lists(conv)
    captured: dict = {}
    try:
        with warnings.catch_warnings():
            # int8 calibration runs TF's own deprecated tf.lite.Interpreter; not ours to fix.
            warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated")
            # convert() loads the whole SavedModel in Python once more for its debug info: the
            # load this process keeps answers it (same bytes, ~1.2 s less per variant).
            with _captured_stderr() as captured, reusing_saved_model_load(
                    os.fspath(saved_model_dir), load_saved_model(saved_model_dir)):
                if not (keep_calibration and quantization == "int8" and not select_tf_ops):
                    return conv.convert()
                from tflab._tf.calibration import recording_calibration

                with recording_calibration() as recorded:
                    model = conv.convert()
                _keep_calibration(saved_model_dir, examples, recorded)
                return model
    except Exception as e:  # ConverterError carries structured errors; others are quoted
        err = _explain_converter_error(e, quantization, os.fspath(saved_model_dir))
        if type(err) is ConversionFailed and err.failure is None and captured.get("text"):
            # Not an error we explain: keep the converter's own diagnostics visible.
            os.write(2, captured["text"].encode(errors="replace"))
        raise err from e


# (saved_model.pb path, mtime, examples digest) -> {"calibrated": flatbuffer, and QuantizationDebugger's
# "debug"/"nondebug" models when a worker made them}; one at a time
_CALIBRATIONS: dict = {}


def examples_digest(examples: Examples | Any) -> str:
    """A digest of the example batches as the representative dataset reads them (names, dtypes, shapes, bytes)."""
    import hashlib

    h = hashlib.sha256()
    for batch in Examples.of(examples):
        for name in sorted(batch):
            a = np.ascontiguousarray(batch[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes() if a.dtype.kind != "O" else repr(a.tolist()).encode())
        h.update(b";")
    return h.hexdigest()


def _calibration_key(saved_model_dir, digest: str) -> tuple:
    pb = os.path.join(os.fspath(saved_model_dir), "saved_model.pb")
    return os.path.realpath(pb), os.stat(pb).st_mtime_ns, digest


def remember_calibration(saved_model_dir: str | os.PathLike, digest: str, calibrated: bytes,
                         later: Callable[[], Mapping[str, bytes]] | None = None) -> None:
    """Keeps the calibrated (calibrate-only) int8 model of ``saved_model_dir`` on the examples with ``digest``.

    ``later``: returns QuantizationDebugger's models made from it in another process
    (`tflab._tf.calibration.debugger_models`; ``{}`` when they were not made), waiting for them;
    called by `recorded_calibration` with ``models=True``.
    """
    _CALIBRATIONS.clear()
    _CALIBRATIONS[_calibration_key(saved_model_dir, digest)] = {"calibrated": bytes(calibrated), "later": later}


def recorded_calibration(saved_model_dir: str | os.PathLike, examples: Examples | Any, *,
                         models: bool = False) -> Any:
    """The calibrated int8 model an earlier int8 conversion of this SavedModel on these examples made, or None.

    It is what ``QuantizationDebugger(converter=make_converter(saved_model_dir, "int8", examples))``
    converts first (`tflab._tf.calibration`); taken once (the bytes are dropped when returned).
    With ``models``, a dict: ``"calibrated"``, and ``"debug"``/``"nondebug"`` where the int8
    conversion's worker quantized them (waited for here).
    """
    try:
        key = _calibration_key(saved_model_dir, examples_digest(examples))
    except OSError:
        return None
    kept = _CALIBRATIONS.pop(key, None)
    if kept is None:
        return None
    if not models:
        return kept["calibrated"]
    made = kept["later"]() if kept["later"] is not None else {}
    return {"calibrated": kept["calibrated"], **made}


def drop_calibrations() -> None:
    """Forgets the kept calibrated model (an export that ends without its kept-float fix)."""
    _CALIBRATIONS.clear()


def _keep_calibration(saved_model_dir, examples, recorded: dict) -> None:
    """Makes QuantizationDebugger's calibrate-only model from the int8 conversion just recorded, and keeps it."""
    from tflab._tf.calibration import calibrate_only_model

    try:
        calibrated = calibrate_only_model(make_converter(saved_model_dir, "int8", examples), recorded)
    except Exception:  # noqa: BLE001 - an optimization: the debugger converts for itself instead
        calibrated = None
    if calibrated is not None:
        remember_calibration(saved_model_dir, examples_digest(examples), calibrated)


def refuse_infinite_calibration(examples: Examples) -> None:
    """Refuses int8 calibration examples that hold ±inf in a float input.

    A calibration range that reaches ±inf has no int8 scale, and TF 2.21's converter ends its process
    (SIGSEGV) on such a sample instead of raising (its calibrator records each float tensor's min and
    max, ``tensorflow/lite/python/optimize/calibrator.py``). NaN is left to `Examples.check_rows`.

    Args:
        examples: the calibration batches, ``{input name: ndarray}`` each (any dtype; float inputs
            of any width are scanned, integer ones are skipped).

    Returns:
        None when no float input holds ±inf.

    Raises:
        UsageError: naming the input, the batch and the row, and what to do.
    """
    for b, batch in enumerate(examples):
        for name, a in batch.items():
            a = np.asarray(a)
            if a.dtype.kind == "f" and np.isinf(a).any():
                row = int(np.argwhere(np.isinf(a))[0][0]) if a.ndim else 0
                raise UsageError(f"int8 calibration: input {name!r} holds ±inf (batch {b}, row {row}); a range that "
                                 f"reaches inf has no int8 scale, and TF's converter crashes on it: drop those rows, "
                                 f"pass other examples (--examples FILE.npz), or leave int8 out "
                                 f"(--quantize none,dynamic,float16)")


def make_converter(saved_model_dir: str | os.PathLike, quantization: str = "none",
                   examples: Examples | Any = None, *, select_tf_ops: bool = False):
    """The ``tf.lite.TFLiteConverter`` `convert` runs, set up for one recipe, not yet run.

    `tflab.litert.attribution` hands the int8 one to ``tf.lite.experimental.QuantizationDebugger``.

    Args:
        saved_model_dir, quantization, examples, select_tf_ops: as for `convert`.

    Returns:
        The converter (every signature; for ``"int8"`` its representative dataset set).

    Raises:
        UsageError: unknown quantization, or ``"int8"`` without examples.
    """
    import tensorflow as tf

    if quantization not in QUANTIZATIONS:
        raise UsageError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    from tflab.custom_op_loader import load_custom_ops_for
    from tflab._tf.lite import converted_signature_keys

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
        refuse_infinite_calibration(Examples.of(examples))
        loaded = load_saved_model(saved_model_dir)
        takes: dict[str, list[str]] = {}
        seen_targets: set = set()
        # Calibrate only the keys the converter converts: from_saved_model keeps
        # serving_default alone for a Keras model.export artifact (lite.py), and the
        # calibrator refuses a sample for any other key ("Invalid signature_key").
        converted = set(converted_signature_keys(conv) or loaded.signatures)
        # The converter keeps one of several keys calling the same function
        # (Keras' serve/serving_default): calibrate that one, serving_default first.
        for k in sorted((k for k in loaded.signatures if k in converted),
                        key=lambda k: (k != "serving_default", k)):
            target = call_target(loaded.signatures[k])
            if target is not None and target in seen_targets:
                continue
            seen_targets.add(target)
            takes[k] = list(signature_inputs(loaded.signatures[k]))
        conv.representative_dataset = _representative(Examples.of(examples), takes)
        ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    if select_tf_ops:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    conv.target_spec.supported_ops = ops
    return conv


def _explain_converter_error(e: Exception, quantization: str,
                             saved_model_dir: str | None = None) -> TflabError:
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
        located, where = _where_ops(saved_model_dir, custom, str(e))
        hint = " (or use tf.nn.softmax in the exported model)" if "WarpSoftmax" in custom else ""
        return UnsupportedOpsError(
            f"op(s) {located} are custom TF ops, neither TFLite builtins nor Flex ops, so the {quantization} "
            f"conversion failed; SELECT_TF_OPS cannot convert them: converting needs "
            f"converter.allow_custom_ops=True plus a TFLite kernel for {names} registered in the runtime, "
            f"which the Python LiteRT interpreter does not have{hint}", tuple(custom), kind="custom",
            signatures=where)
    if flex:
        located, where = _where_ops(saved_model_dir, flex, str(e))
        return UnsupportedOpsError(
            f"op(s) {located} are not TFLite builtins, so the {quantization} conversion with builtins only "
            f"failed; converter.target_spec.supported_ops=[TFLITE_BUILTINS, SELECT_TF_OPS] would convert "
            f"them as Flex ops, but the Python LiteRT interpreter cannot run Flex ops, so the round trip "
            f"cannot be checked here", tuple(flex), signatures=where)
    text = str(e).strip()
    from tflab.custom_op_loader import unregistered_op

    missing = unregistered_op(text)
    if missing:
        from tflab.custom_op_loader import PROJECT_CUSTOM_OPS

        lib = PROJECT_CUSTOM_OPS.get(missing, "the library that defines it (tf.load_op_library('....so'))")
        return UsageError(f"the SavedModel uses op {missing}, which is not registered in the converter's "
                          f"process: load {lib} first")
    failure = parse_converter_error(text)
    if failure is not None:  # the converter's own cause, op and node, not its location line
        return ConversionFailed(failure.line(quantization), failure)
    first = next((ln for ln in text.splitlines() if "error" in ln.lower()), text.splitlines()[0] if text else "")
    return ConversionFailed(f"TFLite {quantization} conversion failed: {type(e).__name__}: {first.strip()[:300]}")


# ------------------------------------------------------------- flatbuffer analysis


@dataclasses.dataclass(frozen=True)
class FlatbufferStats:
    """What the flatbuffer holds, read with TF's generated schema (schema_py_generated)."""

    op_counts: dict[str, int]
    flex_ops: tuple[str, ...]
    custom_ops: tuple[str, ...]
    tensor_dtypes: dict[str, int]
    weights: dict[str, list[int]]  # dtype -> [unique constant buffers, elements]
    shared_weights: int = 0  # constant buffers that tensors of several subgraphs point at
    subgraphs: int = 1


def analyze_flatbuffer(model: bytes) -> FlatbufferStats:
    """Op histogram, tensor dtypes and constant (weight) tensors of a TFLite flatbuffer.

    We read the flatbuffer itself rather than the interpreter's op list
    because a model with Flex ops cannot even be prepared by the Python
    interpreter, and a delegate (XNNPACK) replaces the ops it runs by
    ``DELEGATE`` nodes.

    Weights are counted per buffer, not per tensor: each subgraph (one per
    signature) has its own tensor table, and the converter points the tensors
    of several subgraphs that hold the same variable at one buffer
    (``Tensor.buffer`` indexes ``Model.buffers``, tensorflow/compiler/mlir/
    lite/schema/schema.fbs), so the file stores it once. ``shared_weights``
    counts the buffers used by more than one subgraph.
    """
    from tflab._tf.lite import schema, unpack_model

    fb = schema()

    m = unpack_model(model)  # parsed once per model bytes, shared with read_ops and read_graphs
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
    users: dict[int, set[int]] = {}  # buffer index -> subgraphs whose tensors point at it
    for si, sg in enumerate(m.subgraphs or []):
        for op in sg.operators or []:
            ops[names[op.opcodeIndex]] += 1
        for t in sg.tensors or []:
            dt = types.get(t.type, str(t.type))
            dtypes[dt] += 1
            buf = m.buffers[t.buffer] if t.buffer < len(m.buffers) else None
            has_data = buf is not None and ((buf.data is not None and len(buf.data) > 0) or buf.size > 0)
            if has_data:
                if t.buffer not in users:  # one buffer is stored once, whoever points at it
                    entry = weights.setdefault(dt, [0, 0])
                    entry[0] += 1
                    entry[1] += int(np.prod(t.shape)) if t.shape is not None else 0
                users.setdefault(t.buffer, set()).add(si)
    opcodes = set(ops)
    custom = {n for n in opcodes if n not in builtin.values()}
    flex = tuple(sorted(n for n in custom if n.startswith("Flex")))
    return FlatbufferStats(dict(sorted(ops.items())), flex, tuple(sorted(custom - set(flex))),
                           dict(sorted(dtypes.items())), weights,
                           shared_weights=sum(1 for u in users.values() if len(u) > 1),
                           subgraphs=len(m.subgraphs or []))


# ------------------------------------------------------- signature graphs


def call_target(fn) -> str | None:
    """Name of the one function a signature wrapper calls (Keras' serve and serving_default share it)."""
    calls = [op for op in fn.graph.get_operations() if op.type in ("StatefulPartitionedCall", "PartitionedCall")]
    return calls[0].get_attr("f").name if len(calls) == 1 else None


def signature_op_types(loaded) -> dict[str, set[str]]:
    """Signature key → the op types its graph runs, functions it calls included.

    Each signature of a loaded SavedModel is a FuncGraph that calls the saved
    function through ``StatefulPartitionedCall``; the op types are collected
    from the graph and from every library function reachable from it
    (`tflab.saved_model.signature_defs.graph_op_types`), so an op is attributed to
    the signatures that really run it, not to every function in the library.
    """
    from tflab.saved_model.signature_defs import graph_op_types

    return {key: graph_op_types(fn) for key, fn in loaded.signatures.items()}


def _where_ops(saved_model_dir: str | None, ops: list[str],
               error_text: str) -> tuple[str, dict[str, tuple[str, ...]]]:
    """The ops as text with the signatures that hold them (``"X (in signature
    'evaluate')"``), and ``{op: signature keys}``.

    The keys are read from the SavedModel's signature graphs
    (`signature_op_types`). An op the graphs do not show (one the converter
    made) falls back on the converter's own "failed while converting: 'KEY'"
    lines; with neither, the op is named alone.
    """
    import re

    by_sig: dict[str, set[str]] = {}
    if saved_model_dir is not None:
        try:
            by_sig = signature_op_types(load_saved_model(saved_model_dir))
        except Exception:  # the message stays useful without the signature names
            by_sig = {}
    failed = sorted(set(re.findall(r"failed while converting: '([^']+)'", error_text)))
    parts, where = [], {}
    for op in ops:
        keys = tuple(sorted(k for k, types in by_sig.items() if op in types) or failed)
        where[op] = keys
        s = "s" if len(keys) > 1 else ""
        parts.append(f"{op} (in signature{s} {', '.join(repr(k) for k in keys)})" if keys else op)
    return ", ".join(parts), where
