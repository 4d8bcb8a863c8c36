"""Builds the WarpSoftmax shared library against the installed TensorFlow wheel.

``python -m custom_ops.build`` builds (or finds in the cache) the ``.so``;
`custom_ops.load_library()` calls `build()` the first time the op is used, so a
fresh clone needs no separate build step.

What it does, and why:

* Compile and link flags come from ``tf.sysconfig.get_compile_flags()`` /
  ``get_link_flags()`` (C++17, ``_GLIBCXX_USE_CXX11_ABI=1`` for TF 2.21): an
  ABI mismatch with the wheel gives undefined-symbol errors at load time.
* The four translation units compile in parallel: the op schema, the
  OpKernels (TF headers, the slow one), the vectorized CPU row math (no TF
  headers) and, when ``nvcc`` is found, the CUDA kernels (no TF headers:
  nvcc and TF's absl headers do not mix). With nvcc the OpKernel file is
  compiled with ``GOOGLE_CUDA=1`` so it also registers the GPU kernels, and
  cudart is linked statically so the library loads where no CUDA runtime is
  installed (it then runs on CPU only).
* The output is cached under ``custom_ops/_build/`` (or
  ``$TFLAB_CUSTOM_OPS_BUILD_DIR``) in a file whose name carries a hash of the
  sources, the TF version, both compilers' versions and all flags: any change
  builds a new file, nothing stale is loaded.
* An ``fcntl`` lock on the cache folder makes concurrent builds (pytest-xdist
  workers, two shells) wait for one another instead of racing; the ``.so``
  is linked under a temporary name and renamed into place.

Environment: ``CXX`` (host compiler), ``NVCC`` / ``CUDA_HOME`` (CUDA),
``TFLAB_CUSTOM_OPS_CUDA=0`` (CPU-only build even with nvcc present).
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CC_DIR = PACKAGE_DIR / "cc"
SOURCES = {
    "ops": CC_DIR / "ops" / "warp_softmax_ops.cc",
    "kernels": CC_DIR / "kernels" / "warp_softmax_kernels.cc",
    "cpu": CC_DIR / "kernels" / "warp_softmax_cpu.cc",
    "cuda": CC_DIR / "kernels" / "warp_softmax_kernels.cu",
}
HEADERS = [CC_DIR / "kernels" / "warp_softmax.h"]
LIB_STEM = "_warp_softmax_ops"
CUDA_ARCHS = ("80", "90")  # A100 and H100/H200; PTX for 90 lets newer GPUs JIT


class BuildError(RuntimeError):
    """The op could not be built; the message says what to install or fix."""


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """What `build()` produced.

    Attributes:
        so_path: absolute path of the shared library to `tf.load_op_library`.
        cuda: True when the CUDA kernels were compiled in (GPU kernels registered).
        cached: True when an existing library with the same key was reused.
        seconds: wall time of this call (build or cache lookup), seconds.
        key: 12 hex digits of the cache key (sources, TF version, compilers, flags).
        compiler: first line of ``$CXX --version``.
        nvcc: first line of ``nvcc --version`` naming the release, or "" without CUDA.
        note: why CUDA is absent, when it is; "" otherwise.
    """

    so_path: str
    cuda: bool
    cached: bool
    seconds: float
    key: str
    compiler: str
    nvcc: str
    note: str = ""

    def __repr__(self) -> str:
        how = "cache hit" if self.cached else f"built in {self.seconds:.1f} s"
        return (f"BuildResult({how}, cuda={self.cuda}, key={self.key}, "
                f"so_path={self.so_path!r})")

    def to_text(self) -> str:
        how = "cache hit" if self.cached else f"built in {self.seconds:.1f} s"
        lines = [f"{self.so_path}", f"  {how}; CUDA kernels: {'yes' if self.cuda else 'no'}",
                 f"  compiler: {self.compiler}"]
        if self.nvcc:
            lines.append(f"  nvcc: {self.nvcc}")
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def build_dir() -> Path:
    """Cache folder: ``$TFLAB_CUSTOM_OPS_BUILD_DIR``, else ``custom_ops/_build`` when
    writable (editable installs), else ``~/.cache/tflab/custom_ops``
    (`tflab.process.settings.build_cache_dir`, the one rule)."""
    from tflab.process.settings import build_cache_dir

    return build_cache_dir(PACKAGE_DIR)


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    release = [ln for ln in lines if "release" in ln]
    return (release or lines or [""])[0].strip()


def find_cxx() -> str:
    """The host C++ compiler: ``$CXX``, else g++, c++ or clang++ on PATH.

    Raises:
        BuildError: ``$CXX`` is set but is not an executable, or none is installed.
    """
    env = os.environ.get("CXX")
    if env:
        # An explicit choice is never replaced silently by another compiler.
        if shutil.which(env):
            return shutil.which(env)
        raise BuildError(f"$CXX={env} is not an executable compiler: fix CXX, or unset it "
                         "to use g++, c++ or clang++ from PATH")
    for cand in ["g++", "c++", "clang++"]:
        if shutil.which(cand):
            return shutil.which(cand)
    raise BuildError(
        "no C++ compiler found (tried $CXX, g++, c++, clang++): install one, e.g. "
        "`apt-get install g++` on Debian/Ubuntu or `dnf install gcc-c++`, or set CXX")


def find_nvcc() -> tuple[str | None, str]:
    """(path of nvcc or None, note explaining why CUDA is off)."""
    from tflab.process.settings import get as setting

    if setting("TFLAB_CUSTOM_OPS_CUDA") == "0":
        return None, "CUDA disabled by TFLAB_CUSTOM_OPS_CUDA=0"
    cands = [os.environ.get("NVCC")]
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    cands += ["nvcc", "/usr/local/cuda/bin/nvcc"]
    for cand in cands:
        if cand and shutil.which(cand):
            return shutil.which(cand), ""
    return None, ("nvcc not found (set NVCC or CUDA_HOME, or install the CUDA toolkit): "
                  "built the CPU kernels only")


def _cuda_home(nvcc: str) -> Path:
    """The CUDA toolkit folder holding include/cuda_runtime.h for this nvcc."""
    cands = [os.environ.get("CUDA_HOME"), Path(nvcc).resolve().parent.parent, "/usr/local/cuda"]
    for cand in cands:
        if cand and (Path(cand) / "include" / "cuda_runtime.h").exists():
            return Path(cand)
    # A wrapper script on PATH (e.g. /usr/local/bin/nvcc -> exec .../bin/nvcc):
    # nvcc itself knows where its toolkit is.
    try:
        out = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"],
                             capture_output=True, text=True, timeout=60).stderr
        for line in out.splitlines():
            if "TOP=" in line:
                return Path(line.split("TOP=", 1)[1].strip()).resolve()
    except (OSError, subprocess.TimeoutExpired):
        pass
    raise BuildError(f"found {nvcc} but not its CUDA headers (include/cuda_runtime.h): "
                     "set CUDA_HOME to the CUDA toolkit folder, or TFLAB_CUSTOM_OPS_CUDA=0 "
                     "for a CPU-only build")


def _tf_flags() -> tuple[list[str], list[str], str]:
    import tensorflow as tf

    return (list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags()),
            tf.__version__)


TF_UNITY = "tf_parts.cc"


def _write_unity(objdir: Path) -> None:
    """Writes ``objdir/TF_UNITY``: the two sources that include TF's headers, as one file.

    The kernels come first: they define ``EIGEN_USE_GPU`` (CUDA builds) before
    their first TF header, which the op registration's headers would otherwise
    have included without it. Quoted includes inside them (``"warp_softmax.h"``)
    are found next to each source.
    """
    (objdir / TF_UNITY).write_text("".join(f'#include "{SOURCES[name]}"\n' for name in ("kernels", "ops")))


def _commands(cxx: str, nvcc: str | None, objdir: Path, out: Path) -> tuple[list[list[str]], list[str]]:
    cflags, lflags, _ = _tf_flags()
    base = [cxx, "-O2", "-fPIC", "-Wno-deprecated-declarations", *cflags]
    compiles = []
    objs = []
    cuda_home = _cuda_home(nvcc) if nvcc else None
    # The op registration and the kernels are one translation unit (`TF_UNITY`):
    # TF's headers, most of each compile, are parsed once (measured: 27 -> 18 s of CPU).
    for name, src in (("tf_parts", objdir / TF_UNITY), ("cpu", SOURCES["cpu"])):
        obj = objdir / f"{name}.o"
        flags = list(base)
        if name == "tf_parts" and nvcc:
            flags += ["-DGOOGLE_CUDA=1", f"-I{cuda_home / 'include'}"]
        if name == "cpu":  # no TF headers: plain C++17 is enough
            flags = [cxx, "-O2", "-fPIC", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1"]
        compiles.append([*flags, "-c", str(src), "-o", str(obj)])
        objs.append(str(obj))
    link_extra = []
    if nvcc:
        obj = objdir / "cuda.o"
        gencode = []
        for arch in CUDA_ARCHS:
            gencode += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
        gencode += ["-gencode", f"arch=compute_{CUDA_ARCHS[-1]},code=compute_{CUDA_ARCHS[-1]}"]
        compiles.append([nvcc, "-O3", "-std=c++17", "-DGOOGLE_CUDA=1", "-Xcompiler", "-fPIC",
                         "-ccbin", cxx, *gencode, "-c", str(SOURCES["cuda"]), "-o", str(obj)])
        objs.append(str(obj))
        lib64 = cuda_home / "lib64"
        if not (lib64 / "libcudart_static.a").exists():
            lib64 = cuda_home / "lib"
        link_extra = [f"-L{lib64}", "-l:libcudart_static.a", "-ldl", "-lrt", "-lpthread"]
    # The static cudart comes before TF's framework library: libtensorflow_framework.so.2
    # exports the CUDA runtime API itself (its cudart stub, which dlopens TF's own
    # libcudart.so.12 at run time). Linked after it, every cuda* reference of ours bound to
    # that stub and the static archive was never used (checked with `nm -D`: `U
    # __cudaLaunchKernel`); linked first, the archive resolves them inside our .so.
    link = [cxx, "-shared", "-o", str(out), *objs, *link_extra, *lflags]
    return compiles, link


def cache_key(cxx: str, nvcc: str | None) -> str:
    """Hash of the sources, TF version, compiler versions and every flag."""
    h = hashlib.sha256()
    for path in [*SOURCES.values(), *HEADERS]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    cflags, lflags, tf_version = _tf_flags()
    h.update(json.dumps([tf_version, cflags, lflags, _first_line([cxx, "--version"]),
                         _first_line([nvcc, "--version"]) if nvcc else "", CUDA_ARCHS,
                         _commands(cxx, nvcc, Path("OBJ"), Path("OUT"))]).encode())
    return h.hexdigest()[:12]


def _run_parallel(cmds: list[list[str]]) -> None:
    from tflab.process.group import guarded  # the compilers (g++ → cc1plus, as) die with tflab

    procs = [(cmd, subprocess.Popen(guarded(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
             for cmd in cmds]
    failures = []
    for cmd, p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            failures.append((cmd, out, p.returncode))
    if failures:
        cmd, out, code = failures[0]
        what = "linking" if "-shared" in cmd else f"compiling {Path(cmd[cmd.index('-c') + 1]).name}"
        errors = [ln for ln in out.splitlines() if "error" in ln.lower()][:15]
        raise BuildError(f"{what} failed (exit {code}):\n"
                         + "\n".join(errors or out.splitlines()[-15:]) + "\ncommand: " + " ".join(cmd))


def build(force: bool = False, cuda: bool | None = None, verbose: bool = False) -> BuildResult:
    """Builds the WarpSoftmax library, or returns the cached one.

    Args:
        force: rebuild even when a library with the same cache key exists.
        cuda: False for a CPU-only build; None (default) compiles the CUDA
            kernels when nvcc is found.
        verbose: print the compile commands and timings on stderr.

    Returns:
        A `BuildResult` (``so_path``, ``cuda``, ``cached``, ``seconds``, ...).

    Raises:
        BuildError: no C++ compiler (or ``$CXX`` names a missing one), the cache
            folder cannot be created or written (e.g. ``$TFLAB_CUSTOM_OPS_BUILD_DIR``
            names a file), or a compile/link step failed (the message holds the
            first compiler errors and the command).

    Example:
        >>> from custom_ops.build import build
        >>> build().so_path  # doctest: +SKIP
        '.../custom_ops/_build/_warp_softmax_ops.1f2e3d4c5b6a.so'
    """
    t0 = time.perf_counter()
    cxx = find_cxx()
    nvcc, note = (None, "CPU-only build requested") if cuda is False else find_nvcc()
    key = cache_key(cxx, nvcc)
    out_dir = build_dir()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # FileExistsError: the path (or a parent) is a file
        raise BuildError(f"cannot use {out_dir} as the build cache folder "
                         f"({e.strerror or type(e).__name__}): set TFLAB_CUSTOM_OPS_BUILD_DIR "
                         "to a writable folder (created if missing), or unset it") from None
    so_path = out_dir / f"{LIB_STEM}.{key}.so"
    info = dict(compiler=_first_line([cxx, "--version"]),
                nvcc=_first_line([nvcc, "--version"]) if nvcc else "", note=note, key=key)

    def result(cached: bool, has_cuda: bool, note_: str) -> BuildResult:
        return BuildResult(so_path=str(so_path), cuda=has_cuda, cached=cached,
                           seconds=round(time.perf_counter() - t0, 2), key=key,
                           compiler=info["compiler"], nvcc=info["nvcc"], note=note_)

    manifest = so_path.with_suffix(".json")
    from tflab._io.path_checks import open_regular, read_regular
    from tflab.errors import UsageError

    def cached_manifest() -> dict | None:
        # read without blocking: a FIFO in the cache folder hung build-op for ever
        if force or not (so_path.exists() and manifest.exists()):
            return None
        try:
            return json.loads(read_regular(manifest, what=f"the build cache's {manifest.name}"))
        except UsageError as e:
            raise BuildError(f"{e}; or set TFLAB_CUSTOM_OPS_BUILD_DIR to another folder") from None

    m = cached_manifest()
    if m is not None:
        return result(True, m["cuda"], m.get("note", ""))
    if not os.access(out_dir, os.W_OK):
        raise BuildError(f"the build cache folder {out_dir} is not writable: set "
                         "TFLAB_CUSTOM_OPS_BUILD_DIR to a writable folder, or unset it")
    try:
        lock_fd = open_regular(out_dir / ".lock", os.O_WRONLY | os.O_CREAT, what=f".lock in {out_dir}")
    except UsageError as e:
        raise BuildError(f"{e}; or set TFLAB_CUSTOM_OPS_BUILD_DIR to another folder") from None
    except OSError as e:  # /proc, /sys: os.access says yes to root, the create fails
        raise BuildError(f"cannot use {out_dir} as the build cache folder ({e.strerror or e}): set "
                         "TFLAB_CUSTOM_OPS_BUILD_DIR to a writable folder, or unset it") from None
    with os.fdopen(lock_fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building this key
        m = cached_manifest()
        if m is not None:
            return result(True, m["cuda"], m.get("note", ""))
        from tflab._io.paths import owned_temp_dir  # carries its owner: a SIGKILLed build's obj-* is swept

        tmp = owned_temp_dir("obj-", dir=out_dir)
        try:
            tmp_so = Path(tmp) / so_path.name
            compiles, link = _commands(cxx, nvcc, Path(tmp), tmp_so)
            _write_unity(Path(tmp))
            if verbose:
                for cmd in [*compiles, link]:
                    print("$ " + " ".join(cmd), file=sys.stderr)
            _run_parallel(compiles)
            _run_parallel([link])
            os.replace(tmp_so, so_path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        manifest_tmp = manifest.with_suffix(".json.tmp")
        manifest_tmp.write_text(json.dumps({"cuda": nvcc is not None, "note": note, **info,
                                            "seconds": round(time.perf_counter() - t0, 2)}))
        os.replace(manifest_tmp, manifest)
    if note and cuda is not False:
        print(f"custom_ops.build: {note}", file=sys.stderr)
    return result(False, nvcc is not None, note)


def main(argv: list[str] | None = None) -> int:
    """``python -m custom_ops.build [--force] [--no-cuda] [--json] [-v]``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    p = argparse.ArgumentParser(prog="python -m custom_ops.build", description=__doc__.splitlines()[0])
    p.add_argument("--force", action="store_true", help="rebuild even on a cache hit")
    p.add_argument("--no-cuda", action="store_true", help="CPU kernels only, even with nvcc")
    p.add_argument("--json", action="store_true", help="print the BuildResult as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="print compile commands")
    args = p.parse_args(argv)
    try:
        res = build(force=args.force, cuda=False if args.no_cuda else None, verbose=args.verbose)
    except BuildError as e:
        print(f"custom_ops.build: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res.to_dict(), indent=2) if args.json else res.to_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
