"""The tour made faster keeps every claim, and its parallel parts behave.

* The report's facts (keys and verdicts, `tflab._tour.facts`) are compared with
  those of a tour of main at 176dbcb, before the speed work
  (``tests/data/tour/expected_facts.json``, from ``report_176dbcb.json``
  beside it). The comparison is proved able to fail by planted defects.
* `tflab.litert.pool.ConversionPool`: workers capped at the schedulable CPUs,
  each variant handed on as soon as it is done, a failed worker costing its
  own variants only.
* `tflab._tour.background`: the early-started jobs hand back their value or
  their exception.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "tour"


def _expected():
    return json.loads((DATA / "expected_facts.json").read_text())


# Facts a later issue changed on purpose, over the old tour's: the TraceType diff names each
# parameter's exact TensorSpec in the retrace fix (the reasons themselves are unchanged).
# the fix is the whole input_signature from every call, run on the recorded calls before it is printed.
# A fix is checked on the user's values only where a replay can start from the state the first call
# ran in: the tour's SGD creates its momentum slots in the first call (that is what makes TF's
# variable-creation re-trace), so their values before it are unknown and the fix is checked on traces
# only, saying why. (A replay from the slots' values after the three calls compared outputs the user
# never had.)
INTENDED_CHANGES = {"retrace.traces[2].fixes": [
    "give the tf.function an input_signature: input_signature=[tf.TensorSpec([None, 96, 96, 3], tf.float32), "
    "tf.TensorSpec([None], tf.int64)] (checked on traces only, outputs not compared: 1 trace for your 3 calls, "
    "instead of 3; traces only, values not kept (tf.Variables were created after your first call began "
    "(sgd/conv_1_bn_beta_momentum, sgd/conv_1_bn_gamma_momentum, sgd/conv_1_kernel_momentum, …) whose values "
    "before your first call tflab cannot know, so a replay cannot start where your first call did; create "
    "them before the first call to have fixes checked on your values))"] * 2,
    # the unscaled float16 run no longer guesses "a loss scale may rescue them
    # (loss_scale='dynamic')": a loss-scale fix is printed only when it was run and rescued every
    # zeroed gradient element, and here the scaled run beside it (2^15) is that measurement.
    # every printed fix says how it was checked; TF's variable-creation re-trace has nothing to run.
    "retrace.traces[1].fixes": [
        "nothing to fix: TF traces once more after the first call created tf.Variables; create them outside "
        "the tf.function to skip it (not checked: TF's own re-trace: there is nothing to change)"],
    "precision.tiny_loss.policies.mixed_float16.unscaled.verdict":
        "float16 underflows 512/512 gradient elements of x",
    # the export's end-to-end bounds for the quantized variants cannot fail on
    # this model, and say so. Before, the second process replayed all seven training steps, which
    # saturate the softmax on the export's examples (every element within 1e-26 of 0 or 1): dynamic and
    # float16 came out bit-exact, and a tiny first-order bound (vanishing gradients) passed for
    # "not vacuous" although no error inside the model could move the output. Now the lane replays two
    # steps (outputs 0.010-0.408, none saturated): the float variant's bound is tight, while the
    # dynamic (11.2), float16 (0.711 on 5 of 50 elements) and int8 (11.3) bounds exceed the output's
    # range 0.398. `tflab.litert.check` names saturated outputs vacuous too. The per-op check still
    # judges every op of every variant (0 outside their bounds, unchanged).
    **{f"export.variants.{q}.vacuous_outputs": ["output_0"] for q in ("dynamic", "int8")},
    # "Cannot fail" is measured now: every float weight x1.1 in TF moves float16's output past its
    # per-element bound (0.711 holds only on 5 of 50 elements), so that check can fail, and says nothing.
    "export.variants.float16.vacuous_outputs": []}


def _expected_now():
    """The old tour's facts with `INTENDED_CHANGES` applied: what today's tour must state."""
    e = _expected()
    e["verdicts"].update(INTENDED_CHANGES)
    return e


def _old_report():
    return json.loads((DATA / "report_176dbcb.json").read_text())


def test_the_stored_expectation_is_the_old_tours_facts():
    from tflab._tour.facts import compare_facts, report_facts

    facts = report_facts(_old_report())
    assert facts == _expected()
    # Every section of the tour states facts in it (a section with none could drop them all).
    sections = {k.split(".", 1)[0] for k in facts["keys"]}
    assert {"trace", "retrace", "demonstrate_retracing", "stabilize", "autograph", "diagnosis", "modes",
            "export", "custom_op", "precision", "distribute"} <= sections
    assert compare_facts(_old_report(), _expected()) == []


@pytest.mark.parametrize("plant, expect", [
    (lambda r: r["stabilize"]["train_step"].pop("traces"), "missing key stabilize.train_step.traces"),
    (lambda r: r["retrace"].update(trace_count=4), "verdict retrace.trace_count: 4, expected 3"),
    (lambda r: r["retrace"]["traces"][1].update(kind="retrace"), "verdict retrace.traces[1].kind"),
    (lambda r: r["retrace"]["traces"].pop(), "missing verdict retrace.traces[2].kind"),
    (lambda r: r["export"]["variants"]["int8"].update(within_bound=False),
     "verdict export.variants.int8.within_bound: False, expected True"),
    (lambda r: r["export"].update(saved_model_bit_exact=False), "verdict export.saved_model_bit_exact"),
    (lambda r: r["stabilize"]["inference"]["variants"]["plain"].update(traces=4),
     "verdict stabilize.inference.variants.plain.traces"),
    (lambda r: r.pop("distribute"), "missing key distribute.plain.trace_count"),
    (lambda r: r["modes"]["forward"]["modes"]["xla"].update(error="XLA failed"),
     "verdict modes.forward.modes.xla.error"),
    (lambda r: r["modes"].pop("fusion_count"), "missing key modes.fusion_count"),
    # a cheaper model for the second process must keep every TFLite bound able to fail.
    (lambda r: r["export"]["variants"]["int8"].update(vacuous_outputs=["output_0"]),
     "verdict export.variants.int8.vacuous_outputs"),
    (lambda r: r["export"]["variants"]["dynamic"].update(vacuous_outputs=["output_0"]),
     "verdict export.variants.dynamic.vacuous_outputs"),
], ids=["key-dropped", "trace-count", "trace-kind", "trace-dropped", "bound-exceeded", "savedmodel-not-exact",
        "stabilize-count", "section-dropped", "xla-error", "fusion-count-dropped",
        "int8-bound-vacuous", "dynamic-bound-vacuous"])
def test_a_dropped_or_changed_fact_is_caught(plant, expect):
    from tflab._tour.facts import compare_facts

    report = copy.deepcopy(_old_report())
    plant(report)
    diffs = compare_facts(report, _expected())
    assert any(d.startswith(expect) for d in diffs), diffs


def test_values_that_vary_by_cpu_are_not_verdicts():
    """ULPs, errors, seconds and sizes differ across ISAs and load: changing them is no difference."""
    from tflab._tour.facts import compare_facts

    report = copy.deepcopy(_old_report())
    report["modes"]["forward"]["modes"]["graph"]["max_ulp"]["outputs"] += 7
    report["export"]["variants"]["none"]["max_abs_error"] *= 2
    report["export"]["variants"]["none"]["convert_seconds"] = 0.5
    report["section_seconds"] = {k: v / 3 for k, v in report["section_seconds"].items()}
    report["total_seconds"] = 1.0  # a fact the new tour adds: allowed by default
    assert compare_facts(report, _expected()) == []
    assert compare_facts(report, _expected(), new_keys=True) == ["new key total_seconds"]


@pytest.mark.slow
def test_the_full_tour_states_the_same_facts_as_before(full_tour):
    """The whole tour on MobileNetV3Small, fresh process as `make tour`: facts equal the old tour's.

    Also its last lines: the total and the slowest section, read back from report.json. The tour
    is the session's one (conftest's ``full_tour``: started when collection ends, it runs beside
    the other tests, and this test runs last).
    """
    from tflab._tour.facts import compare_facts

    returncode, stdout, stderr, out = full_tour
    assert returncode == 0, stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    differ = compare_facts(report, _expected_now())
    # a fix that differs is shown with what was tried before it and why that failed
    assert differ == [], "\n".join(differ + [ln.strip() for ln in stdout.splitlines()
                                             if ln.strip().startswith(("fix:", "tried", "not checked"))])
    slowest = report["slowest_section"]
    assert report["section_seconds"][slowest] == max(report["section_seconds"].values())
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(f"total {report['total_seconds']:.1f} s") and f"slowest section {slowest}" in last
    # The custom-op section waited for the build the tour started in the background.
    assert report["custom_op"]["opcheck_failed"] is None
    _the_tours_export_judged_every_op(out / "export", report)


def _the_tours_export_judged_every_op(export_dir: Path, report: dict) -> None:
    """What the tour's export of MobileNetV3Small shows beyond its facts, read from its own files.

    The SavedModel keeps both signatures with the batch dimension free; the float flatbuffer has
    one CONV_2D per ``Conv2D`` and one DEPTHWISE_CONV_2D per ``DepthwiseConv2dNative`` of the
    inference FuncGraph (43 and 11: squeeze-excite and the 1×1 head included), BatchNorm folded
    into them. Every variant's per-op check judged every op of the float model's
    ``serving_default`` subgraph (matched by position and name), none outside its bound: int8 is the
    variant with the most requantized ops (MEAN in the squeeze-excite blocks is the tightest, about
    one output step), float16 the one whose bound is tightest.
    """
    from tflab.litert.ops import read_ops

    export = json.loads((export_dir / "report.json").read_text())
    sm = export["saved_model"]
    assert sm["kind"] == "keras" and sm["bit_exact"] is True and set(sm["signatures"]) == {"serve", "serving_default"}
    (spec,) = sm["signatures"]["serving_default"]["inputs"].values()
    assert spec["shape"] == [None, 96, 96, 3]
    graph_ops = report["trace"]["op_counts"]
    none = export["variants"]["none"]["check"]
    assert (none["op_counts"]["CONV_2D"], none["op_counts"]["DEPTHWISE_CONV_2D"]) == (
        graph_ops["Conv2D"], graph_ops["DepthwiseConv2dNative"]) and graph_ops["Conv2D"]
    assert not any("BATCH_NORM" in op for op in none["op_counts"])
    assert none["outputs"]["output_0"]["argmax_agreement"] == 1.0
    parsed = read_ops((export_dir / "model_none.tflite").read_bytes())
    float_ops = len(parsed.subgraphs[parsed.subgraph_of("serving_default")])
    for q in ("none", "dynamic", "float16", "int8"):
        per_op = export["variants"][q]["check"]["per_op"]
        assert per_op["ok"] and (per_op["matched"], per_op["unmatched"], per_op["unchecked"]) == (float_ops, 0, {}), (
            q, float_ops, {k: per_op[k] for k in ("matched", "unmatched", "unchecked", "outside")})


def test_tour_prints_total_and_slowest_section(small_keras_file, tmp_path, capsys):
    from tflab.tour import run_tour

    report = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "t"),
                      only=["s01_trace", "s03_demo"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    slowest = max(report["section_seconds"], key=report["section_seconds"].get)
    assert report["slowest_section"] == slowest
    assert last.startswith(f"total {report['total_seconds']:.1f} s (sections {report['seconds']:.1f} s); "
                           f"slowest section {slowest} {report['section_seconds'][slowest]:.1f} s")
    assert report["total_seconds"] >= report["seconds"] >= sum(report["section_seconds"].values()) - 0.05


# ------------------------------------------------------------------- ConversionPool


def test_pool_workers_are_capped_at_the_schedulable_cpus(monkeypatch):
    from tflab.litert import pool as litert_pool

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert litert_pool.schedulable_cpus() == 1
    seen = []
    pool = litert_pool.ConversionPool(["none", "dynamic", "float16", "int8"],
                                      lambda qs, done: [seen.append(tuple(qs)), *[done(q, {"q": q}) for q in qs]])
    pool.join()
    assert pool.workers == 1 and seen == [("none", "dynamic", "float16", "int8")]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5}, raising=False)
    seen.clear()
    pool = litert_pool.ConversionPool(["none", "dynamic", "float16"], lambda qs, done: [
        seen.append(tuple(qs)), *[done(q, {"q": q}) for q in qs]], workers=2)
    pool.join()
    # Round-robin in check order: the first variants finish first.
    assert pool.workers == 2 and sorted(seen) == [("dynamic",), ("none", "float16")]
    assert [pool[q]["q"] for q in ("none", "dynamic", "float16")] == ["none", "dynamic", "float16"]


def test_pool_hands_each_variant_on_before_the_others_finish():
    """The LiteRT check of a done variant can run while another worker still converts."""
    from tflab.litert.pool import ConversionPool

    release = threading.Event()

    def convert(qs, done):
        for q in qs:
            if q == "int8":
                assert release.wait(30), "the caller never read the done variant"
            done(q, {"event": "done", "q": q})

    pool = ConversionPool(["none", "int8"], convert, workers=2)
    assert pool["none"]["event"] == "done"  # returned while int8 is still blocked
    assert pool.pending() == 1
    release.set()
    assert pool["int8"]["q"] == "int8" and pool.pending() == 0


def test_a_failed_worker_costs_its_own_variants_only():
    from tflab.errors import TflabError
    from tflab.litert.pool import ConversionPool

    def convert(qs, done):
        for q in qs:
            if q == "dynamic":
                raise TflabError("converter worker exited (1) before converting ['dynamic']")
            done(q, {"event": "done"})

    pool = ConversionPool(["none", "dynamic", "float16", "int8"], convert, workers=2)
    assert pool["none"]["event"] == "done" and pool["float16"]["event"] == "done"
    with pytest.raises(TflabError, match="before converting"):
        pool["dynamic"]
    with pytest.raises(TflabError, match="before converting"):  # same worker, after the failure
        pool["int8"]
    with pytest.raises(KeyError):
        pool["bogus"]


def test_a_worker_that_stops_early_does_not_hang_the_caller():
    from tflab.errors import TflabError
    from tflab.litert.pool import ConversionPool

    pool = ConversionPool(["none", "dynamic"], lambda qs, done: None, workers=1)  # reports nothing
    with pytest.raises(TflabError, match="stopped before converting none"):
        pool["none"]


# ------------------------------------------------------------------- background jobs


def test_background_jobs_hand_back_value_or_exception():
    from tflab._tour.background import JOBS, BackgroundJob, start_jobs

    job = BackgroundJob("sum", lambda: sum(range(5)))
    assert job.result() == 10 and job.done() and job.seconds >= 0
    failing = BackgroundJob("bad", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result()
    assert start_jobs(["s01_trace", "s02_retrace"]) == {}  # nothing to start early for these
    assert {v[0] for v in JOBS.values()} == {"custom_op_build", "loss_scaling_demo", "distribute_lab"}
    assert start_jobs([], default_model=False) == {}


# ------------------------------------------------------------------- make test's passes


def test_the_onednn_passes_collect_every_file_with_a_marked_test(collected_test_files):
    """``make test``'s onednn passes collect only ``$(ONEDNN_FILES)`` (a grep): no marked test may be
    left out of them. Checked against the marker as pytest itself applies it, in a run that
    collected the whole suite (``make test``'s main pass)."""
    import shutil

    files, marked = collected_test_files
    every = {p.name for p in Path(__file__).resolve().parents[1].rglob("test_*.py")}
    if files != every or shutil.which("make") is None:
        pytest.skip("needs the whole suite collected (make test's main pass) and make")
    root = Path(__file__).resolve().parents[2]
    listed = subprocess.run(["make", "-s", "onednn-files"], cwd=root, capture_output=True, text=True,
                            check=True).stdout.split()
    listed = {Path(p).name for p in listed}
    assert marked, "no onednn-marked test collected: the marker was renamed?"
    assert marked - listed == set(), f"marked tests the onednn passes would skip: {sorted(marked - listed)}"
    assert listed - marked == set(), f"files collected by the onednn passes for nothing: {sorted(listed - marked)}"


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="per-thread nice values are Linux's")
def test_the_op_build_job_runs_its_processes_at_a_lower_priority():
    """The background jobs' threads, and so the processes they start (compilers, the loss-scaling
    and distribute labs), run at nice +10; the caller's thread keeps its own (the tour's main
    thread and its second process run the sections: the critical path)."""
    import sys

    from tflab._tour.background import JOBS, BackgroundJob

    assert [job[4] for job in JOBS.values()] == [10, 10, 10]
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    child = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    job = BackgroundJob("nice", lambda: int(subprocess.run([sys.executable, "-c", child], capture_output=True,
                                                             text=True, check=True).stdout), nice=10)
    assert job.result() == min(before + 10, 19)  # what a compiler started by the job runs at
    plain = BackgroundJob("plain", lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    assert plain.result() == before
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # this thread unchanged
