"""`tflab.process.bfloat16_probe`: mixed_bfloat16 is refused in one line where bfloat16 kernels would crash.

Measured on an AMD EPYC with AVX512_BF16, TF 2.21: with oneDNN on and ``ONEDNN_MAX_CPU_ISA=AVX2``
a bfloat16 ``tf.matmul`` ends the process with SIGSEGV (``make test``'s third pass died there) and a
bfloat16 ``tf.nn.conv2d`` raises ``AbortedError``. A child tries the two ops first, only in that kind
of configuration, and `compare_precisions` raises a `UsageError` naming the fix that let the child run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tflab.errors import UsageError
from tflab.process import bfloat16_probe


@pytest.fixture
def children(monkeypatch):
    """The environments the probe's children would run under; each answers per `answers` (default: ran)."""
    seen, answers = [], {}

    def fake(env, timeout):
        seen.append(env)
        key = (env.get("ONEDNN_MAX_CPU_ISA"), env.get("TF_ENABLE_ONEDNN_OPTS"))
        return answers.get(key)

    monkeypatch.setattr(bfloat16_probe, "_ANSWERS", {})
    monkeypatch.setattr(bfloat16_probe, "_run_probe", fake)
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    return seen, answers


def test_no_child_without_an_isa_cap_or_without_onednn(monkeypatch, children):
    seen, _ = children
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert bfloat16_probe.bfloat16_failure() is None
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setattr("tflab._tf.runtime.onednn_enabled", lambda: False)
    assert bfloat16_probe.bfloat16_failure() is None
    assert seen == []


def test_a_crashing_child_is_one_usage_error_with_the_fix_that_ran(monkeypatch, children):
    import numpy as np

    import tflab

    seen, answers = children
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setattr("tflab._tf.runtime.onednn_enabled", lambda: True)
    answers[("AVX2", None)] = "a child running a bfloat16 tf.matmul and tf.nn.conv2d died with SIGSEGV"
    with pytest.raises(UsageError, match=r"ONEDNN_MAX_CPU_ISA=AVX2: a child .* died with SIGSEGV .*; set "
                                         r"TF_ENABLE_ONEDNN_OPTS=0 .*\(checked: the same child ran both ops so\)"):
        tflab.compare_precisions(lambda x: x * 2.0, np.ones([4], np.float32))
    assert [e.get("TF_ENABLE_ONEDNN_OPTS") for e in seen] == [None, "0"]  # the user's, then the first fix
    # Cached per configuration: a second call starts no child; float16 alone never asks.
    with pytest.raises(UsageError):
        tflab.compare_precisions(lambda x: x * 2.0, np.ones([4], np.float32))
    ok = tflab.compare_precisions(lambda x: x * 2.0, np.ones([4], np.float32),
                                  policies=("float32", "mixed_float16"))
    assert len(seen) == 2 and set(ok.policies) == {"float32", "mixed_float16"}


def test_when_no_fix_lets_the_child_run_none_is_printed_as_the_fix(monkeypatch, children):
    seen, answers = children
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setattr("tflab._tf.runtime.onednn_enabled", lambda: True)
    for key in [("AVX2", None), ("AVX2", "0"), (None, None)]:
        answers[key] = "a child running a bfloat16 tf.matmul and tf.nn.conv2d failed: boom"
    failure = bfloat16_probe.bfloat16_failure()
    assert "none of TF_ENABLE_ONEDNN_OPTS=0" in failure and "checked" not in failure
    assert len(seen) == 1 + len(bfloat16_probe.FIXES)
    assert [e.get("ONEDNN_MAX_CPU_ISA") for e in seen] == ["AVX2", "AVX2", None]


CHILD = textwrap.dedent("""\
    import json, numpy as np, tflab
    from tflab.errors import UsageError
    try:
        tflab.compare_precisions(lambda x: x @ x, np.ones([8, 8], np.float32))
        print(json.dumps({"error": None}))
    except UsageError as e:
        print(json.dumps({"error": str(e)}))
    """)


def test_on_an_avx512_cpu_capped_at_avx2_the_process_survives_with_the_measured_reason(tmp_path):
    """The real configuration: oneDNN on, the cap at AVX2, a CPU whose AVX512F sends bfloat16 to oneDNN."""
    from tflab.runtime import runtime_config

    if not runtime_config().isa.get("avx512f"):
        pytest.skip("this CPU has no AVX512F: TF keeps bfloat16 on Eigen here, nothing crashes to refuse")
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", ONEDNN_MAX_CPU_ISA="AVX2", TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600,
                         cwd=tmp_path)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-1500:]}"  # -11 before: SIGSEGV
    error = json.loads(run.stdout.strip().splitlines()[-1])["error"]
    assert error is not None and "died with SIGSEGV" in error and "(checked: the same child ran both ops so)" in error


def _planted(monkeypatch, children):
    seen, answers = children
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setattr("tflab._tf.runtime.onednn_enabled", lambda: True)
    answers[("AVX2", None)] = "a child running a bfloat16 tf.matmul and tf.nn.conv2d died with SIGSEGV"
    return seen


def test_compare_modes_asks_before_running_bfloat16_inputs_and_not_for_float32(monkeypatch, children):
    """Compare_modes on bfloat16 inputs under the cap ended the caller's process."""
    import tensorflow as tf

    import tflab

    seen = _planted(monkeypatch, children)
    ok = tflab.compare_modes(lambda x: x * 2.0, tf.TensorSpec([4]), modes=("eager", "graph"), repeats=1)
    assert seen == [] and ok.modes["graph"].error is None  # float32: no child
    with pytest.raises(UsageError, match=r"died with SIGSEGV .*checked.*, or compare float32 inputs$"):
        tflab.compare_modes(lambda x: x * 2.0, tf.TensorSpec([4], tf.bfloat16), modes=("eager", "graph"))
    assert len(seen) == 2


def test_the_tour_refuses_before_step_1_and_writes_nothing(monkeypatch, children, tmp_path):
    """The tour found out at step 10, after every other step had run."""
    from tflab.tour import run_tour

    _planted(monkeypatch, children)
    with pytest.raises(UsageError, match=r"died with SIGSEGV .*\(the tour's step 10 compares mixed_bfloat16"):
        run_tour(out_dir=str(tmp_path / "tour"), quiet=True)
    assert not (tmp_path / "tour").exists() and list(tmp_path.iterdir()) == []


def test_a_verb_that_crashed_under_the_cap_is_told_the_measured_cause(monkeypatch, children):
    """`tflab compare` on bfloat16 inputs under the cap: exit 70 and "segmentation fault" alone before."""
    import signal as sig

    from tflab.process.supervisor import CRASH_EXIT, ChildEnd, describe_end

    _planted(monkeypatch, children)
    code, line = describe_end(ChildEnd(returncode=-sig.SIGSEGV, status=["ready"], stderr_tail=""))
    assert code == CRASH_EXIT and "segmentation fault" in line
    assert "measured after it: bfloat16 kernels do not run" in line and "(checked: the same child ran" in line
    code, line = describe_end(ChildEnd(returncode=-sig.SIGABRT, status=["ready"], stderr_tail=""))
    assert "SIGABRT" in line and "measured after it: bfloat16 kernels do not run" in line  # diagnose's dnnl abort
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    code, line = describe_end(ChildEnd(returncode=-sig.SIGSEGV, status=["ready"], stderr_tail=""))
    assert "measured after it" not in line  # no cap: no child, the plain line
