"""Python side effects in a traced body: they run only while TF traces, not on every call.

``tf.function`` runs the Python body once per trace to build a FuncGraph; a
cached call runs the graph only. So Python work in the body that does not
make graph ops runs once per trace: ``o.value += 1`` on a Python object,
``log.append(x)``, ``print(...)``, a write to a global (TF guide "Better
performance with tf.function", "Executing Python side effects";
tensorflow/tensorflow#31362). `trace_time_effects` finds those statements in
the user's source (its own body, not nested functions); the probe counts the
traces, so each effect is reported as "ran N time(s) in M calls".

A store of newly made TF state (``self.v = tf.Variable(...)``, a Keras layer,
a tf.TensorArray) is left out: creating it once at trace time is the
documented pattern.
"""

from __future__ import annotations

import ast
import dataclasses
import dis
import inspect
import textwrap
import types
from typing import Any

# What to do instead, by kind of side effect.
ADVICE = {
    "attribute": "use a tf.Variable (.assign / .assign_add) or return the value",
    "subscript": "use a tf.Variable or a tf.TensorArray, or return the value",
    "append": "collect the values in a tf.TensorArray, or return them",
    "print": "use tf.print, which is a graph op and runs on every call",
    "global": "this counts traces, not calls (fine as a trace counter); keep state that must "
              "change on every call in a tf.Variable",
    "variable": "it rebinds the name of a tf.Variable to a tensor of this trace's graph, so the Variable is lost "
                "after the first trace; assign to the Variable instead (.assign / .assign_add / .assign_sub)",
}

_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "pop",
                       "remove", "clear", "discard", "appendleft"})


@dataclasses.dataclass(frozen=True)
class SideEffect:
    """One statement of the traced body that runs only while TF traces.

    Attributes:
        kind: "attribute" (``o.value += 1``), "subscript" (``d[k] = v``),
            "append" (``xs.append(v)`` and other in-place container calls),
            "print", "global" (a write to a name declared ``global``), or "variable"
            (that write rebinds a name that holds a tf.Variable: no counter, lost state).
        source: the statement's text, as written.
        line: its line number in ``filename``.
        filename: the file of the user's function.
        base: the Python name the statement changes (``o``, ``xs``, ``TRACES``),
            or "" for print.
        in_loop: the statement is inside a Python loop of the body (it may run
            several times per trace).
    """

    kind: str
    source: str
    line: int
    filename: str
    base: str
    in_loop: bool = False

    @property
    def advice(self) -> str:
        return ADVICE[self.kind]

    def text(self, traces: int, calls: int) -> str:
        """``\\`o.value += 1\\` (line 9) ran 1 time in 5 calls: it runs only while tracing; …``."""
        ran = f"ran {traces} time{'s' * (traces != 1)}"
        if self.in_loop:
            ran = f"ran in {traces} trace{'s' * (traces != 1)} (inside a Python loop)"
        return (f"`{self.source}` (line {self.line}) {ran} in {calls} call{'s' * (calls != 1)}: "
                f"it runs only while tracing; {self.advice}")


def user_function(fn: Any) -> Any:
    """The user's own function under tf.function / TF decorator / functools.wraps layers.

    A callable object (a Keras model, a tf.Module) gives its class's ``__call__``.
    """
    from tflab._tf import function as _tf

    for _ in range(20):
        fn = getattr(fn, "python_function", fn)
        target = _tf.unwrap(fn)
        if target is not fn:
            fn = target
            continue
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
            continue
        if hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
            continue
        break
    if not hasattr(fn, "__code__") and callable(fn) and hasattr(type(fn), "__call__"):
        fn = getattr(type(fn).__call__, "__func__", type(fn).__call__)
    return fn


def global_writes(code: types.CodeType | None) -> set[str]:
    """Names a function's code (and its nested code) stores as globals (``STORE_GLOBAL``)."""
    out: set[str] = set()
    if code is None:
        return out
    for ins in dis.get_instructions(code):
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            out.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= global_writes(const)
    return out


def _base_name(node: ast.AST) -> str:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _makes_tf_state(value: ast.AST) -> bool:
    """``tf.Variable(...)``, ``keras.layers.Dense(...)``, ``tf.TensorArray(...)``: state made once on purpose."""
    for n in ast.walk(value):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("Variable", "TensorArray") or (name[:1].isupper() and isinstance(f, ast.Attribute)):
                return True
    return False


class _Finder(ast.NodeVisitor):
    def __init__(self, locals_: set[str], globals_: set[str], lines: list[str], first: int, filename: str):
        self.locals, self.globals, self.lines = locals_, globals_, lines
        self.first, self.filename = first, filename
        self.found: list[SideEffect] = []
        self.loop = 0
        self.depth = 0

    def _src(self, node: ast.AST) -> str:
        seg = self.lines[node.lineno - 1][node.col_offset:] if node.lineno == node.end_lineno else \
            self.lines[node.lineno - 1][node.col_offset:]
        if node.lineno == node.end_lineno:
            seg = self.lines[node.lineno - 1][node.col_offset:node.end_col_offset]
        return seg.strip()

    def _add(self, kind: str, node: ast.AST, base: str) -> None:
        self.found.append(SideEffect(kind, self._src(node), self.first + node.lineno - 1,
                                     self.filename, base, self.loop > 0))

    def _nested(self, node: ast.AST) -> None:
        if self.depth == 0:  # the function itself
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
        # nested functions / lambdas / classes: not run by the body itself

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = _nested

    def _loop(self, node: ast.AST) -> None:
        self.loop += 1
        self.generic_visit(node)
        self.loop -= 1

    visit_For = visit_While = _loop

    def _store(self, stmt: ast.AST, targets: list[ast.AST]) -> None:
        for t in targets:
            if isinstance(t, (ast.Tuple, ast.List)):
                self._store(stmt, list(t.elts))
                continue
            base = _base_name(t)
            if isinstance(t, ast.Name) and t.id in self.globals:
                self._add("global", stmt, t.id)
            elif isinstance(t, (ast.Attribute, ast.Subscript)) and base and base not in self.locals:
                self._add("attribute" if isinstance(t, ast.Attribute) else "subscript", stmt, base)

    def visit_Assign(self, node: ast.Assign) -> None:
        if not _makes_tf_state(node.value):
            self._store(node, node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._store(node, [node.target])
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and not _makes_tf_state(node.value):
            self._store(node, [node.target])
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        call = node.value
        if isinstance(call, ast.Call):
            f = call.func
            if isinstance(f, ast.Name) and f.id == "print":
                self._add("print", node, "")
            elif isinstance(f, ast.Attribute) and f.attr in _MUTATORS:
                base = _base_name(f.value)
                if base and base not in self.locals:
                    self._add("append", node, base)
        self.generic_visit(node)


def trace_time_effects(fn: Any) -> list[SideEffect]:
    """The statements of ``fn``'s own body that change Python state or print.

    Args:
        fn: the user's Python function (unwrapped; not the tf.function).

    Returns:
        `SideEffect`s in source order: attribute/subscript stores and
        in-place container calls on names that are not the body's own locals
        (arguments, closures, globals), prints, and writes to globals. []
        when the source cannot be read (a REPL, a builtin).
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return []
    src = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(src)
    except SyntaxError:  # e.g. a lambda in the middle of a line
        return []
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    if not funcs:
        return []
    target = funcs[0]
    params = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount
                                  + bool(code.co_flags & inspect.CO_VARARGS)
                                  + bool(code.co_flags & inspect.CO_VARKEYWORDS)])
    locals_ = set(code.co_varnames) - params
    finder = _Finder(locals_, global_writes(code), src.splitlines(), first, code.co_filename)
    finder.visit(target)
    found = finder.found
    g = getattr(fn, "__globals__", {}) or {}
    return [dataclasses.replace(e, kind="variable") if e.kind == "global" and _is_variable(g.get(e.base)) else e
            for e in found]


def _is_variable(value: Any) -> bool:
    """True for a tf.Variable (by its class's module, so TF is not imported for a plain value)."""
    return any(c.__module__.startswith("tensorflow.") and c.__name__ in ("Variable", "BaseResourceVariable")
               for c in type(value).__mro__)
