"""Privacy by location. No tflab module takes another module's ``_name``.

The rule (also in docs/architecture.md, "Privacy"), checked with ``ast`` on every
tracked Python file under ``tflab/`` (imports inside functions count, and so does
the Python source of a ``python -c`` string that imports tflab):

* **Private names.** A name with a leading underscore (not a ``__dunder__``) is
  private to the module that holds it. No other module imports it
  (``from tflab.x import _y``) or reads it as an attribute of an imported tflab
  module (``x._y``, ``tflab.x._y``). A name that other modules use is public:
  it loses its underscore. A module may bind a public name to a private alias
  (``from tflab.x import y as _y``): the alias is its own.
* **Private modules.** A module or package whose name starts with ``_`` is
  private to the package that contains it: any module in that package (or in
  a package below it) may import it, none outside. ``tflab/_io/`` is
  private to ``tflab`` (every tflab module may use ``tflab._io.paths``, a user may not);
  ``tflab/lowering/_child.py`` is private to ``tflab.lowering``. A package
  that wants its private module's names used from outside re-exports them
  (public names in its ``__init__``), and outside modules import them from
  the package.
* **The TF adapter.** ``tflab/_tf/`` is the one door to TF internals
  (tests/house/test_tf_internals.py): a private package of ``tflab``, so every tflab
  module imports its modules and their public names; the ``_names`` inside
  its modules stay theirs, like any module's.

``ALLOWED`` lists the imports that still break the rule, by importer, module
and name, each in an area being reworked by another branch; it
only shrinks (an entry no longer needed fails the test too).
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# (importing module, imported module, name): temporary, emptied when the branches merge.
ALLOWED: set[tuple[str, str, str]] = set()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def tracked_modules(repo: Path, top: str = "tflab") -> dict[str, Path]:
    """``{dotted module name: path}`` of the tracked .py files under ``repo/top``."""
    try:
        out = subprocess.run(["git", "ls-files", "--", f"{top}/*.py", f"{top}/**/*.py"], cwd=repo,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = []
    if not out:  # not a git checkout (a planted tree): every file
        out = [p.relative_to(repo).as_posix() for p in (repo / top).rglob("*.py")]
    mods = {}
    for rel in sorted(set(out)):
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = repo / rel
    return mods


def _inside(importer: str, package: str) -> bool:
    return importer == package or importer.startswith(package + ".")


def _private_module_problem(importer: str, module: str) -> str | None:
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _is_private(part) and not _inside(importer, ".".join(parts[:i])):
            return f"imports {module}, private to {'.'.join(parts[:i])}"
    return None


def _code_strings(tree: ast.AST):
    """Python source in string constants that imports tflab (``python -c`` entry points)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "tflab" in node.value \
                and "import" in node.value:
            try:
                yield node.lineno, ast.parse(node.value)
            except SyntaxError:
                continue


def _scan(importer: str, tree: ast.AST, mods: dict[str, Path], line0: int = 0):
    """Yields ``(line, imported module, name or None, message)`` for each break of the rule."""
    package = importer if mods.get(importer, Path("x")).name == "__init__.py" else importer.rpartition(".")[0]
    bound: dict[str, str] = {}  # local name -> tflab module it is bound to
    for node in ast.walk(tree):
        line = line0 or getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "tflab":
                    continue
                if a.name in mods and (p := _private_module_problem(importer, a.name)):
                    yield line, a.name, None, p
                if a.asname:
                    bound[a.asname] = a.name
                else:
                    bound["tflab"] = "tflab"
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base.split(".")[0] != "tflab":
                continue
            if base in mods and (p := _private_module_problem(importer, base)):
                yield line, base, None, p
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in mods:
                    if p := _private_module_problem(importer, sub):
                        yield line, sub, None, p
                    bound[a.asname or a.name] = sub
                elif _is_private(a.name) and base != importer:
                    yield line, base, a.name, f"imports {a.name} from {base}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        module = bound[value.id]
        for attr in chain:
            if f"{module}.{attr}" in mods:
                module = f"{module}.{attr}"
                continue
            if _is_private(attr) and module != importer:
                yield line0 or node.lineno, module, attr, f"reads {module}.{attr}"
            break


def violations(repo: Path, top: str = "tflab") -> list[tuple[str, str, str | None, str]]:
    """Every break of the rule under ``repo/top``: ``(where, imported module, name, what)``."""
    mods = tracked_modules(repo, top)
    found = set()
    for importer, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(repo).as_posix()
        for line, module, name, what in _scan(importer, tree, mods):
            found.add((f"{rel}:{line}", importer, module, name, what))
        for line, code in _code_strings(tree):
            for _, module, name, what in _scan(importer, code, mods, line0=line):
                found.add((f"{rel}:{line}", importer, module, name, what + " (in a code string)"))
    return sorted(found)


def test_no_tflab_module_takes_another_modules_private_name():
    found = violations(REPO)
    left = [v for v in found if (v[1], v[2], v[3]) not in ALLOWED]
    assert not left, "private names taken from another module (drop the underscore where the name " \
        "is defined, or re-export it from the package):\n" + "\n".join(f"{w}: {what}" for w, _, _, _, what in left)
    used = {(v[1], v[2], v[3]) for v in found}
    assert ALLOWED <= used, f"ALLOWED entries no longer needed (remove them): {sorted(ALLOWED - used)}"


def test_the_check_sees_each_kind_of_break_in_a_planted_tree(tmp_path):
    """The check can fail: one planted break of each kind, and the healthy forms beside them."""
    pkg = tmp_path / "tflab"
    for d in ("", "_tf", "low", "_tour"):
        (pkg / d).mkdir(parents=True, exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("from tflab.low._child import run\n")  # re-export: fine
    files = {
        "_tf/function.py": "def trace_count(f):\n    return 1\n\ndef _cache(f):\n    return 2\n",
        "_paths.py": "def publish(p):\n    return p\n\ndef _atomic(p):\n    return p\n",
        "low/_child.py": "def run():\n    return 0\n",
        "low/api.py": "from tflab.low import _child\nfrom tflab.low._child import run\n",  # same package: fine
        "_tour/lane.py": "def main():\n    from tflab._tour.lane import main as _main\n    return _main\n",
        "good.py": ("from tflab._tf import function as _tf\nfrom tflab import _paths\nimport tflab.low\n"
                    "from tflab.low import run\nfrom tflab._paths import publish as _publish\n"
                    "def _own():\n    return _tf.trace_count(_paths.publish), tflab.low.run, __name__\n"),
        "bad_from.py": "from tflab._paths import _atomic\n",
        "bad_lazy.py": "def f():\n    from tflab._tf.function import _cache\n    return _cache\n",
        "bad_attr.py": "from tflab._tf import function as _tf\n\ndef f():\n    return _tf._cache\n",
        "bad_dotted.py": "import tflab._paths\n\ndef f():\n    return tflab._paths._atomic\n",
        "bad_module.py": "from tflab.low import _child\n",
        "bad_module2.py": "import tflab.low._child as c\n",
        "bad_string.py": 'CMD = "import sys; from tflab._paths import _atomic; sys.exit(0)"\n',
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    found = violations(tmp_path)
    by_file = {}
    for where, _, module, name, what in found:
        by_file.setdefault(where.split(":")[0].split("/")[-1], []).append((module, name, what))
    assert set(by_file) == {"bad_from.py", "bad_lazy.py", "bad_attr.py", "bad_dotted.py", "bad_module.py",
                            "bad_module2.py", "bad_string.py"}, found
    assert by_file["bad_from.py"] == [("tflab._paths", "_atomic", "imports _atomic from tflab._paths")]
    assert by_file["bad_lazy.py"] == [("tflab._tf.function", "_cache", "imports _cache from tflab._tf.function")]
    assert by_file["bad_attr.py"] == [("tflab._tf.function", "_cache", "reads tflab._tf.function._cache")]
    assert by_file["bad_dotted.py"] == [("tflab._paths", "_atomic", "reads tflab._paths._atomic")]
    assert by_file["bad_module.py"] == [("tflab.low._child", None, "imports tflab.low._child, private to tflab.low")]
    assert by_file["bad_module2.py"] == [("tflab.low._child", None, "imports tflab.low._child, private to tflab.low")]
    assert by_file["bad_string.py"] == [("tflab._paths", "_atomic",
                                         "imports _atomic from tflab._paths (in a code string)")]


if __name__ == "__main__":
    for v in violations(REPO):
        print(f"{v[0]}\t{v[1]}\t{v[2]}\t{v[3]}\t{v[4]}")
