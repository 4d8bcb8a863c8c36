"""RetraceProbe's overhead on a cached call, against the bare tf.function. Goal: < 5%.

Both functions trace once, then are called alternately, call by call (so
machine noise hits both alike), each call timed alone with
``time.perf_counter``. Prints the median seconds per call of each and the ratio,
then the probe's own Python work measured over a no-op.
The probed function reads a global and a closure number, so the per-call stale
check is part of what is measured.

Usage: python benchmarks/bench_probe_overhead.py [--rounds 41] [--calls 200]
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
    own.function = noop
    t_own = statistics.median(per_call(own) - per_call(noop) for _ in range(args.rounds))
    ratio = mp / mb
    print(f"cached call, median of {args.rounds * args.calls} interleaved calls each:")
    print(f"  bare tf.function   {mb * 1e6:8.2f} us/call")
    print(f"  RetraceProbe       {mp * 1e6:8.2f} us/call")
    print(f"  ratio probe/bare   {ratio:8.3f}  (overhead {100 * (ratio - 1):+.1f}%, goal < +5%)")
    print(f"  probe's own Python work {t_own * 1e6:.2f} us/call = "
          f"{100 * t_own / mb:.2f}% of a bare cached call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
