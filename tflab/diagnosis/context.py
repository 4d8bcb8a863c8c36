"""What a rule knows about the failing function: its name, options, arguments and statement
map (`_Context`), and the helpers every rule shares: `_make` (a `Diagnosis` for a kind and a
culprit line), materialized arguments, the function's own source for a fix, and trying a fix."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from typing import Any, Callable

from tflab.diagnosis.record import UNKNOWN_DIM_SIZE, Diagnosis
from tflab.diagnosis.source import _Source, _StatementMap

@dataclasses.dataclass
class _Context:
    name: str
    python_fn: Callable | None = None
    autograph: bool = True
    stmap: _StatementMap = dataclasses.field(default_factory=_StatementMap)
    params: dict = dataclasses.field(default_factory=dict)   # parameter -> spec/value traced with
    from_signature: bool = False
    concrete: Any = None
    graph_labels: dict = dataclasses.field(default_factory=dict)  # id(FuncGraph) -> "trace #1"
    stage: str = "trace"
    filename: str = ""
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    lead: tuple = ()  # (None,) for a bound method whose instance was freed: TF passes self=None


def _python_target(fn: Callable) -> Callable:
    from tflab._target import bound_user_method

    # A bound tf.function method: the user's method on its instance (held strongly),
    # not TF's bound_method_wrapper, whose code is TF's own.
    python_fn = bound_user_method(fn)[0]
    if not (inspect.isfunction(python_fn) or inspect.ismethod(python_fn)):
        call = getattr(python_fn, "call", None)
        python_fn = call if inspect.ismethod(call) else getattr(python_fn, "__call__", python_fn)
    return python_fn


def _context(fn: Callable | None, args: tuple, kwargs: dict, from_signature: bool) -> _Context:
    if fn is None:
        return _Context(name="<function>")
    python_fn = _python_target(fn)
    name = getattr(python_fn, "__qualname__", None) or type(fn).__name__
    params: dict = {}
    try:
        bound = inspect.signature(python_fn).bind_partial(*args, **kwargs)
        params = dict(bound.arguments)
    except (TypeError, ValueError):
        pass
    code = getattr(inspect.unwrap(getattr(python_fn, "__func__", python_fn)), "__code__", None)
    from tflab._target import bound_user_method
    from tflab._tf.autograph import autograph_enabled

    return _Context(name=name, python_fn=python_fn, filename=code.co_filename if code else "",
                    autograph=autograph_enabled(fn),
                    params=params, from_signature=from_signature, args=tuple(args),
                    kwargs=dict(kwargs), lead=bound_user_method(fn)[1])


def _make(ctx: _Context, exc: BaseException, kind: str, filename: str, line: int | None,
          explanation: str, fix: str) -> Diagnosis:
    from tflab._source_map import _error_line, _strip_comment

    src = _Source.of(filename)
    return Diagnosis(function_name=ctx.name, ok=False, kind=kind, line=line,
                     statement=_strip_comment(src.text(line)) if src else "", filename=filename,
                     error=_error_line(exc), explanation=explanation, fix=fix, stage=ctx.stage)



def _stmt_label(line: int, kind: str, op: str) -> str:
    return f"the {kind} at line {line} became a{'n' if op[0] in 'AEIOU' else ''} {op} op"


def _op_for(kind: str) -> str:
    return "If" if kind == "if" else "While"



_LIST_FIX = ("use a tf.TensorArray (ta = ta.write(i, value) in the loop, ta.stack() after it), "
             "which is a loop variable")


def _materialize(value: Any) -> Any:
    import tensorflow as tf

    from tflab._target import materialize

    def conv(v):
        if isinstance(v, tf.TensorSpec):
            return materialize(_sized(v), 0)
        return v

    return tf.nest.map_structure(conv, value)


def _sized(v):
    """The spec with each None dim (or an unknown rank) given `UNKNOWN_DIM_SIZE`."""
    import tensorflow as tf

    if v.shape.rank is None:
        return tf.TensorSpec([UNKNOWN_DIM_SIZE], v.dtype, v.name)
    if not v.shape.is_fully_defined():
        return tf.TensorSpec([UNKNOWN_DIM_SIZE if d is None else d for d in v.shape.as_list()], v.dtype, v.name)
    return v


def _fix_source(ctx: _Context, line: int | None, filename: str):
    """`tflab.diagnosis.fixes.FunctionSource` of the traced function when the
    culprit line is in it (a fix is tried on that function only), else None."""
    from tflab.diagnosis.fixes import FunctionSource

    if ctx.python_fn is None or not line:
        return None
    try:
        fsrc = FunctionSource(ctx.python_fn)
        fname = inspect.getsourcefile(inspect.unwrap(getattr(ctx.python_fn, "__func__", ctx.python_fn)))
    except (OSError, TypeError, ValueError, SyntaxError):
        return None
    if not fname or os.path.abspath(fname) != os.path.abspath(filename or ""):
        return None
    last = fsrc.start + (fsrc.fdef.end_lineno or 1) - 1
    return fsrc if fsrc.start <= line <= last else None


def _try_fix(d: Diagnosis, ctx: _Context, fsrc, module_source: str | None) -> Diagnosis:
    """``d`` with the fix applied to a copy of the function and traced (`trace_fixed`)."""
    from tflab.diagnosis.fixes import trace_fixed

    if fsrc is None or not module_source:
        return d
    lead = ctx.lead if fsrc.instance is None else ()
    err = trace_fixed(fsrc, module_source, tuple(lead) + tuple(ctx.args), ctx.kwargs, _materialize)
    return dataclasses.replace(d, fixed_source=module_source.rstrip("\n"), fix_traced=err is None)


def _namespace(ctx: _Context) -> dict:
    fn = ctx.python_fn
    inner = inspect.unwrap(getattr(fn, "__func__", fn)) if fn is not None else None
    ns = dict(getattr(inner, "__globals__", {}) or {})
    code = getattr(inner, "__code__", None)
    for n, cell in zip(getattr(code, "co_freevars", ()), getattr(inner, "__closure__", None) or ()):
        with contextlib.suppress(ValueError):
            ns[n] = cell.cell_contents
    return ns

