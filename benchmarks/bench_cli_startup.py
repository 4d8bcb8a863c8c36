"""``tflab --help`` and ``tflab VERB --bogus`` against another checkout (the old main), interleaved. Goal: < 0.5 s.

Issue 21 (S1): ``main()`` imported TensorFlow before parsing, so ``--help``
took 5–6 s. The supervising entry point (`tflab.cli.supervise`) parses
without TF. Each round runs every command of both checkouts once, in
alternating order, as a fresh ``python -m tflab`` with ``PYTHONPATH`` set to
that checkout (the same interpreter and site-packages), timed by wall clock
around ``subprocess.run``. Prints the median seconds per command and checkout,
the ratio old/new, and the machine load (``os.getloadavg``).

Usage:
    git worktree add /tmp/oldmain 176dbcb
    python benchmarks/bench_cli_startup.py --old /tmp/oldmain [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_S = 0.5
REPO = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["env", "--bogus"], ["compare", "--bogus"])


def _time(tree: Path, argv: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="2")
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tflab", *argv], env=env, cwd=tree, capture_output=True)
    elapsed = time.perf_counter() - t
    if p.returncode not in (0, 2):
        raise SystemExit(f"{tree}: tflab {' '.join(argv)} exited {p.returncode}: {p.stderr[-300:]!r}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="the old checkout (e.g. a worktree of main 176dbcb)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    trees = {"new": REPO} | ({"old": args.old} if args.old else {})
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
        for cmd in COMMANDS:
            for label, tree in order:
                times.setdefault((label, " ".join(cmd)), []).append(_time(tree, cmd))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"median wall seconds over {args.rounds} rounds (load average {load}; {os.cpu_count()} CPUs)")
    ok = True
    for cmd in COMMANDS:
        name = " ".join(cmd)
        new = statistics.median(times[("new", name)])
        line = f"  tflab {name:<16} new {new:6.3f} s"
        if "old" in trees:
            old = statistics.median(times[("old", name)])
            line += f"   old {old:6.3f} s   old/new {old / new:5.1f}×"
        ok &= new < GOAL_S
        print(line + ("" if new < GOAL_S else f"   (goal < {GOAL_S} s missed)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
