"""API arguments checked through `tflab._api.argcheck`,
each break with its reproducer, and a healthy call beside each refusal."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import tflab
from tflab.errors import UsageError


# ------------------------------------------------------------------

@pytest.mark.parametrize("old, new", [(1, "a"), (None, None), ({"x": tf.TensorSpec([3])}, 5)])
def test_reasons_between_checks_its_arguments(old, new):
    """`reasons_between(1, "a")` raw TypeError; `(None, None)` returned [] as if the calls matched."""
    with pytest.raises(UsageError, match="reasons_between: (old|new) must be a FunctionType"):
        tflab.reasons_between(old, new)


def test_healthy_reasons_between():
    reasons = tflab.reasons_between({"x": tf.TensorSpec([3])}, {"x": tf.TensorSpec([4])})
    assert [r.text for r in reasons] == ["x: shape (3,) -> (4,)"]
    assert tflab.reasons_between([("x", tf.TensorSpec([3]))], {"x": tf.TensorSpec([3])}) == []


# ------------------------------------------------------------------ (through the API)

def test_trace_script_argv_string_is_refused(tmp_path):
    """`trace_script(path, argv="abc")` ran the script with sys.argv[1:] == ['a', 'b', 'c']."""
    script = tmp_path / "s_ok.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    with pytest.raises(UsageError, match="argv must be a sequence of strings.*split into its characters"):
        tflab.trace_script(str(script), argv="abc")
    result = tflab.trace_script(str(script), argv=["abc"])  # healthy
    assert result.error is None


def test_trace_script_on_a_fifo_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "script.py")
    with pytest.raises(UsageError, match="is a FIFO"):
        tflab.trace_script(str(tmp_path / "script.py"))


# ------------------------------------------------------------------

def test_retrace_probe_called_with_missing_argument():
    """`RetraceProbe(lambda x: x*2)()` raised TF's raw "Binding inputs to tf.function failed"."""
    probe = tflab.RetraceProbe(lambda x: x * 2)
    with pytest.raises(UsageError, match=r"RetraceProbe: <lambda> needs argument 'x'"):
        probe()
    with pytest.raises(UsageError, match="too many positional arguments"):
        probe(1.0, 2.0)
    assert float(probe(tf.constant(2.0))) == 4.0 and probe.calls == 1  # still usable; refusals not counted


def test_probe_of_a_tf_function_and_keywords():
    @tf.function
    def f(x, scale=2.0):
        return x * scale

    probe = tflab.RetraceProbe(f)
    assert float(probe(tf.constant(1.0), scale=3.0)) == 3.0
    with pytest.raises(UsageError, match="unexpected keyword argument 'bogus'"):
        probe(tf.constant(1.0), bogus=1)


# ------------------------------------------------------------------

@pytest.mark.parametrize("seed", ["a", -1, 2**63, 1.5, True])
def test_compare_precisions_seed(seed):
    """`seed="a"` raised numpy's "SeedSequence expects int or sequence of ints"."""
    with pytest.raises(UsageError, match=r"compare_precisions: seed must be an int in \[0, 2\*\*63\)"):
        tflab.compare_precisions(lambda x: tf.nn.relu(x * 2.0), tf.TensorSpec([4]), seed=seed)


# ------------------------------------------------------------------

@pytest.fixture(scope="module")
def flatbuffer(tmp_path_factory):
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": x * 2.0}

    sm = tmp_path_factory.mktemp("b12") / "sm"
    tf.saved_model.save(M(), str(sm))
    return tf.lite.TFLiteConverter.from_saved_model(str(sm)).convert(), sm


@pytest.mark.parametrize("wrap", [bytearray, memoryview], ids=["bytearray", "memoryview"])
def test_check_tflite_takes_bytes_like(flatbuffer, wrap):
    """`check_tflite(bytearray(...), …)` raised "unhashable type: 'bytearray'"."""
    from tflab.litert import check_tflite

    data, sm = flatbuffer
    check = check_tflite(wrap(data), sm, {"x": np.ones((2, 4), np.float32)})
    assert check.ok and check.bit_exact is not None


def test_check_tflite_refuses_a_path_string(flatbuffer):
    from tflab.litert import check_tflite

    with pytest.raises(UsageError, match="takes the flatbuffer's bytes"):
        check_tflite("model.tflite", flatbuffer[1], {"x": np.ones((2, 4), np.float32)})


# ------------------------------------------------------------------

def test_inspect_distributed_without_per_replica_arguments():
    """Plain TensorSpecs and no strategy.run returned "<… 0 replicas, 5 ops …>"."""
    with pytest.raises(UsageError, match="none a PerReplica value or PerReplicaSpec"):
        tflab.inspect_distributed(lambda x: tf.nn.relu(x * 2.0), tf.TensorSpec([4]))


# ------------------------------------------------------------------

def nonefn(x):
    return None


def test_compare_modes_on_a_function_returning_none():
    """Exit 0 "no findings" with `"outputs": [[]]`: nothing was compared."""
    with pytest.raises(UsageError, match=r"compare_modes: fn \(nonefn\) returned no tensor \(None\)"):
        tflab.compare_modes(nonefn, tf.TensorSpec([4]))


def test_static_check_refuses_only_what_is_certain():
    from tflab._api.argcheck import check_returns_tensors

    def falls_through(x):
        y = x * 2.0  # noqa: F841

    def sometimes(x, flag=False):
        if flag:
            return None
        return x

    def nested(x):
        def inner():
            return x
        return None

    none_lambda = lambda x: None  # noqa: E731  (its own line: getsource gives the whole line)
    for fn in (falls_through, nested, none_lambda):
        with pytest.raises(UsageError, match="returned no tensor"):
            check_returns_tensors(fn, (), {}, "compare_modes", "fn")
    def raises(x):
        raise BaseException("base")

    def exits(x):
        import sys
        sys.exit(5)

    for fn in (sometimes, lambda x: x, tf.function(lambda x: x), len, raises, exits):
        check_returns_tensors(fn, (), {}, "compare_modes", "fn")  # healthy or unknown: left to compare_modes


def test_cli_compare_on_a_function_returning_none(run_cli, tmp_path):
    (tmp_path / "diag.py").write_text("def nonefn(x):\n    return None\n")
    code, out, err = run_cli("compare", f"{tmp_path / 'diag.py'}:nonefn", "--arg", "x=float32[4]",
                             "--repeats", "1")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "returned no tensor" in lines[0], err


# ------------------------------------------------------------------

def test_autograph_diff_and_compare_modes_on_a_probe():
    """`autograph_diff(RetraceProbe(f), …)` diffed tflab's own RetraceProbe.__call__ (if@305 …)."""
    def f(x):
        if x[0] > 0:
            return x
        return -x

    probe = tflab.RetraceProbe(f)
    with pytest.raises(UsageError, match="autograph_diff: fn is a RetraceProbe; pass the function it wraps"):
        tflab.autograph_diff(probe, tf.TensorSpec([2]))
    with pytest.raises(UsageError, match="compare_modes: fn is a RetraceProbe"):
        tflab.compare_modes(probe, tf.TensorSpec([2]))
    diff = tflab.autograph_diff(f, tf.TensorSpec([2]))  # healthy: the function itself
    assert "RetraceProbe" not in repr(diff) and "f" in repr(diff)


# ------------------------------------------------------------------ XLA_FLAGS in the API

def test_bad_xla_flags_are_a_usage_error_not_the_end_of_the_process(monkeypatch):
    """TF aborts the whole process on an unknown flag in XLA_FLAGS (`F… parse_flags_from_env.cc`);
    `compare_modes` in the user's own process died with it. Probed once in a child, cached."""
    import subprocess

    from tflab.process import xla_probe

    monkeypatch.setenv("XLA_FLAGS", "--xla_hostile_bogus_flag=1")
    monkeypatch.setattr(xla_probe, "_XLA_PROBED", {})
    runs = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: runs.append(a) or real(*a, **k))
    for _ in range(2):
        with pytest.raises(UsageError, match=r"bad XLA_FLAGS: 'F\d{4} .*Unknown flag in XLA_FLAGS: "
                                             r"--xla_hostile_bogus_flag=1'"):
            tflab.compare_modes(lambda x: x * 2.0, tf.TensorSpec([4]))
    assert len(runs) == 1  # the second call used the cached answer
    # graph and eager only: no XLA compile, no probe, no refusal
    report = tflab.compare_modes(lambda x: x * 2.0, tf.TensorSpec([4]), modes=("eager", "graph"), repeats=1)
    assert report is not None and len(runs) == 1


# ------------------------------------------------------------------

def test_a_non_utf8_source_file_is_named(run_cli, tmp_path):
    """A latin-1 byte in a comment gave "f has no retrievable source … put the function in a .py
    file" although it is in one; the cause (the encoding) was not named."""
    (tmp_path / "latin.py").write_bytes(b"# \xe9\xe9\nimport tensorflow as tf\ndef f(x):\n    return x*2.0\n")
    code, out, err = run_cli("autograph", f"{tmp_path / 'latin.py'}:f", "--arg", "x=float32[2,4]")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "is not valid utf-8 (byte 0xe9 on line 1)" in lines[0] and "put the function in a .py" not in lines[0]
    # healthy: the same bytes with a coding line
    (tmp_path / "declared.py").write_bytes(b"# -*- coding: latin-1 -*-\n# \xe9\xe9\ndef f(x):\n    return x*2.0\n")
    code, out, err = run_cli("autograph", f"{tmp_path / 'declared.py'}:f", "--arg", "x=float32[2,4]")
    assert code == 0, err


@pytest.mark.parametrize("fn", [lambda x: None, lambda x: {}, lambda x: []], ids=["None", "dict", "list"])
def test_h9_compare_modes_on_a_lambda_that_returns_nothing_is_refused(fn):
    """The source check missed lambdas; the eager run's outputs decide."""
    import tensorflow as tf

    import tflab

    with pytest.raises(tflab.UsageError, match="returned no tensor"):
        tflab.compare_modes(fn, tf.TensorSpec([4]))
