"""`provenance`: what came from one key (a TF op type or name, an HLO name, ``file.py:N``) at every level.

A key is first turned into the FuncGraph ops it names (their full names) and
the user lines those ops came from; each level's pieces are then those made
from one of the ops (their ``names``), from one of the lines (python and
autograph), or that are the named HLO instruction or kernel itself.
"""

from __future__ import annotations

import os
import re

from tflab.errors import UsageError

__all__ = ["provenance", "resolve_key", "op_types"]

_LINE_KEY_RE = re.compile(r"^(.+\.py):(\d+)$")

# TF writes a control-flow op as its stateless twin when the body or branches have no stateful op
# (while_v2/cond_v2 pick ``StatelessWhile``/``StatelessIf``/``StatelessCase``): one family per key.
_FAMILIES = {name: (name, f"Stateless{name}") for name in ("While", "If", "Case")}
_FAMILIES.update({f"Stateless{name}": pair for name, pair in list(_FAMILIES.items())})


def op_types(key: str) -> tuple[str, ...]:
    """The TF op types a type key names: itself, and its stateful/stateless twin for While, If and Case."""
    return _FAMILIES.get(key, (key,))


def _line_matches(key_path: str, key_line: int, rec) -> bool:
    if not rec.path or rec.line != key_line:
        return False
    if os.sep in key_path:
        return os.path.abspath(key_path) == rec.path or rec.path.endswith(os.sep + key_path.lstrip(os.sep))
    return os.path.basename(rec.path) == key_path


def resolve_key(lowering, key: str) -> tuple[set[str], set[str], set[str]]:
    """(FuncGraph op names, user lines ``file.py:N``, HLO instruction/kernel names) that ``key`` names."""
    index = lowering._index or []
    fusions = {f.name: f for f in lowering.fusions}
    m = _LINE_KEY_RE.match(key.strip())
    if m:
        path, line = m.group(1), int(m.group(2))
        ops = {r.name for r in index if _line_matches(path, line, r)}
        base = f"{os.path.basename(path)}:{line}"
        return ops, {base}, {f.name for f in lowering.fusions if base in f.source_lines}
    hlo_keys: set[str] = set()
    if key.startswith("node:") and getattr(lowering, "nodes", ()):  # graph path: one node, by its own name
        ops = {n for node in lowering.nodes if node.name == key[5:] for n in node.replaced}
        return ops, {r.source for r in index if r.name in ops and r.source}, set()
    types = op_types(key)
    ops = {r.name for r in index if r.type in types}
    if not ops:
        ops = {r.name for r in index if r.name == key or r.name.startswith(key + "/")}
    if not ops and getattr(lowering, "nodes", ()):  # graph path: a node's name or its op after a rewrite
        for node in lowering.nodes:
            if key in (node.name, node.op, node.grappler_op):
                ops |= set(node.replaced)
    if not ops and key in fusions:
        ops = set(fusions[key].tf_op_names)
        hlo_keys = {key} | {i.split(" = ")[0] for i in fusions[key].instructions}
    if not ops and lowering.path == "xla":
        for stage in ("optimized_hlo", "hlo"):
            for piece in lowering.stage(stage).pieces:
                if piece.key == key:
                    ops |= set(piece.names)
                    hlo_keys.add(key)
    if not ops and not hlo_keys:
        types = sorted({r.type for r in index})[:6]
        sample = next((f.name for f in lowering.fusions), "")
        raise UsageError(f"provenance({key!r}): no TF op type or name, HLO instruction or fusion, or "
                         f"file.py:N of this lowering is called that; try an op type ({', '.join(types)}), "
                         + (f"a fusion ({sample}), " if sample else "") + "or a line such as f.py:12")
    lines = {r.source for r in index if r.name in ops and r.source}
    hlo_keys |= {f.name for f in lowering.fusions if ops & set(f.tf_op_names)}
    return ops, lines, hlo_keys


def provenance(lowering, key: str) -> dict[str, list[str]]:
    """See `tflab.lowering.records.Lowering.provenance`."""
    ops, lines, hlo_keys = resolve_key(lowering, key)
    out: dict[str, list[str]] = {}
    if not ops and not hlo_keys:
        return out  # a user line that made no op
    for stage in lowering.stages:
        if stage.name in ("python", "autograph"):
            hits = [p.text for p in stage.pieces if lines & set(p.lines)]
        elif stage.name in ("llvm_ir", "asm"):
            hits = [p.text for p in stage.pieces if p.key in hlo_keys]
        else:
            hits = [p.text for p in stage.pieces if ops & set(p.names) or (p.key and p.key in hlo_keys
                                                                            and stage.name == "optimized_hlo")]
        if hits:
            out[stage.name] = hits
    if lines:
        out["source"] = sorted(lines)
    return out
