"""Tour step 4: stabilize the training step and the inference function."""

from __future__ import annotations


def run(ctx) -> None:
    from tflab.signatures import stabilize
    from tflab.stabilization import count_traces, stabilization_report
    from tflab.models import (example_batch, make_train_step, model_input_spec, step4_extra_batch,
                              tour_dataset, tour_optimizer)

    spec = ctx.shared.get("input_spec") or model_input_spec(ctx.model)
    num_classes = int(ctx.model.outputs[0].shape[-1]) if getattr(ctx.model, "outputs", None) else 1

    # Inference: plain vs reduce_retracing vs input_signature over batch sizes 4, 4, 2, 1.
    def serve(x):
        return ctx.model(x, training=False)

    calls = [example_batch(spec, b, seed=i) for i, b in enumerate((4, 4, 2, 1))]
    rep = stabilization_report(serve, calls)
    ctx.line("inference over batch sizes 4, 4, 2, 1:")
    for v in rep.variants.values():
        relaxed = v.traced_specs[-1] if v.traced_specs else ""
        ctx.line(f"  {v.variant:17s} {v.traces} traces   (last traced {relaxed})")
    ctx.line(f"  max |stabilized - plain| = {rep.max_abs_error:.3g}")

    # Training: step 2's optimizer when it ran (its slot variables exist, so no
    # variable-creation re-trace: one trace in all, and ~20 s less tour time; the
    # fresh-optimizer case, 2 traces, is case T10 in tests/signatures/test_stabilize.py),
    # over the tf.data pipeline with the smaller last batch, then one more batch size.
    optimizer = ctx.shared.get("optimizer") or tour_optimizer()
    log: list[str] = []
    step = stabilize(count_traces(make_train_step(ctx.model, optimizer), log),
                     examples=tour_dataset(spec, num_classes))
    sizes = []
    first_call = None
    for x, y in tour_dataset(spec, num_classes):
        step(x, y)
        sizes.append(int(x.shape[0]))
        first_call = len(log) if first_call is None else first_call
    x3, y3 = step4_extra_batch(spec, num_classes)
    step(x3, y3)
    sizes.append(3)
    ctx.line(f"training step stabilized with {step.input_signature[0]}:")
    why = (" (the second is TF's re-trace after the optimizer created its slot variables)"
           if first_call == 2 else "")
    ctx.line(f"  batch sizes {sizes}: {len(log)} traces: {first_call} on the first call{why}, "
             f"{len(log) - first_call} for every later batch size")
    ctx.report["stabilize"] = {
        "inference": rep.to_dict(),
        "train_step": {"input_signature": [str(s) for s in step.input_signature],
                       "batch_sizes": sizes, "traces": len(log), "first_call_traces": first_call,
                       "traced_specs": log},
    }
