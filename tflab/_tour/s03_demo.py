"""Tour step 3: the classic retrace triggers, measured, with their preventions."""

from __future__ import annotations


def run(ctx) -> None:
    from tflab.retrace.demo import demonstrate_retracing

    demo = demonstrate_retracing()
    for line in demo.to_text(compact=True).splitlines():
        ctx.line(line)
    closure = demo["changed closure"]
    ctx.line(f"changed closure: {closure.observed.split('; closure')[0]}")
    ctx.report["demonstrate_retracing"] = {
        "tf_version": demo.tf_version,
        "counts": {r.trigger: {"traces": r.traces, "tf_tracing_count": r.tf_tracing_count,
                               "prevention": r.prevention, "traces_after": r.traces_after}
                   for r in demo.results},
        "changed_closure": closure.observed,
        "variable_on_later_call": demo["tf.Variable on a later call"].observed,
    }
