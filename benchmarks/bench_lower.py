"""Wall seconds of ``tflab lower`` on the tour model's inference function, and each level's cost.

Runs ``tflab lower SCRIPT.py:serve --arg x=float32[1,96,96,3] --json`` once
(a fresh process, as a user runs it: TF import, the tour's MobileNetV3Small
96×96 with random weights, every level, the child-process XLA dump), then, in
this process, one XLA compile of the same inference function the way
``compare_modes`` does it (``experimental_get_compiler_ir(...)(stage=
"optimized_hlo")``, one ``BuildExecutable``), and prints each level's seconds
(from the report) as a share of that compile. Goal: the ``tflab lower`` wall
≤ 30 s on 2 cores. Prints the load average before and after: the seconds are
only comparable at the same load.

    python benchmarks/bench_lower.py [--batch 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""\
    from tflab.models import build_default_model

    model = build_default_model(seed=0)


    def serve(x):
        return model(x, training=False)
    """)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1, help="images per call (default: %(default)s)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "tour_serve.py"
        script.write_text(SCRIPT)
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        t0 = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "tflab", "lower", f"{script}:serve", "--arg",
                              f"x=float32[{args.batch},96,96,3]", "--json"], capture_output=True, text=True,
                             env=env, cwd=tmp)
        wall = time.perf_counter() - t0
    if run.returncode != 0:
        sys.exit(f"tflab lower failed ({run.returncode}): {run.stderr[-2000:]}")
    report = json.loads(run.stdout)

    import tensorflow as tf

    sys.path.insert(0, str(ROOT))
    from tflab.models import build_default_model

    model = build_default_model(seed=0)
    jit = tf.function(lambda x: model(x, training=False), jit_compile=True)
    x = tf.zeros([args.batch, 96, 96, 3])
    generator = jit.experimental_get_compiler_ir(x)
    t0 = time.perf_counter()
    generator(stage="optimized_hlo")
    compile_s = time.perf_counter() - t0
    load_after = os.getloadavg()
    print(f"tflab lower (MobileNetV3Small 96x96, batch {args.batch}): {wall:.1f} s wall, one process "
          f"(goal <= 30 s on 2 cores); {len(report['fusions'])} fusions/kernels; stopped_at={report['stopped_at']!r}")
    print(f"one XLA compile as compare_modes does it (optimized_hlo): {compile_s:.2f} s")
    print(f"{'stage':<14} {'ops':>7} {'bytes':>10} {'seconds':>8} {'share of one compile':>21}")
    for s in report["stages"]:
        print(f"{s['name']:<14} {sum(s['ops'].values()):>7} {s['bytes']:>10} {s['seconds']:>8.3f} "
              f"{s['seconds'] / compile_s:>20.2f}x" + (f"  ({s['why']})" if s["why"] else ""))
    big = max(report["fusions"], key=lambda f: f["bytes_read"] + f["bytes_written"], default=None)
    if big:
        print(f"largest fusion by traffic: {big['name']} ({big['kind']}, {big['bytes_read']} B read, "
              f"{big['bytes_written']} B written) layers {', '.join(big['layers']) or '-'}; "
              f"TF ops {', '.join(big['tf_op_types'][:4])}")
    with_layer = sum(1 for f in report["fusions"] if f["layers"])
    print(f"fusions/kernels naming a layer: {with_layer} of {len(report['fusions'])}; memory: "
          f"{report['memory'].get('total_bytes', 0)} B total, {report['memory'].get('temp_bytes', 0)} B temp")
    note = next(s["note"] for s in report["stages"] if s["name"] == "optimized_hlo")
    print(f"child: {note}")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; {os.cpu_count()} CPUs "
          f"({len(os.sched_getaffinity(0))} schedulable)")


if __name__ == "__main__":
    main()
