"""Custom op WarpSoftmax: the build (cache, CUDA compile-only check, missing tools), opcheck, CLI, GPU.

The CUDA part is checked without a GPU: when nvcc exists the library must
carry sm_80 and sm_90 machine code (read from its fatbinary) and register GPU
kernels for every dtype. GPU-only tests skip cleanly without a GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from custom_ops import build as build_mod
from custom_ops.opcheck import TOLERANCES, compare, ieee_softmax

HAS_NVCC = build_mod.find_nvcc()[0] is not None
HAS_GPU = bool(tf.config.list_physical_devices("GPU"))
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU visible to TensorFlow")


@pytest.fixture(scope="module")
def built():
    """The default build (CUDA when nvcc exists), loaded once."""
    from custom_ops import load_library
    from custom_ops.python.ops.warp_softmax_ops import build_result

    load_library()
    return build_result()


# ------------------------------------------------------------------- build

def test_second_build_is_a_cache_hit_with_the_same_library(built):
    again = build_mod.build()
    assert again.cached and again.so_path == built.so_path and again.key == built.key
    assert Path(again.so_path).name == f"{build_mod.LIB_STEM}.{again.key}.so"


def test_cache_key_changes_when_a_source_changes(tmp_path, monkeypatch):
    cxx = build_mod.find_cxx()
    key = build_mod.cache_key(cxx, None)
    changed = tmp_path / "warp_softmax_cpu.cc"
    changed.write_bytes(build_mod.SOURCES["cpu"].read_bytes() + b"\n// edit\n")
    monkeypatch.setitem(build_mod.SOURCES, "cpu", changed)
    assert build_mod.cache_key(cxx, None) != key


def test_cache_key_changes_with_cuda(built):
    cxx = build_mod.find_cxx()
    nvcc = build_mod.find_nvcc()[0]
    if nvcc is None:
        pytest.skip("nvcc not installed")
    assert build_mod.cache_key(cxx, nvcc) != build_mod.cache_key(cxx, None)


def test_no_compiler_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build_mod.BuildError, match=r"no C\+\+ compiler found .*apt-get install g\+\+"):
        build_mod.find_cxx()


def test_missing_nvcc_means_a_cpu_only_build_with_a_note(monkeypatch, tmp_path):
    for var in ("NVCC", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda c: None)
    nvcc, note = build_mod.find_nvcc()
    assert nvcc is None and "nvcc not found" in note and "CPU kernels only" in note


def test_cuda_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("TFLAB_CUSTOM_OPS_CUDA", "0")
    assert build_mod.find_nvcc() == (None, "CUDA disabled by TFLAB_CUSTOM_OPS_CUDA=0")


def _fatbin_entries(so_path: str) -> set[tuple[str, int]]:
    """(kind, SM) of each image in the library's CUDA fatbinaries: ("elf", 80) is sm_80 SASS."""
    data = Path(so_path).read_bytes()
    magic = struct.pack("<I", 0xBA55ED50)
    found = set()
    i = data.find(magic)
    while i != -1:
        _, header, size = struct.unpack_from("<HHQ", data, i + 4)
        p, end = i + header, i + header + size
        while p < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, p)
            arch = struct.unpack_from("<I", data, p + 28)[0]
            found.add(({1: "ptx", 2: "elf"}.get(kind, str(kind)), arch))
            p += entry_header + payload
        i = data.find(magic, i + 4)
    return found


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed: CPU-only build")
def test_cuda_kernels_compile_for_sm80_and_sm90(built):
    """Compile-only check of the .cu (no GPU needed): the build ran nvcc for both targets."""
    assert built.cuda, built.note
    entries = _fatbin_entries(built.so_path)
    assert {("elf", 80), ("elf", 90)} <= entries, entries
    assert ("ptx", 90) in entries  # lets newer GPUs JIT-compile


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed: CPU-only build")
def test_warp_kernels_are_instantiated_for_every_iters_bucket(built):
    """DispatchIters (one template helper for the forward and backward warp kernels) instantiates
    ITERS = 1, 2, 4, ... up to 1024 / (32 * VEC) for each dtype and vector width, and no more:
    read from the host-side kernel stubs in the library's symbol table."""
    import re

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not installed")
    syms = subprocess.run([nm, "-C", built.so_path], capture_output=True, text=True).stdout
    for kernel in ("SoftmaxWarpKernel", "GradWarpKernel"):
        found = {tuple(map(int, m)) for m in
                 re.findall(kernel + r"<\(tflab::WsDtype\)(\d), (\d+), (\d+)>", syms)}
        want = set()
        for dtype, vec in ((0, 4), (1, 8), (2, 8)):  # 16-byte packs: 4 floats, 8 halves
            for v in (1, vec):
                n = 1
                while n <= 1024 // (32 * v):
                    want.add((dtype, v, n))
                    n *= 2
        assert found == want, (kernel, sorted(found ^ want))


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed: CPU-only build")
def test_gpu_kernels_are_registered_for_every_dtype(built):
    """The OpKernel file compiled with GOOGLE_CUDA=1 registers DEVICE_GPU kernels."""
    from tflab._tf.runtime import registered_kernels

    for op in ("WarpSoftmax", "WarpSoftmaxGrad"):
        want = {"float32", "float16", "bfloat16"}
        assert registered_kernels(op) == {"CPU": want, "GPU": want}, (op, registered_kernels(op))


def test_library_links_cudart_statically(built):
    """No libcudart.so dependency: the .so loads where no CUDA runtime is installed."""
    readelf = shutil.which("readelf") or shutil.which("objdump")
    if readelf is None:
        pytest.skip("neither readelf nor objdump installed")
    args = [readelf, "-d", built.so_path] if readelf.endswith("readelf") else [readelf, "-p", built.so_path]
    needed = subprocess.run(args, capture_output=True, text=True).stdout
    assert "libtensorflow_framework.so.2" in needed
    if not built.cuda:
        # Only a missing nvcc may leave CUDA out: with nvcc found, a CPU-only build is a regression.
        assert not HAS_NVCC, f"nvcc is installed but the build has no CUDA kernels: {built.note}"
        pytest.skip("no nvcc here: the build has no CUDA kernels, so there is no cudart to link")
    assert "libcudart" not in needed
    # Static, not merely absent: no CUDA runtime entry point is left for the dynamic linker.
    # libtensorflow_framework.so.2 exports TF's own cudart stub (cudaGetDevice, __cudaLaunchKernel,
    # …), so a .so that lists the archive after TF's library links without error and binds every
    # cuda* call to TF's stub (planted: that link order leaves 14 `U __cuda…` symbols here).
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not installed: cannot list the .so's dynamic symbols")
    dyn = subprocess.run([nm, "-D", built.so_path], capture_output=True, text=True).stdout
    unresolved = re.findall(r"^\s+U (_*cuda\w*)$", dyn, flags=re.M)
    assert not unresolved, f"CUDA runtime symbols left to the dynamic linker (bound to TF's stub): {unresolved}"


@pytest.mark.onednn
def test_scalar_path_matches_on_a_cpu_without_avx2(built):
    """TFLAB_WARP_SOFTMAX_ISA=scalar takes the path a CPU without AVX2 takes, for every dtype."""
    code = """
import numpy as np, tensorflow as tf
from custom_ops import warp_softmax
from custom_ops.python.ops.warp_softmax_ops import cpu_isa
from custom_ops.opcheck import compare, reference_with_ieee_specials
assert cpu_isa() == "scalar", cpu_isa()
x = tf.constant(np.r_[np.random.default_rng(0).normal(size=(6, 1500)) * 4].astype(np.float32))
x = tf.tensor_scatter_nd_update(x, [[1, 3], [2, 0]], [float("inf"), float("nan")])
for t in (x, tf.cast(x, tf.bfloat16), tf.cast(x, tf.float16)):
    t32 = tf.cast(t, tf.float32)
    # Rows 1 (+inf) and 2 (NaN) against the IEEE formula (all NaN), the rest against tf.nn.softmax.
    ref = reference_with_ieee_specials(tf.nn.softmax(t32).numpy(), t32.numpy())
    ok, _, _, detail = compare(tf.cast(warp_softmax(t), tf.float32).numpy(), ref, t.dtype)
    assert ok, (t.dtype, detail)
y = tf.nn.softmax(x[3:]); dy = tf.ones_like(y)
from custom_ops import load_library
g = load_library().warp_softmax_grad(y, dy).numpy()
assert np.abs(g).max() < 1e-6
print("scalar-ok")
"""
    env = dict(os.environ, TFLAB_WARP_SOFTMAX_ISA="scalar", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "scalar-ok" in out.stdout, out.stderr[-2000:]


# ----------------------------------------------------------------- opcheck

def test_opcheck_reports_every_check(built):
    from custom_ops import opcheck, warp_softmax

    report = opcheck(warp_softmax, tf.random.stateless_normal([4, 37], seed=[3, 3]))
    status = {c.name: c.status for c in report.checks}
    assert status == {"shape_fn": "pass", "cpu_vs_reference": "pass",
                      "gpu_vs_cpu": "pass" if HAS_GPU else "skip", "gradient": "pass",
                      "tf_function": "pass", "saved_model": "pass", "xla": "unsupported"}
    xla = report.check("xla").detail
    assert "No registered 'WarpSoftmax' OpKernel for XLA_CPU_JIT devices" in xla
    assert "use tf.nn.softmax under jit_compile=True" in xla
    assert report.xla_fallback == "tf.nn.softmax"
    assert report.check("cpu_vs_reference").measured <= TOLERANCES[tf.float32][0]
    assert "OpcheckReport(WarpSoftmax float32[4, 37]" in repr(report)
    from custom_ops.python.ops.warp_softmax_ops import cpu_isa

    assert report.cpu_path == cpu_isa() and f"CPU kernel path {cpu_isa()}" in repr(report)
    json.dumps(report.to_dict())  # JSON-ready


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
def test_opcheck_16bit_with_axis(built, dtype):
    from custom_ops import opcheck, warp_softmax

    x = tf.cast(tf.random.stateless_normal([5, 7], seed=[4, 4]) * 3, dtype)
    report = opcheck(warp_softmax, x, axis=0)
    assert report.ok and report.kwargs == ("axis=0",)


def test_opcheck_raises_on_a_wrong_op(built):
    from custom_ops import OpcheckError, opcheck, warp_softmax

    def skewed(x, axis=-1):  # 1% off: must fail cpu_vs_reference
        return warp_softmax(x, axis=axis) * 1.01

    skewed.reference = tf.nn.softmax
    with pytest.raises(OpcheckError, match="cpu_vs_reference") as err:
        opcheck(skewed, tf.random.stateless_normal([4, 37], seed=[5, 5]))
    assert err.value.report.check("cpu_vs_reference").status == "fail"
    assert err.value.report.check("shape_fn").status == "pass"


def test_opcheck_without_reference_is_a_usage_error(built):
    from custom_ops import opcheck
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match="no `reference` attribute"):
        opcheck(lambda x: x, tf.zeros([2, 2]))


def test_saved_model_needs_the_library_loaded_and_works_with_it(built, tmp_path):
    from custom_ops import warp_softmax

    m = tf.Module()
    m.f = tf.function(lambda x: warp_softmax(x), input_signature=[tf.TensorSpec([None, 8])])
    tf.saved_model.save(m, str(tmp_path / "sm"))
    x = tf.random.stateless_normal([3, 8], seed=[6, 6])
    loaded = tf.saved_model.load(str(tmp_path / "sm"))  # this process has the library loaded
    np.testing.assert_array_equal(loaded.f(x).numpy(), warp_softmax(x).numpy())
    code = f"import tensorflow as tf; tf.saved_model.load({str(tmp_path / 'sm')!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    assert out.returncode != 0 and "WarpSoftmax" in out.stderr  # without it: op not registered


# --------------------------------------------------------------------- CLI

def test_cli_build_op_json(run_cli, built):
    code, out, err = run_cli("build-op", "--json")
    assert code == 0, err
    data = json.loads(out)["build"]
    assert data["so_path"] == built.so_path and data["cached"] is True and data["cuda"] == built.cuda


def test_cli_build_op_text(run_cli, built):
    code, out, _ = run_cli("build-op")
    assert code == 0 and built.so_path in out
    assert f"CUDA kernels: {'yes' if built.cuda else 'no'}" in out


def test_cli_build_op_says_which_library_the_op_loads(run_cli, built, monkeypatch, tmp_path):
    """With TFLAB_WARP_SOFTMAX_SO set, build-op says the op loads that file, not the build it printed
    (text and JSON); a missing file is refused in one line before anything is built."""
    lib = tmp_path / "prebuilt.so"
    lib.write_bytes(b"\x7fELF")
    monkeypatch.setenv("TFLAB_WARP_SOFTMAX_SO", str(lib))
    code, out, _ = run_cli("build-op")
    assert code == 0 and built.so_path in out
    assert f"note: TFLAB_WARP_SOFTMAX_SO is set: the op loads {lib}, not this build" in out
    code, out, _ = run_cli("build-op", "--json")
    assert code == 0 and json.loads(out)["loads"] == str(lib)
    monkeypatch.setenv("TFLAB_WARP_SOFTMAX_SO", str(tmp_path / "missing.so"))
    code, out, err = run_cli("build-op")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "TFLAB_WARP_SOFTMAX_SO: no such file" in err


def test_cli_build_op_reports_missing_compiler_in_one_line(run_cli, monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = run_cli("build-op")
    assert code == 2 and out == ""
    assert err.startswith("tflab build-op: error: no C++ compiler found") and "Traceback" not in err


# --------------------------------------------------------------------- GPU

GPU_SHAPES = [(3, 1), (5, 31), (7, 1024), (3, 1025), (4, 4096), (2, 50257), (2, 70001), (64, 128)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_matches_cpu(built, shape, dtype):
    from custom_ops import warp_softmax

    x = tf.cast(tf.random.stateless_normal(shape, seed=[7, shape[-1]]) * 4, dtype)
    with tf.device("/CPU:0"):
        cpu = warp_softmax(x)
    with tf.device("/GPU:0"):
        g = warp_softmax(tf.identity(x))
        # A view 1 element in: not 16-byte aligned, the scalar fallback.
        flat = tf.reshape(tf.concat([tf.zeros([1], dtype), tf.reshape(x, [-1])], 0), [-1])
        odd = warp_softmax(tf.reshape(flat[1:], shape))
    for got in (g, odd):
        ok, _, _, detail = compare(tf.cast(got, tf.float32).numpy(), tf.cast(cpu, tf.float32).numpy(), dtype)
        assert ok, detail


# -------------------------------------------------------------------- tour


# --------------------------------------------------- bad environment input
