"""Lab step 11: tracing under tf.distribute (MirroredStrategy, MultiWorkerMirroredStrategy).

Logical devices must be configured before TF initializes, and this pytest
process has TF initialized already, so the MirroredStrategy facts are measured
in one fresh process (`run_lab_subprocess`, shared by a module fixture) and the
two-worker facts in real worker processes on 127.0.0.1. Every number was
measured on tensorflow 2.21.0 (CPU, oneDNN on and off).

The setup: 2 logical CPUs, 10 examples batched by 4, so global
batches 4, 4, 2 and per-replica batches 2, 2, 1.
"""

from __future__ import annotations

import re

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from tflab import distribute
from tflab.distribute import WorkerError, run_lab_subprocess, run_workers
from tflab.errors import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture(scope="module")
def lab():
    """The MirroredStrategy lab, export included, measured once in a fresh process."""
    return run_lab_subprocess(export=True, timeout=180)


# --- MirroredStrategy: counts -------------------------------------------------


def test_setup_is_two_replicas_with_per_replica_batches_2_2_1(lab):
    assert lab["replicas_in_sync"] == 2
    assert lab["per_replica_shapes"] == [[[2, 4], [2, 4]], [[2, 4], [2, 4]], [[1, 4], [1, 4]]]


def test_plain_step_traces_twice_and_replica_body_runs_four_times(lab):
    plain = lab["plain"]
    # Two per-replica shapes, (2, 4) and (1, 4): two traces, TF's count agrees.
    assert (plain["trace_count"], plain["tf_tracing_count"], plain["calls"]) == (2, 2, 3)
    # MirroredStrategy runs the replica body once per replica per trace: 2 × 2.
    assert plain["replica_runs"] == 4
    assert plain["replica_runs_per_trace"] == {"1": 2, "2": 2}
    assert "replica_step ran 4× in 2 trace(s): 2× per trace, once per replica (replicas 0, 1)" \
        in plain["text"]


def test_per_replica_trace_count_comes_from_trace_events_and_equals_tfs_count(lab):
    """Each replica-body run carries the TraceEvent of the outer trace it ran in (the
    probe's own event for that trace, seen from its replica context), and the per-replica trace
    count is a count of those events: each replica's body ran in each of TF's 2 traces."""
    plain = lab["plain"]
    assert plain["replica_traces"] == {"0": plain["tf_tracing_count"], "1": plain["tf_tracing_count"]} \
        == {"0": 2, "1": 2}
    runs = plain["replica_events"]
    assert sorted((r["trace"], r["replica"]) for r in runs) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(r["same_trace_event"] for r in runs)
    assert sorted({r["context"] for r in runs}) == ["MirroredStrategy replica 0", "MirroredStrategy replica 1"]
    assert lab["element_spec"]["replica_traces"] == {"0": 1, "1": 1}


def test_element_spec_signature_gives_one_trace_and_two_bodies(lab):
    es = lab["element_spec"]
    assert (es["trace_count"], es["replica_runs"], es["expect_traces_count"]) == (1, 2, 1)
    # element_spec: one PerReplicaSpec per argument, TensorSpec([None, ...]) per replica.
    assert es["spec"].startswith("(PerReplicaSpec(TensorSpec(shape=(None, 4), dtype=tf.float32")
    assert es["component_specs"] == [[[None, 4], [None, 4]], [[None], [None]]]


def test_stabilize_infers_the_per_replica_signature(lab):
    st = lab["stabilize"]
    assert st["equals_element_spec"] is True and st["given_signature_accepted"] is True
    assert (st["traces"], st["replica_runs"]) == (1, 2)


def test_drop_remainder_gives_one_trace(lab):
    # 10 examples, batch 4, drop_remainder: two batches of 4, one per-replica shape.
    assert lab["drop_remainder"] == {"traces": 1, "replica_runs": 2}


# --- reasons --------------------------------------------------------------------


def test_probe_reasons_name_per_replica_shapes(lab):
    traces = lab["plain"]["traces"]
    assert traces[1]["reasons"] == ["x: per-replica shape (2, 4) -> (1, 4)",
                                    "y: per-replica shape (2,) -> (1,)"]
    assert all("dist_dataset.element_spec" in f and "drop_remainder=True" in f for f in traces[1]["fixes"])
    assert lab["plain"]["reason_kinds"] == ["per_replica_shape", "per_replica_shape"]


@pytest.mark.parametrize("key", ["expect_traces_error", "expect_traces_tf_function_error"],
                         ids=["probe", "tf_function_log"])
def test_expect_traces_fails_naming_per_replica_shapes(lab, key):
    msg = lab[key]
    assert msg.startswith("step traced 2 time(s) in the block, expected at most 1:")
    # The probe compares with its own trace #1 ("#2 vs #1: ..."); the log path names no comparison.
    assert re.search(r"#2( vs #1)?: x: per-replica shape \(2, 4\) -> \(1, 4\)", msg), msg
    assert "dist_dataset.element_spec" in msg


def test_reason_engine_on_per_replica_trace_types():
    from tflab.retrace import make_trace

    def spec(*shapes):
        return "PerReplicaSpec(" + ", ".join(
            f"TensorSpec(shape={s}, dtype=tf.float32, name=None)" for s in shapes) + ")"

    first = make_trace(1, [("x", spec("(2, 4)", "(2, 4)"))], [])
    assert first.to_text() == "#1 first: x=per-replica float32(2, 4) ×2"
    # A global batch of 3 splits as 2 and 1: the replica that changed is named.
    t = make_trace(2, [("x", spec("(2, 4)", "(1, 4)"))], [first])
    assert t.reasons == ["x: per-replica shape replica 1 (2, 4) -> (1, 4) (of 2 replicas)"]
    from tflab.retrace import diff_per_replica

    r = diff_per_replica("x", spec("(2, 4)", "(2, 4)"), spec("(2, 4)"))
    assert [x.text for x in r] == ["x: 2 replicas -> 1"]


# --- trace_and_inspect per device ----------------------------------------------


def test_inspect_reports_replicas_devices_mirrored_variables_and_collectives(lab):
    ins = lab["inspect"]
    assert ins["replicas"] == ["/job:localhost/replica:0/task:0/device:CPU:0",
                               "/job:localhost/replica:0/task:0/device:CPU:1"]
    per_dev = [ins["ops_per_device"][d] for d in ins["replicas"]]
    # The replica body is traced once per device: the same ops on each.
    assert per_dev[0] == per_dev[1] > 0
    # One MirroredVariable, listed once, captured as one handle per replica.
    assert [(v["type"], v["name"], len(v["devices"])) for v in ins["mirrored_variables"]] == \
        [("MirroredVariable", "w:0", 2)]
    assert ins["component_handles"] == 2
    # One all_reduce in the body: TF 2.21 on CPU emits one CollectiveReduceV2 per device.
    assert ins["cross_replica_ops"] == {"CollectiveReduceV2": 2}
    assert lab["weights_mirrored_equal"] is True


# --- export after distributed training ----------------------------------------------


def test_export_after_mirrored_training(lab):
    ex = lab["export"]
    assert ex["variable_types"] == ["MirroredVariable"]
    assert ex["saved_model_bit_exact"] is True
    # tflab.tflite_roundtrip's float bound (tflab/litert/bounds.py) holds.
    assert ex["tflite_within_bound"] is True and ex["tflite_max_abs_error"] <= ex["tflite_bound"]
    # No collective/NCCL op and no replica device survives the save.
    assert ex["distribution_ops"] == {} and ex["replica_devices"] == []
    assert not any(t.startswith(("Collective", "Nccl")) for t in ex["op_types"])
    assert ex["op_types"].get("MatMul", 0) >= 2  # the two Dense layers are there


# --- two workers on 127.0.0.1 -----------------------------------------------------------


def test_two_workers_report_one_row_per_worker(run_cli):
    code, out, err = run_cli("distribute", "--mode", "workers", "--json", "--timeout", "60")
    assert code == 0, err
    rep = json.loads(out)["workers"]
    # The record convention: the step's name as the chief's probe saw it, and the config of a worker
    # (the process where TF ran: the parent never imports TF).
    import tensorflow as tf

    assert rep["function_name"] == "step" and rep["config"]["tf_version"] == tf.__version__
    rows = rep["rows"]
    assert [r["task"] for r in rows] == [0, 1]
    assert len({r["address"] for r in rows}) == 2 and all(r["address"].startswith("127.0.0.1:") for r in rows)
    for r in rows:
        assert r["replicas_in_sync"] == 2  # one CPU replica per worker
        assert r["local_batches"] == [4, 4, 2]
        # Per worker: 2 traces (local batch 4, then 2), 1 local replica -> 2 bodies.
        assert (r["step_traces"], r["replica_runs"]) == (2, 2)
        assert r["step_reasons"] == ["x: per-replica shape (4, 4) -> (2, 4)", "y: per-replica shape (4,) -> (2,)"]
        # SUM over workers of the per-worker batch size: 4+4, 4+4, 2+2.
        assert r["reduced"] == [8.0, 8.0, 4.0]
    # The chief's worker-dependent flag retraces its local function; worker 1 never flips it.
    assert [r["summary_traces"] for r in rows] == [2, 1]
    assert rows[0]["summary_reasons"] == ["verbose: False -> True"] and rows[1]["summary_reasons"] == []
    # Synchronous training: every worker applies the same all-reduced gradient.
    assert rows[0]["weights"] == rows[1]["weights"] and rows[0]["weights"] != [0.0] * 4
    assert {"step_traces", "replica_runs", "reduced", "weights"} <= set(rep["same"])
    assert {"summary_traces", "local_data_sum"} <= set(rep["differs"])


def test_worker_crash_is_one_line_and_leaves_no_process():
    pids: list[int] = []
    with pytest.raises(WorkerError) as e:
        run_workers(2, timeout=60, crash_worker=1, on_start=pids.extend)
    assert str(e.value).startswith(f"worker 1 (pid {pids[1]}) was killed by SIGKILL; stopped worker 0")
    assert "\n" not in str(e.value)
    assert len(pids) == 2 and not any(_alive(p) for p in pids)


_RUNNER = ("import sys; from tflab.distribute import run_workers; "
           "run_workers(2, timeout=60, on_start=lambda p: print(*p, flush=True))")


def _start_runner():
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    if not ready:
        proc.kill()
        proc.wait(5)
        pytest.fail("the runner printed no worker pids within 30 s")
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    return proc, pids


def _wait_gone(pids, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_ctrl_c_stops_every_worker():
    proc, pids = _start_runner()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    # The runner stops and reaps its workers before it exits.
    assert [p for p in pids if _alive(p)] == []


def test_workers_exit_when_their_runner_is_killed():
    proc, pids = _start_runner()
    proc.kill()  # SIGKILL: no cleanup code runs in the runner
    proc.communicate(timeout=10)
    # Each worker polls its parent pid every 0.2 s and exits when it changes.
    assert _wait_gone(pids, 15) == []


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("argv, needle", [
    (["--mode", "workers", "--crash-worker", "2"], "argument --crash-worker: must be an integer <= 1, got 2"),
    (["--mode", "mirrored", "--crash-worker", "1"], "--crash-worker needs --mode workers"),
    (["--timeout", "0"], "argument --timeout: must be a finite number > 0, got 0"),
], ids=["crash_index", "crash_mirrored", "timeout"])
def test_cli_bad_input_is_one_line_exit_2(run_cli, argv, needle):
    code, out, err = run_cli("distribute", *argv)
    assert code == 2 and out == ""
    assert err.startswith("tflab distribute: error: ") and needle in err and err.count("\n") == 1


def test_run_workers_takes_two_workers_only():
    with pytest.raises(UsageError, match="n must be 2"):
        run_workers(3)


def test_logical_cpus_after_tf_initialized_is_a_usage_error():
    import tensorflow as tf

    tf.constant(1.0) + 1.0  # initializes TF's context in this process
    n = len(tf.config.list_logical_devices("CPU")) + 1
    with pytest.raises(UsageError, match="fresh process"):
        distribute.configure_logical_cpus(n)


def test_tour_section_reports_the_lab(lab, monkeypatch, tmp_path):
    """The tour's step 11 prints and stores the lab's facts (the lab itself is the fixture's run)."""
    from tflab._io.progress import Progress
    from tflab._tour import s11_distribute
    from tflab.distribute import lab as lab_module
    from tflab.tour import TourContext

    calls = []
    monkeypatch.setattr(lab_module, "run_lab_subprocess", lambda **kw: calls.append(kw) or lab)
    ctx = TourContext(model=None, model_source="default", out_dir=tmp_path, report={},
                      progress_line=Progress("tour", enabled=False), quiet=True)
    s11_distribute.run(ctx)
    assert calls == [{"export": False, "timeout": 90}]
    rep = ctx.report["distribute"]
    assert (rep["plain"]["trace_count"], rep["plain"]["replica_runs"]) == (2, 4)
    assert rep["plain"]["reasons"][0] == "x: per-replica shape (2, 4) -> (1, 4)"
    assert (rep["element_spec"]["trace_count"], rep["stabilize"]["traces"]) == (1, 1)
    assert rep["inspect"]["cross_replica_ops"] == {"CollectiveReduceV2": 2}
    # report.json keeps the tour facts' key for the step's name (tests/data/tour/expected_facts.json).
    assert rep["inspect"]["function"] == rep["inspect"]["function_name"] == "step"


_THREE_REPLICAS = r'''
import json
from tflab.distribute import configure_logical_cpus, mirrored_strategy
configure_logical_cpus(3)
import numpy as np
import tensorflow as tf
from tflab import stabilize
strategy = mirrored_strategy(3)
# 11 rows in batches of 6: per replica (2, 2, 2), then (2, 2, 1): replicas 0 and 1 never vary.
data = tf.data.Dataset.from_tensor_slices(np.ones((11, 4), np.float32)).batch(6)
dist = strategy.experimental_distribute_dataset(data)
step = lambda x: strategy.run(tf.reduce_sum, args=(x,))
stable = stabilize(step, examples=dist)
shorter = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices(np.ones((9, 4), np.float32)).batch(6))  # (2, 2, 2), (1, 1, 1)
runs = [float(strategy.reduce("SUM", stable(x), axis=None)) for x in shorter]
print(json.dumps({"spec": [s.shape.as_list() for s in stable.input_signature[0]._value_specs],
                  "element_spec": [s.shape.as_list() for s in dist.element_spec._value_specs],
                  "runs": runs}))
'''


def test_stabilize_on_a_distributed_dataset_keeps_its_element_spec_none_dims_per_replica():
    """A replica whose shape never varied in the examples still gets the element_spec's None batch
    dim: a later batch may leave it short (was (2, 4), so a (1, 4) replica batch was refused)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", _THREE_REPLICAS], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["spec"] == got["element_spec"] == [[None, 4]] * 3
    assert got["runs"] == [24.0, 12.0]


def test_a_per_replica_reason_names_the_replica_that_changed():
    """Batch 6 on 3 replicas, then 5: only replica 2 goes (2, 4) -> (1, 4); the reason said
    '(2, 4) -> [(2, 4), (2, 4), (1, 4)]', one shape against a list."""
    import tensorflow as tf

    from tflab._tf.function import make_per_replica_spec
    from tflab.retrace import diff_per_replica

    spec = lambda *rows: repr(make_per_replica_spec([tf.TensorSpec([r, 4]) for r in rows]))
    (short,) = diff_per_replica("x", spec(2, 2, 2), spec(2, 2, 1))
    assert short.text == "x: per-replica shape replica 2 (2, 4) -> (1, 4) (of 3 replicas)"
    (all_short,) = diff_per_replica("x", spec(2, 2), spec(1, 1))
    assert all_short.text == "x: per-replica shape (2, 4) -> (1, 4)"
