"""Lab step 7: a SavedModel round trip must be bit-exact.

`save_and_reload` writes an object as a SavedModel, loads it back with
`tf.saved_model.load`, runs every SignatureDef on the examples and compares
each output with the in-process ConcreteFunction it was saved from, byte by
byte (`tflab._graph.numeric.compare_bits`). Both sides run the same FuncGraph with the
same variable values on the same TF kernels, so any difference (even ``-0.0`` vs
``0.0`` or another NaN payload) means something was not saved the way it ran.

One saver per kind of object (tf.Module, Keras 3, tf-keras, a loaded SavedModel)
returns the `Reference` of each signature; the check, the notes on what was not
kept (`tflab.saved_model.signature_defs`) and giving the user's variables back
after the in-process calls are here.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import numpy as np

from tflab._graph.numeric import compare_bits
from tflab.errors import TflabError, UsageError
from tflab.examples import Examples, random_examples, union_inputs
from tflab.saved_model.loading import (DEFAULT_SIGNATURE, remember_loaded, signature_inputs, signature_outputs,
                                       to_numpy)
from tflab.saved_model.records import OutputBits, SavedModelCheck, SignatureCheck
from tflab.saved_model.signature_defs import (Reference, fixed_shape_notes, lost_dict_keys_notes,
                                              module_signatures, reference, unsaved_notes)

__all__ = ["save_and_reload", "is_keras3", "is_tf_keras"]


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



def _is_loaded_saved_model(obj) -> bool:
    # tf.saved_model.load returns an AutoTrackable carrying the SignatureDefs.
    sigs = getattr(obj, "signatures", None)
    return sigs is not None and hasattr(sigs, "items") and type(obj).__name__ == "_UserObject"


def _save_loaded(obj, path: str) -> dict[str, Reference]:
    import tensorflow as tf

    sigs = dict(obj.signatures)
    if not sigs:
        raise UsageError("the SavedModel has no SignatureDef to check: export it with signatures")
    tf.saved_model.save(obj, path, signatures=sigs)
    return {k: reference(f, dict) for k, f in sigs.items()}


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





def _save_keras3(model, path: str) -> dict[str, Reference]:
    # Model.export (keras/src/export/saved_model.py, export_saved_model) builds
    # an ExportArchive with one "serve" endpoint and writes it out. We do the
    # same steps but keep the archive, so its in-process endpoint is the reference.
    from keras.export import ExportArchive

    from tflab._tf.saved_model import keras_input_signature

    archive = ExportArchive()
    serve = archive.track_and_add_endpoint("serve", model, keras_input_signature(model))
    archive.write_out(path, verbose=False)
    ref = reference(serve.get_concrete_function())
    # write_out also signs the first endpoint as serving_default: both run the same function.
    return {"serve": ref, DEFAULT_SIGNATURE: ref}


def _save_tf_keras(model, path: str) -> dict[str, Reference]:
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
    return {DEFAULT_SIGNATURE: reference(concrete, rename)}


def _save_module(obj, path: str, signatures) -> dict[str, Reference]:
    import tensorflow as tf

    sigs, notes = module_signatures(obj, signatures)
    try:
        tf.saved_model.save(obj, path, signatures=sigs)
    except (AssertionError, ValueError) as e:
        raise _explain_save_error(e) from e
    return {k: reference(cf) for k, cf in sigs.items()}, notes


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
            (`tflab._io.paths.output_path` probes it: ``/proc/x`` as root); ``obj`` has no signature
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
    <SavedModelCheck tf.Module /tmp/scale_sm: bit-exact; signatures [serving_default(exact)]; 0 note(s)>
    >>> list(check.signatures["serving_default"].outputs)
    ['y']
    """
    from tflab._io.paths import check_path_text, output_path

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
        from tflab._user.target import user_frame

        where = user_frame(e) if isinstance(e, Exception) and not isinstance(e, TflabError) else ""
        if where:
            # The user's function failed while TF traced it for saving: say where.
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            raise UsageError(f"tracing for SavedModel raised {type(e).__name__}: {msg} (at {where})") from e
        raise


def _save(obj, path: str, signatures) -> tuple[str, dict, list[str]]:
    """Saves ``obj`` the way its kind is saved: ``(kind, {signature key: Reference}, notes)``."""
    import tensorflow as tf

    notes: list[str] = []
    if _is_loaded_saved_model(obj):
        kind, refs = "SavedModel", _save_loaded(obj, path)
    elif is_keras3(obj):
        kind, refs = "keras", _save_keras3(obj, path)
        notes.append("Keras export keeps the forward pass only (call with training=False, endpoint 'serve' "
                     "and its alias serving_default): Dropout, BatchNorm updates, the optimizer and the "
                     "Python layer code are not in the SavedModel (keras/src/export/saved_model.py)")
    elif is_tf_keras(obj):
        kind, refs = "tf_keras", _save_tf_keras(obj, path)
    elif isinstance(obj, tf.Module):
        kind = "tf.Module"
        notes = unsaved_notes(obj)
        refs, how = _save_module(obj, path, signatures)
        notes += how
    else:
        raise UsageError(f"cannot save a {type(obj).__name__}: give a tf.Module, a Keras 3 model "
                         f"or a tf-keras model")
    return kind, refs, notes


def _save_and_check(obj, path: str, batches: Examples | None, signatures) -> SavedModelCheck:
    import tensorflow as tf

    from tflab._user.usercode import run_signature

    try:
        kind, refs, notes = _save(obj, path, signatures)
    except TflabError:
        raise
    except Exception as e:
        from tflab.saved_model.node_names import explain_model_error, raised_by_tf

        if not raised_by_tf(e):
            raise  # tflab's own bug: its traceback is what a report needs
        save = (lambda m, p: _save_keras3(m, p)) if is_keras3(obj) else None
        raise explain_model_error(e, obj, "while saving it as a SavedModel", save) from e

    # The in-process model is called below: remember its variables to give them back.
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
            notes += lost_dict_keys_notes(key, ref.concrete, inputs, obj)
        stats = {n: [0, 0.0, 0] for n in outputs}
        for feed in batches.feeds(key):
            got = {k: to_numpy(v) for k, v in run_signature(
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
        notes += _random_op_notes(key, ref.concrete, checks[key].bit_exact,
                                  lambda: _second_call_differs(fn, key, batches))
        notes += fixed_shape_notes(key, inputs, obj if kind == "tf.Module" else None, ref.concrete, fn)
    if kind == "keras":
        from tflab.saved_model.names import name_notes

        notes += name_notes(obj)
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


def _second_call_differs(fn, key: str, batches) -> int:
    """Elements of the reloaded signature's outputs that change between two calls on the first batch."""
    import tensorflow as tf

    from tflab._user.usercode import run_signature

    feed = next(iter(batches.feeds(key)))
    a, b = ({k: to_numpy(v) for k, v in run_signature(fn, key, {n: tf.constant(x) for n, x in feed.items()},
                                                      side="reloaded SavedModel").items()} for _ in range(2))
    return sum(int(np.count_nonzero(a[n].view(np.uint8) != b[n].view(np.uint8))) if a[n].dtype.kind != "O"
               else int(np.count_nonzero(a[n] != b[n])) for n in a)


def _random_op_notes(key: str, concrete, bit_exact: bool = False, recall=None) -> list[str]:
    """Why a signature is not bit-exact when its graph draws random numbers:
    a stateful random op gives new values on each call, so the in-process model
    and the reloaded one cannot agree; neither does the in-process model with itself.

    When the bits match anyway (a global seed, ``tf.random.set_seed(0)``,
    makes both fresh kernels start from the same state, so their first calls coincide), the
    note is given too, with what ``recall()`` measured: how many output bytes a second call
    of the reloaded signature changes."""
    from tflab.modes import STATEFUL_RANDOM_OPS

    try:
        types = _graph_op_types(concrete)
    except Exception:  # a ConcreteFunction without a readable graph: no note
        return []
    found = sorted(t for t in types if t in STATEFUL_RANDOM_OPS)
    if not found:
        return []
    ops = ", ".join(f"{t} ({types[t]!r})" for t in found)
    if bit_exact:
        try:
            changed = recall() if recall is not None else None
        except Exception:  # noqa: BLE001 - the note stands without the measurement
            changed = None
        if not changed:  # not measured, or the random values do not reach the outputs: no claim
            return []
        again = f" (measured: a second call of the reloaded signature changes {changed} output byte(s))"
        return [f"signature {key}: bit-exact here only because both sides start from the same random state "
                f"(a global seed: tf.random.set_seed / keras.utils.set_random_seed): its graph draws random "
                f"numbers, {ops}, which give new values on every call{again}, so the bits match on the first "
                f"call only. " + _random_fix().line()]
    return [f"signature {key}: not bit-exact because its graph draws random numbers: {ops} gives new "
            f"values on every call, so two calls of the in-process model differ too; the round trip "
            f"itself is not the cause. " + _random_fix().line()]


def _random_fix():
    from tflab import fix as fx

    return fx.unchecked("code", "tf.random.stateless_uniform(shape, seed=[1, 2])",
                        "to compare, pass the noise in as an input, or draw it with a stateless op and a fixed seed",
                        "the random op is in your signature's code; tflab does not rewrite a saved function")

