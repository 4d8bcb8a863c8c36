"""XLA pass by pass (``tflab lower --passes``): what each HLO pass changed, with the user's lines.

One compile's dump with ``--xla_dump_hlo_pass_re=.*`` holds the module each
time a pass changed it (``xla/hlo/pass/hlo_pass_pipeline.cc``): a file named
``NNNN.PIPELINE.after_PASS.before_NEXT.txt`` is the module after ``PASS``
changed it, ``NEXT`` being the pass that runs next. Each such file is compared
with the module dumped before it (the first with ``before_optimizations``):
the instructions it removed and added, each tied through its ``op_name``
metadata to the FuncGraph ops and so to the user's lines. A pass named only as
``before_NEXT`` in a pipeline, never as ``after_``, ran and changed nothing
there; XLA's dump does not name the other passes that changed nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from tflab.lowering.hlo import parse_module
from tflab.lowering.records import PassChange

__all__ = ["PASS_FLAG", "pass_files", "pass_changes"]

#: The XLA flag that dumps the module after every pass that changed it.
PASS_FLAG = "--xla_dump_hlo_pass_re=.*"
_PASS_RE = re.compile(r"^(\d{4})\.([^.]+)\.after_([\w-]+?)(?:\.before_([\w-]+))?\.txt$")


def pass_files(files: dict[str, Path]) -> list[tuple[int, str, str, str, Path]]:
    """``(number, pipeline, after pass, before pass, path)`` of each pass dump, in the order XLA wrote them.

    Args:
        files: one module's dump files by name, less the module prefix (`tflab.lowering.dump.module_files`).
    """
    out = []
    for name, path in files.items():
        m = _PASS_RE.match(name)
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3), m.group(4) or "", path))
    return sorted(out, key=lambda t: t[0])


def _instructions(text: str, call_levels: int) -> dict[str, tuple[str, ...]]:
    return {ins.line: ins.op_names for c in parse_module(text, call_levels) for ins in c.instructions}


def pass_changes(files: dict[str, Path], start: str, op_source: dict, call_levels: int) -> list[PassChange]:
    """One `PassChange` per pass that changed the module, then one per pass known to have changed nothing.

    Args:
        files: the module's dump files (`pass_files` reads the pass dumps among them).
        start: the module before any pass (``*.before_optimizations.txt``).
        op_source: FuncGraph op name → the user's ``file.py:N`` lines.
        call_levels: call ops in front of every op name in this dump (`tflab.lowering.hlo.clean_op_name`).

    Returns:
        The changes in the order XLA ran them; ``changed=False`` entries last.
    """
    prev = _instructions(start, call_levels)
    out: list[PassChange] = []
    after_names: dict[str, set] = {}
    before_names: dict[str, set] = {}
    for _, pipeline, after, before, path in pass_files(files):
        before_names.setdefault(pipeline, set()).add(before)
        cur = _instructions(path.read_text(errors="replace"), call_levels)
        removed = tuple(line for line in prev if line not in cur)
        added = tuple(line for line in cur if line not in prev)
        ops = {n for line in added for n in cur[line]} | {n for line in removed for n in prev[line]}
        prev = cur
        if after == "pipeline-start":
            if not removed and not added:
                continue  # the module as the pipeline began, as dumped before
            after = "(pipeline start)"  # changed by a pass of an enclosing pipeline that XLA did not dump apart
        else:
            after_names.setdefault(pipeline, set()).add(after)
        lines = tuple(sorted({ln for n in ops for ln in op_source.get(n, ())}))
        out.append(PassChange(pipeline=pipeline, name=after, changed=True, removed=removed, added=added,
                              source_lines=lines, tf_op_names=tuple(sorted(ops))))
    for pipeline, names in before_names.items():
        for name in sorted(names - after_names.get(pipeline, set()) - {"", "pipeline-end"}):
            out.append(PassChange(pipeline=pipeline, name=name, changed=False))
    return out

