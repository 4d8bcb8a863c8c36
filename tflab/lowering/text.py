"""The text report of a `Lowering`: one line per level, the fusion table, memory, where it stopped."""

from __future__ import annotations

__all__ = ["lowering_text", "human_bytes", "split_shapes", "shapes_text", "cut_outside_shapes", "layer_credit", "graph_lines", "top_nodes_line", "effect_text", "pass_lines"]


def layer_credit(fusion) -> str:
    """A fusion's layers as every report shows them: the ones whose work it computes, then the layers
    whose constants only it reads ("shared constants from: …"), or "-"."""
    text = ", ".join(fusion.layers) or "-"
    shared = getattr(fusion, "constant_layers", ())
    return text + (f" (shared constants from: {', '.join(shared)})" if shared else "")


def human_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def split_shapes(text: str) -> list[str]:
    """The whole shapes of an HLO shape text, split at its top-level commas.

    A tuple shape ``(f32[2,8]{1,0}, s8[3])`` gives its elements, a list of shapes joined by ``", "``
    gives each one; the commas inside ``[…]``, ``{…}`` and ``(…)`` belong to a shape and never split it.
    """
    text = text.strip()
    if text.startswith("(") and text.endswith(")") and _depth_closes_at_end(text):
        text = text[1:-1]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _depth_closes_at_end(text: str) -> bool:
    """Whether the ``(`` at 0 closes at the last character (a tuple shape, not ``(a), (b)``)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0:
            return i == len(text) - 1
    return False


def shapes_text(text: str, limit: int = 60) -> str:
    """An HLO shape text for one line, never cut inside a shape.

    Whole shapes (`split_shapes`) are kept while they fit in ``limit`` characters; the ones left
    out are counted ("… +3 more shapes"). The first shape is always shown whole, however long.
    """
    shapes = split_shapes(text)
    if len(text) <= limit or len(shapes) <= 1:
        return text
    kept = [shapes[0]]
    for s in shapes[1:]:
        if len(", ".join(kept + [s])) > limit:
            break
        kept.append(s)
    more = len(shapes) - len(kept)
    tuple_shape = text.strip().startswith("(") and _depth_closes_at_end(text.strip())
    body = ", ".join(kept) + (f", … +{more} more shape{'s' if more > 1 else ''}" if more else "")
    return f"({body})" if tuple_shape else body


def cut_outside_shapes(text: str, limit: int = 160) -> str:
    """An HLO line cut to about ``limit`` characters, never inside ``[…]``, ``{…}`` or ``(…)``.

    The cut falls at the last space or comma outside any bracket before ``limit`` (or the first one
    after it), and is marked " …"; a line that fits is returned whole.
    """
    if len(text) <= limit:
        return text
    depth, before, after = 0, None, None
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch in " ," and depth == 0 and i > 0:
            if i <= limit:
                before = i
            else:
                after = i
                break
    cut = before if before is not None else after
    return text if cut is None else text[:cut].rstrip(" ,") + " …"


def _top_ops(ops: dict, k: int = 4) -> str:
    items = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    more = len(ops) - len(items)
    return ", ".join(f"{n}×{c}" for n, c in items) + (f", … {more} more" if more > 0 else "")


def lowering_text(low, max_fusions: int = 40) -> str:
    lines = [f"lower {low.function_name}: {low.summary_line()}"]
    width = max(len(s) for s in (st.name for st in low.stages))
    for s in low.stages:
        if s.why and s.name == low.stopped_at:
            lines.append(f"  {s.name:<{width}}  -- lowering stopped here (below)")
        elif s.why:
            lines.append(f"  {s.name:<{width}}  -- {s.why}")
        else:
            lines.append(f"  {s.name:<{width}}  {sum(s.ops.values()):>6} ops  {human_bytes(s.bytes):>10}  "
                         f"{s.seconds:7.3f} s  {_top_ops(s.ops)}")
    if low.stopped_at:
        lines.append(f"stopped at {low.stopped_at}: {low.why}")
    if getattr(low, "path", "xla") == "graph":
        lines += graph_lines(low)
    if getattr(low, "passes", ()):
        lines += pass_lines(low.passes)
    if low.fusions:
        lines.append(f"fusions and kernels ({len(low.fusions)}), largest traffic first:")
        lines.append("  name | kind | instr | read/written | LLVM IR / asm | user lines | layers | TF ops")
        order = sorted(low.fusions, key=lambda f: -(f.bytes_read + f.bytes_written))
        cause_at = getattr(low, "cause_fusion", "")
        if cause_at:  # the linked cause's fusion first, marked
            order = sorted(order, key=lambda f: f.name != cause_at)
        for f in order[:max_fusions]:
            mark = " <- cause" if f.name == cause_at else ""
            lines.append(f"  {f.name}{mark} | {f.kind} | {len(f.instructions)} | {human_bytes(f.bytes_read)}/"
                         f"{human_bytes(f.bytes_written)} | {human_bytes(f.llvm_ir_bytes)} / {human_bytes(f.asm_bytes)} | "
                         f"{', '.join(f.source_lines) or '-'} | {layer_credit(f)} | "
                         f"{', '.join(f.tf_op_types[:4])}"
                         + (f" … +{len(f.tf_op_types) - 4} more" if len(f.tf_op_types) > 4 else ""))
        if len(order) > max_fusions:
            lines.append(f"  … {len(order) - max_fusions} more (--json lists every one)")
    cause = getattr(low, "cause", None)
    if cause is not None:
        where = f"at fusion {low.cause_fusion!r}" if low.cause_fusion else "at no fusion of this lowering"
        lines.append(f"{cause.runs} {where}: {cause.line_text}")
        lines += ["  " + ln for ln in cause.to_text().splitlines()[1:]]
    if low.memory:
        m = low.memory
        big = m.get("largest", [])[:3]
        lines.append(f"memory (XLA buffer assignment): {human_bytes(m['total_bytes'])} in {m['allocations']} "
                     f"allocations, temp {human_bytes(m['temp_bytes'])}; largest: "
                     + "; ".join(f"{human_bytes(a['bytes'])} {a['kind']} {shapes_text(a['shape'])}" for a in big))
    return "\n".join(lines)


def top_nodes_line(low, k: int = 3) -> str:
    """The ``k`` nodes that took longest per run, each with its op, kernel library and user line."""
    timed = sorted((n for n in low.nodes if n.seconds > 0), key=lambda n: -n.seconds)[:k]
    if not timed:
        return "no node was timed"
    def where(n) -> str:
        parts = list(n.source_lines[:2]) + ([f"layer {', '.join(n.layers[:2])}"] if n.layers else [])
        return ", ".join(parts) or "no user line"

    return "; ".join(f"{n.op} [{n.kernel}] {n.seconds * 1e6:.1f} us ({where(n)})" for n in timed)


def graph_lines(low, max_nodes: int = 15) -> list[str]:
    """The graph path's report: the rewritten nodes, the slowest nodes, each optimizer's effect, the bound."""
    out = []
    rewritten = [n for n in low.nodes if n.rewritten]  # `GraphNode.rewritten`: the summary line counts the same
    if rewritten:
        out.append(f"rewritten nodes ({len(rewritten)}): node | after Grappler | ran as [kernel] | replaced | lines")
        for n in rewritten[:max_nodes]:
            bad = f" | !! {n.provenance_problem}" if n.provenance_problem else ""
            out.append(f"  {n.name} | {n.grappler_op} | {n.op} [{n.kernel}] | {', '.join(n.replaced_types)} | "
                       f"{', '.join(n.source_lines) or '-'}{bad}")
    if low.profile:
        p = low.profile
        out.append(f"slowest nodes over {p['runs']} runs: {top_nodes_line(low)}")
        out.append(f"profile: {p['bound']} ({'within' if p['within_bound'] else 'OUTSIDE'} the bound); "
                   f"copy roofline {p['copy_gbps']:.1f} GB/s ({p['copy_way']})")
    if low.optimizers:
        out.append("Grappler optimizers (each turned off alone):")
        out.append(effect_text(list(low.optimizers)))
    return out


def effect_text(effects: list[OptimizerEffect]) -> str:
    """One line per optimizer: what it removed and added, or that it changed nothing."""
    rows = []
    for e in effects:
        if e.error:
            rows.append(f"  {e.name}: not measured ({e.error})")
        elif not e.changed:
            rows.append(f"  {e.name}: changed nothing")
        else:
            fmt = lambda d: ", ".join(f"{k}×{v}" for k, v in sorted(d.items())) or "-"  # noqa: E731
            rows.append(f"  {e.name}: removed {fmt(e.removed)}; added {fmt(e.added)}")
    return "\n".join(rows)


def pass_lines(passes, max_lines: int = 3) -> list[str]:
    """XLA pass by pass: each pass that changed the module (its diff, first lines, and the user's lines), then
    the passes that changed nothing."""
    changed = [p for p in passes if p.changed]
    out = [f"XLA passes (one compile's dump, --xla_dump_hlo_pass_re=.*): {len(changed)} changed the module"]
    for p in changed:
        if not p.removed and not p.added:
            out.append(f"  {p.pipeline}/{p.name}: changed the module outside its instructions (the entry "
                       "layout, the schedule or the module's config)")
            continue
        out.append(f"  {p.pipeline}/{p.name}: -{len(p.removed)} +{len(p.added)} instructions; "
                   f"lines {', '.join(p.source_lines) or '-'}")
        out += [f"    - {cut_outside_shapes(ln)}" for ln in p.removed[:max_lines]]  # shapes never cut
        out += [f"    + {cut_outside_shapes(ln)}" for ln in p.added[:max_lines]]
    same = [f"{p.pipeline}/{p.name}" for p in passes if not p.changed]
    if same:
        out.append(f"changed nothing ({len(same)}; named by the dump as the next pass, never dumped after): "
                   + ", ".join(same))
    return out
