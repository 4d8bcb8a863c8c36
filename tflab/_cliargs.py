"""argparse types for numeric CLI options: a bad number is one argparse error line, exit 2.

Every numeric option of every verb uses one of these instead of a bare
``int``/``float``, so ``--seed -1`` is refused while parsing, not by numpy
halfway through the work (``ValueError: expected non-negative integer``).
``tests/commands/test_cli_bad_input.py`` walks `tflab.cli.VERBS` and fails on any
option typed with a bare ``int`` or ``float``.

Use::

    from tflab._cliargs import int_at_least, non_negative_float

    p.add_argument("--seed", type=int_at_least(0), default=0)
"""

from __future__ import annotations

import argparse
import math
from typing import Callable


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer in ``[low, high]`` (argparse turns the error into one line, exit 2).

    Args:
        low: the smallest value allowed.
        high: the largest value allowed, or None for no limit.

    Example:

    >>> int_at_least(0)("-1")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be an integer >= 0, got -1
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text[:40]}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text[:40]}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be an integer <= {high}, got {text[:40]}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (refuses nan and inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text[:40]}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text[:40]}")
    return value


# numpy's Generator takes seeds in [0, 2**128); TF's stateless seeds are int64 pairs.
seed_type = int_at_least(0, 2**63 - 1)
seed_type.__name__ = "seed"


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (refuses 0, nan and inf), e.g. a timeout in seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text[:40]}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text[:40]}")
    return value


# Every dtype name tf.dtypes.as_dtype takes on TF 2.21 that a user writes in --arg (a subset is
# enough: a name outside it is left to the child, which asks TF; the parent refuses only for sure).
_DTYPES = frozenset(
    "float16 half bfloat16 float32 float float64 double int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "bool complex64 complex128 string qint8 quint8 qint16 quint16 qint32 resource variant".split())
_MAX_DIM = 2**63 - 1


def check_arg_grammar(items: list[str] | None) -> None:
    """The ``--arg NAME=VALUE`` grammar, checked without TensorFlow (the supervisor's pre-flight).

    Refuses only what `tflab._target.parse_args` would refuse for sure: no ``=``, a name that is
    not an identifier, a name given twice, and for ``dtype[dims]`` with a known dtype a negative,
    non-integer or over-int64 dim. Python literals and other dtypes are left to the child.

    Raises:
        tflab.errors.UsageError: one line, in `tflab._target.parse_args`'s words.
    """
    import re

    from tflab.errors import UsageError

    def short(text: str, n: int = 80) -> str:
        return text if len(text) <= n else f"{text[:n]}…({len(text)} chars)"

    seen: set[str] = set()
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--arg {short(item)!r}: expected NAME=VALUE, e.g. x=float32[None,8] or n=3")
        name, _, value = item.partition("=")
        name = name.strip()
        if not name.isidentifier():
            raise UsageError(f"--arg {short(item)!r}: {short(name, 40)!r} is not a parameter name")
        if name in seen:
            raise UsageError(f"--arg {name} given twice")
        seen.add(name)
        m = re.match(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*\[(.*)\]\s*$", value)
        if not m or m.group(1) not in _DTYPES or not m.group(2).strip():
            continue
        for d in (d.strip() for d in m.group(2).split(",")):
            if d in ("None", "?"):
                continue
            if d.startswith("-") and re.fullmatch(r"[0-9]+", d[1:]):
                raise UsageError(f"bad dimension {d} in --arg {name}={short(value)}: a dim is >= 0, or None for "
                                 f"an unknown dim, e.g. {name}={m.group(1)}[None,8]")
            if not re.fullmatch(r"[0-9]+", d):
                raise UsageError(f"bad dimension {short(d, 20)!r} in --arg {name}={short(value)}: use integers or "
                                 f"None, e.g. {name}={m.group(1)}[None,8]")
            digits = d.lstrip("0")
            if len(digits) > 19 or (digits and int(digits) > _MAX_DIM):
                raise UsageError(f"dimension {short(d, 24)} in --arg {name}={short(value)} is larger than "
                                 f"TF's int64 dims allow (2**63-1); use a smaller dim, or None for an unknown dim")
