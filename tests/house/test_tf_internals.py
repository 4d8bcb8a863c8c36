"""TF internals are reached only through ``tflab/_tf/``, and every private name it uses exists.

Two checks:

* every ``(module, attribute)`` pair a ``tflab._tf`` module lists in ``PRIVATE_NAMES``
  imports and resolves in the pinned TF, so an upgrade fails here, naming it;
* no tracked Python file outside ``tflab/_tf/`` (in ``tflab/``, ``custom_ops/``, ``benchmarks/``
  and ``tests/``; `OTHER_ROOTS`) imports ``tensorflow.python``, ``tensorflow.core``,
  ``tensorflow.lite.python``, a ``_pywrap`` module, or reads a private attribute that
  tflab itself does not define (an AST scan; string literals passed to
  ``getattr``/``hasattr``/``setattr`` count as attribute reads). Tests and benchmarks reach
  TF's state through the adapter's functions too (``tflab._tf.autograph.operator_slots``,
  ``tflab._tf.function.function_cache``, ...). The one file skipped is this scanner
  (`SCANNER`), which names internals on purpose to prove its checks can fail; a planted
  name elsewhere is built at run time (``"_no_such" + "_attribute_in_tf"``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "tflab"
# Trees besides tflab/ that the scan covers (no TF internal outside tflab/_tf/); their
# files are named from the repository root ("custom_ops/build.py").
OTHER_ROOTS = ("custom_ops", "benchmarks", "tests")

# Files allowed to reach TF internals outside the adapter (none): an entry added here must be
# removed once its module moves; the test below also fails if an entry is no longer needed.
PENDING: set[str] = set()

# The scanner itself: it names TF internals on purpose (the planted uses below, a private name
# TF lacks to prove the name check can fail), so it is the one file outside tflab/_tf/ not scanned.
SCANNER = Path(__file__).resolve().relative_to(REPO).as_posix()

INTERNAL_MODULES = ("tensorflow.python", "tensorflow.core", "tensorflow.lite.python",
                    "tensorflow.compiler", "tensorflow.tsl", "tensorflow.dtensor")

# Private names of the standard library and of namedtuples that tflab may use.
ALLOWED_PRIVATE = {"_asdict", "_replace", "_fields", "_make", "_field_defaults", "_getframe", "_exit",
                   "_current_frames", "_name_", "_value_", "_missing_", "_ignore_", "_generate_next_value_",
                   # argparse's parser internals (cli.py walks its subparsers for help text;
                   # tests/commands/test_cli_bad_input.py finds the subparsers action by its class)
                   "_actions", "_subparsers", "_group_actions", "_SubParsersAction",
                   # atexit's: a child forked by tflab.process.forks ends with os._exit (never back into
                   # its server's loop) after running what a fresh Python runs at its end
                   "_run_exitfuncs"}


def _python_files():
    for path in sorted(ROOT.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path
    for tree in OTHER_ROOTS:
        for path in sorted((REPO / tree).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), path


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module:
    """A file's AST, parsed once per session (every test here walks the same ~500 files)."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _own_private_names() -> frozenset[str]:
    """Every ``_name`` that tflab defines: functions, classes, assignments, attributes, parameters,
    and its private modules and packages (``tflab._user.target`` read as an attribute chain)."""
    names: set[str] = {part.removesuffix(".py") for path in ROOT.rglob("*.py")
                       for part in path.relative_to(ROOT).parts}
    for _, path in _python_files():
        for node in ast.walk(_parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[-1])
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" \
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                names.add(str(node.args[1].value))
    return frozenset(n for n in names if n.startswith("_"))


def _violations(rel: str, source: str | ast.Module, own: frozenset[str]) -> list[str]:
    found = []
    for node in ast.walk(source if isinstance(source, ast.Module) else ast.parse(source)):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            mods = []
        for m in mods:
            if m.startswith(INTERNAL_MODULES) or "._pywrap" in m or m.startswith("_pywrap"):
                found.append(f"{rel}:{node.lineno}: imports {m}")
                break
        attr = None
        if isinstance(node, ast.Attribute):
            attr = node.attr
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            attr = node.args[1].value
        if attr and attr.startswith("_") and not attr.startswith("__") and attr not in own \
                and attr not in ALLOWED_PRIVATE:
            found.append(f"{rel}:{node.lineno}: reads the private attribute {attr}")
    return found


def test_tf_internals_only_inside_the_adapter():
    own = _own_private_names()
    bad, clean_pending = [], []
    for rel, path in _python_files():
        if rel.startswith("_tf/") or rel == SCANNER:
            continue
        v = _violations(rel, _parsed(path), own)
        if rel in PENDING:
            if not v:
                clean_pending.append(rel)
            continue
        bad += v
    assert not bad, "TF internals outside tflab/_tf/ (move them into an adapter module):\n" + "\n".join(bad)
    assert not clean_pending, f"no longer pending, remove from PENDING: {clean_pending}"


def test_the_scan_covers_custom_ops():
    """custom_ops/ is scanned: its loader is among the files, and an internal planted in it is found."""
    files = dict(_python_files())
    loader = "custom_ops/python/ops/warp_softmax_ops.py"
    assert loader in files and "custom_ops/build.py" in files, sorted(files)[-5:]
    planted = files[loader].read_text(encoding="utf-8") + "\nfrom tensorflow.python.framework import kernels\n"
    got = _violations(loader, planted, _own_private_names())
    assert got == [f"{loader}:{planted.count(chr(10))}: imports tensorflow.python.framework"], got


def test_the_scan_covers_tests_and_benchmarks():
    """tests/ and benchmarks/ are scanned: an internal planted in a test file or a benchmark is found,
    and the scanner, the one file skipped, does hold uses the scan would report."""
    files, own = dict(_python_files()), _own_private_names()
    for rel in ("tests/retrace/test_retrace_why_paths.py", "benchmarks/bench_tour.py"):
        assert rel in files, rel
        for line, what in (("from tensorflow.core.function import trace_type", "imports tensorflow.core.function"),
                           ("x = f._variable_creation_config", "reads the private attribute _variable_creation_config")):
            planted = files[rel].read_text(encoding="utf-8") + "\n" + line + "\n"
            got = _violations(rel, planted, own)
            assert got == [f"{rel}:{planted.count(chr(10))}: {what}"], got
    assert SCANNER == "tests/house/test_tf_internals.py" and SCANNER in files
    assert _violations(SCANNER, files[SCANNER].read_text(encoding="utf-8"), own)  # skipped for a reason


def test_the_scan_catches_planted_internals():
    """The check can fail: each planted use is found, and public TF code is not."""
    own = _own_private_names()
    planted = {
        "from tensorflow.python.util import nest": "imports tensorflow.python.util",
        "import tensorflow.python.eager.context as c": "imports tensorflow.python.eager.context",
        "from tensorflow.python.util import _pywrap_util_port": "imports",
        "x = f._variable_creation_config": "private attribute _variable_creation_config",
        "x = getattr(f, '_variable_creation_config')": "private attribute _variable_creation_config",
    }
    for src, what in planted.items():
        got = _violations("planted.py", src, own)
        assert got and what in got[0], (src, got)
    healthy = "import tensorflow as tf\nx = tf.nest.flatten([1])\ny = f.function_type\nz = t._asdict()"
    assert _violations("healthy.py", healthy, own) == []


def _adapter_modules():
    import tflab._tf as pkg

    return [importlib.import_module(f"tflab._tf.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]


def test_every_private_name_the_adapter_lists_exists_in_the_pinned_tf():
    missing = []
    for mod in _adapter_modules():
        for module_path, attr_path in getattr(mod, "PRIVATE_NAMES", ()):
            try:
                obj = importlib.import_module(module_path)
                for part in attr_path.split(".") if attr_path else ():
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as e:
                missing.append(f"{mod.__name__}: {module_path} {attr_path}: {e}")
    assert not missing, "TF internals the adapter needs are gone (a TF upgrade?):\n" + "\n".join(missing)


def test_the_name_check_fails_on_a_missing_name():
    with pytest.raises(AttributeError):
        getattr(importlib.import_module("tensorflow.python.util.nest"), "_no_such_name_in_tf")
