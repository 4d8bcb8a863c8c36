"""`tflab export`: a user's model → SavedModel + TFLite variants, each checked, written atomically.

The steps, in order:

1. load the model: a ``.keras`` file, a SavedModel folder, or ``FILE.py:OBJ``;
2. `tflab.save_and_reload` into a temporary folder next to ``--out`` (the
   SavedModel must be bit-exact);
3. convert each TFLite variant in a worker process (`tflab.litert.workers`,
   ``python -m tflab.litert.workers``), because the MLIR converter can abort the whole process (LLVM
   fatal errors call ``abort()``); a dead worker costs one variant, reported
   as crashed, and a fresh worker takes the rest;
4. `tflab.litert.check.check_tflite` each variant against the SavedModel;
5. write ``report.json`` and rename the temporary folder to ``--out``.

Any error before step 5 removes the temporary folder: nothing is half-written.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tflab.report.base import Report, config_field
from tflab._io.export_out import check_out  # noqa: F401 (export's --out rules; re-exported)
from tflab._io.path_checks import check_outputs_apart, check_source_apart
from tflab.custom_op_loader import load_custom_ops_for, unregistered_op
from tflab.errors import TflabError, UsageError, raise_if_terminated
from tflab.examples import load_examples
from tflab.litert.check import TFLiteCheck
from tflab.litert.records import variant_line, variant_table, whole_model_line
from tflab.litert.conversion import QUANTIZATIONS, refuse_infinite_calibration
from tflab.litert.workers import (convert_in_pool, convert_inprocess, reset_workers, save_examples,
                                  remove_debugger_files, stop_workers, take_calibration)
from tflab.report.html.dispatch import renders
from tflab.report.html.export import export_fragment
from tflab.litert.records.check import variant_status  # noqa: F401 (export's status rule, re-exported)

@dataclasses.dataclass(frozen=True)
class VariantResult:
    """One TFLite variant in an export.

    Attributes:
        quantization: the recipe name.
        status: ``"ok"`` (within its bound), ``"EXCEEDED"`` (an error beyond
            its bound), ``"OUTSIDE"`` (an op outside its local bound, or a tensor outside the
            simulation of the variant's own quantization), ``"CROSSED"`` (a quantized variant whose
            whole-model effect crosses its threshold: `TFLiteCheck.whole_model`),
            ``"no bound"`` (measured, but no gradient to bound it),
            ``"not run"`` (converted, LiteRT cannot run it in Python),
            ``"error"`` (conversion failed) or ``"crashed"`` (the converter
            process died).
        check: the `TFLiteCheck` when converted, else None.
        error: one line for ``"error"``/``"crashed"``, else None.
        file: the ``.tflite`` file name inside the export folder, else None.
        convert_seconds: conversion wall time in the worker, seconds.
        fixes: for ``"error"``: the fixes tried by converting again (`tflab.litert.conversion_fixes`),
            each a `tflab.fix.Fix`; empty otherwise.
    """

    quantization: str
    status: str
    check: TFLiteCheck | None = None
    error: str | None = None
    file: str | None = None
    convert_seconds: float | None = None
    fixes: tuple = ()


@dataclasses.dataclass(frozen=True, repr=False)
class ExportReport(Report):
    """What `export_model` wrote and measured.

    Attributes:
        model: what was exported (path or description).
        out: the export folder.
        saved_model: the SavedModel round trip (`tflab.SavedModelCheck`).
        variants: quantization → `VariantResult`, in the order asked.
        examples: where the examples came from.
        seconds: total wall time.
    """

    model: str
    out: str
    saved_model: Any
    variants: dict[str, VariantResult]
    examples: str
    seconds: float
    config: dict = config_field()

    @property
    def ok(self) -> bool:
        """SavedModel bit-exact and every variant converted, run and passed: every op inside its local
        bound and every output inside its end-to-end bound (`TFLiteCheck.ok`), or, where the per-op
        check could not run, the end-to-end bound."""
        return bool(self.saved_model.bit_exact) and all(
            v.status == "ok" and v.check is not None
            and (v.check.ok if v.check.ok is not None else v.check.within_bound) for v in self.variants.values())

    def summary_line(self) -> str:
        vs = ", ".join(f"{q}:{v.status}" for q, v in self.variants.items())
        return f"{self.out!r}, saved_model_bit_exact={self.saved_model.bit_exact}, variants=[{vs}]"

    def to_text(self) -> str:
        sm = self.saved_model
        lines = [f"export {self.model} -> {self.out}   (examples: {self.examples})",
                 f"SavedModel: {'bit-exact' if sm.bit_exact else 'NOT bit-exact'} "
                 f"({', '.join(sm.signatures)}; {sm.batch_count} example batch(es))"]
        lines += [f"  note: {n}" for n in sm.notes]
        lines.append(variant_table(self.variants))
        seen: set[str] = set()
        for q, v in self.variants.items():
            if v.check is not None:
                if v.check.per_op is not None:
                    lines.append(f"{q}: {variant_line(v.check)}")
                lines.append(f"{q}: {v.check.explanation}")
                effect = whole_model_line(v.check)
                if effect:
                    lines.append(f"{q}: {effect}")
                if v.check.simulation is not None:
                    lines.append(f"{q}: {v.check.simulation.summary_line()}")
                if v.check.cause is not None:  # the first op over its own bound, with its class
                    lines.append(f"{q}: {v.check.cause.line_text}")
                lines += [f"  note: {n}" for n in v.check.notes if not (n in seen or seen.add(n))]
            lines += [f"{q}: {v.error}"] * bool(v.fixes) + [f"  {f.line()}" for f in v.fixes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"model": self.model, "out": self.out, "examples": self.examples, "ok": self.ok,
                "seconds": round(self.seconds, 2), "saved_model": self.saved_model.to_dict(),
                "variants": {q: {"status": v.status, "error": v.error, "file": v.file,
                                 "convert_seconds": v.convert_seconds, "fixes": [f.to_dict() for f in v.fixes],
                                 "check": None if v.check is None else v.check.to_dict()}
                             for q, v in self.variants.items()},
                "config": self.config}


# ---------------------------------------------------------------- loading models


def load_model(spec: str) -> tuple[Any, str]:
    """Loads ``MODEL`` for `tflab export`: a .keras file, a SavedModel folder or ``FILE.py:OBJ``.

    ``OBJ`` may be a model, a tf.Module, or a function of no arguments that
    returns one.

    Returns:
        (object to save, kind name).

    Raises:
        UsageError: the path is not a model, the SavedModel is corrupt, the object is not exportable.
    """
    import tensorflow as tf

    if ".py:" in spec or spec.endswith(".py"):
        from tflab._user.target import error_summary, load_target, user_frame
        from tflab.saved_model import is_keras3, is_tf_keras

        obj = load_target(spec)

        def exportable(o) -> bool:
            return isinstance(o, tf.Module) or is_keras3(o) or is_tf_keras(o)

        if callable(obj) and not exportable(obj) and not isinstance(obj, tf.types.experimental.PolymorphicFunction):
            from tflab._user.usercode import user_code

            try:
                with user_code(spec, "when called as OBJ() to build the model"):
                    obj = obj()
            except TflabError:
                raise
            except Exception as e:  # the user's factory failed: point at their line, not ours
                where = user_frame(e)
                if isinstance(e, TypeError) and not where:
                    raise UsageError(f"{spec}: {e}; OBJ must be a model, a tf.Module or a function of no "
                                     f"arguments returning one") from e
                raise UsageError(f"{spec}: calling OBJ() raised {error_summary(e)}"
                                 + (f" (at {where})" if where else "")) from e
        if isinstance(obj, tf.types.experimental.PolymorphicFunction):
            if obj.input_signature is None:
                raise UsageError(f"{spec} is a tf.function without input_signature: give it one "
                                 f"(@tf.function(input_signature=[tf.TensorSpec(...)])) to export it")
            module = tf.Module()
            module.serve = obj
            obj = module
        if not exportable(obj):
            raise UsageError(f"{spec} is a {type(obj).__name__}, not a model: OBJ must be a Keras model, a "
                             f"tf.Module or a tf.function with an input_signature")
        return obj, "python"
    if not os.path.exists(spec):
        raise UsageError(f"{spec!r} does not exist: give a .keras file, a SavedModel folder or FILE.py:OBJ")
    if os.path.isdir(spec):
        pb = os.path.join(spec, "saved_model.pb")
        from tflab._io.path_checks import check_saved_model_files

        check_saved_model_files(spec, "MODEL")  # a FIFO saved_model.pb blocked TF's open for ever
        if not os.path.exists(pb):
            raise UsageError(f"{spec!r} is a folder without saved_model.pb, so not a SavedModel: give a "
                             f".keras file, a SavedModel folder or FILE.py:OBJ")
        load_custom_ops_for(spec)
        try:
            return tf.saved_model.load(spec), "saved_model"
        except Exception as e:  # a corrupt protobuf raises DecodeError/OSError/ValueError
            missing = unregistered_op(str(e))
            if missing:
                raise UsageError(f"{spec!r} uses op {missing}, which is not registered in this process: "
                                 f"load the library that defines it (tf.load_op_library('....so')) "
                                 f"before exporting") from e
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise UsageError(f"{pb} is not a readable SavedModel ({type(e).__name__}: {first}); "
                             f"re-export it") from e
    if spec.endswith(".keras"):
        import zipfile

        import keras

        if not zipfile.is_zipfile(spec):
            # Keras says "File not found" for these, although the file exists.
            raise UsageError(f"{spec!r} is not a valid .keras file: a .keras file is a zip archive and this "
                             f"one is not (truncated or corrupt); save the model again")
        try:
            return keras.models.load_model(spec), "keras"
        except Exception as e:
            # The whole first line (a cut at 200 characters ended mid-word).
            first = (str(e).strip().splitlines() or [""])[0]
            custom = re.search(r"custom|deserializ|Could not locate|Unknown (layer|object)", str(e), re.I)
            hint = (": it holds a class this process does not know (a custom layer or model). Export it "
                    "from the Python file that builds or defines the model, tflab export FILE.py:OBJ, "
                    "or import the module that registers the class "
                    "(@keras.saving.register_keras_serializable) before loading") if custom else ""
            raise UsageError(f"{spec!r} is not a loadable .keras file ({type(e).__name__}: {first})"
                             f"{hint}") from e
    raise UsageError(f"{spec!r} is not a model: give a .keras file, a SavedModel folder or FILE.py:OBJ")


def build_unbuilt_keras(obj: Any, batches: list[dict[str, np.ndarray]] | None, name: str) -> str | None:
    """Builds a Keras 3 model that was never called, from the first example batch, or refuses.

    A subclassed ``keras.Model`` learns its input shape on its first call;
    before that Keras' exporter has no input signature and raises "The model
    provided has not yet been built" (``keras/src/export/export_utils.py``,
    ``get_input_signature``).

    Args:
        obj: the loaded model (anything else is left alone).
        batches: the normalized ``--examples`` batches, or None when none were given.
        name: the model's name for messages (``m.py:model``).

    Returns:
        A note saying the model was built from the examples, or None when
        nothing needed building.

    Raises:
        UsageError: the model is unbuilt and no examples were given (one line:
            call it once in OBJ(), or pass ``--examples``), or the build call
            raised (the user's line named).
    """
    from tflab.saved_model import is_keras3

    if not is_keras3(obj):
        return None
    from keras.src import models as keras_models

    from tflab._tf.lite import keras_model_called

    # Functional and Sequential models know their inputs; a subclassed one must also have been called.
    subclassed = not isinstance(obj, (keras_models.Functional, keras_models.Sequential))
    if obj.built and not (subclassed and not keras_model_called(obj)):
        return None
    cls = type(obj).__name__
    if not batches:
        raise UsageError(f"{name}: the Keras model {cls} was never built or called, so it has no input "
                         f"shape to export: call it once in OBJ() (e.g. model(tf.zeros([1, 8])) before "
                         f"returning it), or pass --examples FILE.npz to build it from those")
    batch = batches[0]
    if isinstance(batch, dict) and batch and all(isinstance(v, dict) for v in batch.values()):
        batch = next(iter(batch.values()))  # per-signature examples: the first signature's
    arrays = list(batch.values())
    x = arrays[0] if len(arrays) == 1 else dict(batch)
    from tflab._user.usercode import user_code

    with user_code(name, f"while building {cls} on the first --examples batch", exceptions=True):
        obj(x)
    shapes = ", ".join(f"{k}: {a.dtype}{list(a.shape)}" for k, a in batch.items())
    note = (f"{cls} was never built: tflab built it by calling it once on the first --examples batch "
            f"({shapes}); the SavedModel's input shape has a None batch dim and the rest from that batch")
    if len(arrays) == 1 and all(len(b) == 1 for b in batches):
        # Keras names a subclassed model's serving input after the traced
        # function's positional parameter (args_0), not after the example's key:
        # one array feeds the one input whatever its key.
        from keras.export import ExportArchive
        from keras.src.export.export_utils import get_input_signature

        from tflab.saved_model import signature_input_names

        serve = ExportArchive().track_and_add_endpoint("serve", obj, get_input_signature(obj))
        names = signature_input_names(serve.get_concrete_function())
        if len(names) == 1:
            batches[:] = [{names[0]: next(iter(b.values()))} for b in batches]
            if names[0] != next(iter(batch)):
                note += f"; the example array {next(iter(batch))!r} feeds its input {names[0]!r}"
    return note


# ------------------------------------------------------------------------ export


def parse_quantize(text: str) -> list[str]:
    """``"none,dynamic"`` → ``["none", "dynamic"]``.

    Raises:
        UsageError: an unknown name or an empty list.
    """
    names = [q.strip() for q in text.split(",") if q.strip()]
    bad = [q for q in names if q not in QUANTIZATIONS]
    if bad:
        raise UsageError(f"--quantize {text!r}: unknown variant(s) {', '.join(map(repr, bad))}; use a comma "
                         f"list of {', '.join(QUANTIZATIONS)}")
    if not names:
        raise UsageError(f"--quantize {text!r} names no variant: use a comma list of {', '.join(QUANTIZATIONS)}")
    return list(dict.fromkeys(names))


def export_model(model: Any, out: str | os.PathLike, *, quantize: Sequence[str] = QUANTIZATIONS,
                 examples: Any = None, force: bool = False, isolate: bool = True,
                 progress: Callable[[str], None] | None = None, model_name: str | None = None,
                 keep_float: bool = True, node_data: bool = False) -> ExportReport:
    """Exports a model as a SavedModel plus TFLite variants, checks each, and writes them atomically.

    Args:
        model: a path (``.keras`` file, SavedModel folder, ``FILE.py:OBJ``) or
            a model object (Keras 3, tf-keras, tf.Module, loaded SavedModel).
        out: the export folder; it is created by renaming a finished temporary
            folder into place.
        quantize: variants among ``"none"``, ``"dynamic"``, ``"float16"``, ``"int8"``.
        examples: ``{name: array}``, a list of them, ``{signature key: {name:
            array}}``, an ``.npz`` path, or None for seeded random batches
            (sizes 1 and 4) holding every signature's inputs; each signature
            is fed the names it takes. A Keras subclassed model that was never
            called is built by calling it on the first batch (a note says so). NaN outputs in the same places in TF
            and LiteRT match; examples with 0 rows are refused.
        force: replace ``out`` if it is a previous export (a folder with
            ``report.json``); never a file, the current folder or its parents.
        isolate: convert in worker processes (a converter abort costs one
            variant, not the caller's process) while this process computes
            the gradients the bounds need; False converts in this process.
        progress: called with one line per step (e.g. `tflab._io.progress.Progress`).
        model_name: how the report names the model (default: the path or type).
        keep_float: for int8, measure the fix of keeping the ops with the largest share
            of the output error in float (`tflab.litert.attribution`; one more
            calibration conversion, in this process).
        node_data: also write each variant's per-op ``|Δ|/bound`` as Model Explorer node
            data, ``model_<variant>.node_data.json`` (`tflab.litert.per_op.PerOpCheck.node_data`).

    Returns:
        An `ExportReport`. Files under ``out``: ``saved_model/``,
        ``model_<variant>.tflite``, ``examples.npz``, ``report.json``, and with
        ``node_data`` ``model_<variant>.node_data.json``.

    Raises:
        UsageError: bad input: not a model, a corrupt SavedModel, examples not
            matching the signature or with 0 rows, an op outside the TFLite
            builtins (`tflab.litert.conversion.UnsupportedOpsError`, ``kind`` "flex" or
            "custom"), a SavedModel op not registered in this process, or an
            ``out`` that cannot be written or replaced (probed by creating a
            folder there, `tflab._io.paths.output_path`), a signature that fails
            when run on the examples (one line naming the signature, the op and
            the shapes fed, `tflab._user.usercode.run_signature`), a Keras
            subclassed model never called and no examples to build it from,
            user code (factory, tracing) calling ``sys.exit`` or raising a
            ``BaseException`` (`tflab._user.usercode.user_code`). Nothing is left
            behind, not even the parent folders of ``out`` it created, also on
            Ctrl-C or SIGTERM (the handler is restored afterwards).

    Example:

    >>> r = export_model("tests/data/export/models.py:dense64", "/tmp/dense64", quantize=["none", "dynamic"])
    >>> r.saved_model.bit_exact, r.variants["dynamic"].status, r.variants["dynamic"].check.bit_exact
    (True, 'ok', False)
    """
    from tflab.litert.bounds import prepare_bounds
    from tflab.litert.check import check_tflite
    from tflab.litert.conversion import UnsupportedOpsError
    from tflab.examples import Examples
    from tflab.saved_model import save_and_reload

    t0 = time.perf_counter()
    if not isinstance(out, (str, os.PathLike)):
        raise UsageError(f"out must be a folder path (str or os.PathLike), got {type(out).__name__}")
    out = Path(out)
    from tflab._api.argcheck import check_callable, check_names

    # quantize="none,int8" (the CLI's form) is a comma list, not the letters n, o, n, e; "" or []
    # names no variant: refused, not an "ok" export with nothing checked.
    quants = check_names(quantize, QUANTIZATIONS, "quantize", "export_model", item="quantization")
    check_callable(progress, "progress", "export_model")
    if not isinstance(force, bool) or not isinstance(isolate, bool):
        raise UsageError(f"export_model: force and isolate must be True or False, got {force!r}, {isolate!r}")
    progress = progress or (lambda msg: None)
    target = check_out(out, force)
    check_source_apart(out, model)  # --force never publishes over its own input
    if isinstance(examples, (str, os.PathLike)):  # nor over its examples (the CLI's preflight says the same)
        check_outputs_apart([(os.fspath(out), "out", True)], [(os.fspath(examples), "examples")])
    # The examples first: 0 rows or an all-NaN input is refused before the model is loaded or converted.
    if isinstance(examples, (str, os.PathLike)):
        source = os.fspath(examples)
        batches = Examples.of(load_examples(source))
    elif examples is not None:
        source, batches = "given", Examples.of(examples)
    else:
        source, batches = "seeded random (seed 0), batch sizes 1 and 4", None
    if batches is not None:
        batches.check_rows()
        if "int8" in quants:
            refuse_infinite_calibration(batches)
    if isinstance(model, (str, os.PathLike)):
        name = model_name or os.fspath(model)
        progress(f"loading {name}")
        obj, _ = load_model(os.fspath(model))
    else:
        obj, name = model, model_name or type(model).__name__
    listed = None if batches is None else list(batches)
    build_note = build_unbuilt_keras(obj, listed, name)
    if listed is not None and any(x is not y for x, y in zip(listed, batches)):
        batches = Examples(tuple(listed))  # renamed to the built model's input (already numpy)
    # The SIGTERM handler goes in before the temporary folder exists, so a
    # SIGTERM at any point after mkdtemp unwinds through the cleanup below.
    previous_term = _install_sigterm()
    tmp = None
    try:
        # Creates the missing parents of --out (removed again below on failure).
        tmp = target.temp_dir()
        progress("SavedModel round trip")
        from tflab._user.usercode import user_code

        with user_code(name, "while TF traced and saved it as a SavedModel"):
            sm = save_and_reload(obj, tmp / "saved_model", batches)
        if build_note:
            sm = dataclasses.replace(sm, notes=(build_note, *sm.notes))
        batches = sm.example_batches  # checked against the SignatureDefs: passed on as is
        save_examples(batches, os.fspath(tmp / "examples.npz"))
        if isolate:
            reset_workers()
            # Variants convert in parallel worker processes (one per schedulable CPU, forks of one);
            # each is checked below as soon as it is done, while the others convert.
            # With keep_float, the int8 worker keeps its calibration: QuantizationDebugger starts from
            # it instead of converting and calibrating the model once more in this process.
            conv = convert_in_pool(os.fspath(tmp / "saved_model"), os.fspath(tmp), quants,
                                   os.fspath(tmp / "examples.npz"), progress, keep_calibration=keep_float)
            try:
                # The gradients behind the bounds do not depend on the variant: compute
                # them here while the worker processes convert.
                getattr(progress, "note", progress)("computing the gradients behind the end-to-end bounds "
                                                    "while the variants convert")
                prepare_bounds(tmp / "saved_model", batches)
            except LookupError:
                pass  # no gradient for some op: check_tflite reports that itself
        else:
            conv = convert_inprocess(os.fspath(tmp / "saved_model"), os.fspath(tmp), quants, batches, progress,
                                     keep_calibration=keep_float)
        variants: dict[str, VariantResult] = {}
        float_size = None
        for q in quants:
            msg = conv[q]
            if msg["event"] == "unsupported":
                raise UnsupportedOpsError(msg["error"], tuple(msg.get("ops", ())), msg.get("kind", "flex"),
                                          {k: tuple(v) for k, v in msg.get("signatures", {}).items()})
            if q == "none" and msg["event"] == "done":
                float_size = msg.get("bytes")
            elif float_size is None and "none" in quants:
                float_size = conv["none"].get("bytes")
            if msg["event"] != "done":
                error, fixes = msg["error"], ()
                if msg.get("failure"):  # the cause with its Keras layer; the fixes tried for the first only
                    from tflab.litert.conversion_fixes import explain_failure

                    error, fixes = explain_failure(obj, tmp / "saved_model", batches, q, msg["failure"], progress,
                                                   fixes=not any(v.fixes for v in variants.values()))
                variants[q] = VariantResult(q, msg["event"], error=error, convert_seconds=msg.get("seconds"),
                                            fixes=fixes)
                continue
            still = conv.pending() if isolate else 0
            progress(f"checking {q} with LiteRT" + (f" ({still} variant{'s' * (still != 1)} still converting)"
                                                    if still else ""))
            data = (tmp / msg["file"]).read_bytes()
            take_calibration(os.fspath(tmp / "saved_model"), os.fspath(tmp), msg, batches,  # its file goes
                             (lambda c=conv, v=q: c.event(v, "debugger")) if isolate else None)
            from tflab.litert.flatbuffer_notes import warn_after_conversion

            warn_after_conversion(data, f"TFLite {q}", getattr(progress, "note", progress))  # before running it
            try:  # waits for the float variant when it converts in another worker
                float_msg = conv.get("none", {})
            except TflabError:  # its worker failed: check_tflite converts the reference itself
                float_msg = {}
            # The float variant's bytes are the per-op reference weights (else check_tflite converts them).
            float_model = (tmp / float_msg["file"]).read_bytes() if float_msg.get("event") == "done" else None
            from tflab._io.progress import reporting

            with reporting(getattr(progress, "note", progress)):  # the check's own steps, each a line
                check = check_tflite(data, tmp / "saved_model", batches, q, float_size=float_size,
                                     convert_seconds=msg["seconds"], float_model=float_model,
                                     keep_float=keep_float)
            if node_data and check.per_op is not None:
                from tflab.report.jsonable import dumps as _dumps

                (tmp / f"model_{q}.node_data.json").write_text(_dumps(check.per_op.node_data))
            check = dataclasses.replace(check, path=os.fspath(out / msg["file"]))
            status = variant_status(check)
            variants[q] = VariantResult(q, status, check=check, file=msg["file"], convert_seconds=msg["seconds"])
        # Paths inside the report point at the final folder: this export's, and the folder an enclosing
        # run publishes it in (the tour's --out), not a temporary folder gone after the rename.
        from tflab._io.paths import published_path

        final = published_path(out)
        sm = dataclasses.replace(sm, path=os.fspath(final / "saved_model"))
        report = ExportReport(model=name, out=os.fspath(final), saved_model=sm, variants=variants,
                              examples=source, seconds=time.perf_counter() - t0)
        from tflab.litert.bounds import store_computed
        from tflab.report.jsonable import dumps

        # The bound's gradients go with the SavedModel: a later check-tflite on it and these examples
        # reads them instead of taking every backward pass again.
        done_none = variants.get("none")
        store_computed(tmp / "saved_model", batches, tmp / done_none.file if done_none and done_none.file else None)
        remove_debugger_files(os.fspath(tmp), conv if isolate else None)  # what no check took is not published
        (tmp / "report.json").write_text(dumps(report.to_dict()))
        raise_if_terminated()  # a SIGTERM whose exception a finalizer swallowed: do not commit
        target.commit(tmp)
        return report
    except BaseException:
        stop_workers()
        target.discard(tmp)  # the temporary folder and the parents of --out created for it
        raise
    finally:
        from tflab.litert.conversion import drop_calibrations

        drop_calibrations()  # the int8 calibration kept for the kept-float fix is this export's only
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)


def _install_sigterm():
    """Makes SIGTERM unwind like SIGINT (cleanup runs); returns the previous handler, or None.

    The same handler as the CLI's (`tflab.errors.install_sigterm_handler`), installed again
    here for Python callers of `export_model`.
    """
    from tflab.errors import install_sigterm_handler

    return install_sigterm_handler()


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(ExportReport)(export_fragment)
