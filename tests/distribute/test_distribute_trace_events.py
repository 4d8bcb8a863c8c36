"""Issues 20/23: the distributed probe consumes `tflab.retrace.TraceEvent`, and the ``StrategyBase.run``
hook is a context manager of `tflab._tf.distribute` that restores TF, also on error.

In this process (TF initialized, one CPU) a ``MirroredStrategy(["/cpu:0"])`` has one replica: enough
to show where the counts come from. The two-replica numbers are measured in a fresh process
(tests/distribute/test_distribute_lab.py, the lab fixture).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_replica():
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    # 5 rows in batches of 2: shapes (2, 3), (2, 3), (1, 3): two traces.
    data = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(tf.ones([5, 3])).batch(2))

    def double(x):
        return x * 2.0

    def step(x):
        return strategy.run(double, args=(x,))

    return strategy, step, list(data)


def test_replica_runs_carry_the_probes_trace_events(one_replica):
    from tflab.distribute import DistributedRetraceProbe

    strategy, step, batches = one_replica
    probe = DistributedRetraceProbe(step)
    for x in batches:
        probe(x)
    # TF's own count: 2 cache entries; the probe's TraceEvents: 2.
    assert probe.trace_count == probe.tf_tracing_count == len(probe.events) == 2
    assert probe.replica_traces == {0: probe.tf_tracing_count}
    assert [(r.trace, r.replica, r.function_name) for r in probe.replica_runs] == [(1, 0, "double"), (2, 0, "double")]
    for r in probe.replica_runs:
        own = probe.events[r.trace - 1]
        assert r.event.lookup_type is own.lookup_type and r.event.function_id == own.function_id
        assert r.event.replica == "MirroredStrategy replica 0"
    assert probe.replica_summary == "double ran 2× in 2 trace(s): 1× per trace, once per replica (replicas 0)"


def test_the_per_replica_count_is_read_from_the_events(one_replica, monkeypatch):
    """Planted: a probe that sees no TraceEvent counts no replica trace, though TF traced twice."""
    from tflab.distribute import DistributedRetraceProbe

    strategy, step, batches = one_replica
    monkeypatch.setattr(DistributedRetraceProbe, "events", property(lambda self: []))
    probe = DistributedRetraceProbe(step)
    for x in batches:
        probe(x)
    assert probe.tf_tracing_count == 2 and probe.replica_run_count == 2
    assert probe.replica_traces == {} and {r.trace for r in probe.replica_runs} == {0}


def test_an_eager_strategy_run_is_counted_without_a_trace(one_replica):
    from tflab.distribute import ReplicaRun, count_replica_runs

    strategy, _, batches = one_replica
    runs: list[ReplicaRun] = []
    with count_replica_runs(runs.append):
        strategy.run(lambda x: x + 1.0, args=(batches[0],))
    assert [(r.trace, r.replica, r.event) for r in runs] == [(0, 0, None)]


def test_the_strategy_run_hook_is_restored_also_on_error():
    import tensorflow as tf

    from tflab._tf.distribute import strategy_run_is_patched, wrapping_strategy_run

    original = tf.distribute.Strategy.run
    seen = []
    with pytest.raises(RuntimeError, match="planted"):
        with wrapping_strategy_run(lambda fn: seen.append("outer") or fn):
            with wrapping_strategy_run(lambda fn: seen.append("inner") or fn):
                assert strategy_run_is_patched()
            assert strategy_run_is_patched()  # the outer block is still open
            tf.distribute.get_strategy().run(lambda: tf.constant(1.0))
            raise RuntimeError("planted")
    assert seen == ["outer"]
    assert not strategy_run_is_patched() and tf.distribute.Strategy.run is original
