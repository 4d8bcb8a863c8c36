"""Public names of a package root loaded on first use (PEP 562 module ``__getattr__``).

A package root such as `tflab.litert` re-exports its parts' public names without
importing the parts (and TensorFlow) when the package is imported: the name is
imported on first access and kept in the package's namespace.

Example:
    >>> __getattr__, __dir__ = lazy_exports(
    ...     globals(), {"convert": "conversion"},
    ...     lambda part: importlib.import_module(f"tflab.litert.{part}"))
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable


def lazy_exports(namespace: dict, exports: dict[str, str],
                 load: Callable[[str], ModuleType]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Makes a package root's ``__getattr__`` and ``__dir__``.

    Args:
        namespace: the package's ``globals()``; a loaded name is stored there.
        exports: public name -> the part (submodule name) that defines it.
        load: imports a part by name (written in the package with its own
            ``importlib.import_module(f"tflab.pkg.{part}")``, which is also where
            ``tests/_import_graph.py`` reads the package's edges).

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's module level.

    Raises:
        AttributeError: (from ``__getattr__``) a name the package does not export.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        part = exports.get(name)
        if part is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(load(part), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
