"""How long `tflab tour` takes, per section, against the 3-minute goal (2 cores).

Runs the tour once in a subprocess (fresh TF, as `make tour` does) and prints
each section's seconds from the report and the total as a ratio to 180 s.

    .venv/bin/python benchmarks/bench_tour.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

GOAL_SECONDS = 180.0


def main() -> int:
    out = tempfile.mkdtemp(prefix="tflab-bench-tour-")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tflab", "tour", "--out", out],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
        return proc.returncode
    report = json.load(open(os.path.join(out, "report.json")))
    print(f"tflab tour on {os.cpu_count()} cores")
    if report.get("config"):  # the tour's own record of what it ran on
        print(f"configuration: {report['config']['one_line']}")
    for name, secs in report.get("section_seconds", {}).items():
        print(f"  {name:16s} {secs:7.1f} s")
    print(f"  process wall     {wall:7.1f} s  (includes TF import and model build)")
    print(f"ratio to the {GOAL_SECONDS:.0f} s goal: {wall / GOAL_SECONDS:.2f}  "
          f"({'met' if wall <= GOAL_SECONDS else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
