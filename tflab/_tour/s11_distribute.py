"""Tour step 11: the training step under MirroredStrategy (2 logical CPUs), in a fresh process.

The tour's process has initialized TF already, and logical devices can only be
configured before that, so `tflab.distribute.lab.run_lab_subprocess` measures the
lab's small ``strategy.run`` step in a new process (no export: ``tflab
distribute`` adds the export after training and the two-worker run).
"""

from __future__ import annotations


def run(ctx) -> None:
    from tflab.distribute.lab import lab_text, run_lab_subprocess

    background = ctx.shared.get("distribute_lab")  # started at the tour's start (tflab._tour.background)
    if background is None:
        ctx.progress("MirroredStrategy lab in a fresh process (2 logical CPUs)")
        lab = run_lab_subprocess(export=False, timeout=90)
    else:
        if not background.done():
            ctx.progress("waiting for the MirroredStrategy lab (a fresh process started at the tour's start)")
        lab = background.result()
    for line in lab_text(lab).splitlines():
        ctx.line(line)
    ctx.line("two MultiWorkerMirroredStrategy workers on 127.0.0.1: tflab distribute --mode workers")
    ctx.report["distribute"] = {
        "replicas_in_sync": lab["replicas_in_sync"],
        "per_replica_shapes": lab["per_replica_shapes"],
        "plain": {k: lab["plain"][k] for k in ("trace_count", "replica_runs", "replica_runs_per_trace",
                                               "replica_summary")}
        | {"reasons": [r for t in lab["plain"]["traces"] for r in t["reasons"]]},
        "element_spec": {k: lab["element_spec"][k] for k in ("trace_count", "replica_runs", "spec")},
        "stabilize": lab["stabilize"],
        "drop_remainder": lab["drop_remainder"],
        # report.json's key for the step's name stays "function" (tour facts, tests/data/tour).
        "inspect": {k: v for k, v in lab["inspect"].items() if k not in ("text", "config")}
        | {"function": lab["inspect"]["function_name"]},
    }
