"""The import graph of the tflab package, read from its source with `ast` (no import runs).

Used by tests/house/test_architecture.py and to print the map in docs/architecture.md
(``python tests/_import_graph.py``). An edge A -> B means module A imports
module B somewhere: at module level or inside a function (a lazy import is
still a dependency, and a cycle through one fails only on the call that
takes it). Counted:

* ``import tflab.x`` / ``from tflab.x import y`` (``y`` itself when it is a
  module), relative imports resolved;
* ``from tflab import Name``: the module ``tflab._EXPORTS`` maps ``Name`` to
  (that is the module the lazy ``tflab.__getattr__`` imports);
* ``importlib.import_module("tflab.x")``, and with an f-string whose fixed
  prefix names a package (``f"tflab.commands.{name}"``), every module in it;
* the package root ``tflab``: one edge per ``_EXPORTS`` module.

Not counted: Python's implicit import of a submodule's parent package (the
root ``tflab/__init__.py`` imports nothing at import time; its lazy exports are
the edges above).
"""

from __future__ import annotations

import ast
import functools
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tflab")


def module_files(root: str = ROOT) -> dict[str, str]:
    """``{module name: path}`` of every .py file under ``root`` (packages by their __init__)."""
    base = os.path.dirname(root)
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), base)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = os.path.join(d, f)
    return out


def _exports(path: str) -> dict[str, str]:
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def build_graph(root: str = ROOT) -> dict[str, set[str]]:
    """``{module: set of tflab modules it imports}`` for every module under ``root`` (a fresh copy)."""
    return {m: set(d) for m, d in _build_graph(root).items()}


@functools.lru_cache(maxsize=None)
def _build_graph(root: str) -> dict[str, frozenset[str]]:
    files = module_files(root)
    pkg = os.path.basename(root)
    exports = _exports(files[pkg])
    graph: dict[str, set[str]] = {m: set() for m in files}

    def resolve(name: str, current: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name if name and name != current else None

    for mod, path in files.items():
        tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
        is_pkg = path.endswith("__init__.py")
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".")
                    keep = len(parts) - node.level + (1 if is_pkg else 0)
                    base = ".".join(parts[:keep] + ([base] if base else []))
                for a in node.names:
                    if base == pkg and a.name in exports:
                        targets.append(exports[a.name])
                    elif f"{base}.{a.name}" in files:
                        targets.append(f"{base}.{a.name}")
                    else:
                        targets.append(base)
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
                  and node.args):
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    targets = [arg.value]
                elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                    prefix = arg.values[0].value
                    targets = [m for m in files if m.startswith(prefix) and m != prefix.rstrip(".")]
            for t in targets:
                if t == pkg or t.startswith(pkg + "."):
                    r = resolve(t, mod)
                    if r is not None and r != pkg:
                        graph[mod].add(r)
    graph[pkg] |= {m for m in exports.values() if m in files}
    return {m: frozenset(d) for m, d in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (or a self-import), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def map_lines(graph: dict[str, set[str]]) -> list[str]:
    """The map's text: ``module -> dep, dep`` per module, sorted (``-> (none)`` when it imports none)."""
    return [f"{m} -> {', '.join(sorted(d)) if d else '(none)'}" for m, d in sorted(graph.items())]


if __name__ == "__main__":
    g = build_graph()
    print("\n".join(map_lines(g)))
    for c in cycles(g):
        print("CYCLE:", " <-> ".join(c), file=sys.stderr)
