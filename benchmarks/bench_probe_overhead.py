"""RetraceProbe's overhead on a cached call, against the bare tf.function. Goal: < 5%.

Both functions trace once, then are called alternately (interleaved rounds, so
machine noise hits both alike); each round times a batch of calls with
``time.perf_counter``. Prints the median seconds per call of each and the ratio.
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
    t_bare, t_probe = [], []
    for i in range(args.rounds):
        # alternate which goes first so neither always gets the warmer cache
        if i % 2:
            t_bare.append(per_call(bare))
            t_probe.append(per_call(probe))
        else:
            t_probe.append(per_call(probe))
            t_bare.append(per_call(bare))
    assert probe.trace_count == 1, "a cached call must not trace"
    mb, mp = statistics.median(t_bare), statistics.median(t_probe)
    ratio = mp / mb
    print(f"cached call, median over {args.rounds} rounds x {args.calls} calls:")
    print(f"  bare tf.function   {mb * 1e6:8.2f} us/call")
    print(f"  RetraceProbe       {mp * 1e6:8.2f} us/call")
    print(f"  ratio probe/bare   {ratio:8.3f}  (overhead {100 * (ratio - 1):+.1f}%, goal < +5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
