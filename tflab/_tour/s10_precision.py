"""Tour step 10: float32 vs mixed_bfloat16 vs mixed_float16: formats, underflow, loss scaling."""

from __future__ import annotations

# 64×64 instead of the tour's 96×96: the same network in half the time (three
# builds and five backward passes must fit the section's 20 s on 2 cores).
DEMO_SHAPE = (64, 64, 3)
DEMO_BATCH = 4
# The step prints the demo's table (underflow, gradient error, loss scale per policy) and stores
# its dict; neither holds the per-op cause `compare_precisions` judges for a policy that disagrees
# with float32. Judging it anyway was ~2/3 of the demo's CPU time (MobileNetV3Small 64×64: 27 s
# against 6 s on one core), all on the core the tour's own sections share.
DEMO_ATTRIBUTE = False


def run(ctx) -> None:
    import tensorflow as tf

    from tflab.precision.loss_scaling import demonstrate_loss_scaling
    from tflab.precision import compare_precisions, float_info

    for line in float_info("float16").to_text().splitlines():
        ctx.line(line)

    ctx.progress("step 10: reduce_sum(x @ w) * 2^-20 under each policy, with and without a loss scale")
    x, w = tf.ones([8, 64]), tf.fill([64, 4], 2.0 ** -8)

    def tiny_loss(x, w):
        return tf.reduce_sum(x @ w) * 2.0 ** -20

    small = compare_precisions(tiny_loss, x, w, loss_scale=2.0 ** 15)
    for p, r in small.policies.items():
        base = r.unscaled or r
        ctx.line(f"dL/dx {p:14s}: {base.gradients['arg:x'].flat[0]:.3g} unscaled"
                 + (f", {r.gradients['arg:x'].flat[0]:.3g} with loss scale {r.loss_scale:g}" if r.unscaled else "")
                 + f"  ({r.verdict})")
    ctx.report["precision"] = {"float_info": {n: float_info(n).to_dict()
                                              for n in ("float32", "bfloat16", "float16")},
                               "tiny_loss": small.to_dict()}

    if ctx.model_source != "default":
        ctx.line("loss-scaling demo skipped: it rebuilds MobileNetV3Small under each policy, and a "
                 "loaded model's dtype policy is fixed; run `tflab precision FILE.py:FACTORY "
                 "--arg x=float32[…] --loss-scale dynamic` with a function that builds yours")
        return
    demo = None
    background = ctx.shared.get("loss_scaling_demo")  # a child process started at the tour's start
    if background is not None:
        if not background.done():
            ctx.progress(f"step 10: waiting for the MobileNetV3Small {DEMO_SHAPE} loss-scaling demo "
                         f"(a fresh process started at the tour's start)")
        try:
            demo = background.result()
        except Exception as e:  # the child failed: the same demo, here
            ctx.progress(f"step 10: the demo's process failed ({e}); running it here")
    if demo is None:
        ctx.progress(f"step 10: MobileNetV3Small {DEMO_SHAPE} training step under 3 policies "
                     "(+ dynamic loss scale)")
        demo = demonstrate_loss_scaling(input_shape=DEMO_SHAPE, batch=DEMO_BATCH, progress=ctx.progress,
                                        attribute=DEMO_ATTRIBUTE)
    for line in demo.to_text().splitlines():
        ctx.line(line)
    ctx.report["precision"]["loss_scaling"] = demo.to_dict()
