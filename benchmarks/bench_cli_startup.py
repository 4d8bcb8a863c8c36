"""``tflab --help``, ``tflab VERB --bogus`` and one path error per verb, against another checkout (tflab without the fix),
interleaved. Goal: < 0.5 s each, with no TensorFlow imported.

``main`` imported TensorFlow before parsing, so ``--help``
took 5–6 s. The supervising entry point (`tflab.cli.supervise`) parses
without TF. Each round runs every command of both checkouts once, in
alternating order, as a fresh ``python -m tflab`` with ``PYTHONPATH`` set to
that checkout (the same interpreter and site-packages), timed by wall clock
around ``subprocess.run``. Prints the median seconds per command and checkout,
the ratio old/new, and the machine load (``os.getloadavg``).

every verb answers a bad path from the supervising parent, before the TF child
starts. One path error per verb (a missing FILE.py, a FIFO as input, an existing --out, …) runs
here too, through an entry point that prints whether ``tensorflow`` is in ``sys.modules`` when the
verb returns: a verb that imports TF for its answer fails the run (exit 1), whatever its time.

one error of each pre-TF kind (OPTION_ERRORS): the FILE.py:FUNC grammar, option
values (``--loss-scale`` out of float32's range, ``--policies``, ``--quantize``, a dtype typo, None
dims for ``lower``, more than 64 dims), and output paths (``lower --out`` an existing folder, ``x/..``,
``--html`` equal to or inside ``--out``).

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
TIMEOUT_S = 120  # a command still running then (a checkout that opened a FIFO) counts as inf
REPO = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["env", "--bogus"], ["compare", "--bogus"])
# One path error per verb that takes a path (paths relative to the work folder made in main()).
PATH_ERRORS = (
    ["inspect", "nothere.py:f", "--arg", "x=float32[2]"],
    ["retrace", "fifo.py"],
    ["autograph", "loop.py:f"],
    ["compare", "nothere.py:f", "--arg", "x=float32[2]"],
    ["diagnose", "adir:f"],
    ["precision", "nothere.py:f"],
    ["distribute", "fifo.py:step"],
    ["export", "nothere.keras", "--out", "o"],
    ["check-tflite", "nothere.tflite", "nothere/"],
    ["tour", "--out", "user", "--force"],
)
# One error of each kind, each answered before TF loads.
_DIMS65 = "x=float32[" + ",".join(["1"] * 65) + "]"
OPTION_ERRORS = (
    ["inspect", "m.py", "--arg", "x=float32[2]"],
    ["inspect", "m.txt:f", "--arg", "x=float32[2]"],
    ["precision", "m.py:f", "--arg", "x=float32[4]", "--loss-scale", "1e-320"],
    ["precision", "m.py:f", "--arg", "x=float32[4]", "--policies", "bogus"],
    ["export", "m.py:f", "--quantize", "bogus", "--out", "o/q"],
    ["inspect", "m.py:f", "--arg", "x=flaot32[2]"],
    ["inspect", "m.py:f", "--arg", "x=float32[2"],
    ["lower", "m.py:f", "--arg", "x=float32[None,8]"],
    ["compare", "m.py:f", "--arg", _DIMS65],
    ["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "adir"],
    ["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "o/p/.."],
    ["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "o/s", "--html", "o/s"],
    ["export", "m.py:f", "--out", "o/e", "--html", "o/e/page.html"],
    # an option that means nothing without another (`only_with`)
    ["lower", "m.py:f", "--arg", "x=float32[2,8]", "--runs", "5"],
    # FUNC that is no Python name, a syntax error, undrawable specs, --seed, the .tflite identifier, distribute
    ["inspect", "m.py:1f", "--arg", "x=float32[2]"],
    ["retrace", "broken.py"],
    ["compare", "m.py:f", "--arg", "x=string[2]"],
    ["precision", "m.py:f", "--arg", "x=float32[None]", "--seed", str(2**64)],
    ["check-tflite", "m.txt", "adir"],
    ["distribute", "m.py:f", "--arg", "x=float32[None,4]"],
)
_ENTRY = ("import sys; from tflab.cli import supervise; rc = supervise(sys.argv[1:]); "
          "sys.stderr.write('TF-IMPORTED\\n' if 'tensorflow' in sys.modules else ''); sys.exit(rc)")


def _time(tree: Path, argv: list[str], cwd: Path | None = None) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TFLAB_IN_PROCESS", None)
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", _ENTRY, *argv], env=env, cwd=cwd or tree, capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:  # a checkout that opened a FIFO given as FILE.py blocked for ever
        return float("inf")
    elapsed = time.perf_counter() - t
    if p.returncode not in (0, 2):
        raise SystemExit(f"{tree}: tflab {' '.join(argv)} exited {p.returncode}: {p.stderr[-300:]!r}")
    if b"TF-IMPORTED" in p.stderr:
        _TF_IMPORTED.add((str(tree), " ".join(argv)))
    return elapsed


_TF_IMPORTED: set[tuple[str, str]] = set()


def _work_folder() -> Path:
    """A folder with the odd inputs PATH_ERRORS name: a FIFO, a symlink loop, a folder, a user's folder."""
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="bench-cli-startup-"))
    os.mkfifo(work / "fifo.py")
    (work / "loop.py").symlink_to("loop2.py")
    (work / "loop2.py").symlink_to("loop.py")
    (work / "adir").mkdir()
    (work / "user").mkdir()
    (work / "user" / "thesis.txt").write_text("mine")
    (work / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    (work / "m.txt").write_text("not python")
    (work / "broken.py").write_text("x = (\n")
    (work / "o").mkdir()
    return work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="the old checkout (e.g. a worktree of main 176dbcb)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    trees = {"new": REPO} | ({"old": args.old} if args.old else {})
    times: dict[tuple[str, str], list[float]] = {}
    work = _work_folder()
    for r in range(args.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
        for cmd in COMMANDS + PATH_ERRORS + OPTION_ERRORS:
            for label, tree in order:
                cwd = work if cmd in PATH_ERRORS + OPTION_ERRORS else None
                times.setdefault((label, " ".join(cmd)), []).append(_time(tree, cmd, cwd))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"median wall seconds over {args.rounds} rounds (load average {load}; {os.cpu_count()} CPUs)")
    ok = True
    for cmd in COMMANDS + PATH_ERRORS + OPTION_ERRORS:
        name = " ".join(cmd)
        new = statistics.median(times[("new", name)])
        line = f"  tflab {name[:60]:<60} new {new:6.3f} s"
        if "old" in trees:
            old = statistics.median(times[("old", name)])
            line += f"   old {old:6.3f} s   old/new {old / new:5.1f}×"
        tf_new = (str(REPO), name) in _TF_IMPORTED
        ok &= new < GOAL_S and not tf_new
        print(line + ("" if new < GOAL_S else f"   (goal < {GOAL_S} s missed)")
              + ("   (new imported TensorFlow)" if tf_new else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
