"""The tour's lowering lines: the levels of the model's inference function, from step 6's compile.

Step 6 of the tour compiles the model's forward pass under XLA already
(`tflab.modes.compare_modes`). When the tour's second process (`tflab._tour.lane`,
which runs step 6) is started with `lane_env`, XLA dumps that compile (XLA reads
``XLA_FLAGS`` once per process, so they are set before the process starts), and
`tour_lines` makes the other levels of the same function here and reads the
optimized HLO, LLVM IR and machine code from that dump: no second compile.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["ENV", "lane_env", "step_six_optimized_hlo", "tour_lines", "graph_top_line"]

#: The dump folder of the tour's second process (set by `lane_env`).
ENV = "TFLAB_TOUR_XLA_DUMP"


def lane_env(tmp: str | os.PathLike, environ: dict | None = None) -> dict[str, str]:
    """Environment entries that make a new process dump its XLA compiles into ``tmp/xla_dump``.

    Args:
        tmp: a folder the caller owns and removes (the lane's owned temp folder).
        environ: the environment the process starts from (default ``os.environ``).

    Returns:
        ``{"XLA_FLAGS": …, ENV: folder}``, or ``{}`` when the user's ``XLA_FLAGS`` dump already
        (their folder is theirs: the tour then prints no lowering lines).
    """
    flags = (os.environ if environ is None else environ).get("XLA_FLAGS", "")
    if "--xla_dump_to" in flags:
        return {}
    folder = Path(tmp) / "xla_dump"
    folder.mkdir(parents=True, exist_ok=True)
    from tflab.process.xla_probe import dump_flags

    return {"XLA_FLAGS": f"{flags} {dump_flags(folder)}".strip(), ENV: str(folder)}


def step_six_optimized_hlo() -> str | None:
    """The optimized HLO of the compile this process dumped (step 6's forward pass), or None.

    The text is the module XLA ran (``*.cpu_after_optimizations.txt``, the largest module when
    there are several): what ``experimental_get_compiler_ir(...)(stage="optimized_hlo")`` returns,
    which in TF 2.21 compiles the function a second time to get it (the same instructions; only
    the module's name differs). Step 6 reads its fusion count here when the process dumps.

    Returns:
        The HLO text, or None when this process has no `lane_env` dump or XLA wrote no such file.
    """
    from tflab.lowering.dump import module_files
    from tflab.process import settings

    folder = settings.get(ENV)
    if not folder or not os.path.isdir(folder):
        return None
    after = module_files(Path(folder)).get("cpu_after_optimizations.txt")
    return after.read_text(errors="replace") if after is not None else None


def dumps_compiles() -> bool:
    """True in a process started with `lane_env` (its dump folder exists): XLA writes each compile there.

    Returns:
        Whether step 6 can read the optimized HLO of its own compile (`step_six_optimized_hlo`).
    """
    from tflab.process import settings

    folder = settings.get(ENV)
    return bool(folder) and os.path.isdir(folder)


class _StepSixDump:
    """The dumper of `tflab.lowering.build` over a dump that is already written (no compile here)."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def __enter__(self) -> "_StepSixDump":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def submit(self, concrete, specs, variables) -> None:
        pass

    def collect(self, generator):
        from tflab.lowering.dump import DumpResult, read_dump

        out = DumpResult(where="step 6's own compile (XLA_FLAGS set for the tour's second process)",
                         waited_for="reading it", call_levels=0)
        read_dump(self.folder, out)
        return out


def tour_lines(fn: Callable, *args: Any) -> list[str]:
    """One line per level of ``fn`` on ``args`` and the largest fusion with its layer; [] without a dump.

    Args:
        fn: the function step 6 compiled (the model's inference function).
        *args: the tensors it was compiled for (the same shapes: XLA compiles per shape).

    Returns:
        The lines, the last one saying what they cost; [] when this process has no dump
        (the tour ran step 6 itself, or the user's XLA_FLAGS dump elsewhere).
    """
    from tflab.lowering.build import build_levels, flat_inputs
    from tflab.lowering.text import human_bytes, layer_credit
    from tflab.process import settings

    folder = settings.get(ENV)
    if not folder or not os.path.isdir(folder) or not any(Path(folder).glob("*after_optimizations.txt")):
        return []
    t0, c0 = time.perf_counter(), time.process_time()
    specs, rebuild = flat_inputs(args, {})
    low = build_levels(fn, specs, rebuild, _StepSixDump(folder))
    lines = []
    for s in low.stages:
        state = (f"-- {s.why[:100]}" if s.why else
                 f"{sum(s.ops.values())} ops, {human_bytes(s.bytes)}")
        lines.append(f"lowering {s.name:<13} {state}")
    if low.fusions:
        fused = [f for f in low.fusions if f.kind.startswith("k") and f.kind != "kernel"] or list(low.fusions)
        big = max(fused, key=lambda f: f.bytes_read + f.bytes_written)
        lines.append(f"largest fusion {big.name} ({big.kind}, {', '.join(big.tf_op_types[:3])}): "
                     f"{human_bytes(big.bytes_read + big.bytes_written)} moved, layer "
                     f"{layer_credit(big)}; {len(low.fusions)} fusions/kernels")
    lines.append(f"lowering lines: {time.perf_counter() - t0:.1f} s ({time.process_time() - c0:.1f} CPU s), "
                 "from step 6's compile (no second one)")
    return lines


def graph_top_line(fn: Callable, *args: Any, runs: int = 3) -> str:
    """Step 6's graph-mode line: the three nodes that took longest, each with its kernel library and line.

    `tflab.lower(fn, *args, path="graph")` without the per-optimizer measurement (it
    instantiates the function once per Grappler optimizer; the tour keeps to the one
    instantiation and ``runs`` profiled runs).

    Args:
        fn: the function step 6 compared (the model's inference function).
        *args: its tensors.
        runs: profiled runs.

    Returns:
        ``"graph mode, slowest nodes over 3 runs: _FusedConv2D [TF (Eigen)] 812.0 us (layer conv); … (2.1 s)"``,
        or why there is none.
    """
    from tflab.lowering.graph_build import build_graph_lowering
    from tflab.lowering.text import top_nodes_line

    t0 = time.perf_counter()
    try:
        low = build_graph_lowering(fn, args, {}, runs=runs, optimizers=())
    except Exception as e:  # the tour goes on: the line says why it is missing
        return f"graph mode, slowest nodes: not measured ({type(e).__name__}: {str(e)[:120]})"
    if low.stopped_at:
        return f"graph mode, slowest nodes: not measured ({low.why[:120]})"
    return (f"graph mode, slowest nodes over {runs} runs: {top_nodes_line(low)} "
            f"({time.perf_counter() - t0:.1f} s)")
