"""The ``--html FILE`` pages of ``tflab tour``, ``tflab retrace`` and ``tflab export``, and ``--tensorboard DIR``.

This module imports nothing above the base layer: what a page needs from a lab
package (the FuncGraphs of ``tflab retrace``'s functions, `TraceReport` objects)
the verb computes and passes in (`tflab.commands.retrace_cmd`).

Each page is `tflab.report.html.page` around the fragments of `tflab.report.html` (the
same fragments the reports' ``_repr_html_`` returns in a notebook). Sections
carry fixed ids (``config``, ``timeline``, ``funcgraph``, ``export``,
``modes``, ``precision``, ``distribute``) so a reader, or the browser test,
finds them.

``--tensorboard DIR`` writes a FuncGraph with ``tf.summary.graph`` into an
event file under DIR (``tensorflow/python/ops/summary_ops_v2.py``: the
GraphDef is serialized into the event's ``graph_def`` field), which
TensorBoard's Graphs dashboard reads (``tensorboard --logdir DIR``).
"""

from __future__ import annotations

from typing import Any

from tflab.report import html as _html

def html_output(path: str | None, force: bool):
    """Probes ``--html FILE`` before any work: an existing file needs ``force``.

    Returns:
        The `tflab._io.paths.OutputPath`, or None when ``path`` is None.

    Raises:
        UsageError: a folder, a path under a regular file, a missing folder,
            or an existing file without ``force`` (one line; exit 2 from the CLI).
    """
    if path is None:
        return None
    from tflab._io.paths import output_path

    return output_path(path, "--html", overwrite=force, example="report.html")


def tensorboard_output(path: str | None):
    """Probes ``--tensorboard DIR`` before any work (a folder; created when missing, kept when it exists)."""
    if path is None:
        return None
    from tflab._io.paths import output_path

    return output_path(path, "--tensorboard", folder=True)


def write_tensorboard(target: Any, graph: Any) -> str:
    """Writes ``graph`` (a FuncGraph, or a `TraceReport`'s) with ``tf.summary.graph`` under ``target``.

    Args:
        target: the `OutputPath` from `tensorboard_output`.
        graph: a `tf.Graph`/FuncGraph, or a `tflab.TraceReport` (its ``func_graph``).

    Returns:
        The event file's path. An existing folder keeps its files: the event
        file is a new one beside them, as TensorBoard's writers do.
    """
    import os

    import tensorflow as tf

    graph = getattr(graph, "func_graph", graph)
    folder = target.make_dir()
    before = set(os.listdir(folder))
    try:
        writer = tf.summary.create_file_writer(str(folder))
        with writer.as_default():
            tf.summary.graph(graph)
        writer.flush()
        writer.close()
    except BaseException:
        target.discard()
        raise
    new = sorted(set(os.listdir(folder)) - before)
    return str(folder / new[-1]) if new else str(folder)


# --------------------------------------------------------------------------- tour

def tour_page(report: dict, shared: dict) -> str:
    """The tour's page from its JSON report and the objects its sections left in ``ctx.shared``.

    Args:
        report: `tflab.tour.run_tour`'s report dict.
        shared: ``TourContext.shared``: ``trace_report`` (step 1's `TraceReport`),
            ``probe`` (step 2's `RetraceProbe`), ``export_report`` (steps 7–8).
    """
    sections = []
    probe = shared.get("probe")
    if probe is not None:
        sections.append(_html.section("timeline", "Trace timeline (step 2: the training step)",
                                      _html.timeline_fragment(_html.probe_groups(probe))))
    trace = shared.get("trace_report")
    if trace is not None:
        sections.append(_html.section("funcgraph", "FuncGraph (step 1: the inference function)",
                                      _html.trace_fragment(trace)))
    exported = shared.get("export_report")
    if exported is not None:
        sections.append(_html.section("export", "Export variants (steps 7–8)", _html.export_fragment(exported)))
    modes = report.get("modes")
    if modes:
        body = (_html.modes_fragment(modes["forward"]) + _html.modes_fragment(modes["gradients"])
                if "forward" in modes else _html.modes_fragment(modes))
        sections.append(_html.section("modes", "Modes (step 6): eager vs graph vs XLA", body))
    precision = report.get("precision")
    if precision:
        body = _html.precision_fragment(precision["tiny_loss"]) if "tiny_loss" in precision else ""
        if "loss_scaling" in precision:
            body += "<h3>MobileNetV3Small training step under each policy</h3>" + \
                _html.loss_scaling_fragment(precision["loss_scaling"])
        sections.append(_html.section("precision", "Precision (step 10)", body))
    dist = report.get("distribute")
    if dist:
        sections.append(_html.section("distribute", "tf.distribute (step 11)", _html.distribute_fragment(dist)))
    rest = {k: v for k, v in report.items() if k not in ("config", "modes", "precision", "distribute")}
    sections.append(_html.section("report", "Every number (report.json)", _html.json_fragment(rest, "report.json")))
    return _html.page(f"tflab tour: {report.get('model', '')}", sections, report.get("config"))


# --------------------------------------------------------------------------- retrace

def retrace_page(result: Any, graphs: list) -> str:
    """The ``tflab retrace --html`` page: the timeline of every tf.function, then their newest FuncGraphs."""
    sections = [_html.section("timeline", f"Trace timeline: {result.trace_count} trace(s) in "
                                          f"{len(result.functions)} tf.function(s)",
                              _html.timeline_fragment(_html.script_groups(result))
                              + (f"<p class=\"bad\">{_html.esc(result.error)}</p>" if result.error else "")
                              + (f"<p>note: {_html.esc(result.note)}</p>" if result.note else ""))]
    body = "".join(_html.trace_fragment(g) for g in graphs) or "<p>no FuncGraph to draw</p>"
    sections.append(_html.section("funcgraph", "FuncGraph of each tf.function (its newest trace)", body))
    return _html.page(f"tflab retrace {result.script}", sections)


# --------------------------------------------------------------------------- export

def export_page(report: Any) -> str:
    """The ``tflab export --html`` page: the SavedModel check, the variants table, each variant's check."""
    sections = [_html.section("export", f"Export of {report.model}", _html.export_fragment(report))]
    checks = "".join(_html.tflite_fragment(v.check) for v in report.variants.values() if v.check is not None)
    if checks:
        sections.append(_html.section("variants", "Each TFLite variant", checks))
    sections.append(_html.section("report", "Every number (report.json)",
                                  _html.json_fragment(report.to_dict(), "report.json")))
    return _html.page(f"tflab export {report.model}", sections)
