"""Deprecated aliases for renamed result attributes (one convention across the result objects).

The convention (issue 11): data are properties, not methods; a function's
name is ``function_name`` (a str); ``function`` is only ever the callable. An
old spelling keeps working and warns with a DeprecationWarning naming the new one.
"""

from __future__ import annotations

import warnings
from typing import Any


def deprecated(old: str, new: str, value: Any, stacklevel: int = 3) -> Any:
    """Warns that ``old`` is deprecated in favour of ``new``; returns ``value``."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)
    return value


class CallableDict(dict):
    """A dict property that was a method: ``obj.counts`` is the dict, ``obj.counts()`` still works (deprecated)."""

    _old = _new = ""

    def __call__(self) -> "CallableDict":
        return deprecated(self._old, self._new, self)


class CallableStr(str):
    """A str property that was a method: ``obj.table`` is the text, ``obj.table()`` still works (deprecated)."""

    _old = _new = ""

    def __call__(self) -> "CallableStr":
        return deprecated(self._old, self._new, self)


def callable_dict(value: dict, old: str, new: str) -> CallableDict:
    out = CallableDict(value)
    out._old, out._new = old, new
    return out


def callable_str(value: str, old: str, new: str) -> CallableStr:
    out = CallableStr(value)
    out._old, out._new = old, new
    return out
