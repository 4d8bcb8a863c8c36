"""HTML fragments for every tflab report, and the self-contained page that holds them.

One fragment function per report kind; the ``--html FILE`` page of ``tflab
tour``, ``tflab retrace`` and ``tflab export`` is a list of these fragments
inside `page`, and each report's ``_repr_html_`` (Jupyter's rich display
protocol, ``IPython.core.formatters.HTMLFormatter``) returns the same
fragment through `fragment`. Everything is inline: CSS, the few lines of
JavaScript for the FuncGraph search box, and the SVG. Nothing is fetched, so
the page opens offline and in a sandboxed notebook output.

This package imports no lab package: each lab package registers its
records' renderers with `renders` (`dispatch`: a registry keyed by class,
looked up along the MRO), so the import graph runs downward. IPython is never
imported.

The FuncGraph picture (`funcgraph_svg`) has one ``<g class="op">`` per op of
the FuncGraph, coloured by op type; captures (the Placeholders standing for
captured variables and tensors, `tflab.tracing.CaptureInfo.internal`) and
control-flow ops (``If``/``While``/``Case``, with their branch functions)
are marked. Positions come from `tflab.report.layout.layout_graph` (Graphviz
``dot`` when installed, else networkx's topological generations).

The package, one module per report family: `base` (CSS, JS, escaping, tables,
`section`, `page`), `funcgraph`, `timeline`, `export` (SavedModel and TFLite) and
`lab` (modes, precision, tf.distribute), and `dispatch` (`renders`, `fragment`). Importing the
package imports none of them: each name loads its part on first use.
"""

from __future__ import annotations

import importlib

from tflab._api.lazy import lazy_exports

# Public name -> the part that defines it (PEP 562 module __getattr__: importing one
# part loads only that part and what it imports).
_EXPORTS = {
    **dict.fromkeys(("CSS", "SEARCH_JS", "bar", "config_fragment", "dict_table", "esc", "json_fragment", "num",
                     "page", "scalar", "section", "style", "table", "text_fragment", "type_colour"), "base"),
    **dict.fromkeys(("CONTROL_FLOW", "FIT_WIDTH", "funcgraph_svg", "graph_nodes", "trace_fragment"), "funcgraph"),
    **dict.fromkeys(("TRACE_COLOURS", "probe_groups", "script_groups", "timeline_fragment", "timeline_svg"),
                    "timeline"),
    **dict.fromkeys(("export_fragment", "op_records_fragment", "per_op_records", "tflite_fragment"), "export"),
    **dict.fromkeys(("distribute_fragment", "loss_scaling_fragment", "modes_fragment", "precision_fragment"),
                    "lab"),
    **dict.fromkeys(("fragment", "renderer_for", "renders"), "dispatch"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.report.html.{part}"))
