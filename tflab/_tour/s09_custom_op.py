"""Tour, custom op: build WarpSoftmax (or hit the cache), opcheck it, time it against tf.nn.softmax."""

from __future__ import annotations

BENCH_SHAPE = (4096, 1024)  # 16 MiB float32: below glibc's 32 MiB mmap threshold (see bench_softmax.py)
ROUNDS = 7


def run(ctx) -> None:
    import tensorflow as tf

    from custom_ops.bench import compare_cpu
    from custom_ops.build import BuildError, build
    from custom_ops.opcheck import OpcheckError, opcheck
    from custom_ops.python.ops import warp_softmax_ops as ops

    background = ctx.shared.get("custom_op_build")
    if background is None:
        ctx.progress("custom op: build or cache hit")
    elif not background.done():
        ctx.progress("custom op: waiting for the build the tour started in the background")
    try:
        res = build() if background is None else background.result()
    except BuildError as e:
        first = str(e).splitlines()[0]
        ctx.line(f"build failed: {first}")
        ctx.report["custom_op"] = {"error": str(e)}
        return
    where = "" if background is None else " in the background"
    ctx.line(f"build: {'cache hit' if res.cached else f'built in {res.seconds:.0f} s{where}'}, "
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
    # The protocol of benchmarks/bench_softmax.py at one shape (custom_ops.bench):
    # warm-up calls first, then several calls per sample, interleaved rounds.
    cmp = compare_cpu(BENCH_SHAPE, rounds=ROUNDS)
    ctx.line(cmp.to_text())
    # A speed ratio names its baseline: tf.nn.softmax runs oneDNN's kernel or
    # Eigen's depending on the CPU and TF_ENABLE_ONEDNN_OPTS (3-8x apart, see
    # README "Measured values by configuration"); the ratio holds for this path only.
    config = ctx.report.get("config")
    if not config:  # a section run on its own
        from tflab.runtime import runtime_config

        config = runtime_config().to_dict()
    baseline = "oneDNN" if config.get("onednn_enabled") else "Eigen"
    ctx.line(f"  baseline: tf.nn.softmax on TF's {baseline} CPU path "
             f"({config['onednn_reason']})")
    ctx.line("  (the ratio holds against that kernel on this CPU only; benchmarks/bench_softmax.py "
             "measures both TF paths, XLA and the copy roofline)")
    ctx.report["custom_op"] = {
        "build": res, "cpu_isa": ops.cpu_isa(), "opcheck": report, "opcheck_failed": failed,
        "bench_shape": list(BENCH_SHAPE), "bench": cmp, "warp_softmax_seconds": cmp.warp_seconds,
        "tf_softmax_seconds": cmp.tf_seconds, "speedup_vs_tf_softmax": cmp.wall_ratio,
        "cpu_time_ratio": cmp.cpu_ratio, "baseline": f"tf.nn.softmax ({baseline})",
    }
