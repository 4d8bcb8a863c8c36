"""Tour, custom op: build WarpSoftmax (or hit the cache), opcheck it, time it against tf.nn.softmax."""

from __future__ import annotations

import statistics
import time

BENCH_SHAPE = (4096, 1024)  # 16 MiB float32: below glibc's 32 MiB mmap threshold (see bench_softmax.py)
ROUNDS = 5


def run(ctx) -> None:
    import tensorflow as tf

    from custom_ops.build import BuildError, build
    from custom_ops.opcheck import OpcheckError, opcheck
    from custom_ops.python.ops import warp_softmax_ops as ops

    ctx.progress("custom op: build or cache hit")
    try:
        res = build()
    except BuildError as e:
        first = str(e).splitlines()[0]
        ctx.line(f"build failed: {first}")
        ctx.report["custom_op"] = {"error": str(e)}
        return
    ctx.line(f"build: {'cache hit' if res.cached else f'built in {res.seconds:.0f} s'}, "
             f"CUDA kernels {'compiled' if res.cuda else 'not compiled'} ({res.so_path.rsplit('/', 1)[-1]})")
    ops.load_library(res)
    ctx.line(f"CPU kernel path: {ops.cpu_isa()}")

    ctx.progress("custom op: opcheck on float32 [4, 37]")
    x = tf.random.stateless_normal([4, 37], seed=[9, 9])
    try:
        report = opcheck(ops.warp_softmax, x)
        failed = None
    except OpcheckError as e:
        report, failed = e.report, str(e)
    for c in report.checks:
        ctx.line(f"opcheck {c.status:<11} {c.name:<16} {c.detail}")

    ctx.progress(f"custom op: CPU benchmark {BENCH_SHAPE}")
    big = tf.random.stateless_normal(BENCH_SHAPE, seed=[1, 2])
    fns = {"tf.nn.softmax": lambda: tf.nn.softmax(big), "warp_softmax": lambda: ops.warp_softmax(big)}
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(ROUNDS):  # interleaved, so background load hits both alike
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["tf.nn.softmax"] / med["warp_softmax"]
    ctx.line(f"CPU {BENCH_SHAPE} float32: warp_softmax {med['warp_softmax'] * 1e3:.1f} ms, "
             f"tf.nn.softmax {med['tf.nn.softmax'] * 1e3:.1f} ms → {ratio:.2f}× "
             f"(median of {ROUNDS}; benchmarks/bench_softmax.py for all shapes)")
    ctx.report["custom_op"] = {
        "build": res, "cpu_isa": ops.cpu_isa(), "opcheck": report, "opcheck_failed": failed,
        "bench_shape": list(BENCH_SHAPE), "warp_softmax_seconds": med["warp_softmax"],
        "tf_softmax_seconds": med["tf.nn.softmax"], "speedup_vs_tf_softmax": ratio,
    }
