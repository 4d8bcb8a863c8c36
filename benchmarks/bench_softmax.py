"""WarpSoftmax against the strongest baselines and the memory roofline, measured side by side.

CPU (default). Shapes: fp32 (4096, 1024), (32, 32000), (65536, 128), (256, 50257)
and (16384, 4096) (256 MiB). One child process per configuration, because TF
reads both switches once, when it loads:

* ``TF_ENABLE_ONEDNN_OPTS=1`` and ``=0``: tf.nn.softmax runs oneDNN's kernel or
  Eigen's (tensorflow/core/util/port.cc);
* ``TF_CPU_ALLOCATOR_USE_BFC=true`` or TF's default allocator (MklCPUAllocator
  with oneDNN on, malloc with it off; tensorflow/core/common_runtime/process_state.cc).

In each child, at each shape, four candidates run interleaved
(`custom_ops.bench.time_interleaved`: 2 warm-up calls each, then ``--rounds``
rounds, medians), so the machine's load hits them alike:

* ``copy``: the same bytes copied into an already touched buffer (numpy
  ``copyto``, on one thread and in one slice per core in threads, both interleaved with the
  others; the faster of the two is the roofline). A softmax that
  keeps a row in cache reads each element once and writes it once, like a copy,
  so no softmax can beat it;
* ``tf.nn.softmax``, ``tf.function(tf.nn.softmax, jit_compile=True)`` (XLA) and
  ``warp_softmax``.

Every op is counted as 8 bytes per element (one float32 read, one written), and
printed as GB/s and as a % of the copy's GB/s. Ratios are "tf time / warp time"
within one child (interleaved). The runtime configuration line
(`tflab.runtime_config`) of each child is printed, with the load average.

Goals (issue 13): >= 1.0x tf.nn.softmax with oneDNN on at the four shapes,
>= 2.0x with oneDNN off, and at (16384, 4096) with BFC >= 60% of copy bandwidth
(aiming at 85%). ``--breakdown`` adds where the time goes at (16384, 4096):
first-touch page faults of a fresh 256 MiB buffer, the kernel single-threaded
from DRAM and in cache (custom_ops/README.md quotes these).

GPU (``--device gpu``): fp32 (32768, 1024) and (32768, 4096) against
device-to-device copy bandwidth (``tf.raw_ops.DeepCopy``), tf.nn.softmax and
``tf.function(tf.nn.softmax, jit_compile=True)``, in this process. Goals:
>= 85% of copy bandwidth, >= 2x tf.nn.softmax, >= 1x the XLA version.

Usage: ``python benchmarks/bench_softmax.py [--device cpu|gpu] [--rounds N] [--shapes 4096x1024,...]
[--onednn 1,0] [--allocators bfc,default] [--breakdown] [--json]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import mmap
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

CPU_SHAPES = [(4096, 1024), (32, 32000), (65536, 128), (256, 50257), (16384, 4096)]
GPU_SHAPES = [(32768, 1024), (32768, 4096)]
CONFIG_NAMES = {("1", "bfc"): "oneDNN on, BFC", ("1", "default"): "oneDNN on, default allocator",
                ("0", "bfc"): "oneDNN off, BFC", ("0", "default"): "oneDNN off, default allocator"}


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """"4096x1024,32x32000" -> [(4096, 1024), (32, 32000)]; ArgumentTypeError on bad input."""
    try:
        shapes = [tuple(int(d) for d in s.lower().split("x")) for s in text.split(",") if s]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) < 1 or min(s) < 1 for s in shapes):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of shapes like 4096x1024,32x32000")
    return shapes


def _choices(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        vals = [v for v in text.split(",") if v]
        bad = [v for v in vals if v not in allowed]
        if bad or not vals:
            raise argparse.ArgumentTypeError(f"{text!r}: use a comma list of {', '.join(allowed)}")
        return vals
    return parse


class ThreadedCopy:
    """Copies src into a touched dst, one slice per thread (numpy releases the GIL in copyto)."""

    def __init__(self, src: np.ndarray, threads: int):
        self.src = src.reshape(-1)
        self.dst = np.empty_like(self.src)
        self.dst.fill(0)  # touch every page once: later copies see no page faults
        n = self.src.size
        cuts = [n * i // threads for i in range(threads + 1)]
        self.slices = [slice(a, b) for a, b in zip(cuts, cuts[1:])]
        self.pool = concurrent.futures.ThreadPoolExecutor(threads) if threads > 1 else None

    def __call__(self):
        if self.pool is None:
            np.copyto(self.dst, self.src)
        else:
            list(self.pool.map(lambda s: np.copyto(self.dst[s], self.src[s]), self.slices))
        return self.dst


def config_line() -> str:
    """`tflab.runtime_config().one_line()`, plus the WarpSoftmax CPU path and the load average."""
    from custom_ops.python.ops.warp_softmax_ops import cpu_isa
    from tflab.runtime import runtime_config

    cfg = runtime_config()
    return (f"{cfg.one_line()} · {cfg.schedulable_cpus} CPUs · intra-op threads "
            f"{cfg.intra_op_threads or 'TF default'} · WarpSoftmax CPU path {cpu_isa()} · "
            f"load avg {os.getloadavg()[0]:.1f}")


def breakdown(tf, warp_softmax, rounds: int) -> dict:
    """Where the time goes at (16384, 4096) float32 (256 MiB in, 256 MiB out), single-threaded
    numpy/ctypes parts and TF calls, all in this process:

    * fresh_fill_s / touched_fill_s: writing 256 MiB into a fresh anonymous mmap (first-touch
      page faults, 4 KiB pages) vs into a touched buffer: the difference is the page-fault cost
      that TF's malloc allocator pays on every call for a fresh output (glibc mmaps blocks
      >= 32 MiB and unmaps them on free); fresh_hugepage_fill_s with MADV_HUGEPAGE;
    * kernel_dram_s: the WarpSoftmax row kernel alone, one thread, input from DRAM, output
      into a touched buffer (no TF, no allocation);
    * kernel_cache_ns_per_elem: the same kernel on (64, 4096) (1 MiB in and out, in L2/L3):
      the compute cost per element without DRAM.
    """
    from custom_ops.python.ops import warp_softmax_ops as ops

    shape = (16384, 4096)
    isa = {"avx512": "avx512", "avx2+fma": "avx2", "scalar": "scalar"}[ops.cpu_isa()]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    lib = ops._cdll(ops.build_result().so_path)

    def best(fn, n=rounds):
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return min(ts)

    touched = np.empty_like(x)
    touched.fill(0)

    def fresh(madvise_huge: bool):
        # An anonymous mmap, as glibc malloc makes for TF's default allocator (blocks >= 32 MiB);
        # optionally with MADV_HUGEPAGE (2 MiB pages where THP is "madvise"), as numpy does.
        m = mmap.mmap(-1, x.nbytes)
        if madvise_huge and hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
            m.madvise(mmap.MADV_HUGEPAGE)
        a = np.frombuffer(m, np.float32)
        a.fill(1.0)
        del a
        m.close()

    fresh_fill = best(lambda: fresh(False), 3)
    fresh_huge_fill = best(lambda: fresh(True), 3)
    touched_fill = best(lambda: touched.fill(1.0), 3)
    y = np.empty_like(x)
    y.fill(0)
    code = ops.ISAS.index(isa)
    kernel_dram = best(lambda: lib.tflab_warp_softmax_rows_f32(code, x.ctypes.data, y.ctypes.data,
                                                               shape[0], shape[1], 1), 3)
    small = np.ascontiguousarray(x[:64])
    ys = np.empty_like(small)
    reps = 64
    kernel_cache = best(lambda: [lib.tflab_warp_softmax_rows_f32(code, small.ctypes.data, ys.ctypes.data,
                                                                 64, shape[1], 0) for _ in range(reps)], 3)
    return {"shape": list(shape), "fresh_fill_s": fresh_fill, "fresh_hugepage_fill_s": fresh_huge_fill,
            "touched_fill_s": touched_fill, "page_fault_s": fresh_fill - touched_fill,
            "page_fault_hugepage_s": fresh_huge_fill - touched_fill, "kernel_dram_1thread_s": kernel_dram,
            "kernel_cache_ns_per_elem": kernel_cache / (reps * small.size) * 1e9}


def run_child(args) -> int:
    """One configuration (oneDNN and allocator fixed by the parent's environment): all shapes."""
    import tensorflow as tf

    from custom_ops import load_library, warp_softmax
    from custom_ops.bench import ELEMENTS_PER_SAMPLE, allocator_name, time_interleaved

    load_library()
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = {"config": config_line(), "allocator": allocator_name(), "rows": []}
    print(out["config"], flush=True)
    xla = tf.function(tf.nn.softmax, jit_compile=True)
    for shape in args.shapes:
        with tf.device("/CPU:0"):
            x = tf.random.stateless_normal(shape, seed=[0, 1], dtype=tf.float32)
            # One thread copies an in-cache array faster (measured: 4 MiB 29 vs 22 GB/s), all
            # cores a DRAM-sized one (256 MiB: 23 vs 20 GB/s): both run, the faster is the roofline.
            copy1 = ThreadedCopy(x.numpy(), 1)
            copy_mt = ThreadedCopy(x.numpy(), threads)
            fns = {"copy_1thread": copy1, "copy_threads": copy_mt, "tf.nn.softmax": lambda: tf.nn.softmax(x),
                   "xla_softmax": lambda: xla(x), "warp_softmax": lambda: warp_softmax(x)}
            inner = max(1, int(ELEMENTS_PER_SAMPLE // x.shape.num_elements()))
            wall, cpu = time_interleaved(fns, args.rounds, inner)
            wall["copy"] = min(wall.pop("copy_1thread"), wall.pop("copy_threads"))
        nbytes = 8 * int(np.prod(shape))
        gbps = {k: nbytes / v / 1e9 for k, v in wall.items()}
        row = {"shape": list(shape), "ms": {k: v * 1e3 for k, v in wall.items()}, "gbps": gbps,
               "pct_of_copy": {k: v / gbps["copy"] for k, v in gbps.items() if k != "copy"},
               "warp_vs_tf": wall["tf.nn.softmax"] / wall["warp_softmax"],
               "warp_vs_xla": wall["xla_softmax"] / wall["warp_softmax"],
               "warp_vs_tf_cpu_time": cpu["tf.nn.softmax"] / cpu["warp_softmax"]}
        out["rows"].append(row)
        print(f"  {'x'.join(map(str, shape)):>11}  copy {gbps['copy']:5.1f} GB/s | "
              + " | ".join(f"{k} {row['ms'][k]:8.3f} ms {row['pct_of_copy'][k]:4.0%}"
                           for k in ("tf.nn.softmax", "xla_softmax", "warp_softmax"))
              + f" | warp vs tf {row['warp_vs_tf']:.2f}x (CPU time {row['warp_vs_tf_cpu_time']:.2f}x),"
                f" vs XLA {row['warp_vs_xla']:.2f}x", flush=True)
        del copy1, copy_mt
    if args.breakdown:
        out["breakdown"] = breakdown(tf, warp_softmax, args.rounds)
        b = out["breakdown"]
        print(f"  breakdown at 16384x4096: fill a fresh 256 MiB mmap {b['fresh_fill_s'] * 1e3:.0f} ms "
              f"(4 KiB pages; {b['fresh_hugepage_fill_s'] * 1e3:.0f} ms with MADV_HUGEPAGE) vs a touched "
              f"buffer {b['touched_fill_s'] * 1e3:.0f} ms: page faults {b['page_fault_s'] * 1e3:.0f} ms "
              f"({b['page_fault_hugepage_s'] * 1e3:.0f} ms); "
              f"WarpSoftmax kernel 1 thread from DRAM {b['kernel_dram_1thread_s'] * 1e3:.0f} ms; "
              f"in cache {b['kernel_cache_ns_per_elem']:.2f} ns/element", flush=True)
    print("CHILD-JSON " + json.dumps(out), flush=True)
    return 0


def run_cpu(args) -> int:
    """Runs one child per (oneDNN, allocator) and prints the side-by-side summary."""
    results = {}
    for onednn in args.onednn:
        for alloc in args.allocators:
            name = CONFIG_NAMES[(onednn, alloc)]
            env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn)
            env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
            if alloc == "bfc":
                env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rounds", str(args.rounds),
                   "--shapes", ",".join("x".join(map(str, s)) for s in args.shapes)]
            if args.breakdown and (onednn, alloc) == (args.onednn[0], args.allocators[0]):
                cmd.append("--breakdown")
            print(f"== {name}", flush=True)
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
            data = None
            for line in proc.stdout.splitlines():
                if line.startswith("CHILD-JSON "):
                    data = json.loads(line[len("CHILD-JSON "):])
                else:
                    print(line, flush=True)
            if proc.returncode != 0 or data is None:
                print(f"bench_softmax: the {name} run failed (exit {proc.returncode})", file=sys.stderr)
                return 1
            results[name] = data
    print("\nSummary: warp_softmax vs tf.nn.softmax (wall-time ratio, interleaved in one process); "
          "% of the copy bandwidth measured in the same process")
    for name, data in results.items():
        print(f"  {name}:")
        for row in data["rows"]:
            pct = row["pct_of_copy"]
            print(f"    {'x'.join(map(str, row['shape'])):>11}  {row['warp_vs_tf']:.2f}x vs tf.nn.softmax, "
                  f"{row['warp_vs_xla']:.2f}x vs XLA;  warp {pct['warp_softmax']:.0%}, "
                  f"tf.nn.softmax {pct['tf.nn.softmax']:.0%}, XLA {pct['xla_softmax']:.0%} of copy "
                  f"({row['gbps']['copy']:.1f} GB/s)")
    if args.json:
        print(json.dumps({"device": "cpu", "configs": results}, indent=2))
    return 0


GPU_BATCH = 8  # softmaxes per tf.function call: hides the per-call dispatch cost


def gpu_candidates(tf, warp_softmax, shape):
    """Each candidate as one tf.function over GPU_BATCH distinct inputs.

    At H200 bandwidth one (32768, 1024) softmax takes ~50 us, the same order as
    an eager Python dispatch, so each call runs GPU_BATCH softmaxes on distinct
    inputs (distinct, so that Grappler's common-subexpression elimination
    cannot merge them). Returns ({name: fn}, GPU_BATCH).
    """
    xs = [tf.random.stateless_normal(shape, seed=[0, i], dtype=tf.float32) for i in range(GPU_BATCH)]

    def many(f, jit=False):
        g = tf.function(lambda *a: [f(t) for t in a], jit_compile=jit)
        return lambda: g(*xs)

    def copy(t):
        return tf.raw_ops.DeepCopy(x=t)

    try:
        many(copy)()
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError):
        # No DeepCopy kernel on this device: an elementwise op moves the same bytes.
        copy = tf.math.negative
    return {"tf.nn.softmax": many(tf.nn.softmax), "warp_softmax": many(warp_softmax),
            "xla_softmax": many(tf.nn.softmax, jit=True), "d2d_copy": many(copy)}, GPU_BATCH


def run_gpu(args) -> int:
    import tensorflow as tf

    from custom_ops import load_library, warp_softmax
    from custom_ops.bench import time_interleaved
    from custom_ops.python.ops.warp_softmax_ops import build_result

    load_library()
    res = build_result()
    if args.gpu_path_on_cpu:
        # Runs the GPU code path on the CPU with small shapes: checks the script
        # itself where no GPU is at hand (numbers meaningless).
        shapes, dev, sync = [(256, 1024), (64, 4096)], "/CPU:0", (lambda: None)
        print("GPU code path on CPU (script check only; numbers meaningless)")
    else:
        if not tf.config.list_physical_devices("GPU"):
            print("bench_softmax: --device gpu but TensorFlow sees no GPU", file=sys.stderr)
            return 2
        if not res.cuda:
            print("bench_softmax: the library was built without CUDA (nvcc missing?)", file=sys.stderr)
            return 2
        shapes, dev, sync = GPU_SHAPES, "/GPU:0", tf.test.experimental.sync_devices
        print(f"GPU: {tf.config.experimental.get_device_details(tf.config.list_physical_devices('GPU')[0])}")
    print(config_line())
    rows = []
    for shape in shapes:
        with tf.device(dev):
            fns, per_call = gpu_candidates(tf, warp_softmax, shape)
            t, _ = time_interleaved(fns, args.rounds, 3, sync=sync)
            t = {k: v / per_call for k, v in t.items()}
        nbytes = 8 * int(np.prod(shape))
        warp_gbps, copy_gbps = nbytes / t["warp_softmax"] / 1e9, nbytes / t["d2d_copy"] / 1e9
        row = {"shape": list(shape), **{f"{k}_ms": v * 1e3 for k, v in t.items()},
               "speedup_vs_tf": t["tf.nn.softmax"] / t["warp_softmax"], "warp_gbps": warp_gbps,
               "copy_gbps": copy_gbps, "warp_frac_copy": warp_gbps / copy_gbps,
               "speedup_vs_xla": t["xla_softmax"] / t["warp_softmax"]}
        print(f"  {str(shape):>14}  warp {warp_gbps:7.1f} GB/s = {row['warp_frac_copy']:.0%} of "
              f"D2D copy {copy_gbps:.0f} GB/s (goal >= 85%); vs tf.nn.softmax "
              f"{row['speedup_vs_tf']:.2f}x (goal >= 2x); vs XLA softmax "
              f"{row['speedup_vs_xla']:.2f}x (goal >= 1x)")
        rows.append(row)
    if args.json:
        print(json.dumps({"device": "gpu", "rows": rows}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_softmax.py", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median taken)")
    p.add_argument("--shapes", type=parse_shapes, default=CPU_SHAPES,
                   help="CPU shapes, e.g. 4096x1024,16384x4096 (default: the five of the docstring)")
    p.add_argument("--onednn", type=_choices(("1", "0")), default=["1", "0"],
                   help="TF_ENABLE_ONEDNN_OPTS values to run, e.g. 1,0 (default)")
    p.add_argument("--allocators", type=_choices(("bfc", "default")), default=["bfc", "default"],
                   help="CPU allocators to run: bfc (TF_CPU_ALLOCATOR_USE_BFC=true), default")
    p.add_argument("--breakdown", action="store_true",
                   help="also measure page faults, DRAM and in-cache kernel cost at 16384x4096")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gpu-path-on-cpu", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.device == "gpu" or args.gpu_path_on_cpu:
        return run_gpu(args)
    if args.child:
        return run_child(args)
    return run_cpu(args)


if __name__ == "__main__":
    sys.exit(main())
