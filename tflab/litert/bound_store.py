"""The end-to-end bound's gradients, stored with the SavedModel that `tflab.export` wrote.

`tflab.litert.bounds.sensitivity` takes one backward pass per output element
(up to `tflab.litert.bounds.MAX_GRADIENT_ELEMENTS`): on a CNN that is most of
``tflab export``'s time, and a later ``tflab check-tflite`` against the same
SavedModel and examples took all of them again. Export therefore stores the
sums it computed in ``saved_model/assets.extra/tflab_bound_gradients.npz``
(``assets.extra`` is the SavedModel folder TF leaves to other tools: loading
reads nothing there; TF Serving keeps its warm-up requests in it), and
`load` gives them back only when everything they were computed from is the
same:

* the SavedModel's graph (``saved_model.pb``), its ``assets/`` files, and
  its weights: the checkpoint index ``variables/variables.index`` holds a
  CRC32C of every variable's bytes (``tensor_bundle.proto``), so a changed
  weight changes the index;
* the example batches, byte for byte, and their input names;
* the TF and tflab versions, this file's format and the bound's element
  budget (`tflab.litert.bounds.gradient_elements`' constants).

It also names export's float conversion beside the SavedModel, with its
SHA-256: `float_reference` gives it to ``check-tflite`` as the per-op
reference, which it otherwise converts again.

Anything else (a file that is missing, unreadable, of another model or other
examples, or with arrays of the wrong shape) is no stored result: the
gradients are computed as before. Nothing here is written outside a folder
export is still filling.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

STORE = os.path.join("assets.extra", "tflab_bound_gradients.npz")
FORMAT = 1


def model_key(saved_model_dir: str | os.PathLike) -> str | None:
    """`content_key` without the examples: what a float conversion of the SavedModel depends on."""
    return content_key(saved_model_dir, (), ())


def content_key(saved_model_dir: str | os.PathLike, batches: Any, budget: tuple) -> str | None:
    """SHA-256 of what the gradients depend on (module docstring), or None when the SavedModel cannot be read.

    Args:
        saved_model_dir: a SavedModel folder.
        batches: the example batches, ``{input name: ndarray}`` each.
        budget: the bound's element budget, ``(MIN_GRADIENT_ELEMENTS, MAX_GRADIENT_ELEMENTS,
            GRADIENT_BUDGET)`` of `tflab.litert.bounds`.

    Returns:
        64 hex digits, or None (no ``saved_model.pb`` / checkpoint index to read).
    """
    import tensorflow as tf

    from tflab._api.version import package_version

    h = hashlib.sha256()  # tflab's version too: a later tflab may compute the sums otherwise
    h.update(json.dumps([FORMAT, package_version(), tf.__version__, list(budget)]).encode())
    root = os.fspath(saved_model_dir)
    assets = os.path.join(root, "assets")  # a vocabulary or table file changes what the graph computes
    extra = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(assets) for f in files) \
        if os.path.isdir(assets) else []
    for part in ("saved_model.pb", os.path.join("variables", "variables.index"), *extra):
        path = os.path.join(root, part)
        h.update(part.encode())
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except FileNotFoundError:
            if part == "saved_model.pb":
                return None
            h.update(b"no variables")  # a model without variables has no index
        except OSError:
            return None
    for b in batches:
        for k in sorted(b):
            a = np.asarray(b[k])
            h.update(json.dumps([k, a.dtype.str, list(a.shape)]).encode())
            h.update(np.ascontiguousarray(a).tobytes() if a.dtype.kind not in "OU" else repr(a.tolist()).encode())
    return h.hexdigest()


def store(saved_model_dir: str | os.PathLike, batches: Any, budget: tuple, sens,
          float_tflite: str | os.PathLike | None = None) -> str | None:
    """Writes ``sens`` (a `tflab.litert.bounds._Sensitivity`) into the SavedModel's ``assets.extra``.

    For `tflab.export`, on the SavedModel in its temporary output folder (published whole, or not at
    all, with the rest of the export).

    Args:
        saved_model_dir: the SavedModel folder.
        batches: the example batches ``sens`` was computed on.
        budget: as for `content_key`.
        sens: the gradients' sums (`tflab.litert.bounds._Sensitivity`).
        float_tflite: export's float (``none``) conversion of this SavedModel, beside it; its name
            and SHA-256 are recorded, so that `float_reference` can hand it to a later check as the
            per-op reference instead of converting the SavedModel again.

    Returns:
        The file's path, or None when the SavedModel could not be read (nothing written).
    """
    key = content_key(saved_model_dir, batches, budget)
    if key is None:
        return None
    arrays: dict[str, np.ndarray] = {"fan_in": sens.fan_in, "quantizable": sens.quantizable, "step": sens.step}
    index: dict[str, Any] = {"key": key, "model": model_key(saved_model_dir), "outputs": {}}
    if float_tflite is not None and os.path.isfile(float_tflite):
        with open(float_tflite, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        index["float_tflite"] = {"file": os.path.relpath(float_tflite, saved_model_dir), "sha256": digest}
    for i, okey in enumerate(sorted(sens.rel)):
        ins = sens.inputs.get(okey, {})
        index["outputs"][okey] = {"n": i, "inputs": sorted(ins)}
        arrays[f"rel{i}"], arrays[f"abs{i}"] = sens.rel[okey], sens.abs[okey]
        for j, name in enumerate(sorted(ins)):
            arrays[f"in{i}_{j}"] = ins[name]
    arrays["index"] = np.frombuffer(json.dumps(index).encode(), dtype=np.uint8)
    path = os.path.join(os.fspath(saved_model_dir), STORE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)  # rows without a backward pass are NaN: they compress to little
    return path


def _store_path(saved_model_dir: str | os.PathLike) -> str | None:
    path = os.path.join(os.fspath(saved_model_dir), STORE)
    return path if os.path.isfile(path) else None


def _index(z) -> dict:
    return json.loads(z["index"].tobytes().decode())


def load(saved_model_dir: str | os.PathLike, batches: Any, budget: tuple, n_variables: int) -> dict | None:
    """The stored gradients for exactly this SavedModel and these examples, or None.

    Args:
        saved_model_dir: the SavedModel folder.
        batches: the example batches the gradients must have been computed on.
        budget: as for `content_key`.
        n_variables: the number of float variables `tflab.litert.bounds.sensitivity` found
            (the arrays' column count).

    Returns:
        The fields of a `tflab.litert.bounds._Sensitivity` (``rel``, ``abs``, ``inputs``,
        ``fan_in``, ``quantizable``, ``step``), or None (no file, another model or other examples,
        or a file that does not read back whole).
    """
    path = _store_path(saved_model_dir)
    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            index = _index(z)
            if index.get("key") != content_key(saved_model_dir, batches, budget):
                return None
            rel, absl, inputs = {}, {}, {}
            for okey, entry in index["outputs"].items():
                i = int(entry["n"])
                rel[okey], absl[okey] = z[f"rel{i}"], z[f"abs{i}"]
                inputs[okey] = {name: z[f"in{i}_{j}"] for j, name in enumerate(entry["inputs"])}
                if not (rel[okey].ndim == absl[okey].ndim == 2 and rel[okey].shape == absl[okey].shape
                        and rel[okey].shape[1] == n_variables):
                    return None
            sens = {"rel": rel, "abs": absl, "inputs": inputs, "fan_in": z["fan_in"],
                    "quantizable": z["quantizable"].astype(bool), "step": z["step"]}
    except Exception:  # noqa: BLE001 - damaged (zlib, zip, JSON, numbers): not a whole store of ours, computed again
        return None
    if not (sens["fan_in"].shape == sens["quantizable"].shape == sens["step"].shape == (n_variables,)):
        return None
    # Sums of |g|·|w| and |g|: float64, ≥ 0 and finite where computed (NaN marks an element without a pass).
    for a in [*sens["rel"].values(), *sens["abs"].values(), sens["fan_in"], sens["step"],
              *(v for d in sens["inputs"].values() for v in d.values())]:
        if a.dtype != np.float64 or np.isinf(a).any() or (a < 0).any():
            return None
    return sens


def float_reference(saved_model_dir: str | os.PathLike) -> bytes | None:
    """Export's float conversion of this SavedModel, when the store names it and it is unchanged; else None.

    The flatbuffer is taken only when the SavedModel is the one it was converted from (`model_key`)
    and its bytes are the ones export wrote (SHA-256): the per-op check's reference weights then
    are what a conversion now would give (the same `tflab.litert.conversion.make_converter` recipe).
    """
    path = _store_path(saved_model_dir)
    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            index = _index(z)
        entry = index.get("float_tflite")
        if not entry or index.get("model") != model_key(saved_model_dir):
            return None
        with open(os.path.join(os.fspath(saved_model_dir), entry["file"]), "rb") as f:
            data = f.read()
    except Exception:  # noqa: BLE001 - damaged: no reference from it
        return None
    return data if hashlib.sha256(data).hexdigest() == entry.get("sha256") else None
