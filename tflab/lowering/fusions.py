"""The fusions and kernels of the optimized HLO, and the llvm_ir and asm levels cut per kernel.

A record is made for every instruction of a computation that runs (the entry,
a while's condition and body, a ``call``'s or ``conditional``'s computations;
not the computations a fusion or a reduce applies) that is:

* a ``fusion`` (its ``kind=kLoop|kInput|kOutput``);
* an unfused op XLA emitted code for (its own ``…_kernel_module`` in the dump):
  kind ``kernel``;
* a ``dot``, ``convolution``, ``custom-call`` or ``fft`` without such code: kind
  ``library call`` (XLA's CPU runtime calls Eigen or oneDNN for it).

XLA's CPU backend names each kernel's LLVM function and object symbol after
the HLO instruction, which is how a kernel's LLVM IR and machine code are
found. The bytes read and written are the operands' and the result's shapes.
"""

from __future__ import annotations

import collections
import dataclasses
import re

from tflab.lowering.hlo import Computation, parse_module, shape_bytes
from tflab.lowering.records import Fusion, Piece

__all__ = ["build_fusions", "llvm_stage", "asm_stage", "fusion_credit", "input_free", "Credit"]

_LIBRARY_OPS = {"dot", "convolution", "custom-call", "fft", "triangular-solve", "cholesky"}
_APPLIED_BY = {"calls", "to_apply"}  # computations a fusion or reduce applies: not run on their own


def _variants(name: str) -> tuple[str, ...]:
    base = (name, name.replace(".", "_"), name.replace("-", "_"), name.replace(".", "_").replace("-", "_"))
    return base + tuple(b + "_kernel" for b in base)  # a small `call` is emitted whole as call_kernel


def _lookup(table: dict, name: str):
    for v in _variants(name):
        if v in table:
            return table[v]
    return None


def _running_computations(comps: list[Computation]) -> set[str]:
    by_name = {c.name: c for c in comps}
    entry = next((c for c in comps if c.entry), comps[-1] if comps else None)
    if entry is None:
        return set()
    running, todo = set(), [entry.name]
    while todo:
        name = todo.pop()
        if name in running or name not in by_name:
            continue
        running.add(name)
        for ins in by_name[name].instructions:
            if ins.opcode in ("while", "call", "conditional", "async-start", "async-done"):
                todo.extend(ins.calls)
    return running


_PARAM_RE = re.compile(r"\bparameter\((\d+)\)")


def input_free(comp: Computation, by_name: dict, params: dict | None = None) -> set[str]:
    """Names of the instructions of ``comp`` whose value depends on no input of the program.

    A ``constant`` or ``iota`` is input-free; so is any other instruction whose
    operands all are (a ``broadcast``, ``reshape``, ``bitcast`` or ``copy`` of a
    constant, or arithmetic on constants), found by walking operands, not by
    opcode. A ``parameter`` is input-free when ``params`` says the fusion's
    operand in that position is (a constant XLA left outside the fusion); a
    random number (``rng*``) is never input-free. XLA's common-subexpression
    elimination merges equal input-free values across layers and keeps one
    op's ``op_name`` on the result, so their metadata does not say whose work a
    fusion does.

    Args:
        comp: the computation (the entry, or a fused computation).
        by_name: every computation by name (unused here; kept for nested walks).
        params: parameter number → whether the caller's operand there is input-free;
            None for a computation whose parameters are program inputs or loop state.

    Returns:
        The input-free instruction names of ``comp``.
    """
    ins_by_name = {i.name: i for i in comp.instructions}
    memo: dict[str, bool] = {}

    def free(name: str) -> bool:
        if name in memo:
            return memo[name]
        memo[name] = False  # a cycle (none in valid HLO) is not input-free
        ins = ins_by_name.get(name)
        if ins is None:
            value = False
        elif ins.opcode == "parameter":
            m = _PARAM_RE.search(ins.line)
            value = bool(params and m and params.get(int(m.group(1))))
        elif ins.opcode.startswith("rng"):
            value = False
        elif not ins.operands:
            value = ins.opcode in ("constant", "iota")
        else:
            value = all(free(o) for o in ins.operands)
        memo[name] = value
        return value

    return {i.name for i in comp.instructions if free(i.name)}


def _fused(ins, free_outer: set[str], by_name: dict, seen: set) -> list[tuple[object, bool]]:
    """(instruction, input-free) for every instruction a fusion computes, nested fusions walked through."""
    params = {n: o in free_outer for n, o in enumerate(ins.operands)}
    out = []
    for name in ins.calls:
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        comp = by_name[name]
        free = input_free(comp, by_name, params if ins.opcode == "fusion" else None)
        for inner in comp.instructions:
            out.append((inner, inner.name in free))
            if inner.calls:
                out.extend(_fused(inner, free, by_name, seen))
    return out


@dataclasses.dataclass(frozen=True)
class Credit:
    """Whose work one fusion or kernel computes, from its instructions' XLA metadata.

    Attributes:
        op_names: the TF ops (full FuncGraph names) of its instructions that depend on
            the program's inputs; when it has none (it only materializes constants), those
            constants' ops, as that is its whole work.
        op_types: their TF op types.
        layers: the Keras layers that created ``op_names``.
        constant_op_names: ops named only by its input-free instructions (constants XLA
            may have merged across layers), not in ``op_names``.
        constant_layers: layers named only there, not in ``layers``.
    """

    op_names: tuple[str, ...]
    op_types: tuple[str, ...]
    layers: tuple[str, ...]
    constant_op_names: tuple[str, ...]
    constant_layers: tuple[str, ...]


def _names(instrs) -> list[str]:
    return list(dict.fromkeys(n for i in instrs for n in i.op_names if n and not n.startswith("XLA_")))


def fusion_credit(ins, free_outer: set[str], by_name: dict, op_layer: dict) -> Credit:
    """The one credit of a fusion (or unfused kernel) ``ins``: what its own work computes, not its constants.

    Every report of a fusion's ops and layers (the fusion table, ``--json``, the
    largest-fusion line, the page's highlighting through ``Fusion.tf_op_names``)
    reads this credit.

    Args:
        ins: the fusion or kernel instruction (`tflab.lowering.hlo.Instruction`).
        free_outer: `input_free` of the computation ``ins`` sits in.
        by_name: every computation of the module by name.
        op_layer: FuncGraph op name → the Keras layer whose call created it.

    Returns:
        A `Credit`.
    """
    pairs = _fused(ins, free_outer, by_name, set()) if ins.opcode == "fusion" else [(ins, ins.name in free_outer)]
    work = [i for i, free in pairs if not free]
    constant = [i for i, free in pairs if free]
    names = _names(work) or _names(constant) or _names([ins])
    const_names = [n for n in _names(constant) if n not in names]
    credited = {n for n in names}
    types = [i.op_type for i, free in pairs if i.op_type and set(_names([i])) & credited] or (
        [ins.op_type] if ins.op_type else [])
    layers = list(dict.fromkeys(op_layer[n] for n in names if op_layer.get(n)))
    const_layers = [x for x in dict.fromkeys(op_layer[n] for n in const_names if op_layer.get(n)) if x not in layers]
    return Credit(tuple(names), tuple(dict.fromkeys(types)), tuple(layers), tuple(const_names), tuple(const_layers))


def build_fusions(text: str, ir_bytes: dict, asm_bytes: dict, op_source: dict, op_layer: dict,
                  call_levels: int = 0) -> list[Fusion]:
    """One `Fusion` per fusion or kernel of optimized HLO ``text``.

    Args:
        text: the optimized HLO.
        ir_bytes, asm_bytes: kernel name → bytes of its LLVM IR / machine code.
        op_source: FuncGraph op name → its user lines (``file.py:N``; empty for none).
        op_layer: FuncGraph op name → the Keras layer whose call created it
            (`tflab.lowering.layers.record_layer_calls`; ops no layer made are absent).
        call_levels: call ops in front of every op name (`tflab.lowering.hlo.clean_op_name`).
    """
    comps = parse_module(text, call_levels)
    by_name = {c.name: c for c in comps}
    running = _running_computations(comps)
    out = []
    for comp in comps:
        if comp.name not in running:
            continue
        shapes = {ins.name: ins.shape for ins in comp.instructions}
        free_here = input_free(comp, by_name)
        for ins in comp.instructions:
            has_code = _lookup(ir_bytes, ins.name) is not None or _lookup(asm_bytes, ins.name) is not None
            if ins.opcode == "fusion":
                kind = ins.kind or "fusion"
            elif has_code:
                kind = "kernel"
            elif ins.opcode in _LIBRARY_OPS:
                kind = "library call"
            else:
                continue
            inner = [i for i, _ in _fused(ins, free_here, by_name, set())] if ins.opcode == "fusion" else []
            credit = fusion_credit(ins, free_here, by_name, op_layer)
            sources = [line for n in credit.op_names for line in op_source.get(n, ())]
            out.append(Fusion(
                name=ins.name, kind=kind, computation=comp.name,
                instructions=tuple(f"{i.name} = {i.opcode}" for i in (inner or [ins])),
                tf_op_names=credit.op_names, tf_op_types=credit.op_types,
                source_lines=tuple(dict.fromkeys(s for s in sources if s)),
                layers=credit.layers,
                llvm_ir_bytes=int(_lookup(ir_bytes, ins.name) or 0), asm_bytes=int(_lookup(asm_bytes, ins.name) or 0),
                bytes_read=sum(shape_bytes(shapes.get(o, "")) for o in ins.operands),
                bytes_written=shape_bytes(ins.shape),
                constant_op_names=credit.constant_op_names, constant_layers=credit.constant_layers))
    return out


_LL_INSTR_RE = re.compile(r"^\s+(?:%[\w.\-\"]+ = )?([a-z][\w.]*)\b", re.M)
_ASM_INSTR_RE = re.compile(r"^\s+[0-9a-f]+:\s+([a-z][\w.]*)", re.M)


def _pieces(texts: dict, fusions: list[Fusion], unit: str) -> list[Piece]:
    by_kernel = {}
    for f in fusions:
        for v in _variants(f.name):
            by_kernel[v] = f
    pieces = []
    for name, body in texts.items():
        f = by_kernel.get(name)
        pieces.append(Piece(f"{name}: {len(body.encode())} bytes of {unit}", names=f.tf_op_names if f else (),
                            lines=f.source_lines if f else (), key=f.name if f else name))
    return pieces


def llvm_stage(text: str, kernel_texts: dict, fusions: list[Fusion]) -> tuple[dict, list[Piece]]:
    """LLVM IR: instruction opcodes counted (``fadd``, ``load``, ``br``, …); one piece per kernel function."""
    ops = collections.Counter(m for m in _LL_INSTR_RE.findall(text) if m not in ("define", "declare", "attributes"))
    return dict(ops.most_common()), _pieces(kernel_texts, fusions, "LLVM IR")


def asm_stage(text: str, kernel_texts: dict, fusions: list[Fusion]) -> tuple[dict, list[Piece]]:
    """Machine code: mnemonics counted (``vfmadd213ps``, ``mov``, …); one piece per kernel symbol."""
    ops = collections.Counter(_ASM_INSTR_RE.findall(text))
    return dict(ops.most_common()), _pieces(kernel_texts, fusions, "disassembly")
