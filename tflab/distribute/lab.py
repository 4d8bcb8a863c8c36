"""The single-machine lesson, measured in a fresh process: `mirrored_lab` and `run_lab_subprocess`.

Setup: ``MirroredStrategy(["/cpu:0", "/cpu:1"])`` and a step
``step(x, y) = strategy.run(replica_step, args=(x, y))`` over
``strategy.experimental_distribute_dataset(ds.batch(4))`` with 10 examples:
global batches 4, 4, 2, per replica 2, 2, 1. The last, smaller batch changes
the per-replica shapes, so the step traces again; ``dist_dataset.element_spec``
(a ``PerReplicaSpec`` with ``None`` batch dims, ``input_lib.py``) as the
``input_signature`` gives one trace.
"""

from __future__ import annotations

from typing import Callable

from tflab.distribute.per_device import inspect_distributed
from tflab.distribute.probe import DistributedRetraceProbe
from tflab.distribute.processes import run_children, worker_argv
from tflab.distribute.strategies import lab_dataset, make_replica_step, mirrored_strategy


def run_lab_subprocess(export: bool = True, timeout: float = 120.0,
                       progress: Callable[[str], None] | None = None) -> dict:
    """Runs `mirrored_lab` in a fresh Python process (2 logical CPUs) and returns its report.

    Args:
        export: also train, save and round-trip a model (SavedModel and TFLite).
        timeout: seconds; the process is stopped past it.
        progress: called with one line when the lab finishes.

    Returns:
        `mirrored_lab`'s JSON-ready dict.

    Raises:
        WorkerError: the lab process crashed or ran past ``timeout``.

    Example:
        >>> lab = run_lab_subprocess(export=False)
        >>> lab["plain"]["trace_count"], lab["plain"]["replica_runs"]
        (2, 4)
    """
    return run_children([("mirrored lab", worker_argv("mirrored"), {"TFLAB_LAB_EXPORT": int(bool(export))})],
                        timeout, progress)[0]


def _replica_events(probe: DistributedRetraceProbe) -> list[dict]:
    """Each replica-body run with the TraceEvent it carries, checked against the probe's own event."""
    events = probe.events
    out = []
    for r in probe.replica_runs:
        own = events[r.trace - 1] if r.event is not None and 0 < r.trace <= len(events) else None
        out.append({"trace": r.trace, "replica": r.replica,
                    "context": r.event.replica if r.event is not None else None,
                    "same_trace_event": own is not None and r.event.lookup_type is own.lookup_type
                    and r.event.function_id == own.function_id == id(probe.function)})
    return out


def mirrored_lab(export_dir: str | None = None) -> dict:
    """The single-machine lesson, measured: call it in a fresh process (it configures 2 logical CPUs).

    Args:
        export_dir: when given, a Keras model trained under the strategy is
            saved there with `tflab.save_and_reload` and converted with
            `tflab.tflite_roundtrip` (float), and the SavedModel's op types are
            searched for distribution ops.

    Returns:
        A JSON-ready dict: ``plain`` (traces, replica bodies, per-trace
        counts, reasons, probe text, the TraceEvent of each replica run),
        ``element_spec`` (the same with ``input_signature=dist_dataset.element_spec``),
        ``stabilize``, ``inspect``, ``drop_remainder``, and ``export`` when asked.
    """
    import numpy as np

    strategy = mirrored_strategy(2)
    import tensorflow as tf

    from tflab.retrace.expect import expect_traces
    from tflab.signatures import stabilize

    Probe = DistributedRetraceProbe
    with strategy.scope():
        w = tf.Variable(tf.ones([4, 1]), name="w")
    replica_step = make_replica_step(w)

    def step(x, y):
        return strategy.run(replica_step, args=(x, y))

    dist = strategy.experimental_distribute_dataset(lab_dataset())
    out: dict = {"replicas_in_sync": strategy.num_replicas_in_sync,
                 "devices": list(strategy.extended.worker_devices)}

    # 1. plain: one trace per per-replica shape.
    probe = Probe(step)
    per_replica_shapes = []
    for x, y in dist:
        per_replica_shapes.append([list(v.shape) for v in strategy.experimental_local_results(x)])
        probe(x, y)
    out["per_replica_shapes"] = per_replica_shapes
    out["plain"] = probe.to_dict() | {"text": probe.to_text(),
                                     "reason_kinds": [r.kind for t in probe.traces for r in t.details],
                                     "replica_events": _replica_events(probe)}

    # 2. input_signature=dist_dataset.element_spec: one trace, one body per replica.
    sig_probe = Probe(tf.function(step, input_signature=dist.element_spec))
    with expect_traces(sig_probe, at_most=1) as seen:
        for x, y in dist:
            sig_probe(x, y)
    out["element_spec"] = sig_probe.to_dict() | {
        "text": sig_probe.to_text(), "spec": repr(dist.element_spec), "expect_traces_count": seen.count,
        "component_specs": [[s.shape.as_list() for s in tf.nest.flatten(spec, expand_composites=True)]
                            for spec in dist.element_spec]}

    # 3. stabilize(examples=dist_dataset): infers the PerReplicaSpec signature.
    stable = stabilize(step, examples=dist)
    # A given PerReplicaSpec signature is checked against distributed examples too.
    given = stabilize(step, input_signature=list(dist.element_spec), examples=dist)
    st_probe = Probe(stable)
    for x, y in dist:
        st_probe(x, y)
    out["stabilize"] = {"input_signature": repr(stable.input_signature),
                        "equals_element_spec": tuple(stable.input_signature) == tuple(dist.element_spec),
                        "given_signature_accepted": tuple(given.input_signature) == tuple(dist.element_spec),
                        "traces": st_probe.trace_count, "replica_runs": st_probe.replica_run_count}

    # 4. expect_traces fails on the plain step, naming per-replica shapes.
    fresh = Probe(step)
    try:
        with expect_traces(fresh, at_most=1):
            for x, y in dist:
                fresh(x, y)
        out["expect_traces_error"] = None
    except AssertionError as e:
        out["expect_traces_error"] = str(e)

    # expect_traces on the tf.function itself reads TF's trace log: same reasons.
    plain_fn = tf.function(step)
    try:
        with expect_traces(plain_fn, at_most=1):
            for x, y in dist:
                plain_fn(x, y)
        out["expect_traces_tf_function_error"] = None
    except AssertionError as e:
        out["expect_traces_tf_function_error"] = str(e)

    # 5. drop_remainder=True: the last partial batch is dropped, so one shape, one trace.
    dr_probe = Probe(step)
    for x, y in strategy.experimental_distribute_dataset(lab_dataset(drop_remainder=True)):
        dr_probe(x, y)
    out["drop_remainder"] = {"traces": dr_probe.trace_count, "replica_runs": dr_probe.replica_run_count}

    # 6. trace_and_inspect per device.
    rep = inspect_distributed(tf.function(step), *dist.element_spec)
    out["inspect"] = rep.to_dict() | {"text": rep.to_text()}
    components = strategy.experimental_local_results(w)
    out["weights_after_training"] = [float(v) for v in np.asarray(components[0]).ravel()]
    out["weights_mirrored_equal"] = all(np.array_equal(components[0].numpy(), c.numpy()) for c in components)

    if export_dir is not None:
        from tflab.distribute.export import export_after_distributed_training

        out["export"] = export_after_distributed_training(strategy, export_dir)
    return out


def lab_text(report: dict) -> str:
    """The readable form of `mirrored_lab`'s report (as `run_lab_subprocess` returns it)."""
    shapes = " ".join("/".join(str(tuple(s)) for s in step) for step in report["per_replica_shapes"])
    lines = [f"MirroredStrategy over {report['replicas_in_sync']} logical CPUs; per-replica x shapes "
             f"by step: {shapes}",
             "plain @tf.function step:"]
    lines += ["  " + ln for ln in report["plain"]["text"].splitlines()]
    es = report["element_spec"]
    lines.append(f"input_signature=dist_dataset.element_spec: {es['trace_count']} trace, "
                 f"{es['replica_runs']} replica bodies ({es['replica_summary']})")
    st = report["stabilize"]
    lines.append(f"stabilize(step, examples=dist_dataset): {st['traces']} trace, signature "
                 f"{'== element_spec' if st['equals_element_spec'] else st['input_signature']}")
    lines.append(f"drop_remainder=True: {report['drop_remainder']['traces']} trace")
    lines += report["inspect"]["text"].splitlines()
    ex = report.get("export")
    if ex:
        dist_ops = ", ".join(ex["distribution_ops"]) or "none"
        lines.append(f"export after training ({'/'.join(ex['variable_types'])} weights): SavedModel "
                     f"{'bit-exact' if ex['saved_model_bit_exact'] else 'NOT bit-exact'}; TFLite max |Δ| "
                     f"{ex['tflite_max_abs_error']:.3g} {'<=' if ex['tflite_within_bound'] else '>'} "
                     f"bound {ex['tflite_bound']:.3g}; distribution ops in the SavedModel: {dist_ops}")
    return "\n".join(lines)
