"""An error TF or Keras raises while saving the user's model is the user's: one line, its cause measured.

`explain_model_error` turns an exception raised inside TF or Keras (not in tflab) while
``tf.saved_model.save`` / ``ExportArchive.write_out`` works on the user's model into one
`tflab.errors.UsageError` with TF's innermost message; the CLI prints it and exits 2, where it
printed TF's traceback and exited 70, the code its docs keep for crashes.

Where the cause can be measured it is named: a name that is not a valid TF node name.
TF's own check (``tensorflow/python/framework/ops.py``, ``_VALID_OP_NAME_REGEX``) is
``^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$``; an input named ``"a feature"`` is only warned about there,
then the save fails with "more than one argument … was named" (tensorflow/tensorflow#44984), and
a layer named ``"out put"`` fails as "not a valid scope name". The fix is checked by renaming
the names in a copy of the model (its config, the same weights) and saving that copy.
"""

from __future__ import annotations

import json
import os
import re
import sysconfig
import tempfile
import traceback
from typing import Any

from tflab.errors import UsageError

#: TF's node-name rule (tensorflow/python/framework/ops.py: _VALID_OP_NAME_REGEX).
NODE_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$")
_STDLIB = (sysconfig.get_paths()["stdlib"] + os.sep, sysconfig.get_paths()["platstdlib"] + os.sep)
_TFLAB = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def raised_by_tf(e: BaseException) -> bool:
    """True when the last frame of ``e``'s traceback outside the standard library is not tflab's.

    TF, Keras or the user's own code raised it (TF's save of the user's model), not a tflab bug,
    which keeps its traceback.
    """
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(_STDLIB) or "site-packages" in f.filename]  # a venv's lib holds both
    return bool(frames) and not os.path.abspath(frames[-1].filename).startswith(_TFLAB)


def innermost_message(e: BaseException) -> str:
    """``Type: first line`` of the innermost exception (``__cause__``/``__context__`` followed), Keras'
    "Exception encountered when calling …" wrapper and ANSI colours removed."""
    from tflab._user.usercode import uncaught_chain

    # A context TF caught and handled is not the error; TF's private status exception is its C++ copy.
    inner = ([x for x in uncaught_chain(e) if not type(x).__name__.startswith("_")] or [e])[-1]
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(inner)).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].startswith("Exception encountered when calling") and len(lines) > 1:
        lines = lines[1:]
    first = lines[0] if lines else ""
    return f"{type(inner).__name__}: {first[:300]}"


def _why(name: str) -> str:
    bad = name[0] if name and not re.match(r"[A-Za-z0-9.]", name[0]) else next(
        (c for c in name if not re.match(r"[A-Za-z0-9_.\\/>-]", c)), "")
    return {" ": "space", "": "empty"}.get(bad, f"{bad!r}" if not name or bad != name[0] else f"starts with {bad!r}")


def renamed(name: str) -> str:
    """``name`` as a valid TF node name that Keras also takes (no ``/``): ``a feature`` -> ``a_feature``."""
    fixed = re.sub(r"^[^A-Za-z0-9.]+", "", re.sub(r"[^A-Za-z0-9_.>-]", "_", name))
    return fixed or "input"


def invalid_names(model: Any) -> list[tuple[str, str]]:
    """``(what, name)`` for each input and layer name of a Keras model that is not a valid TF node name."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for t in getattr(model, "inputs", None) or []:
        name = getattr(t, "name", None)
        if isinstance(name, str) and not NODE_NAME.match(name) and name not in seen:
            seen.add(name)
            found.append(("input", name))
    for layer in getattr(model, "layers", None) or []:
        name = getattr(layer, "name", None)
        if isinstance(name, str) and not NODE_NAME.match(name) and name not in seen:
            seen.add(name)
            found.append(("layer", name))
    return found


def _renamed_copy(model: Any, names: list[str]):
    """A copy of a Keras model built from its config with ``names`` renamed, holding the same weights."""
    text = json.dumps(model.get_config())
    for name in names:
        text = text.replace(json.dumps(name), json.dumps(renamed(name)))
    copy = type(model).from_config(json.loads(text))
    copy.set_weights(model.get_weights())
    return copy


def _check_rename(model: Any, names: list[str], save) -> str:
    """"checked: exports" when the renamed copy saves, else why the check could not say so."""
    try:
        copy = _renamed_copy(model, names)
    except Exception as e:  # a subclassed model without a config: the rename is still the advice
        return f"not checked: a renamed copy could not be built from the model's config ({type(e).__name__})"
    with tempfile.TemporaryDirectory(prefix="tflab_rename_") as tmp:
        try:
            save(copy, os.path.join(tmp, "sm"))
        except Exception as e:
            return f"not checked: the renamed copy failed too ({innermost_message(e)})"
    return "checked: exports"


def explain_model_error(e: BaseException, obj: Any, during: str, save=None) -> UsageError:
    """One `UsageError` for an exception TF or Keras raised on the user's model ``obj`` ``during`` a step.

    Args:
        e: the exception (`raised_by_tf` said yes).
        obj: the user's model.
        during: what tflab was doing ("while saving it as a SavedModel").
        save: ``save(model, path)``, the same save, used to check a rename on a copy; None: not checked.

    Returns:
        "input name 'a feature' is not a valid TF node name (space); rename it, e.g. `a_feature`
        (checked: exports); TF said: ValueError: …", or "TF raised … while …: ValueError: …" when no
        cause is measured.
    """
    said = innermost_message(e)
    bad = invalid_names(obj)
    if bad:
        what, name = bad[0]
        check = _check_rename(obj, [n for _, n in bad], save) if save is not None else "not checked"
        more = f" ({len(bad) - 1} more: {', '.join(repr(n) for _, n in bad[1:4])})" if len(bad) > 1 else ""
        return UsageError(f"{what} name {name!r} is not a valid TF node name ({_why(name)}){more}; rename it, "
                          f"e.g. `{renamed(name)}` ({check}); TF said: {said}")
    return UsageError(f"TensorFlow raised an error on your model {during}: {said}")
