"""tflab.runtime_config() and `tflab env`: which TF CPU path (oneDNN or Eigen) runs, and why.

TF 2.21 decides oneDNN once, when its libraries load: on Linux x86-64 it is on
by default on CPUs with AVX-512 VNNI/BF16, AVX-VNNI or AMX, and
TF_ENABLE_ONEDNN_OPTS=0/1 forces it (tensorflow/core/util/port.cc). The
subprocess tests check our record against TF's own log line, which TF prints
exactly when the kernels are on, so they hold on any x86-64 CPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tflab.runtime import (ISA_FLAGS, explain_onednn, isa_summary, onednn_default_for,
                           parse_env_bool, read_cpuinfo)

ONEDNN_LOG = "oneDNN custom operations are on"

# /proc/cpuinfo heads of three CPUs TF treats differently (flags trimmed to the relevant ones).
ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: ignored second block
flags\t\t: fpu
"""
SKYLAKE_SP = """vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512cd
"""
SAPPHIRE_RAPIDS = """vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: sse4_2 avx avx2 fma avx512f avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8
"""
HASWELL = """vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2676 v3 @ 2.40GHz
flags\t\t: sse4_2 avx avx2 fma
"""


def test_read_cpuinfo_reads_the_first_block():
    model, vendor, isa = read_cpuinfo(ZEN4)
    assert model == "AMD EPYC 9R14 96-Core Processor"
    assert vendor == "AuthenticAMD"
    assert set(isa) == set(ISA_FLAGS)
    assert [f for f in ISA_FLAGS if isa[f]] == ["sse4_2", "avx", "avx2", "fma", "avx512f",
                                                 "avx512_vnni", "avx512_bf16"]


@pytest.mark.parametrize("text, default, tag", [
    (ZEN4, True, "avx512f+vnni+bf16"),
    (SKYLAKE_SP, False, "avx512f"),           # AVX-512 without VNNI/BF16: Eigen by default
    (SAPPHIRE_RAPIDS, True, "avx512f+vnni+bf16+amx"),
    (HASWELL, False, "avx2+fma"),
    ("", False, "isa unknown"),
])
def test_onednn_default_follows_tf_policy(text, default, tag):
    isa = read_cpuinfo(text)[2]
    assert onednn_default_for(isa) is default
    assert isa_summary(isa) == tag
    # Off by default outside Linux whatever the CPU (port.cc: Windows off).
    assert onednn_default_for(isa, "Windows") is False


@pytest.mark.parametrize("raw, parsed", [
    (None, None), ("0", False), ("false", False), ("FALSE", False), ("1", True),
    ("True", True), ("", None), ("yes", None), ("2", None),
])
def test_env_values_parse_like_read_bool_from_env_var(raw, parsed):
    assert parse_env_bool(raw) is parsed


def test_explain_onednn_names_the_cause():
    zen4 = read_cpuinfo(ZEN4)[2]
    haswell = read_cpuinfo(HASWELL)[2]
    assert explain_onednn(None, zen4) == (
        True, "TF default for this CPU: has avx512_vnni, avx512_bf16")
    assert explain_onednn(None, haswell) == (
        False, "TF default for this CPU: no AVX-512 VNNI/BF16, AVX-VNNI or AMX")
    assert explain_onednn("0", zen4) == (False, "TF_ENABLE_ONEDNN_OPTS=0")
    assert explain_onednn("1", haswell) == (True, "TF_ENABLE_ONEDNN_OPTS=1")
    enabled, reason = explain_onednn("yes", haswell)
    assert enabled is False and "is not 0/1/true/false" in reason and "no AVX-512" in reason


_PROBE = ("import json, tflab; c = tflab.runtime_config(); "
          "print(json.dumps({'on': c.onednn_enabled, 'reason': c.onednn_reason, "
          "'default': c.onednn_default, 'line': c.one_line()}))")


def _probe(env_value):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")  # let TF print its INFO line
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)
    if env_value is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = env_value
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.parametrize("env_value", ["0", "1"])
def test_onednn_field_matches_what_tf_does(env_value):
    """Our field agrees with TF's own log line under each forced setting, on any x86-64 CPU.

    With =1 this also checks that the variable turns oneDNN on where TF's default is off.
    (The unset case is checked in process by the next test when the variable is unset,
    as in ``make test``'s main pass: one TF import fewer.)
    """
    rec, stderr = _probe(env_value)
    assert rec["on"] is (ONEDNN_LOG in stderr), (rec, stderr[-1500:])
    if env_value is None:
        assert rec["on"] is rec["default"]
        assert rec["reason"].startswith("TF default for this CPU")
        assert "(TF default for this CPU)" in rec["line"]
    else:
        assert rec["on"] is (env_value == "1")
        assert rec["reason"] == f"TF_ENABLE_ONEDNN_OPTS={env_value}"
        assert f"oneDNN {'on' if env_value == '1' else 'off'} (TF_ENABLE_ONEDNN_OPTS=" \
               in rec["line"]


def test_runtime_config_in_process_is_complete():
    import tensorflow as tf

    import tflab

    cfg = tflab.runtime_config()
    assert cfg.tf_version == tf.version.VERSION
    assert cfg.tf_git_version == tf.version.GIT_VERSION
    assert cfg.python_version == ".".join(map(str, sys.version_info[:3]))
    # TF's answer (IsMklEnabled) matches the policy read from the CPU flags and
    # the variable; unset, that is TF's default for this CPU.
    assert cfg.onednn_enabled == explain_onednn(cfg.onednn_env, cfg.isa)[0]
    if cfg.onednn_env is None:
        assert cfg.onednn_enabled is cfg.onednn_default
        assert cfg.onednn_reason.startswith("TF default for this CPU")
        assert "(TF default for this CPU)" in cfg.one_line()
    d = cfg.to_dict()
    json.dumps(d)  # JSON types only
    assert d["onednn_enabled"] is cfg.onednn_enabled
    assert "is_cuda_build" in d["build"]
    line = cfg.one_line()
    assert "\n" not in line
    assert line.startswith(f"TF {tf.version.VERSION} · Python ")
    assert ("oneDNN on" if cfg.onednn_enabled else "oneDNN off") in line
    assert cfg.onednn_reason in cfg.to_text()
    assert repr(cfg) == f"RuntimeConfig({line!r})"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.onednn_enabled = not cfg.onednn_enabled


def test_allocator_follows_bfc_variable(monkeypatch):
    from tflab.runtime import _allocator

    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "1")
    assert _allocator(True) == ("BFC", "TF_CPU_ALLOCATOR_USE_BFC=1")
    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC")
    assert _allocator(True)[0] == "MklCPUAllocator"
    assert _allocator(False)[0] == "DefaultCPUAllocator (malloc)"
    # A value TF's ReadBoolFromEnvVar does not take is ignored by TF: said so, not read as a choice.
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "yes")
    assert _allocator(False) == ("DefaultCPUAllocator (malloc)", "TF_CPU_ALLOCATOR_USE_BFC='yes' is not "
                                 "0/1/true/false, so TF ignores it; TF default with oneDNN off")
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "false")
    assert _allocator(False) == ("DefaultCPUAllocator (malloc)",
                                 "TF_CPU_ALLOCATOR_USE_BFC=false; TF default with oneDNN off")


def test_env_cli_json_has_onednn_field(run_cli):
    code, out, err = run_cli("env", "--json")
    assert code == 0, err
    d = json.loads(out)
    # The value, not just its type: what TF itself says in this process (IsMklEnabled, read
    # through tflab._tf.runtime) under the same environment.
    from tflab._tf.runtime import onednn_enabled

    assert d["onednn_enabled"] is onednn_enabled()
    assert d["onednn_reason"]
    code, out, err = run_cli("env")
    assert code == 0
    assert out.splitlines()[0].startswith("TensorFlow")
    assert any(ln.startswith("oneDNN") for ln in out.splitlines())


def test_env_cli_bad_option_is_one_line(capsys):
    from tflab.cli import main

    code = main(["env", "--bogus"])  # argparse's error, returned by main() as exit status 2
    assert code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().splitlines() == [
        "tflab env: error: unrecognized arguments: --bogus (see tflab env --help)"]


@pytest.mark.onednn
def test_onednn_field_predicts_tf_softmax_on_a_special_row():
    """The field names the kernels that run: tf.nn.softmax of [1, +inf, 2, 0] is all NaN
    under Eigen (the IEEE formula: exp(inf - inf) is NaN and it reaches every element
    through the sum), but [0, NaN, 0, 0] under oneDNN's softmax; XLA's is all NaN on both.
    ``make test`` runs this under TF_ENABLE_ONEDNN_OPTS=0 and =1 (portability.md)."""
    import numpy as np
    import tensorflow as tf

    import tflab

    x = tf.constant([[1.0, np.inf, 2.0, 0.0]])
    eager = tf.nn.softmax(x).numpy()[0]
    graph = tf.function(tf.nn.softmax)(x).numpy()[0]
    xla = tf.function(tf.nn.softmax, jit_compile=True)(x).numpy()[0]
    want = [False, True, False, False] if tflab.runtime_config().onednn_enabled else [True] * 4
    assert np.isnan(eager).tolist() == want and np.isnan(graph).tolist() == want
    if tflab.runtime_config().onednn_enabled:
        assert eager[[0, 2, 3]].tolist() == [0.0, 0.0, 0.0]
    assert np.isnan(xla).all()


@pytest.mark.slow
def test_opcheck_report_names_the_configuration():
    import tensorflow as tf

    from _warp_build import load_warp_library_or_skip
    from custom_ops.opcheck import opcheck
    from custom_ops.python.ops import warp_softmax_ops as ops
    from tflab.runtime import runtime_config

    load_warp_library_or_skip()  # skips only without a C++ compiler; a build error fails
    report = opcheck(ops.warp_softmax, tf.random.stateless_normal([4, 37], seed=[9, 9]))
    cfg = runtime_config()
    assert (report.config["onednn_enabled"], report.config["onednn_reason"]) == (
        cfg.onednn_enabled, cfg.onednn_reason)
    assert repr(report).splitlines()[-1] == f"  measured on: {cfg.one_line()}"


@pytest.mark.parametrize("user_value", [None, "0", "1"], ids=["unset", "user-0", "user-1"])
def test_verb_processes_get_bfc_unless_the_user_chose(user_value):
    """Unset: tflab's verb child runs TF's BFC CPU allocator and says tflab chose it; set: the user's choice."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPU_ALLOCATOR_USE_BFC", "TFLAB_CPU_ALLOCATOR_SET")}
    if user_value is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = user_value
    p = subprocess.run([sys.executable, "-m", "tflab", "env", "--json"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    if user_value == "0":
        assert d["cpu_allocator"] != "BFC" and d["cpu_allocator_reason"].startswith("TF_CPU_ALLOCATOR_USE_BFC=0")
    elif user_value == "1":
        assert d["cpu_allocator"] == "BFC" and d["cpu_allocator_reason"] == "TF_CPU_ALLOCATOR_USE_BFC=1"
    else:
        assert d["cpu_allocator"] == "BFC" and "set by tflab" in d["cpu_allocator_reason"], d["cpu_allocator_reason"]


def test_the_allocator_tflab_sets_is_the_one_tf_takes():
    """TF keeps allocator statistics for CPU:0 only under BFC: with tflab's entries they exist, without, not."""
    from tflab.cli import _allocator_env

    code = ("import tensorflow as tf; x = tf.ones([256, 256]); y = x @ x\n"
            "try:\n    print(tf.config.experimental.get_memory_info('CPU:0')['peak'] > 0)\n"
            "except ValueError:\n    print('no stats')")
    base = {k: v for k, v in os.environ.items() if k not in ("TF_CPU_ALLOCATOR_USE_BFC", "TFLAB_CPU_ALLOCATOR_SET")}
    got = [subprocess.run([sys.executable, "-c", code], env={**base, **extra}, capture_output=True, text=True,
                          timeout=120).stdout.strip()
           for extra in (_allocator_env(base), {}, {"TF_CPU_ALLOCATOR_USE_BFC": "yes"})]
    from tflab._tf.runtime import onednn_enabled

    onednn = onednn_enabled()  # this process's environment but the allocator: the same choice
    # With oneDNN on, TF's MklCPUAllocator keeps statistics too (its large allocations go to a BFC).
    # A value TF does not parse is TF's default (what `tflab env` says of it), not BFC.
    assert got[0] == "True" and (onednn or got[1] == got[2] == "no stats"), got
    assert _allocator_env({"TF_CPU_ALLOCATOR_USE_BFC": "0"}) == {}
