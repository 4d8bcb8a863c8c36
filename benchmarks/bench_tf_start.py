"""CPU seconds of one TensorFlow start, with the installed ml_dtypes and with another, interleaved.

Every ``tflab VERB`` runs its verb in a fresh Python process (`tflab.cli.supervise`), and so does
every child that runs user code apart from the verb's own (export's conversion workers, the
distribute lab's processes, the tour's lanes): each pays one ``import tensorflow``. TF imports
``ml_dtypes`` (bfloat16, float8, int4 for numpy); ml_dtypes 0.7.0's extension module takes over a
second of CPU to initialize with numpy 2.4, where 0.6.0 and 0.5.4 take milliseconds, so tflab's
dependencies exclude 0.7.0 (``pyproject.toml``).

Each round runs, in alternating order, a fresh interpreter per side: ``import ml_dtypes`` alone, then
``import tensorflow``; user+system CPU of the child (``resource.getrusage(RUSAGE_CHILDREN)``
around ``subprocess.run``). The other side gets ``PYTHONPATH=DIR`` ahead of site-packages. Prints
the median per side and the ratio other/installed.

Usage:
    pip install --no-deps --target /tmp/mld070 ml_dtypes==0.7.0
    python benchmarks/bench_tf_start.py --vs /tmp/mld070 [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

CODES = {"ml_dtypes": "import ml_dtypes", "tensorflow": "import tensorflow"}
VERSION = "import ml_dtypes; print(ml_dtypes.__version__)"


def child_cpu(code: str, path: str | None) -> float:
    """User+system CPU seconds of one fresh ``python -c code`` (``path`` prepended to PYTHONPATH)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([path] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", required=True, metavar="DIR", help="a folder holding another ml_dtypes")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sides = {"installed": None, "other": args.vs}
    versions = {name: subprocess.run([sys.executable, "-c", VERSION], capture_output=True, text=True, check=True,
                                     env={**os.environ, **({"PYTHONPATH": p} if p else {})}).stdout.strip()
                for name, p in sides.items()}
    times: dict = {(s, c): [] for s in sides for c in CODES}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for side in order:
            for what, code in CODES.items():
                times[side, what].append(child_cpu(code, sides[side]))
        print(f"[bench_tf_start] round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    print(f"{'import':<12}" + "".join(f"{f'{s} ({versions[s]})':>22}" for s in sides) + f"{'other/installed':>17}")
    for what in CODES:
        med = {s: statistics.median(times[s, what]) for s in sides}
        print(f"{what:<12}" + "".join(f"{med[s]:>20.2f} s" for s in sides)
              + f"{med['other'] / max(med['installed'], 1e-9):>17.2f}")
    print(f"CPU seconds (user+system) of a fresh interpreter, median of {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
