"""Which parameter each ``--examples`` array feeds: by its name, the one rule every verb's ``--examples``
and the API's ``examples=`` follow (`tflab.examples.example_inputs` calls `bind_example_names`).

An array whose name matches no parameter is refused, naming it and the parameters expected: a silent
guess would feed the wrong array to a parameter. Two names are not guesses:

* ``arr_0``, numpy's own name for an array given without a name (``np.savez(path, array)``), feeds a
  function with exactly one parameter left to feed (no default, no ``--arg``), when it is the file's
  only array: "the first positional array" has one meaning there, and none with two parameters;
* the name of a single-input Keras model's input (``keras.Input(name="feat")``; an export's
  ``examples.npz`` names its arrays after the SignatureDef inputs, which Keras names so) feeds that
  model's one input parameter (its ``call``'s ``inputs``).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from tflab.errors import UsageError

__all__ = ["NUMPY_DEFAULT_NAME", "bind_example_names", "model_input_names"]

#: the key ``np.savez(path, array)`` gives an array passed without a name (numpy/lib/_npyio_impl.py: ``arr_%d``)
NUMPY_DEFAULT_NAME = "arr_0"


def model_input_names(fn: Any) -> tuple[str, ...]:
    """The input names of a functional Keras model (``[t.name for t in model.inputs]``), else ()."""
    try:
        inputs = getattr(fn, "inputs", None) if hasattr(fn, "call") else None
    except Exception:  # noqa: BLE001 - a subclassed model not built yet raises on .inputs
        return ()
    if not isinstance(inputs, (list, tuple)):
        return ()
    return tuple(str(getattr(t, "name", "")) for t in inputs if getattr(t, "name", None))


def bind_example_names(values: dict[str, Any], fn: Callable, sig: inspect.Signature | None,
                       named: dict[str, Any], source: str, fn_name: str) -> dict[str, Any]:
    """``values`` (array name → value) keyed by the parameters of ``fn`` they feed.

    Args:
        values: the arrays, by the names the file or dict gives them.
        fn: the user's function or Keras model/layer.
        sig: the signature whose parameters the arrays feed (a Keras layer's ``call``'s).
        named: the ``--arg`` values (their parameters are not left to feed).
        source: ``--examples FILE`` or ``examples``, for messages.
        fn_name: the function's name, for messages.

    Returns:
        ``{parameter name: value}``; with ``**kwargs`` in ``sig`` other names pass through.

    Raises:
        UsageError: an array whose name is no parameter (named, with the parameters expected), unless
            it is one of the two names of the module docstring.
    """
    params = [] if sig is None else [p.name for p in sig.parameters.values()
                                     if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = [n for n in values if n not in params]
    if not unknown or sig is None:
        return dict(values)
    required = [p.name for p in sig.parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in named]
    if len(values) == 1 and len(required) == 1 and required[0] not in values:
        (name,) = unknown
        inputs = model_input_names(fn)
        if name == NUMPY_DEFAULT_NAME or (len(inputs) == 1 and name == inputs[0]):
            return {required[0]: values[name]}
    # A function's own ``**kwargs`` takes any name; a Keras layer's ``call(inputs, ..., **kwargs)`` does
    # not (Keras passes them on as call options, never as inputs).
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()) and not hasattr(fn, "call"):
        return dict(values)
    expected = [p for p in params if p not in named] or params
    hint = ""
    if NUMPY_DEFAULT_NAME in unknown:
        hint = (f"; {NUMPY_DEFAULT_NAME!r} is numpy's name for an array saved without a name, which tflab binds "
                f"only as the one array of a function with one parameter to feed")
    raise UsageError(f"{source}: array(s) {', '.join(map(repr, unknown))} name no parameter of {fn_name}; its "
                     f"parameters are ({', '.join(params)}), expected: {', '.join(map(repr, expected)) or 'none'}"
                     f"{hint}: name each array after the parameter it feeds "
                     f"(np.savez(path, {expected[0] if expected else 'x'}=array))")
