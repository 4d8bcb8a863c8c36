"""``tflab lower`` against the one XLA compile it wraps, side by side in one run, on Keras applications.

For each model (``keras.applications.NAME(input_shape=(S, S, 3), weights=None)``,
small inputs to stay cheap on 2 shared cores) it measures, each in a fresh
process as a user runs it:

* ``cli``: ``tflab lower m.py:serve --arg x=float32[1,S,S,3] --json`` (Python
  start, TF import, the model built, every level) against ``python plain.py``
  doing the same imports and build, then one plain compile:
  ``tf.function(jit_compile=True).experimental_get_compiler_ir(x)`` for
  ``stage="hlo"`` and ``stage="optimized_hlo"`` (the compile ``lower`` wraps).
* ``api``: ``tflab.lower(model, x)`` against that plain compile, both timed
  inside a process whose model is built (no import in either figure), each as
  the process's first XLA compile (``lower`` then dumps in this process).
* ``api_warm``: the same after an XLA compile already ran in the process (XLA
  read its flags: ``lower``'s dump comes from a child process).

and prints ``lower / one compile`` for each. Goal: ≤ 2×. The load average is
printed before and after: ratios are only comparable at the same load.

    python benchmarks/bench_lower.py [--models MobileNetV2,ResNet50] [--size 32]

``--path graph`` (or ``both``, the default) also runs ``tflab lower … --path graph`` on the tour
model's inference function (`graph_path`): Grappler's graph, the partition graph and a profile of
20 runs. Goal: ≤ 20 s wall on 2 cores.

``lower_ratio(model, size)`` returns the figures as a dict (``benchmarks/bench_zoo.py`` imports it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]

_MODEL = """\
import keras, numpy as np, tensorflow as tf
keras.utils.set_random_seed(0)
model = keras.applications.{name}(input_shape=({size}, {size}, 3), weights=None)
x = np.zeros((1, {size}, {size}, 3), np.float32)


def serve(x):
    return model(x, training=False)
"""

_PLAIN = """\
import resource, time
{model}

def cpu():
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def plain():
    t0, c0 = time.perf_counter(), cpu()
    ir = tf.function(serve, jit_compile=True).experimental_get_compiler_ir(x)
    ir(stage="hlo")
    ir(stage="optimized_hlo")
    return time.perf_counter() - t0, cpu() - c0
"""

_API = """\
import json, sys
{plain}
import tflab
mode = sys.argv[1]
out = {{}}
if mode == "warm":
    plain()
if mode in ("plain", "warm"):
    out["compile_s"], out["compile_cpu"] = plain()
if mode in ("first", "warm"):
    t0, c0 = time.perf_counter(), cpu()
    low = tflab.lower(serve, x)
    out["lower_s"], out["lower_cpu"] = time.perf_counter() - t0, cpu() - c0
    out["route"] = low.stage("optimized_hlo").note.split(" (")[0]
    out["fusions"] = len(low.fusions)
print(json.dumps(out))
"""


_TOUR_SCRIPT = textwrap.dedent("""\
    from tflab.models import build_default_model

    model = build_default_model(seed=0)


    def serve(x):
        return model(x, training=False)
    """)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(cmd: list[str], cwd: str) -> tuple[float, float, str]:
    """Wall and CPU seconds (its whole process tree) of one command, and its stdout."""
    t0, c0 = time.perf_counter(), _children_cpu()
    r = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if r.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return wall, cpu, r.stdout


def lower_ratio(model: str, size: int = 32) -> dict:
    """``tflab lower`` / one plain compile for ``keras.applications.<model>`` at ``size``×``size``×3, batch 1.

    Args:
        model: a ``keras.applications`` class name (``"MobileNetV2"``, ``"ResNet50"``).
        size: the input's height and width (32: the smallest most applications take).

    Returns:
        ``{"model", "size", "cli_s", "plain_script_s", "cli_ratio", "lower_s", "compile_s",
        "api_ratio", "route", "warm_lower_s", "warm_compile_s", "warm_ratio", "warm_route"}``: wall
        seconds, each measured in a fresh process; the same keys with ``_cpu`` in place of ``_s``
        (and ``cpu_ratio``, ``api_cpu_ratio``, ``warm_cpu_ratio``) are CPU seconds of the process
        and its children, which a loaded machine inflates far less than wall time.
    """
    src = _MODEL.format(name=model, size=size)
    with tempfile.TemporaryDirectory(prefix="bench_lower_") as tmp:
        Path(tmp, "m.py").write_text(src)
        plain_src = _PLAIN.format(model=src)
        Path(tmp, "plain.py").write_text(plain_src + "\nplain()\n")
        Path(tmp, "api.py").write_text(_API.format(plain=plain_src))
        py = sys.executable
        cli_s, cli_cpu, _ = _run([py, "-m", "tflab", "lower", "m.py:serve", "--arg",
                                  f"x=float32[1,{size},{size},3]", "--json"], tmp)
        plain_script_s, plain_script_cpu, _ = _run([py, "plain.py"], tmp)
        first = json.loads(_run([py, "api.py", "first"], tmp)[2].splitlines()[-1])
        plain = json.loads(_run([py, "api.py", "plain"], tmp)[2].splitlines()[-1])
        warm = json.loads(_run([py, "api.py", "warm"], tmp)[2].splitlines()[-1])
    return {"model": model, "size": size, "cli_s": cli_s, "plain_script_s": plain_script_s,
            "cli_ratio": cli_s / plain_script_s, "cli_cpu": cli_cpu, "plain_script_cpu": plain_script_cpu,
            "cpu_ratio": cli_cpu / plain_script_cpu,
            "lower_s": first["lower_s"], "compile_s": plain["compile_s"],
            "api_ratio": first["lower_s"] / plain["compile_s"], "route": first["route"],
            "lower_cpu": first["lower_cpu"], "compile_cpu": plain["compile_cpu"],
            "api_cpu_ratio": first["lower_cpu"] / plain["compile_cpu"],
            "warm_lower_s": warm["lower_s"], "warm_compile_s": warm["compile_s"],
            "warm_ratio": warm["lower_s"] / warm["compile_s"], "warm_route": warm["route"],
            "warm_lower_cpu": warm["lower_cpu"], "warm_compile_cpu": warm["compile_cpu"],
            "warm_cpu_ratio": warm["lower_cpu"] / warm["compile_cpu"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="MobileNetV2,ResNet50")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--path", choices=("xla", "graph", "both"), default="both")
    args, _ = ap.parse_known_args()  # --batch is graph_path's
    if args.path == "graph":
        return
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    rows = [lower_ratio(m, args.size) for m in args.models.split(",")]
    print("wall seconds (CPU seconds), lower / one compile:")
    print(f"{'model':<12} | {'tflab lower CLI':>15} {'plain script':>14} {'ratio':>6} | {'lower()':>14} "
          f"{'compile':>14} {'ratio':>6} | {'lower() warm':>14} {'compile':>14} {'ratio':>6}")
    for r in rows:
        def pair(k):
            return f"{r[k + '_s']:6.2f} ({r[k + '_cpu']:5.2f})"
        print(f"{r['model']:<12} | {pair('cli'):>15} {pair('plain_script'):>14} {r['cli_ratio']:5.2f}× | "
              f"{pair('lower'):>14} {pair('compile'):>14} {r['api_ratio']:5.2f}× | {pair('warm_lower'):>14} "
              f"{pair('warm_compile'):>14} {r['warm_ratio']:5.2f}×")
        print(f"{'':<12}   CPU ratios: CLI {r['cpu_ratio']:.2f}×, lower() {r['api_cpu_ratio']:.2f}×, "
              f"lower() warm {r['warm_cpu_ratio']:.2f}×")
    for r in rows:
        print(f"{r['model']}: lower() dump from {r['route']}; after another compile: {r['warm_route']}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def graph_path() -> None:
    """``tflab lower SCRIPT.py:serve --path graph --json`` in a fresh process: its wall, CPU and levels."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--path", choices=("xla", "graph", "both"), default="both")
    args, _ = parser.parse_known_args()
    if args.path == "xla":
        return
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "tour_serve.py"
        script.write_text(_TOUR_SCRIPT)
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
    main()
    graph_path()
