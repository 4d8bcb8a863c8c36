"""CPU seconds of one ``tflab.export_model``, its converter workers forked from one server vs fresh, interleaved.

`tflab.export` converts the TFLite variants in worker processes, one per schedulable CPU. Each
fresh worker pays one ``import tensorflow`` (~5 s of CPU) before it converts anything; forked from
one `tflab.process.forks.ForkServer` that imported TF and its converter once, they pay it once
between them. ``TFLAB_FORK_WORKERS=0`` is the fresh side.

Each round runs both sides in alternating order, each in a fresh interpreter that exports the same
small Keras model (Conv2D → GAP → Dense on 16×16×3, the four variants) and waits for every helper
it started to end; the measure is that interpreter's user+system CPU with all its descendants
(``resource.getrusage(RUSAGE_CHILDREN)`` around ``subprocess.run``; each level reaps its own
children, so the forked workers count through their server). The flatbuffers are compared byte
for byte between the sides. Prints the median per side and the ratio fresh/forked.

Usage: ``python benchmarks/bench_export_workers.py [--rounds 3]``
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import os, sys, time
import keras, tflab
keras.utils.set_random_seed(0)
inp = keras.Input((16, 16, 3))
x = keras.layers.Conv2D(4, 3, activation="relu")(inp)
x = keras.layers.GlobalAveragePooling2D()(x)
m = keras.Model(inp, keras.layers.Dense(5, activation="softmax")(x))
r = tflab.export_model(m, sys.argv[1])
assert r.ok, r.to_text()
end = time.monotonic() + 30  # the pool's threads reap the workers and close the server just after
while os.popen(f"pgrep -P {os.getpid()}").read().split() and time.monotonic() < end:
    time.sleep(0.05)
"""


def run(fork: bool, out: str) -> tuple[float, dict]:
    """(CPU seconds of one export in a fresh interpreter, its flatbuffers' SHA-256 by file)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TFLAB_FORK_WORKERS": "1" if fork else "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", CHILD, out], env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    digests = {f: hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest()
               for f in sorted(os.listdir(out)) if f.endswith(".tflite")}
    return cpu, digests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    seen: dict[bool, list[float]] = {True: [], False: []}
    digests: dict[bool, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for fork in ((True, False) if i % 2 == 0 else (False, True)):
                cpu, digests[fork] = run(fork, os.path.join(tmp, f"r{i}-{int(fork)}"))
                seen[fork].append(cpu)
                print(f"round {i + 1}: {'forked' if fork else 'fresh '} workers {cpu:6.2f} CPU s", flush=True)
    forked, fresh = statistics.median(seen[True]), statistics.median(seen[False])
    same = digests[True] == digests[False] and len(digests[True]) == 4
    print(f"export, median CPU s: forked workers {forked:.2f}, fresh workers {fresh:.2f}, "
          f"fresh/forked {fresh / forked:.2f}; flatbuffers byte-identical: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
