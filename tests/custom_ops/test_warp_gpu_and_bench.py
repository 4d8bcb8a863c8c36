"""WarpSoftmax on the GPU (skipped without one), the tour's build section and the benchmark's timing functions.

Split from `test_warp_build.py` (no test file over 600 lines); its helpers and fixtures are imported from there.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_warp_build import (  # noqa: E402,F401  (helpers, fixtures and imports of the first part)
    argparse, os, subprocess, sys, Path, np, pytest, tf, build_mod, compare, ieee_softmax, gpu, built,)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n", [7, 1000, 70000], ids=lambda n: f"n{n}")
def test_gpu_special_values(built, n):
    from custom_ops import warp_softmax

    rows = np.stack([np.linspace(-2, 2, n, dtype=np.float32) for _ in range(4)])
    rows[0, n // 2] = np.inf
    rows[1, :] = -np.inf
    rows[2, -1] = np.nan
    rows[3, : n - 3] = -np.inf
    x = tf.constant(rows)
    with tf.device("/GPU:0"):
        got = warp_softmax(x).numpy()
    # Rows 0-2 are all NaN by the IEEE formula (TF's GPU softmax agrees); row 3 is finite.
    ok, _, _, detail = compare(got, ieee_softmax(rows), tf.float32)
    assert ok, detail


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("cols", [37, 2000], ids=lambda n: f"n{n}")
def test_gpu_gradient_matches_cpu(built, cols):
    from custom_ops import load_library

    y = tf.nn.softmax(tf.random.stateless_normal([8, cols], seed=[8, 8]))
    dy = tf.random.stateless_normal([8, cols], seed=[9, 9])
    with tf.device("/CPU:0"):
        cpu = load_library().warp_softmax_grad(y, dy).numpy()
    with tf.device("/GPU:0"):
        g = load_library().warp_softmax_grad(y, dy).numpy()
    assert np.max(np.abs(g - cpu)) <= 1e-6


def test_tour_section_reports_build_opcheck_and_ratio(built, tmp_path, capsys, monkeypatch):
    import statistics

    from custom_ops import bench
    from tflab._io.progress import Progress
    from tflab._tour import s09_custom_op
    from tflab.tour import TourContext

    ctx = TourContext(model=None, model_source="default", out_dir=tmp_path, report={},
                      progress_line=Progress("tour", total=1, enabled=False))
    # Record every list the benchmark takes a median of, and the names it timed (in order).
    samples: list[list[float]] = []
    timed: list[list[str]] = []

    class RecordingStatistics:
        @staticmethod
        def median(values):
            samples.append(list(values))
            return statistics.median(values)

    real_time_interleaved = bench.time_interleaved

    def recording_time_interleaved(fns, *args, **kwargs):
        timed.append(list(fns))
        return real_time_interleaved(fns, *args, **kwargs)

    monkeypatch.setattr(bench, "statistics", RecordingStatistics)
    monkeypatch.setattr(bench, "time_interleaved", recording_time_interleaved)
    s09_custom_op.run(ctx)
    rep = ctx.report["custom_op"]
    assert rep["build"].so_path == built.so_path and rep["opcheck"].ok and rep["opcheck_failed"] is None
    assert rep["cpu_isa"] in ("avx512", "avx2+fma", "scalar")
    assert rep["opcheck"].cpu_path == rep["cpu_isa"]
    # The benchmark's protocol (custom_ops.bench): 2 warm-up calls, 2e7 // (4096 * 1024) = 4
    # calls per sample, 7 interleaved rounds, and the allocator said in the line.
    cmp = rep["bench"]
    assert (cmp.shape, cmp.warmup, cmp.inner, cmp.rounds) == ((4096, 1024), 2, 4, 7)
    assert cmp.allocator in ("BFC", "MklCPUAllocator", "DefaultCPUAllocator (malloc)")
    # No speed assertion (ratios depend on the CPU, oneDNN on/off and the load): the
    # benchmark reports them. The test checks the ratios are the measured medians' ratios.
    assert rep["speedup_vs_tf_softmax"] == cmp.wall_ratio == cmp.tf_seconds / cmp.warp_seconds > 0
    # The seconds are the medians of the 7 recorded rounds, per name: wall first, then CPU time
    # (time_interleaved's order), each list one sample per round.
    assert timed == [["tf.nn.softmax", "warp_softmax"]] and len(samples) == 4, (timed, len(samples))
    assert [len(s) for s in samples] == [7] * 4 and min(min(s) for s in samples) > 0
    wall, cpu = dict(zip(timed[0], samples[:2])), dict(zip(timed[0], samples[2:]))
    assert (cmp.tf_seconds, cmp.warp_seconds) == (statistics.median(wall["tf.nn.softmax"]),
                                                  statistics.median(wall["warp_softmax"]))
    assert cmp.cpu_ratio == statistics.median(cpu["tf.nn.softmax"]) / statistics.median(cpu["warp_softmax"]) > 0
    out = capsys.readouterr().out
    assert "opcheck unsupported xla" in out and "tf.nn.softmax" in out and "×" in out
    from tflab.runtime import runtime_config

    assert cmp.tf_path == runtime_config().onednn_label and f"tf.nn.softmax ({cmp.tf_path})" in out
    assert f"CPU kernel path: {rep['cpu_isa']}" in out
    assert f"median of 7 interleaved rounds of 4 calls after 2 warm-up calls each, {cmp.allocator} allocator" in out


def test_benchmark_and_tour_share_one_timing_function(built, monkeypatch, capsys):
    """bench_softmax.py sets the candidates' best of N (custom_ops.bench.best_of) beside the one
    roofline (custom_ops.bench.copy_roofline) of the same input, then times them through
    custom_ops.bench.time_interleaved, as the tour does."""
    import importlib.util

    from custom_ops import bench

    class Reached(Exception):
        pass

    roofs, bests = [], []
    real_best_of = bench.best_of

    def roofline_spy(src, runs=7, threads=None):  # its copies are tested below
        roofs.append((src.shape, src.dtype.name, runs))
        return bench.Roofline(nbytes=src.nbytes, seconds=1e-3, way="numpy, 1 thread",
                              by_way={"numpy, 1 thread": 1e-3}, runs=runs)

    def best_of_spy(fn, runs, **kwargs):
        bests.append(runs)
        return real_best_of(fn, 1, warmup=1)

    def spy(fns, rounds, inner, **kwargs):
        raise Reached(sorted(fns), rounds, inner)

    monkeypatch.setattr(bench, "copy_roofline", roofline_spy)
    monkeypatch.setattr(bench, "best_of", best_of_spy)
    monkeypatch.setattr(bench, "time_interleaved", spy)
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_softmax.py"
    spec = importlib.util.spec_from_file_location("bench_softmax_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(Reached) as e:
        mod.main(["--child", "--rounds", "3", "--runs", "5", "--shapes", "4096x1024"])  # one configuration
    assert roofs == [((4096, 1024), "float32", 5)]  # the roofline of the softmax's own input
    assert bests == [5, 5, 5]  # tf.nn.softmax, XLA and ours, each alone
    # TF's softmax, XLA's and ours, interleaved; (4096, 1024): 2e7 // 4M calls.
    assert e.value.args == (["tf.nn.softmax", "warp_softmax", "xla_softmax"], 3, 4)
    out = capsys.readouterr().out
    assert "WarpSoftmax CPU path" in out and "oneDNN" in out and "allocator" in out  # config line
    assert "TFLAB_WARP_SOFTMAX_ISA=" in out and "ONEDNN_MAX_CPU_ISA=" in out  # the caps


@pytest.mark.parametrize("how", ["numpy", "memmove", "stream"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_roofline_copies_are_true_copies_into_touched_buffers(how, threads, request):
    """Each way the roofline times copies every byte (odd sizes and slice cuts included) into a
    buffer touched before timing; the roofline is the fastest way, and % of roofline is its time
    over the kernel's. Planted: a slice left out, or a copy of the first slice only, fails; the
    stream copy without its unaligned head or its tail fails at these sizes. With the library
    built, the non-temporal copy is one of the ways (without it the kernel beat the roofline:
    122% at 16384x4096 on an AVX-512 EPYC)."""
    from custom_ops import bench
    from custom_ops.bench import Roofline, SlicedCopy, copy_roofline

    if how == "stream":
        request.getfixturevalue("built")
        if not bench._stream_copy_available():
            pytest.skip("this CPU has no AVX2: the library's stream copy writes nothing")
    src = np.random.default_rng(threads).standard_normal(100_003).astype(np.float32)
    c = SlicedCopy(src, threads, how)
    assert np.all(c.dst == 1)  # touched (filled) at construction, before any timed copy
    try:
        np.testing.assert_array_equal(c().view(np.float32), src)
    finally:
        c.close()
    roof = copy_roofline(src, runs=2, threads=threads)
    ways = bench.COPY_WAYS if bench._stream_copy_available() else ("numpy", "memmove")
    assert how not in ("stream",) or "stream" in ways
    assert set(roof.by_way) == {f"{w}, {t} thread{'s' if t > 1 else ''}" for w in ways for t in {1, threads}}
    assert roof.seconds == min(roof.by_way.values()) and roof.by_way[roof.way] == roof.seconds
    assert roof.nbytes == src.nbytes and roof.gbps == pytest.approx(2 * src.nbytes / roof.seconds / 1e9)
    fake = Roofline(nbytes=8, seconds=2.0, way="x", by_way={"x": 2.0}, runs=1)
    assert fake.fraction(4.0) == 0.5 and fake.fraction(2.0) == 1.0


def test_benchmark_gpu_mode_runs_its_candidates_on_the_cpu(built, monkeypatch, capsys):
    """The GPU benchmark's code path (never run on a GPU here) checked on the CPU: the copy, both
    softmaxes and XLA's, 8 softmaxes per tf.function call, and the goal lines."""
    import importlib.util

    from custom_ops import bench

    seen = []

    def fake(fns, rounds, inner, sync=lambda: None, warmup=2):
        seen.append(sorted(fns))
        for fn in fns.values():
            fn()  # each candidate really runs once
        return {k: 1e-3 for k in fns}, {k: 1e-3 for k in fns}

    monkeypatch.setattr(bench, "time_interleaved", fake)
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_softmax.py"
    spec = importlib.util.spec_from_file_location("bench_softmax_gpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--gpu-path-on-cpu", "--rounds", "1"]) == 0
    assert seen == [["d2d_copy", "tf.nn.softmax", "warp_softmax", "xla_softmax"]] * 2
    out = capsys.readouterr().out
    assert out.count("of D2D copy") == 2 and "goal >= 85%" in out and "WarpSoftmax CPU path" in out


def test_benchmark_parses_shapes():
    """(The roofline's copies: test_roofline_copies_are_true_copies_into_touched_buffers.)"""
    import argparse
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_softmax.py"
    spec = importlib.util.spec_from_file_location("bench_softmax_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.parse_shapes("4096x1024,32x32000") == [(4096, 1024), (32, 32000)]
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"^'4096by1024' is not a list of shapes like 4096x1024,32x32000$"):
        mod.parse_shapes("4096by1024")


def test_missing_cxx_is_one_line_not_a_silent_fallback(monkeypatch, capsys):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(build_mod.BuildError, match=r"^\$CXX=/nonexistent/g\+\+ is not an executable"):
        build_mod.find_cxx()
    assert build_mod.main(["--no-cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("custom_ops.build: error: $CXX=/nonexistent/g++") and "\n" not in err


def test_build_dir_that_is_a_file_is_one_line_exit_2(monkeypatch, tmp_path, capsys, run_cli):
    afile = tmp_path / "afile"
    afile.write_text("")
    for path in (afile, afile / "sub"):  # File exists / Not a directory
        monkeypatch.setenv("TFLAB_CUSTOM_OPS_BUILD_DIR", str(path))
        assert build_mod.main(["--no-cuda"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"custom_ops.build: error: cannot use {path} as the build cache folder")
        assert "TFLAB_CUSTOM_OPS_BUILD_DIR" in err and "\n" not in err and "Traceback" not in err
        code, out, err = run_cli("build-op")
        assert code == 2 and out == "" and err.count("\n") == 1
        assert err.startswith("tflab build-op: error: cannot use")


def test_prebuilt_library_variable_missing_or_junk_is_one_error_naming_it(tmp_path):
    """$TFLAB_WARP_SOFTMAX_SO is read when the library is first loaded, so a fresh process."""
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file")
    code = f"""
import os, tensorflow as tf
from custom_ops import warp_softmax
from tflab.errors import UsageError
for path in ("/missing.so", {str(junk)!r}):
    os.environ["TFLAB_WARP_SOFTMAX_SO"] = path
    try:
        warp_softmax(tf.zeros([2]))
    except UsageError as e:
        assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__), "chained"
        print("ERR", str(e).replace(chr(10), "|"))
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("ERR ")]
    assert len(lines) == 2, out.stderr[-2000:]
    assert lines[0] == ("ERR TFLAB_WARP_SOFTMAX_SO=/missing.so: no such file; point it at a built "
                        "_warp_softmax_ops*.so, or unset it to build the op")
    assert lines[1].startswith(f"ERR TFLAB_WARP_SOFTMAX_SO={junk} could not be loaded as a TF op library (")
    assert "|" not in lines[1]


def test_the_warp_library_helper_skips_only_without_a_compiler(monkeypatch):
    """tests/_warp_build.py (the `warp_library` fixture and two more tests use it): no C++ compiler
    is a skip that names it; a build error of our own op (planted: load_library raising BuildError
    as a compile error does) propagates and fails the test."""
    from _warp_build import load_warp_library_or_skip
    from custom_ops.python.ops import warp_softmax_ops

    def compile_error():
        raise build_mod.BuildError("compiling warp_softmax_cpu.cc failed: error: expected ';'")

    monkeypatch.setattr(build_mod, "find_cxx", lambda: "/usr/bin/c++")
    monkeypatch.setattr(warp_softmax_ops, "load_library", compile_error)
    try:
        load_warp_library_or_skip()
    except pytest.skip.Exception as e:  # a BaseException: pytest.raises(BuildError) would let it skip the test
        pytest.fail(f"a build error of our own op became a skip: {e}")
    except build_mod.BuildError as e:
        assert "expected ';'" in str(e)
    else:
        pytest.fail("a build error was swallowed")

    def no_compiler():
        raise build_mod.BuildError("no C++ compiler found (apt-get install g++)")

    monkeypatch.setattr(build_mod, "find_cxx", no_compiler)
    with pytest.raises(pytest.skip.Exception, match=r"^no C\+\+ compiler, so WarpSoftmax cannot be built here"):
        load_warp_library_or_skip()


def test_prebuilt_library_loads_and_says_whether_it_has_gpu_kernels(built):
    """$TFLAB_WARP_SOFTMAX_SO naming a good library loads it without building, and the loader reads
    from TF's kernel registry (tflab._tf.runtime.registered_kernels) whether it registered GPU
    kernels: the same answer as the build that made it (CUDA here when nvcc is installed)."""
    code = """
import numpy as np, tensorflow as tf
from custom_ops import warp_softmax
from custom_ops.python.ops import warp_softmax_ops as ops
x = tf.random.stateless_normal([3, 37], seed=[0, 1])
ok = np.allclose(warp_softmax(x).numpy(), tf.nn.softmax(x).numpy(), rtol=1e-5, atol=1e-7)
r = ops.build_result()
print("RESULT", r.key, r.cuda, r.so_path, ok)
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TFLAB_WARP_SOFTMAX_SO=built.so_path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines == [["RESULT", "prebuilt", str(built.cuda), built.so_path, "True"]], out.stderr[-2000:]


def test_pass_timer_compiles_against_the_kernel_source_and_reports_every_pass():
    """benchmarks/bench_softmax.py --breakdown's pass timer (cc/bench/warp_softmax_passes.cc, which
    includes the kernel source) builds and prints each pass; no timing is asserted."""
    import importlib.util

    from custom_ops.python.ops.warp_softmax_ops import planned_cpu_path

    if planned_cpu_path() == "scalar":
        pytest.skip("this CPU lacks AVX2: the pass timer times the AVX2 functions")
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_softmax.py"
    spec = importlib.util.spec_from_file_location("bench_softmax_passes", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = mod.row_passes(cols=1024, rows=4, reps=3)
    assert got is not None and (got["cols"], got["rows"], got["reps"]) == (1024, 4, 3)
    ns = got["ns_per_element"]
    assert set(ns) == {"max", "exp_store_sum", "exp_sum", "scale", "row", "row_streamed"}
    assert all(v > 0 for v in ns.values()), ns
