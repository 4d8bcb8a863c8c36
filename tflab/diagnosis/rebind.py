"""State rebound to a tensor inside a tf.function: ``global v; v = v + x`` (tensorflow/tensorflow#30768),
a ``nonlocal`` closure variable, or ``self.total = self.total + x``.

Eagerly that line rebinds the name to a new EagerTensor on every call and the values accumulate
(42, 43, 44 …). Traced, it rebinds the name to a symbolic tensor of trace #1's FuncGraph: the
tf.Variable it held is gone, and the next trace captures a tensor of another graph ("is out of
scope"). The culprit is that assignment, found in the function's AST: an assignment to a name the
function declares ``global``/``nonlocal``, or to ``self.ATTR``, whose value now is the foreign
tensor. The fix keeps the state in a tf.Variable and assigns to it (``v.assign_add(x)``,
``v.assign_sub(x)``, else ``v.assign(EXPR)``), and is checked on calls in a row against the
ORIGINAL function run eagerly from the same starting value (`check_rebind_fix`).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import types
from typing import Any, Callable

# Calls in a row the fix and eager are compared on: enough to see a value carried from one call
# to the next (a fix that does not carry it repeats the first call's value).
CALLS_IN_A_ROW = 3


@dataclasses.dataclass
class Rebinding:
    """One statement of the function that rebinds Python state to a new value.

    Attributes:
        stmt: the ``Assign``/``AugAssign`` node (in the function's own AST, lines from 1).
        line: its line in the user's file.
        target: the state as written: ``v`` or ``self.total``.
        scope: "global", "nonlocal" or "attribute".
        change: the line that replaces it: ``v.assign_add(x)``.
    """

    stmt: ast.stmt
    line: int
    target: str
    scope: str
    change: str


def _declared(fdef: ast.AST) -> dict[str, str]:
    """Names the function (not a nested def) declares ``global``/``nonlocal``."""
    out: dict[str, str] = {}
    for n in ast.walk(fdef):
        if isinstance(n, ast.Global):
            out.update({x: "global" for x in n.names})
        elif isinstance(n, ast.Nonlocal):
            out.update({x: "nonlocal" for x in n.names})
    return out


def _assign_call(target: str, op: ast.operator | None, value: ast.expr, self_text: str) -> str:
    """``target.assign_add(e)`` for ``t = t + e``/``t = e + t``/``t += e``, ``assign_sub`` for
    ``t = t - e``/``t -= e``, else ``target.assign(EXPR)`` with EXPR what the line computed."""
    if op is not None:  # t OP= e
        if isinstance(op, ast.Add):
            return f"{target}.assign_add({ast.unparse(value)})"
        if isinstance(op, ast.Sub):
            return f"{target}.assign_sub({ast.unparse(value)})"
        return f"{target}.assign({target} {_OPS.get(type(op), '?')} {ast.unparse(value)})"
    if isinstance(value, ast.BinOp):
        left, right = ast.unparse(value.left), ast.unparse(value.right)
        if isinstance(value.op, ast.Add) and left == self_text:
            return f"{target}.assign_add({right})"
        if isinstance(value.op, ast.Add) and right == self_text:
            return f"{target}.assign_add({left})"
        if isinstance(value.op, ast.Sub) and left == self_text:
            return f"{target}.assign_sub({right})"
    return f"{target}.assign({ast.unparse(value)})"


_OPS = {ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@"}


def rebindings(fdef: ast.AST, start: int) -> list[Rebinding]:
    """Every statement of ``fdef`` that rebinds a ``global``/``nonlocal`` name or ``self.ATTR``.

    Args:
        fdef: the function's ``FunctionDef`` (its source parsed on its own: line 1 is the def's
            first line, decorators included).
        start: the user's file line of that first line.
    """
    declared = _declared(fdef)
    selfname = fdef.args.args[0].arg if getattr(fdef, "args", None) and fdef.args.args else None
    out = []
    for n in ast.walk(fdef):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t, op, value = n.targets[0], None, n.value
        elif isinstance(n, ast.AugAssign):
            t, op, value = n.target, n.op, n.value
        else:
            continue
        if isinstance(t, ast.Name) and t.id in declared:
            scope, text = declared[t.id], t.id
        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and selfname \
                and t.value.id == selfname:
            scope, text = "attribute", ast.unparse(t)
        else:
            continue
        out.append(Rebinding(n, n.lineno + start - 1, text, scope, _assign_call(text, op, value, text)))
    return out


def find_rebinding(python_fn: Callable, state_label: str | None = None, instance: Any = None) -> Rebinding | None:
    """The statement of ``python_fn`` that rebinds the state ``state_label`` names ("global v",
    "closure variable v", "self.total"); with no label, the first rebinding whose state holds a
    symbolic (graph) tensor now: a trace rebound it. None when there is none."""
    import textwrap

    inner = inspect.unwrap(getattr(python_fn, "__func__", python_fn))
    try:
        lines, start = inspect.getsourcelines(inner)
        fdef = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    found = rebindings(fdef, start)
    if state_label is not None:
        name = state_label.split()[-1]
        return next((r for r in found if r.target == name), None)
    return next((r for r in found if _symbolic(current_value(python_fn, r, instance))), None)


def current_value(python_fn: Callable, reb: Rebinding, instance: Any = None) -> Any:
    """What the state ``reb`` rebinds holds now (None when it cannot be read)."""
    inner = inspect.unwrap(getattr(python_fn, "__func__", python_fn))
    if reb.scope == "global":
        return getattr(inner, "__globals__", {}).get(reb.target)
    if reb.scope == "nonlocal":
        code = getattr(inner, "__code__", None)
        for n, cell in zip(getattr(code, "co_freevars", ()), getattr(inner, "__closure__", None) or ()):
            if n == reb.target:
                try:
                    return cell.cell_contents
                except ValueError:
                    return None
        return None
    obj = getattr(python_fn, "__self__", None) if instance is None else instance
    return getattr(obj, reb.target.split(".", 1)[1], None) if obj is not None else None


def _symbolic(value: Any) -> bool:
    return hasattr(value, "graph") and hasattr(value, "op") and not hasattr(value, "numpy") \
        and getattr(getattr(value, "dtype", None), "name", "") != "resource"


def starting_value(tensor: Any) -> tuple[Any, str]:
    """The value the state held before the trace rebound it, read from what trace #1 captured.

    ``v + x`` in trace #1 read the tf.Variable (or constant) through a capture; its handle is
    still in the FuncGraph's captures, so its value (never assigned: the line rebinds, it does not
    assign) is read back. Else zeros of the tensor's dtype and shape.

    Returns:
        ``(value as a NumPy array, where it came from: "your tf.Variable's value", ...)``;
        ``(None, "")`` when the shape is not fully known.
    """
    import numpy as np
    import tensorflow as tf

    graph = getattr(tensor, "graph", None)
    captures = {id(internal): external for external, internal in getattr(graph, "captures", ())}
    seen, stack = set(), [tensor.op] if hasattr(tensor, "op") else []
    while stack:
        op = stack.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        for t in op.inputs:
            ext = captures.get(id(t))
            if ext is not None:
                try:
                    if ext.dtype == tf.resource:
                        val = tf.raw_ops.ReadVariableOp(resource=ext, dtype=tensor.dtype)
                    elif ext.dtype == tensor.dtype:
                        val = ext
                    else:
                        continue
                    if val.shape == tensor.shape:
                        return np.array(val.numpy()), "your tf.Variable's value" if ext.dtype == tf.resource \
                            else "your tensor's value"
                except Exception:  # noqa: BLE001 - a freed resource: fall back to zeros
                    continue
            stack.append(t.op)
    if not tensor.shape.is_fully_defined():
        return None, ""
    return np.zeros(tensor.shape.as_list(), tensor.dtype.as_numpy_dtype), "your starting value was not kept"


def rewrite(fsrc, reb: Rebinding, fixed: bool) -> str:
    """The module source of the function (decorators dropped) with ``nonlocal`` read as ``global``
    (the copy runs at module level, its closure cells are globals there) and, when ``fixed``, the
    rebinding statement replaced by its ``assign`` call."""
    from tflab.diagnosis.fixes import pos, unparse

    module = copy.deepcopy(fsrc.module)
    fdef = module.body[0]
    for n in ast.walk(fdef):
        if isinstance(n, ast.Nonlocal):
            n.__class__ = ast.Global
    if fixed:
        old = reb.stmt
        for parent in ast.walk(fdef):
            for field in ("body", "orelse", "finalbody"):
                seq = getattr(parent, field, None)
                if not isinstance(seq, list):
                    continue
                for i, s in enumerate(seq):
                    if type(s) is type(old) and pos(s) == pos(old):
                        seq[i] = ast.parse(reb.change).body[0]
    return unparse(module)


def check_rebind_fix(fsrc, reb: Rebinding, start: Any, start_text: str, args: tuple, kwargs: dict,
                     materialize: Callable, tf_function_options: dict, instance: Any = None) -> tuple[bool, str, dict]:
    """Runs the ORIGINAL function eagerly and the fixed one as a tf.function, each
    `CALLS_IN_A_ROW` times on the diagnosed arguments, each from its own fresh
    ``tf.Variable(start)`` in a copy of the function's namespace (or a shallow copy of the
    instance): the user's own state is never touched. Checked when `tflab.fix.values_match`
    finds the outputs equal on every call.

    Returns:
        ``(worked, result, measured)`` for `tflab.fix.attempt`.
    """
    import tensorflow as tf

    from tflab.diagnosis.fixes import run_source
    from tflab.diagnosis.reference import snapshot
    from tflab.fix import values_match

    call_args, call_kwargs = materialize(args), materialize(kwargs)

    def build(fixed: bool):
        var = tf.Variable(start)
        if reb.scope == "attribute":
            obj = copy.copy(fsrc.instance if instance is None else instance)
            if obj is not None:
                setattr(obj, reb.target.split(".", 1)[1], var)
            fn = run_source(fsrc, rewrite(fsrc, reb, fixed), {})
            return types.MethodType(fn, obj) if obj is not None else fn
        return run_source(fsrc, rewrite(fsrc, reb, fixed), {reb.target: var})

    eager = build(False)
    ref = [snapshot(eager(*call_args, **call_kwargs)) for _ in range(CALLS_IN_A_ROW)]
    fixed = tf.function(build(True), **tf_function_options)
    got = [snapshot(fixed(*call_args, **call_kwargs)) for _ in range(CALLS_IN_A_ROW)]
    vm = values_match(ref, got)
    shown = ", ".join(_short(r) for r in ref)
    text = (f"{vm.text} ({CALLS_IN_A_ROW} calls in a row with your arguments from {reb.target} = {_short(start)}, {start_text}; "
            f"eager gives {shown})")
    return vm.ok, text, vm.measured


def _short(value: Any) -> str:
    import numpy as np
    import tensorflow as tf

    leaves = tf.nest.flatten(value)
    a = np.asarray(leaves[0]) if leaves else np.asarray([])
    return f"{a.item():g}" if a.size == 1 and a.dtype.kind in "fiub" else f"{a.dtype}{list(a.shape)}"


def _set_value(python_fn: Callable, reb: Rebinding, value: Any, instance: Any = None) -> None:
    inner = inspect.unwrap(getattr(python_fn, "__func__", python_fn))
    if reb.scope == "global":
        getattr(inner, "__globals__", {})[reb.target] = value
    elif reb.scope == "nonlocal":
        code = getattr(inner, "__code__", None)
        for n, cell in zip(getattr(code, "co_freevars", ()), getattr(inner, "__closure__", None) or ()):
            if n == reb.target:
                cell.cell_contents = value
    else:
        obj = getattr(python_fn, "__self__", None) if instance is None else instance
        if obj is not None:
            setattr(obj, reb.target.split(".", 1)[1], value)


_MISSING = object()


def state_before(python_fn: Callable | None, instance: Any = None) -> list[tuple[Rebinding, Any]]:
    """Each state the function rebinds, with what it holds before diagnose traces it (tracing
    rebinds it to a symbolic tensor: `restore_state` puts the user's value back)."""
    import textwrap

    if python_fn is None:
        return []
    inner = inspect.unwrap(getattr(python_fn, "__func__", python_fn))
    try:
        lines, start = inspect.getsourcelines(inner)
        fdef = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return []
    out = []
    for r in rebindings(fdef, start):
        value = current_value(python_fn, r, instance)
        out.append((r, _MISSING if value is None else value))
    return out


def restore_state(python_fn: Callable | None, saved: list[tuple[Rebinding, Any]], instance: Any = None) -> None:
    """Puts back what each rebound state held before diagnose's own trace."""
    for r, value in saved:
        if value is not _MISSING:
            try:
                _set_value(python_fn, r, value, instance)
            except (AttributeError, TypeError, ValueError):  # a read-only attribute: left as the trace made it
                pass


def silent_rebinding(ctx, saved: list[tuple[Rebinding, Any]]):
    """A function that traced and ran, but whose trace rebound a global, closure variable or
    ``self`` attribute holding a tf.Variable or tensor to a symbolic tensor: eagerly each call
    carries the value on; traced, later calls of the same trace repeat the first result and the
    next trace fails ("out of scope"). None when no such state was rebound.

    Returns:
        A silent `tflab.diagnosis.records.Diagnosis` whose fix (``NAME.assign_add(x)``…) is run
        by `check_rebind_fix` from the value the state held before the trace.
    """
    import numpy as np

    from tflab._user.source_map import strip_comment
    from tflab.diagnosis.context import instance_of, materialize_specs, seeded
    from tflab.diagnosis.records import SILENT_STAGE, Diagnosis
    from tflab.diagnosis.source import Source
    from tflab.fix import attempt, first_working, unchecked

    inst = instance_of(ctx)
    for reb, before in saved:
        if before is _MISSING or _symbolic(before) or not hasattr(before, "numpy"):
            continue
        if not _symbolic(current_value(ctx.python_fn, reb, inst)):
            continue
        fname = inspect.getsourcefile(inspect.unwrap(getattr(ctx.python_fn, "__func__", ctx.python_fn))) or ""
        src = Source.of(fname)
        kind_text = "tf.Variable" if hasattr(before, "assign") else "tensor"
        explanation = (f"this line rebinds `{reb.target}` (a {kind_text} before the trace) to a symbolic tensor of "
                       f"the graph: eagerly each call makes a new value from the last one; traced, every call "
                       f"of this graph starts again from the value the trace read, so nothing is carried from call "
                       f"to call, and the next trace captures a tensor of this one and fails (\"out of scope\")")
        fix_text = f"keep `{reb.target}` in a tf.Variable and assign to it: `{reb.change}`"
        start = np.array(before.numpy())
        from tflab.diagnosis.context import fix_source

        fsrc = fix_source(ctx, reb.line, fname)
        if fsrc is None:
            plan = first_working([unchecked("code", reb.change, fix_text, "tflab could not copy the function")])
        else:
            def check(reb=reb, fsrc=fsrc, start=start, kind_text=kind_text):
                with seeded():
                    return check_rebind_fix(fsrc, reb, start, f"your {kind_text}'s value", ctx.args, ctx.kwargs,
                                            materialize_specs, {"autograph": ctx.autograph}, instance=inst)

            plan = first_working([attempt("code", reb.change, f"keep `{reb.target}` in a tf.Variable and assign "
                                                              "to it", check,
                                          how="ran your function eagerly and the fix as a tf.function, each "
                                              "from a fresh tf.Variable holding the same starting value")])
        return Diagnosis(function_name=ctx.name, ok=False, kind="state-rebound-to-tensor", line=reb.line,
                         statement=strip_comment(src.text(reb.line)) if src else "", filename=fname, error="",
                         explanation=explanation, fix=fix_text, stage=SILENT_STAGE, fix_plan=plan)
    return None
