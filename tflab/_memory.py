"""Refuse, before allocating, random inputs whose copies cannot fit in memory.

`tflab._target.materialize` caps ONE random argument at 4 GiB, but a verb
holds several copies: ``tflab compare`` keeps the input, the numpy buffer it
was drawn into, and per mode (eager, graph, XLA) the outputs and, with
gradients, one gradient per input. Allocating past the memory limit does not
raise ``MemoryError`` on Linux: the kernel's OOM killer ends the process
(exit 137, no message). So a verb estimates its peak as ``copies × input
bytes`` and compares it with the memory it may use:

* the machine's: ``MemAvailable`` from ``/proc/meminfo`` (free plus
  reclaimable page cache; ``proc(5)``), else
  ``os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")``;
* the cgroup's (containers, systemd units): ``memory.max - memory.current``
  from cgroup v2 (``/sys/fs/cgroup``), or ``memory.limit_in_bytes -
  memory.usage_in_bytes`` from cgroup v1.

The smaller one wins. The estimate is a lower bound when outputs are as large
as the inputs (elementwise functions): a verb refuses only what cannot fit.

Use from a verb (new verbs that make random inputs: do the same)::

    from tflab._memory import check_fits

    check_fits(input_bytes, copies=8, what="compare", advice="use a smaller shape or --no-grad")
"""

from __future__ import annotations

import os

from tflab.errors import UsageError

CGROUP_ROOT = "/sys/fs/cgroup"


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" means no limit


def cgroup_available(root: str = CGROUP_ROOT) -> int | None:
    """Bytes the cgroup may still allocate (limit minus usage), or None when unlimited or unknown.

    Args:
        root: the cgroup folder (v2: ``memory.max``/``memory.current``; v1:
            ``memory/memory.limit_in_bytes``/``memory/memory.usage_in_bytes``).
    """
    for limit_f, usage_f in (("memory.max", "memory.current"),
                             ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        limit = _read_int(os.path.join(root, limit_f))
        if limit is not None and limit < 1 << 60:  # v1 says "no limit" with a huge number
            usage = _read_int(os.path.join(root, usage_f)) or 0
            return max(limit - usage, 0)
    return None


def machine_available() -> int | None:
    """Bytes the machine can still give (``MemAvailable``, else free pages), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_memory() -> tuple[int | None, str]:
    """The bytes this process may still allocate, and where that number came from.

    Returns:
        ``(bytes, source)``; ``(None, "unknown")`` when neither the machine
        nor the cgroup says.
    """
    machine, group = machine_available(), cgroup_available()
    if group is not None and (machine is None or group < machine):
        return group, "cgroup memory.max minus memory.current"
    if machine is not None:
        return machine, "MemAvailable"
    return None, "unknown"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_fits(input_bytes: int, copies: int, what: str, advice: str = "use a smaller shape") -> None:
    """Refuses with one line when ``copies × input_bytes`` exceeds `available_memory`.

    Args:
        input_bytes: bytes of the random inputs (all arguments together).
        copies: how many buffers that large the verb holds at its peak.
        what: the verb, for the message.
        advice: what to do instead.

    Raises:
        UsageError: the estimate exceeds the memory available (unknown
            availability never refuses).
    """
    need = input_bytes * copies
    have, source = available_memory()
    if have is None or need <= have:
        return
    raise UsageError(f"{what} would need about {_gib(need)} ({copies} copies of {_gib(input_bytes)} of "
                     f"inputs) but only {_gib(have)} is available ({source}); {advice}")
