"""HLO text as XLA prints it (``HloModule::ToString``): computations, instructions, shapes, metadata.

One instruction line reads::

    ROOT %mul.0 = f32[2,4]{1,0} multiply(%a, %b), metadata={op_type="Mul" op_name="while/mul" …}

A shape is an array shape (``f32[2,4]{1,0}``, ``pred[]``) or a tuple of them
(``(f32[2,4]{1,0}, s32[])``); `shape_bytes` sizes either from the element
type (``xla_data.proto``'s PrimitiveType widths). A computation starts with
``%name (params) -> shape {`` (``ENTRY %name …`` for the entry) and ends with
``}``; a fusion instruction names the computation it runs with
``calls=%fused_computation``, a while with ``condition=%c, body=%b``.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Instruction", "Computation", "parse_module", "shape_bytes", "opcode_counts", "clean_op_name"]

# Bits per element of each XLA PrimitiveType (xla/xla_data.proto).
_BITS = {"pred": 8, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16,
         "bf16": 16, "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64, "c64": 64,
         "c128": 128, "token": 0}
_ARRAY_RE = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,\s]*)\]")
_HEADER_RE = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR_RE = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_META_RE = re.compile(r'(op_type|op_name)="((?:[^"\\]|\\.)*)"')
_CALLS_RE = re.compile(r"\b(?:calls|to_apply|condition|body|true_computation|false_computation|"
                       r"branch_computations)=\{?%?([\w.\-]+(?:,\s*%[\w.\-]+)*)\}?")
_OPERAND_RE = re.compile(r"%([\w.\-]+)")

# The child process (`tflab.lowering.dump`) compiles the user's program through a SavedModel
# signature called from a jit tf.function: two call levels that tf2xla prefixes to every op_name,
# ``StatefulPartitionedCall`` when the program reads variables, ``PartitionedCall`` when it does not.
_CALL_LEVEL_RE = re.compile(r"^(?:Stateful)?PartitionedCall/")


@dataclasses.dataclass
class Instruction:
    """One HLO instruction: its name, shape text, opcode, operand names, metadata and the line."""

    name: str
    shape: str
    opcode: str
    operands: tuple[str, ...]
    op_names: tuple[str, ...]
    op_type: str
    calls: tuple[str, ...]
    attrs: str
    line: str
    line_no: int
    computation: str = ""
    root: bool = False

    @property
    def kind(self) -> str:
        m = re.search(r"\bkind=(k\w+)", self.attrs)
        return m.group(1) if m else ""


@dataclasses.dataclass
class Computation:
    name: str
    entry: bool
    instructions: list[Instruction]
    line_no: int


def clean_op_name(name: str, call_levels: int = 0) -> str:
    """A TF op name from XLA metadata without the ``call_levels`` call ops in front (the child's: 2)."""
    for _ in range(call_levels):
        m = _CALL_LEVEL_RE.match(name)
        if m is None:
            return name
        name = name[m.end():]
    return name


def _split_shape(rest: str) -> tuple[str, str]:
    """``"(f32[2], s32[]) tuple(%a, %b)"`` → the shape and what follows it."""
    rest = rest.lstrip()
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return rest[:i + 1], rest[i + 1:].lstrip()
    head, _, tail = rest.partition(" ")
    return head, tail


def _split_call(rest: str) -> tuple[str, str, str]:
    """``"multiply(%a, %b), attrs"`` → opcode, operand text, attribute text (parentheses balanced)."""
    m = re.match(r"([\w\-]+)\(", rest)
    if not m:
        return rest.split(" ", 1)[0], "", ""
    depth, start = 0, m.end() - 1
    for i in range(start, len(rest)):
        depth += rest[i] == "("
        depth -= rest[i] == ")"
        if depth == 0:
            return m.group(1), rest[start + 1:i], rest[i + 1:].lstrip(", ")
    return m.group(1), rest[start + 1:], ""


def parse_module(text: str, call_levels: int = 0) -> list[Computation]:
    """Every computation of an HLO module's text, with its instructions in order.

    ``call_levels``: how many call ops the compile added in front of every op name
    (`clean_op_name`; 2 for the child's SavedModel signature, 0 for this process).
    """
    comps: list[Computation] = []
    current = None
    for no, line in enumerate(text.splitlines(), 1):
        if current is None:
            m = _HEADER_RE.match(line)
            if m and not line.startswith("HloModule"):
                current = Computation(m.group(2), bool(m.group(1)), [], no)
            continue
        if line.strip() == "}":
            comps.append(current)
            current = None
            continue
        m = _INSTR_RE.match(line)
        if not m:
            continue
        shape, rest = _split_shape(m.group(3))
        opcode, operand_text, attrs = _split_call(rest)
        meta = dict(_META_RE.findall(attrs))
        names = tuple(clean_op_name(n, call_levels) for n in meta.get("op_name", "").split(";") if n)
        calls = tuple(c.strip().lstrip("%") for g in _CALLS_RE.findall(attrs) for c in g.split(","))
        current.instructions.append(Instruction(
            name=m.group(2), shape=shape, opcode=opcode, operands=tuple(_OPERAND_RE.findall(operand_text)),
            op_names=names, op_type=meta.get("op_type", ""), calls=calls, attrs=attrs, line=line.strip(),
            line_no=no, computation=current.name, root=bool(m.group(1))))
    return comps


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape's data (a tuple's elements summed; the layout ``{1,0}`` ignored)."""
    total = 0
    for etype, dims in _ARRAY_RE.findall(shape):
        bits = _BITS.get(etype, 8 if etype.startswith("f8") else None)
        if bits is None:
            continue
        n = 1
        for d in (d.strip() for d in dims.split(",")):
            if d:
                n *= int(d)
        total += (n * bits + 7) // 8
    return total


def opcode_counts(comps: list[Computation]) -> dict[str, int]:
    """Opcode → number of instructions, over every computation (fused ones included)."""
    out: dict[str, int] = {}
    for c in comps:
        for ins in c.instructions:
            out[ins.opcode] = out.get(ins.opcode, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))
