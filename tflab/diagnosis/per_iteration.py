"""A Keras layer or tf.Variable constructed inside a Python ``for`` loop of a tf.function, built once
PER ITERATION outside it: ``for i in range(2): x = keras.layers.Dense(4)(x)`` becomes a module-level
``dense_layers = [keras.layers.Dense(4) for i in range(2)]`` and ``x = dense_layers[i](x)``.

Hoisting the one constructor call (one shared layer) would run a different model: two Dense layers
became one. The list has one object per iteration, built in iteration order, so under the same
seeded Python random state (Keras draws an unseeded initializer's seed from it at construction)
the copy's layers get the weights eager's layers got, and the comparison with eager is fair.
The list's name comes from the class (``dense_layers``, ``variables``), never a name the function
binds (its input ``x`` included).
"""

from __future__ import annotations

import ast
import copy
import re
from typing import Any


def _enclosing_for(fdef: ast.AST, stmt: ast.stmt) -> ast.For | None:
    """The innermost ``for`` statement of ``fdef`` whose body holds ``stmt``."""
    best = None
    for n in ast.walk(fdef):
        if isinstance(n, ast.For) and any(x is stmt for b in n.body for x in ast.walk(b)):
            if best is None or any(x is n for b in best.body for x in ast.walk(b)):
                best = n
    return best


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def list_name(src, cls: str, what: str) -> str:
    """``dense_layers`` for a Dense, ``variables`` for a tf.Variable: a name the function, its
    module and its namespace do not bind."""
    stem = "variables" if what == "variable" else re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower() + "_layers"
    return src.fresh_name(stem)


def per_iteration(src, call: ast.Call, cls: str, what: str) -> tuple[str, str, str] | None:
    """The module source with ``call`` (inside a ``for`` loop) built once per iteration outside.

    Args:
        src: the `tflab.diagnosis.fixes.FunctionSource`.
        call: the constructor call (a node of ``src.module``).
        cls: its class name (``Dense``); what: "layer" or "variable".

    Returns:
        ``(module source, the module-level line, the line in the loop)``; None when ``call`` is
        not in a ``for`` loop, or the loop's iterable (or the constructor's arguments, beyond the
        loop's own variables) reads names local to the function.
    """
    from tflab.diagnosis.fixes import pos, unparse

    module = copy.deepcopy(src.module)
    fdef = module.body[0]
    target = next((n for n in ast.walk(fdef) if isinstance(n, ast.Call) and pos(n) == pos(call)), None)
    if target is None:
        return None
    stmt = next((s for s in ast.walk(fdef) if isinstance(s, ast.stmt) and s is not fdef
                 and any(x is target for x in ast.walk(s))
                 and not any(isinstance(c, ast.stmt) and any(x is target for x in ast.walk(c))
                             for c in ast.iter_child_nodes(s))), None)
    loop = _enclosing_for(fdef, stmt) if stmt is not None else None
    if loop is None:
        return None
    local = src.local_names()
    loop_vars = _names(loop.target)
    if _names(loop.iter) & local or (_names(target) & local) - loop_vars:
        return None
    name = list_name(src, cls, what)
    it = loop.iter
    index: str | None = None
    if isinstance(loop.target, ast.Name) and isinstance(it, ast.Call) and isinstance(it.func, ast.Name) \
            and it.func.id == "range":
        index = loop.target.id
    elif isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" \
            and isinstance(loop.target, ast.Tuple) and loop.target.elts and isinstance(loop.target.elts[0], ast.Name):
        index = loop.target.elts[0].id
    comp_target = copy.deepcopy(loop.target)
    comp = ast.ListComp(elt=copy.deepcopy(target), generators=[
        ast.comprehension(target=comp_target, iter=copy.deepcopy(it), ifs=[], is_async=0)])
    made = ast.Assign(targets=[ast.Name(name, ast.Store())], value=comp)
    if index is None:  # `for item in seq:` -> `for k, item in enumerate(seq):`
        index = src.fresh_name("i")
        loop.target = ast.Tuple([ast.Name(index, ast.Store()), loop.target], ast.Store())
        loop.iter = ast.Call(ast.Name("enumerate", ast.Load()), [it], [])
    use = ast.Subscript(ast.Name(name, ast.Load()), ast.Name(index, ast.Load()), ast.Load())
    for node in ast.walk(stmt):
        for field, value in ast.iter_fields(node):
            if value is target:
                setattr(node, field, use)
    module.body.insert(0, made)
    text = unparse(module)
    return text, ast.unparse(ast.fix_missing_locations(made)), ast.unparse(stmt).splitlines()[0]


def describe(cls: str, what: str, made: str, inner: str) -> str:
    """The fix sentence: one object per iteration, built outside, the i-th called inside."""
    noun = "tf.Variable" if what == "variable" else cls
    return (f"build one {noun} per loop iteration outside the function, and use the iteration's own inside: "
            f"`{made}` at module level (or as a model attribute), then `{inner}`")


def is_in_loop(src: Any, call: ast.Call) -> bool:
    """True when ``call`` (a node of ``src.module``) sits in the body of a ``for`` loop."""
    from tflab.diagnosis.fixes import pos

    fdef = src.module.body[0]
    return any(isinstance(n, ast.For) and any(isinstance(x, ast.Call) and pos(x) == pos(call)
                                               for b in n.body for x in ast.walk(b)) for n in ast.walk(fdef))
