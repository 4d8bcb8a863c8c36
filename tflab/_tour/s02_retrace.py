"""Tour step 2: RetraceProbe on a real training step fed by tf.data (batches 4, 4, 2)."""

from __future__ import annotations


def run(ctx) -> None:
    from tflab.retrace.probe import RetraceProbe
    from tflab.models import make_train_step, model_input_spec, tour_dataset, tour_optimizer

    spec = ctx.shared.get("input_spec") or model_input_spec(ctx.model)
    num_classes = int(ctx.model.outputs[0].shape[-1]) if getattr(ctx.model, "outputs", None) else 1
    optimizer = tour_optimizer()  # SGD with momentum: slot variables, so TF's variable-creation re-trace
    ctx.shared["optimizer"] = optimizer  # step 4 reuses it: its slot variables exist by then
    probe = RetraceProbe(make_train_step(ctx.model, optimizer))
    ctx.shared["probe"] = probe  # the --html page's trace timeline
    sizes, losses = [], []
    for x, y in tour_dataset(spec, num_classes):
        ctx.progress(f"training step on a batch of {int(x.shape[0])}")
        losses.append(float(probe(x, y)))
        sizes.append(int(x.shape[0]))
    ctx.line(f"train_step over tf.data batches {sizes}: {probe.trace_count} traces "
             f"(TF's own count: {probe.tf_tracing_count}); losses {', '.join(f'{v:.3f}' for v in losses)}")
    for t in probe.traces:
        for text in t.to_text().splitlines():
            ctx.line("  " + text)
    ctx.report["retrace"] = {"batch_sizes": sizes, "losses": losses, **probe.to_dict()}
