"""The records of `tflab.lower`: `Stage`, `Piece`, `Fusion`, `Lowering`."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from tflab.report.base import Report, config_field
from tflab.report.html.dispatch import renders
from tflab.report.html.lowering import lowering_fragment

__all__ = ["STAGES", "Stage", "Piece", "Fusion", "Lowering"]

#: The levels, from the user's Python to machine code, in order.
STAGES = ("python", "autograph", "funcgraph", "tf_mlir", "stablehlo", "hlo", "optimized_hlo", "llvm_ir", "asm")


@dataclasses.dataclass(frozen=True)
class Piece:
    """One piece of a stage's text that came from some TF ops or user lines.

    Attributes:
        text: the piece (a source line, an op line, an HLO instruction, a kernel).
        names: the FuncGraph op names it came from (full names: ``while/mul``).
        lines: the user's ``file.py:N`` it came from.
        key: its own name at its level (an HLO instruction, a kernel symbol), or "".
    """

    text: str
    names: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    key: str = ""


@dataclasses.dataclass(repr=False)
class Stage:
    """One level of the lowering.

    Attributes:
        name: one of `STAGES`.
        text: the level's whole text ("" when it was not reached or is empty; ``why`` says which).
        ops: op name → count, in that level's own names (``MatMul``, ``tf.MatMul``,
            ``stablehlo.dot_general``, ``dot``, ``fadd``, ``vfmadd213ps``).
        seconds: wall seconds to produce it.
        why: "" when produced, else why it is empty.
        note: how it was produced or measured.
        cpu_seconds: CPU seconds of this process (all its threads) while it was made; 0 for
            the levels read from XLA's dump (the compile's CPU is in the optimized_hlo note).
    """

    name: str
    text: str = ""
    ops: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    why: str = ""
    note: str = ""
    pieces: tuple[Piece, ...] = dataclasses.field(default=(), metadata={"dict": False})
    cpu_seconds: float = 0.0

    @property
    def bytes(self) -> int:
        """UTF-8 size of ``text``."""
        return len(self.text.encode())

    def __repr__(self) -> str:
        state = f"empty: {self.why}" if self.why else f"{sum(self.ops.values())} ops, {self.bytes} bytes"
        return f"<Stage {self.name}: {state}; {self.seconds:.3f} s>"

    def to_dict(self, with_text: bool = False) -> dict:
        d = {"name": self.name, "ops": dict(self.ops), "bytes": self.bytes, "seconds": round(self.seconds, 4),
             "cpu_seconds": round(self.cpu_seconds, 4),
             "why": self.why, "note": self.note}
        if with_text:
            d["text"] = self.text
        return d


@dataclasses.dataclass(repr=False)
class Fusion:
    """One fusion or kernel of the optimized HLO.

    Attributes:
        name: the HLO instruction (``multiply_reduce_fusion``).
        kind: the fusion kind (``kLoop``, ``kInput``, ``kOutput``), ``kernel`` for an
            unfused op XLA emitted code for, or ``library call`` for an op run by a
            runtime library (a CPU ``dot``/``convolution`` goes to Eigen/oneDNN).
        computation: the HLO computation it sits in.
        instructions: ``name = opcode`` of each instruction inside it (itself for an unfused op).
        tf_op_names, tf_op_types: from XLA's ``op_name``/``op_type`` metadata.
        source_lines: the user's ``file.py:N``, from each FuncGraph op's traceback
            (TF, Keras and tflab frames skipped).
        layers: the Keras layers (their ``name``) whose calls created its TF ops, recorded while
            the function was traced (`tflab.lowering.layers`), never guessed from name scopes.
        llvm_ir_bytes, asm_bytes: size of its LLVM IR function(s) and machine code.
        bytes_read, bytes_written: its operands' and result's shapes, in bytes.
    """

    name: str
    kind: str
    computation: str
    instructions: tuple[str, ...]
    tf_op_names: tuple[str, ...]
    tf_op_types: tuple[str, ...]
    source_lines: tuple[str, ...]
    layers: tuple[str, ...]
    llvm_ir_bytes: int
    asm_bytes: int
    bytes_read: int
    bytes_written: int

    def __repr__(self) -> str:
        where = ", ".join(self.source_lines[:2]) or ", ".join(self.layers[:2]) or "no user line"
        return f"<Fusion {self.name} {self.kind}: {len(self.instructions)} instructions; {where}>"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(repr=False)
class Lowering(Report):
    """Every level of one function's lowering under XLA, from Python to machine code.

    Attributes:
        function_name: the function lowered.
        stages: one `Stage` per name of `STAGES`, in order (empty ones say why).
        fusions: one `Fusion` per fusion or kernel of the optimized HLO.
        memory: XLA's buffer assignment: ``total_bytes``, ``temp_bytes``,
            ``allocations`` and the ``largest`` with their shapes ({} without it).
        stopped_at: the first stage that could not be produced, or "".
        why: why it stopped (names the op type and quotes TF), or "".
        config: `tflab.runtime_config()` when it was made.
        cause: the `tflab.attribution.Cause` of a difference between eager and
            XLA linked to this lowering (`tflab.lowering.cause.link_cause`,
            ``tflab lower --cause``), or None.
        cause_fusion: the fusion of ``fusions`` where that cause acted, or "".
    """

    function_name: str
    stages: tuple[Stage, ...]
    fusions: tuple[Fusion, ...] = ()
    memory: dict = dataclasses.field(default_factory=dict)
    stopped_at: str = ""
    why: str = ""
    config: dict = config_field()
    _index: Any = dataclasses.field(default=None, repr=False, compare=False)
    cause: Any = None
    cause_fusion: str = ""

    DICT_PROPERTIES: ClassVar[tuple[str, ...]] = ()

    def stage(self, name: str) -> Stage:
        """The stage called ``name`` (one of `STAGES`).

        Raises:
            tflab.errors.UsageError: ``name`` is not a stage name (the message lists them); it is also a
                ``KeyError``, as before.
        """
        from tflab._api.argcheck import UnknownKey

        for s in self.stages:
            if s.name == name:
                return s
        raise UnknownKey(f"Lowering.stage: no stage {name!r}; the stages are {', '.join(STAGES)}")

    def provenance(self, key: str) -> dict[str, list[str]]:
        """What came from ``key`` at every level: stage name → its pieces (text).

        Args:
            key: a TF op type (``MatMul``; a control-flow type names its family:
                ``While`` also finds ``StatelessWhile``, likewise ``If`` and ``Case``) or op name (``while/mul``), an HLO
                instruction or fusion name (``multiply_reduce_fusion``), or a
                user line ``"file.py:N"`` (a path or its base name).

        Returns:
            ``{stage: [piece, …]}`` for every stage with a piece from ``key``, plus
            ``"source"``: the user lines (``file.py:N``) it came from. Empty for a
            ``file.py:N`` that made no op.

        Raises:
            tflab.errors.UsageError: ``key`` names nothing in this lowering.
        """
        from tflab._api.argcheck import check_str

        from tflab.lowering.provenance import provenance

        return provenance(self, check_str(key, "key", "Lowering.provenance", example="'MatMul' or 'f.py:7'"))

    def _resolve_key(self, key: str) -> tuple[set, set, set]:
        """(FuncGraph op names, user lines, HLO names) ``key`` names (`tflab.lowering.provenance.resolve_key`)."""
        from tflab.lowering.provenance import resolve_key

        return resolve_key(self, key)

    def summary_line(self) -> str:
        reached = [s.name for s in self.stages if not s.why]
        tail = f"stopped at {self.stopped_at}" if self.stopped_at else f"{len(self.fusions)} fusions/kernels"
        return f"{len(reached)}/{len(self.stages)} stages; {tail}"

    def to_text(self) -> str:
        from tflab.lowering.text import lowering_text

        return lowering_text(self)

    def to_dict(self) -> dict:
        return {"function_name": self.function_name, "stages": [s.to_dict() for s in self.stages],
                "fusions": [f.to_dict() for f in self.fusions], "memory": self.memory,
                "stopped_at": self.stopped_at, "why": self.why, "config": self.config,
                "cause": self.cause.to_dict() if self.cause is not None else None,
                "cause_fusion": self.cause_fusion}


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(Lowering)(lowering_fragment)
