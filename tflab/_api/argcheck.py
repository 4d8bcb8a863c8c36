"""The one place where public Python entry points check their arguments' types and ranges.

A wrong type reaching TF or the standard library comes back as ``TypeError:
'int' object is not iterable`` from a frame the user never wrote. Each public
function instead calls these helpers first; each raises one
`tflab.errors.UsageError` naming the function, the argument, what it must be
and what it got, and refuses a request that would do nothing (an empty list
of variants, an unknown mode name) rather than report a vacuous success.

Use from a public function::

    from tflab._api.argcheck import check_callable, check_choice, check_int

    def to_text(self, max_ops=60):
        max_ops = check_int(max_ops, "max_ops", "TraceReport.to_text", minimum=0, allow_none=True)
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from typing import Any, Callable, Iterable, Sequence

from tflab.errors import UsageError


def _got(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}… ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"


def check_int(value: Any, name: str, where: str, *, minimum: int | None = None,
              allow_none: bool = False) -> int | None:
    """``value`` as an int (bool refused) of at least ``minimum``.

    Raises:
        UsageError: "WHERE: NAME must be an int >= MIN (or None), got VALUE (TYPE)".
    """
    import numbers

    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok or (minimum is not None and value < minimum):
        want = "an int" + (f" >= {minimum}" if minimum is not None else "") + (" or None" if allow_none else "")
        raise UsageError(f"{where}: {name} must be {want}, got {_got(value)}")
    return int(value)


class UnknownKey(UsageError, KeyError):
    """A name looked up among fixed ones (a stage, a record) that is not there: a `UsageError`, and a
    ``KeyError`` for callers that caught the lookup's old exception."""

    __str__ = Exception.__str__  # KeyError's own str() quotes the message


def check_str(value: Any, name: str, where: str, *, example: str = "") -> str:
    """``value`` when it is a non-empty str.

    Raises:
        UsageError: "WHERE: NAME must be a non-empty str (e.g. EXAMPLE), got VALUE (TYPE)".
    """
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: {name} must be a non-empty str" + (f" (e.g. {example})" if example else "")
                         + f", got {_got(value)}")
    return value


def check_float(value: Any, name: str, where: str, *, minimum: float | None = None,
                allow_none: bool = False) -> float | None:
    """``value`` as a finite float (bool refused) greater than ``minimum``.

    NaN compares false with everything, so a ``timeout=nan`` deadline passed at once and read as a
    crash of what it timed.

    Raises:
        UsageError: "WHERE: NAME must be a finite number > MIN (or None), got VALUE (TYPE)".
    """
    import math
    import numbers

    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        ok = ok and math.isfinite(float(value)) and (minimum is None or float(value) > minimum)
    except OverflowError:
        ok = False
    if not ok:
        want = "a finite number" + (f" > {minimum:g}" if minimum is not None else "") + (" or None" if allow_none else "")
        raise UsageError(f"{where}: {name} must be {want}, got {_got(value)}")
    return float(value)


def check_callable(value: Any, name: str, where: str, *, allow_none: bool = True) -> Callable | None:
    """``value`` when callable (or None if allowed).

    Raises:
        UsageError: "WHERE: NAME must be a callable …, got VALUE (TYPE)".
    """
    if value is None and allow_none:
        return None
    if not callable(value):
        raise UsageError(f"{where}: {name} must be a callable" + (" or None" if allow_none else "")
                         + f", got {_got(value)}")
    return value


def check_choice(value: Any, choices: Iterable[str], name: str, where: str) -> str:
    """``value`` when it is one of ``choices``.

    Raises:
        UsageError: an unknown name, with the known ones listed.
    """
    choices = list(choices)
    if not isinstance(value, str) or value not in choices:
        raise UsageError(f"{where}: {name} must be one of {', '.join(map(repr, choices))}, got {_got(value)}")
    return value


def check_names(value: Any, choices: Sequence[str], name: str, where: str, item: str | None = None) -> list[str]:
    """A non-empty list of names among ``choices``: a comma string (``"none,int8"``) or a sequence of str.

    Raises:
        UsageError: not a str or sequence of str, an unknown name, or no name
            at all (an empty request would report success having done nothing).
    """
    if isinstance(value, str):
        names = [q.strip() for q in value.split(",") if q.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(q, str) for q in value):
        names = [q.strip() for q in value]
    else:
        raise UsageError(f"{where}: {name} must be a comma string or a list of names among "
                         f"{', '.join(choices)}, got {_got(value)}")
    for q in names:
        if q not in choices:
            raise UsageError(f"{where}: unknown {item or name} {q!r}: use {', '.join(choices)}")
    if not names:
        raise UsageError(f"{where}: {name} {value!r} names nothing: give at least one of {', '.join(choices)}")
    return list(dict.fromkeys(names))


def check_keywords(kwargs: dict, fn: Callable, where: str, what: str) -> None:
    """Refuses keywords ``fn`` does not take, naming them and listing those it does.

    Raises:
        UsageError: "WHERE: unknown WHAT keyword(s) 'bogus_kw'; it takes: …".
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        known = ", ".join(n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL
                          and n != "func")
        raise UsageError(f"{where}: unknown {what} keyword(s) {', '.join(map(repr, unknown))}; it takes: {known}")


# -----------------------------------------------------------------------------

def check_str_sequence(value: Any, name: str, where: str) -> list[str]:
    """A sequence of str (a list or tuple); a lone str is refused, not split into its characters.

    Raises:
        UsageError: "WHERE: NAME must be a sequence of strings (e.g. ['--n', '3']), got …".
    """
    import os

    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or \
            not all(isinstance(v, (str, os.PathLike)) for v in value):
        raise UsageError(f"{where}: {name} must be a sequence of strings (e.g. ['--n', '3']), got {_got(value)}"
                         + ("; a str would be split into its characters: wrap it in a list"
                            if isinstance(value, str) else ""))
    return [os.fspath(v) for v in value]


def check_input_file(path: Any, name: str, where: str, what: str = "a path to a .py file") -> None:
    """A path given as a str/PathLike is probed without opening it (`tflab._io.paths.input_path`).

    A FIFO blocks ``open`` for ever; a symlink loop was "does not exist". Other types are left to
    the function's own message.

    Raises:
        UsageError: missing, a FIFO, a device, a socket, a symlink loop or a folder.
    """
    import os

    if isinstance(path, (str, os.PathLike)):
        from tflab._io.paths import input_path

        input_path(path, name, want="file", what=what)


def check_seed(value: Any, name: str, where: str) -> int:
    """An int in ``[0, 2**63)``: numpy's and TF's seeds (bool refused)."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < 2**63:
        raise UsageError(f"{where}: {name} must be an int in [0, 2**63), got {_got(value)}")
    return int(value)


def check_bytes(value: Any, name: str, where: str) -> bytes:
    """The bytes of a bytes-like object (``bytes``, ``bytearray``, ``memoryview``, a numpy uint8 buffer).

    Raises:
        UsageError: not bytes-like (a path string: read the file first).
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, str) or value is None:
        raise UsageError(f"{where}: {name} takes the flatbuffer's bytes (open(path, 'rb').read()), got "
                         f"{_got(value)}")
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise UsageError(f"{where}: {name} takes the flatbuffer's bytes (bytes, bytearray or memoryview), "
                         f"got {_got(value)}") from None


def check_function_type(value: Any, name: str, where: str) -> None:
    """A FunctionType (TF's, an `inspect.Signature`), a ``{parameter: TraceType}`` mapping, or pairs.

    Raises:
        UsageError: anything else (None gave ``[]``, as if two calls matched; an int a raw TypeError).
    """
    from collections.abc import Mapping

    if isinstance(value, Mapping) or hasattr(value, "parameters"):
        return
    if isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2
                                                and isinstance(p[0], str) for p in value):
        return
    raise UsageError(f"{where}: {name} must be a FunctionType (e.g. concrete_fn.function_type), a "
                     f"{{parameter: TraceType}} dict or (parameter, TraceType) pairs, got {_got(value)}")


_SIGNATURES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # fn -> its Signature (a probe's every call)


def check_binds(fn: Any, args: tuple, kwargs: dict, where: str, name: str) -> None:
    """Refuses a call whose arguments do not bind to ``fn``'s Python signature (TF's raw TypeError).

    Raises:
        UsageError: "WHERE: NAME needs argument 'x'" / "takes 1 positional argument but 2 were given".
    """
    try:
        sig = _SIGNATURES[fn]
    except (KeyError, TypeError):  # not seen yet, or not weakly referable
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        with contextlib.suppress(TypeError):
            _SIGNATURES[fn] = sig
    if sig is None:
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        text = str(e)
        missing = text.partition("missing a required argument: ")[2]
        why = f"needs argument {missing}" if missing else text
        raise UsageError(f"{where}: {name} {why}; its parameters: ({', '.join(sig.parameters)})") from None


def refuse_probe(fn: Any, name: str, where: str) -> None:
    """A `tflab.RetraceProbe` given where the function is wanted: it would report on tflab's own wrapper.

    Raises:
        UsageError: pass the function the probe wraps.
    """
    if any(c.__name__ == "RetraceProbe" and c.__module__.startswith("tflab.") for c in type(fn).__mro__):
        raise UsageError(f"{where}: {name} is a RetraceProbe; pass the function it wraps (the probe's "
                         f"{getattr(fn, 'function_name', 'function')}), not the probe: the report would be on "
                         f"tflab's own RetraceProbe.__call__")


def check_per_replica(args: tuple, kwargs: dict, where: str) -> None:
    """At least one PerReplica value or PerReplicaSpec among the arguments (when any is given).

    A step given plain TensorSpecs never runs per replica: the report said "0 replicas".

    Raises:
        UsageError: arguments given, none distributed.
    """
    values = [*args, *kwargs.values()]
    if not values:
        return

    def distributed(v: Any) -> bool:
        if isinstance(v, (list, tuple)):
            return any(distributed(x) for x in v)
        if isinstance(v, dict):
            return any(distributed(x) for x in v.values())
        return any(c.__name__ in ("DistributedValues", "PerReplicaSpec", "DistributedVariable")
                   for c in type(v).__mro__)

    if not any(distributed(v) for v in values):
        kinds = ", ".join(sorted({type(v).__name__ for v in values}))
        raise UsageError(f"{where}: the arguments are {kinds}, none a PerReplica value or PerReplicaSpec, so "
                         f"the step runs on no replica; pass a distributed batch "
                         f"(next(iter(strategy.experimental_distribute_dataset(ds)))) or "
                         f"dist_dataset.element_spec, and call strategy.run inside the step")


def check_returns_tensors(fn: Any, args: tuple, kwargs: dict, where: str, name: str) -> None:
    """Refuses a function whose every ``return`` gives None (or that has none): nothing to compare.

    Read from the function's own source (`ast`), not by running or tracing it (a trace would be
    one more than the caller's, and could have side effects): the refusal is certain, a function
    with any other ``return``, a ``yield``, a ``raise`` or an ``exit`` call, or without readable
    source, is left to the caller.
    ``args``/``kwargs`` are not used; they are the call being checked, for the message's sake.

    Raises:
        UsageError: "WHERE: NAME returned no tensor (None): nothing to compare".
    """
    import ast
    import textwrap

    python_fn = getattr(fn, "python_function", fn)
    if not inspect.isfunction(python_fn):
        return
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(python_fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                 and (getattr(n, "name", "<lambda>") == python_fn.__name__)), None)
    if node is None:
        return
    if isinstance(node, ast.Lambda):
        nothing = isinstance(node.body, ast.Constant) and node.body.value is None
    else:
        returns, stack = [], list(node.body)
        while stack:  # the function's own statements, not nested functions or classes
            n = stack.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Raise)):
                return  # a generator, or a function that may end by raising: not "returns None" for sure
            if isinstance(n, ast.Call) and (getattr(n.func, "attr", None) or getattr(n.func, "id", "")) in (
                    "exit", "_exit", "abort"):
                return  # sys.exit(5), os._exit(3): the caller names those
            if isinstance(n, ast.Return):
                returns.append(n)
            stack.extend(ast.iter_child_nodes(n))
        nothing = all(r.value is None or (isinstance(r.value, ast.Constant) and r.value.value is None)
                      for r in returns)
    if nothing:
        raise UsageError(f"{where}: {name} ({python_fn.__name__}) returned no tensor (None): every return in it "
                         f"gives None, so there is nothing to compare; return the tensors to check")


def check_xla_flags() -> None:
    """``XLA_FLAGS``/``TF_XLA_FLAGS`` tried in a child before this process's first XLA compile
    (`tflab.process.xla_probe.check_xla_flags`): a bad flag is a `UsageError`, not the end of the process.
    """
    from tflab.process.xla_probe import check_xla_flags as probe

    probe()


def check_source_decodes(fn: Any, name: str, where: str) -> None:
    """Refuses a function whose ``.py`` file cannot be decoded (for tools that read source: AutoGraph).

    Python imports a file with a stray latin-1 byte in a comment, but `inspect.getsource` then
    fails with "could not get source code", and the advice was "put the function in a .py file"
    although it is in one. The file is decoded as ``tokenize`` does (PEP 263).

    Raises:
        UsageError: names the file, the byte and its line, and the two fixes.
    """
    import os
    import tokenize

    code = getattr(getattr(fn, "python_function", fn), "__code__", None)
    path = getattr(code, "co_filename", "")
    if not path or not path.endswith(".py") or not os.path.isfile(path):
        return
    try:
        with open(path, "rb") as f:
            data = f.read()
        import io

        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as e:
            if "invalid or missing encoding declaration" not in str(e):
                raise
            encoding = "utf-8"  # no declaration, and not UTF-8 in its first two lines
        data.decode(encoding)
    except SyntaxError as e:
        raise UsageError(f"{where}: {name}'s file {path} declares an encoding Python cannot use ({e}); "
                         f"fix its coding line") from None
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UsageError(f"{where}: {name}'s file {path} is not valid {encoding} (byte 0x{data[e.start]:02x} on "
                         f"line {line}), so its source cannot be read; save it as UTF-8 or declare its encoding "
                         f"on the first line (# -*- coding: latin-1 -*-)") from None
    except OSError:
        return
