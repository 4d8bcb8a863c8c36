"""The HTML of a record: ``_repr_html_`` written once, the renderer found by class.

* ``_repr_html_`` has one definition in tflab, on `tflab.report.base.HtmlDisplay`;
  every report, and `tflab.RetraceProbe` (not a report: a wrapper around the
  user's function), inherit it;
* `tflab.report.html.dispatch.fragment` finds the renderer each lab package
  registered with `renders`, along the class's MRO: by the class, never by its
  name (a look-alike class named ``TraceReport`` gets the text fallback);
* the report package imports nothing above the base layer.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _import_graph import build_graph  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What the report package may import besides itself: base-layer helpers only.
REPORT_MAY_IMPORT = {"tflab._api.lazy", "tflab._api.deprecations", "tflab._io.paths", "tflab.runtime"}


def _repr_html_definitions() -> list[str]:
    found = []
    for root, _, files in os.walk(os.path.join(REPO, "tflab")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                tree = ast.parse(open(path, encoding="utf-8").read())
                found += [f"{os.path.relpath(path, REPO)}:{n.lineno}" for n in ast.walk(tree)
                          if isinstance(n, ast.FunctionDef) and n.name == "_repr_html_"]
    return found


def test_repr_html_is_written_once_on_the_base_class():
    defs = _repr_html_definitions()
    assert len(defs) == 1 and defs[0].startswith("tflab/report/base.py:"), defs


def test_every_report_and_the_probe_show_through_the_one_repr_html():
    from test_report_convention import _import_all, report_classes

    import tflab
    from tflab.report.base import HtmlDisplay, Report

    classes = [c for c in report_classes(_import_all()) if issubclass(c, Report)]
    assert len(classes) >= 25
    for cls in classes + [tflab.RetraceProbe]:
        assert issubclass(cls, HtmlDisplay) and cls._repr_html_ is HtmlDisplay._repr_html_, cls


def test_the_lab_packages_register_their_renderers():
    import tflab
    from tflab.distribute.probe import DistributedRetraceProbe
    from tflab.report.html import export, funcgraph, lab, lowering, timeline
    from tflab.report.html.dispatch import renderer_for

    expected = {tflab.TraceReport: funcgraph.trace_notebook_fragment, tflab.RetraceProbe: timeline.probe_fragment,
                DistributedRetraceProbe: timeline.probe_text_fragment, tflab.ScriptTraces: timeline.script_fragment,
                tflab.ModeComparison: lab.modes_fragment, tflab.TFLiteCheck: export.tflite_fragment}
    from tflab.export import ExportReport
    from tflab.lowering.records import Lowering
    from tflab.precision.records import PrecisionComparison

    expected.update({ExportReport: export.export_fragment, Lowering: lowering.lowering_fragment,
                     PrecisionComparison: lab.precision_notebook_fragment})
    for cls, fn in expected.items():
        assert renderer_for(cls) is fn, cls
    assert renderer_for(tflab.StabilizeReport) is None  # no renderer of its own: its to_text()


def test_the_renderer_is_found_by_class_not_by_name():
    """Planted classes: a registered one, its subclass, and an unregistered look-alike named TraceReport."""
    from tflab.report.base import Report
    from tflab.report.html.dispatch import _RENDERERS, fragment, renders

    @dataclasses.dataclass(repr=False)
    class Planted(Report):
        function_name: str = "f"

        def to_text(self):
            return "planted text"

    class Child(Planted):
        pass

    @dataclasses.dataclass(repr=False)
    class TraceReport(Report):  # the name of a registered class, but not that class
        function_name: str = "f"

        def to_text(self):
            return "look-alike text"

    try:
        assert "planted text" in fragment(Planted())  # nothing registered: the text
        renders(Planted)(lambda r: "<p>planted renderer</p>")
        assert "<p>planted renderer</p>" in Planted()._repr_html_()
        assert "<p>planted renderer</p>" in fragment(Child())  # inherited along the MRO
        renders(Child)(lambda r: "<p>child renderer</p>")
        assert "<p>child renderer</p>" in fragment(Child()) and "child" not in fragment(Planted())
        html = TraceReport()._repr_html_()
        assert "look-alike text" in html and "<svg" not in html  # its to_text(), not a FuncGraph
        assert html.startswith('<div class="tflab"><style>')
    finally:
        _RENDERERS.pop(Planted, None)
        _RENDERERS.pop(Child, None)
    with pytest.raises(TypeError, match="one or more classes"):
        renders()
    with pytest.raises(TypeError, match="one or more classes"):
        renders("TraceReport")


def _report_deps(graph) -> dict[str, set[str]]:
    return {m: {d for d in deps if not d.startswith("tflab.report") and d not in REPORT_MAY_IMPORT}
            for m, deps in graph.items() if m.startswith("tflab.report")}


def test_the_report_package_imports_no_lab_package():
    graph = build_graph()
    assert {"tflab.report.pages", "tflab.report.html.dispatch", "tflab.report.base"} <= set(graph)
    assert {m: d for m, d in _report_deps(graph).items() if d} == {}
    # the check can fail: the lazy import of tflab.tracing pages.py had
    planted = dict(graph, **{"tflab.report.pages": graph["tflab.report.pages"] | {"tflab.tracing"}})
    assert {m: d for m, d in _report_deps(planted).items() if d} == {"tflab.report.pages": {"tflab.tracing"}}


def test_a_package_keeps_its_records_in_records_py():
    """One name for the module of a package's records: no record.py, result.py or *_report.py in tflab."""
    odd = []
    for root, _, files in os.walk(os.path.join(REPO, "tflab")):
        odd += [os.path.relpath(os.path.join(root, f), REPO) for f in files
                if f in ("record.py", "result.py", "results.py", "report.py") or f.endswith("_report.py")]
    assert odd == []
    for pkg in ("diagnosis", "distribute", "litert", "lowering", "modes", "precision", "retrace", "saved_model"):
        here = os.path.join(REPO, "tflab", pkg)
        assert (os.path.isfile(os.path.join(here, "records.py"))
                or os.path.isfile(os.path.join(here, "records", "__init__.py"))), pkg


def records_misplaced(classes) -> list[str]:
    """Report subclasses defined in a lab package (a tflab subpackage other than report/) outside its
    records module (``tflab.PKG.records`` or, for a records package, ``tflab.PKG.records.*``)."""
    import importlib

    out = []
    for cls in classes:
        parts = cls.__module__.split(".")
        if len(parts) < 3 or parts[0] != "tflab" or parts[1] == "report":
            continue  # a top-level module (tflab.tracing), or the report base itself
        if not hasattr(importlib.import_module(".".join(parts[:2])), "__path__"):
            continue
        if parts[2] != "records":
            out.append(f"{cls.__module__}.{cls.__qualname__}")
    return sorted(out)


def test_every_report_of_a_lab_package_is_defined_in_its_records_module():
    """A lab package's records live in its records module, not beside the code that
    computes them (the old module may re-export them)."""
    from test_report_convention import _import_all, report_classes

    from tflab.report.base import Report, config_field

    classes = [c for c in report_classes(_import_all()) if issubclass(c, Report)]
    in_packages = [c for c in classes if c.__module__.count(".") >= 2 and not c.__module__.startswith("tflab.report")]
    assert len(in_packages) >= 20, in_packages  # the litert, retrace, distribute, precision, ... records
    assert records_misplaced(classes) == []
    # the check can fail: a record planted beside the code that computes it, in a package and in a
    # records package's part; a top-level module's record is not a package's
    planted = dataclasses.make_dataclass("Planted", [("config", dict, config_field())], bases=(Report,),
                                         frozen=True)
    planted.__module__ = "tflab.litert.per_op"
    in_part = dataclasses.make_dataclass("InPart", [], bases=(Report,), frozen=True)
    in_part.__module__ = "tflab.litert.records.ops"
    top = dataclasses.make_dataclass("Top", [], bases=(Report,), frozen=True)
    top.__module__ = "tflab.tracing"
    assert records_misplaced(classes + [planted, in_part, top]) == ["tflab.litert.per_op.Planted"]
