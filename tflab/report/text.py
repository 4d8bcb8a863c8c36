"""Plain-text tables for every report's ``to_text()``: one renderer, one look.

Columns are padded to their widest cell; a column whose cells are all numbers
is right-aligned, any other column left-aligned, unless ``align`` says otherwise.
The header, when given, is followed by a rule of dashes. No line ends in spaces.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Sequence

__all__ = ["table"]


def _is_number(cell: Any) -> bool:
    if isinstance(cell, bool):
        return False
    if isinstance(cell, numbers.Number):
        return True
    if isinstance(cell, str):
        t = cell.strip().rstrip("%×x").replace(",", "").replace("_", "")
        try:
            float(t)
        except ValueError:
            return False
        return bool(t)
    return False


def table(rows: Iterable[Sequence[Any]], header: Sequence[str] | None = None, *,
          align: str | None = None, indent: str = "", gap: int = 2, rule: bool = True) -> str:
    """Renders rows as an aligned plain-text table.

    Args:
        rows: an iterable of rows, each a sequence of cells; ``str()`` is applied to
            each cell (format numbers before passing them when the digits matter;
            ``None`` prints as an empty cell). Rows may be shorter than the widest.
        header: optional column titles, printed first and underlined with ``-``.
        align: optional string of ``"<"`` (left) and ``">"`` (right), one per column;
            missing columns fall back to the default (right when every non-empty
            cell of the column is a number, else left).
        indent: prefix of every line (for example ``"  "`` under a heading).
        gap: spaces between columns.
        rule: underline the header (only when ``header`` is given).

    Returns:
        The table as one string, lines joined with ``"\\n"``, no trailing newline;
        ``""`` when there are no rows and no header.

    Raises:
        ValueError: ``align`` holds a character other than ``<`` and ``>``.

    Example:
        >>> print(table([("float", 0.0), ("int8", "3.7e-3")], header=("variant", "max |Δ|")))
        variant  max |Δ|
        -------  -------
        float        0.0
        int8      3.7e-3
    """
    if align is not None and set(align) - {"<", ">"}:
        raise ValueError(f"align must be made of '<' and '>', got {align!r}")
    body = [["" if c is None else c for c in row] for row in rows]
    if not body and header is None:
        return ""
    ncols = max([len(r) for r in body] + [len(header) if header is not None else 0])
    body = [list(r) + [""] * (ncols - len(r)) for r in body]
    cols_align = []
    for j in range(ncols):
        if align is not None and j < len(align):
            cols_align.append(align[j])
            continue
        cells = [r[j] for r in body if str(r[j]) != ""]
        cols_align.append(">" if cells and all(_is_number(c) for c in cells) else "<")
    text = [[str(c) for c in r] for r in body]
    head = [str(h) for h in header] + [""] * (ncols - len(header)) if header is not None else None
    widths = [max([len(r[j]) for r in text] + ([len(head[j])] if head else [0])) for j in range(ncols)]

    def line(cells: list[str]) -> str:
        parts = [c.rjust(w) if a == ">" else c.ljust(w) for c, w, a in zip(cells, widths, cols_align)]
        return (indent + (" " * gap).join(parts)).rstrip()

    out = []
    if head is not None:
        out.append(line(head))
        if rule:
            out.append(line(["-" * w for w in widths]))
    out.extend(line(r) for r in text)
    return "\n".join(out)


def seconds_text(s: float | None, digits: int = 2) -> str:
    """``0.42 s`` (``digits`` decimals under 10 s, one above), or ``untimed`` for None."""
    if s is None:
        return "untimed"
    return f"{s:.{digits}f} s" if s < 10 else f"{s:.1f} s"


def trace_time_line(name: str, traces: int, seconds: float, total: float | None, of: str) -> str:
    """``train_step: 3 traces, 18.4 s of the script's 25.0 s (74%)``: a function's trace time and its share.

    Args:
        name: the tf.function's name.
        traces: how many traces it made.
        seconds: their seconds (tracing plus the first run's instantiation).
        total: the wall seconds the share is of; None or 0 gives no share.
        of: how that total reads after "of": ``the script's {}`` or ``the {} its calls took``
            (``{}`` is replaced by the total).
    """
    share = (f" of {of.format(seconds_text(total))} ({100 * seconds / total:.0f}%)" if total else "")
    return f"{name}: {traces} trace{'s' * (traces != 1)}, {seconds_text(seconds)}{share}"
