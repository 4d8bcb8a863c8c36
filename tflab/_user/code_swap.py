"""Run the user's code with one line rewritten: the copy a numeric fix is measured on.

A fix for a non-finite value (`tflab.nonfinite`) changes one line of the user's
code: a literal beyond float16's range, an expression to compute in float32.
To measure it, `swapped_line` rewrites that line in the AST of the function
that holds it (``inspect.getsource``; decorators dropped), compiles the copy
with the function's own free-variable names (so ``super()``'s ``__class__``
cell still lines up) and the original line numbers, and swaps the copy's code
object into the function (``function.__code__``) for the duration of a
``with`` block, so a Keras layer's ``call``, a helper the model calls, or the
function itself runs the rewritten line wherever it is called from. On exit
the original code object is put back, also on error. The user's file is never
written.

Rewrites (`ast.NodeTransformer`s over the statement at the line):

* `finite_literals`: numeric literals beyond a dtype's max become a value it
  holds (``1e30`` -> ``1e4`` for float16);
* `in_float32`: the line's expression computed in float32 (each name operand
  ``tf.cast(NAME, tf.float32)``), and with ``cast_back`` cast back to its first
  operand's dtype, so the ops after it keep theirs.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import gc
import inspect
import math
import textwrap
import types
from typing import Callable, Iterator

__all__ = ["swapped_line", "finite_literals", "representable_literals", "in_float32", "find_function", "RewriteError"]


class RewriteError(Exception):
    """The line could not be rewritten here (why: the message)."""


def find_function(filename: str, lineno: int, name: str) -> list[types.FunctionType]:
    """Every live Python function whose code is ``name`` in ``filename`` and spans ``lineno``."""
    found = []
    for obj in gc.get_objects():
        if type(obj) is not types.FunctionType:
            continue
        code = obj.__code__
        if code.co_filename != filename or code.co_name != name or code.co_firstlineno > lineno:
            continue
        if any(ln == lineno for _, _, ln in code.co_lines()):
            found.append(obj)
    return found


def _stmt_at(fdef: ast.AST, line: int) -> ast.stmt | None:
    best = None
    for node in ast.walk(fdef):
        if isinstance(node, ast.stmt) and node is not fdef and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or (node.end_lineno - node.lineno) <= (best.end_lineno - best.lineno):
                best = node
    return best


def _tf_alias(func: types.FunctionType) -> str | None:
    """The global name the function's module gives TensorFlow (``tf``), or None."""
    for k, v in func.__globals__.items():
        if isinstance(v, types.ModuleType) and v.__name__ == "tensorflow":
            return k
    return None


class _Literals(ast.NodeTransformer):
    def __init__(self, limit: float, value: float):
        self.limit, self.value, self.changed = limit, value, []

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > self.limit:
            self.changed.append(repr(v))
            return ast.copy_location(ast.Constant(math.copysign(self.value, v)), node)
        return node


def finite_literals(limit: float) -> Callable[[ast.stmt, types.FunctionType], str]:
    """A rewrite: literals with |v| > ``limit`` become ±10^floor(log10(limit)) (1e4 for float16's 65504)."""
    value = 10.0 ** math.floor(math.log10(limit))

    def rewrite(stmt: ast.stmt, func) -> str:
        t = _Literals(limit, value)
        t.visit(stmt)
        if not t.changed:
            raise RewriteError("no numeric literal on that line is beyond the range")
        return f"{', '.join(t.changed)} -> {value:g}"

    return rewrite


def representable_literals(smallest_normal: float, largest: float, small: float):
    """A rewrite: non-zero literals below ``smallest_normal`` become ``small``; beyond ``largest``, 1e4-like.

    A literal a dtype rounds to 0 or to a subnormal (``variance_epsilon=1e-12`` in
    float16, whose smallest normal is 6.1e-5) becomes ``small`` (1e-3 for
    float16), keeping its sign; one beyond the range becomes ±10^floor(log10(largest)).
    """
    big_value = 10.0 ** math.floor(math.log10(largest))

    def rewrite(stmt: ast.stmt, func) -> str:
        changed: list[str] = []

        class Lit(ast.NodeTransformer):
            def visit_Constant(self, node):
                v = node.value
                if isinstance(v, float) and v != 0 and (abs(v) < smallest_normal or abs(v) > largest):
                    new = small if abs(v) < smallest_normal else big_value
                    changed.append(f"{v!r} -> {new:g}")
                    return ast.copy_location(ast.Constant(math.copysign(new, v)), node)
                return node

        Lit().visit(stmt)
        if not changed:
            raise RewriteError("no numeric literal on that line is outside the dtype's normal range")
        return ", ".join(changed)

    return rewrite


def _value_field(stmt: ast.stmt) -> str:
    for field in ("value",):
        if isinstance(getattr(stmt, field, None), ast.expr):
            return field
    raise RewriteError(f"the line is a {type(stmt).__name__}, not an assignment or return of an expression")


def in_float32(cast_back: bool) -> Callable[[ast.stmt, types.FunctionType], str]:
    """A rewrite: the line's expression with every name operand cast to float32 (and the result back)."""

    def rewrite(stmt: ast.stmt, func) -> str:
        tf = _tf_alias(func)
        if tf is None:
            raise RewriteError("the function's module does not import tensorflow under a name")
        field = _value_field(stmt)
        expr = getattr(stmt, field)
        skip = set()
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                skip.add(id(node.func))
            if isinstance(node, ast.Attribute):
                skip.add(id(node.value))
        names: list[str] = []

        class Cast(ast.NodeTransformer):
            def visit_Name(self, node):
                if id(node) in skip or not isinstance(node.ctx, ast.Load) or node.id == tf:
                    return node
                names.append(node.id)
                return ast.parse(f"{tf}.cast({node.id}, {tf}.float32)", mode="eval").body

        new = Cast().visit(copy.deepcopy(expr))
        if not names:
            raise RewriteError("the line's expression has no tensor name to cast")
        if cast_back:
            new = ast.Call(ast.parse(f"{tf}.cast", mode="eval").body,
                           [new, ast.parse(f"{names[0]}.dtype", mode="eval").body], [])
        setattr(stmt, field, ast.copy_location(new, expr))
        return ast.unparse(new)

    return rewrite


def _compile_copy(func: types.FunctionType, line: int, rewrite) -> tuple[types.CodeType, str, str]:
    try:
        lines, start = inspect.getsourcelines(func)
    except (OSError, TypeError) as e:
        raise RewriteError(f"no source for {func.__qualname__}: {e}") from None
    module = ast.parse(textwrap.dedent("".join(lines)))
    fdef = module.body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise RewriteError(f"{func.__qualname__} is not a def (a lambda's line cannot be rewritten alone)")
    fdef.decorator_list = []
    ast.increment_lineno(module, start - 1)
    stmt = _stmt_at(fdef, line)
    if stmt is None:
        raise RewriteError(f"line {line} is not a statement of {func.__qualname__}")
    what = rewrite(stmt, func)
    new_line = ast.unparse(stmt)
    freevars = func.__code__.co_freevars
    if freevars:  # the copy must close over the same names, in the same order
        outer = ast.parse("def __tflab_outer():\n    pass").body[0]
        outer.body = [ast.parse(f"{n} = None").body[0] for n in freevars] + [fdef,
                      ast.parse(f"return {fdef.name}").body[0]]
        module.body = [outer]
    ast.fix_missing_locations(module)
    namespace: dict = {}
    exec(compile(module, func.__code__.co_filename, "exec"), dict(func.__globals__), namespace)  # noqa: S102
    made = namespace["__tflab_outer"]() if freevars else namespace[fdef.name]
    code = made.__code__.replace(co_name=func.__code__.co_name, co_qualname=func.__code__.co_qualname)
    if code.co_freevars != freevars:
        raise RewriteError(f"the copy of {func.__qualname__} closes over {code.co_freevars}, not {freevars}")
    return code, what, new_line


@contextlib.contextmanager
def swapped_line(filename: str, lineno: int, name: str, rewrite) -> Iterator[tuple[str, str]]:
    """Runs the block with line ``lineno`` of function ``name`` in ``filename`` rewritten.

    Args:
        filename, lineno, name: the user's line (an op's creation frame).
        rewrite: ``rewrite(stmt, func) -> str`` changes the statement in place
            (`finite_literals`, `in_float32`) and says what it changed.

    Yields:
        ``(what changed, the rewritten line)``.

    Raises:
        RewriteError: no live function holds that line, it has no source, or the
            rewrite does not apply to it.
    """
    funcs = find_function(filename, lineno, name)
    if not funcs:
        raise RewriteError(f"no live Python function {name} holds {filename}:{lineno}")
    code, what, new_line = _compile_copy(funcs[0], lineno, rewrite)
    # Every live function made from that source line (a module loaded twice holds two copies,
    # and the one that runs need not be the first found): each runs the rewritten line.
    old = [(f, f.__code__) for f in funcs if f.__code__.co_freevars == code.co_freevars]
    for f, _ in old:
        f.__code__ = code
    try:
        yield what, new_line
    finally:
        for f, c in old:
            f.__code__ = c
