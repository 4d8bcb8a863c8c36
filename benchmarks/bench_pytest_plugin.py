"""The pytest plugin's overhead (goal < 5%): a generated suite of 200 small tests, plugin on against off.

Each test calls its own tiny tf.function 6 times: it traces twice (the first call, then a new
shape), so every test has traces to capture, explain, time and report. The suite runs in a fresh
``python -m pytest`` process per run, alternately with the plugin off (``-p no:tflab``, or not
loaded when the entry point is not installed) and on (``--tflab-traces --tflab-traces-json``),
``--rounds`` times each, so machine noise hits both alike. Two figures per run:

* tests: the sum of the 200 tests' own durations (setup + call + teardown, from ``--junitxml``):
  where the plugin's per-test work lands;
* process: the wall time of the whole ``pytest`` process (TF's import included);
* CPU: the process's user + system CPU seconds (``getrusage(RUSAGE_CHILDREN)``), the figure
  least moved by other load on a shared machine.

Prints the median of each and the ratios on/off. TF is imported by a conftest, before the tests
(both configurations alike).

Usage: python benchmarks/bench_pytest_plugin.py [--rounds 5] [--tests 200]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEST = '''
@tf.function
def f{i}(x):
    return x * {i}.0 + 1.0


def test_{i}():
    for _ in range(5):
        f{i}(tf.ones([2]))
    f{i}(tf.ones([3]))
'''


def write_suite(folder: str, n: int, per_file: int = 50) -> None:
    with open(os.path.join(folder, "conftest.py"), "w") as fh:
        fh.write("import tensorflow  # both configurations import TF before the tests\n")
    for start in range(0, n, per_file):
        with open(os.path.join(folder, f"test_gen_{start // per_file}.py"), "w") as fh:
            fh.write("import tensorflow as tf\n")
            for i in range(start, min(n, start + per_file)):
                fh.write(TEST.format(i=i))


def installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value == "tflab.pytest_plugin" for ep in entry_points(group="pytest11"))


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_run(folder: str, on: bool, n: int) -> tuple[float, float, float]:
    xml = os.path.join(folder, "junit.xml")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    if on:
        args += ([] if installed() else ["-p", "tflab.pytest_plugin"]) + [
            "--tflab-traces", "--tflab-traces-json", os.path.join(folder, "traces.json")]
    elif installed():
        args += ["-p", "no:tflab"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(
               os.pathsep) if p])}
    began, cpu0 = time.perf_counter(), _child_cpu()
    proc = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - began, _child_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"the generated suite failed ({'on' if on else 'off'}):\n{proc.stdout[-3000:]}")
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    if len(cases) != n:
        raise SystemExit(f"expected {n} test cases in the junit file, found {len(cases)}")
    if on and "tflab traces" not in proc.stdout:
        raise SystemExit("the plugin was on but printed no 'tflab traces' section")
    if not on and "tflab traces" in proc.stdout:
        raise SystemExit("the plugin was off but printed a 'tflab traces' section")
    return sum(float(c.get("time")) for c in cases), wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each configuration (default: %(default)s)")
    parser.add_argument("--tests", type=int, default=200, help="tests in the suite (default: %(default)s)")
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from tflab.runtime import runtime_config

    print(f"configuration: {runtime_config().one_line()}; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    folder = tempfile.mkdtemp(prefix="tflab-bench-plugin-")
    try:
        write_suite(folder, args.tests)
        one_run(folder, True, args.tests)  # warm the file cache and the .pyc files
        results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
        for r in range(args.rounds):
            for on in ((False, True) if r % 2 == 0 else (True, False)):  # ABBA: drift hits both alike
                results[on].append(one_run(folder, on, args.tests))
                t, w, c = results[on][-1]
                print(f"round {r + 1}: plugin {'on ' if on else 'off'}  tests {t:6.2f} s  process {w:6.2f} s  "
                      f"CPU {c:6.2f} s", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    off_t, off_w, off_c = (statistics.median(x[k] for x in results[False]) for k in range(3))
    on_t, on_w, on_c = (statistics.median(x[k] for x in results[True]) for k in range(3))
    print(f"{args.tests} tests, 2 traces each, median of {args.rounds} interleaved runs:")
    print(f"  tests' own time: off {off_t:.2f} s, on {on_t:.2f} s: ratio {on_t / off_t:.3f} "
          f"({100 * (on_t / off_t - 1):+.1f}%)")
    print(f"  whole process:   off {off_w:.2f} s, on {on_w:.2f} s: ratio {on_w / off_w:.3f} "
          f"({100 * (on_w / off_w - 1):+.1f}%)")
    print(f"  process CPU:     off {off_c:.2f} s, on {on_c:.2f} s: ratio {on_c / off_c:.3f} "
          f"({100 * (on_c / off_c - 1):+.1f}%)")
    print(f"load average now {os.getloadavg()[0]:.1f}")
    print("goal: < 5% (the process ratio is what a user's run costs; the tests' ratio is the plugin's "
          "own per-test work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
