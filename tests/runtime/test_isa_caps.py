"""ISA caps: one CPU runs what an older CPU runs, and a bad cap is one clear error.

Three caps, each read where its code generator starts: ``ONEDNN_MAX_CPU_ISA``
(oneDNN's dispatcher control; TF 2.21 bundles oneDNN 3.7), ``XLA_FLAGS=
--xla_cpu_max_isa=...`` (XLA's CPU backend) and ``TFLAB_WARP_SOFTMAX_ISA``
(our kernel). oneDNN ignores an unknown value without a word, and XLA only logs
"Unknown CPU ISA", so `tflab.runtime.read_isa_caps` refuses one, and every CLI
verb exits 2 with that line. `make test` runs the `onednn`-marked tests once
more with oneDNN forced on and every cap at AVX2 (`capped_pass_env`) where the
CPU is above AVX2.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tflab.errors import UsageError
from tflab.isa_caps import capped_pass_env, read_isa_caps

AVX2_CPU = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})
AVX512_CPU = AVX2_CPU | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}


def test_caps_are_read_in_any_case_and_say_whether_they_lower_this_cpu():
    caps = read_isa_caps({"ONEDNN_MAX_CPU_ISA": "avx2", "XLA_FLAGS": "--xla_cpu_max_isa=avx2",
                          "TFLAB_WARP_SOFTMAX_ISA": "avx2"}, AVX512_CPU)
    assert (caps.onednn, caps.xla, caps.warp_softmax, caps.host) == ("AVX2", "AVX2", "avx2", "avx512")
    assert caps.lowers == {"onednn": True, "xla": True, "warp_softmax": True}
    assert caps.describe() == "oneDNN<=AVX2, XLA<=AVX2, WarpSoftmax=avx2"
    same = read_isa_caps({"ONEDNN_MAX_CPU_ISA": "AVX2"}, AVX2_CPU)
    assert same.lowers == {"onednn": False}
    assert same.describe() == "oneDNN<=AVX2 (no effect: this CPU is avx2)"
    none = read_isa_caps({}, AVX2_CPU)
    assert not none.any and none.describe() == "none"
    # The last --xla_cpu_max_isa of XLA_FLAGS wins, as XLA's flag parser does; others stay.
    assert read_isa_caps({"XLA_FLAGS": "--xla_cpu_max_isa=AVX --xla_dump_to=/tmp/d "
                                       "--xla_cpu_max_isa=SSE4_2"}, AVX2_CPU).xla == "SSE4_2"


@pytest.mark.parametrize("env, message", [
    ({"ONEDNN_MAX_CPU_ISA": "bogus"}, r"^ONEDNN_MAX_CPU_ISA='bogus' is not an ISA oneDNN knows .*AVX2.*or unset it$"),
    ({"ONEDNN_MAX_CPU_ISA": "SSE4_2"}, r"^ONEDNN_MAX_CPU_ISA='SSE4_2' is not"),  # XLA's spelling
    ({"XLA_FLAGS": "--xla_cpu_max_isa=SSE41"}, r"^XLA_FLAGS: --xla_cpu_max_isa='SSE41' is not an ISA XLA knows"),
    ({"TFLAB_WARP_SOFTMAX_ISA": "avx9"}, r"^TFLAB_WARP_SOFTMAX_ISA=avx9 is not a CPU path; use scalar, avx2"),
    ({"TFLAB_WARP_SOFTMAX_ISA": "avx512"}, r"^TFLAB_WARP_SOFTMAX_ISA=avx512: this CPU lacks avx512f, "
                                           r"avx512bw, avx512vl, avx512dq; use avx2 or scalar"),
], ids=["onednn-bogus", "onednn-xla-spelling", "xla-onednn-spelling", "warp-avx9", "warp-lacks"])
def test_a_cap_its_reader_would_ignore_is_one_usage_error(env, message):
    with pytest.raises(UsageError, match=message):
        read_isa_caps(env, AVX2_CPU)


def test_capped_pass_env_caps_only_a_cpu_above_avx2():
    assert capped_pass_env(AVX2_CPU, {}) == {}
    assert capped_pass_env(AVX512_CPU, {}) == {"ONEDNN_MAX_CPU_ISA": "AVX2",
                                               "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
                                               "TFLAB_WARP_SOFTMAX_ISA": "avx2"}
    kept = capped_pass_env(AVX512_CPU, {"XLA_FLAGS": "--xla_dump_to=/tmp/d"})
    assert kept["XLA_FLAGS"] == "--xla_dump_to=/tmp/d --xla_cpu_max_isa=AVX2"
    # What it prints is what it computes for this CPU, and reading it back passes the check.
    out = subprocess.run([sys.executable, "-m", "tflab.runtime", "--capped-env"], capture_output=True,
                         text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "XLA_FLAGS"})
    assert out.returncode == 0 and "tensorflow" not in out.stderr.lower()
    assert out.stdout.strip() == " ".join(f"{k}={v}" for k, v in capped_pass_env(env={}).items())
    read_isa_caps(capped_pass_env(env={}))


@pytest.mark.parametrize("var, value", [("ONEDNN_MAX_CPU_ISA", "bogus"), ("TFLAB_WARP_SOFTMAX_ISA", "avx9"),
                                        ("XLA_FLAGS", "--xla_cpu_max_isa=AVX9")])
def test_every_verb_refuses_a_bad_cap_with_one_line(run_cli, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    for argv in (["env"], ["env", "--json"], ["inspect", "tflab.examples:nonexistent"]):
        code, out, err = run_cli(*argv)
        assert code == 2 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"tflab {argv[0]}: error: ") and var.split("=")[0] in lines[0]


def test_env_json_reports_the_caps_in_force(run_cli, monkeypatch):
    import json

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "sse41")
    monkeypatch.setenv("TFLAB_WARP_SOFTMAX_ISA", "scalar")
    code, out, _ = run_cli("env", "--json")
    assert code == 0
    caps = json.loads(out)["isa_caps"]
    assert caps["onednn_max_cpu_isa"] == "SSE41" and caps["warp_softmax_isa"] == "scalar"
    assert caps["xla_cpu_max_isa"] is None
    assert caps["lowers"] == {"onednn": True, "warp_softmax": True}  # any x86-64 CPU with AVX


def test_tf_bundled_onednn_honours_the_cap():
    """Measured, not assumed: with the cap at SSE4.1, TF 2.21's oneDNN reports SSE4.1 and JITs its
    softmax for sse41 (ONEDNN_VERBOSE=1 prints both lines); uncapped, it takes a wider ISA on any
    CPU with AVX. A cap TF ignored would fail here."""
    code = ("import tensorflow as tf; x = tf.random.normal([8, 64]); "
            "print(float(tf.reduce_sum(tf.nn.softmax(x))))")
    seen = {}
    for cap in ("SSE41", None):
        env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
        env.update(TF_ENABLE_ONEDNN_OPTS="1", ONEDNN_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="3")
        if cap:
            env["ONEDNN_MAX_CPU_ISA"] = cap
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-1500:]
        isa = re.search(r"onednn_verbose,(?:v\d+,)?info,cpu,isa:([^\n]+)", out.stdout)
        jit = re.search(r"exec,cpu,softmax,jit:([a-z0-9_]+)", out.stdout)
        assert isa and jit, out.stdout[-1500:]
        seen[cap] = (isa.group(1).strip(), jit.group(1))
    assert seen["SSE41"] == ("Intel SSE4.1", "sse41")
    assert seen[None][1] != "sse41" and "SSE4.1" not in seen[None][0]
