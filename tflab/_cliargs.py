"""argparse types for numeric CLI options: a bad number is one argparse error line, exit 2.

Every numeric option of every verb uses one of these instead of a bare
``int``/``float``, so ``--seed -1`` is refused while parsing, not by numpy
halfway through the work (``ValueError: expected non-negative integer``).
``tests/test_cli_bad_input.py`` walks `tflab.cli.VERBS` and fails on any
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
