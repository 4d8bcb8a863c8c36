"""Refuse, before allocating, random inputs whose copies cannot fit in memory.

`tflab._user.target.materialize` caps ONE random argument at 4 GiB, but a verb
holds several copies: ``tflab compare`` keeps the input, the numpy buffer it
was drawn into, and per mode (eager, graph, XLA) the outputs and, with
gradients, one gradient per input. Allocating past the memory limit does not
raise ``MemoryError`` on Linux: the kernel's OOM killer ends the process
(exit 137, no message). So a verb estimates its peak as ``copies × input
bytes`` and compares it with the memory it may use:

* the machine's: ``MemAvailable`` from ``/proc/meminfo`` (free plus
  reclaimable page cache; ``proc(5)``), else
  ``os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")``;
* the process's OWN cgroup (containers, systemd units, ``systemd-run -p
  MemoryMax=``, a nested memcg): its path is read from ``/proc/self/cgroup``
  (``0::/PATH`` for v2, ``N:memory:/PATH`` for v1; ``cgroups(7)``), and
  every level from there up to the hierarchy's root is read, because a
  parent's limit binds its children too: ``memory.max - memory.current``
  (v2) or ``memory.limit_in_bytes - memory.usage_in_bytes`` (v1);
* the address-space limit ``RLIMIT_AS`` (``ulimit -v``) minus the process's
  ``VmSize`` (``/proc/self/status``).

The smallest one wins. The estimate is a lower bound when outputs are as large
as the inputs (elementwise functions): a verb refuses only what cannot fit.

Use from a verb (new verbs that make random inputs: do the same)::

    from tflab.process.memory import check_fits

    check_fits(input_bytes, copies=8, what="compare", advice="use a smaller shape or --no-grad")
"""

from __future__ import annotations

import os
import re

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


def machine_total() -> int | None:
    """Bytes of physical memory (``SC_PHYS_PAGES``), or None when unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
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


def own_cgroup_dirs(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT) -> list[tuple[str, str]]:
    """The memory-controller folders of this process's cgroup and of each ancestor, innermost first.

    Args:
        proc_cgroup: the ``/proc/PID/cgroup`` file (``hierarchy:controllers:path`` lines).
        root: where the hierarchies are mounted.

    Returns:
        ``[(version, folder), …]``: ``"v2"`` folders under ``root``, ``"v1"``
        folders under ``root/memory``; those that do not exist are left out.
    """
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found: list[tuple[str, str]] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            version, base = "v2", root
            if not os.path.exists(os.path.join(root, "cgroup.controllers")):
                base = os.path.join(root, "unified")  # hybrid mode: v2 mounted beside v1
        elif "memory" in controllers.split(","):
            version, base = "v1", os.path.join(root, "memory")
        else:
            continue
        rel = path.strip("/")
        while True:
            folder = os.path.join(base, rel) if rel else base
            if os.path.isdir(folder):
                found.append((version, folder))
            if not rel:
                break
            rel = os.path.dirname(rel)
    return found


def own_cgroup_limit(proc_cgroup: str = "/proc/self/cgroup",
                     root: str = CGROUP_ROOT) -> tuple[int, int, str] | None:
    """The tightest memory limit over this process's cgroup and its ancestors: ``(limit, free, folder)``.

    ``free`` is that level's limit minus its usage; None when no level sets
    a limit (v2 ``max``, v1's near-2**63 "unlimited").
    """
    best = None
    for version, folder in own_cgroup_dirs(proc_cgroup, root):
        limit_f, usage_f = (("memory.max", "memory.current") if version == "v2"
                            else ("memory.limit_in_bytes", "memory.usage_in_bytes"))
        limit = _read_int(os.path.join(folder, limit_f))
        if limit is None or limit >= 1 << 60:
            continue
        free = max(limit - (_read_int(os.path.join(folder, usage_f)) or 0), 0)
        if best is None or free < best[1]:
            best = (limit, free, f"{folder}/{limit_f}")
    return best


def address_space_available() -> tuple[int, int] | None:
    """``(RLIMIT_AS soft limit, bytes left under it)``, or None when unlimited."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, ValueError, OSError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return soft, max(soft - used, 0)


def available_memory() -> tuple[int | None, str]:
    """The bytes this process may still allocate, and where that number came from.

    The smallest of: the own cgroup's (and its ancestors') limit minus usage,
    ``RLIMIT_AS`` minus ``VmSize``, and ``MemAvailable``.

    Returns:
        ``(bytes, source)``; ``(None, "unknown")`` when none says.
    """
    options: list[tuple[int, str]] = []
    own = own_cgroup_limit()
    if own is not None:
        options.append((own[1], f"cgroup limit {_gib(own[0])} ({own[2]}) minus usage"))
    else:
        group = cgroup_available()  # the hierarchy's root (a container's own namespace root)
        if group is not None:
            options.append((group, "cgroup memory.max minus memory.current"))
    rl = address_space_available()
    if rl is not None:
        options.append((rl[1], f"RLIMIT_AS {_gib(rl[0])} minus VmSize"))
    machine = machine_available()
    if machine is not None:
        options.append((machine, "MemAvailable"))
    if not options:
        return None, "unknown"
    return min(options)


NO_LIMIT = "no cgroup or RLIMIT_AS limit"  # how `limit_text` begins when no limit is in force


def limit_text() -> str:
    """Words for the memory limit in force, for a message about an OOM kill."""
    own = own_cgroup_limit()
    if own is not None:
        return f"cgroup limit {_gib(own[0])} ({own[2]})"
    rl = address_space_available()
    if rl is not None:
        return f"RLIMIT_AS {_gib(rl[0])}"
    machine = machine_available()
    return f"{NO_LIMIT}; MemAvailable now {_gib(machine)}" if machine else "unknown"


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


#: Address space TensorFlow 2.21 takes just to import and list its devices (``VmPeak`` 1.43 GB
#: measured on the pinned wheel; it loads under ``prlimit --as=1500000000``, not under 1e9).
#: A limit below this floor cannot load TF on any machine; above it, the verb's own check decides.
TF_LOAD_FLOOR = int(1.3 * 2**30)


def tf_load_refusal(floor: int = TF_LOAD_FLOOR) -> str | None:
    """One line when ``RLIMIT_AS`` is too small for TensorFlow to load at all, else None.

    Under such a limit TF's import fails in ``dlopen`` ("failed to map segment from shared
    object") with a traceback that does not name the limit; the supervisor says it first.
    """
    rl = address_space_available()
    if rl is None or rl[0] >= floor:
        return None
    return (f"RLIMIT_AS {rl[0] / 2**30:.2f} GiB is too small for TensorFlow (needs about "
            f"{1.4:.1f} GiB of address space to load); raise it (ulimit -v, prlimit --as) or lift it")


def ulp_step_copies(itemsize: int) -> int:
    """Input-sized copies `tflab._graph.numeric.ulp_distance` holds at its peak, for floats of ``itemsize`` bytes.

    Per element it keeps the two int64 orderings (``ia``, ``ib``) to its end, and at its peak also
    the float64 copies of both sides (``fa``, ``fb``), their two NaN masks (bool), the float64
    distance and ``np.where``'s result: 6 arrays of 8 bytes plus 2 of 1 byte, about 51 bytes per
    element (measured with tracemalloc: 51.0 for float16 and float32); float64 also makes two
    uint64 copies for its unsigned distance: 67 bytes. A float32 input of N bytes therefore needs
    about 12.8 N more (compare passed its estimate under RLIMIT_AS 12 GB, then died in
    numpy's MemoryError allocating an int64 copy).

    Returns:
        ``ceil(bytes per element / itemsize)``: 13 for float32, 9 for float64, 26 for float16/bfloat16.
    """
    per_element = 68 if int(itemsize) >= 8 else 52
    return -(-per_element // max(int(itemsize), 1))


# What an allocation failure leaves on stderr: glibc's "cannot allocate memory for thread-local data",
# Python's MemoryError, C++'s std::bad_alloc, TF's "Resource exhausted: OOM", a thread whose stack
# could not be mapped (TF's fatal "Thread … creation via pthread_create() failed").
_NO_MEMORY = re.compile(r"cannot allocate memory|MemoryError|bad_alloc|ResourceExhausted|Resource exhausted|"
                        r"out of memory|failed to allocate|pthread_create\(\) failed", re.I)


def out_of_memory_line(stderr_tail: str, memory_limit: str | None) -> str | None:
    """The line for a child that ran out of memory under a limit the user set, else None.

    Args:
        stderr_tail: the end of what the child wrote to stderr.
        memory_limit: `limit_text` (a RLIMIT_AS or cgroup limit is one the user set).

    RLIMIT_AS just above what TF's import needs let TF load, then glibc aborted a thread's start
    ("cannot allocate memory for thread-local data", status 127) and the line named neither the
    cause nor the limit.
    """
    if not memory_limit or not memory_limit.startswith(("RLIMIT_AS", "cgroup")):
        return None
    last = next((ln.strip() for ln in reversed(stderr_tail.splitlines()) if _NO_MEMORY.search(ln)), None)
    if last is None:
        return None
    return (f"error: the process ran out of memory under the limit in force ({memory_limit}) before tflab wrote "
            f"its report ({last[:160]!r}); raise the limit (ulimit -v, prlimit --as, or the cgroup's "
            f"memory.max) or use smaller inputs")
