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
import re

from tflab.lowering.hlo import Computation, parse_module, shape_bytes
from tflab.lowering.records import Fusion, Piece

__all__ = ["build_fusions", "llvm_stage", "asm_stage"]

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


def _inner(comp_names, by_name, seen=None) -> list:
    seen = set() if seen is None else seen
    out = []
    for name in comp_names:
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        for ins in by_name[name].instructions:
            out.append(ins)
            out.extend(_inner(ins.calls, by_name, seen))
    return out


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
    out = []
    for comp in comps:
        if comp.name not in _running_computations(comps):
            continue
        shapes = {ins.name: ins.shape for ins in comp.instructions}
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
            inner = _inner(ins.calls, by_name) if ins.opcode == "fusion" else []
            names, types = list(ins.op_names), [ins.op_type] if ins.op_type else []
            for i in inner:
                names.extend(i.op_names)
                if i.op_type:
                    types.append(i.op_type)
            names = list(dict.fromkeys(n for n in names if n and not n.startswith("XLA_")))
            sources = [line for n in names for line in op_source.get(n, ())]
            layers = [op_layer[n] for n in names if op_layer.get(n)]
            out.append(Fusion(
                name=ins.name, kind=kind, computation=comp.name,
                instructions=tuple(f"{i.name} = {i.opcode}" for i in (inner or [ins])),
                tf_op_names=tuple(names), tf_op_types=tuple(dict.fromkeys(types)),
                source_lines=tuple(dict.fromkeys(s for s in sources if s)),
                layers=tuple(dict.fromkeys(layers)),
                llvm_ir_bytes=int(_lookup(ir_bytes, ins.name) or 0), asm_bytes=int(_lookup(asm_bytes, ins.name) or 0),
                bytes_read=sum(shape_bytes(shapes.get(o, "")) for o in ins.operands),
                bytes_written=shape_bytes(ins.shape)))
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
