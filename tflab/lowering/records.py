"""The records of `tflab.lower`: `Stage`, `Piece`, `Fusion`, `Lowering`."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from tflab.report.base import Report, config_field
from tflab.report.html.dispatch import renders
from tflab.report.html.lowering import lowering_fragment

__all__ = ["STAGES", "GRAPH_STAGES", "Stage", "Piece", "Fusion", "GraphNode", "OptimizerEffect", "PassChange",
           "Lowering"]

#: The levels, from the user's Python to machine code, in order.
STAGES = ("python", "autograph", "funcgraph", "tf_mlir", "stablehlo", "hlo", "optimized_hlo", "llvm_ir", "asm")
#: The levels of the graph path (``path="graph"``: a plain tf.function, no XLA), in order.
GRAPH_STAGES = ("python", "autograph", "funcgraph", "grappler", "partition", "profile")


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
        tf_op_names, tf_op_types: the TF ops whose work it computes, from XLA's ``op_name``/``op_type``
            metadata of its instructions that depend on the program's inputs
            (`tflab.lowering.fusions.fusion_credit`): a constant, and a broadcast, reshape or
            arithmetic of constants only, is left out, since XLA merges equal constants across
            layers and keeps one layer's op name on the merged one (every BatchNormalization's
            epsilon). A fusion that only materializes constants is credited with theirs.
        source_lines: the user's ``file.py:N``, from each FuncGraph op's traceback
            (TF, Keras and tflab frames skipped).
        layers: the Keras layers (their ``name``) whose calls created ``tf_op_names``, recorded while
            the function was traced (`tflab.lowering.layers`), never guessed from name scopes.
        llvm_ir_bytes, asm_bytes: size of its LLVM IR function(s) and machine code.
        bytes_read, bytes_written: its operands' and result's shapes, in bytes.
        constant_op_names: TF ops named only by its input-free instructions (constants it reads,
            possibly shared with other layers by XLA), apart from ``tf_op_names``.
        constant_layers: the layers named only by those constants ("shared constants from"), apart
            from ``layers``.
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
    constant_op_names: tuple[str, ...] = ()
    constant_layers: tuple[str, ...] = ()

    def __repr__(self) -> str:
        where = ", ".join(self.source_lines[:2]) or ", ".join(self.layers[:2]) or "no user line"
        return f"<Fusion {self.name} {self.kind}: {len(self.instructions)} instructions; {where}>"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(repr=False)
class GraphNode:
    """One node of the graph that ran (graph path): what Grappler and the runtime made of the user's ops.

    Attributes:
        name: the node's name in the post-optimization and partition graphs (a fused node keeps
            the name of the last op it replaced: ``Relu`` for MatMul+BiasAdd+Relu).
        grappler_op: its op type after Grappler (``_FusedMatMul``).
        op: its op type in the partition graph that ran (``_MklNativeFusedMatMul``), or
            ``grappler_op`` where no partition graph holds it.
        kernel: the kernel library that ran it: ``oneDNN`` (``_Mkl*`` ops, whose ``_kernel`` attr is
            ``MklNameChangeOp``/``MklLayoutDependentOp``) or ``TF (Eigen)``; ``-`` for a node that
            computes nothing (``_Arg``, ``Const``, ``NoOp``, ``_Retval``).
        device: the partition graph's device (``/job:localhost/.../device:CPU:0``).
        replaced: the FuncGraph op names it stands for (itself when Grappler kept it).
        replaced_types: their op types, in the same order.
        fused_ops: the ``fused_ops`` attr of a fused node (``("BiasAdd", "Relu")``), else ().
        source_lines: the user's ``file.py:N`` of the replaced ops.
        layers: the Keras layers (their ``name``) whose calls created the replaced ops, recorded
            while tracing (`tflab.lowering.layers`); () outside Keras.
        seconds: mean seconds per run (the profiler's events over the profiled runs), 0 if not seen.
        bytes: bytes of the tensors it reads and writes (static shapes of the FuncGraph; 0 unknown).
        flops: floating-point operations per run (2·M·N·K for a MatMul; one per element for an
            elementwise op), 0 where not counted.
        bandwidth_share: ``bytes / seconds`` over this machine's measured copy bandwidth
            (`custom_ops.bench.copy_roofline`), 0 where not measured.
        provenance_problem: "" when ``replaced`` holds the op type of each of ``fused_ops`` and the
            base op; else what is missing (a wrong mapping shows here).
    """

    name: str
    grappler_op: str
    op: str
    kernel: str
    device: str
    replaced: tuple[str, ...]
    replaced_types: tuple[str, ...]
    fused_ops: tuple[str, ...] = ()
    source_lines: tuple[str, ...] = ()
    seconds: float = 0.0
    bytes: int = 0
    flops: int = 0
    bandwidth_share: float = 0.0
    provenance_problem: str = ""
    layers: tuple[str, ...] = ()

    @property
    def rewritten(self) -> bool:
        """Whether Grappler or the runtime made this node of other ops: it stands for several FuncGraph
        ops (a fusion), or runs as another op type than the one it stands for (``MatMul`` run as
        ``_MklMatMul``). The one rule the summary line's count and the text's table both use."""
        return bool(self.replaced) and (len(self.replaced) > 1 or self.op != self.replaced_types[0]
                                        or self.grappler_op != self.replaced_types[0])

    def __repr__(self) -> str:
        return (f"<GraphNode {self.name} {self.op} ({self.kernel}): from "
                f"{', '.join(self.replaced_types) or '-'}; {', '.join(self.source_lines) or 'no user line'}>")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(repr=False)
class OptimizerEffect:
    """What one Grappler optimizer changed, measured by instantiating the function with it off.

    Attributes:
        name: the option of ``tf.config.optimizer.set_experimental_options`` (``remapping``).
        changed: whether the post-optimization graph differs with it off.
        removed: op type → count it removed (present with it off, absent with it on).
        added: op type → count it added.
        diff: unified diff of the node lines (``name = Op``) with it off → on.
        error: "" or why it could not be measured.
    """

    name: str
    changed: bool
    removed: dict = dataclasses.field(default_factory=dict)
    added: dict = dataclasses.field(default_factory=dict)
    diff: str = ""
    error: str = ""

    def __repr__(self) -> str:
        return f"<OptimizerEffect {self.name}: {'changed' if self.changed else 'no change'}>"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(repr=False)
class PassChange:
    """What one XLA HLO pass changed in one compile (``tflab lower --passes``; `tflab.lowering.passes`).

    Attributes:
        pipeline: the pass pipeline it ran in (``simplification``).
        name: the pass (``algsimp``, ``fusion``).
        changed: False for a pass XLA's dump shows ran next and changed nothing.
        removed, added: the HLO instruction lines it removed and added.
        source_lines: the user's ``file.py:N`` of the TF ops those instructions came from.
        tf_op_names: those TF ops (FuncGraph names).
    """

    pipeline: str
    name: str
    changed: bool
    removed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    source_lines: tuple[str, ...] = ()
    tf_op_names: tuple[str, ...] = ()

    def __repr__(self) -> str:
        what = f"-{len(self.removed)} +{len(self.added)}" if self.changed else "changed nothing"
        return f"<PassChange {self.pipeline}/{self.name}: {what}>"

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
        path: ``"xla"`` (the levels of `STAGES`) or ``"graph"`` (`GRAPH_STAGES`: what a plain
            tf.function ran after Grappler and the runtime's rewrites).
        nodes: graph path: one `GraphNode` per node of the graph that ran.
        optimizers: graph path: one `OptimizerEffect` per Grappler optimizer measured.
        profile: graph path: ``runs``, ``wall_seconds`` (those runs), ``node_seconds`` (the sum of
            every node's time over them), ``copy_gbps`` and ``copy_way`` (the roofline), ``bound``.
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
    path: str = "xla"
    nodes: tuple[GraphNode, ...] = ()
    optimizers: tuple[OptimizerEffect, ...] = ()
    profile: dict = dataclasses.field(default_factory=dict)
    passes: tuple[PassChange, ...] = ()

    DICT_PROPERTIES: ClassVar[tuple[str, ...]] = ()

    def stage(self, name: str) -> Stage:
        """The stage called ``name`` (one of `STAGES`, or of `GRAPH_STAGES` on the graph path).

        Raises:
            tflab.errors.UsageError: ``name`` is not a stage name (the message lists them); it is also a
                ``KeyError``, as before.
        """
        from tflab._api.argcheck import UnknownKey

        for s in self.stages:
            if s.name == name:
                return s
        names = ", ".join(s.name for s in self.stages) or ", ".join(STAGES)
        raise UnknownKey(f"Lowering.stage: no stage {name!r}; the stages are {names}")

    def provenance(self, key: str) -> dict[str, list[str]]:
        """What came from ``key`` at every level: stage name → its pieces (text).

        Args:
            key: a TF op type (``MatMul``; a control-flow type names its family:
                ``While`` also finds ``StatelessWhile``, likewise ``If`` and ``Case``) or op name (``while/mul``), an HLO
                instruction or fusion name (``multiply_reduce_fusion``), a
                user line ``"file.py:N"`` (a path or its base name), or on the graph path an op type
                after a rewrite (``_FusedMatMul``, ``_MklNativeFusedMatMul``) or ``"node:NAME"`` (one
                node of the graph that ran, by its own name).

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
        if self.path == "graph":
            rewritten = sum(1 for n in self.nodes if n.rewritten)  # the text's table lists the same nodes
            return (f"graph path: {len(self.nodes)} nodes ran, {rewritten} fused/rewritten; "
                    f"{sum(o.changed for o in self.optimizers)} optimizers changed the graph")
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
                "cause_fusion": self.cause_fusion, "path": self.path,
                "nodes": [n.to_dict() for n in self.nodes], "optimizers": [o.to_dict() for o in self.optimizers],
                "profile": dict(self.profile), "passes": [p.to_dict() for p in self.passes]}


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(Lowering)(lowering_fragment)
