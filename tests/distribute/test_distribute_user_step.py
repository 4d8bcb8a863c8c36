"""`tflab distribute FILE.py:STEP` on the user's own replica step.

The step (tests/data/distribute_step.py) all-reduces a gradient of a variable
the file creates at import; tflab imports the file inside strategy.scope(), so
it must come back as ONE MirroredVariable with one component per replica.
The data are 2·B + B//2 rows (`tflab.distribute.user._rows`), batched by B:
with B=4 the global batches are 4, 4, 2. MirroredStrategy rebatches a global
batch of B rows into per-replica batches of ceil(B/N) rows, in replica order,
until the rows run out (measured on TF 2.21): over 3 logical CPUs 4 rows give
2/2/0 and 2 rows give 1/1/0, so replica 2 gets an empty batch on every step,
which must be said (tensorflow/tensorflow#61231). Without the fix the verb took no
FILE.py:STEP at all. Shapes, counts and devices are structural: nothing
here depends on the CPU kernel path.
"""

from __future__ import annotations

import json
import os

import pytest

from tflab.distribute import WorkerError
from tflab.distribute.user import check_user_step, empty_batch_notes, run_user_step
from tflab.errors import UsageError

STEP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "distribute_step.py")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): read its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_user_step_under_mirrored_and_multiworker(run_cli):
    code, out, err = run_cli("distribute", f"{STEP}:replica_step", "--arg", "x=float32[4,4]",
                             "--arg", "y=float32[4]", "--replicas", "3", "--workers", "2", "--json",
                             "--timeout", "120")
    assert code == 0, err
    rep = json.loads(out)
    m = rep["mirrored"]
    assert m["replicas_in_sync"] == 3 and len(m["devices"]) == 3
    assert m["per_replica_rows"] == [[2, 2, 0], [2, 2, 0], [1, 1, 0]]
    # Steps 1 and 2 share per-replica shapes; step 3 changes them: 2 traces, 3 bodies each.
    assert (m["traces"], m["replica_runs"]) == (2, 6)
    # Each replica's body ran in each of the 2 TraceEvents (the replica with 0 rows too).
    assert m["replica_traces"] == {"0": 2, "1": 2, "2": 2}
    assert any(r.startswith("x: per-replica shape") for r in m["reasons"]), m["reasons"]
    assert [e.split(" (")[0] for e in m["empty_batches"]] == [
        f"step {s}: replica 2 received an empty batch" for s in (1, 2, 3)]
    assert m["empty_batches"][2].startswith("step 3: replica 2 received an empty batch (0 rows of 2)")
    inspect = m["inspect"]
    # One MirroredVariable, not 3 variables: its 3 components are captured once each.
    assert [(v["type"], v["name"], len(v["devices"])) for v in inspect["mirrored_variables"]] == \
        [("MirroredVariable", "w:0", 3)]
    assert inspect["component_handles"] == 3 and inspect["cross_replica_ops"] == {"CollectiveReduceV2": 3}
    assert len(inspect["replicas"]) == 3
    workers = rep["workers"]["workers"]
    assert [w["task"] for w in workers] == [0, 1]
    assert all(w["address"].startswith("127.0.0.1:") for w in workers)
    for w in workers:
        # Global batch 4 over 2 workers: per-replica batch 2; each worker reads 2·2+1 = 5 rows.
        assert w["replicas_in_sync"] == 2 and w["per_replica_rows"] == [[2], [2], [1]]
        assert (w["traces"], w["replica_runs"]) == (2, 2)
        # A worker's one replica has its global id (replica_id_in_sync_group): worker 1 is replica 1.
        assert w["replica_traces"] == {str(w["task"]): 2}
        assert w["reasons"] == ["x: per-replica shape (2, 4) -> (1, 4)", "y: per-replica shape (2,) -> (1,)"]
        assert [v["type"] for v in w["inspect"]["mirrored_variables"]] == ["MirroredVariable"]
        assert w["empty_batches"] == []


def test_empty_batch_notes_only_for_zero_rows():
    assert empty_batch_notes([[2, 1], [1, 1]]) == []
    (note,) = empty_batch_notes([[2, 2], [1, 0]])
    assert note.startswith("step 2: replica 1 received an empty batch (0 rows of 1)")


@pytest.mark.parametrize("argv, needle", [
    ([f"{STEP}:replica_step", "--arg", "x=float32[4,4]", "--arg", "y=float32[4]", "--replicas", "0"],
     "argument --replicas: must be an integer >= 2 (one replica distributes nothing: the dataset gives the batch "
     "itself, not per-replica values), got 0"),
    ([f"{STEP}:replica_step", "--arg", "x=float32[4,4]", "--arg", "y=float32[4]", "--workers", "1000"],
     "argument --workers: must be an integer <= 8, got 1000"),
    ([f"{STEP}:replica_step", "--arg", "x=float32[4,4]", "--arg", "y=float32[4]", "--workers", "1"],
     "argument --workers: must be an integer >= 2 (one replica distributes nothing"),
    ([f"{STEP}:replica_step", "--arg", "x=float32[4,4]", "--arg", "y=float32[4]", "--replicas", "1"],
     "argument --replicas: must be an integer >= 2 (one replica distributes nothing"),
    ([f"{STEP}:NOT_A_FUNCTION", "--arg", "x=float32[4,4]"], "NOT_A_FUNCTION in "),
    ([f"{STEP}:replica_step", "--arg", "x=float32[4,4]"], "missing"),
    ([f"{STEP}:replica_step", "--arg", "x=float32[4,4]", "--arg", "y=float32[3]"], "different dims 0"),
    ([f"{STEP}:replica_step", "--arg", "x=float32[None,4]", "--arg", "y=float32[4]"], "dim 0 is the global"),
    ([f"{STEP}:replica_step", "--arg", "x=float32[3,4]", "--arg", "y=float32[3]", "--workers", "2"],
     "does not split evenly over 2 workers"),
    (["--replicas", "3"], "need FILE.py:STEP"),
], ids=["replicas_0", "workers_1000", "workers_1", "replicas_1", "not_a_function", "missing_arg", "batch_mismatch",
        "none_batch",
        "uneven_workers", "demo_replicas"])
def test_bad_input_is_one_line_exit_2(run_cli, argv, needle):
    code, out, err = run_cli("distribute", *argv)
    assert code == 2 and out == "", err
    assert err.startswith("tflab distribute: error: ") and needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("given,runs,left", [("--workers", (None, 3), "MirroredStrategy part is not run"),
                                             ("--replicas", (3, None), "worker part is not run")])
def test_one_count_runs_one_part_and_says_which_is_left_out(run_cli, monkeypatch, given, runs, left):
    """``--workers 3`` alone runs the worker part only; the progress line says the other is not run
    and how to run it (the processes themselves are replaced: what is asserted is what is started)."""
    from tflab.distribute import user

    started = []
    monkeypatch.setattr(user, "run_user_step", lambda step, r, w, **kw: started.append((r, w)) or {})
    monkeypatch.setattr(user, "user_text", lambda result: "")
    code, out, err = run_cli("distribute", f"{STEP}:replica_step", "--arg", "x=float32[6,4]",
                             "--arg", "y=float32[6]", given, "3")
    assert code == 0, err
    assert started == [runs]
    assert left in err and f"give {'--replicas' if given == '--workers' else '--workers'} N too" in err, err


@pytest.mark.parametrize("counts", [dict(replicas=1, workers=None), dict(replicas=None, workers=1),
                                    dict(replicas=True, workers=None)], ids=["replicas_1", "workers_1", "bool"])
def test_the_api_refuses_one_replica_as_the_cli_does(counts):
    """`run_user_step(replicas=1)` started a child that failed with an internal TensorSpec error; the
    API refuses it before starting anything, with the CLI's reason."""
    from tflab.distribute.user import ONE_REPLICA

    step = check_user_step(f"{STEP}:replica_step", ["x=float32[4,4]", "y=float32[4]"])
    with pytest.raises(UsageError) as e:
        run_user_step(step, timeout=5, on_start=lambda pids: pytest.fail(f"started {pids}"), **counts)
    assert "must be 2.." in str(e.value)
    if True not in counts.values():
        assert ONE_REPLICA in str(e.value)


def test_a_failing_user_step_stops_every_process_and_names_the_error():
    step = check_user_step(f"{STEP}:broken_step", ["x=float32[4,4]", "y=float32[4]"])
    pids: list[int] = []
    with pytest.raises(WorkerError) as e:
        run_user_step(step, replicas=2, workers=2, timeout=120, on_start=pids.extend)
    msg = str(e.value)
    assert "\n" not in msg and "exited with status 1" in msg and "numpy" in msg, msg
    assert len(pids) == 3 and not any(_alive(p) for p in pids)


_INSPECT = """
import json, tensorflow as tf
from tflab.distribute import mirrored_strategy
from tflab import trace_and_inspect
s = mirrored_strategy(3)
with s.scope():
    v = tf.Variable(tf.ones([4, 1]))
def rs(x):
    return tf.distribute.get_replica_context().all_reduce("SUM", tf.matmul(x, v))
def step(x):
    return s.run(rs, args=(x,))
ds = s.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(tf.ones([6, 4])).batch(6))
r = trace_and_inspect(step, ds.element_spec)
groups = {k: [(c.name, c.device) for c in comps] for k, comps in r.distributed_variables.items()}
print(json.dumps({"text": r.to_text(max_ops=0), "groups": groups, "variables": len(r.variables)}))
"""


def test_trace_and_inspect_names_one_mirrored_variable_with_its_components():
    """Item 3a: without the fix trace_and_inspect listed Variable:0, Variable/replica_1:0 and
    Variable/replica_2:0 as 3 variables; they are one MirroredVariable on 3 replicas.
    Logical CPUs need a fresh process."""
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    res = subprocess.run([sys.executable, "-c", _INSPECT], capture_output=True, text=True, timeout=240,
                         env=env, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert res.returncode == 0, res.stderr[-2000:]
    rep = json.loads(res.stdout.strip().splitlines()[-1])
    assert rep["variables"] == 3  # TF captures one handle per component
    ((label, comps),) = rep["groups"].items()
    assert label == "MirroredVariable Variable:0"
    assert [n for n, _ in comps] == ["Variable:0", "Variable/replica_1:0", "Variable/replica_2:0"]
    assert [d.rsplit("/", 1)[-1] for _, d in comps] == ["device:CPU:0", "device:CPU:1", "device:CPU:2"]
    assert "3 of these handles are components of 1 distributed variable(s)" in rep["text"]
    assert "ops per device: device:CPU:0: " in rep["text"]
