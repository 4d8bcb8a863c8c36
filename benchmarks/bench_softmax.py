"""WarpSoftmax against the strongest baselines and the memory roofline, measured side by side.

CPU (default). Shapes: fp32 (4096, 1024), (32, 32000), (65536, 128), (256, 50257)
and (16384, 4096) (256 MiB). One child process per configuration, because TF
reads both switches once, when it loads:

* ``TF_ENABLE_ONEDNN_OPTS=1`` and ``=0``: tf.nn.softmax runs oneDNN's kernel or
  Eigen's (tensorflow/core/util/port.cc);
* ``TF_CPU_ALLOCATOR_USE_BFC=true`` or TF's default allocator (MklCPUAllocator
  with oneDNN on, malloc with it off; tensorflow/core/common_runtime/process_state.cc).

In each child, at each shape:

* the **roofline** (`custom_ops.bench.copy_roofline`, its one definition): the
  fastest copy this machine makes of the same bytes (read N, write N): numpy
  ``copyto`` and libc ``memmove``, on one thread and in one slice per core, into a
  touched (pre-faulted) destination, the best of ``--runs`` runs of each, each run
  alone. A softmax that keeps a row in cache reads each element once and writes
  it once, like a copy, so no softmax can beat it;
* ``tf.nn.softmax`` (Eigen with oneDNN off, oneDNN's kernel with it on),
  ``tf.function(tf.nn.softmax, jit_compile=True)`` (XLA) and ``warp_softmax``:
  the best of ``--runs`` calls each, each call alone (`custom_ops.bench.best_of`),
  printed beside the roofline as a % of it (roofline time / best time) and as
  ratios "tf best / warp best";
* the same three interleaved (`custom_ops.bench.time_interleaved`: ``--rounds``
  rounds, medians, wall and CPU time), a check of the ratio under the machine's
  load, never set against the roofline.

Every op is counted as 8 bytes per element (one float32 read, one written). The
runtime configuration line (`tflab.runtime_config`) of each child is printed,
with the ISA caps (``ONEDNN_MAX_CPU_ISA``, ``TFLAB_WARP_SOFTMAX_ISA``) and the
load average; each shape's line has the load before and after it.

Goals: >= 1.0x tf.nn.softmax with oneDNN on at the four shapes,
>= 2.0x with oneDNN off, and at (16384, 4096) with BFC >= 60% of copy bandwidth
(aiming at 85%). ``--breakdown`` adds where the time goes at (16384, 4096),
without TF: the row kernel on one thread and on every core beside the copy on
one thread and the roofline, its cost per element in cache, each pass of the
row alone (``custom_ops/cc/bench/warp_softmax_passes.cc``) and the first-touch
page faults of a fresh 256 MiB buffer (custom_ops/README.md quotes these).

GPU (``--device gpu``): fp32 (32768, 1024) and (32768, 4096) against
device-to-device copy bandwidth (``tf.raw_ops.DeepCopy``), tf.nn.softmax and
``tf.function(tf.nn.softmax, jit_compile=True)``, in this process. Goals:
>= 85% of copy bandwidth, >= 2x tf.nn.softmax, >= 1x the XLA version.

Usage: ``python benchmarks/bench_softmax.py [--device cpu|gpu] [--runs N] [--rounds N] [--shapes 4096x1024,...]
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


def config_line() -> str:
    """`tflab.runtime_config().one_line()`, plus the WarpSoftmax CPU path and the load average."""
    from custom_ops.python.ops.warp_softmax_ops import cpu_isa
    from tflab.process import settings
    from tflab.runtime import runtime_config

    cfg = runtime_config()
    return (f"{cfg.one_line()} · {cfg.schedulable_cpus} CPUs · intra-op threads "
            f"{cfg.intra_op_threads or 'TF default'} · WarpSoftmax CPU path {cpu_isa()} · "
            f"caps ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'unset')} "
            f"TFLAB_WARP_SOFTMAX_ISA={settings.get('TFLAB_WARP_SOFTMAX_ISA') or 'unset'} · "
            f"load avg {os.getloadavg()[0]:.1f}")


def _kernel_rows(lib, isa_code: int, x: np.ndarray, y: np.ndarray, threads: int, stream: bool,
                 pool: concurrent.futures.ThreadPoolExecutor | None):
    """A callable running the WarpSoftmax row kernel (ctypes, no TF) over x in ``threads`` row slices."""
    rows, cols = x.shape
    cuts = [rows * i // threads for i in range(threads + 1)]
    parts = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]

    def one(ab):
        a, b = ab
        lib.tflab_warp_softmax_rows_f32(isa_code, x[a:].ctypes.data, y[a:].ctypes.data, b - a, cols,
                                        int(stream))

    if pool is None or len(parts) == 1:
        return lambda: one((0, rows))
    return lambda: list(pool.map(one, parts))


PASSES_SRC = os.path.join(ROOT, "custom_ops", "cc", "bench", "warp_softmax_passes.cc")


def row_passes(cols: int = 4096, rows: int = 16, reps: int = 300) -> dict | None:
    """Nanoseconds per element of each pass of the AVX2 row kernel, one thread, in cache
    (``custom_ops/cc/bench/warp_softmax_passes.cc``, compiled here with the library's CPU flags).

    Returns:
        The program's JSON (``ns_per_element``: max, exp_store_sum, exp_sum, scale, row,
        row_streamed), or None where no compiler or no AVX2 is at hand (the reason is printed).
    """
    import tempfile

    from custom_ops.build import BuildError, find_cxx

    try:
        cxx = find_cxx()
    except BuildError as e:
        print(f"  row passes: not measured ({e})", flush=True)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "warp_softmax_passes")
        built = subprocess.run([cxx, "-O2", "-std=c++17", PASSES_SRC, "-o", exe], capture_output=True, text=True)
        if built.returncode != 0:
            print(f"  row passes: the pass timer did not compile: {built.stderr.strip()[:500]}", flush=True)
            return None
        ran = subprocess.run([exe, str(cols), str(rows), str(reps)], capture_output=True, text=True)
    if ran.returncode != 0:
        print(f"  row passes: not measured ({ran.stderr.strip()})", flush=True)
        return None
    return json.loads(ran.stdout)


def breakdown(runs: int, shape=(16384, 4096)) -> dict:
    """Where the gap to the roofline goes at ``shape`` float32, without TF in the timed code
    (the row kernel through ctypes; best of ``runs``, each alone):

    * kernel_1thread_s / copy_1thread_s, kernel_cores_s / roofline: the kernel against the
      fastest copy on one thread and on every core (thread scaling of each);
    * kernel_cache_ns_per_elem: the kernel on (64, cols) (1 MiB in and out, in L2/L3): its compute
      cost per element without DRAM, on one thread;
    * fresh_fill_s / touched_fill_s: writing the output size into a fresh anonymous mmap
      (first-touch page faults, 4 KiB pages; with MADV_HUGEPAGE too) vs a touched buffer: what
      TF's malloc allocator pays on every call (glibc mmaps blocks >= 32 MiB, unmaps them on free).
    """
    from custom_ops.bench import SlicedCopy, best_of, copy_roofline, every_core
    from custom_ops.python.ops import warp_softmax_ops as ops

    isa = {"avx512": "avx512", "avx2+fma": "avx2", "scalar": "scalar"}[ops.cpu_isa()]
    code = ops.ISAS.index(isa)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    lib = ops._cdll(ops.build_result().so_path)
    cores = every_core()
    stream = x.nbytes >= 8 << 20 and shape[1] >= 512  # the OpKernel's rule (kernels.cc, cpu.cc)
    y = np.empty_like(x)
    y.fill(0)
    pool = concurrent.futures.ThreadPoolExecutor(cores) if cores > 1 else None
    roof = copy_roofline(x, runs)
    copy1 = min(v for k, v in roof.by_way.items() if k.endswith(" 1 thread"))
    kernel1 = best_of(_kernel_rows(lib, code, x, y, 1, stream, None), runs)
    kernel_n = best_of(_kernel_rows(lib, code, x, y, cores, stream, pool), runs)
    small = np.ascontiguousarray(x[:64])
    ys = np.empty_like(small)
    one_small = _kernel_rows(lib, code, small, ys, 1, False, None)
    reps = 64
    kernel_cache = best_of(lambda: [one_small() for _ in range(reps)], runs)

    def fresh(madvise_huge: bool):
        m = mmap.mmap(-1, x.nbytes)
        if madvise_huge and hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
            m.madvise(mmap.MADV_HUGEPAGE)
        a = np.frombuffer(m, np.float32)
        a.fill(1.0)
        del a
        m.close()

    fresh_fill = best_of(lambda: fresh(False), 3, warmup=0)
    fresh_huge_fill = best_of(lambda: fresh(True), 3, warmup=0)
    touched = SlicedCopy(x, 1).dst
    touched_fill = best_of(lambda: touched.fill(1), 3)
    if pool is not None:
        pool.shutdown()
    return {"shape": list(shape), "isa": isa, "cores": cores, "runs": runs,
            "roofline_s": roof.seconds, "roofline_way": roof.way, "copy_1thread_s": copy1,
            "kernel_1thread_s": kernel1, "kernel_cores_s": kernel_n,
            "kernel_cache_ns_per_elem": kernel_cache / (reps * small.size) * 1e9,
            "kernel_dram_ns_per_elem_1thread": kernel1 / x.size * 1e9,
            "fresh_fill_s": fresh_fill, "fresh_hugepage_fill_s": fresh_huge_fill,
            "touched_fill_s": touched_fill, "page_fault_s": fresh_fill - touched_fill,
            "passes": row_passes(), "load_avg": os.getloadavg()[0]}


def run_child(args) -> int:
    """One configuration (oneDNN and allocator fixed by the parent's environment): all shapes."""
    import tensorflow as tf

    from custom_ops import load_library, warp_softmax
    from custom_ops.bench import ELEMENTS_PER_SAMPLE, allocator_name, best_of, copy_roofline, time_interleaved
    from tflab.runtime import runtime_config

    load_library()
    out = {"config": config_line(), "allocator": allocator_name(), "tf_kernel": runtime_config().onednn_label,
           "rows": []}
    print(out["config"], flush=True)
    xla = tf.function(tf.nn.softmax, jit_compile=True)
    for shape in args.shapes:
        with tf.device("/CPU:0"):
            x = tf.random.stateless_normal(shape, seed=[0, 1], dtype=tf.float32)
            load0 = os.getloadavg()[0]
            roof = copy_roofline(x.numpy(), args.runs)
            fns = {"tf.nn.softmax": lambda: tf.nn.softmax(x), "xla_softmax": lambda: xla(x),
                   "warp_softmax": lambda: warp_softmax(x)}
            best = {k: best_of(fn, args.runs) for k, fn in fns.items()}  # each alone
            inner = max(1, int(ELEMENTS_PER_SAMPLE // x.shape.num_elements()))
            med, cpu = time_interleaved(fns, args.rounds, inner)
        row = {"shape": list(shape), "load_avg": [load0, os.getloadavg()[0]],
               "roofline": {"seconds": roof.seconds, "gbps": roof.gbps, "way": roof.way, "by_way": roof.by_way},
               "best_ms": {k: v * 1e3 for k, v in best.items()},
               "pct_of_roofline": {k: roof.fraction(v) for k, v in best.items()},
               "warp_vs_tf": best["tf.nn.softmax"] / best["warp_softmax"],
               "warp_vs_xla": best["xla_softmax"] / best["warp_softmax"],
               "median_ms": {k: v * 1e3 for k, v in med.items()},
               "warp_vs_tf_interleaved": med["tf.nn.softmax"] / med["warp_softmax"],
               "warp_vs_tf_cpu_time": cpu["tf.nn.softmax"] / cpu["warp_softmax"]}
        out["rows"].append(row)
        pct = row["pct_of_roofline"]
        print(f"  {'x'.join(map(str, shape)):>11}  roofline {roof.seconds * 1e3:7.2f} ms = {roof.gbps:5.1f} GB/s"
              f" ({roof.way}) | best of {args.runs}: "
              + " | ".join(f"{k} {row['best_ms'][k]:8.2f} ms {pct[k]:4.0%}"
                           for k in ("tf.nn.softmax", "xla_softmax", "warp_softmax"))
              + f" | warp vs tf.nn.softmax ({out['tf_kernel']}) {row['warp_vs_tf']:.2f}x best-of,"
                f" {row['warp_vs_tf_interleaved']:.2f}x interleaved median (CPU time"
                f" {row['warp_vs_tf_cpu_time']:.2f}x), vs XLA {row['warp_vs_xla']:.2f}x"
                f" | load {load0:.1f}-{os.getloadavg()[0]:.1f}", flush=True)
    if args.breakdown:
        out["breakdown"] = b = breakdown(args.runs)
        print(f"  breakdown at {'x'.join(map(str, b['shape']))} ({b['isa']}, no TF, best of {b['runs']}, load "
              f"{b['load_avg']:.1f}): kernel 1 thread {b['kernel_1thread_s'] * 1e3:.1f} ms vs copy 1 thread "
              f"{b['copy_1thread_s'] * 1e3:.1f} ms ({b['copy_1thread_s'] / b['kernel_1thread_s']:.0%}); "
              f"kernel {b['cores']} threads {b['kernel_cores_s'] * 1e3:.1f} ms vs roofline "
              f"{b['roofline_s'] * 1e3:.1f} ms ({b['roofline_way']}; {b['roofline_s'] / b['kernel_cores_s']:.0%}); "
              f"in cache {b['kernel_cache_ns_per_elem']:.2f} ns/element vs "
              f"{b['kernel_dram_ns_per_elem_1thread']:.2f} from DRAM (1 thread); fresh-mmap fill "
              f"{b['fresh_fill_s'] * 1e3:.0f} ms ({b['fresh_hugepage_fill_s'] * 1e3:.0f} ms MADV_HUGEPAGE) vs "
              f"touched {b['touched_fill_s'] * 1e3:.0f} ms", flush=True)
        if b["passes"]:
            ns = b["passes"]["ns_per_element"]
            print(f"  row passes (AVX2, 1 thread, {b['passes']['rows']}x{b['passes']['cols']} in cache, best of "
                  f"{b['passes']['reps']}), ns/element: max {ns['max']:.3f}, exp+store+sum {ns['exp_store_sum']:.3f} "
                  f"(without the store {ns['exp_sum']:.3f}), scale {ns['scale']:.3f}; whole row {ns['row']:.3f}, "
                  f"streamed {ns['row_streamed']:.3f}", flush=True)
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
                   "--runs", str(args.runs), "--shapes", ",".join("x".join(map(str, s)) for s in args.shapes)]
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
    print(f"\nSummary (best of {args.runs}, each run alone): warp_softmax as % of the roofline (the fastest "
          "copy of the same bytes, 1 thread or every core, measured in the same process) and against "
          "tf.nn.softmax in the same process")
    for name, data in results.items():
        print(f"  {name} (tf.nn.softmax = {data['tf_kernel']}):")
        worst = min(data["rows"], key=lambda r: r["warp_vs_tf"])
        for row in data["rows"]:
            pct = row["pct_of_roofline"]
            print(f"    {'x'.join(map(str, row['shape'])):>11}  warp {pct['warp_softmax']:4.0%} of roofline "
                  f"({row['roofline']['gbps']:.1f} GB/s), tf.nn.softmax {pct['tf.nn.softmax']:4.0%}, "
                  f"XLA {pct['xla_softmax']:4.0%};  warp vs tf.nn.softmax {row['warp_vs_tf']:.2f}x "
                  f"(interleaved {row['warp_vs_tf_interleaved']:.2f}x, CPU time {row['warp_vs_tf_cpu_time']:.2f}x)"
                  + ("  <- worst" if row is worst else ""))
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
    p.add_argument("--runs", type=int, default=7,
                   help="runs of each candidate alone, and of each copy of the roofline (best taken)")
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
    if args.rounds < 1 or args.runs < 1:
        p.error(f"--rounds and --runs must be >= 1, got {args.rounds} and {args.runs}")
    if args.device == "gpu" or args.gpu_path_on_cpu:
        return run_gpu(args)
    if args.child:
        return run_child(args)
    return run_cpu(args)


if __name__ == "__main__":
    sys.exit(main())
