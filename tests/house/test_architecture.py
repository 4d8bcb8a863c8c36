"""One concern per module, imports only downward, and a map that matches the code.

The import graph is read from the source with `ast` (tests/_import_graph.py):
imports inside functions count, since a cycle through a lazy import still
breaks on the call that takes it. The map in docs/architecture.md lists the
same graph, edge for edge.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _import_graph import build_graph, cycles, map_lines, module_files  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "docs", "architecture.md")

# The retrace package: its public names, each importable as
# `from tflab.retrace import X`; the ones also on `tflab` itself.
RETRACE_PUBLIC = """
FIXES FIXES_WITH_REDUCE_RETRACING NO_VARIABLE_CREATION Reason Trace VARIABLE_CREATION Node
PER_REPLICA_FIX describe_per_replica diff_per_replica explain function_type_inputs make_trace
node_of nodes_of parse_trace_type reasons_between TraceEvent capture_trace_events
current_trace_event event_from_frame parse_trace_log_message SideEffect trace_time_effects
FunctionTraces NameGroup STALE_READ_NOTE ScriptTraces cached_traces explain_records
group_logged_traces name_groups trace_from_event trace_script RetraceProbe StaleRead RetraceError
TraceExpectation expect_traces demonstrate_retracing
""".split()
RETRACE_ON_TFLAB = """
RetraceProbe StaleRead Trace Reason TraceEvent capture_trace_events reasons_between trace_script
ScriptTraces SideEffect expect_traces RetraceError TraceExpectation demonstrate_retracing
""".split()


def test_the_import_graph_of_tflab_has_no_cycle():
    graph = build_graph()
    assert len(graph) > 30 and graph["tflab.retrace.expect"] >= {"tflab.retrace.probe",
                                                                  "tflab.retrace.log"}
    assert cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle_through_an_import_inside_a_function(tmp_path):
    """The check itself can fail: a lazy import back up the graph is a cycle."""
    pkg = tmp_path / "tflab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('_EXPORTS = {"f": "tflab.low"}\n')
    (pkg / "low.py").write_text("def f():\n    from tflab.high import g\n    return g()\n")
    (pkg / "high.py").write_text("from tflab import f\n\ndef g():\n    return 1\n")
    (pkg / "sub").mkdir()
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("import importlib\nimportlib.import_module(f'tflab.sub.{1}')\n")
    graph = build_graph(str(pkg))
    assert graph["tflab.high"] == {"tflab.low"}  # `from tflab import f` is the _EXPORTS module
    assert graph["tflab.low"] == {"tflab.high"}
    assert graph["tflab.sub.a"] == set()  # an f-string prefix names its package's modules but itself
    assert cycles(graph) == [["tflab.high", "tflab.low"]]


def test_nobody_imports_export_or_the_compatibility_modules():
    """export.py is the top orchestrator; the package roots tflab.retrace and tflab.litert only
    re-export their parts (tflab modules import the part itself)."""
    graph = build_graph()
    for top in ("tflab.export", "tflab.retrace", "tflab.litert"):
        users = sorted(m for m, deps in graph.items() if top in deps and m != "tflab")
        allowed = {"tflab.export": {"tflab._tour.s07_export", "tflab.commands.export_cmd"},
                   "tflab.retrace": set(), "tflab.litert": set()}[top]
        assert set(users) <= allowed, (top, users)
    # custom-op loading is below everything that loads a SavedModel or converts one
    for m in ("tflab.saved_model.loading", "tflab.litert.conversion", "tflab.export"):
        assert "tflab.custom_op_loader" in graph[m]
    assert graph["tflab.custom_op_loader"] == set()
    # the records and the TraceType trees are the bottom of the retrace package, the diff right above them
    # only the base row: the report base and text, and the registry its ScriptTraces renderer is added to
    assert graph["tflab.retrace.records"] <= {"tflab.report.base", "tflab.report.text", "tflab.report.html.dispatch",
                                              "tflab.report.html.timeline"}
    assert graph["tflab.retrace.nodes"] == {"tflab._tf.function"}
    assert graph["tflab.retrace.diff"] == {"tflab.retrace.records", "tflab.retrace.nodes", "tflab._api.argcheck",
                                           "tflab.retrace.paths", "tflab.retrace.function_context"}
    # the diff's two parts split out of it (paths into Node trees, the FunctionContext) sit on the trees
    assert graph["tflab.retrace.paths"] == {"tflab.retrace.nodes"}
    assert graph["tflab.retrace.function_context"] == set()
    # export uses saved_model's public API only (it imported _is_keras3/_is_tf_keras/_reference)
    import ast

    tree = ast.parse(open(os.path.join(REPO, "tflab", "export.py"), encoding="utf-8").read())
    private = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "tflab.saved_model"
               for a in n.names if a.name.startswith("_")]
    assert private == []


def _doc_map() -> list[str]:
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"<!-- import-map:begin -->\s*```text\n(.*?)```\s*<!-- import-map:end -->", text, re.S)
    assert m, "docs/architecture.md has no import-map block"
    return [ln.rstrip() for ln in m.group(1).splitlines() if ln.strip()]


def test_the_architecture_map_is_the_import_graph():
    """docs/architecture.md lists every module and its imports; regenerate with
    ``python tests/_import_graph.py`` when this fails."""
    expected = map_lines(build_graph())
    assert _doc_map() == expected, "\n".join(["docs/architecture.md import map is stale; it should be:"]
                                           + expected)


def _doc_layers() -> list[list[str]]:
    text = open(DOC, encoding="utf-8").read()
    section = text.split("## Layers (bottom to top)", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| layer")]
    return [re.findall(r"`([\w.*]+)`", row.split("|")[2]) for row in rows]


def test_imports_go_only_downward_through_the_documented_layers():
    """Every module sits in one row of the layer table, and imports only its own row or rows below."""
    graph = build_graph()

    def row_of(module: str) -> int | None:
        name = module[len("tflab."):]
        for i, row in enumerate(_doc_layers()):
            for token in row:
                if token == name or (token.endswith(".*") and name.startswith(token[:-1])):
                    return i
        return None

    unplaced = sorted(m for m in graph if m != "tflab" and row_of(m) is None)
    assert unplaced == [], f"modules missing from the layer table of docs/architecture.md: {unplaced}"
    upward = sorted(f"{a} -> {b}" for a, deps in graph.items() if a != "tflab"
                    for b in deps if row_of(b) > row_of(a))
    assert upward == [], "imports that go up the layer table: " + "; ".join(upward)


def test_the_retrace_package_replaces_the_old_modules_and_keeps_its_public_names():
    """tflab/retrace/ is a package; the files retrace_*.py and the facade are gone (their module
    paths load the package, with a DeprecationWarning, from tflab/_api/deprecations.py's table),
    and every public name is importable from tflab.retrace."""
    import importlib

    import tflab
    import tflab.retrace as pkg

    for gone in ("retrace_reasons", "retrace_probe", "retrace_log", "retrace_expect", "retrace_demo"):
        assert not os.path.exists(os.path.join(REPO, "tflab", gone + ".py"))
        sys.modules.pop(f"tflab.{gone}", None)
        with pytest.warns(DeprecationWarning, match=f"tflab.{gone} is tflab.retrace since 0.2.0"):
            assert importlib.import_module(f"tflab.{gone}") is pkg
        sys.modules.pop(f"tflab.{gone}", None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tflab._facade")
    assert os.path.isdir(os.path.join(REPO, "tflab", "retrace"))
    assert sorted(pkg.__all__) == sorted(RETRACE_PUBLIC)
    for name in RETRACE_PUBLIC:
        assert getattr(pkg, name) is not None, name
    for name in RETRACE_ON_TFLAB:
        assert getattr(tflab, name) is getattr(pkg, name), name
    graph = build_graph()
    # the module that runs `tflab retrace` does not import the probe or expect
    assert not graph["tflab.retrace.log"] & {"tflab.retrace.probe", "tflab.retrace.expect"}


def test_the_litert_package_re_exports_public_names_of_its_parts():
    """tflab.litert names each public name's home; no private name, no name that is also a part's."""
    import pkgutil

    import tflab
    import tflab.litert as pkg

    parts = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    assert {"conversion", "bounds", "check", "records", "per_op", "nan", "workers"} <= parts
    for name, part in pkg._EXPORTS.items():
        assert not name.startswith("_") and name not in parts, name  # a function named like a module is hidden
        assert getattr(pkg, name) is getattr(importlib.import_module(f"tflab.litert.{part}"), name), name
    for name in ("tflite_roundtrip", "TFLiteCheck", "UnsupportedOpsError"):
        assert getattr(tflab, name) is getattr(pkg, name)
    from tflab.litert import bounds

    # "how is the int8 bound derived" is answered by the file name
    assert "int8" in bounds.__doc__ and "output step" in bounds.__doc__


# One interpreter that imports the heavy third-party packages once, then forks a
# child per tflab module: each child starts with NO tflab module loaded, imports
# one, and lists the tflab modules that came with it.
_FORK_IMPORTER = r"""
import importlib, json, os, sys
import numpy, tensorflow  # shared, not part of tflab
mods = json.loads(sys.argv[1])
for m in mods:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(m)
            out = {"ok": True, "loaded": sorted(k for k in sys.modules if k == "tflab" or k.startswith("tflab."))}
        except BaseException as e:
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    print(m, data.decode(), flush=True)
"""

# Modules that run something on import.
_NOT_IMPORTED_ALONE = {"tflab.__main__"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_each_tflab_module_imports_alone_in_a_fresh_interpreter():
    import json

    graph = build_graph()
    mods = sorted(m for m in module_files() if m not in _NOT_IMPORTED_ALONE)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _FORK_IMPORTER, json.dumps(mods)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith("tflab"))
    assert sorted(results) == mods

    def closure(m: str) -> set[str]:
        seen, todo = set(), [m]
        while todo:
            x = todo.pop()
            if x not in seen:
                seen.add(x)
                todo.extend(graph.get(x, ()))
        return seen

    for m in mods:
        r = json.loads(results[m])
        assert r["ok"], f"import {m} alone: {r.get('error')}"
        # What Python loaded is within what the ast graph says m can reach (plus parent packages).
        reach = closure(m)
        parents = {".".join(x.split(".")[:i]) for x in reach for i in range(1, x.count(".") + 1)}
        # Importing a submodule runs its parent packages' __init__ first; a package root imports
        # only tflab._api.lazy at import time (its parts load on first use, which this import does not do).
        reach |= parents | ({"tflab._api", "tflab._api.lazy"} if len(parents) > 1 else set())
        # tflab's root: the renames table, the version, and the finder for public names that are no module
        reach |= {"tflab._api", "tflab._api.deprecations", "tflab._api.version", "tflab._api.not_modules"}
        assert set(r["loaded"]) <= reach, (m, sorted(set(r["loaded"]) - reach))


PRIVATE_PACKAGES = ("tflab._api", "tflab._graph", "tflab._io", "tflab._pytest", "tflab._tf", "tflab._tour",
                    "tflab._user")


def private_by_name(root: str) -> list[str]:
    """Modules that are private by their own underscore where privacy goes by location.

    tflab's shared services live in private packages (``tflab/_io/``, ``tflab/_user/``, ...):
    a module at the root of ``tflab/`` named ``_x.py`` is a service with no package, and a
    module inside a private package named ``_x.py`` would be private twice (its package
    already keeps it from users; another module of tflab that needs it takes it by name).
    """
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.endswith(".py") and name.startswith("_") and name not in ("__init__.py", "__main__.py"):
            found.append(f"tflab/{name}")
        elif os.path.isdir(path) and name.startswith("_") and not name.startswith("__"):
            for sub in sorted(os.listdir(path)):
                if sub.endswith(".py") and sub.startswith("_") and sub != "__init__.py":
                    found.append(f"tflab/{name}/{sub}")
    return found


def test_the_shared_services_live_in_private_packages():
    root = os.path.join(REPO, "tflab")
    assert private_by_name(root) == []
    packages = sorted(n for n in os.listdir(root) if n.startswith("_") and not n.startswith("__")
                      and os.path.isdir(os.path.join(root, n)) and n != "__pycache__")
    assert [f"tflab.{p}" for p in packages] == list(PRIVATE_PACKAGES)
    for pkg in PRIVATE_PACKAGES:  # each package says which concern it holds
        mod = importlib.import_module(pkg)
        assert mod.__doc__ and len(mod.__doc__.split()) >= 8, pkg


def test_the_private_module_check_sees_a_root_service_and_a_doubly_private_module(tmp_path):
    """Planted: a root ``_stray.py`` and ``_io/_inner.py`` are found; the healthy forms are not."""
    pkg = tmp_path / "tflab"
    (pkg / "_io").mkdir(parents=True)
    for rel in ("__init__.py", "__main__.py", "cli.py", "_io/__init__.py", "_io/paths.py"):
        (pkg / rel).write_text("")
    assert private_by_name(str(pkg)) == []
    (pkg / "_stray.py").write_text("")
    (pkg / "_io" / "_inner.py").write_text("")
    assert private_by_name(str(pkg)) == ["tflab/_io/_inner.py", "tflab/_stray.py"]
