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

    python benchmarks/bench_lower.py [--batch 1] [--path xla|graph|both]

``--path graph`` (or ``both``, the default) also runs ``tflab lower … --path graph`` the same way
(`graph_path`): Grappler's graph, the partition graph and a profile of 20 runs. Goal: ≤ 20 s wall on
2 cores.
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


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1, help="images per call (default: %(default)s)")
    args, _ = parser.parse_known_args()  # --path is graph_path's
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "tour_serve.py"
        script.write_text(SCRIPT)
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        c0 = _children_cpu()
        t0 = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "tflab", "lower", f"{script}:serve", "--arg",
                              f"x=float32[{args.batch},96,96,3]", "--json"], capture_output=True, text=True,
                             env=env, cwd=tmp)
        wall = time.perf_counter() - t0
        cpu = _children_cpu() - c0
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
    t0, c0 = time.perf_counter(), time.process_time()
    generator(stage="optimized_hlo")
    compile_s, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    load_after = os.getloadavg()
    print(f"tflab lower (MobileNetV3Small 96x96, batch {args.batch}): {wall:.1f} s wall, one process "
          f"(goal <= 30 s on 2 cores), {cpu:.1f} CPU s (all its processes); {len(report['fusions'])} "
          f"fusions/kernels; stopped_at={report['stopped_at']!r}")
    print(f"one XLA compile as compare_modes does it (optimized_hlo): {compile_s:.2f} s wall, {compile_cpu:.2f} CPU s; "
          f"tflab lower = {wall / compile_s:.1f}x its wall")
    print(f"{'stage':<14} {'ops':>7} {'bytes':>10} {'wall s':>8} {'share':>7} {'CPU s':>7} {'share':>7}"
          "   (share: of that one compile's wall / CPU seconds)")
    for s in report["stages"]:
        cpu_s = s.get("cpu_seconds", 0.0)
        print(f"{s['name']:<14} {sum(s['ops'].values()):>7} {s['bytes']:>10} {s['seconds']:>8.3f} "
              f"{s['seconds'] / compile_s:>6.2f}x {cpu_s:>7.3f} {cpu_s / compile_cpu:>6.2f}x"
              + (f"  ({s['why']})" if s["why"] else ""))
    by = {s["name"]: s for s in report["stages"]}
    # What a tour line would add to step 6, whose forward pass XLA compiles already: a second trace
    # (to record the layer calls), the tf_mlir and stablehlo levels, and reading the dump.
    extra = sum(by[n].get("cpu_seconds", 0.0) for n in ("funcgraph", "tf_mlir", "stablehlo"))
    print(f"tour line estimate (funcgraph + tf_mlir + stablehlo CPU, beyond step 6's own compile, dump reading "
          f"not counted): {extra:.2f} CPU s (the tour's budget for it: 5 s)")
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


def graph_path() -> None:
    """``tflab lower SCRIPT.py:serve --path graph --json`` in a fresh process: its wall, CPU and levels."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--path", choices=("xla", "graph", "both"), default="both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "tour_serve.py"
        script.write_text(SCRIPT)
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        c0, t0 = _children_cpu(), time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "tflab", "lower", f"{script}:serve", "--arg",
                              f"x=float32[{args.batch},96,96,3]", "--path", "graph", "--json"],
                             capture_output=True, text=True, env=env, cwd=tmp)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if run.returncode != 0:
        sys.exit(f"tflab lower --path graph failed ({run.returncode}): {run.stderr[-2000:]}")
    report = json.loads(run.stdout)
    nodes = report["nodes"]
    print(f"tflab lower --path graph (MobileNetV3Small 96x96, batch {args.batch}): {wall:.1f} s wall "
          f"(goal <= 20 s on 2 cores), {cpu:.1f} CPU s; {len(nodes)} nodes, "
          f"{sum(1 for n in nodes if len(n['replaced']) > 1)} fused/rewritten; "
          f"{sum(o['changed'] for o in report['optimizers'])} of {len(report['optimizers'])} optimizers changed it")
    for s in report["stages"]:
        print(f"  {s['name']:<10} {sum(s['ops'].values()):>6} ops {s['seconds']:>7.3f} s {s.get('cpu_seconds', 0):>7.3f} CPU s")
    p = report["profile"]
    print(f"  profile: {p['runs']} runs, {p['wall_seconds'] * 1e3:.1f} ms wall, nodes {p['node_seconds'] * 1e3:.1f} ms "
          f"summed, within bound: {p['within_bound']}; copy roofline {p['copy_gbps']:.1f} GB/s")
    for n in sorted(nodes, key=lambda n: -n["seconds"])[:3]:
        print(f"  {n['op']} [{n['kernel']}] {n['seconds'] * 1e6:.1f} us/run, layers {', '.join(n['layers']) or '-'}")


if __name__ == "__main__":
    _path = sys.argv[sys.argv.index("--path") + 1] if "--path" in sys.argv[:-1] else "both"
    if _path in ("xla", "both"):
        main()
    if _path in ("graph", "both"):
        graph_path()
