"""The lowering ladder (`tflab lower`): every level from Python to machine code, tied to the user's lines.

Modules: `records` (`Stage`, `Piece`, `Fusion`, `Lowering`, `STAGES`), `stages`
(the levels made in the caller's process), `hlo` (HLO text), `dump` (XLA's dump
of one compile, in this process or a child; `_child` is that process; `dump_flags` turns
XLA's dump on for one compile in this process), `fusions`
(fusion/kernel records, the llvm_ir and asm levels), `provenance`, `build`
(the steps), `text`, `api` (`lower`). Importing the package imports none of
them: each name loads its module on first use.
"""

import importlib

from tflab._api.lazy import lazy_exports

_EXPORTS = {
    "lower": "api",
    **dict.fromkeys(("Lowering", "Stage", "Fusion", "Piece", "STAGES", "GRAPH_STAGES", "GraphNode",
                     "OptimizerEffect"), "records"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.lowering.{part}"))
