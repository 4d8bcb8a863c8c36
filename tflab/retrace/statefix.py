"""Fixes for the Python state a traced body reads or rebinds, each run on the user's calls against eager.

Two mechanisms, both about state that is not part of the trace's cache key:

* **A rebound tf.Variable name** (`find_rebinds`): ``global v; v = v + x``
  (or ``nonlocal``, or ``self.v = self.v + x``) makes the name a tensor of the
  FuncGraph at the first trace. The Variable is no longer read or updated: a
  later trace fails ("out of scope"), and a cached call starts again from the
  Variable's old value, where eager accumulates. The fix rewrites the line
  ``NAME = NAME <op> EXPR`` as ``NAME.assign_add(EXPR)`` / ``assign_sub`` /
  ``NAME.assign(NAME <op> EXPR)`` in a copy of the function (the user's file is
  never written) and runs the copy on every recorded call, from the state of
  the first call, against the original's eager outputs.
* **A stale read** (`stale_plan`): a tensor or Python value read at trace time
  (a global, a closure cell, ``self.weights``, ``self.cfg.scale``) that the user
  replaced later; the graph keeps the old one. The fix keeps it in a
  ``tf.Variable`` and ``.assign()``s the new values; it is run on the calls with
  each of the user's changes made as an ``assign``, against eager.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import linecache
import os
import textwrap
import types
from typing import Any, Callable

from tflab import fix as fx
from tflab.retrace.values import MISSING, CaseValues, World, is_variable

__all__ = ["Rebind", "find_rebinds", "stale_plan"]

_COPIES = itertools.count(1)
_ASSIGN = {ast.Add: "assign_add", ast.Sub: "assign_sub"}


@dataclasses.dataclass(frozen=True)
class Rebind:
    """One line of the body that rebinds a tf.Variable's name to a tensor.

    Attributes:
        name: as the user writes it: ``v``, ``self.v``.
        scope: "global", "nonlocal" or "attribute".
        file: the user's file.
        line: the line number.
        source: the line's code (``v = v + x``).
        change: the line as the fix writes it (``v.assign_add(x)``).
        plan: the `tflab.fix.FixPlan` run on the user's calls.
        body: the rewritten function (every rebinding line of it changed), for combined fixes.
    """

    name: str
    scope: str
    file: str
    line: int
    source: str
    change: str
    plan: Any = dataclasses.field(default=None, compare=False, repr=False)
    body: Any = dataclasses.field(default=None, compare=False, repr=False)
    # What the name held: "a tf.Variable" (at the first call), or, seen through TF's log only,
    # "now a tensor of a traced graph" (what the line left in it).
    held: str = "a tf.Variable"

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    @property
    def text(self) -> str:
        return (f"`{self.source}` ({self.where}) rebinds {self.scope} {self.name}, {self.held}, to a tensor: "
                f"the graph no longer reads or updates the Variable (a later trace fails: out of scope; a "
                f"cached call starts again from the Variable's old value)")

    def lines(self) -> list[str]:
        out = [f"rebind: {self.text}"]
        if self.plan is not None:
            out += ["    " + ln for ln in self.plan.lines()]
        return out

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("name", "scope", "file", "line", "source", "change")}
        d["text"] = self.text
        d["fix_record"] = self.plan.fix.to_dict() if self.plan is not None and self.plan.fix is not None else None
        return d


def _label(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _label(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _same(a: ast.AST, b: ast.AST) -> bool:
    return _label(a) is not None and _label(a) == _label(b)


def _assign_call(target: ast.AST, op: ast.operator, expr: ast.expr) -> ast.Expr:
    load = ast.parse(ast.unparse(target), mode="eval").body
    if type(op) in _ASSIGN:
        call = ast.Call(ast.Attribute(load, _ASSIGN[type(op)], ast.Load()), [expr], [])
    else:
        again = ast.parse(ast.unparse(target), mode="eval").body
        call = ast.Call(ast.Attribute(load, "assign", ast.Load()), [ast.BinOp(again, op, expr)], [])
    return ast.Expr(call)


class _Rewrite(ast.NodeTransformer):
    def __init__(self, lines: set[int]):
        self.lines = lines

    def _at(self, node: ast.stmt, target: ast.AST, op: ast.operator, expr: ast.expr) -> ast.AST:
        if node.lineno not in self.lines:
            return node
        return ast.copy_location(_assign_call(target, op, expr), node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if len(node.targets) == 1 and isinstance(node.value, ast.BinOp):
            return self._at(node, node.targets[0], node.value.op, node.value.right)
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        return self._at(node, node.target, node.op, node.value)


def _function_source(func: Any) -> tuple[ast.FunctionDef, int, list[str]] | None:
    try:
        lines, start = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return None
    try:
        module = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:  # a lambda inside a larger statement: no def to rewrite
        return None
    fdef = module.body[0] if module.body else None
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    ast.increment_lineno(module, start - 1)
    return fdef, start, lines


def _rewritten(func: types.FunctionType, fdef: ast.FunctionDef, lines: set[int]) -> types.FunctionType:
    """A copy of ``func`` with the rebinding statements at ``lines`` made assigns (same globals and closure)."""
    import copy

    fdef = _Rewrite(lines).visit(copy.deepcopy(fdef))
    fdef.decorator_list = []
    freevars = func.__code__.co_freevars
    module = ast.Module([fdef], [])
    if freevars:  # the copy must close over the same names, in the same order
        outer = ast.parse("def __tflab_outer():\n    pass").body[0]
        outer.body = [ast.parse(f"{n} = None").body[0] for n in freevars] + [fdef,
                      ast.parse(f"return {fdef.name}").body[0]]
        module.body = [outer]
    ast.fix_missing_locations(module)
    # The copy's source is registered with linecache under its own name: AutoGraph reads a function's
    # source to convert it, and must read the rewritten lines, not the user's file. It runs in the
    # user's own globals (a `global v` in it is the user's v, which the replay sets and puts back).
    text = ast.unparse(module) + "\n"
    path = f"<tflab rewrite of {os.path.basename(func.__code__.co_filename)}:{func.__name__} #{next(_COPIES)}>"
    linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)
    namespace: dict = {}
    exec(compile(text, path, "exec"), func.__globals__, namespace)  # noqa: S102
    made = namespace["__tflab_outer"]() if freevars else namespace[fdef.name]
    new = types.FunctionType(made.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    new.__kwdefaults__ = func.__kwdefaults__
    return new


def _symbolic(v: Any) -> bool:
    """A tensor of a FuncGraph (what a rebound name holds after a trace), not an eager one."""
    return hasattr(v, "graph") and hasattr(v, "op") and type(v).__name__ != "EagerTensor"


def static_rebinds(body: Callable) -> list[Rebind]:
    """The rebinding lines of a function seen only through TF's trace log (``tflab retrace SCRIPT``).

    No call was recorded, so the names' values at the first call are unknown: a
    name counts when it holds a tf.Variable now, or a tensor of a FuncGraph (what
    ``v = v + x`` left in it after a trace). The fix is printed not checked.
    """
    from tflab._tf import function as _tf
    from tflab.retrace.sideeffects import user_function
    from tflab.retrace.values import ValueLog, attr_slot, cell_slot, global_slot

    user_fn = user_function(body)
    code = getattr(user_fn, "__code__", None)
    if code is None:
        return []
    world = World()
    globs = getattr(user_fn, "__globals__", {})
    for n in code.co_names:
        if n in globs:
            world.add(global_slot(globs, n, True))
    for n, cell in zip(code.co_freevars, getattr(user_fn, "__closure__", None) or ()):
        world.add(cell_slot(n, cell, True))
    obj = getattr(body, "__self__", None) or _tf.method_instance(body)
    if obj is not None and hasattr(obj, "__dict__"):
        for n in code.co_names:
            if n in vars(obj):
                world.add(attr_slot(f"self.{n}", obj, n, True))
    world.initial = {label: s.get() for label, s in world.slots.items()}
    values = CaseValues(body, ValueLog(max_calls=0), world)
    return find_rebinds(body, user_fn, world, values, 0, instance=obj, seen_in_log=True)


def find_rebinds(body: Callable, user_fn: Any, world: World, values: CaseValues, traces: int, *,
                 instance: Any = None, seen_in_log: bool = False) -> list[Rebind]:
    """The lines of ``user_fn`` that rebind a tf.Variable's name, each with its fix run on the user's calls.

    A line counts when it is ``NAME = NAME <op> EXPR`` or ``NAME <op>= EXPR`` with
    NAME declared ``global`` or ``nonlocal`` in the function, or an attribute of
    ``self``, and NAME held a tf.Variable at the first call.

    Args:
        body: the Python function the tf.function runs (a bound method included).
        user_fn: the user's own function under the decorators.
        world: the state at the first call.
        values: the recorded calls and eager's outputs.
        traces: the traces the user's calls made.
        instance: the object ``self`` is, for a method (the copy is bound to it).
        seen_in_log: the function was seen through TF's trace log only (no values):
            a name holding a FuncGraph's tensor counts, and the fix is not checked.

    Returns:
        `Rebind` records in line order; empty when no such line exists.
    """
    found = _function_source(user_fn) if isinstance(user_fn, types.FunctionType) else None
    if found is None:
        return []
    fdef, _, _ = found
    declared: dict[str, str] = {}
    for node in ast.walk(fdef):
        if isinstance(node, ast.Global):
            declared.update((n, "global") for n in node.names)
        elif isinstance(node, ast.Nonlocal):
            declared.update((n, "nonlocal") for n in node.names)
    hits: list[tuple[int, str, str, ast.AST, ast.operator, ast.expr]] = []
    for node in ast.walk(fdef):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp) \
                and _same(node.targets[0], node.value.left):
            target, op, expr = node.targets[0], node.value.op, node.value.right
        elif isinstance(node, ast.AugAssign) and _label(node.target):
            target, op, expr = node.target, node.op, node.value
        else:
            continue
        label = _label(target)
        if isinstance(target, ast.Name) and label in declared:
            scope = declared[label]
        elif isinstance(target, ast.Attribute) and label.startswith("self.") and label.count(".") == 1:
            scope = "attribute"
        else:
            continue
        now = world.initial.get(label, MISSING)
        if not (is_variable(now) or (seen_in_log and _symbolic(now))):
            continue
        hits.append((node.lineno, label, scope, target, op, expr))
    if not hits:
        return []
    try:
        new = _rewritten(user_fn, fdef, {h[0] for h in hits})
    except (SyntaxError, TypeError, ValueError) as e:
        return [Rebind(label, scope, user_fn.__code__.co_filename, line, "", "",
                       plan=fx.first_working([fx.unchecked("code", "", "use assign", f"no rewrite: {e}")]))
                for line, label, scope, *_ in hits]
    obj = getattr(body, "__self__", None) if instance is None else instance
    new_body = types.MethodType(new, obj) if obj is not None and _takes_one_more(new, body) else new
    out = []
    changes = [ast.unparse(_assign_call(t, op, e)) for _, _, _, t, op, e in hits]
    plan = fx.first_working([fx.unchecked(
        "code", "; ".join(f"{c} (line {h[0]})" for c, h in zip(changes, hits)),
        "update the tf.Variable in place instead of rebinding its name",
        f"{fx.VALUES_NOT_KEPT}: tflab retrace reads TF's trace log; tflab.RetraceProbe(f) keeps your calls' "
        "values and runs this fix on them against eager")] if seen_in_log else [lambda: fx.attempt(
        "code", "; ".join(f"{c} (line {h[0]})" for c, h in zip(changes, hits)),
        "update the tf.Variable in place instead of rebinding its name",
        lambda: _check_rebind(new_body, values, traces), source=ast.unparse(fdef),
        how=f"ran a tf.function of a copy of your function with the line(s) rewritten on your {values.n} "
            f"recorded call(s), from the state of the first call, against your original function run eagerly")])
    filename = user_fn.__code__.co_filename
    src_lines = _file_lines(filename)
    for (line, label, scope, target, op, expr), change in zip(hits, changes):
        src = src_lines[line - 1].strip() if 0 < line <= len(src_lines) else ast.unparse(target)
        held = "a tf.Variable" if is_variable(world.initial.get(label, MISSING)) else "now a tensor of a traced graph"
        out.append(Rebind(label, scope, filename, line, src, change, plan=plan, body=new_body, held=held))
    return sorted(out, key=lambda r: r.line)


def _takes_one_more(new: Callable, body: Callable) -> bool:
    """``new`` (the copy of the method's function) takes ``self`` where the body the user calls does not."""
    try:
        return len(inspect.signature(new).parameters) == len(inspect.signature(body).parameters) + 1
    except (TypeError, ValueError):
        return False


def _file_lines(filename: str) -> list[str]:
    import linecache

    return linecache.getlines(filename)


def _check_rebind(new_body: Callable, values: CaseValues, traces: int) -> tuple[bool, str, dict]:
    import tensorflow as tf

    if not values.kept:
        return False, f"not run: {values.log.why or fx.VALUES_NOT_KEPT}", {}
    values.reference()  # eager's outputs first, before the copy runs
    f = tf.function(new_body)
    vc = values.compare(values.run(f))
    n = int(f.experimental_get_tracing_count())
    return vc.ok, f"{vc.text} ({n} trace{'s' * (n != 1)})", vc.measured | {"traces": n, "was": traces}


def stale_plan(stale: Any, values: CaseValues, body: Callable, traces: int) -> fx.FixPlan:
    """The fix for one stale read, run on the user's calls: keep it in a tf.Variable and ``.assign()`` new values.

    Args:
        stale: the `tflab.retrace.stale.StaleRead`.
        values: the recorded calls, the state (with the user's changes) and eager's outputs.
        body: the Python function the tf.function runs.
        traces: the traces the user's calls made.

    Returns:
        A `tflab.fix.FixPlan`: the tf.Variable candidate (checked on values, or
        failed with what differed), then passing it as an argument (not checked:
        it changes the function's parameters).
    """
    name = stale.name
    world = values.world
    arg = unchecked_argument(name)
    if name not in world.slots or not values.kept:
        why = "its state was not recorded" if values.kept else (values.log.why or fx.VALUES_NOT_KEPT)
        return fx.first_working([fx.unchecked("code", "", stale.fix, why), arg])
    seen = [world.initial.get(name, MISSING)] + [v for _, lab, v in world.changes if lab == name]
    shapes = {tuple(getattr(v, "shape", ())) for v in seen if v is not MISSING}
    free = len(shapes) > 1
    short = name.rsplit(".", 1)[-1]
    # A Python int may be read as a float by the body (x * n): its Variable is tried as int32, then float32.
    dtypes = [None, "float32"] if any(type(v) is int for v in seen) else [None]
    cands = [lambda dt=dt: _variable_candidate(name, short, free, dt, values, body, traces) for dt in dtypes]
    return fx.first_working(cands + [arg])


def _variable_candidate(name: str, short: str, free: bool, dtype: str | None, values: CaseValues, body: Callable,
                        traces: int) -> fx.Fix:
    extra = (", shape=tf.TensorShape(None)" if free else "") + (f", dtype=tf.{dtype}" if dtype else "")
    change = (f"{name} = tf.Variable({short}{extra}) where it is first set, then {name}.assign(new) where it is "
              "replaced")

    def make(v: Any) -> Any:
        import tensorflow as tf

        kw = {"shape": tf.TensorShape(None)} if free else {}
        return tf.Variable(v, dtype=tf.as_dtype(dtype), **kw) if dtype else tf.Variable(v, **kw)

    def assign(cur: Any, new: Any) -> Any:
        cur.assign(new)
        return cur

    def check() -> tuple[bool, str, dict]:
        import tensorflow as tf

        values.reference()
        f = tf.function(body)
        vc = values.compare(values.run(f, overrides={name: make}, on_change=assign))
        n = int(f.experimental_get_tracing_count())
        return vc.ok, f"{vc.text}, {n} trace{'s' * (n != 1)}", vc.measured | {"traces": n, "was": traces}

    return fx.attempt("code", change, f"keep {name} in a tf.Variable and .assign() new values: the graph reads "
                      "the Variable at each call", check,
                      how=f"ran a fresh tf.function of your function on your {values.n} recorded call(s), {name} a "
                          "tf.Variable and each of your changes an .assign(), against your function run eagerly")


def unchecked_argument(name: str) -> fx.Fix:
    short = name.rsplit(".", 1)[-1]
    return fx.unchecked("code", "", f"pass {short} as an argument (a tensor: a new value needs no retrace)",
                        "it changes your function's parameters and its callers")
