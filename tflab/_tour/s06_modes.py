"""Tour step 6: the model eagerly, as a graph and under XLA: ULP distances and speed."""

from __future__ import annotations

BATCH = 2


def run(ctx) -> None:
    import dataclasses

    import keras
    import numpy as np
    import tensorflow as tf

    from tflab.modes import compare_modes, count_fusions, speed_text
    from tflab.models import example_batch, model_input_spec

    model = ctx.model
    spec = ctx.shared.get("input_spec") or model_input_spec(model)
    x = example_batch(spec, BATCH, seed=6)

    def forward(images):
        return model(images, training=False)

    ctx.progress(f"step 6: forward pass, batch {BATCH}, eager / graph / XLA")
    # The model's variables are the whole state (saves compare_modes a trace to find them).
    state = list(getattr(model, "variables", None) or []) or None
    # In the tour's second process XLA dumps the compile that runs (tflab.lowering.tour): its
    # optimized HLO is read there, not from experimental_get_compiler_ir, which compiles again.
    from tflab.lowering.tour import dumps_compiles, step_six_optimized_hlo

    dumped = dumps_compiles()
    fwd = compare_modes(forward, x, gradients=False, repeats=2, hlo=False if dumped else ("optimized_hlo",),
                        state_variables=state)
    hlo_from = "experimental_get_compiler_ir"
    if dumped and fwd.modes["xla"].error is None:
        text = step_six_optimized_hlo()
        if text is not None:
            count, kinds = count_fusions(text)
            fwd = dataclasses.replace(fwd, hlo={"optimized_hlo": text}, fusion_count=count, fusion_kinds=kinds)
            hlo_from = "XLA's dump of the compile that ran"
    for name in ("graph", "xla"):
        r = fwd.modes[name]
        ctx.line(f"forward {name:5s}: " + (f"error: {r.error}" if r.error else
                 f"max {_ulp(r, 'outputs')}, max |diff| {r.abs_error.outputs:.2g} vs eager; "
                 f"first call {r.first_call_seconds:.1f} s"))
    ratios = {"graph_vs_eager": fwd.speed_ratio("graph", "eager"),
              "xla_vs_graph": fwd.speed_ratio("xla", "graph")}
    ctx.line("per call: " + ", ".join(
        f"{k.replace('_vs_', ' vs ')} {speed_text(v)}" for k, v in ratios.items() if v is not None)
        + f" (eager {fwd.modes['eager'].median_seconds * 1e3:.0f} ms; eager and graph run TF's "
        + ("oneDNN" if fwd.config.get("onednn_enabled") else "Eigen") + " CPU kernels)")
    if fwd.fusion_count is not None:
        ctx.line(f"XLA optimized HLO: {fwd.fusion_count} fusions "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(fwd.fusion_kinds.items()))}; from {hlo_from})")
    # The lowering ladder from the dump of that compile (the tour's second process dumps it).
    from tflab.lowering.tour import tour_lines

    for line in tour_lines(forward, x):
        ctx.line(line)
    # What graph mode ran: the three slowest nodes with their kernel library and line (tflab lower --path graph).
    from tflab.lowering.tour import graph_top_line

    ctx.line(graph_top_line(forward, x))

    # Gradients of the loss, eager vs graph. XLA is left out here: compiling the
    # backward pass of MobileNetV3Small costs far more than this section's budget
    # on 2 cores (benchmarks/bench_modes.py measures that compile).
    outputs = getattr(model, "outputs", None) or []
    classifier = len(outputs) == 1 and len(outputs[0].shape) == 2
    labels = tf.constant(np.arange(BATCH) % max(int(outputs[0].shape[-1]) if classifier else 1, 1))
    xent = keras.losses.SparseCategoricalCrossentropy()

    def loss(images):
        out = model(images, training=False)
        return xent(labels, out) if classifier else _mean_square(out)

    ctx.progress("step 6: loss gradients, eager / graph, Grappler on and off")
    grad = compare_modes(loss, x, modes=("eager", "graph"), repeats=1, hlo=False,
                         state_variables=state)
    g = grad.modes["graph"]
    ctx.line(f"gradients ({len(grad.gradient_names)} sources) graph vs eager: "
             + (f"error: {g.error}" if g.error else
                f"max {_ulp(g, 'gradients')}, max |diff| {g.abs_error.gradients:.2g}; "
                f"graph {speed_text(grad.speed_ratio('graph', 'eager'))} per call"))
    plain = None
    if g.error is None and g.ulp.gradients:
        # Is the difference Grappler's? Same graph, meta optimizer off.
        plain = compare_modes(loss, x, modes=("eager", "graph"), repeats=1, hlo=False,
                              grappler=False, state_variables=state).modes["graph"]
        if plain.error is None:
            ctx.line(f"  with Grappler off: max {plain.ulp.gradients} ULP"
                     + (" (its graph rewrites change the rounding)" if plain.ulp.gradients == 0 else ""))
    for n in fwd.notes + grad.notes:  # outputs of random ops: not arithmetic, not findings
        ctx.line(f"random stream: {n}")
    for f in fwd.findings + grad.findings:
        ctx.line(f"finding: {f}")
    ctx.report["modes"] = {
        "batch": BATCH,
        "forward": fwd.to_dict(),
        "gradients": grad.to_dict(),
        "gradients_grappler_off_max_ulp": None if plain is None or plain.error else plain.ulp.gradients,
        "speed": ratios,
        "tf_cpu_kernels": "oneDNN" if fwd.config.get("onednn_enabled") else "Eigen",
        "fusion_count": fwd.fusion_count,
    }


def _ulp(result, group: str) -> str:
    """ULP over elements above atol (the headline), and the raw maximum when
    near-zero elements make it larger."""
    sig, raw = getattr(result.ulp_above_atol, group), getattr(result.ulp, group)
    return f"{sig} ULP" + (f" ({raw} counting |values| <= atol)" if raw != sig else "")


def _mean_square(out):
    """A differentiable scalar for models that are not a (batch, classes)
    classifier, e.g. a SavedModel's TFSMLayer returning a dict of outputs."""
    import tensorflow as tf

    return tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32))) for t in tf.nest.flatten(out)])
