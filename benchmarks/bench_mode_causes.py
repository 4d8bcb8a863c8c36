"""What finding a mode difference's cause costs in `tflab.compare_modes` (bisection only when modes disagree).

Times ``compare_modes`` (TF already imported and warm) with ``attribute=False``
and ``attribute=True`` on two functions:

* ``agree``: a 3-layer tanh MLP on a [256, 512] batch, forward pass: every
  mode within the bound, so no bisection runs and both times match (its
  gradients differ under XLA by ~4400 ULP in a few elements, a reduction
  order: with ``gradients=True`` that is a finding, and it is bisected);
* ``fma``: tensorflow/tensorflow#117318 (``tf.nn.batch_normalization`` of
  ``[1e15]*3`` with its exact mean and variance 0), where XLA's fused
  multiply-add gives 8.7e8 against eager's 0: the bisection saves the step
  once and runs one child process for the baseline (XLA's dump) and one per
  setting tried until eager's values come back (here the ISA cap that
  withholds FMA, tried first: found by the second child).

Prints the median of ``--runs`` calls per function and mode, and the children
the bisection started. Measured on the shared 2-core AMD EPYC (AVX2+FMA, oneDNN
off) at load average 9-12 (other jobs running), ``--runs 2``:

    agree  attribute=False  1.44 s   attribute=True   0.86 s   (no bisection: the
           difference is the order of the runs, the first one warms TF up)
    fma    attribute=False  1.14 s   attribute=True  46.0 s    (2 child processes)

The same tensorflow/tensorflow#117318 comparison at a lighter load took 9.3 s with its bisection
(``tflab.compare_modes`` in a script, 2 child processes of about 4 s each).

A child costs about one TF import and one XLA compile; the bisection is
bounded by ``attribute_seconds`` (default 120 s per mode) and each child by
60 s. The seconds do not travel between machines; the child count does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="calls timed per function and mode (default: %(default)s)")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    import tflab

    rng = np.random.default_rng(0)
    w = [tf.Variable(rng.standard_normal((512, 512)).astype(np.float32) * 0.05) for _ in range(3)]

    def mlp(x):
        for v in w:
            x = tf.tanh(x @ v)
        return x

    def normalize(x, mean, variance):
        return tf.nn.batch_normalization(x, mean, variance, None, None, 1e-3)

    x = tf.constant(rng.standard_normal((256, 512)).astype(np.float32))
    bn = (tf.constant([1e15] * 3), tf.constant(1e15), tf.constant(0.0))
    work = {"agree": (mlp, (x,)), "fma": (normalize, bn)}
    for name, (fn, call_args) in work.items():
        line = [f"{name:6s}"]
        for attribute in (False, True):
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                cmp = tflab.compare_modes(fn, *call_args, repeats=2, hlo=False, attribute=attribute,
                                          gradients=name != "agree")
                times.append(time.perf_counter() - t0)
            line.append(f"attribute={attribute!s:5s} {statistics.median(times):6.2f} s")
        c = cmp.cause
        line.append(f"({len(c.evidence.get('trials', [])) + 1} child processes)" if c is not None
                    else "(no bisection)")
        print("  ".join(line))


if __name__ == "__main__":
    main()
