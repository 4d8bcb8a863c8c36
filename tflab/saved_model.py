"""Lab step 7: a SavedModel round trip must be bit-exact.

`save_and_reload` writes an object as a SavedModel, loads it back with
`tf.saved_model.load`, runs every SignatureDef on the examples and compares
each output with the in-process ConcreteFunction it was saved from, byte by
byte. Both sides run the same FuncGraph with the same variable values on the
same TF kernels, so any difference (even ``-0.0`` vs ``0.0`` or another NaN
payload) means something was not saved the way it ran.

What a SavedModel does *not* keep is reported as notes
(tensorflow/python/saved_model/save.py and signature_serialization.py):

* a `tf.function` that was never traced has no ConcreteFunction to save;
* Python arguments are part of a trace's FunctionType as ``Literal`` values, so
  only the traced values (e.g. ``training=True``) can be called after reload;
* a resource (e.g. a `tf.Variable`) captured by a function but not reachable
  as an attribute of the saved object cannot be saved at all (TF raises an
  ``AssertionError`` about an "untracked" resource; we say which and what to do);
* a dict of unnamed TensorSpecs loses its keys: signature inputs are named
  after the graph's placeholders (``inputs``, ``inputs_1``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from typing import Any, Callable, Mapping

import numpy as np

from tflab._numeric import compare_bits, ulp_distance  # noqa: F401
from tflab.errors import TflabError, UsageError
# The example batches are tflab.examples' concern; these names stay importable from here.
from tflab.examples import (Examples, _is_batch_list, check_examples, check_unused,  # noqa: F401
                            feed_for, is_per_signature, normalize_examples, random_examples,
                            union_inputs)

DEFAULT_SIGNATURE = "serving_default"  # tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY


# --------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature.

    Attributes:
        name: the signature's key for it.
        dtype: dtype name, e.g. ``"float32"``.
        shape: dims, ``None`` for unknown ones (e.g. ``(None, 8)``).
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...] | None

    def __str__(self) -> str:
        dims = "?" if self.shape is None else ",".join("None" if d is None else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


@dataclasses.dataclass(frozen=True)
class OutputBits:
    """Bitwise comparison of one signature output, reloaded vs in-process.

    Attributes:
        name: output key. dtype/shape: from the reloaded SignatureDef.
        bit_exact: every example's bytes are identical.
        mismatched: number of elements whose bytes differ (over all examples).
        max_abs_diff: largest ``|a - b|`` over numeric elements (0.0 when exact;
            NaN vs NaN with different payloads counts as a mismatch, not a difference).
        max_ulp: largest distance in units in the last place (floats only, else 0).
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...] | None
    bit_exact: bool
    mismatched: int = 0
    max_abs_diff: float = 0.0
    max_ulp: int = 0


@dataclasses.dataclass(frozen=True)
class SignatureCheck:
    """One SignatureDef after reload: its inputs, outputs and per-output verdict."""

    name: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, OutputBits]

    @property
    def bit_exact(self) -> bool:
        return all(o.bit_exact for o in self.outputs.values())


@dataclasses.dataclass(frozen=True)
class SavedModelCheck:
    """Result of `save_and_reload`.

    Attributes:
        path: the SavedModel folder.
        kind: ``"tf.Module"``, ``"keras"`` (Keras 3) or ``"tf_keras"``.
        bit_exact: every output of every signature matched byte for byte.
        signatures: signature key → `SignatureCheck`.
        batch_count: number of example batches run through each signature
            (``examples``, the old name of this count, is a deprecated alias:
            the parameter ``examples`` is the batches themselves).
        notes: what the SavedModel did not keep, one sentence each.
        example_batches: the batches run (the given ones, or the seeded
            random ones when ``examples=None``), as a `tflab.examples.Examples`
            checked against the signatures: pass it on as is.
    """

    path: str
    kind: str
    bit_exact: bool
    signatures: dict[str, SignatureCheck]
    batch_count: int
    notes: tuple[str, ...] = ()
    example_batches: Any = dataclasses.field(default=(), repr=False, compare=False)

    @property
    def examples(self) -> int:
        """Deprecated alias of `batch_count`."""
        import warnings

        warnings.warn("SavedModelCheck.examples is deprecated: use .batch_count (the number of batches) "
                      "or .example_batches (the batches)", DeprecationWarning, stacklevel=2)
        return self.batch_count

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        sigs = ", ".join(f"{k}({'exact' if s.bit_exact else 'DIFFERS'})" for k, s in self.signatures.items())
        return (f"SavedModelCheck(kind={self.kind!r}, bit_exact={self.bit_exact}, "
                f"signatures=[{sigs}], notes={len(self.notes)})")

    def to_text(self) -> str:
        lines = [f"SavedModel {self.path} ({self.kind}): "
                 f"{'bit-exact' if self.bit_exact else 'NOT bit-exact'} over {self.batch_count} example batch(es)"]
        for key, sig in self.signatures.items():
            lines.append(f"  signature {key}")
            for t in sig.inputs.values():
                lines.append(f"    in  {t}")
            for o in sig.outputs.values():
                verdict = ("bit-exact" if o.bit_exact else
                           f"{o.mismatched} element(s) differ, max |Δ| {o.max_abs_diff:.3g}, "
                           f"max ULP {o.max_ulp} (each its own worst element)")
                lines.append(f"    out {TensorInfo(o.name, o.dtype, o.shape)}  {verdict}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"path": self.path, "kind": self.kind, "bit_exact": self.bit_exact,
                "batch_count": self.batch_count, "examples": self.batch_count,  # "examples": the old key
                "notes": list(self.notes),
                "signatures": {k: {"bit_exact": s.bit_exact,
                                   "inputs": {n: dataclasses.asdict(t) for n, t in s.inputs.items()},
                                   "outputs": {n: dataclasses.asdict(o) for n, o in s.outputs.items()}}
                               for k, s in self.signatures.items()}}


# ------------------------------------------------------------------ shared helpers

_LOADED: dict[tuple[str, int], Any] = {}


def _load_key(path: str) -> tuple[str, int]:
    pb = os.path.join(path, "saved_model.pb")
    return os.path.realpath(path), (os.stat(pb).st_mtime_ns if os.path.exists(pb) else 0)


def remember_loaded(path: str | os.PathLike, loaded: Any) -> None:
    """Keeps the last loaded SavedModel, so the TFLite checks that follow need not load it again."""
    _LOADED.clear()  # one at a time: a loaded model holds its variables in memory
    _LOADED[_load_key(os.fspath(path))] = loaded


def require_saved_model_dir(path: Any, what: str = "saved_model_dir") -> str:
    """``path`` as a str when it is a SavedModel folder; else one `UsageError` line saying what it is.

    TF's own answer is ``OSError: SavedModel file does not exist at:
    PATH/{saved_model.pbtxt|saved_model.pb}`` from deep in the converter
    (``tensorflow/python/saved_model/loader_impl.py``).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"{what} must be a SavedModel folder path (str or os.PathLike), got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise UsageError(f"{what} {path!r} does not exist: give a SavedModel folder (e.g. from save_and_reload)")
    if not os.path.isdir(path):
        raise UsageError(f"{what} {path!r} is a file, not a SavedModel folder: give the folder holding "
                         f"saved_model.pb")
    if not any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
        raise UsageError(f"{what} {path!r} is a folder without saved_model.pb, so not a SavedModel")
    return path


def require_readable_saved_model(path: Any, what: str = "saved_model_dir") -> str:
    """`require_saved_model_dir`, then ``saved_model.pb`` parsed as TF's ``SavedModel`` protobuf.

    TF's own answer for a corrupt file is ``OSError: Cannot parse file …:
    Error parsing message with type 'tensorflow.SavedModel'`` from the
    converter (``loader_impl.parse_saved_model``).

    Raises:
        UsageError: not a SavedModel folder, or its ``saved_model.pb`` is not
            a readable ``tensorflow.SavedModel`` message (truncated, corrupt).
    """
    path = require_saved_model_dir(path, what)
    pb = os.path.join(path, "saved_model.pb")
    if os.path.isfile(pb):
        from google.protobuf.message import DecodeError
        from tensorflow.core.protobuf import saved_model_pb2

        try:
            with open(pb, "rb") as f:
                saved_model_pb2.SavedModel().ParseFromString(f.read())
        except (DecodeError, OSError, ValueError) as e:
            raise UsageError(f"{what} {path!r}: {pb} is not a readable SavedModel ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:160] if str(e) else 'cannot parse'}); export it "
                             f"again") from None
    return path


def load_saved_model(path: str | os.PathLike) -> Any:
    """`tf.saved_model.load`, reusing the last load of the same folder and saved_model.pb version."""
    import tensorflow as tf

    path = os.fspath(path)
    key = _load_key(path)
    if key not in _LOADED:
        from tflab.custom_op_loader import load_custom_ops_for

        load_custom_ops_for(path)
        remember_loaded(path, tf.saved_model.load(path))
    return _LOADED[key]


def tensor_info(name: str, spec) -> TensorInfo:
    """`TensorInfo` of a `tf.TensorSpec`."""
    shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
    return TensorInfo(name, spec.dtype.name, shape)


def signature_inputs(fn) -> dict[str, TensorInfo]:
    """Inputs of a loaded signature function (``loaded.signatures[key]``), by name, sorted."""
    return {k: tensor_info(k, s) for k, s in sorted(fn.structured_input_signature[1].items())}


def signature_outputs(fn) -> dict[str, TensorInfo]:
    """Outputs of a loaded signature function, by name."""
    return {k: tensor_info(k, s) for k, s in fn.structured_outputs.items()}


def _to_numpy(value) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def normalize_outputs(structured) -> dict:
    """Names outputs the way SignatureDefs do: dict keys, else ``output_0``, ``output_1``…

    Mirrors tensorflow/python/saved_model/signature_serialization.py
    (``_normalize_outputs``).
    """
    import tensorflow as tf

    if isinstance(structured, Mapping):
        return dict(structured)
    flat = tf.nest.flatten(structured)
    return {f"output_{i}": t for i, t in enumerate(flat)}


# --------------------------------------------------------------- what is not saved


def _tf_functions(obj) -> dict[str, Any]:
    """Attribute name → `tf.function` (PolymorphicFunction) on a tf.Module."""
    import tensorflow as tf

    found = {}
    names = set()
    for klass in type(obj).__mro__:
        names.update(vars(klass))
    names.update(getattr(obj, "__dict__", {}))
    for name in sorted(names):
        if name.startswith("__") and name != "__call__":  # AutoTrackable lists __call__ too
            continue
        try:
            value = getattr(obj, name)
        except Exception:  # properties that fail are not functions we save
            continue
        if isinstance(value, tf.types.experimental.PolymorphicFunction):
            found[name] = value
    return found


def _concrete_functions(fn) -> list:
    # The same list tf.saved_model.save serializes for a tf.function.
    return list(fn._list_all_concrete_functions_for_serialization())  # noqa: SLF001


def unsaved_notes(obj) -> list[str]:
    """Notes on a tf.Module's tf.functions that the SavedModel keeps only in part or not at all."""
    from tensorflow.core.function.trace_type import default_types

    notes = []
    for name, fn in _tf_functions(obj).items():
        cfs = _concrete_functions(fn)
        if not cfs:
            notes.append(f"{name}: never traced and no input_signature, so the SavedModel holds no "
                         f"ConcreteFunction for it; the reloaded {name} raises when called "
                         f"(call it once or give it an input_signature before saving)")
            continue
        literals: dict[str, set] = {}
        for cf in cfs:
            for p in cf.function_type.parameters.values():
                if isinstance(p.type_constraint, default_types.Literal):
                    literals.setdefault(p.name, set()).add(repr(p.type_constraint.value))
        for pname, values in literals.items():
            vals = ", ".join(sorted(values))
            notes.append(f"{name}: Python argument {pname} was traced only as {pname}={vals}; each value "
                         f"is a constant baked into its FuncGraph, so the reloaded {name} accepts only "
                         f"{pname}={vals} (trace other values before saving, or make it a tensor)")
    return notes


def _explain_save_error(e: BaseException) -> TflabError:
    text = str(e)
    if "untracked" in text:
        fn = re.search(r"Function name = b?'?([^'\n]+)", text)
        trackable = re.search(r"Trackable referencing this tensor = (.+)", text)
        what = trackable.group(1).strip() if trackable else "a resource"
        where = f" (function {fn.group(1)})" if fn else ""
        return UsageError(f"cannot save: a function captures {what}{where}, which no attribute of the "
                          f"saved object holds, so SavedModel cannot restore it; assign it to an "
                          f"attribute (e.g. self.v = tf.Variable(...) in __init__) and save again")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return TflabError(f"tf.saved_model.save failed: {type(e).__name__}: {first}")


# ------------------------------------------------------------------- the reference


@dataclasses.dataclass
class _Reference:
    """In-process ConcreteFunction of one signature, callable with the signature's named inputs."""

    concrete: Any
    input_names: list[str]  # signature input name of each flat input, in flatten order
    rename: Callable[[Any], dict]

    def __call__(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        args, kwargs = self.concrete.structured_input_signature
        if not args and sorted(kwargs) == self.input_names:
            out = self.concrete(**{n: tf.constant(feed[n]) for n in self.input_names})
            return {k: _to_numpy(v) for k, v in self.rename(out).items()}
        flat = [tf.constant(feed[n]) for n in self.input_names]
        args, kwargs = tf.nest.pack_sequence_as(self.concrete.structured_input_signature, flat)
        out = self.concrete(*args, **kwargs)
        return {k: _to_numpy(v) for k, v in self.rename(out).items()}


def _reference(concrete, rename=normalize_outputs) -> _Reference:
    import tensorflow as tf

    args, kwargs = concrete.structured_input_signature
    if not args and kwargs and all(isinstance(s, tf.TensorSpec) for s in kwargs.values()):
        # A signature function (e.g. of a loaded SavedModel) takes its inputs by name.
        return _Reference(concrete, sorted(kwargs), rename)
    n = len(tf.nest.flatten(concrete.structured_input_signature))
    # Signature inputs are named after the FuncGraph's placeholders (the spec's
    # name, else the argument's path), in flatten order; captures follow them.
    names = [t.name.split(":")[0] for t in concrete.inputs[:n]]
    return _Reference(concrete, names, rename)


def _module_signatures(obj, signatures) -> tuple[dict[str, Any], list[str]]:
    """The signatures to save for a tf.Module, and notes on how they were chosen.

    With ``signatures`` given, those. Without, ``tf.saved_model.save``'s own
    rule (``save.py`` calls ``signature_serialization.find_function_to_export``
    on the object's SavedModel children, which ``AutoTrackable`` lists from
    ``dir(obj)``, ``__call__`` included): an attribute named
    ``_default_save_signature`` wins; otherwise, if exactly one child
    `tf.function` with an ``input_signature`` (or ConcreteFunction) is a valid
    signature (``_valid_signature``: it returns at least one tensor, takes no
    `tf.Variable`, and its outputs are a tensor, a list/tuple or a str-keyed
    dict of tensors), it becomes ``serving_default``. TF exports no signature
    when several qualify; tflab then checks each under its attribute name
    (none is ``serving_default``) and says so in a note. With none, a single
    traced `tf.function` (one ConcreteFunction) is checked as
    ``serving_default``, also with a note, since TF would export nothing.
    """
    if signatures is not None:
        if not isinstance(signatures, Mapping):
            signatures = {DEFAULT_SIGNATURE: signatures}
        out = {}
        for k, f in signatures.items():
            out[k] = f.get_concrete_function() if hasattr(f, "get_concrete_function") else f
        return out, []
    chosen, candidates, rejected = _tf_signature_choice(obj)
    notes = [f"{n}: has an input_signature but tf.saved_model.save does not make it a signature: {why}"
             for n, why in rejected.items()]
    if chosen is not None:
        return {DEFAULT_SIGNATURE: chosen}, notes
    if len(candidates) > 1:
        names = ", ".join(candidates)
        notes.append(f"{len(candidates)} functions can be signatures ({names}): tf.saved_model.save(obj) "
                     f"without signatures= exports none of them (it picks one only when exactly one "
                     f"qualifies, signature_serialization.find_function_to_export); tflab saved each under "
                     f"its attribute name and none as serving_default. Pass signatures={{'serving_default': "
                     f"obj.{next(iter(candidates))}, ...}} (to save_and_reload or tf.saved_model.save) to choose")
        return dict(candidates), notes
    # A single traced function can still serve as the default signature.
    traced = {n: _concrete_functions(f) for n, f in _tf_functions(obj).items()}
    traced = {n: c for n, c in traced.items() if len(c) == 1}
    if len(traced) == 1:
        (name, (concrete,)), = traced.items()
        notes.append(f"{name} has no input_signature, so tf.saved_model.save(obj) alone would export no "
                     f"signature; tflab saved its one traced ConcreteFunction as serving_default "
                     f"(signatures={{'serving_default': obj.{name}.get_concrete_function(...)}})")
        return {DEFAULT_SIGNATURE: concrete}, notes
    raise UsageError(f"{type(obj).__name__} has no tf.function with an input_signature to export as "
                     f"a signature: decorate one with @tf.function(input_signature=[tf.TensorSpec(...)]) "
                     f"or pass signatures={{'serving_default': fn}}")


def _tf_signature_choice(obj) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """What ``tf.saved_model.save(obj)`` without ``signatures=`` would export.

    Runs TF's own ``signature_serialization.find_function_to_export`` on the
    ``_AugmentedGraphView`` that ``tf.saved_model.save`` builds, and applies
    the same ``_get_signature``/``_valid_signature`` tests to each child.

    Returns:
        (the ConcreteFunction TF would save as ``serving_default`` or None,
        {attribute: ConcreteFunction} for every child that could be a
        signature, {attribute: why not} for functions that have an
        input_signature but are not valid signatures).
    """
    import tensorflow as tf
    from tensorflow.python.saved_model import save as save_lib
    from tensorflow.python.saved_model import signature_serialization as ss

    view = save_lib._AugmentedGraphView(obj)  # noqa: SLF001 - TF's own rule, not a copy of it
    chosen = ss.find_function_to_export(view)
    candidates: dict[str, Any] = {}
    rejected: dict[str, str] = {}
    for ref in view.list_children(view.root):
        child = ref.ref
        if not isinstance(child, (tf.types.experimental.PolymorphicFunction,
                                  tf.types.experimental.ConcreteFunction)):
            continue
        concrete = ss._get_signature(child)  # noqa: SLF001
        if concrete is None:
            continue
        if ss._valid_signature(concrete):  # noqa: SLF001
            candidates[ref.name] = concrete
        elif not concrete.outputs:
            rejected[ref.name] = "it returns no tensor"
        else:
            rejected[ref.name] = ("it takes a tf.Variable or returns something other than tensors "
                                  "(a tensor, a list/tuple or a str-keyed dict of them)")
    if chosen is not None and not isinstance(chosen, tf.types.experimental.ConcreteFunction):
        # `_default_save_signature` may hold a tf.function: TF resolves it the same way.
        concrete = ss._get_signature(chosen)  # noqa: SLF001
        if concrete is None:
            raise UsageError(f"{type(obj).__name__}._default_save_signature is a tf.function without an "
                             f"input_signature: give it one, or pass signatures=")
        chosen = concrete
    return chosen, candidates, rejected


def _is_loaded_saved_model(obj) -> bool:
    # tf.saved_model.load returns an AutoTrackable carrying the SignatureDefs.
    sigs = getattr(obj, "signatures", None)
    return sigs is not None and hasattr(sigs, "items") and type(obj).__name__ == "_UserObject"


def _save_loaded(obj, path: str) -> dict[str, _Reference]:
    import tensorflow as tf

    sigs = dict(obj.signatures)
    if not sigs:
        raise UsageError("the SavedModel has no SignatureDef to check: export it with signatures")
    tf.saved_model.save(obj, path, signatures=sigs)
    return {k: _reference(f, dict) for k, f in sigs.items()}


def is_keras3(obj: Any) -> bool:
    """True for a Keras 3 ``keras.Model`` (saved the way ``model.export`` writes it)."""
    try:
        import keras
    except ImportError:
        return False
    return isinstance(obj, keras.Model) and keras.__version__.startswith("3")


def is_tf_keras(obj: Any) -> bool:
    """True for a tf-keras (Keras 2) model (saved with ``tf.saved_model.save``)."""
    try:
        import tf_keras
    except ImportError:
        return False
    return isinstance(obj, tf_keras.Model)


_is_keras3, _is_tf_keras = is_keras3, is_tf_keras  # the old private names


def signature_input_names(concrete: Any) -> list[str]:
    """The SignatureDef input name of each flat input of ``concrete``, in flatten order.

    Signature inputs are named after the FuncGraph's placeholders (a spec's
    ``name``, else the parameter's), which is how a SavedModel signature
    will call them.
    """
    return list(_reference(concrete).input_names)


def _save_keras3(model, path: str) -> dict[str, _Reference]:
    # Model.export (keras/src/export/saved_model.py, export_saved_model) builds
    # an ExportArchive with one "serve" endpoint and writes it out. We do the
    # same steps but keep the archive, so its in-process endpoint is the reference.
    from keras.export import ExportArchive
    from keras.src.export.export_utils import get_input_signature

    archive = ExportArchive()
    serve = archive.track_and_add_endpoint("serve", model, get_input_signature(model))
    archive.write_out(path, verbose=False)
    ref = _reference(serve.get_concrete_function())
    # write_out also signs the first endpoint as serving_default: both run the same function.
    return {"serve": ref, DEFAULT_SIGNATURE: ref}


def _save_tf_keras(model, path: str) -> dict[str, _Reference]:
    import tensorflow as tf

    specs = tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0]), model.inputs)
    if len(specs) == 1:
        specs = specs[0]
    names = list(model.output_names)

    def rename(out):
        # tf-keras names its serving outputs after the output layers.
        return dict(zip(names, tf.nest.flatten(out)))

    concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(specs)
    tf.saved_model.save(model, path)
    return {DEFAULT_SIGNATURE: _reference(concrete, rename)}


def _save_module(obj, path: str, signatures) -> dict[str, _Reference]:
    import tensorflow as tf

    sigs, notes = _module_signatures(obj, signatures)
    try:
        tf.saved_model.save(obj, path, signatures=sigs)
    except (AssertionError, ValueError) as e:
        raise _explain_save_error(e) from e
    return {k: _reference(cf) for k, cf in sigs.items()}, notes


# -------------------------------------------------------------------------- public


def save_and_reload(obj: Any, path: str | os.PathLike, examples: Any, *,
                    signatures: Any = None) -> SavedModelCheck:
    """Saves ``obj`` as a SavedModel, reloads it, and compares every signature bit by bit.

    The reference is the in-process ConcreteFunction each signature was saved
    from; the reloaded side is ``tf.saved_model.load(path).signatures[key]``.
    Outputs are compared by name and by their bytes (``ndarray.view(uint8)``),
    so ``-0.0`` vs ``0.0`` and different NaN payloads are differences.

    Args:
        obj: a `tf.Module` whose `tf.function` methods have input signatures,
            a Keras 3 `keras.Model` (written the way ``model.export(path)``
            writes it), a tf-keras model (``tf.saved_model.save``), or a
            loaded SavedModel (``tf.saved_model.load``), saved again with its
            signatures, which is what ``tflab export DIR`` checks.
        path: folder to write; it must not exist or be empty.
        examples: ``{input name: array}`` for one batch, a list of such
            dicts, or a `tflab.examples.Examples` (used as is). Names, dtypes and
            shapes must match the signature inputs
            (e.g. ``{"x": np.zeros((4, 64), np.float32)}``); each signature
            is fed the names it takes, so one dict can hold the inputs of
            several signatures. For signatures whose examples differ, give
            ``{signature key: {name: array} or [dicts]}`` (see
            `tflab.examples`). A name no signature takes is an error; a bare
            array or a list of arrays says which form to use.
            None: seeded random batches of sizes 1 and 4 holding every
            signature's inputs (see `random_examples`); they are returned
            in ``.example_batches``.
        signatures: for a tf.Module only: a `tf.function`/ConcreteFunction or
            a dict ``{key: function}``. Default: what
            ``tf.saved_model.save(obj)`` itself exports: the one
            `tf.function` with an ``input_signature`` (``__call__``
            included) becomes ``"serving_default"``. When several have one,
            TF exports none; tflab then checks each under its attribute name,
            none of them as ``"serving_default"``, and a note says so.

    Returns:
        A `SavedModelCheck`: ``.bit_exact`` over all signatures and outputs,
        ``.signatures[key].inputs/.outputs`` (names, dtypes, shapes with
        ``None`` dims, per-output ``bit_exact``), and ``.notes`` on what was
        not saved.

    Raises:
        UsageError: ``path`` is a non-empty folder, or cannot be created there
            (`tflab._paths.output_path` probes it: ``/proc/x`` as root); ``obj`` has no signature
            to export; it captures an untracked resource; the user's function
            raised while being traced (the message names the line); examples
            do not match a signature. The folder is removed on any error.
        TflabError: saving failed for another reason (TF's first line quoted).

    Example:

    >>> class Scale(tf.Module):
    ...     def __init__(self):
    ...         self.w = tf.Variable(2.0)
    ...     @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    ...     def serve(self, x):
    ...         return {"y": x * self.w}
    >>> check = tflab.save_and_reload(Scale(), "/tmp/scale_sm", {"x": np.ones(3, np.float32)})
    >>> check
    SavedModelCheck(kind='tf.Module', bit_exact=True, signatures=[serving_default(exact)], notes=0)
    >>> list(check.signatures["serving_default"].outputs)
    ['y']
    """
    from tflab._paths import check_path_text, output_path

    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"path must be a folder path (str or os.PathLike), got {type(path).__name__}")
    path = os.fspath(path)
    check_path_text(path, "path")
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise UsageError(f"{path!r} already exists and is not an empty folder: choose a new path")
    # Probe by really creating a folder there (root on /proc: TF's NotFoundError after the trace before).
    target = output_path(path, "path", folder=True)
    # 0 rows: nothing would be compared, so "bit_exact=True" would be vacuous.
    batches = None if examples is None else Examples.of(examples).check_rows()
    created = not os.path.exists(path)
    if created:
        target.make_parents()  # remembered, so a failure removes the parents it made too
    try:
        return _save_and_check(obj, path, batches, signatures)
    except BaseException as e:
        # Nothing half-written: a failed save or check leaves no folder behind (nor its new parents).
        if created:
            shutil.rmtree(path, ignore_errors=True)
            target.discard()
        from tflab._target import user_frame

        where = user_frame(e) if isinstance(e, Exception) and not isinstance(e, TflabError) else ""
        if where:
            # The user's function failed while TF traced it for saving: say where.
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            raise UsageError(f"tracing for SavedModel raised {type(e).__name__}: {msg} (at {where})") from e
        raise


def _save_and_check(obj, path: str, batches: Examples | None, signatures) -> SavedModelCheck:
    import tensorflow as tf

    from tflab._usercode import run_signature

    notes: list[str] = []
    if _is_loaded_saved_model(obj):
        kind, refs = "SavedModel", _save_loaded(obj, path)
    elif _is_keras3(obj):
        kind, refs = "keras", _save_keras3(obj, path)
        notes.append("Keras export keeps the forward pass only (call with training=False, endpoint 'serve' "
                     "and its alias serving_default): Dropout, BatchNorm updates, the optimizer and the "
                     "Python layer code are not in the SavedModel (keras/src/export/saved_model.py)")
    elif _is_tf_keras(obj):
        kind, refs = "tf_keras", _save_tf_keras(obj, path)
    elif isinstance(obj, tf.Module):
        kind = "tf.Module"
        notes = unsaved_notes(obj)
        refs, how = _save_module(obj, path, signatures)
        notes += how
    else:
        raise UsageError(f"cannot save a {type(obj).__name__}: give a tf.Module, a Keras 3 model "
                         f"or a tf-keras model")

    # The in-process model is called below: remember its variables to give them back (case M9).
    state = _variable_state(obj) if kind != "SavedModel" else []
    loaded = tf.saved_model.load(path)
    remember_loaded(path, loaded)
    sig_inputs = {key: signature_inputs(loaded.signatures[key]) for key in refs}
    if batches is None:
        # Random batches hold every signature's inputs; each signature takes its own.
        batches = Examples.of(random_examples(union_inputs(sig_inputs)))
    batches = batches.check(sig_inputs)  # once: names, dtypes, shapes against every SignatureDef
    checks = {}
    for key, ref in refs.items():
        fn = loaded.signatures[key]
        inputs = sig_inputs[key]
        outputs = signature_outputs(fn)
        if set(ref.input_names) != set(inputs):
            raise TflabError(f"signature {key}: inputs {sorted(inputs)} do not match the in-process "
                             f"function's {sorted(ref.input_names)}")
        if kind == "tf.Module":
            notes += _lost_dict_keys(key, ref.concrete, inputs)
        stats = {n: [0, 0.0, 0] for n in outputs}
        for feed in batches.feeds(key):
            got = {k: _to_numpy(v) for k, v in run_signature(
                fn, key, {n: tf.constant(a) for n, a in feed.items()}, side="reloaded SavedModel").items()}
            want = run_signature(lambda **f: ref(f), key, feed, side="in-process model")
            for n in outputs:
                m, d, u = compare_bits(got[n], want[n])
                s = stats[n]
                s[0] += m
                s[1] = max(s[1], d)
                s[2] = max(s[2], u)
        out_checks = {n: OutputBits(n, outputs[n].dtype, outputs[n].shape, stats[n][0] == 0, *stats[n])
                      for n in outputs}
        checks[key] = SignatureCheck(key, inputs, out_checks)
        if not checks[key].bit_exact:
            notes += _random_op_notes(key, ref.concrete)
        notes += _fixed_shape_notes(key, inputs)
    notes += _restore_state(state)
    return SavedModelCheck(path=path, kind=kind, bit_exact=all(c.bit_exact for c in checks.values()),
                           signatures=checks, batch_count=len(batches), notes=tuple(notes),
                           example_batches=batches)


def _variable_state(obj) -> list[tuple[Any, np.ndarray]]:
    """(variable, a copy of its value) for each variable of a tf.Module or Keras model."""
    out = []
    for v in list(getattr(obj, "variables", None) or ()):
        try:
            out.append((v, np.array(v.numpy(), copy=True)))
        except Exception:  # a variable that cannot be read eagerly (uninitialized): not restored
            continue
    return out


def _restore_state(state: list[tuple[Any, np.ndarray]]) -> list[str]:
    """Gives the user's variables their values from before the check back, and says so.

    The bit-exact check calls the in-process model on every example batch; a
    stateful model (a counter, a ``assign_add`` in ``__call__``) changes its own
    variables on each call, which would leave the user's object changed.
    """
    changed = []
    for v, before in state:
        try:
            now = np.asarray(v.numpy())
        except Exception:
            continue
        if now.shape != before.shape or not np.array_equal(now, before, equal_nan=now.dtype.kind == "f"):
            changed.append((v, before, now))
            v.assign(before)
    if not changed:
        return []
    v, before, now = changed[0]
    show = (lambda a: f"{a.item():g}" if a.size == 1 and a.dtype.kind in "fiu" else f"{a.dtype}{list(a.shape)}")
    return [f"calling the in-process model for the check changed {len(changed)} of its variable(s) "
            f"(e.g. {getattr(v, 'name', '?')}: {show(before)} -> {show(now)}); tflab assigned the values "
            f"from before the check back, so the model is as it was (the SavedModel was saved with them)"]


def _graph_op_types(concrete) -> dict[str, str]:
    """Op type -> the name of one op of that type, over the FuncGraph and every function it calls."""
    gdef = concrete.graph.as_graph_def()
    out: dict[str, str] = {}
    for node in gdef.node:
        out.setdefault(node.op, node.name)
    for fn in gdef.library.function:
        for node in fn.node_def:
            out.setdefault(node.op, f"{fn.signature.name}/{node.name}")
    return out


def _random_op_notes(key: str, concrete) -> list[str]:
    """Why a signature is not bit-exact when its graph draws random numbers (case M3):
    a stateful random op gives new values on each call, so the in-process model
    and the reloaded one cannot agree; neither does the in-process model with itself."""
    from tflab.modes import STATEFUL_RANDOM_OPS

    try:
        types = _graph_op_types(concrete)
    except Exception:  # a ConcreteFunction without a readable graph: no note
        return []
    found = sorted(t for t in types if t in STATEFUL_RANDOM_OPS)
    if not found:
        return []
    ops = ", ".join(f"{t} ({types[t]!r})" for t in found)
    return [f"signature {key}: not bit-exact because its graph draws random numbers: {ops} gives new "
            f"values on every call, so two calls of the in-process model differ too; the round trip "
            f"itself is not the cause. To compare, pass the noise in as an input, or draw it with a "
            f"stateless op and a fixed seed (tf.random.stateless_uniform(shape, seed=[1, 2]))"]


def _fixed_shape_notes(key: str, inputs: Mapping[str, TensorInfo]) -> list[str]:
    """A warning for a signature whose inputs have a fixed batch dim (tensorflow/tensorflow#36461):
    TF Serving, or any caller, with another batch size gets an error."""
    fixed = [i for i in inputs.values() if i.shape and i.shape[0] is not None]
    if not fixed:
        return []
    shown = ", ".join(str(i) for i in fixed)
    relaxed = ", ".join(f"tf.TensorSpec([None{''.join(f', {d}' for d in i.shape[1:])}], tf.{i.dtype}, "
                        f"name={i.name!r})" for i in fixed)
    return [f"signature {key} takes {shown} exactly (dim 0 is fixed at the traced size): a batch of "
            f"another size is refused when bound to the SignatureDef (\"Can not cast TensorSpec\") or "
            f"fails in an op traced at the fixed size. For any batch size, export with a None "
            f"dim: input_signature=[{relaxed}] (signature {key}: "
            + ", ".join(f"{i.name}: {i.dtype}[None{''.join(f',{d}' for d in i.shape[1:])}]" for i in fixed)
            + ")"]


def _lost_dict_keys(key: str, concrete, inputs: Mapping[str, TensorInfo]) -> list[str]:
    """A note when a dict input's keys did not become the signature's input names."""
    notes = []
    args, kwargs = concrete.structured_input_signature
    for arg in list(args) + list(kwargs.values()):
        if isinstance(arg, Mapping):
            lost = [k for k in arg if k not in inputs]
            if lost:
                notes.append(f"signature {key}: dict keys {lost} are not input names (the signature has "
                             f"{sorted(inputs)}); unnamed TensorSpecs are named after their placeholders, "
                             f"so give each spec name=<key> to keep the keys")
    return notes
