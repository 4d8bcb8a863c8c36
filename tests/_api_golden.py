"""tflab's public surface as text, one line per name: the API golden file's generator and its checks.

The surface is every name of ``tflab`` and of its public packages (their ``_EXPORTS``
or ``__all__``), plus the public modules users import names from (`tflab.fix`,
`tflab.errors`, `tflab.report.base`): each function with its signature, each class
with its bases, each record's fields (name: type) and properties. Like TF's API
golden files (``tensorflow/tools/api/golden``), a change to the surface shows as a
change to tests/house/api_golden.txt that a reviewer reads.

    python tests/_api_golden.py          # print the surface
    python tests/_api_golden.py --write  # rewrite tests/house/api_golden.txt

tests/house/test_api_golden.py checks that the file is the surface, and that a name
leaving it is in the deprecation table (tflab/_api/deprecations.py) and named in
CHANGELOG.md's Deprecated or Removed section.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GOLDEN = os.path.join(HERE, "house", "api_golden.txt")
CHANGELOG = os.path.join(REPO, "CHANGELOG.md")

PACKAGES = ("tflab", "tflab.attribution", "tflab.diagnosis", "tflab.distribute", "tflab.litert", "tflab.lowering",
            "tflab.modes", "tflab.precision", "tflab.retrace", "tflab.saved_model")
MODULES = ("tflab.errors", "tflab.fix", "tflab.report.base")
HEADER = ("# tflab's public API (tests/_api_golden.py --write regenerates it; tests/house/test_api_golden.py "
          "checks it).\n# A name that leaves this file needs an entry in tflab/_api/deprecations.py and a line "
          "in CHANGELOG.md.\n")


def _clean(text: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def _names(module) -> list[str]:
    for attr in ("_EXPORTS", "__all__"):
        if hasattr(module, attr):
            return sorted(n for n in getattr(module, attr) if not n.startswith("_"))
    return sorted(n for n, v in vars(module).items() if not n.startswith("_")
                  and getattr(v, "__module__", None) == module.__name__
                  and (inspect.isclass(v) or inspect.isfunction(v)))


def _signature(obj) -> str:
    try:
        return _clean(str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return "(...)"


def _type(t) -> str:
    return t if isinstance(t, str) else _clean(getattr(t, "__name__", repr(t)))


def describe(qualname: str, obj, seen: dict[int, str]) -> list[str]:
    """The golden lines of one public name."""
    if id(obj) in seen and (inspect.isclass(obj) or inspect.isfunction(obj)):
        return [f"{qualname} = {seen[id(obj)]}"]
    if inspect.isclass(obj):
        seen[id(obj)] = qualname
        bases = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
        lines = [f"{qualname}: class({bases})"]
        if dataclasses.is_dataclass(obj):
            lines += [f"{qualname}.{f.name}: {_type(f.type)}" for f in dataclasses.fields(obj)
                      if not f.name.startswith("_")]
        else:
            lines.append(f"{qualname}.__init__{_signature(obj)}")
        for name, member in sorted(vars(obj).items()):
            if name.startswith("_"):
                continue
            if isinstance(member, (property, getattr(__import__("functools"), "cached_property"))):
                lines.append(f"{qualname}.{name}: property")
            elif inspect.isfunction(member) or isinstance(member, (staticmethod, classmethod)):
                fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                lines.append(f"{qualname}.{name}{_signature(fn)}")
        return lines
    if callable(obj) and not isinstance(obj, type):
        seen[id(obj)] = qualname
        return [f"{qualname}{_signature(obj)}"]
    return [f"{qualname}: {type(obj).__name__}"]


def surface() -> list[str]:
    """Every golden line of today's tflab, sorted within each module."""
    lines: list[str] = []
    seen: dict[int, str] = {}
    for modname in PACKAGES + MODULES:
        module = importlib.import_module(modname)
        for name in _names(module):
            lines += describe(f"{modname}.{name}", getattr(module, name), seen)
    return lines


def read_golden(path: str = GOLDEN) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")]


def key(line: str) -> str:
    """The name a golden line is about: ``tflab.modes.ModeResult.abs_error``, ``tflab.compare_modes``."""
    return re.split(r"[(: =]", line, maxsplit=1)[0]


def diff_text(golden: list[str], now: list[str]) -> str:
    """What changed, in words: names gone, names new, and lines of a name that changed."""
    g, n = {key(x): x for x in golden}, {key(x): x for x in now}
    out = [f"removed: {k}" for k in sorted(set(g) - set(n))]
    out += [f"added: {n[k]}" for k in sorted(set(n) - set(g))]
    out += [f"changed: {g[k]}\n     now: {n[k]}" for k in sorted(set(g) & set(n)) if g[k] != n[k]]
    return "\n".join(out)


def changelog_sections(text: str, titles=("Deprecated", "Removed")) -> str:
    """The text of every ``### Deprecated`` / ``### Removed`` section of a Keep-a-Changelog file."""
    parts = re.split(r"^(###\s+\w+)\s*$", text, flags=re.M)
    return "\n".join(body for head, body in zip(parts[1::2], parts[2::2]) if head.split()[-1] in titles)


def removal_problems(before: list[str], after: list[str], table_olds: set[str], changelog: str) -> list[str]:
    """Names in ``before``'s surface that ``after`` lacks with no deprecation entry or changelog line.

    A name counts as served when the table's old name is the name or its dotted tail
    (``ModeResult.max_abs_diff`` serves ``tflab.modes.ModeResult.max_abs_diff``), and as
    announced when that old name appears in CHANGELOG.md's Deprecated or Removed section.
    """
    notes = changelog_sections(changelog)
    problems = []
    for name in sorted({key(x) for x in before} - {key(x) for x in after}):
        entries = [o for o in table_olds if name == o or name.endswith("." + o)]
        if not entries:
            problems.append(f"{name} left the public API with no entry in tflab/_api/deprecations.py")
        elif not any(f"`{o}`" in notes or f"`{name}`" in notes for o in entries):
            problems.append(f"{name} left the public API and CHANGELOG.md's Deprecated/Removed section "
                            f"does not name it (`{entries[0]}`)")
    return problems


def main(argv: list[str]) -> int:
    lines = surface()
    if "--write" in argv:
        with open(GOLDEN, "w", encoding="utf-8") as f:
            f.write(HEADER + "\n".join(lines) + "\n")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    sys.exit(main(sys.argv))
