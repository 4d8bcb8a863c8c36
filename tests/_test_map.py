"""Which test files cover which tflab module, read from the tests' source with `ast` (no import runs).

Used by tests/house/test_test_map.py and to print the table in docs/architecture.md
(``python tests/_test_map.py``). A test file covers a module *directly* when it:

* imports it (``import tflab.x``, ``from tflab.x import y``; ``from tflab import Name``
  and ``from tflab.pkg import Name`` resolved through the package's lazy ``_EXPORTS``
  to the module that defines ``Name``);
* names it in a string (``"tflab.x.y"``: a ``python -m`` command line, a monkeypatch
  target);
* runs its CLI verb (a string constant ``"lower"`` in a file that runs the CLI covers
  ``tflab.commands.lower_cmd``).

A module no test file covers directly is listed as covered *through* the modules
that import it and are covered directly (one step up the import graph).
"""

from __future__ import annotations

import ast
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _import_graph import ROOT, build_graph, module_files  # noqa: E402


def _value(node: ast.AST):
    """A package's ``_EXPORTS`` value: literals, ``{**dict.fromkeys((names), part), ...}``."""
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(_value(v))
            else:
                out[_value(k)] = _value(v)
        return out
    if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "fromkeys"):
        return dict.fromkeys(_value(node.args[0]), _value(node.args[1]))
    return ast.literal_eval(node)


def _exports(path: str) -> dict[str, str]:
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
            try:
                return _value(node.value)
            except (ValueError, TypeError):
                return {}
    return {}

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)


def all_test_files(tests: str = TESTS) -> list[str]:
    """Every ``test_*.py`` under ``tests``, as paths relative to the repository root."""
    out = []
    for d, dirs, files in os.walk(tests):
        dirs[:] = sorted(x for x in dirs if x not in ("__pycache__", "data"))
        out += [os.path.relpath(os.path.join(d, f), REPO) for f in sorted(files)
                if f.startswith("test_") and f.endswith(".py")]
    return sorted(out)


def covered_by(path: str, files: dict[str, str]) -> set[str]:
    """The tflab modules one test file covers directly."""
    tree = ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read(), filename=path)
    exports = {m: _exports(p) for m, p in files.items() if p.endswith("__init__.py")}
    runs_cli = False
    out: set[str] = set()

    def add(name: str) -> None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        if name and name != "tflab":
            out.add(name)

    strings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tflab"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                pkg_exports = exports.get(node.module, {})
                if full in files:
                    add(full)
                elif a.name in pkg_exports:
                    target = pkg_exports[a.name]
                    add(target if target.startswith("tflab") else f"{node.module}.{target}")
                else:
                    add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
        elif isinstance(node, ast.Name) and node.id in ("run_cli", "run_tflab"):
            runs_cli = True
    if runs_cli:
        out |= {m for m in ("tflab.cli", "tflab.commands") if m in files}
    for s in strings:
        for word in s.replace("/", ".").split():
            if word.startswith("tflab.") and word.rstrip(".py").count(".") >= 1:
                add(word[:-3] if word.endswith(".py") else word)
        if runs_cli:
            verb = s.replace("-", "_")
            for cand in (f"tflab.commands.{verb}_cmd", f"tflab.commands.{verb}"):
                if cand in files:
                    out.add(cand)
    return out


def coverage_map(root: str = ROOT) -> dict[str, tuple[list[str], list[str]]]:
    """``{module: (test files that cover it directly, modules it is covered through)}``."""
    files = module_files(root)
    direct: dict[str, list[str]] = {m: [] for m in files if m != "tflab"}
    for t in all_test_files():
        for m in covered_by(t, files):
            if m in direct:
                direct[m].append(t)
    graph = build_graph(root)
    out = {}
    for m, tests in direct.items():
        through: list[str] = []
        seen, frontier = {m}, [m]
        while not tests and frontier and not through:  # the nearest importers a test covers directly
            ups = sorted({u for u, deps in graph.items() for f in frontier if f in deps} - seen)
            through = [u for u in ups if direct.get(u)]
            seen |= set(ups)
            frontier = ups
        out[m] = (sorted(tests), through)
    return out


def table_lines(root: str = ROOT) -> list[str]:
    lines = ["| module | tests |", "|---|---|"]
    for m, (tests, through) in sorted(coverage_map(root).items()):
        if tests:
            cell = ", ".join(f"`{os.path.relpath(t, 'tests')}`" for t in tests)
        elif through:
            cell = "through " + ", ".join(f"`{u[len('tflab.'):]}`" for u in through[:4]) + (" …" if len(through) > 4 else "")
        else:
            cell = "**none**"
        lines.append(f"| `{m[len('tflab.'):]}` | {cell} |")
    return lines


if __name__ == "__main__":
    print("\n".join(table_lines()))
