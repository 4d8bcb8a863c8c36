"""The line of a child's stderr that says why it ended.

TF's C++ logging writes lines such as ``E0000 00:00:… cuda_platform.cc:52] failed call to cuInit`` on
every import on a machine without a GPU, and absl adds ``WARNING: All log messages before
absl::InitializeLog()``. A child that crashed after them (a converter's SIGSEGV prints nothing of its
own) would be reported with that noise as its cause. Those lines are left out; TF's fatal ``F`` lines,
and everything Python printed, are kept.
"""

from __future__ import annotations

import re

_TF_LOG = re.compile(r"^[IWE]\d{4} ")


def cause_line(text: str, limit: int = 300) -> str:
    """The last line of ``text`` that is not TF's or absl's informational logging ("" when none).

    Args:
        text: a child's whole stderr.
        limit: characters kept.

    Returns:
        That line, stripped and cut to ``limit``.

    Example:

    >>> cause_line("E0000 00:00:1.2 1 cuda_platform.cc:52] failed call to cuInit\\nSegfault here\\n")
    'Segfault here'
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    kept = [ln for ln in lines if not _TF_LOG.match(ln) and not ln.startswith("WARNING: All log messages before")]
    return (kept or [""])[-1][:limit]
