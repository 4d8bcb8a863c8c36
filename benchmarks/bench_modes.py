"""Eager vs graph vs XLA speed of the tour model's training step on CPU.

The tour model (MobileNetV3Small, 96×96×3, 10 classes, random weights) trains
one step: forward in training mode, sparse categorical cross-entropy,
`tf.GradientTape` gradients, and a plain SGD update (Keras' SGD optimizer,
built before timing so no variable is created inside the compiled function).
Prints, from one run on this machine:

* the one-off cost of the first call: trace (graph) and trace + XLA compile
  (XLA), minus one warm call, in seconds and as a multiple of a warm call;
* per-call median seconds in each mode, and the ratios graph vs eager and
  XLA vs graph (> 1 means the second one is faster).

Calls are interleaved round by round (eager, graph, XLA, eager, …) so machine
noise hits all modes alike; the ratios travel, the absolute seconds do not.

Usage: ``python benchmarks/bench_modes.py [--batch 8] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="images per step (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="warm calls timed per mode (default: %(default)s)")
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    from tflab._io.progress import Progress
    from tflab.runtime import runtime_config
    from tflab.tour import build_default_model, make_train_step

    print(f"configuration: {runtime_config().one_line()}")  # what the numbers below ran on

    progress = Progress("bench_modes", total=5)
    progress("building MobileNetV3Small")
    model = build_default_model()
    optimizer = keras.optimizers.SGD(learning_rate=1e-3)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(0, 255, (args.batch, 96, 96, 3)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, args.batch))

    step = make_train_step(model, optimizer)
    modes = {"eager": step, "graph": tf.function(step), "xla": tf.function(step, jit_compile=True)}

    first: dict[str, float] = {}
    for name, fn in modes.items():
        progress(f"first call, {name}" + (" (trace + XLA compile)" if name == "xla" else ""))
        t0 = time.perf_counter()
        fn(x, y).numpy()
        first[name] = time.perf_counter() - t0

    progress(f"{args.rounds} interleaved rounds")
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, fn in modes.items():
            t0 = time.perf_counter()
            fn(x, y).numpy()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}

    print(f"\ntraining step, MobileNetV3Small, batch {args.batch}, CPU, "
          f"{args.rounds} warm calls per mode (median)")
    print(f"{'mode':6s} {'first call s':>13s} {'one-off s':>10s} {'= warm calls':>13s} {'per call s':>11s}")
    for name in modes:
        one_off = first[name] - med[name]
        print(f"{name:6s} {first[name]:13.2f} {one_off:10.2f} {one_off / med[name]:13.1f} {med[name]:11.4f}")
    print(f"graph vs eager: {med['eager'] / med['graph']:.2f}× per call")
    print(f"XLA vs graph:   {med['graph'] / med['xla']:.2f}× per call")
    print(f"XLA one-off compile vs graph one-off trace: "
          f"{(first['xla'] - med['xla']) / max(first['graph'] - med['graph'], 1e-9):.1f}×")
    calls = (first["xla"] - med["xla"]) - (first["graph"] - med["graph"])
    gain = med["graph"] - med["xla"]
    if gain > 0:
        print(f"XLA's extra compile pays back after {calls / gain:.0f} steps")
    else:
        print("XLA is not faster per call here, so its compile never pays back on this CPU")


if __name__ == "__main__":
    main()
