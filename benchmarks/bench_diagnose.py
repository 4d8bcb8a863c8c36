"""diagnose() on a healthy function, against get_concrete_function plus one call. Goal: <= 10% over.

A healthy function's `tflab.diagnose` is one trace plus one call: a fresh
`tf.function` (so it really traces), ``get_concrete_function`` on TensorSpecs,
then the ConcreteFunction run once on materialized tensors. The baseline does
exactly that by hand with tensors made beforehand. The two run alternately,
round by round (so machine noise hits both alike); each round is timed alone
with ``time.perf_counter``. Prints the median seconds of each and the ratio.

The function has what diagnose's bookkeeping touches: a ``tf.range`` loop (a
While op) and a tensor ``if`` (an If op), so AutoGraph's operators run through
the statement-map counter.

Usage: python benchmarks/bench_diagnose.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GOAL = 1.10


def step(x, w, n):
    h = tf.nn.relu(x @ w)
    for _ in tf.range(n):
        h = h * 0.5 + 1.0
    if tf.reduce_sum(h) > 0:
        h = -h
    return tf.reduce_mean(h, axis=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default: %(default)s)")
    args = parser.parse_args(argv)

    global tf
    import tensorflow as tf

    from tflab.diagnosis import diagnose

    specs = (tf.TensorSpec([None, 16], tf.float32), tf.TensorSpec([16, 8], tf.float32),
             tf.TensorSpec([], tf.int32))
    values = (tf.ones([2, 16]), tf.ones([16, 8]), tf.constant(3))

    def baseline() -> None:
        concrete = tf.function(step).get_concrete_function(*specs)
        concrete(*values)

    def diagnosed() -> None:
        d = diagnose(step, *specs)
        assert d.ok, d.to_text()

    for _ in range(2):  # warm-up: AutoGraph's conversion cache, TF's op registry
        baseline(), diagnosed()
    t_base, t_diag = [], []
    for i in range(args.rounds):
        order = ((baseline, t_base), (diagnosed, t_diag)) if i % 2 else ((diagnosed, t_diag), (baseline, t_base))
        for fn, sink in order:
            t0 = time.perf_counter()
            fn()
            sink.append(time.perf_counter() - t0)
    mb, md = statistics.median(t_base), statistics.median(t_diag)
    ratio = md / mb
    print(f"get_concrete_function + call  median {mb * 1e3:8.2f} ms over {args.rounds} rounds")
    print(f"diagnose                      median {md * 1e3:8.2f} ms")
    print(f"ratio diagnose / baseline     {ratio:.3f}  (goal <= {GOAL:.2f}: "
          f"{'met' if ratio <= GOAL else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
