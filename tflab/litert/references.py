"""Lab step 8, per-op references: each TFLite builtin in float64 numpy, with the magnitudes its bound needs.

`reference(op_type, options, inputs, out_shape)` computes what one op should
output, from its inputs as float64 arrays (activations as the op read them,
dequantized; weights from the float model), and `Terms`: the magnitudes the
local bound is built from, all elementwise over the output and never signed
sums, so cancellation in the output cannot shrink a bound:

* ``dot``: ``Σ_k |x_k|·|w_k|`` over the op's own K terms (plus ``|b|``),
* ``x_abs``: ``Σ_k |x_k|`` (times a weight step gives the weight-rounding error),
* ``w_abs``: ``Σ_k |w_k|`` (times an input step gives the input-rounding error),
* ``k``: the reduction length K (for ``γ_K = K·u/(1 − K·u)``).

The semantics follow TFLite's reference kernels
(tensorflow/lite/kernels/internal/reference/*.h: conv.h, depthwiseconv_float.h,
fully_connected.h, pooling.h, softmax.h) and the option tables of
tensorflow/compiler/mlir/lite/schema/schema.fbs (Padding SAME/VALID,
ActivationFunctionType, depth_multiplier, keep_num_dims, adj_x/adj_y).
An op type without an entry here raises `KeyError`: the caller lists it as
unchecked.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

# schema.fbs: enum Padding { SAME, VALID }, enum ActivationFunctionType { NONE, RELU, RELU_N1_TO_1, RELU6, TANH, ... }
_SAME = 0


@dataclasses.dataclass
class Terms:
    """Magnitudes for the local bound of one op (elementwise over the output, or None when not a dot product)."""

    dot: np.ndarray | None = None
    x_abs: np.ndarray | None = None
    w_abs: np.ndarray | None = None
    k: int = 1
    weight: int | None = None  # which input is the weight (for its quantization step), else None
    kind: str = "exact"  # "dot", "exact", "arith", "transcendental", "reduce", "convert"


def _act(y: np.ndarray, code: int) -> np.ndarray:
    if code == 1:
        return np.maximum(y, 0.0)
    if code == 2:
        return np.clip(y, -1.0, 1.0)
    if code == 3:
        return np.clip(y, 0.0, 6.0)
    if code == 4:
        return np.tanh(y)
    return y


def _fused(options) -> int:
    return int(getattr(options, "fusedActivationFunction", 0) or 0)


def _pad_amounts(size: int, k: int, stride: int, dil: int, padding: int) -> tuple[int, int, int]:
    eff = (k - 1) * dil + 1
    if padding == _SAME:
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        return out, total // 2, total - total // 2
    return (size - eff) // stride + 1, 0, 0


def _windows(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, padding: int,
             fill: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """NHWC → windows ``[N, Ho, Wo, C, kh, kw]`` and a validity mask ``[1, Ho, Wo, 1, kh, kw]`` (padding = 0)."""
    n, h, w, c = x.shape
    ho, pt, pb = _pad_amounts(h, kh, sh, dh, padding)
    wo, pl, pr = _pad_amounts(w, kw, sw, dw, padding)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    mp = np.pad(np.ones((1, h, w, 1)), ((0, 0), (pt, pb), (pl, pr), (0, 0)))

    def win(a):
        v = np.lib.stride_tricks.sliding_window_view(a, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
        return v[:, ::sh, ::sw, :, ::dh, ::dw][:, :ho, :wo]
    return win(xp), win(mp)


class _Prepared:
    """Arrays derived from weights, kept while the same weight objects are passed again, inside `keeping`.

    A weight is the same object for every example and every dithered run of an op
    (`tflab.litert.per_op` and `tflab.litert.simulate` hand one float64 copy of each constant
    around), so its transposed copy, ``|w|`` and ``Σ|w|`` are made once per check, not once per
    call. They are the arrays ``np.tensordot`` made on each call (same values, same layout), so
    the products are the same to the bit. Keyed by the ``id`` of the source objects, which the
    entry holds, so no other object can take a key while its entry lives; at most `MAX_BYTES`
    are kept, and nothing outlives the outermost ``with PREPARED.keeping():`` (outside one,
    nothing is kept).
    """

    MAX_BYTES = 1 << 30

    def __init__(self) -> None:
        import collections

        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._bytes = 0
        self._depth = 0

    def get(self, kind: str, sources: tuple, make: Callable[[], tuple]) -> tuple:
        """``make()``, or what it returned for the same ``kind`` and the same ``sources`` objects."""
        key = (kind, *map(id, sources))
        hit = self._entries.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], sources)):
            self._entries.move_to_end(key)
            return hit[1]
        made = make()
        size = sum(a.nbytes for a in made if isinstance(a, np.ndarray))
        if self._depth and size <= self.MAX_BYTES:
            self._entries[key] = (sources, made, size)
            self._bytes += size
            while self._bytes > self.MAX_BYTES:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
        return made

    def keeping(self):
        """A context in which prepared weights are kept (dropped when the outermost one ends)."""
        import contextlib

        @contextlib.contextmanager
        def scope():
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
                if not self._depth:
                    self._entries.clear()
                    self._bytes = 0
        return scope()


PREPARED = _Prepared()


def as_float64(a: np.ndarray) -> np.ndarray:
    """``a.astype(np.float64)``, made once per array object inside ``PREPARED.keeping()`` (read-only: shared)."""
    def make():
        f = a.astype(np.float64)
        f.setflags(write=False)
        return (f,)
    return PREPARED.get("float64", (a,), make)[0]


def _conv_weights(w: np.ndarray) -> tuple:
    """``w [O,kh,kw,C]`` as tensordot lays it out ``[C·kh·kw, O]``, its ``|·|``, and ``Σ|w|`` per output channel."""
    def make():
        wt = np.transpose(w, (3, 1, 2, 0))  # [C,kh,kw,O]
        shape = (int(np.prod(wt.shape[:3])), wt.shape[3])
        return wt.reshape(shape), np.abs(wt).reshape(shape), np.abs(w).sum(axis=(1, 2, 3))
    return PREPARED.get("conv", (w,), make)


def _conv(ins, o, out_shape, terms: bool = True):
    x, w, b = ins[0], ins[1], (ins[2] if len(ins) > 2 else None)
    kh, kw = w.shape[1], w.shape[2]
    win, _ = _windows(x, kh, kw, o.strideH, o.strideW, o.dilationHFactor or 1, o.dilationWFactor or 1, o.padding)
    # win [N,Ho,Wo,C,kh,kw], w [O,kh,kw,C]: np.tensordot(win, w as [C,kh,kw,O], axes 3) by hand, the
    # weight side prepared once per weight array.
    wmat, awmat, wsum = _conv_weights(w)
    rows = int(np.prod(win.shape[:3]))
    y = np.dot(win.reshape(rows, wmat.shape[0]), wmat).reshape(*win.shape[:3], wmat.shape[1])
    k = int(np.prod(w.shape[1:])) + (b is not None)
    if not terms:
        return _act(y + b if b is not None else y, _fused(o)), Terms(k=k, weight=1, kind="dot")
    aw = np.abs(win)
    dot = np.dot(aw.reshape(rows, awmat.shape[0]), awmat).reshape(y.shape)
    x_abs = np.broadcast_to(aw.sum(axis=(3, 4, 5))[..., None], y.shape)
    w_abs = np.broadcast_to(wsum, y.shape)
    if b is not None:
        y, dot = y + b, dot + np.abs(b)
    return _act(y, _fused(o)), Terms(dot, x_abs, w_abs, k=k, weight=1, kind="dot")


def _depthwise(ins, o, out_shape):
    x, w, b = ins[0], ins[1], (ins[2] if len(ins) > 2 else None)
    kh, kw, cm = w.shape[1], w.shape[2], w.shape[3]
    c = x.shape[3]
    m = cm // c
    win, _ = _windows(x, kh, kw, o.strideH, o.strideW, o.dilationHFactor or 1, o.dilationWFactor or 1, o.padding)
    wr = w.reshape(kh, kw, c, m)  # output channel c*m + j reads input channel c
    y = np.einsum("nhwcij,ijcm->nhwcm", win, wr).reshape(*win.shape[:3], cm)
    aw = np.abs(win)
    dot = np.einsum("nhwcij,ijcm->nhwcm", aw, np.abs(wr)).reshape(y.shape)
    x_abs = np.repeat(aw.sum(axis=(4, 5)), m, axis=3)
    w_abs = np.broadcast_to(np.abs(wr).sum(axis=(0, 1)).reshape(cm), y.shape)
    if b is not None:
        y, dot = y + b, dot + np.abs(b)
    return _act(y, _fused(o)), Terms(dot, x_abs, w_abs, k=kh * kw + (b is not None), weight=1, kind="dot")


def _fully_connected(ins, o, out_shape, terms: bool = True):
    x, w, b = ins[0], ins[1], (ins[2] if len(ins) > 2 else None)
    x2 = x.reshape(-1, w.shape[1])
    y = x2 @ w.T
    shape = tuple(out_shape)
    k = w.shape[1] + (b is not None)
    if not terms:
        return _act(y + b if b is not None else y, _fused(o)).reshape(shape), Terms(k=k, weight=1, kind="dot")
    aw, wsum = PREPARED.get("fc", (w,), lambda: (np.abs(w), np.abs(w).sum(axis=1)))
    dot = np.abs(x2) @ aw.T
    x_abs = np.broadcast_to(np.abs(x2).sum(axis=1, keepdims=True), y.shape)
    w_abs = np.broadcast_to(wsum, y.shape)
    if b is not None:
        y, dot = y + b, dot + np.abs(b)
    return (_act(y, _fused(o)).reshape(shape),
            Terms(dot.reshape(shape), x_abs.reshape(shape), w_abs.reshape(shape), k=k, weight=1, kind="dot"))


def _batch_matmul(ins, o, out_shape):
    a, b = ins[0], ins[1]
    if getattr(o, "adjX", False):
        a = np.swapaxes(a, -1, -2)
    if getattr(o, "adjY", False):
        b = np.swapaxes(b, -1, -2)
    y = np.matmul(a, b)
    dot = np.matmul(np.abs(a), np.abs(b))
    x_abs = np.broadcast_to(np.abs(a).sum(axis=-1, keepdims=True), y.shape)
    w_abs = np.broadcast_to(np.abs(b).sum(axis=-2, keepdims=True), y.shape)
    return y.reshape(out_shape), Terms(dot.reshape(out_shape), x_abs.reshape(out_shape),
                                       w_abs.reshape(out_shape), k=a.shape[-1], weight=1, kind="dot")


def _binary(fn: Callable, kind: str = "arith"):
    def run(ins, o, out_shape):
        a, b = ins[0], ins[1]
        y = _act(fn(a, b), _fused(o))
        if fn is np.multiply:
            mag = np.abs(a) * np.abs(b)
            return y, Terms(dot=np.broadcast_to(mag, y.shape), x_abs=np.broadcast_to(np.abs(a), y.shape),
                            w_abs=np.broadcast_to(np.abs(a), y.shape), k=1, kind=kind)
        if fn in (np.add, np.subtract):
            mag = np.abs(a) + np.abs(b)
            return y, Terms(dot=np.broadcast_to(mag, y.shape), x_abs=np.ones(y.shape), w_abs=np.ones(y.shape),
                            k=1, kind=kind)
        return y, Terms(kind=kind)
    return run


def _unary(fn: Callable, kind: str):
    return lambda ins, o, out_shape: (fn(ins[0]), Terms(kind=kind))


def _softmax(ins, o, out_shape):
    beta = float(getattr(o, "beta", 1.0) or 1.0)
    z = ins[0] * beta
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True), Terms(kind="transcendental")


def _hard_swish(x):
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _axes(a: np.ndarray, rank: int) -> tuple[int, ...]:
    return tuple(sorted({int(v) % rank for v in np.atleast_1d(a).astype(np.int64)}))


def _reduce(fn: Callable):
    def run(ins, o, out_shape):
        x = ins[0]
        axes = _axes(ins[1], x.ndim)
        keep = bool(getattr(o, "keepDims", False))
        y = fn(x, axis=axes, keepdims=keep)
        k = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        mag = (np.abs(x).mean if fn is np.mean else np.abs(x).sum)(axis=axes, keepdims=keep)
        kind = "reduce" if fn in (np.mean, np.sum) else "exact"
        return y.reshape(out_shape), Terms(dot=mag.reshape(out_shape), k=k, kind=kind)
    return run


def _pool(kind: str):
    def run(ins, o, out_shape):
        x = ins[0]
        fill = -np.inf if kind == "max" else 0.0
        win, mask = _windows(x, o.filterHeight, o.filterWidth, o.strideH, o.strideW, 1, 1, o.padding, fill)
        if kind == "max":
            # pooling.h's MaxPool keeps max = std::max(max, x) from float's lowest: a NaN never wins
            # a comparison, so it never enters the result (TF's MaxPool drops it too); np.max would
            # propagate it. A window of NaN alone stays at the lowest float.
            y = np.where(np.isnan(win), -np.finfo(np.float32).max, win).max(axis=(4, 5))
            return _act(y, _fused(o)), Terms(kind="exact")
        count = mask.sum(axis=(4, 5))  # TFLite averages over the valid (unpadded) cells only
        y = win.sum(axis=(4, 5)) / count
        mag = np.abs(win).sum(axis=(4, 5)) / count
        return _act(y, _fused(o)), Terms(dot=mag, k=o.filterHeight * o.filterWidth, kind="reduce")
    return run


def _reshape(ins, o, out_shape):
    return ins[0].reshape(out_shape), Terms(kind="exact")


def _concat(ins, o, out_shape):
    axis = int(o.axis) % len(out_shape)
    return _act(np.concatenate(ins, axis=axis), _fused(o)), Terms(kind="exact")


def _pad(ins, o, out_shape):
    pads = np.asarray(ins[1]).astype(np.int64)
    value = float(ins[2].reshape(())) if len(ins) > 2 and ins[2] is not None else 0.0
    return np.pad(ins[0], [tuple(p) for p in pads], constant_values=value), Terms(kind="exact")


def _strided_slice(ins, o, out_shape):
    x = ins[0]
    begin, end, strides = (np.asarray(a).astype(np.int64) for a in ins[1:4])
    if getattr(o, "ellipsisMask", 0) or getattr(o, "newAxisMask", 0):
        raise KeyError("STRIDED_SLICE with ellipsis or new-axis mask")
    idx = []
    for d in range(len(begin)):
        b = None if (o.beginMask >> d) & 1 else int(begin[d])
        e = None if (o.endMask >> d) & 1 else int(end[d])
        if (o.shrinkAxisMask >> d) & 1:
            idx.append(int(begin[d]))
        else:
            idx.append(slice(b, e, int(strides[d])))
    return np.asarray(x[tuple(idx)]).reshape(out_shape), Terms(kind="exact")


def _transpose(ins, o, out_shape):
    return np.transpose(ins[0], np.asarray(ins[1]).astype(np.int64)), Terms(kind="exact")


def _shape(ins, o, out_shape):
    return np.asarray(ins[0].shape, np.float64), Terms(kind="exact")


def _pack(ins, o, out_shape):
    return np.stack(ins, axis=int(o.axis) % len(out_shape)), Terms(kind="exact")


def _gather(ins, o, out_shape):
    # tf.gather / TFLite GATHER: rows of ``params`` picked by ``indices`` along ``axis``; the values pass
    # through as they are (an int8 table's rows keep the table's scale), so the op is exact.
    if getattr(o, "batchDims", 0):
        raise KeyError("GATHER with batch_dims")
    x = ins[0]
    return np.take(x, np.asarray(ins[1]).astype(np.int64), axis=int(getattr(o, "axis", 0)) % x.ndim), \
        Terms(kind="exact")


def _identity_convert(ins, o, out_shape):
    return ins[0].reshape(out_shape), Terms(kind="convert")


REFERENCES: dict[str, Callable[[Sequence[np.ndarray], Any, tuple], tuple[np.ndarray, Terms]]] = {
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": _depthwise,
    "FULLY_CONNECTED": _fully_connected,
    "BATCH_MATMUL": _batch_matmul,
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MUL": _binary(np.multiply),
    "DIV": _binary(np.divide, "transcendental"),
    "MAXIMUM": _binary(np.maximum, "exact"),
    "MINIMUM": _binary(np.minimum, "exact"),
    "SQUARED_DIFFERENCE": _binary(lambda a, b: (a - b) ** 2, "transcendental"),
    "FLOOR_MOD": _binary(np.mod, "exact"),
    "MEAN": _reduce(np.mean),
    "SUM": _reduce(np.sum),
    "REDUCE_MAX": _reduce(np.max),
    "SOFTMAX": _softmax,
    "LOGISTIC": _unary(lambda x: 1.0 / (1.0 + np.exp(-x)), "transcendental"),
    "TANH": _unary(np.tanh, "transcendental"),
    "HARD_SWISH": _unary(_hard_swish, "transcendental"),
    "EXP": _unary(np.exp, "transcendental"),
    "RSQRT": _unary(lambda x: 1.0 / np.sqrt(x), "transcendental"),
    "SQRT": _unary(np.sqrt, "transcendental"),
    "NEG": _unary(np.negative, "exact"),  # the sign bit flips: exact in every float format
    "RELU": _unary(lambda x: np.maximum(x, 0.0), "exact"),
    "RELU6": _unary(lambda x: np.clip(x, 0.0, 6.0), "exact"),
    "LEAKY_RELU": None,  # options-dependent: filled below
    "AVERAGE_POOL_2D": _pool("avg"),
    "MAX_POOL_2D": _pool("max"),
    "RESHAPE": _reshape,
    "SQUEEZE": _reshape,
    "EXPAND_DIMS": _reshape,
    "CONCATENATION": _concat,
    "PAD": _pad,
    "PADV2": _pad,
    "STRIDED_SLICE": _strided_slice,
    "TRANSPOSE": _transpose,
    "SHAPE": _shape,
    "PACK": _pack,
    "GATHER": _gather,
    "QUANTIZE": _identity_convert,
    "DEQUANTIZE": _identity_convert,
}
REFERENCES["LEAKY_RELU"] = lambda ins, o, s: (np.where(ins[0] >= 0, ins[0], ins[0] * float(o.alpha)),
                                              Terms(kind="arith"))

# References whose magnitude terms cost as much as their output (skipped with terms=False).
_TERMS_OPTIONAL = (_conv, _fully_connected)

# Inputs that are shapes, axes or paddings (int tensors read as they are, never dequantized).
INDEX_INPUTS = {"SHAPE": (0,), "MEAN": (1,), "SUM": (1,), "REDUCE_MAX": (1,), "RESHAPE": (1,), "PAD": (1,), "PADV2": (1,),
                "STRIDED_SLICE": (1, 2, 3), "TRANSPOSE": (1,), "EXPAND_DIMS": (1,),
                "GATHER": (1,)}


def reference(op_type: str, options: Any, inputs: Sequence[np.ndarray | None],
              out_shape: tuple[int, ...], *, terms: bool = True) -> tuple[np.ndarray, Terms]:
    """The op's output in float64 and its bound's `Terms`.

    Args:
        op_type: TFLite builtin name, e.g. ``"CONV_2D"``.
        options: the op's builtin options object (schema_py_generated ``*OptionsT``).
        inputs: float64 arrays (index inputs as ints); None for an omitted optional input.
        out_shape: the output's shape as the interpreter ran it.
        terms: False when only the output is wanted (`tflab.litert.simulate`): the dot products skip
            their magnitude terms (``Terms.dot``/``x_abs``/``w_abs`` stay None); the output is the same.

    Returns:
        ``(output, terms)``.

    Raises:
        KeyError: no reference for this op type (or this use of it).
    """
    fn = REFERENCES.get(op_type)
    if fn is None:
        raise KeyError(op_type)
    ins = list(inputs)
    while ins and ins[-1] is None:
        ins.pop()
    with np.errstate(all="ignore"):  # a NaN/inf here is the op's own answer (sqrt of a negative), reported
        # as a domain cause: no NumPy warning on the user's screen
        y, found = fn(ins, options, tuple(out_shape), **({} if terms or fn not in _TERMS_OPTIONAL else {"terms": False}))
    return np.asarray(y, np.float64).reshape(out_shape), found
