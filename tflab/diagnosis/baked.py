"""Data baked into a FuncGraph: the Const ops that hold a NumPy array converted at trace time.

A NumPy array (or a Python list) that a traced function reads from a global or a
closure is converted to a tensor while tracing: ``tf.constant`` / ``convert_to_tensor``
in a FuncGraph makes a ``Const`` op whose ``value`` attr (a ``TensorProto``,
``framework/constant_op.py``) holds every byte of it, so the bytes go into the GraphDef,
into every SavedModel of it, and past 2 GB TF refuses to build the proto ("Cannot
create a tensor proto whose content is larger than 2GB", pymc-devs/pymc4#312). An eager
*tensor* captured instead is fed at call time above 128 elements (`tflab.tracing`).

`baked_constants` reads the sizes from the FuncGraph's ops (the ``value`` attr's
``tensor_content``, branch and loop-body FuncGraphs included) and names the user's line
from each op's creation traceback; `baked_fix` applies the fix, the array passed as an
argument, to a copy of the function, re-traces it and measures what is left.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from typing import Any, Callable

from tflab.fix import Fix, attempt, unchecked

# Const ops at least this large are named (smaller ones are shapes, scales, hyper-parameters).
LARGE_CONST_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class ConstInfo:
    """One large Const op of a FuncGraph.

    Attributes:
        name: the op's name (``"Cast/x"``).
        dtype: its dtype name.
        shape: its shape as a list.
        bytes: the bytes its ``value`` attr holds (``tensor_content``, else the proto's size).
        where: ``FILE:LINE`` of the user's line that made it ("" when unknown).
        statement: that line's source, stripped.
    """

    name: str
    dtype: str
    shape: list
    bytes: int
    where: str = ""
    statement: str = ""

    def line(self) -> str:
        at = f" at {self.where} `{self.statement}`" if self.where else ""
        return (f"Const {self.name}: {self.dtype}{self.shape}, {self.bytes:,} bytes baked into the "
                f"GraphDef{at}")


def const_bytes(op) -> int:
    """Bytes in a Const op's ``value`` TensorProto: its ``tensor_content``, else the proto's size."""
    proto = op.get_attr("value")
    return len(proto.tensor_content) if proto.tensor_content else proto.ByteSize()


def baked_constants(graph, min_bytes: int = LARGE_CONST_BYTES) -> tuple[int, tuple[ConstInfo, ...]]:
    """(bytes of every Const op, the Const ops of at least ``min_bytes``), largest first.

    Args:
        graph: a FuncGraph; its If/While branch and body FuncGraphs are read too.
        min_bytes: the size from which a Const is listed.
    """
    from tflab._user.source_map import strip_comment, walk_ops
    from tflab.diagnosis.frames import is_user_file
    from tflab.diagnosis.source import Source

    total, big = 0, []
    for op in walk_ops(graph):
        if op.type != "Const":
            continue
        n = const_bytes(op)
        total += n
        if n < min_bytes:
            continue
        user = [f for f in (op.traceback or ()) if is_user_file(f.filename)]
        where, stmt = "", ""
        if user:
            f = user[-1]
            where = f"{os.path.basename(f.filename)}:{f.lineno}"
            src = Source.of(f.filename)
            stmt = strip_comment(src.text(f.lineno)) if src else ""
        out = op.outputs[0]
        big.append(ConstInfo(op.name, out.dtype.name, out.shape.as_list(), n, where, stmt))
    return total, tuple(sorted(big, key=lambda c: -c.bytes))


def size_text(n: int) -> str:
    """``8.0 MB`` (decimal units, as the 2 GB limit is usually written)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def summary_text(constants: tuple[ConstInfo, ...]) -> str:
    """``8.0 MB of data baked into the GraphDef as Const ops (GraphDef limit 2 GB)``."""
    return (f"{size_text(sum(c.bytes for c in constants))} of data baked into the GraphDef as Const ops "
            f"(GraphDef limit 2 GB)")


def text_lines(constants: tuple[ConstInfo, ...], fix: Fix | None) -> list[str]:
    """`TraceReport.to_text`'s lines: the total, each large Const (8 at most) and the fix line."""
    if not constants:
        return []
    out = [f"  Const data: {size_text(sum(c.bytes for c in constants))} of data baked into the GraphDef as "
           f"{len(constants)} Const op(s) (GraphDef limit 2 GB)"] + [f"    {c.line()}" for c in constants[:8]]
    return out + ([f"    {fix.line()}"] if fix is not None else [])


# A GraphDef is one protocol buffer, and 2 GB is protobuf's message limit.
_DESCRIPTION = ("pass the array as an argument (or keep it in a tf.Variable) instead of converting "
                "NumPy data while tracing")


def baked_fix(fn: Callable, args: tuple, kwargs: dict, concrete, big: tuple[ConstInfo, ...]) -> Fix:
    """The fix for the largest baked Const, applied: its NumPy expression passed as an argument.

    The sub-expression of the user's line whose value (in the function's globals and
    closure) equals the Const's value is replaced by a new keyword-only parameter; the copy
    is re-traced with a `tf.TensorSpec` for it, its Const bytes measured, and run on the
    array itself against the original ConcreteFunction.
    """
    if not big:
        return unchecked("code", "", _DESCRIPTION, "no large Const op")
    target = big[0]
    from tflab.diagnosis.fixes import FunctionSource

    python_fn = getattr(fn, "python_function", fn)
    try:
        fsrc = FunctionSource(python_fn)
    except (OSError, TypeError, ValueError, SyntaxError):
        return unchecked("code", "", _DESCRIPTION, "tflab cannot read the function's source to rewrite a copy")
    found = _array_expr(fsrc, target)
    if found is None:
        return unchecked("code", "", _DESCRIPTION, f"tflab found no NumPy value in {fsrc.name}'s own source "
                                                   f"equal to {target.name}'s")
    expr, value = found
    name = fsrc.fresh_name("".join(ch if ch.isalnum() else "_" for ch in ast.unparse(expr)).strip("_").lower()
                           or "data")
    text = _as_parameter(fsrc, expr, name)
    change = f"def {fsrc.name}(..., *, {name}) with {ast.unparse(expr)} -> {name}; call it with {name}={ast.unparse(expr)}"

    def check():
        import tensorflow as tf

        from tflab.diagnosis.context import judge, materialize_specs, seeded
        from tflab.diagnosis.fixes import run_fixed
        from tflab.diagnosis.reference import snapshot
        from tflab.fix import VALUES_NOT_KEPT

        spec = tf.TensorSpec(value.shape, tf.as_dtype(value.dtype))

        def mat(v):
            return tf.nest.map_structure(lambda s: tf.constant(value) if s is spec else materialize_specs(s), v)

        out, fixed = run_fixed(fsrc, text, tuple(args), {**kwargs, name: spec}, mat)
        left, _ = baked_constants(fixed.graph, 0)
        before = sum(c.bytes for c in big)
        # The reference is your function run eagerly on the same values (not its traced graph,
        # which is the function with the array baked in): `tflab.fix.values_match`.
        try:
            with seeded():
                eager = snapshot(python_fn(*materialize_specs(args), **materialize_specs(kwargs)))
            ok, cmp, measured = judge([eager], [out])
        except Exception as e:  # noqa: BLE001 - the user's code may raise anything eagerly
            ok, cmp, measured = True, f"{VALUES_NOT_KEPT} (your function raises eagerly: {type(e).__name__})", {}
        left_big = baked_constants(fixed.graph)[1]
        worked = ok and not left_big
        return worked, (f"re-traced with {ast.unparse(expr)} passed as an argument: "
                        f"{sum(c.bytes for c in left_big):,} bytes of large Const data left (was {before:,}), "
                        f"{left:,} bytes of Const data in all; {cmp.replace('traced and ran; ', '')}"), \
            {**measured, "const_bytes_before": before, "const_bytes_after": left}

    return attempt("code", change, _DESCRIPTION, check, how="re-traced a copy of your function",
                   source=text)


def _array_expr(fsrc, target: ConstInfo) -> tuple[ast.expr, Any] | None:
    """(expression, its NumPy value) in the function whose value equals ``target``'s shape and
    dtype: Name / Attribute / Subscript chains only, evaluated in the function's namespace."""
    import numpy as np

    for node in ast.walk(fsrc.fdef):
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) or isinstance(
                getattr(node, "ctx", None), ast.Store):
            continue
        if any(isinstance(n, ast.Call) for n in ast.walk(node)):
            continue
        if {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & fsrc.local_names():
            continue
        try:
            value = eval(compile(ast.Expression(node), "<const>", "eval"), dict(fsrc.namespace))
        except Exception:  # noqa: BLE001 - not a value of the namespace
            continue
        if isinstance(value, (np.ndarray, list, tuple)) and not isinstance(value, str):
            arr = np.asarray(value)
            if list(arr.shape) == list(target.shape) and arr.dtype.name == target.dtype:
                return node, arr
    return None


def _as_parameter(fsrc, expr: ast.expr, name: str) -> str:
    import copy

    from tflab.diagnosis.fixes import pos, replace, unparse

    module = copy.deepcopy(fsrc.module)
    fdef = module.body[0]
    for node in list(ast.walk(fdef)):
        if type(node) is type(expr) and pos(node) == pos(expr):
            replace(fdef, node, ast.Name(name, ast.Load()))
    fdef.args.kwonlyargs.append(ast.arg(name))
    fdef.args.kw_defaults.append(None)
    return unparse(module)
