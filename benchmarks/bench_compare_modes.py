"""Wall seconds of one `tflab.compare_modes` call (trace once per mode, distances once, one HLO compile).

Times ``compare_modes`` itself (TF already imported and warm) on two workloads:

* ``mlp``: a 3-layer tanh MLP on a [256, 512] batch, forward and backward, with
  the default HLO (``hlo=True``: the text stages and the fusion count);
* ``cnn``: a small Keras CNN's forward pass on 8 images of 64×64×3, as the
  tour's step 6 runs it (``gradients=False``, ``hlo=("optimized_hlo",)``).

Prints the median of ``--runs`` calls per workload. Compare two versions side
by side, A and B in turn, e.g. with another checkout on ``PYTHONPATH``:

    farm-bench -n 3 --vs 'env PYTHONPATH=/path/to/old python benchmarks/bench_compare_modes.py' \\
        -- python benchmarks/bench_compare_modes.py

(``farm-bench`` times the whole process; the printed medians are the calls alone.)
The ratio travels between machines, the seconds do not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="calls timed per workload (default: %(default)s)")
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    import tflab
    from tflab.runtime import runtime_config

    rng = np.random.default_rng(0)
    w = [tf.Variable(rng.standard_normal((512, 512)).astype(np.float32) * 0.05) for _ in range(3)]

    def mlp(x):
        for v in w:
            x = tf.tanh(x @ v)
        return x

    x = tf.constant(rng.standard_normal((256, 512)).astype(np.float32))
    cnn = keras.Sequential([keras.Input((64, 64, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                            keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.GlobalAveragePooling2D(),
                            keras.layers.Dense(10)])
    images = tf.constant(rng.uniform(0, 1, (8, 64, 64, 3)).astype(np.float32))

    def forward(images):
        return cnn(images, training=False)

    work = {"mlp": lambda: tflab.compare_modes(mlp, x, repeats=2),
            "cnn": lambda: tflab.compare_modes(forward, images, gradients=False, repeats=2,
                                               hlo=("optimized_hlo",), state_variables=list(cnn.variables))}
    work["mlp"]()  # warm: TF's own first-use costs are not the comparison's
    print(f"config: {runtime_config().one_line()}")
    for name, call in work.items():
        seconds = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - t0)
        print(f"{name}: compare_modes median {statistics.median(seconds):.3f} s over {args.runs} calls")


if __name__ == "__main__":
    main()
