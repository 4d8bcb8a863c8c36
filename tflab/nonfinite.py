"""The first op of a TF graph whose output goes non-finite, and why: the TF side of `tflab.litert.nan`.

"My model gives NaN under mixed_float16" has a first op: the one whose output
holds an inf or NaN while all its inputs are finite. `first_nonfinite` traces
the user's function once into a FuncGraph (``tf.function``) and, while it
traces, records every op created in that graph through TF's op callbacks
(``tensorflow/python/framework/op_callbacks.py``, reached through
`tflab._tf.runtime.op_callback`). The traced function returns the user's
outputs **and every float op output** of its graph, so one run of the graph
shows each op's actual values (no op is re-run on its own, and no value is
guessed). The ops are then walked in creation order, which is a topological
order of the graph:

* the **origin**: the first op whose output holds an inf or NaN while its
  inputs are finite (or it has none: a ``Const`` that a Python number beyond
  the dtype's range became, e.g. ``1e30`` in float16, whose max is 65504);
* the **first NaN**: the first op whose output holds a NaN while none of its
  inputs does (``inf * 0``, ``inf - inf``), with the input values at that
  element.

Each is named with its op type, name, dtype and the dtype's range, the values
that overflowed (a numeric literal on the user's line beyond the range, read
from the line's AST; the input magnitudes otherwise) and the user's line (the
op's creation traceback, ``tf.Operation.traceback``, skipping TF, Keras and
tflab frames). Ops inside a ``tf.cond``/``tf.while_loop`` body live in their
own FuncGraphs: the ``If``/``While`` op is judged as a whole.

Example:
    >>> def masked(scores, mask):
    ...     return scores - 1e30 * (1.0 - mask)
    >>> from tflab.nonfinite import first_nonfinite
    >>> r = first_nonfinite(masked, tf.zeros([2, 3], tf.float16), tf.constant([[1., 1., 0.]] * 2, tf.float16))
    >>> r.origin.op_type, r.origin.literal, r.first_nan.op_type
    ('Const', '1e30', 'Mul')
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import linecache
import logging
from typing import Any, Callable, Sequence

import numpy as np

from tflab._user.usercode import is_library_file
from tflab.report.base import Report, config_field

__all__ = ["first_nonfinite", "trace_op_values", "FirstNonFinite", "NonFiniteOp", "OpValue"]



@dataclasses.dataclass
class OpValue:
    """One op of the traced FuncGraph with its actual output (and input) values from one run.

    Attributes:
        name: the op's name in the FuncGraph (``functional/attn/mul``).
        op_type: e.g. ``"Mul"``.
        outputs: numpy arrays of its float outputs.
        inputs: numpy arrays of its inputs (None where not float or not recorded).
        input_ops: the op types producing each input.
        frame: ``(filename, lineno, function name)`` of the user's line that made it, or None.
        attrs: the op's attributes as ``tf.Operation.get_attr`` gives them (what
            `tflab.attribution` re-creates the op from, with its float dtypes raised).
        input_names: the graph names of its input tensors (``op:0``), in order.
        stateful: whether TF registers the op as stateful (a re-run may differ).
        num_outputs: how many outputs the op has (all, float or not).
    """

    name: str
    op_type: str
    outputs: list
    inputs: list
    input_ops: list
    frame: tuple | None
    attrs: dict = dataclasses.field(default_factory=dict)
    input_names: list = dataclasses.field(default_factory=list)
    stateful: bool = False
    num_outputs: int = 1


_LIBRARY: dict[str, bool] = {}


class _OwnRetraceFilter(logging.Filter):
    """Drops TF's "N out of the last N calls to <function trace_op_values.<locals>.traced> triggered
    tf.function retracing" warning: each judgment traces tflab's own wrapper afresh on purpose, and the
    warning pointed a user who asks why a function retraced at tflab's code, not theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "trace_op_values.<locals>.traced" not in record.getMessage()


@contextlib.contextmanager
def _own_retrace_warnings_dropped():
    logger, own = logging.getLogger("tensorflow"), _OwnRetraceFilter()
    logger.addFilter(own)
    try:
        yield
    finally:
        logger.removeFilter(own)


def _is_library(filename: str) -> bool:
    """`is_library_file`, remembered per file name (every op of a trace asks about the same few files)."""
    known = _LIBRARY.get(filename)
    if known is None:
        known = _LIBRARY[filename] = bool(is_library_file(filename))
    return known


def _user_frame(tb) -> tuple | None:
    """The innermost frame of an op's creation traceback outside TF, Keras, tflab and the stdlib."""
    best = None
    for fr in tb or ():
        try:
            filename, lineno, name = fr.filename, fr.lineno, fr.name
        except AttributeError:
            filename, lineno, name = fr[0], fr[1], fr[2]
        if not _is_library(filename) and "__autograph_generated" not in filename \
                and not filename.startswith("<"):
            best = (filename, int(lineno), name)
    return best


def trace_op_values(call: Callable, sources: Sequence) -> tuple[list[OpValue], Any]:
    """Traces ``call(sources)`` once with every float op output returned, runs it once.

    Args:
        call: a function of one list of tensors (``sources``).
        sources: the tensors it is called with.

    Returns:
        ``(ops, outputs)``: one `OpValue` per op created in the function's own
        FuncGraph with a float or integer output, in creation order, and the
        function's outputs as numpy arrays.

    Raises:
        Whatever tracing or running the user's function raises.
    """
    import tensorflow as tf

    from tflab._tf.runtime import op_callback

    created: list = []

    def record(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if graph is not None and outputs:
            created.append(outputs[0].op)
        return None

    def traced(srcs):
        created.clear()
        with op_callback(record):
            out = call(list(srcs))
        g = tf.compat.v1.get_default_graph()
        keep, fetch = [], []
        index: dict[str, int] = {}
        for op in created:
            if op.graph is not g:
                continue
            for t in list(op.inputs) + list(op.outputs):
                if t.name not in index and (t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_bool) \
                        and not t.dtype.is_quantized:
                    index[t.name] = len(fetch)
                    fetch.append(t)
            keep.append(op)
        meta.extend(keep)
        names.update(index)
        shapes.extend(t.shape for t in fetch)
        if all(sh.is_fully_defined() for sh in shapes):
            # one flat tensor per dtype instead of one return value per op output: each value a
            # FuncGraph returns gets its own identity and control-dependency bookkeeping, which made
            # the trace of a few hundred ops cost seconds
            groups: dict = {}
            for i, t in enumerate(fetch):
                groups.setdefault(t.dtype, []).append(i)
            order.extend(groups.values())
            fetch = [tf.concat([tf.reshape(fetch[i], [-1]) for i in idx], 0) for idx in groups.values()]
        return tf.nest.map_structure(tf.convert_to_tensor, out), fetch

    meta: list = []
    names: dict[str, int] = {}
    shapes: list = []
    order: list = []
    last: Exception | None = None
    for autograph in (False, True):
        meta.clear()
        names.clear()
        shapes.clear()
        order.clear()
        try:
            with _own_retrace_warnings_dropped():
                out, values = tf.function(traced, autograph=autograph)(list(sources))
            break
        except Exception as e:  # noqa: BLE001 - Python control flow on tensors needs AutoGraph: try it
            last = e
    else:
        raise last  # type: ignore[misc]
    if order:  # packed per dtype: split back into one array per op output
        arrays = [None] * len(shapes)
        for idx, flat in zip(order, values):
            flat, at = flat.numpy(), 0
            for i in idx:
                n = int(np.prod(shapes[i].as_list(), dtype=np.int64))
                arrays[i] = flat[at:at + n].reshape(shapes[i].as_list())
                at += n
    else:
        arrays = [v.numpy() for v in values]
    ops = []
    for op in meta:
        outs = [arrays[names[t.name]] for t in op.outputs if t.name in names]
        if not outs:
            continue
        ins = [arrays[names[t.name]] if t.name in names else None for t in op.inputs]
        ops.append(OpValue(op.name, op.type, outs, ins, [t.op.type for t in op.inputs], _user_frame(op.traceback),
                           _attrs_of(op), [t.name for t in op.inputs], bool(op.op_def.is_stateful),
                           len(op.outputs)))
    return ops, tf.nest.map_structure(lambda t: t.numpy(), out)


def _attrs_of(op) -> dict:
    """``{name: op.get_attr(name)}`` for each attribute of the op's NodeDef (those it cannot read: left out)."""
    out = {}
    for k in op.node_def.attr:
        try:
            out[k] = op.get_attr(k)
        except Exception:  # noqa: BLE001 - an attribute get_attr cannot decode is simply not kept
            pass
    return out


def _finite(a) -> bool:
    return a is None or a.dtype.kind not in "fc" or bool(np.isfinite(a).all())


def _has_nan(a) -> bool:
    return a is not None and a.dtype.kind in "fc" and bool(np.isnan(a).any())


def _range(dtype: str) -> float | None:
    try:
        from tflab.precision.float_formats import float_info

        return float(float_info(dtype).max)
    except Exception:  # an integer dtype has no float range
        return None


def _big_literals(frame: tuple | None, limit: float | None) -> list[str]:
    """Numeric literals on the user's line whose magnitude is beyond ``limit`` (as written)."""
    if frame is None or limit is None:
        return []
    line = linecache.getline(frame[0], frame[1]).strip()
    try:
        tree = ast.parse(line.rstrip(":") if not line.endswith(":") else line + " pass", mode="exec")
    except SyntaxError:
        try:
            tree = ast.parse(line.split("=", 1)[-1].strip(), mode="eval")
        except SyntaxError:
            return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool) and abs(node.value) > limit:
            seg = ast.get_source_segment(line, node) or repr(node.value)
            out.append(seg)
    return out


@dataclasses.dataclass(frozen=True)
class NonFiniteOp:
    """One op named by `first_nonfinite`: what it made and from what.

    Attributes:
        op_name, op_type: the op in the FuncGraph.
        dtype: its output's dtype (``"float16"``).
        dtype_max: that dtype's largest finite value (65504 for float16), None for non-floats.
        nan, posinf, neginf, size: element counts of its first output.
        inputs: one phrase per input: its op type and what it held (``"Sub: finite, max |x| 1"``).
        element: for a NaN made from non-NaN inputs, the inputs' values at the first NaN
            element (``("inf", "0")``), else ().
        literal: a numeric literal on the user's line beyond ``dtype_max`` (as written,
            ``"1e30"``), or "".
        where: the user's line, ``file:line in fn``, or "" when none is outside TF/Keras.
        code: that line's text.
        cause: one sentence of the measured facts.
        frame: ``(filename, lineno, function name)`` of the user's line, () when none
            (what `tflab._user.code_swap` rewrites to measure a fix).
    """

    op_name: str
    op_type: str
    dtype: str
    dtype_max: float | None
    nan: int
    posinf: int
    neginf: int
    size: int
    inputs: tuple[str, ...]
    element: tuple[str, ...]
    literal: str
    where: str
    code: str
    cause: str
    frame: tuple = dataclasses.field(default=(), compare=False)

    def to_text(self) -> str:
        at = f" at {self.where}" + (f": `{self.code}`" if self.code else "") if self.where else ""
        return f"{self.op_type} {self.op_name!r} ({self.dtype}){at}: {self.cause}"


def _fmt(v: float) -> str:
    if np.isnan(v):
        return "NaN"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.4g}"


def _describe_input(t: str, a) -> str:
    if a is None:
        return f"{t}: not a float"
    if a.dtype.kind not in "fc":
        return f"{t}: {a.dtype.name}"
    fin = np.isfinite(a)
    if fin.all():
        return f"{t}: finite, max |x| {_fmt(float(np.abs(a).max(initial=0)))}"
    return (f"{t}: {int(np.isnan(a).sum())} NaN, {int(np.isposinf(a).sum())} +inf, "
            f"{int(np.isneginf(a).sum())} -inf")


def _element_inputs(op: OpValue, flat_index: int) -> tuple[str, ...]:
    """The inputs' values at output element ``flat_index`` when they broadcast to the output."""
    out = op.outputs[0]
    vals = []
    for a in op.inputs:
        if a is None:
            return ()
        try:
            b = np.broadcast_to(a, out.shape)
        except ValueError:
            return ()
        vals.append(_fmt(float(b.reshape(-1)[flat_index])))
    return tuple(vals)


def _named(op: OpValue, kind: str) -> NonFiniteOp:
    out = op.outputs[0]
    dtype = out.dtype.name
    limit = _range(dtype)
    nan, pinf, ninf = int(np.isnan(out).sum()), int(np.isposinf(out).sum()), int(np.isneginf(out).sum())
    ins = tuple(_describe_input(t, a) for t, a in zip(op.input_ops, op.inputs))
    where = f"{op.frame[0]}:{op.frame[1]} in {op.frame[2]}" if op.frame else ""
    code = linecache.getline(op.frame[0], op.frame[1]).strip() if op.frame else ""
    literals = _big_literals(op.frame, limit)
    rng = f"{dtype} max {limit:.6g}" if limit is not None else dtype
    element: tuple[str, ...] = ()
    if kind == "nan":
        i = int(np.flatnonzero(np.isnan(out))[0])
        element = _element_inputs(op, i)
        how = {"Mul": " × ", "AddV2": " + ", "Add": " + ", "Sub": " - ", "RealDiv": " / ", "Div": " / "}
        if element and op.op_type in how:
            expr = how[op.op_type].join(element)
            cause = f"makes NaN from {expr} (at flat element {i}; {nan} NaN in {out.size})"
        elif element:
            cause = f"makes NaN from inputs ({', '.join(element)}) at flat element {i} ({nan} NaN in {out.size})"
        else:
            cause = f"makes {nan} NaN in {out.size} from inputs without NaN ({'; '.join(ins)})"
        return NonFiniteOp(op.name, op.op_type, dtype, limit, nan, pinf, ninf, out.size, ins, element,
                           "", where, code, cause, op.frame or ())
    counts = f"{nan} NaN, {pinf} +inf, {ninf} -inf in {out.size}"
    # several literals beyond the range on one line: the Const holds one of them, and its value (now inf)
    # no longer tells which; name them all rather than guess
    lit = literals[0] if len(literals) == 1 else (f"(one of {', '.join(literals)})" if literals else "")
    if op.op_type == "Const":
        cause = (f"a constant that is already non-finite in {dtype} ({counts}): "
                 + (f"the literal {lit} on that line is beyond {rng}, so converting it to {dtype} "
                    f"when the graph was traced gave inf" if lit else
                    f"a Python number or array beyond {rng} became inf when converted"))
    elif op.op_type == "Cast":
        src = op.inputs[0] if op.inputs else None
        big = _fmt(float(np.abs(src).max())) if src is not None and src.size else "?"
        cause = (f"casts values up to |x| {big} to {dtype}, beyond {rng} ({counts})"
                 + (f"; the literal {lit} on that line" if lit else ""))
    elif nan and not (pinf or ninf):
        cause = f"makes NaN from finite inputs ({'; '.join(ins)}; {counts})"
    else:
        cause = (f"overflows {rng} ({counts}) from finite inputs ({'; '.join(ins)})"
                 + (f"; the literal {lit} on that line is beyond the range" if lit else ""))
    return NonFiniteOp(op.name, op.op_type, dtype, limit, nan, pinf, ninf, out.size, ins, (), lit, where,
                       code, cause, op.frame or ())


@dataclasses.dataclass(frozen=True, repr=False)
class FirstNonFinite(Report):
    """Result of `first_nonfinite`: the op where inf/NaN first appears, and where NaN first appears.

    Attributes:
        function_name: the function traced.
        ops_run: how many ops of the FuncGraph were run and looked at.
        origin: the first op with a non-finite output whose inputs are all finite
            (`NonFiniteOp`), or None when every op output is finite.
        first_nan: the first op making NaN from inputs without NaN, or None (also None
            when it is ``origin`` itself).
        outputs_finite: whether every float output of the function is finite.
        error: why the graph could not be traced or run, or "".
        config: `tflab.runtime_config()`'s dict.
    """

    function_name: str
    ops_run: int
    origin: NonFiniteOp | None
    first_nan: NonFiniteOp | None
    outputs_finite: bool
    error: str = ""
    config: dict = config_field()

    @property
    def found(self) -> bool:
        """True when some op's output went non-finite from finite inputs."""
        return self.origin is not None

    @property
    def cause_text(self) -> str:
        """``first non-finite op: … then NaN at …`` in one line ("" when nothing went non-finite)."""
        if self.origin is None:
            return ""
        text = f"first non-finite op: {self.origin.to_text()}"
        if self.first_nan is not None:
            text += f"; then NaN first at {self.first_nan.to_text()}"
        return text

    def summary_line(self) -> str:
        if self.error:
            return f"not traced: {self.error}"
        if self.origin is None:
            return f"{self.ops_run} ops, all finite"
        return f"{self.ops_run} ops; first non-finite: {self.origin.op_type} {self.origin.op_name!r}"

    def to_text(self) -> str:
        if self.error:
            return f"{self.function_name}: could not trace its graph to look for non-finite values: {self.error}"
        if self.origin is None:
            return f"{self.function_name}: every output of the {self.ops_run} ops of its graph is finite"
        return f"{self.function_name} ({self.ops_run} ops run): {self.cause_text}"


def analyse(ops: list[OpValue], outputs: Any, name: str = "") -> FirstNonFinite:
    """The origin and first-NaN ops of recorded op values (see the module docstring)."""
    origin = first_nan = None
    for op in ops:
        out = op.outputs[0]
        if out.dtype.kind not in "fc":
            continue
        if origin is None and not np.isfinite(out).all() and all(_finite(a) for a in op.inputs):
            origin = _named(op, "origin")
            if np.isnan(out).any():
                break
            continue
        if origin is not None and np.isnan(out).any() and not any(_has_nan(a) for a in op.inputs):
            first_nan = _named(op, "nan")
            break
    flat = [np.asarray(o) for o in _flatten(outputs)]
    finite = all(_finite(o) for o in flat)
    return FirstNonFinite(name, len(ops), origin, first_nan, finite)


def _flatten(x) -> list:
    import tensorflow as tf

    return tf.nest.flatten(x)


def first_nonfinite(fn: Callable, *args: Any, **kwargs: Any) -> FirstNonFinite:
    """Traces ``fn(*args, **kwargs)`` into a FuncGraph, runs it once, and names its first non-finite op.

    Args:
        fn: a function of tensors (a `tf.function`'s Python function is used), or
            a Keras model.
        *args, **kwargs: its tensor arguments, as the dtype it should run in
            (e.g. float16 tensors for mixed_float16 arithmetic).

    Returns:
        A `FirstNonFinite`: ``origin`` (the first op whose output holds inf/NaN
        while its inputs are finite), ``first_nan`` and the user's line of each.

    Raises:
        Whatever ``fn`` raises when traced (also with AutoGraph).
    """
    import tensorflow as tf

    python_fn = getattr(fn, "python_function", fn)
    leaves = tf.nest.flatten((args, kwargs))
    tensor_at = [i for i, v in enumerate(leaves) if isinstance(v, (tf.Tensor, np.ndarray))]
    sources = [tf.convert_to_tensor(leaves[i]) for i in tensor_at]

    def call(srcs):
        flat = list(leaves)
        for i, s in zip(tensor_at, srcs):
            flat[i] = s
        a, k = tf.nest.pack_sequence_as((args, kwargs), flat)
        return python_fn(*a, **k)

    ops, outputs = trace_op_values(call, sources)
    return analyse(ops, outputs, getattr(python_fn, "__name__", type(python_fn).__name__))
