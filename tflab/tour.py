"""`tflab tour`: every lab step on one real model, end to end.

The default model is Keras ``MobileNetV3Small(weights=None,
input_shape=(96, 96, 3), classes=10)``: random weights, nothing downloaded.
Each step's section lives in ``tflab/_tour/<step>.py``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from pathlib import Path

from tflab._io.progress import Progress
from tflab._tour.context import TourContext, load_user_model  # noqa: F401  (the sections' context)
# The model helpers the sections share live in tflab.models (a section
# must not import this module, which imports every section).
from tflab.models import (IMAGE_SHAPE, NUM_CLASSES, build_default_model,  # noqa: F401
                               example_batch, make_train_step, model_input_spec, tour_dataset)

# (module under tflab._tour, title). Missing modules are skipped.
SECTIONS = [
    ("s01_trace", "Step 1 · trace_and_inspect: the inference FuncGraph"),
    ("s02_retrace", "Step 2 · RetraceProbe: why the training step retraced"),
    ("s03_demo", "Step 3 · demonstrate_retracing: measured triggers"),
    ("s04_stabilize", "Step 4 · stabilize: one trace for every batch size"),
    ("s05_autograph", "Step 5 · autograph_diff: Python control flow → graph"),
    ("s06_modes", "Step 6 · compare_modes: eager vs graph vs XLA"),
    ("s07_export", "Steps 7–8 · SavedModel and TFLite round trips"),
    ("s09_custom_op", "Custom op · WarpSoftmax"),
    ("s10_precision", "Step 10 · compare_precisions: float32 vs mixed_bfloat16 vs mixed_float16"),
    ("s11_distribute", "Step 11 · tf.distribute: traces and replica bodies under MirroredStrategy"),
]

class _DropRetracingWarning(logging.Filter):
    """Drops TF's "N out of the last M calls … triggered tf.function retracing" warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


def _write_views(report: dict, shared: dict, html_target, tb_target, quiet: bool) -> None:
    """The ``--html`` page and the ``--tensorboard`` event file, after the report."""
    from tflab.report.pages import tour_page, write_tensorboard

    if html_target is not None:
        html_target.write(tour_page(report, shared))
        if not quiet:
            print(f"page: {html_target.path}")
    if tb_target is not None and shared.get("trace_report") is not None:
        event = write_tensorboard(tb_target, shared["trace_report"])
        if not quiet:
            print(f"TensorBoard event file: {event}  (tensorboard --logdir {tb_target.path})")


def run_tour(model_path: str | None = None, out_dir: str = "saved_models/tour",
             quiet: bool = False, only: list[str] | None = None, html: str | None = None,
             force: bool = False, tensorboard: str | None = None) -> dict:
    """Runs every available tour section and writes ``report.json`` under ``out_dir``.

    The sections write into a temporary folder beside ``out_dir``, which is
    renamed into place whole at the end (as ``export`` does): a failed or
    interrupted tour leaves ``out_dir`` as it was.

    Args:
        model_path: a ``.keras`` file or SavedModel folder; None for the default model.
        out_dir: output folder; a non-empty one is refused unless ``force``.
        force: replace a non-empty ``out_dir`` (a folder; never the current
            folder or one of its parents).
        quiet: print nothing to stdout (the progress line still goes to stderr).
        only: section module names to run (default: all).
        html: also write the self-contained HTML page there (`tflab.report.pages.tour_page`).
        force: replace an existing ``html`` file.
        tensorboard: also write step 1's FuncGraph as a TensorBoard event file under this folder.

    Returns:
        The JSON report as a dict (also written to ``out_dir/report.json``).

    Raises:
        UsageError: ``only`` names a section that is not one of `SECTIONS`
            (e.g. ``"6"`` for ``"s06_modes"``); ``model_path`` is missing or not a model; ``out_dir`` is
            not a folder path, or a non-empty folder without ``force``; ``html``
            exists (without ``force``), is a folder or lies under a regular file.
    """
    from tflab.report.jsonable import to_jsonable
    from tflab._io.paths import output_path

    # A bad --out or --model path fails before any progress line is printed;
    # --out is probed by really creating a folder there.
    started = time.perf_counter()
    replaces = _check_tour_out(Path(out_dir), force)  # before output_path: its --force rule would speak first
    target = output_path(out_dir, "--out", folder=True, exclusive=not force, noun="tour")
    if replaces:
        target.replace = True  # an empty folder, or --force: renamed over; else the rename is exclusive
        target.only_if_empty = not force  # an empty folder: only while it stays empty (two racing tours)
    from tflab.report.pages import html_output, tensorboard_output

    html_target, tb_target = html_output(html, force), tensorboard_output(tensorboard)
    if only is not None:
        from tflab.errors import UsageError

        if isinstance(only, str) or not all(isinstance(n, str) for n in only):
            raise UsageError(f"only must be a list of section names, got {only!r}; the sections are "
                             f"{', '.join(m for m, _ in SECTIONS)}")
        unknown = [n for n in only if n not in dict(SECTIONS)]
        if unknown:
            raise UsageError(f"only: unknown section(s) {unknown}; the sections are "
                             f"{', '.join(m for m, _ in SECTIONS)}")
    sections = [(m, t) for m, t in SECTIONS if only is None or m in only]
    if any(m == "s10_precision" for m, _ in sections):
        # Step 10 runs mixed_bfloat16, which a capped oneDNN cannot (tflab.process.bfloat16_probe):
        # said before step 1, not after minutes of work. No child without ONEDNN_MAX_CPU_ISA.
        from tflab.process.bfloat16_probe import check_bfloat16_kernels

        check_bfloat16_kernels(instead="(the tour's step 10 compares mixed_bfloat16 with float32)")
    available = []
    for modname, title in sections:
        try:
            available.append((importlib.import_module(f"tflab._tour.{modname}"), title))
        except ModuleNotFoundError as e:
            if e.name != f"tflab._tour.{modname}":
                raise
    model = None if model_path is None else load_user_model(model_path)
    progress = Progress("tour", total=len(available) + 1)
    names = [mod.__name__.rsplit(".", 1)[-1] for mod, _ in available]
    tmp = target.temp_dir()
    out = tmp
    from tflab._tour.lane import TRAINING_SECTIONS, Lane, lane_sections

    # Sections that need only the model run in a second process from now on
    # (tflab._tour.lane), beside the sections this process traces. It starts before this
    # process imports TensorFlow (~3 CPU-s): the two imports overlap on two cores.
    in_lane = lane_sections(names)
    lane = None
    # Everything from the temporary folder on is undone on the way out (Ctrl-C, SIGTERM, an
    # error): the imports, the model build and the configuration probe take seconds.
    try:
        if in_lane:
            first = names.index(in_lane[0])
            lane = Lane(in_lane, tmp, target.path, model_path,
                        training=[n for n in names[:first] if n in TRAINING_SECTIONS])
        import tensorflow  # noqa: F401  (imported here first, not by two threads at once)

        from tflab._tour.background import start_jobs

        # The op's compilers and the labs' processes run on the other core while the
        # sections before them trace on this one (tflab._tour.background).
        shared: dict = dict(start_jobs(names, default_model=model_path is None))
        progress("building MobileNetV3Small" if model_path is None else f"loaded {model_path}")
        if model is None:
            model = build_default_model()
        report: dict = {"model": model_path or "MobileNetV3Small(weights=None, input_shape=(96, 96, 3), classes=10)"}
        from tflab.runtime import runtime_config

        config = runtime_config()  # what every number below was measured on
        report["config"] = config.to_dict()
        if not quiet:
            print(f"configuration: {config.one_line()}")
        ctx = TourContext(model=model, model_source=model_path or "default", out_dir=out,
                          report=report, progress_line=progress, quiet=quiet, final_dir=target.path,
                          shared=shared)
    except BaseException:
        if lane is not None:
            lane.stop()
        target.discard(tmp)
        raise
    t0 = time.perf_counter()
    timings = {}
    tf_logger = logging.getLogger("tensorflow")
    quiet_retracing = _DropRetracingWarning()
    tf_logger.addFilter(quiet_retracing)  # the tour retraces on purpose; the probe explains it
    lane_report: dict = {}
    try:
        for mod, title in available:
            name = mod.__name__.rsplit(".", 1)[-1]
            progress(title)
            ctx.section(title)
            t = time.perf_counter()
            rec = None if lane is None or name not in lane.sections else lane.result(name, ctx.progress)
            if rec is not None:  # the lane ran it: its text, report entries and its own seconds
                if not quiet:
                    print(rec["text"], end="")
                report.update(rec["report"])
                timings[name] = rec["seconds"]
                lane_report.setdefault("sections", []).append(name)
                lane_report["waited_seconds"] = round(lane_report.get("waited_seconds", 0.0)
                                                      + time.perf_counter() - t, 2)
                continue
            if lane is not None and name in lane.sections:
                ctx.progress(f"the second process gave no result ({lane.failure}): running {name} here")
                lane_report["failure"] = lane.failure
            mod.run(ctx)
            timings[name] = round(time.perf_counter() - t, 2)
        if lane is not None:
            shared.update(lane.shared)
            report["second_process"] = {**lane_report, "training_batches_replayed": lane.training_steps}
        report["section_seconds"] = timings
        report["seconds"] = round(time.perf_counter() - t0, 2)
        report["slowest_section"] = max(timings, key=timings.get) if timings else None
        report["total_seconds"] = round(time.perf_counter() - started, 2)  # model build included
        # Paths in the report name the final folder, not the temporary one.
        report = json.loads(json.dumps(to_jsonable(report)).replace(
            json.dumps(str(tmp))[1:-1], json.dumps(str(target.path))[1:-1]))
        output_path(out / "report.json", "--out", overwrite=True).write(  # in the tour's own temp folder
            json.dumps(report, indent=2))
        from tflab.errors import raise_if_terminated

        raise_if_terminated()  # a SIGTERM a finalizer swallowed: do not commit
        target.commit(tmp)
    except BaseException:
        target.discard(tmp)  # the temporary folder and the --out parents created for it
        raise
    finally:
        tf_logger.removeFilter(quiet_retracing)
        if lane is not None:
            lane.stop()
    if not quiet:
        slowest = report.get("slowest_section")
        print(f"\nreport: {target.path / 'report.json'}")
        print(f"total {report['total_seconds']:.1f} s (sections {report['seconds']:.1f} s)"
              + (f"; slowest section {slowest} {timings[slowest]:.1f} s" if slowest else "")
              + f" ({len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}"
              + f" CPUs, load average {os.getloadavg()[0]:.1f})")
    _write_views(report, ctx.shared, html_target, tb_target, quiet)
    return report


def _check_tour_out(out: Path, force: bool) -> bool | None:
    """``export``'s rules for ``tour --out`` (`tflab._io.paths.check_folder_out`): a non-empty folder needs
    ``force``, and ``force`` replaces only a folder tflab wrote (its marker and nothing else); never
    cwd or its parents.

    Raises:
        UsageError: one line naming what is there.

    Returns:
        True when an existing folder will be replaced, None when ``out`` is new.
    """
    from tflab._io.paths import check_folder_out

    return check_folder_out(out, "--out", force, noun="tour")
