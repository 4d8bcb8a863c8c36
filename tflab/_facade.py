"""Compatibility modules that re-export a split module's parts (`tflab.retrace`, `tflab.litert`).

A name read from the old module is the part's own object. A name WRITTEN on
the old module (``monkeypatch.setattr(tflab.litert, "MAX_GRADIENT_ELEMENTS",
100)``, a user tuning a limit) is written on the part that defines it too,
since that part's functions read their own module's globals.
"""

from __future__ import annotations

import sys
import types
from typing import Sequence


def forward_writes(module_name: str, parts: Sequence[types.ModuleType]) -> None:
    """Makes ``setattr(module, name, value)`` also set ``name`` on each part that defines it.

    Args:
        module_name: the compatibility module (``__name__`` of the caller).
        parts: the modules it re-exports.
    """
    owners = tuple(parts)

    class _Facade(types.ModuleType):
        def __setattr__(self, name: str, value) -> None:
            for part in owners:
                if name in vars(part):
                    setattr(part, name, value)
            super().__setattr__(name, value)

    sys.modules[module_name].__class__ = _Facade
