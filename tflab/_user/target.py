"""The CLI's shared grammar: ``FILE.py:FUNC`` targets and ``--arg`` values.

Every CLI verb that takes a function (``inspect``, ``autograph``, ``compare``)
uses these helpers, so the grammar is the same everywhere:

* ``name=dtype[dims]`` is a `tf.TensorSpec`; ``None`` marks an unknown dim,
  ``float32[]`` is a scalar. Example: ``x=float32[None,8]``. A negative dim
  (``-1``) is refused rather than read as ``None``; an unknown dtype is named
  with its nearest TF dtypes (`difflib`).
* ``name=<python literal>`` is a Python value, read with `ast.literal_eval`.
  Example: ``n=3``, ``training=True``, ``s='abc'``.

Error messages echo the user's text cut to `tflab._user.usercode.MAX_ECHO`
characters, so a 5000-digit literal stays one readable line. Importing the
user's file runs under `tflab._user.usercode.user_code` (``sys.exit`` at import is
one line).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import inspect
import os
import functools
import re
import sys
from typing import Any, Callable, Iterator

# user_frame and error_summary live in _usercode (which must not import this
# module); they stay importable from here.
from tflab._user.usercode import error_summary, shorten, user_frame  # noqa: F401
from tflab.errors import UsageError

# TensorShape dims are int64 (tensorflow/core/framework/tensor_shape.proto: int64 size);
# a larger one failed later as "f raised while tracing: ValueError: Value out of range".
MAX_DIM = 2**63 - 1


def _as_value(parsed: Any, name: str | None) -> Any:
    """A `tflab._api.cliargs.SpecText` as a `tf.TensorSpec` named ``name``; a literal's value as is."""
    from tflab._api.cliargs import SpecText

    if isinstance(parsed, SpecText):
        import tensorflow as tf

        return tf.TensorSpec(list(parsed.dims), tf.dtypes.as_dtype(parsed.dtype), name=name)
    return parsed.value


def parse_value(text: str, name: str | None = None) -> Any:
    """Parses the value half of ``--arg NAME=VALUE``.

    The grammar is `tflab._api.cliargs.parse_arg_value` (no TensorFlow), the one the CLI's pre-flight
    checks with, so both refuse a value in the same words; this makes its `tf.TensorSpec`.

    Args:
        text: ``dtype[dims]`` (e.g. ``float32[None,8]``, ``int64[]``) or a
            Python literal (``3``, ``0.5``, ``True``, ``'abc'``, ``[1, 2]``).
        name: the parameter name, used as the TensorSpec's name.

    Returns:
        A `tf.TensorSpec` or the Python value.

    Raises:
        UsageError: the text is neither form.
    """
    from tflab._api.cliargs import parse_arg_value

    return _as_value(parse_arg_value(name, text), name)


def parse_args(items: list[str] | None) -> dict[str, Any]:
    """Parses repeated ``--arg NAME=VALUE`` strings into an ordered dict.

    The grammar is `tflab._api.cliargs.parse_arg_items` (no TensorFlow), which the CLI's pre-flight
    (`tflab._api.cliargs.check_arg_grammar`) reads too: the same items refused in the same words.

    Raises:
        UsageError: an item has no ``=``, an empty or repeated name, or a bad value.
    """
    from tflab._api.cliargs import parse_arg_items

    return {name: _as_value(parsed, name) for name, parsed in parse_arg_items(items).items()}


def load_module(path: str, *, what: str = "script"):
    """Imports a user's ``.py`` file as a fresh module.

    Raises:
        UsageError: the file does not exist, is not ``.py``, or raised on import
            (the message names the user's line).
    """
    from tflab._io.paths import input_path

    # Probed without opening it (a FIFO would block open() for ever): the one input place.
    input_path(path, what, want="file", what="a path to a .py file")
    if not path.endswith(".py"):
        raise UsageError(f"{what} {path!r} is not a .py file")
    mod_name = "_tflab_user_" + re.sub(r"\W", "_", os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    from tflab._user.usercode import user_code

    try:
        with user_code(path, "at import", exceptions=True,
                       hint="the module must import without exiting: put script code under "
                            "if __name__ == \"__main__\":"):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return module


def load_target(target: str) -> Callable:
    """Loads ``FILE.py:NAME`` (``NAME`` may be dotted: ``model.call``).

    Returns:
        The object named; callers check that it is callable.

    Raises:
        UsageError: a missing ``:``, a missing file, or a missing name (the
            message lists the callables the file defines).
    """
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"{target!r}: expected FILE.py:FUNC, e.g. examples/model.py:step")
    module = load_module(path, what="file")
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            import difflib

            names = defined_callables(module)
            close = difflib.get_close_matches(name, names, n=1)
            raise UsageError(f"{path} has no {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                             + "; callables defined there: " + (", ".join(names) or "none"))
        obj = getattr(obj, part)
    return obj


def defined_callables(module: Any) -> list[str]:
    """The public callables a module's own code binds: its functions and classes, and the objects
    its top level made (a Keras model, a tf.Module, a tf.function), not what it imported.

    A Keras model built at the top level has ``__module__`` ``keras.src.models.functional``: read as
    imported, four models were listed as "none".
    """
    import inspect

    names = []
    for n, v in vars(module).items():
        if n.startswith("_") or not callable(v) or inspect.ismodule(v):
            continue
        if (inspect.isfunction(v) or inspect.isclass(v) or inspect.isbuiltin(v)) and \
                getattr(v, "__module__", None) != module.__name__:
            continue  # imported: defined elsewhere
        names.append(n)
    return sorted(names)


def check_target(fn: Any, name: str) -> None:
    """Rejects what cannot be called as given, with one clear line.

    Raises:
        UsageError: ``fn`` is not callable, is a class, or is a method reached
            through its class (unbound: ``self`` would be missing).
    """
    target = getattr(fn, "python_function", fn)
    if not callable(fn):
        article = "an" if type(fn).__name__[:1].lower() in "aeiou" else "a"
        raise UsageError(f"{name} is {article} {type(fn).__name__}, not a function; "
                         "name a function or tf.function")
    if inspect.isclass(target):
        raise UsageError(f"{name} is a class; name an instance (e.g. a module-level "
                         f"`obj = {name}(...)`) or a function")
    if inspect.isfunction(target) and "." in target.__qualname__ \
            and "<locals>" not in target.__qualname__.rsplit(".", 1)[0].rsplit(".", 1)[-1]:
        first = next(iter(inspect.signature(target).parameters), None)
        if first == "self":
            cls = target.__qualname__.rsplit(".", 1)[0]
            raise UsageError(f"{name} is a method of class {cls}, not bound to an instance; "
                             f"name an instance's method (e.g. obj.{target.__name__} with a "
                             f"module-level obj = {cls}(...)) or a function")


def load_call(target: str, arg_items: list[str] | None) -> tuple[Callable, tuple, dict]:
    """``FILE.py:FUNC`` plus ``--arg`` strings → the function and its call arguments.

    The one path every function-taking verb (inspect, autograph, compare) uses:
    parse the ``--arg`` grammar, import the target, check it is callable, and
    bind the values to its parameters. A `tf.function` with an
    ``input_signature`` and no ``--arg`` gets no arguments: the lab functions
    then trace with the signature itself.

    Raises:
        UsageError: any bad ``--arg``, target, or argument/parameter mismatch.
    """
    named = parse_args(arg_items)
    fn = load_target(target)
    check_target(fn, target.rpartition(":")[2])
    if not named and getattr(fn, "input_signature", None) is not None:
        return fn, (), {}
    if not named and _own_input_signature(fn) is not None:
        # An object whose __call__ has the input_signature: its specs are the arguments.
        return fn, tuple(_own_input_signature(fn)), {}
    args, kwargs = bind_args(fn, named)
    return fn, args, kwargs


def _own_input_signature(fn: Any) -> Any:
    """The ``input_signature`` of a `tf.function`, or of an object's ``__call__`` when
    that is one (a tf.Module with ``@tf.function(input_signature=…) def __call__``)."""
    sig = getattr(fn, "input_signature", None)
    if sig is None and not inspect.isroutine(fn) and not inspect.isclass(fn):
        call = getattr(fn, "__call__", None)
        if hasattr(call, "get_concrete_function") and hasattr(call, "python_function"):
            sig = getattr(call, "input_signature", None)
    return sig


def python_signature(fn: Callable) -> inspect.Signature | None:
    """`inspect.signature` of the Python function under a `tf.function`, or None."""
    target = getattr(fn, "python_function", fn)
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def bind_args(fn: Callable, named: dict[str, Any]) -> tuple[tuple, dict]:
    """Splits ``--arg`` values into positional and keyword arguments for ``fn``.

    Positional-only parameters go by position; the rest by keyword.

    Raises:
        UsageError: a name that ``fn`` does not take, or a required parameter missing.
    """
    sig = python_signature(fn)
    if sig is None:
        return (), dict(named)
    params = sig.parameters
    has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    call = getattr(fn, "call", None)
    if has_var_kw and not inspect.isroutine(fn) and inspect.ismethod(call):
        # A Keras layer/model: __call__(*args, **kwargs) passes everything on to call();
        # check the names against call's parameters (``inputs``, …).
        try:
            call_params = inspect.signature(call).parameters
        except (TypeError, ValueError):
            call_params = {}
        # call's own names only: Keras' Functional.call(inputs, training, mask, **kwargs) takes
        # **kwargs for call options, not for the model's input.
        call_params = {k: v for k, v in call_params.items() if v.kind not in (v.VAR_POSITIONAL,
                                                                              v.VAR_KEYWORD)}
        if call_params:
            for n in named:
                if n not in call_params:
                    v = named[n]
                    shape = getattr(v, "shape", None)
                    text = (f"{v.dtype.name}[{','.join('None' if d is None else str(d) for d in shape)}]"
                            if shape is not None and getattr(shape, "rank", None) is not None
                            and hasattr(v, "dtype") else "…")
                    raise UsageError(f"--arg {n}: {type(fn).__name__}.call takes no parameter {n!r}; "
                                     f"its parameters are ({', '.join(call_params)}): pass --arg "
                                     f"{next(iter(call_params))}={text}")
    for n in named:
        if n not in params and not has_var_kw:
            raise UsageError(f"--arg {n}: the function takes no parameter {n!r}; "
                             f"its parameters are ({', '.join(params)})")
    args, kwargs = [], {}
    for p in params.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in named:
            if p.kind is p.POSITIONAL_ONLY:
                args.append(named[p.name])
            else:
                kwargs[p.name] = named[p.name]
        elif p.default is p.empty:
            raise UsageError(f"missing --arg {p.name}=…: the function requires it "
                             f"(a TensorSpec like {p.name}=float32[None,8] or a literal like {p.name}=3)")
    for n, v in named.items():
        if n not in params:
            kwargs[n] = v
    return tuple(args), kwargs


# Refuse to make random inputs bigger than this (bytes): a typo like
# float32[100000000000] should be one error line, not a MemoryError.
MAX_RANDOM_BYTES = 4 << 30


_DRAWN: "contextvars.ContextVar[list[str] | None]" = contextvars.ContextVar("tflab_drawn_inputs", default=None)


@contextlib.contextmanager
def recording_draws() -> Iterator[list[str]]:
    """Collects a label for every input `materialize` draws at random inside the block.

    A verb's error for a function that failed on its inputs names them and the ``--examples`` hint
    (`tflab._user.usercode.input_error`). Nested blocks share the outermost list.
    """
    box = _DRAWN.get()
    if box is not None:
        yield box
        return
    token = _DRAWN.set([])
    try:
        yield _DRAWN.get()
    finally:
        _DRAWN.reset(token)


def materialize(value: Any, seed: "int | Any" = 0) -> Any:
    """Turns a fully defined `tf.TensorSpec` into a seeded random tensor.

    Floats are standard normal, integers uniform in [0, 10), bools fair coins.
    Non-spec values pass through unchanged.

    Args:
        value: a `tf.TensorSpec` or any other value.
        seed: an int, or a `numpy.random.Generator` to draw from. Pass ONE
            generator for all arguments of a call: a fresh generator per
            argument with the same seed would give equal-shaped arguments
            identical values (``x - y`` would be all zeros).

    Raises:
        UsageError: the spec has an unknown (None) dimension, more than 64 dims (numpy's limit), an
            unsupported dtype, or would need more than `MAX_RANDOM_BYTES` (4 GiB).
    """
    import numpy as np
    import tensorflow as tf

    if not isinstance(value, tf.TensorSpec):
        return value
    label = f"--arg {value.name}" if value.name else f"TensorSpec {value.shape}"
    if not value.shape.is_fully_defined():
        raise UsageError(f"{label}: shape {value.shape} has unknown dims; "
                         f"give every dim to run it, e.g. {value.dtype.name}[4,8]")
    shape = value.shape.as_list()
    from tflab._api.cliargs import NUMPY_MAX_DIMS

    if len(shape) > NUMPY_MAX_DIMS:  # numpy's ValueError came out raw (compare_modes) or as exit 70 (compare)
        raise UsageError(f"{label}: {len(shape)} dims; numpy arrays (the random inputs drawn for it) hold at most "
                         f"{NUMPY_MAX_DIMS}")
    nbytes = int(np.prod(shape, dtype=np.float64)) * max(value.dtype.size, 1)
    if nbytes > MAX_RANDOM_BYTES:
        raise UsageError(f"{label}: shape {shape} needs {nbytes / 2**30:,.1f} GiB of random data "
                         f"(limit {MAX_RANDOM_BYTES / 2**30:.0f} GiB); use a smaller shape")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    dt = value.dtype
    drawn = _DRAWN.get()
    if drawn is not None:
        what = ("standard normal" if dt.is_floating or dt.is_complex else "ints in [0, 10)" if dt.is_integer
                else "fair coins")
        drawn.append(f"{label} {dt.name}[{','.join(map(str, shape))}] ({what})")
    if dt.is_floating or dt.is_complex:
        arr = rng.standard_normal(shape, dtype=np.float32)
        return tf.cast(tf.constant(arr), dt)
    if dt.is_integer:
        return tf.constant(rng.integers(0, 10, size=shape), dtype=dt)
    if dt == tf.bool:
        return tf.constant(rng.integers(0, 2, size=shape).astype(bool))
    raise UsageError(f"{label}: cannot make random values of dtype {dt.name}; pass a float, int or bool spec")


# ------------------------------------------ a function and its arguments (compare, diagnose)


def parameter_names(fn: Callable) -> list[str]:
    """Positional parameter names for labels; a Keras layer's ``call`` rather than
    its ``__call__(*args, **kwargs)``, and no name for ``*args``."""
    target = getattr(fn, "python_function", fn)
    while isinstance(target, functools.partial):
        target = target.func
    call = getattr(target, "call", None)
    if not inspect.isroutine(target) and inspect.ismethod(call):
        target = call
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def callable_name(fn: Callable) -> str:
    target = getattr(fn, "python_function", fn)
    while isinstance(target, functools.partial):  # the CLI binds a `seed` parameter this way
        target = target.func
    return (getattr(target, "__qualname__", None) or getattr(target, "name", None)
            or type(target).__name__)


def signature_args(fn: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Checks ``args``/``kwargs`` against a `tf.function`'s ``input_signature``, or
    falls back to it when none are given.

    Raises:
        UsageError: an argument does not match its TensorSpec (dtype or shape),
            or the wrong number of arguments is given.
    """
    import tensorflow as tf

    sig = getattr(fn, "input_signature", None)
    if sig is None:
        return args, kwargs
    name = callable_name(fn)
    if not args and not kwargs:
        return tuple(sig), {}
    names = parameter_names(fn)
    given = dict(zip(names, args))
    given.update(kwargs)
    if len(given) != len(sig) or any(n not in given for n in names[:len(sig)]):
        raise UsageError(f"{name} has input_signature for ({', '.join(names[:len(sig)])}); "
                         f"got arguments ({', '.join(given)}); give exactly those or none")
    for pname, spec in zip(names, sig):
        value = given[pname]
        ok = True
        try:
            for s_, v in zip(tf.nest.flatten(spec), tf.nest.flatten(value)):
                vspec = v if isinstance(v, tf.TensorSpec) else tf.TensorSpec.from_tensor(
                    tf.convert_to_tensor(v))
                ok = ok and s_.dtype == vspec.dtype and s_.shape.is_compatible_with(vspec.shape)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            shown = value if isinstance(value, tf.TensorSpec) else getattr(value, "shape", value)
            raise UsageError(f"{pname} does not match {name}'s input_signature: expected {spec}, "
                             f"got {shown}{' ' + value.dtype.name if hasattr(value, 'dtype') else ''}")
    return tuple(given[n] for n in names[:len(sig)]), {}


def binding_error(name: str, tf_fn: Any, e: BaseException) -> UsageError | None:
    """The one-line error for arguments that do not bind to a tf.function, else None.

    TF raises ``TypeError: Binding inputs …`` (or Python's "missing a required
    argument") from ``get_concrete_function`` when the call does not fit the
    ``input_signature`` or the parameters; used by `tflab.tracing` and
    `tflab.diagnosis`.

    Args:
        name: the function's name for the message.
        tf_fn: the `tf.function` that was called (its ``input_signature`` is read).
        e: what ``get_concrete_function`` raised.

    Returns:
        A `UsageError` to raise (``from e``), or None when ``e`` is another error.
    """
    if not isinstance(e, TypeError):
        return None
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else type(e).__name__
    if not ("Binding inputs" in first or "input_signature" in str(e) or "missing a required" in str(e)
            or "got an unexpected keyword" in str(e) or "takes" in first and "positional" in first):
        return None
    detail = " ".join(line.strip() for line in msg[:3])
    m = re.search(r"Can not cast (.*?) to (.*?)`", detail)
    missing = re.search(r"missing a required argument: '(\w+)'", detail)
    if m:  # TF's message repeats the argument values; the cast is the point
        detail = f"got {m.group(1)}, the input_signature wants {m.group(2)}"
    elif missing:
        return UsageError(f"{name} needs argument {missing.group(1)!r}: pass a value "
                          f"or a tf.TensorSpec for it")
    has_sig = getattr(tf_fn, "input_signature", None) is not None
    return UsageError(f"the call does not match {name}'s signature: {detail}; "
                      + ("pass arguments that fit its input_signature (or drop input_signature)"
                         if has_sig else "pass arguments that fit its parameters"))


# ------------------------------------------ bound tf.function methods (autograph_diff, diagnose)


def bound_user_method(fn: Any) -> tuple[Any, tuple]:
    """The user's own Python callable under ``fn``, and the leading arguments TF passes it.

    A `tf.function` method read from an instance (``m.run``) is a new Function
    made by ``class_method_to_instance_method`` (``eager/polymorphic_function/
    polymorphic_function.py``). Its ``python_function`` is TF's
    ``bound_method_wrapper``, whose ``__wrapped__`` is the user's function bound
    to a ``TfMethodTarget`` (``tf_method_target.py``) that holds only a *weak*
    reference to the instance. Two cases follow:

    * the instance is alive: the user's method is re-bound to it with a strong
      reference (``types.MethodType``), so it cannot be collected while tflab
      converts and traces it;
    * nothing else referenced it (``Gate().run``): the instance was freed when
      the expression ended, and TF itself then calls the method with
      ``self=None`` (``wrapped_fn(weak_instance(), …)``). The user's plain
      function is returned with ``(None,)`` as its leading argument, so the
      statements traced are the user's, as TF traces them.

    Anything else is returned unchanged, with no leading argument.

    Args:
        fn: a function, a `tf.function` or a bound `tf.function` method.

    Returns:
        ``(callable, leading_args)``: call ``callable(*leading_args, *args)``.
    """
    import types

    target = getattr(fn, "python_function", fn)
    wrapped = getattr(target, "__wrapped__", None)
    owner = getattr(wrapped, "__self__", None)
    if inspect.ismethod(wrapped) and hasattr(owner, "weakrefself_target__"):
        instance = owner.target
        if instance is not None:
            return types.MethodType(wrapped.__func__, instance), ()
        return wrapped.__func__, (None,)
    return target, ()
