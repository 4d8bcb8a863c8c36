"""The one place where public Python entry points check their arguments' types and ranges.

A wrong type reaching TF or the standard library comes back as ``TypeError:
'int' object is not iterable`` from a frame the user never wrote. Each public
function instead calls these helpers first; each raises one
`tflab.errors.UsageError` naming the function, the argument, what it must be
and what it got, and refuses a request that would do nothing (an empty list
of variants, an unknown mode name) rather than report a vacuous success.

Use from a public function::

    from tflab._argcheck import check_callable, check_choice, check_int

    def to_text(self, max_ops=60):
        max_ops = check_int(max_ops, "max_ops", "TraceReport.to_text", minimum=0, allow_none=True)
"""

from __future__ import annotations

import inspect
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
