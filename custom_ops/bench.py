"""Side-by-side timing of WarpSoftmax against tf.nn.softmax, shared by the tour and the benchmark.

`benchmarks/bench_softmax.py` (all shapes, GPU mode) and the tour's custom-op
line (`tflab/_tour/s09_custom_op.py`) both time with `time_interleaved`, so
the tour's ratio is the benchmark's measurement at one shape, not a different
one.

The memory roofline has one definition, `copy_roofline`: the fastest copy this
machine makes of the same bytes (read N, write N), the best of ``runs`` runs of
each way to copy, each run alone, on one thread and on every core, into a
touched destination. Kernels are set beside it with `best_of` (the best of
``runs`` calls, each alone), never with a median taken while interleaved: an
interleaved median of a copy carries the load of whatever ran just before it.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import os
import statistics
import time
from typing import Callable

# Elements run per timed sample: at (4096, 1024) that is 4 calls, so one
# sample is ~20-40 ms, long against timer and scheduler noise.
ELEMENTS_PER_SAMPLE = 2e7


def time_interleaved(fns: dict[str, Callable[[], object]], rounds: int, inner: int,
                     sync: Callable[[], None] = lambda: None, warmup: int = 2
                     ) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall seconds and process CPU seconds per call of each fn, interleaved per round.

    Each fn first runs ``warmup`` times (the first call traces, allocates and
    faults in its output; the allocator then has a block of that size to
    reuse). Then every round times ``inner`` calls of each fn in turn, so
    background load on a shared machine hits all of them alike.

    CPU seconds (all threads of this process, `time.process_time`) measure
    the work done; on a shared machine they vary much less than wall time,
    which also counts the time our threads wait for a core.

    Args:
        fns: name -> zero-argument callable returning a tensor (dropped after each sample).
        rounds: interleaved rounds; the median over rounds is reported.
        inner: calls per timed sample.
        sync: waits for the device (GPU); the default does nothing (eager CPU ops are synchronous).
        warmup: untimed calls of each fn before the first round.

    Returns:
        ({name: median wall seconds per call}, {name: median CPU seconds per call}).
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync()
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(inner):
                out = fn()
            sync()
            del out
            wall[name].append((time.perf_counter() - t0) / inner)
            cpu[name].append((time.process_time() - c0) / inner)
    return ({k: statistics.median(v) for k, v in wall.items()},
            {k: statistics.median(v) for k, v in cpu.items()})


def best_of(fn: Callable[[], object], runs: int, warmup: int = 2,
            sync: Callable[[], None] = lambda: None) -> float:
    """The fastest of ``runs`` calls of ``fn``, each timed alone (wall seconds).

    Nothing else runs in between (no interleaving): the minimum is the call that
    the machine's other load disturbed least, the figure a roofline is compared with.

    Args:
        fn: zero-argument callable; its result is dropped after each call.
        runs: timed calls (>= 1).
        warmup: untimed calls first (allocation, page faults, tracing).
        sync: waits for the device after each call (GPU); a no-op on the CPU.

    Returns:
        The minimum wall seconds of one call.
    """
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        sync()
        best = min(best, time.perf_counter() - t0)
        del out
    return best


def every_core() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` elsewhere)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


COPY_WAYS = ("numpy", "memmove", "stream")


class SlicedCopy:
    """Copies a C-contiguous numpy array into a touched buffer of the same size, in ``threads``
    contiguous slices (one per thread; numpy's ``copyto`` and ctypes' ``memmove`` release the GIL).

    Args:
        src: the array to copy (any dtype; viewed as flat bytes).
        threads: slices, each copied by its own thread (1: in the calling thread).
        how: ``"numpy"`` (``np.copyto``), ``"memmove"`` (libc ``memmove`` through ctypes) or
            ``"stream"`` (the WarpSoftmax library's AVX2 copy with non-temporal stores,
            `custom_ops.python.ops.warp_softmax_ops.stream_copy`; the library must load).
    """

    def __init__(self, src, threads: int, how: str = "numpy"):
        import numpy as np

        if how not in COPY_WAYS:
            raise ValueError(f"how={how!r}: use one of {', '.join(COPY_WAYS)}")
        self.src = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
        self.dst = np.empty_like(self.src)
        self.dst.fill(1)  # touch every page: no copy below takes a page fault
        n = self.src.size
        cuts = [n * i // threads // 64 * 64 for i in range(threads)] + [n]  # cache-line cuts
        self.slices = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
        self.how = how
        self.pool = concurrent.futures.ThreadPoolExecutor(threads) if len(self.slices) > 1 else None

    def _one(self, ab: tuple[int, int]) -> None:
        a, b = ab
        if self.how == "numpy":
            import numpy as np

            np.copyto(self.dst[a:b], self.src[a:b])
        elif self.how == "stream":
            from custom_ops.python.ops.warp_softmax_ops import stream_copy

            if not stream_copy(self.src.ctypes.data + a, self.dst.ctypes.data + a, b - a):
                raise RuntimeError("the stream copy needs AVX2")
        else:
            ctypes.memmove(self.dst.ctypes.data + a, self.src.ctypes.data + a, b - a)

    def __call__(self):
        if self.pool is None:
            self._one(self.slices[0])
        else:
            list(self.pool.map(self._one, self.slices))
        return self.dst

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


@dataclasses.dataclass(frozen=True)
class Roofline:
    """The fastest copy of ``nbytes`` this machine made (`copy_roofline`).

    Attributes:
        nbytes: bytes read (the same count is written): a softmax's input size.
        seconds: the best run of the fastest way (min over ``by_way``).
        way: which way it was, e.g. ``"memmove, 2 threads"``.
        by_way: best seconds of each way tried.
        runs: runs of each way (each alone).
    """

    nbytes: int
    seconds: float
    way: str
    by_way: dict
    runs: int

    @property
    def gbps(self) -> float:
        """Read plus write, GB/s (10^9 bytes): ``2 * nbytes / seconds``."""
        return 2 * self.nbytes / self.seconds / 1e9

    def fraction(self, seconds: float) -> float:
        """A kernel's best seconds on the same bytes as a fraction of this roofline (1.0 = copy speed)."""
        return self.seconds / seconds


def copy_roofline(src, runs: int = 7, threads: int | None = None) -> Roofline:
    """The fastest copy this machine makes of ``src``'s bytes: the memory roofline of a kernel that
    reads ``src`` once and writes as many bytes once (a softmax keeping each row in cache).

    Tried, each alone and the best of ``runs`` runs each: numpy ``copyto``, libc ``memmove``
    (glibc switches to non-temporal stores only above ``x86_non_temporal_threshold``, a share of
    the last-level cache, so each slice of a copy split across cores may fall below it and pay
    the read-for-ownership) and the WarpSoftmax library's copy that always writes with
    non-temporal stores, as the kernel writes large outputs (``"stream"``: without it the kernel
    beat this roofline, 122% at 16384x4096 on an AVX-512 EPYC); on one thread and in one slice
    per core, into a destination touched before timing (no page faults).

    Args:
        src: C-contiguous numpy array (the kernel's input).
        runs: runs of each way.
        threads: the "every core" thread count (default: `every_core`).

    Returns:
        A `Roofline`.
    """
    cores = threads or every_core()
    by_way = {}
    ways = COPY_WAYS if _stream_copy_available() else ("numpy", "memmove")
    for t in sorted({1, cores}):
        for how in ways:
            c = SlicedCopy(src, t, how)
            try:
                by_way[f"{how}, {t} thread{'s' if t > 1 else ''}"] = best_of(c, runs)
            finally:
                c.close()
            del c
    way = min(by_way, key=by_way.get)
    return Roofline(nbytes=int(src.nbytes), seconds=by_way[way], way=way, by_way=by_way, runs=runs)


def _stream_copy_available() -> bool:
    """The WarpSoftmax library loads here and this CPU has its AVX2 stream copy."""
    import numpy as np

    try:
        from custom_ops.python.ops.warp_softmax_ops import stream_copy

        a, b = np.arange(64, dtype=np.uint8), np.zeros(64, np.uint8)
        return stream_copy(a.ctypes.data, b.ctypes.data, 64) and bool((a == b).all())
    except Exception:  # noqa: BLE001 - no library (no compiler): the two library-free ways
        return False


def allocator_name() -> str:
    """TF's CPU allocator in this process: "BFC" when ``TF_CPU_ALLOCATOR_USE_BFC`` was true
    before TF made its first CPU allocation; otherwise TF's default, "MklCPUAllocator" with
    oneDNN on (a BFC allocator for large blocks) or "DefaultCPUAllocator (malloc)" with it off
    (`tflab.runtime_config`; tensorflow/core/common_runtime/process_state.cc reads the variable
    once)."""
    from tflab.runtime import runtime_config

    return runtime_config().cpu_allocator


@dataclasses.dataclass(frozen=True)
class CpuComparison:
    """warp_softmax against tf.nn.softmax at one float32 shape on the CPU, timed by `time_interleaved`.

    Attributes:
        shape: the input shape (float32).
        warp_seconds / tf_seconds: median wall seconds per call.
        wall_ratio: tf_seconds / warp_seconds (throughput ratio; > 1 means warp_softmax is faster).
        cpu_ratio: the same ratio in process CPU seconds (work done, steadier under load).
        rounds / inner / warmup: the timing protocol.
        allocator: TF's CPU allocator in this process (`allocator_name`).
        load_avg: the 1-minute load average before timing (other jobs on the machine).
        threads: TF's intra-op threads (0: TF's default, one per core).
        tf_path: which tf.nn.softmax kernel is the baseline: "oneDNN on" or "Eigen (oneDNN off)"
            (`tflab.runtime_config`); the ratio is against that one only.
    """

    shape: tuple[int, ...]
    warp_seconds: float
    tf_seconds: float
    wall_ratio: float
    cpu_ratio: float
    rounds: int
    inner: int
    warmup: int
    allocator: str
    load_avg: float
    threads: int
    tf_path: str = ""

    def __repr__(self) -> str:
        return (f"CpuComparison({self.shape}: warp_softmax {self.warp_seconds * 1e3:.2f} ms, "
                f"tf.nn.softmax {self.tf_seconds * 1e3:.2f} ms, {self.wall_ratio:.2f}x wall, "
                f"{self.cpu_ratio:.2f}x CPU time)")

    def to_text(self) -> str:
        return (f"CPU {self.shape} float32: warp_softmax {self.warp_seconds * 1e3:.1f} ms, "
                f"tf.nn.softmax ({self.tf_path}) {self.tf_seconds * 1e3:.1f} ms → {self.wall_ratio:.2f}× "
                f"(CPU-time ratio {self.cpu_ratio:.2f}×; median of {self.rounds} interleaved rounds "
                f"of {self.inner} calls after {self.warmup} warm-up calls each, {self.allocator} "
                f"allocator, load avg {self.load_avg:.1f})")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def compare_cpu(shape: tuple[int, ...], rounds: int = 7, warmup: int = 2) -> CpuComparison:
    """Times warp_softmax and tf.nn.softmax on one float32 input of ``shape`` on the CPU.

    The protocol of ``benchmarks/bench_softmax.py``: the same stateless random
    input (N(0, 1), seed [0, 1]), ``max(1, 2e7 // size)`` calls per sample,
    ``rounds`` interleaved rounds, medians.

    Args:
        shape: input shape, rank >= 1.
        rounds: interleaved rounds (median taken).
        warmup: untimed calls of each candidate first.

    Returns:
        A `CpuComparison`.
    """
    import tensorflow as tf

    from custom_ops.python.ops.warp_softmax_ops import warp_softmax
    from tflab.runtime import runtime_config

    with tf.device("/CPU:0"):
        x = tf.random.stateless_normal(shape, seed=[0, 1], dtype=tf.float32)
        fns = {"tf.nn.softmax": lambda: tf.nn.softmax(x), "warp_softmax": lambda: warp_softmax(x)}
        inner = max(1, int(ELEMENTS_PER_SAMPLE // max(1, x.shape.num_elements())))
        load = os.getloadavg()[0]
        wall, cpu = time_interleaved(fns, rounds, inner, warmup=warmup)
    return CpuComparison(
        shape=tuple(shape), warp_seconds=wall["warp_softmax"], tf_seconds=wall["tf.nn.softmax"],
        wall_ratio=wall["tf.nn.softmax"] / wall["warp_softmax"],
        cpu_ratio=cpu["tf.nn.softmax"] / cpu["warp_softmax"], rounds=rounds, inner=inner,
        warmup=warmup, allocator=allocator_name(), load_avg=load,
        threads=tf.config.threading.get_intra_op_parallelism_threads(),
        tf_path=runtime_config().onednn_label)
