"""The lowering ladder (`tflab lower`): every level from Python to machine code, tied to the user's lines.

Modules: `records` (`Stage`, `Piece`, `Fusion`, `Lowering`, `STAGES`), `stages`
(the levels made in the caller's process), `hlo` (HLO text), `dump` (XLA's dump
of one compile in a child process; `_child` is that process), `fusions`
(fusion/kernel records, the llvm_ir and asm levels), `provenance`, `build`
(the steps), `text`, `api` (`lower`).
"""

from tflab.lowering.api import lower
from tflab.lowering.records import STAGES, Fusion, Lowering, Piece, Stage

__all__ = ["lower", "Lowering", "Stage", "Fusion", "Piece", "STAGES"]
