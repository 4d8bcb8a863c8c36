"""How long `tflab tour` takes, per section, and where the time goes (goal: 60 s on 2 cores).

Runs the tour ``--runs`` times (default 3), each in a fresh process as
``make tour`` does, through ``benchmarks/_tour_phases.py``, and prints each
section's median seconds (``report.json`` ``section_seconds``), the median
process wall time, and for the three slowest sections the median exclusive
seconds of tracing, AutoGraph conversion, gradients, XLA compile, TFLite
conversion and LiteRT runs.

``--vs DIR`` runs a second checkout (e.g. tflab without the fix: ``git worktree add
/tmp/tour-old 176dbcb``) interleaved with this one, old then new in every
round, so both see the same machine load; it prints both and their ratio.
Absolute seconds on a shared machine are inflated by the load (printed with
``os.getloadavg`` before and after); the ratio is what carries over.

``--cold-op`` gives every run an empty custom-op build cache, so the run
includes building the op (the "first run after make install" figure);
otherwise each checkout's op is built once before timing.

``--optimizers`` measures instead the candidates for the training step of
steps 2 and 4, in one process on the tour's model: CPU seconds
of the first call (TF traces twice when the optimizer creates its slot
variables inside the tf.function, then runs), of a retrace on a new batch
size and its run, and the trace counts, which must stay 2 on the first call
(the variable-creation re-trace) and 3 after the retrace.

    .venv/bin/python benchmarks/bench_tour.py [--runs 3] [--vs /tmp/tour-old] [--cold-op]
    .venv/bin/python benchmarks/bench_tour.py --optimizers [adam,sgd_momentum,adagrad]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_SECONDS = 60.0
GOAL_COLD_SECONDS = 100.0
HERE = Path(__file__).resolve().parent
PHASES = ("tracing", "autograph", "gradients", "graph_first_run", "xla_compile", "tflite_convert", "litert_runs",
          "child_wait", "worker_wait")


def run_once(tree: Path, cold_op: bool) -> dict:
    """One tour in a fresh process from checkout ``tree``: wall, report and phases (its folders removed after)."""
    import shutil

    out = tempfile.mkdtemp(prefix="tflab-bench-tour-")
    op_dir = tempfile.mkdtemp(prefix="tflab-bench-op-") if cold_op else None
    try:
        return _run_once(tree, out, op_dir)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if op_dir:
            shutil.rmtree(op_dir, ignore_errors=True)


def _run_once(tree: Path, out: str, op_dir: str | None) -> dict:
    phases = os.path.join(out, "phases.json")
    # The tour's second process gets the same phase timers (benchmarks/_phases_site).
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TFLAB_BENCH_PHASES_DIR": out,
           "PYTHONPATH": os.pathsep.join([str(tree), str(HERE / "_phases_site")])}
    if op_dir:
        env["TFLAB_CUSTOM_OPS_BUILD_DIR"] = op_dir
    t0 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, str(HERE / "_tour_phases.py"), phases, "--",
                           "tour", "--out", os.path.join(out, "tour")],
                          cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the tour and every process it waited for (converters, labs, compilers).
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"tour in {tree} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    report = json.loads(Path(out, "tour", "report.json").read_text())
    measured = json.loads(Path(phases).read_text())
    for lane in Path(out).glob("lane-*.json"):  # sections the tour's second process ran
        for section, parts in json.loads(lane.read_text())["sections"].items():
            mine = measured["sections"].setdefault(section, {})
            for phase, seconds in parts.items():
                mine[phase] = mine.get(phase, 0.0) + seconds
    if not Path(measured["tflab_file"]).resolve().is_relative_to(tree):
        raise SystemExit(f"the tour ran {measured['tflab_file']}, not the checkout {tree}")
    facts = None
    expected = tree / "tests" / "data" / "tour" / "expected_facts.json"
    if expected.exists() and (tree / "tflab" / "_tour" / "facts.py").exists():
        # The tour made faster must state the same facts as main at 176dbcb.
        check = subprocess.run([sys.executable, "-c", _FACTS_CHECK, str(Path(out, "tour", "report.json")),
                                str(expected)], cwd=tree, capture_output=True, text=True, env=env)
        facts = check.stdout.strip().splitlines() if check.returncode == 0 else [check.stderr[-300:]]
    return {"wall": wall, "cpu": cpu, "report": report, "phases": measured["sections"], "facts": facts}


# The stored expectation with the changes later issues made on purpose (the full-tour test's
# INTENDED_CHANGES, read from the checkout's own test file), as that test compares.
_FACTS_CHECK = """
import ast, json, pathlib, sys
from tflab._tour.facts import compare_facts
expected = json.load(open(sys.argv[2]))
test = pathlib.Path("tests/tour/test_tour_speed.py")
for node in ast.parse(test.read_text()).body if test.exists() else []:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "INTENDED_CHANGES":
        # An expression of literals (``[...] * 2``): literal_eval refuses the operator.
        expected["verdicts"].update(eval(compile(ast.Expression(node.value), str(test), "eval"),
                                         {"__builtins__": {}}))
for line in compare_facts(json.load(open(sys.argv[1])), expected):
    print(line)
"""


def summary(runs: list[dict]) -> dict:
    """Medians over runs: wall, tour total, per section, per phase of each section."""
    sections = list(runs[0]["report"]["section_seconds"])
    med = {s: statistics.median(r["report"]["section_seconds"].get(s, 0.0) for r in runs) for s in sections}
    phases = {}
    for s in sections:
        phases[s] = {p: statistics.median(r["phases"].get(s, {}).get(p, 0.0) for r in runs) for p in PHASES}
        convert = [sum(v.get("convert_seconds") or 0.0 for v in
                       r["report"].get("export", {}).get("variants", {}).values()) for r in runs]
        if s == "s07_export":  # conversions ran in worker processes: their own clocks, summed
            phases[s]["tflite_convert (workers, summed)"] = statistics.median(convert)
    return {"wall": statistics.median(r["wall"] for r in runs),
            "cpu": statistics.median(r["cpu"] for r in runs),
            "tour": statistics.median(r["report"]["seconds"] for r in runs),
            "sections": med, "phases": phases}


def print_summary(name: str, s: dict) -> None:
    print(f"{name}: median process wall {s['wall']:.1f} s, tour's own total {s['tour']:.1f} s, "
          f"CPU {s['cpu']:.1f} s (the tour and the processes it waited for)")
    for sec, secs in sorted(s["sections"].items(), key=lambda kv: -kv[1]):
        print(f"  {sec:16s} {secs:7.1f} s")
    for sec in sorted(s["sections"], key=lambda k: -s["sections"][k])[:3]:
        parts = {p: v for p, v in s["phases"][sec].items() if v >= 0.05}
        other = s["sections"][sec] - sum(v for p, v in parts.items() if "workers" not in p)
        print(f"  inside {sec}: " + ", ".join(f"{p} {v:.1f} s" for p, v in
                                              sorted(parts.items(), key=lambda kv: -kv[1]))
              + f", other {max(other, 0.0):.1f} s")


# Training-step optimizers measured by ``--optimizers`` (name -> Keras 3 constructor call).
OPTIMIZERS = {
    "adam": "keras.optimizers.Adam()",
    "sgd_momentum": "keras.optimizers.SGD(momentum=0.9)",
    "adagrad": "keras.optimizers.Adagrad()",
    "sgd": "keras.optimizers.SGD()",
}


def _counted(step, traces: list):
    """``step`` that appends its batch size to ``traces`` each time it runs as Python (a trace)."""
    def counted(x, y):
        traces.append(int(x.shape[0]))
        return step(x, y)
    return counted


def measure_optimizers(names: list[str]) -> list[dict]:
    """Per optimizer: CPU-s of the training step's first call and of a retrace, and its trace counts.

    One process, one model (`tflab.models.build_default_model`), a fresh
    optimizer and a fresh tf.function per candidate, fed the tour's batches
    (4, then 2: step 2's retrace). ``traces_first`` counts the Python traces
    of the first call: 2 when the optimizer's slot variables are created
    inside it (TF's variable-creation re-trace, which step 2 shows).
    """
    import keras  # noqa: F401  (the constructors in OPTIMIZERS)
    import tensorflow as tf

    from tflab.models import build_default_model, make_train_step, model_input_spec, tour_dataset

    model = build_default_model()
    spec = model_input_spec(model)
    batches = list(tour_dataset(spec, 10))
    rows = []
    for name in names:
        optimizer = eval(OPTIMIZERS[name])  # noqa: S307 (a fixed table above)
        step = make_train_step(model, optimizer)
        traces: list[int] = []
        fn = tf.function(_counted(step, traces))
        c0 = time.process_time()
        fn(*batches[0])
        c1 = time.process_time()
        first = len(traces)
        fn(*batches[2])  # batch 2: a retrace and its run
        c2 = time.process_time()
        rows.append({"optimizer": OPTIMIZERS[name], "first_call_cpu_s": round(c1 - c0, 2),
                     "retrace_cpu_s": round(c2 - c1, 2), "traces_first": first, "traces": len(traces),
                     "slot_variables": len(optimizer.variables)})
        print(f"{OPTIMIZERS[name]:38s} first call {c1 - c0:6.1f} CPU-s ({first} traces), retrace "
              f"{c2 - c1:6.1f} CPU-s, {len(traces)} traces, {len(optimizer.variables)} optimizer variables",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="tours per checkout (default 3)")
    ap.add_argument("--vs", metavar="DIR", help="another checkout to run interleaved (e.g. main before a change)")
    ap.add_argument("--cold-op", action="store_true", help="empty custom-op cache in every run")
    ap.add_argument("--json", metavar="FILE", help="also write every run's numbers here")
    ap.add_argument("--optimizers", nargs="?", const=",".join(OPTIMIZERS), metavar="NAMES",
                    help=f"measure the training step's optimizer candidates instead ({','.join(OPTIMIZERS)})")
    args = ap.parse_args(argv)
    if args.optimizers:
        names = args.optimizers.split(",")
        unknown = [n for n in names if n not in OPTIMIZERS]
        if unknown:
            ap.error(f"--optimizers: unknown {unknown}; choose from {', '.join(OPTIMIZERS)}")
        rows = measure_optimizers(names)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2))
        return 0
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    trees = {"new": HERE.parent}
    if args.vs:
        trees = {"old": Path(args.vs).resolve(), **trees}
    if not args.cold_op:
        for tree in trees.values():  # each checkout's op built once, outside the timing
            subprocess.run([sys.executable, "-m", "custom_ops.build"], cwd=tree, check=True,
                           env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL)
    load0 = os.getloadavg()
    runs: dict[str, list] = {k: [] for k in trees}
    for i in range(args.runs):
        for name, tree in trees.items():
            r = run_once(tree, args.cold_op)
            r["load"] = os.getloadavg()[0]
            runs[name].append(r)
            save(args.json, runs)
            facts = ("" if r["facts"] is None else "; facts as main 176dbcb" if not r["facts"]
                     else f"; FACTS DIFFER: {'; '.join(r['facts'][:5])}")
            print(f"run {i + 1}/{args.runs} {name}: {r['wall']:.1f} s (load {os.getloadavg()[0]:.1f}){facts}",
                  file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    config = runs["new"][0]["report"].get("config", {})
    print(f"tflab tour, {args.runs} runs per checkout, {cpus} schedulable CPUs, "
          f"load average {load0[0]:.1f} before / {load1[0]:.1f} after"
          + (", custom op built in every run" if args.cold_op else ", custom op built beforehand"))
    if config:
        print(f"configuration: {config.get('one_line', '')}")
    sums = {k: summary(v) for k, v in runs.items()}
    for name, s in sums.items():
        print_summary(name, s)
        checked = [r["facts"] for r in runs[name] if r["facts"] is not None]
        if checked:
            bad = sum(bool(f) for f in checked)
            print(f"  facts (keys and verdicts) vs main 176dbcb: "
                  + ("the same in every run" if not bad else f"DIFFERENT in {bad} of {len(checked)} runs"))
    goal = GOAL_COLD_SECONDS if args.cold_op else GOAL_SECONDS
    new = sums["new"]["wall"]
    if "old" in sums:
        print(f"new / old process wall: {new / sums['old']['wall']:.2f} "
              f"({sums['old']['wall']:.1f} s -> {new:.1f} s under the same load)")
    print(f"ratio to the {goal:.0f} s goal: {new / goal:.2f} ({'met' if new <= goal else 'NOT met'} "
          f"at this load)")
    save(args.json, runs)
    return 0


def save(path: str | None, runs: dict) -> None:
    """Every run's numbers as JSON (written after each run, so a stopped benchmark keeps its runs)."""
    if path:
        Path(path).write_text(json.dumps({k: [{"wall": r["wall"], "section_seconds": r["report"]["section_seconds"],
                                               "seconds": r["report"]["seconds"], "phases": r["phases"],
                                               "facts": r["facts"], "load": r.get("load"), "cpu": r["cpu"]}
                                              for r in v] for k, v in runs.items()}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
