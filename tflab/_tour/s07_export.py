"""Tour steps 7–8: export the model as a SavedModel and four TFLite variants, each checked."""

from __future__ import annotations

import os


def run(ctx) -> None:
    from tflab.export import export_model
    from tflab.litert.records import variant_line, variant_table

    source = ctx.model_source
    # A user's SavedModel folder is exported from the folder itself (the tour
    # wraps it in a TFSMLayer, which is not a model to save).
    model = source if source != "default" and os.path.isdir(source) else ctx.model
    name = "MobileNetV3Small (tour model)" if source == "default" else source
    # Converting in worker processes isolates converter aborts (and lets this process compute the
    # bounds' gradients meanwhile). In the tour's second process the process is the isolation: an
    # abort ends it, and the tour runs this section again, isolated; converting there spares the
    # two workers' TensorFlow imports and SavedModel loads.
    # The int8 kept-float fix costs one more calibration conversion: `tflab export` measures it.
    report = export_model(model, ctx.out_dir / "export", force=True, isolate=not ctx.in_second_process,
                          progress=ctx.progress, model_name=name, keep_float=False)
    ctx.shared["export_report"] = report  # the --html page's variants table
    sm = report.saved_model
    ctx.line(f"SavedModel: {'bit-exact' if sm.bit_exact else 'NOT bit-exact'} over {sm.batch_count} batches "
             f"({', '.join(sm.signatures)}) -> {ctx.final_path(report.out)}")
    for line in variant_table(report.variants).splitlines():
        ctx.line(line)
    for q, v in report.variants.items():  # the verdict: every op against its float reference
        if v.check is not None and v.check.per_op is not None:
            ctx.line(f"{q}: {variant_line(v.check)}")
    seen = set()
    for q, v in report.variants.items():
        if v.check is None:
            continue
        for note in v.check.notes:
            if note not in seen:
                seen.add(note)
                ctx.line(f"note ({q}): {note}")
    if report.seconds > 60:
        ctx.line(f"this section took {report.seconds:.0f} s (> 60 s): TFLite conversion dominates, "
                 f"see benchmarks/bench_export.py")
    ctx.report["export"] = {
        "out": report.out,
        "seconds": round(report.seconds, 2),
        "saved_model_bit_exact": sm.bit_exact,
        "variants": {
            q: {"status": v.status, "error": v.error, "convert_seconds": v.convert_seconds,
                **({} if v.check is None else {
                    "size_bytes": v.check.size_bytes, "size_ratio": v.check.size_ratio,
                    "bit_exact": v.check.bit_exact, "max_abs_error": v.check.max_abs_error,
                    "bound": v.check.bound, "within_bound": v.check.within_bound,
                    "vacuous_outputs": list(v.check.vacuous_outputs),  # bound >= range: cannot fail
                    "argmax_agreement": min((o.argmax_agreement for o in v.check.outputs.values()
                                             if o.argmax_agreement is not None), default=None),
                    "op_counts": v.check.op_counts, "runtime": v.check.runtime,
                    "ok": v.check.ok,  # per-op verdict (None: the per-op check did not run)
                    **({} if v.check.per_op is None else {
                        "ops_checked": v.check.per_op.checked, "ops_outside": len(v.check.per_op.outside),
                        "ops_unchecked": v.check.per_op.unchecked})})}
            for q, v in report.variants.items()},
    }
