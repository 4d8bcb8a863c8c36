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

The package, one module per concern:

* `records`: `TensorInfo`, `OutputBits`, `SignatureCheck`, `SavedModelCheck`;
* `loading`: folder checks, the cached `load_saved_model`, a SignatureDef's tensors;
* `signature_defs`: which signatures are saved, the in-process reference, the notes;
* `roundtrip`: `save_and_reload` itself.

Importing the package imports none of them: each name loads its part on first use.
"""

from __future__ import annotations

import importlib

from tflab._api.lazy import lazy_exports

# Public name -> the part that defines it (PEP 562 module __getattr__).
_EXPORTS = {
    **dict.fromkeys(("OutputBits", "SavedModelCheck", "SignatureCheck", "TensorInfo"), "records"),
    **dict.fromkeys(("DEFAULT_SIGNATURE", "load_saved_model", "normalize_outputs", "remember_loaded",
                     "require_readable_saved_model", "require_saved_model_dir", "signature_inputs",
                     "signature_outputs", "tensor_info"), "loading"),
    **dict.fromkeys(("signature_input_names", "unsaved_notes"), "signature_defs"),
    **dict.fromkeys(("is_keras3", "is_tf_keras", "save_and_reload"), "roundtrip"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.saved_model.{part}"))
