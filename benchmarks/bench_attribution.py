"""What the root-cause attribution adds to `compare_precisions`: the plain comparison's time beside it.

`compare_precisions` attributes a policy's disagreement with float32 only when
the two disagree (`tflab.precision.causes.disagree`); the attribution traces
the policy's run, float32's and float64's (forward and backward, every float
op output kept) and re-evaluates every op alone in float64
(`tflab.attribution.engine`). Two functions, each in a healthy version (no
disagreement: nothing is attributed) and a planted one (an overflow inside the
graph, as in tensorflow/tensorflow#47156):

* ``small``: an instance normalization of a [2, 16] input (~40 ops with the
  backward pass);
* ``deep``: 12 blocks of dense -> instance norm -> tanh on [8, 32]
  (~200 forward ops; about 500 with the backward pass); planted: inputs ~300,
  whose squared deviations overflow float16 in the first block.

Each configuration runs ``--runs`` times after a warm-up; the best time is
printed, with the ratio "attributed / plain" (the planted run against the
healthy run of the same function, same policies). Goal: under 3x.

Usage: ``python benchmarks/bench_attribution.py [--runs N] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tflab  # noqa: E402


def small(x):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-3)


_W = [tf.constant(np.random.default_rng(i).normal(0, 0.2, (32, 32)).astype(np.float32)) for i in range(12)]


def deep(x):
    """Healthy: each block's input is the tanh of a normalized value, within [-1, 1]."""
    h = x
    for w in _W:
        h = h @ tf.cast(w, h.dtype)
        mean = tf.reduce_mean(h, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.square(h - mean), axis=-1, keepdims=True)
        h = tf.tanh((h - mean) * tf.math.rsqrt(var + 1e-3))
    return h


def _best(fn, runs: int) -> tuple[float, object]:
    fn()
    best, out = float("inf"), None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for name, fn, shape in (("small", small, (2, 16)), ("deep", deep, (8, 32))):
        healthy = tf.constant(rng.normal(0, 3, shape).astype(np.float32))
        planted = tf.constant(rng.normal(0, 300, shape).astype(np.float32))
        plain, r0 = _best(lambda: tflab.compare_precisions(fn, healthy, policies="mixed_float16"), args.runs)
        attributed, r1 = _best(lambda: tflab.compare_precisions(fn, planted, policies="mixed_float16"), args.runs)
        p0, p1 = r0.policies["mixed_float16"], r1.policies["mixed_float16"]
        att = p1.attribution
        rows.append({"function": name, "plain_seconds": plain, "attributed_seconds": attributed,
                     "ratio": attributed / plain, "ops_judged": att.ops_run if att else 0,
                     "attribution_seconds": att.seconds if att else 0.0,
                     "healthy_cause": p0.cause.kind if p0.cause else None,
                     "planted_cause": p1.cause.line_text if p1.cause else None})
    if args.json:
        print(json.dumps({"config": tflab.runtime_config().one_line(), "rows": rows}, indent=1))
        return
    print(tflab.runtime_config().one_line())
    for r in rows:
        print(f"{r['function']:6s} plain {r['plain_seconds']:.3f}s  attributed {r['attributed_seconds']:.3f}s  "
              f"ratio {r['ratio']:.2f}x  ({r['ops_judged']} ops judged in {r['attribution_seconds']:.3f}s; "
              f"healthy cause: {r['healthy_cause']})")
        print(f"       {r['planted_cause']}")


if __name__ == "__main__":
    main()
