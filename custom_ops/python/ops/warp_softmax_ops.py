"""Loader, Python wrapper and gradient of the WarpSoftmax custom op.

The shared library is built on first use (`custom_ops.build.build`, cached)
and loaded with `tf.load_op_library`, which runs the library's REGISTER_OP
and REGISTER_KERNEL_BUILDER static initializers. The gradient is registered
here with `tf.RegisterGradient` under the op's type name, which is how TF's
tape and `tf.gradients` find the gradient of an op defined outside TF
(tensorflow/python/framework/ops.py, ``RegisterGradient``).
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import TYPE_CHECKING

import tensorflow as tf

from tflab.errors import UsageError

if TYPE_CHECKING:
    from custom_ops.build import BuildResult

_ALLOWED = (tf.float16, tf.bfloat16, tf.float32)
_EagerTensor = type(tf.constant(0.0))  # tensorflow.python.framework.ops.EagerTensor
_lock = threading.Lock()
_lib: ModuleType | None = None
_build_result: BuildResult | None = None


def load_library(result: BuildResult | None = None) -> ModuleType:
    """Builds the op if needed (cached) and loads it into this process.

    Load it before `tf.saved_model.load` of a SavedModel that uses the op:
    the loader needs WarpSoftmax registered to rebuild the graph.

    ``$TFLAB_WARP_SOFTMAX_SO``, when set, names a prebuilt library to load
    instead (the Bazel ``py_test`` in BUILD uses it; nothing is compiled).

    Args:
        result: a `custom_ops.build.BuildResult` to load instead of the
            default build (e.g. a CPU-only one); ignored once a library is loaded
            (TF cannot register the same op twice).

    Returns:
        The module from `tf.load_op_library`, with ``warp_softmax(logits)``
        and ``warp_softmax_grad(softmax, grad_softmax)`` raw op functions.

    Raises:
        tflab.errors.UsageError: ``$TFLAB_WARP_SOFTMAX_SO`` names a missing file,
            or a file `tf.load_op_library` cannot load (not a shared library,
            built for another TF) or that lacks the op.
        custom_ops.build.BuildError: no C++ compiler, or the build failed.
    """
    global _lib, _build_result
    with _lock:
        if _lib is None:
            from custom_ops.build import BuildResult, build

            from tflab.process.settings import get as setting

            prebuilt = setting("TFLAB_WARP_SOFTMAX_SO")
            if result is None and prebuilt:
                if not os.path.isfile(prebuilt):
                    raise UsageError(f"TFLAB_WARP_SOFTMAX_SO={prebuilt}: no such file; point it at a "
                                     "built _warp_softmax_ops*.so, or unset it to build the op")
                result = BuildResult(so_path=os.path.abspath(prebuilt), cuda=False, cached=True,
                                     seconds=0.0, key="prebuilt", compiler="", nvcc="",
                                     note="loaded from $TFLAB_WARP_SOFTMAX_SO")
            candidate = result or build()
            try:
                lib = tf.load_op_library(candidate.so_path)
            except tf.errors.OpError as e:
                # TF's NotFoundError holds dlopen's reason; say which file and where it came from.
                origin = ("TFLAB_WARP_SOFTMAX_SO=" if candidate.key == "prebuilt" else "built library ")
                reason = (e.message or str(e)).strip().splitlines()[0]
                raise UsageError(f"{origin}{candidate.so_path} could not be loaded as a TF op library "
                                 f"({reason}); point TFLAB_WARP_SOFTMAX_SO at a _warp_softmax_ops*.so "
                                 "built for this TF, or unset it to build the op") from None
            if not hasattr(lib, "warp_softmax"):
                raise UsageError(f"{candidate.so_path} loaded but does not define the WarpSoftmax op; "
                                 "point TFLAB_WARP_SOFTMAX_SO at a _warp_softmax_ops*.so, or unset it")
            isa_error = _cdll(candidate.so_path).tflab_warp_softmax_isa_error()
            if isa_error:  # a bad $TFLAB_WARP_SOFTMAX_ISA: say so before any kernel runs
                raise UsageError(isa_error.decode())
            _build_result, _lib = candidate, lib
            if _build_result.key == "prebuilt":  # say whether it registered GPU kernels
                import dataclasses

                from tflab._tf.runtime import registered_kernels  # no public TF API lists kernels

                _build_result = dataclasses.replace(
                    _build_result, cuda="GPU" in registered_kernels("WarpSoftmax"))
        return _lib


def build_result() -> BuildResult:
    """The `custom_ops.build.BuildResult` of the loaded library (loads it first)."""
    load_library()
    return _build_result


ISAS = ("scalar", "avx2", "avx512")  # values of $TFLAB_WARP_SOFTMAX_ISA, in C++'s Isa order


def _cdll(so_path: str):
    """The library's C entry points through ctypes (dlopen of a loaded library: the same handle)."""
    import ctypes

    lib = ctypes.CDLL(so_path)
    lib.tflab_warp_softmax_cpu_isa.restype = ctypes.c_char_p
    lib.tflab_warp_softmax_isa_error.restype = ctypes.c_char_p
    lib.tflab_warp_softmax_cpu_has.restype = ctypes.c_int
    lib.tflab_warp_softmax_cpu_has.argtypes = [ctypes.c_int]
    lib.tflab_warp_softmax_rows_f32.restype = ctypes.c_int
    lib.tflab_warp_softmax_rows_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    lib.tflab_stream_copy.restype = ctypes.c_int
    lib.tflab_stream_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib


def stream_copy(src_address: int, dst_address: int, nbytes: int) -> bool:
    """Copies ``nbytes`` from one address to another with non-temporal stores (the library's AVX2 copy).

    The kernel writes large outputs this way (no read-for-ownership of the destination), so
    `custom_ops.bench.copy_roofline` tries it beside numpy's and libc's copies.

    Args:
        src_address, dst_address: addresses of non-overlapping buffers (``ndarray.ctypes.data``).
        nbytes: bytes to copy.

    Returns:
        True when copied; False on a CPU without AVX2 (nothing is written).
    """
    return _cdll(build_result().so_path).tflab_stream_copy(src_address, dst_address, nbytes) == 0


def cpu_isa() -> str:
    """The CPU kernels' code path in this process: "avx512", "avx2+fma" or "scalar".

    Chosen once per process at run time: the best the CPU has
    (``__builtin_cpu_supports``: AVX-512 F/BW/VL/DQ, else AVX2+FMA+F16C, else
    scalar), so the same library runs on any x86-64 CPU. Every path is compiled
    into the library (function target attributes).
    ``TFLAB_WARP_SOFTMAX_ISA=scalar|avx2|avx512`` forces one (read when the
    library is loaded; a bad value or a path the CPU lacks raises
    `tflab.errors.UsageError` then). ``TFLAB_WARP_SOFTMAX_SCALAR=1`` is the
    older spelling of ``=scalar``.

    Returns:
        "avx512", "avx2+fma" or "scalar".
    """
    return _cdll(build_result().so_path).tflab_warp_softmax_cpu_isa().decode()


from tflab.isa_caps import WARP_SOFTMAX_ISA_FLAGS as _ISA_CPU_FLAGS  # noqa: E402 (one table, no TF)
_ISA_LABEL = {"scalar": "scalar", "avx2": "avx2+fma", "avx512": "avx512"}


def planned_cpu_path(cpu_flags: set[str] | None = None, env: dict | None = None) -> str:
    """The CPU path the library will take in a process, without building or loading it.

    The C++ rule (warp_softmax_cpu.cc, ``Choice``) from the CPU flags the kernel lists in
    /proc/cpuinfo (the same ones ``__builtin_cpu_supports`` tests) and the environment:
    ``TFLAB_WARP_SOFTMAX_ISA`` if set and valid for this CPU, else the best path.
    `tflab env` prints it; a test checks it against `cpu_isa` of the loaded library.

    Args:
        cpu_flags: CPU flags (default: read from /proc/cpuinfo; empty where it is missing).
        env: environment (default: os.environ).

    Returns:
        "avx512", "avx2+fma", "scalar", or "invalid: <the loader's error>" for a bad request.
    """
    from tflab.process.settings import get as setting

    env = os.environ if env is None else env
    if cpu_flags is None:
        cpu_flags = set()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("flags"):
                        cpu_flags = set(line.split(":", 1)[1].split())
                        break
        except OSError:
            pass
    has = {isa: all(fl in cpu_flags for fl in flags) for isa, flags in _ISA_CPU_FLAGS.items()}
    req = setting("TFLAB_WARP_SOFTMAX_ISA", env) or (
        "scalar" if setting("TFLAB_WARP_SOFTMAX_SCALAR", env) is not None else "")
    if req:
        if req not in ISAS:
            return f"invalid: TFLAB_WARP_SOFTMAX_ISA={req} is not a CPU path"
        if not has[req]:
            return f"invalid: TFLAB_WARP_SOFTMAX_ISA={req}: this CPU lacks it"
        return _ISA_LABEL[req]
    return _ISA_LABEL["avx512" if has["avx512"] else "avx2" if has["avx2"] else "scalar"]


def cpu_has(isa: str) -> bool:
    """Whether this CPU can run path ``isa`` ("scalar", "avx2" or "avx512")."""
    return bool(_cdll(build_result().so_path).tflab_warp_softmax_cpu_has(ISAS.index(isa)))


def softmax_rows_with_isa(x, isa: str, stream: bool = False):
    """Softmax of a float32 [rows, cols] numpy array through one CPU path, in this process,
    without TF (for tests and benchmarks that compare the paths side by side).

    Args:
        x: numpy float32 array of rank 2 (made C-contiguous).
        isa: "scalar", "avx2" or "avx512".
        stream: write with non-temporal stores (the kernel's path for outputs >= 8 MiB).

    Returns:
        numpy float32 array of x's shape.

    Raises:
        tflab.errors.UsageError: bad ``isa``, or this CPU lacks it.
    """
    import numpy as np

    if isa not in ISAS:
        raise UsageError(f"isa {isa!r} is not a CPU path; use one of {', '.join(ISAS)}")
    x = np.ascontiguousarray(x, np.float32)
    if x.ndim != 2:
        raise UsageError(f"softmax_rows_with_isa: x must be rank 2, got shape {x.shape}")
    y = np.empty_like(x)
    rc = _cdll(build_result().so_path).tflab_warp_softmax_rows_f32(
        ISAS.index(isa), x.ctypes.data, y.ctypes.data, x.shape[0], x.shape[1], int(stream))
    if rc != 0:
        raise UsageError(f"this CPU lacks the {isa} path of WarpSoftmax")
    return y


def _bad(msg: str) -> tf.errors.InvalidArgumentError:
    return tf.errors.InvalidArgumentError(None, None, msg)


@tf.autograph.experimental.do_not_convert  # no tensor-dependent Python control flow
def warp_softmax(logits, axis: int = -1, name: str | None = None) -> tf.Tensor:
    """Softmax over ``axis`` with the WarpSoftmax custom op: same result as `tf.nn.softmax`.

    Computed in float32 whatever the storage dtype; one read of the input and
    one write of the output per row (see custom_ops/README.md for the kernels
    and the measured error bounds against `tf.nn.softmax`). Other axes than
    the last are moved to the end with `tf.transpose` and back, as
    `tf.nn.softmax` does (tensorflow/python/ops/nn_ops.py, ``_wrap_2d_function``).

    Args:
        logits: tensor of rank >= 1, dtype float32, float16 or bfloat16.
        axis: the axis to normalize, in ``[-rank, rank)``. Default -1.
        name: optional name scope for the ops.

    Returns:
        A tensor of the same shape and dtype as ``logits`` whose slices along
        ``axis`` sum to 1. A slice holding NaN or +inf, or only -inf, is all
        NaN: the IEEE formula exp(x - max) / sum, as TF's Eigen CPU kernel,
        its GPU kernel and XLA give. (TF's oneDNN CPU kernel, on by default on
        CPUs with AVX-512 VNNI/BF16 or AMX, gives ``[0, NaN, 0, 0]`` for
        ``[1, inf, 2, 0]``; this op does not depend on which one TF runs.)

    Raises:
        tf.errors.InvalidArgumentError: dtype not float16/bfloat16/float32,
            rank 0, or ``axis`` out of range (inside a `tf.function` with an
            unknown rank, at run time, where TF prefixes its "Graph execution
            error" lines).
        TypeError: ``logits`` is a `tf.RaggedTensor` or `tf.SparseTensor`.
        custom_ops.build.BuildError: the op could not be built.

    Example:
        >>> from custom_ops import warp_softmax
        >>> warp_softmax(tf.constant([[1.0, 1.0], [0.0, 2.0]])).numpy().round(4)
        array([[0.5   , 0.5   ],
               [0.1192, 0.8808]], dtype=float32)
    """
    # Eager fast path: the usual call (an eager float tensor of rank >= 1, last axis) goes straight
    # to the op. The checks below cost ~90 us per call (name scope, conversion, the loader's lock),
    # which is ~10% of a 1 MiB softmax. Anything else (graph mode, other axes, bad input) takes the
    # full path below, with its messages.
    if (_lib is not None and axis == -1 and name is None and type(logits) is _EagerTensor
            and logits.dtype in _ALLOWED and logits.shape.rank):
        return _lib.warp_softmax(logits)
    if isinstance(logits, (tf.RaggedTensor, tf.SparseTensor)):
        # The kernel needs equal-length rows; softmax over a ragged last axis is a
        # segment softmax, which tf.nn.softmax implements for RaggedTensor.
        raise TypeError(f"warp_softmax: {type(logits).__name__} input is not supported (the kernel "
                        "needs a dense tensor with equal-length rows); use tf.nn.softmax, or "
                        "convert to a dense tensor first")
    lib = load_library()
    with tf.name_scope(name or "WarpSoftmax"):
        logits = tf.convert_to_tensor(logits)
        if logits.dtype not in _ALLOWED:
            raise _bad(f"warp_softmax: logits has dtype {logits.dtype.name}; allowed dtypes are "
                       "float16, bfloat16, float32 (cast first, e.g. tf.cast(logits, tf.float32))")
        if not isinstance(axis, int):
            raise _bad(f"warp_softmax: axis must be a Python int, got {axis!r}")
        rank = logits.shape.rank
        if rank == 0:
            raise _bad("warp_softmax: logits must have rank >= 1 (softmax runs along an axis), "
                       "got a scalar; add an axis with tf.reshape(logits, [1])")
        if rank is not None and not -rank <= axis < rank:
            raise _bad(f"warp_softmax: axis {axis} is out of range for logits of rank {rank}; "
                       f"use an axis in [{-rank}, {rank})")
        if axis == -1 or (rank is not None and axis == rank - 1):
            return lib.warp_softmax(logits)
        if rank is None:
            # Unknown rank inside a tf.function: build the swap permutation at run time.
            # Rank first, so a scalar gets the rank message rather than an axis one.
            rank_ok = tf.debugging.assert_rank_at_least(
                logits, 1, message="warp_softmax: logits must have rank >= 1 (softmax runs along an "
                "axis), got a scalar; add an axis with tf.reshape(logits, [1])")
            # Graph ops run as soon as their inputs are ready, so each check is an explicit
            # control dependency of what it guards: without it, `axis % rank` could run
            # first on a scalar and raise "Integer division by zero" instead of the rank message.
            with tf.control_dependencies([rank_ok]):
                r = tf.rank(logits)
                axis_ok = tf.debugging.assert_less(
                    axis if axis >= 0 else -axis - 1, r,
                    message=f"warp_softmax: axis {axis} is out of range for the rank of logits; "
                    "use an axis in [-rank, rank)")
            with tf.control_dependencies([axis_ok]):
                a = axis % tf.maximum(r, 1)
                idx = tf.range(r)
                perm = tf.tensor_scatter_nd_update(idx, [[a], [r - 1]], [r - 1, a])
        else:
            a = axis % rank
            perm = list(range(rank))
            perm[a], perm[-1] = perm[-1], perm[a]
        # A swap permutation is its own inverse.
        return tf.transpose(lib.warp_softmax(tf.transpose(logits, perm)), perm)


# opcheck's reference and XLA fallback for this op (see custom_ops/opcheck.py).
warp_softmax.reference = tf.nn.softmax
warp_softmax.op_type = "WarpSoftmax"
warp_softmax.xla_fallback = "tf.nn.softmax"
# Slices with NaN, +inf or only -inf are all NaN (the IEEE formula, as TF's Eigen and GPU
# kernels and XLA give); opcheck compares those against custom_ops.opcheck.ieee_softmax,
# not against tf.nn.softmax, whose oneDNN CPU kernel gives [0, NaN, 0, 0] for [1, inf, 2, 0].
warp_softmax.ieee_specials = True
warp_softmax.cpu_path = lambda: cpu_isa()  # opcheck reports it


@tf.RegisterGradient("WarpSoftmax")
def _warp_softmax_grad(op: tf.Operation, grad: tf.Tensor) -> tf.Tensor:
    """dx = y * (dy - sum(dy * y, axis=-1)), by the WarpSoftmaxGrad kernels."""
    return load_library().warp_softmax_grad(op.outputs[0], grad)


@tf.RegisterGradient("WarpSoftmaxGrad")
def _warp_softmax_grad_grad(op: tf.Operation, grad: tf.Tensor):
    """Second derivative, from composite TF ops (for Hessians; not a fast path).

    With dx = y * (dy - s), s = sum(dy * y): for an upstream g on dx,
    d/dy = g * (dy - s) - dy * sum(g * y) and d/d(dy) = y * (g - sum(g * y)).
    """
    y, dy = op.inputs
    s = tf.reduce_sum(dy * y, axis=-1, keepdims=True)
    gy = tf.reduce_sum(grad * y, axis=-1, keepdims=True)
    return grad * (dy - s) - dy * gy, y * (grad - gy)
