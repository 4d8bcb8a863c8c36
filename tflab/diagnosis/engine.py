"""`diagnose`: trace the function the way `autograph_diff` does, run the ConcreteFunction once on
materialized arguments, and classify what raised (`tflab.diagnosis.rules`); a function that ran
is still checked for a Python list appended to in a loop that became a While op."""

from __future__ import annotations

import ast
import contextlib
import inspect
from typing import Any, Callable

from tflab._tf.autograph import clone_function, full_tracebacks
from tflab._user.usercode import user_entry
from tflab.diagnosis.context import (LIST_FIX, Context, make_context, materialize_specs, python_target, sized,
                                     stmt_label, tensor_array_fix)
from tflab.diagnosis.records import SILENT_STAGE, Diagnosis
from tflab.diagnosis.rules import classify_error
from tflab.diagnosis.source import recorder, Source, StatementMap
from tflab.errors import UsageError

def _check_inputs_fit(args: Any, kwargs: Any) -> None:
    """Refuses random inputs that cannot fit (`tflab.process.memory.check_fits`) before any is drawn.

    Peak copies: the numpy draw, the tensor and an output as large (elementwise).

    Raises:
        UsageError: too large (bad input, exit 2), never a diagnosed failure of the user's code.
    """
    import numpy as np
    import tensorflow as tf

    from tflab.process.memory import check_fits
    from tflab._user.target import MAX_RANDOM_BYTES

    specs = [sized(v) for v in tf.nest.flatten((args, kwargs)) if isinstance(v, tf.TensorSpec)]
    sizes = [int(np.prod(s.shape.as_list(), dtype=np.float64)) * max(s.dtype.size, 1) for s in specs]
    if all(n <= MAX_RANDOM_BYTES for n in sizes):  # else materialize names the argument over its cap
        check_fits(sum(sizes), 3, "diagnose", "use a smaller shape")


def _tf_function_for(fn: Callable, python_fn: Callable):
    """A fresh `tf.function` with ``fn``'s options (input_signature, autograph,
    jit_compile, reduce_retracing…) and an empty trace cache, so the trace
    really runs."""
    import tensorflow as tf

    clone = clone_function(fn)  # Function._clone: same options (polymorphic_function.py)
    return clone if clone is not None else tf.function(python_fn)


@user_entry("while tracing and running")
def diagnose(fn: Callable, *args: Any, examples: Any = None, **kwargs: Any) -> Diagnosis:
    """Traces ``fn`` and runs it once; on failure, says which line to change and how.

    The function is traced the way `autograph_diff` traces it (a plain function,
    a `tf.function` with its options kept, a Keras layer or model through its
    ``call``, a bound method), then the ConcreteFunction is called once on
    materialized arguments (each `tf.TensorSpec` becomes seeded random values,
    a None dim of size `UNKNOWN_DIM_SIZE` = 2), so call-time failures count too.
    A healthy function costs one trace plus one call.

    Args:
        fn: the function to check.
        *args: `tf.TensorSpec`s, tensors or Python values for the trace. With none,
            a `tf.function`'s ``input_signature`` is used.
        **kwargs: the same, by keyword.
        examples: real inputs instead of ``*args``: a path to an ``.npz`` with one array per
            parameter name (``np.savez(path, ids=ids)``) or a dict ``{parameter name: array}``, bound
            by name as ``--examples`` binds them (`tflab.examples.example_inputs`); ``**kwargs`` then
            give the other parameters. Default None.

    Returns:
        A `Diagnosis`: ``ok=True, kind=None`` when it traced and ran and no
        Python list is appended to in a loop that became a While op (that
        silently keeps one entry: ``stage="silent"``); else the
        kind, the culprit line in the user's file, TF's first error line, what
        TF did and the fix.

    Raises:
        UsageError: ``fn`` is not callable, is a class or an unbound method,
            the arguments do not match its ``input_signature``, or random
            inputs made from its specs would not fit in memory
            (`tflab.process.memory.check_fits`).

    Example:

    >>> def f(n):                      # in a .py file
    ...     digits = []
    ...     for i in tf.range(n):
    ...         digits.append(i)
    ...     return tf.add_n(digits)
    >>> d = tflab.diagnose(f, tf.constant(5))
    >>> d.kind, d.statement
    ('python-list-in-tensor-loop', 'digits.append(i)')
    >>> d.fix
    'use a tf.TensorArray (ta = ta.write(i, value) in the loop, ta.stack() after it), which is a loop variable'
    """
    from tflab._user.target import check_target, callable_name, signature_args

    if not callable(fn):
        raise UsageError(f"diagnose needs a function, got {type(fn).__name__}")
    check_target(fn, callable_name(fn))
    from tflab.examples import with_examples

    args, kwargs = with_examples(fn, examples, args, kwargs)
    from_sig = False
    if not args and not kwargs and getattr(fn, "input_signature", None) is not None:
        args, from_sig = tuple(fn.input_signature), True
    else:
        args, kwargs = signature_args(fn, args, kwargs)
        from_sig = getattr(fn, "input_signature", None) is not None
    python_fn = python_target(fn)
    if python_fn is not getattr(fn, "python_function", fn):  # a Keras layer/model: build it first
        from tflab._user.source_map import build_layer

        build_layer(getattr(fn, "python_function", fn), args, kwargs)
    ctx = make_context(fn, args, kwargs, from_signature=from_sig)
    tf_fn = _tf_function_for(fn, python_fn)
    counter = None
    code = getattr(inspect.unwrap(getattr(python_fn, "__func__", python_fn)), "__code__", None)
    if code is not None:
        # The whole file: errors may sit in helpers the function calls.
        counter = recorder(code.co_filename, 1, 10 ** 9)
    ctx.stmap = StatementMap(counter)
    # A global / closure variable / self attribute the body rebinds: tracing rebinds it to a
    # symbolic tensor; what the user had is put back after diagnose's own trace and call.
    from tflab.diagnosis.context import instance_of
    from tflab.diagnosis.rebind import restore_state, state_before

    saved = state_before(python_fn, instance_of(ctx))
    try:
        return _trace_and_run(fn, ctx, tf_fn, args, kwargs, counter, code, saved)
    finally:
        restore_state(python_fn, saved, instance_of(ctx))


def _trace_and_run(fn, ctx: Context, tf_fn, args, kwargs, counter, code, saved) -> Diagnosis:
    """`diagnose`'s trace and one call, then the silent checks (a list appended to in a While
    body, state rebound to a tensor by the trace)."""
    from tflab.diagnosis.rebind import silent_rebinding

    with full_tracebacks():
        try:
            with (counter.installed() if counter is not None else contextlib.nullcontext()):
                concrete = tf_fn.get_concrete_function(*args, **kwargs)
        except Exception as e:
            if _is_binding_error(e):
                from tflab._user.target import binding_error

                target = getattr(tf_fn, "python_function", tf_fn)
                mismatch = binding_error(getattr(target, "__name__", None) or type(target).__name__, tf_fn, e)
                if mismatch is not None:  # the same one line as trace_and_inspect's
                    raise mismatch from e
            return classify_error(e, ctx)
        ctx.concrete, ctx.stage = concrete, "call"
        # Inputs too large are bad input (UsageError, exit 2), not a failure of the user's code.
        _check_inputs_fit(args, kwargs)
        call_args, call_kwargs = materialize_specs(args), materialize_specs(kwargs)
        try:
            concrete(*call_args, **call_kwargs)
        except Exception as e:
            return classify_error(e, ctx)
    silent = _silent_list_append(ctx, code.co_filename if code is not None else "") or silent_rebinding(ctx, saved)
    return silent or Diagnosis(function_name=ctx.name, ok=True)



_LIST_MUTATORS = frozenset({"append", "extend", "insert"})


def _silent_list_append(ctx: Context, filename: str) -> Diagnosis | None:
    """A Python list appended to inside a loop that became a While op, with no error.

    The While body is traced once (``while_v2``), so ``acc.append(v)`` runs once at
    trace time: when ``v`` is a tensor from outside the loop (or a Python value)
    nothing fails and ``acc`` silently ends with one entry instead of one per
    iteration; eager Python gives one per iteration.
    """
    graph = ctx.stmap.graph_lines() if ctx.stmap is not None else {}
    loops = {line for line, kind in graph.items() if kind in ("for", "while")}
    src = Source.of(filename) if filename and loops else None
    if src is None:
        return None
    for fn_node in ast.walk(src.tree):
        if not isinstance(fn_node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lists = {t.id for a in ast.walk(fn_node) if isinstance(a, ast.Assign)
                 and (isinstance(a.value, ast.List) or (isinstance(a.value, ast.Call)
                      and isinstance(a.value.func, ast.Name) and a.value.func.id == "list"))
                 for t in a.targets if isinstance(t, ast.Name)}
        for loop in ast.walk(fn_node):
            if not isinstance(loop, (ast.For, ast.While)) or loop.lineno not in loops:
                continue
            rebound = {n.id for b in loop.body for n in ast.walk(b)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            for b in loop.body:
                for call in ast.walk(b):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr in _LIST_MUTATORS and isinstance(call.func.value, ast.Name)
                            and call.func.value.id in lists and call.func.value.id not in rebound):
                        name, kind = call.func.value.id, graph[loop.lineno]
                        from tflab._user.source_map import strip_comment

                        from tflab.fix import first_working, unchecked

                        d = Diagnosis(
                            function_name=ctx.name, ok=False, kind="python-list-in-tensor-loop",
                            line=call.lineno, statement=strip_comment(src.text(call.lineno)),
                            filename=filename, error="",
                            explanation=(f"{stmt_label(loop.lineno, kind, 'While')}, whose body is traced "
                                         f"once: '{name}.{call.func.attr}(...)' ran once at trace time, so "
                                         f"'{name}' gets one entry, not one per iteration as in eager "
                                         "Python; no error is raised"),
                            fix=LIST_FIX, stage=SILENT_STAGE,
                            fix_plan=first_working([unchecked("code", "", LIST_FIX, "")]))
                        return tensor_array_fix(d, ctx, filename, call.lineno, name, [])
    return None


def _is_binding_error(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, TypeError) and ("Binding inputs" in text or "missing a required" in text
                                         or "got an unexpected keyword" in text)


