"""RetraceProbe's overhead on a cached call (goal < 5%), and its cost per trace (goal O(parameters)).

Both functions trace once, then are called alternately, call by call (so
machine noise hits both alike), each call timed alone with
``time.perf_counter``. Prints the median seconds per call of each and the ratio,
then the probe's own Python work measured over a no-op.
The probed function reads a global and a closure number, so the per-call stale
check is part of what is measured.

Then the cost of EXPLAINING a trace: a 10-parameter function is
traced ``--traces`` times (one Python int parameter changes each call), and
tflab's own work per trace (`trace_from_event`: the TraceEvent's trees diffed
with the candidate earlier traces) is timed again for early and for late
traces, interleaved; the same for a 20-parameter function. O(parameters)
means late/early stays near 1 (the old engine re-parsed every earlier trace:
O(traces × parameters)) and 20-param/10-param near 2.

Usage: python benchmarks/bench_probe_overhead.py [--rounds 41] [--calls 200] [--traces 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SCALE = 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--calls", type=int, default=200, help="calls per round (default: %(default)s)")
    parser.add_argument("--traces", type=int, default=1000,
                        help="traces of the 10-parameter function (default: %(default)s)")
    args = parser.parse_args(argv)

    import tensorflow as tf

    from tflab.retrace import RetraceProbe
    from tflab.runtime import runtime_config

    print(f"configuration: {runtime_config().one_line()}")  # what the numbers below ran on

    offset = 1.0

    def body(x):
        return x * SCALE + offset

    bare = tf.function(body)
    probe = RetraceProbe(tf.function(body))
    x = tf.ones([8])
    bare(x), probe(x)  # trace both once
    assert probe.trace_count == 1 and bare.experimental_get_tracing_count() == 1
    assert len(probe._gwatch) + len(probe._cwatch) == 2  # SCALE and offset are watched

    def per_call(fn) -> float:
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn(x)
        return (time.perf_counter() - t0) / args.calls

    for _ in range(3):  # warm-up
        per_call(bare), per_call(probe)
    # Interleaved call by call, each call timed alone: the median of single
    # calls shrugs off the preemptions a shared machine adds to a batch.
    clock = time.perf_counter
    t_bare, t_probe = [], []
    for i in range(args.rounds * args.calls):
        first, second, t_first, t_second = (bare, probe, t_bare, t_probe) if i % 2 else (probe, bare, t_probe, t_bare)
        t0 = clock()
        first(x)
        t1 = clock()
        second(x)
        t2 = clock()
        t_first.append(t1 - t0)
        t_second.append(t2 - t1)
    assert probe.trace_count == 1, "a cached call must not trace"
    mb, mp = statistics.median(t_bare), statistics.median(t_probe)

    # The probe's own Python work per call, isolated: the same probe over a
    # no-op instead of its tf.function (too small to see through TF's noise above).
    def noop(v):
        return v

    own = RetraceProbe(lambda v: v * SCALE + offset)
    own(x)
    noop.python_function = noop  # the probe binds each call's arguments against it
    own.function = noop
    t_own = statistics.median(per_call(own) - per_call(noop) for _ in range(args.rounds))
    ratio = mp / mb
    print(f"cached call, median of {args.rounds * args.calls} interleaved calls each:")
    print(f"  bare tf.function   {mb * 1e6:8.2f} us/call")
    print(f"  RetraceProbe       {mp * 1e6:8.2f} us/call")
    print(f"  ratio probe/bare   {ratio:8.3f}  (overhead {100 * (ratio - 1):+.1f}%, goal < +5%)")
    print(f"  probe's own Python work {t_own * 1e6:.2f} us/call = "
          f"{100 * t_own / mb:.2f}% of a bare cached call")
    explain_cost(tf, args.traces, args.rounds)
    return 0


def _probe_with_traces(tf, n_params: int, n_traces: int):
    from tflab.retrace import RetraceProbe

    names = [f"p{i}" for i in range(n_params)]
    ns: dict = {"tf": tf}
    exec(f"def body({', '.join(names)}):\n    return {names[0]} * {names[-1]}\n", ns)
    probe = RetraceProbe(ns["body"], watch_stale=False)
    args = [tf.ones([2])] * (n_params - 1)
    for k in range(n_traces):
        probe(*args, k)  # a new Python int each call: one trace each
    assert probe.trace_count == n_traces and all(e is not None for e in probe.events)
    return probe


def explain_cost(tf, n_traces: int, rounds: int) -> None:
    """Seconds per `trace_from_event` for early vs late traces, and 10 vs 20 parameters."""
    from tflab.retrace.log import trace_from_event

    p10 = _probe_with_traces(tf, 10, n_traces)
    p20 = _probe_with_traces(tf, 20, min(n_traces, 200))
    clock = time.perf_counter

    def cost(probe, k: int) -> float:
        ev, prev = probe.events[k], probe.traces[:k]
        t0 = clock()
        trace_from_event(ev, k + 1, prev)
        return clock() - t0

    mid = len(p20.traces)
    early, late, narrow, wide = [], [], [], []
    for r in range(rounds * 5):  # interleaved: each kind in turn
        early.append(cost(p10, 10 + r % 20))
        late.append(cost(p10, n_traces - 1 - r % 20))
        narrow.append(cost(p10, mid - 1 - r % 20))
        wide.append(cost(p20, mid - 1 - r % 20))
    me, ml, mn, mw = (statistics.median(v) for v in (early, late, narrow, wide))
    print(f"explaining one trace (tflab's diff only, median of {len(early)} each):")
    print(f"  10 params, trace ~#20        {me * 1e6:8.1f} us")
    print(f"  10 params, trace ~#{n_traces:<9} {ml * 1e6:8.1f} us   late/early {ml / me:6.2f}  (goal ~1: O(parameters))")
    print(f"  10 params, trace ~#{mid:<9} {mn * 1e6:8.1f} us")
    print(f"  20 params, trace ~#{mid:<9} {mw * 1e6:8.1f} us   20/10 params {mw / mn:6.2f}  (<= 2: linear in parameters plus a fixed cost per trace)")


if __name__ == "__main__":
    sys.exit(main())
