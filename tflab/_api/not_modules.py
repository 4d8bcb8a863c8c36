"""``import tflab.diagnose``: a public name that is not a module answers with the import that works.

``tflab.diagnose`` is a function (defined in the module ``tflab.diagnosis``), as ``tflab.lower``,
``tflab.stabilize`` or ``tflab.litert.convert`` are; ``import tflab.diagnose`` gave Python's bare
"No module named 'tflab.diagnose'". `NameNotModule`, a `sys.meta_path` finder at the end of the list
(so a real module, and `tflab._api.deprecations.ModuleAliases`' old module paths, always win), raises
the same `ModuleNotFoundError` with the import to write instead. It serves the names in ``__all__`` of
``tflab`` and of its package roots (their lazily loaded public names, `tflab._api.lazy`) and nothing
else: the public API is unchanged, and any other missing module keeps Python's own message.
"""

from __future__ import annotations

import importlib.abc
import sys

__all__ = ["NameNotModule", "install", "not_a_module_message"]


def not_a_module_message(fullname: str) -> str | None:
    """The message for ``import fullname`` where ``fullname`` is a public name of a loaded tflab package
    (``tflab.diagnose``), or None when it is not one."""
    parent, _, name = fullname.rpartition(".")
    if not (parent == "tflab" or parent.startswith("tflab.")):
        return None
    module = sys.modules.get(parent)
    if module is None or name not in getattr(module, "__all__", ()):
        return None
    home = getattr(module, "_EXPORTS", {}).get(name)
    where = ""
    if isinstance(home, str):
        where = f" (defined in {home if '.' in home else f'{parent}.{home}'})"
    return (f"No module named {fullname!r}: {name} is a public name of {parent}{where}, not a module; write "
            f"`from {parent} import {name}`, or `import {parent}` and use `{fullname}`")


class NameNotModule(importlib.abc.MetaPathFinder):
    """Refuses ``import tflab.NAME`` for a public name that is not a module, saying what to import."""

    def find_spec(self, fullname, path=None, target=None):
        message = not_a_module_message(fullname)
        if message is None:
            return None
        raise ModuleNotFoundError(message, name=fullname)


def install() -> None:
    """Puts one `NameNotModule` finder at the end of `sys.meta_path` (``tflab/__init__.py`` calls it)."""
    if not any(isinstance(f, NameNotModule) for f in sys.meta_path):
        sys.meta_path.append(NameNotModule())
