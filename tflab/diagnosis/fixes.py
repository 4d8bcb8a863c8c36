"""Fixes that `tflab.diagnose` applies to a copy of the user's function and traces.

A fix is only worth suggesting if it works on *that* code. For the rules that
can rewrite the culprit mechanically, the rewrite is done on the function's
AST (``ast.NodeTransformer``), written to a file registered with ``linecache``
(AutoGraph reads a function's source through ``inspect.getsource``, so the copy
is converted like the original), executed in a copy of the function's globals
and closure, then traced with ``tf.function(copy).get_concrete_function`` on
the same arguments and run once. The user's own function and module are not
changed.

The rewrites:

* **variable / layer made inside the function** (``tf.Variable(…)``,
  ``keras.layers.Dense(3)``): moved to module level when its arguments use no
  name local to the function, else guarded so it runs on the first trace only
  (a module-level holder; the fix's text gives ``if self.v is None`` for a method). TF traces a variable-creating function twice on its first
  call and allows variable creation only in the first trace
  (``polymorphic_function.py``, ``invalid_creator_scope``).
* **tensor as a dict key / set element**: ``d[x]`` -> ``d[x.ref()]``
  (``Tensor.__hash__`` raises inside a FuncGraph; ``Tensor.ref()`` is TF's
  hashable handle, ``framework/tensor.py``).
* **NumPy call on a symbolic tensor**: ``np.sum`` -> ``tf.reduce_sum`` from
  `NUMPY_TO_TF`; ``tf.experimental.numpy.sum`` when that fails.
* **comprehension over ``tf.range(static)``**: ``range(...)``, which Python
  unrolls at trace time (tensorflow/tensorflow#33308).
"""

from __future__ import annotations

import ast
import copy
import inspect
import itertools
import linecache
import os
import tempfile
import textwrap
import types
from typing import Any, Callable

# NumPy function -> its TF op. Reductions keep NumPy's ``axis``/``keepdims``
# keywords; tf.experimental.numpy mirrors NumPy's signatures where the TF op's
# differ. Functions absent here get the tf.experimental.numpy name when it
# exists, else the tf.numpy_function advice.
NUMPY_TO_TF: dict[str, str] = {
    "sum": "tf.reduce_sum", "mean": "tf.reduce_mean", "max": "tf.reduce_max", "amax": "tf.reduce_max",
    "min": "tf.reduce_min", "amin": "tf.reduce_min", "prod": "tf.reduce_prod", "any": "tf.reduce_any",
    "all": "tf.reduce_all", "std": "tf.math.reduce_std", "var": "tf.math.reduce_variance",
    "exp": "tf.exp", "log": "tf.math.log", "log1p": "tf.math.log1p", "sqrt": "tf.sqrt",
    "square": "tf.square", "abs": "tf.abs", "sign": "tf.sign", "tanh": "tf.tanh", "sin": "tf.sin",
    "cos": "tf.cos", "tan": "tf.tan", "floor": "tf.floor", "ceil": "tf.math.ceil", "round": "tf.round",
    "maximum": "tf.maximum", "minimum": "tf.minimum", "power": "tf.pow", "clip": "tf.clip_by_value",
    "where": "tf.where", "argmax": "tf.argmax", "argmin": "tf.argmin", "argsort": "tf.argsort",
    "sort": "tf.sort", "cumsum": "tf.cumsum", "cumprod": "tf.math.cumprod", "matmul": "tf.linalg.matmul",
    "dot": "tf.tensordot(a, b, axes=1)", "einsum": "tf.einsum", "transpose": "tf.transpose",
    "reshape": "tf.reshape", "concatenate": "tf.concat", "stack": "tf.stack", "squeeze": "tf.squeeze",
    "expand_dims": "tf.expand_dims", "tile": "tf.tile", "unique": "tf.unique",
    "zeros_like": "tf.zeros_like", "ones_like": "tf.ones_like", "isnan": "tf.math.is_nan",
    "isfinite": "tf.math.is_finite", "asarray": "tf.convert_to_tensor", "array": "tf.convert_to_tensor",
    "linalg.norm": "tf.norm", "linalg.inv": "tf.linalg.inv", "linalg.det": "tf.linalg.det",
    "count_nonzero": "tf.math.count_nonzero", "logical_and": "tf.logical_and",
    "logical_or": "tf.logical_or", "logical_not": "tf.logical_not", "diag": "tf.linalg.diag",
    "outer": "tf.tensordot(a, b, axes=0)", "cross": "tf.linalg.cross",
    "arange": "tf.range", "linspace": "tf.linspace",
}


def numpy_equivalent(name: str) -> tuple[str | None, str | None]:
    """(TF op, ``tf.experimental.numpy`` name) for NumPy function ``name`` (``"sum"``,
    ``"linalg.norm"``); either is None where TF has none."""
    import tensorflow as tf

    tnp: Any = tf.experimental.numpy
    for part in name.split("."):
        tnp = getattr(tnp, part, None)
        if tnp is None:
            break
    return NUMPY_TO_TF.get(name), (f"tf.experimental.numpy.{name}" if tnp is not None else None)


def numpy_calls(node: ast.AST, namespace: dict) -> list[tuple[ast.Call, str]]:
    """``(call, "sum")`` for each call in ``node`` whose function is NumPy's
    (``np.sum``, ``numpy.linalg.norm``, ``from numpy import sum``), resolved in ``namespace``."""
    import numpy as np

    out = []
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        fn = resolve(n.func, namespace)
        mod = getattr(fn, "__module__", None) or ""
        if callable(fn) and (mod == "numpy" or mod.startswith("numpy.")) and not isinstance(fn, type):
            name = getattr(fn, "__name__", None)
            if name is None:
                continue
            sub = getattr(fn, "__module__", "")
            if "linalg" in sub or (isinstance(n.func, ast.Attribute) and dotted(n.func.value) and
                                   dotted(n.func.value).endswith("linalg")):
                name = f"linalg.{name}"
            if getattr(np, name.split(".")[-1], None) is fn or name.startswith("linalg."):
                out.append((n, name))
    return out


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def resolve(node: ast.AST, namespace: dict) -> Any:
    """The object a dotted name (``tf.Variable``, ``keras.layers.Dense``) names in ``namespace``, or None."""
    path = dotted(node)
    if not path:
        return None
    head, *rest = path.split(".")
    obj = namespace.get(head, getattr(__builtins__, head, None) if not isinstance(__builtins__, dict)
                        else __builtins__.get(head))
    for part in rest:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# --------------------------------------------------------------------------- the function's source


class FunctionSource:
    """A Python function's own source, parsed, with the map to its file's lines.

    Attributes:
        fn: the function (bound method: its instance is kept in ``instance``).
        module: the parsed, dedented source (one ``def``, decorators dropped).
        fdef: that ``FunctionDef``.
        start: the file line of the source's first line.
        namespace: the function's globals plus its closure cells' values.
    """

    def __init__(self, fn: Callable):
        self.instance = getattr(fn, "__self__", None) if inspect.ismethod(fn) else None
        func = inspect.unwrap(getattr(fn, "__func__", fn))
        lines, self.start = inspect.getsourcelines(func)
        self.module = ast.parse(textwrap.dedent("".join(lines)))
        self.fdef = self.module.body[0]
        if not isinstance(self.fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ValueError("not a def")
        # The decorators' lines stay in ``start``'s count; the copy is traced by tflab itself.
        self.original_decorators = list(self.fdef.decorator_list)
        self.fdef.decorator_list = []
        self.name = func.__name__
        self.namespace = dict(func.__globals__)
        for n, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
            try:
                self.namespace[n] = cell.cell_contents
            except ValueError:
                pass

    def ast_line(self, file_line: int) -> int:
        return file_line - self.start + 1

    def stmt_at(self, file_line: int) -> ast.stmt | None:
        line = self.ast_line(file_line)
        best = None
        for node in ast.walk(self.fdef):
            if isinstance(node, ast.stmt) and node is not self.fdef \
                    and node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or (node.end_lineno - node.lineno) <= (best.end_lineno - best.lineno):
                    best = node
        return best

    def local_names(self) -> set[str]:
        """Parameters and names assigned in the function."""
        a = self.fdef.args
        out = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
        out |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        for n in ast.walk(self.fdef):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
        return out

    def fresh_name(self, stem: str) -> str:
        taken = self.local_names() | set(self.namespace) | {n.id for n in ast.walk(self.module)
                                                             if isinstance(n, ast.Name)}
        for cand in itertools.chain([stem], (f"{stem}_{i}" for i in itertools.count(1))):
            if cand not in taken:
                return cand
        raise AssertionError  # unreachable


def _parent_stmt_list(root: ast.AST, stmt: ast.stmt) -> tuple[list, int] | None:
    for node in ast.walk(root):
        for field in ("body", "orelse", "finalbody"):
            seq = getattr(node, field, None)
            if isinstance(seq, list) and stmt in seq:
                return seq, seq.index(stmt)
    return None


# --------------------------------------------------------------------------- rewrites


def hoist_created(src: FunctionSource, call: ast.Call, stem: str) -> str | None:
    """The module source with ``call`` (a tf.Variable or a layer constructor) made once.

    Its arguments name nothing local to the function: the call moves to module
    level as ``NAME = call``. Otherwise it is guarded to run on the first trace
    only: a module-level ``NAME = None`` plus ``global NAME``; in a method too
    (the fix's text names ``self.NAME``; the copy leaves the user's object alone).
    """
    module = copy.deepcopy(src.module)
    fdef = module.body[0]
    target = next((n for n in ast.walk(fdef) if isinstance(n, ast.Call) and pos(n) == pos(call)), None)
    if target is None:
        return None
    stmt = next((s for s in ast.walk(fdef) if isinstance(s, ast.stmt) and s is not fdef
                 and any(x is target for x in ast.walk(s))
                 and not any(isinstance(c, ast.stmt) and any(x is target for x in ast.walk(c))
                             for c in ast.iter_child_nodes(s))), None)
    if stmt is None:
        return None
    uses = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    local = src.local_names()
    # The copy keeps what it creates at module level even for a method: setting an
    # attribute on the user's own object while tracing would change it (and a
    # tf.Module tracks its attributes).
    is_method = False
    simple = (isinstance(stmt, ast.Assign) and stmt.value is target and len(stmt.targets) == 1
              and isinstance(stmt.targets[0], ast.Name))
    name = stmt.targets[0].id if simple else src.fresh_name(stem)
    if not (uses & local) and not is_method:
        hoisted = ast.Assign(targets=[ast.Name(name, ast.Store())], value=target)
        if simple:
            parent = _parent_stmt_list(fdef, stmt)
            if parent is None:
                return None
            parent[0].remove(stmt)
            if not parent[0]:
                parent[0].append(ast.Pass())
        else:
            replace(stmt, target, ast.Name(name, ast.Load()))
        module.body.insert(0, hoisted)
    else:
        parent = _parent_stmt_list(fdef, stmt)
        if parent is None:
            return None
        seq, i = parent
        if is_method:
            attr = ast.Attribute(ast.Name("self", ast.Load()), name, ast.Load())
            guard = ast.parse(f"if getattr(self, {name!r}, None) is None:\n    self.{name} = None").body[0]
            guard.body[0].value = target
            use: ast.expr = attr
        else:
            guard = ast.parse(f"if {name} is None:\n    {name} = None").body[0]
            guard.body[0].value = target
            use = ast.Name(name, ast.Load())
            module.body.insert(0, ast.parse(f"{name} = None").body[0])
            fdef.body.insert(0, ast.Global([name]))
            seq, i = _parent_stmt_list(fdef, stmt)
        if simple and not is_method:  # the guard itself binds the name
            seq[i] = guard
        else:
            if simple:
                stmt.value = use
            else:
                replace(stmt, target, use)
            seq.insert(i, guard)
    return unparse(module)


def replace(root: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for node in ast.walk(root):
        for field, value in ast.iter_fields(node):
            if value is old:
                setattr(node, field, new)
            elif isinstance(value, list):
                for k, item in enumerate(value):
                    if item is old:
                        value[k] = new


def ref_keys(src: FunctionSource, tensor_names: set[str]) -> str | None:
    """``d[x]`` -> ``d[x.ref()]``, ``{x}`` -> ``{x.ref()}``, ``s.add(x)`` -> ``s.add(x.ref())``
    and ``x in s`` -> ``x.ref() in s`` for each tensor name, in the whole function."""
    module = copy.deepcopy(src.module)
    changed = False

    def ref(name_node: ast.Name) -> ast.Call:
        return ast.Call(ast.Attribute(ast.Name(name_node.id, ast.Load()), "ref", ast.Load()), [], [])

    def is_t(n):
        return isinstance(n, ast.Name) and n.id in tensor_names

    for node in ast.walk(module.body[0]):
        if isinstance(node, ast.Subscript) and is_t(node.slice):
            node.slice, changed = ref(node.slice), True
        elif isinstance(node, ast.Set) and any(is_t(e) for e in node.elts):
            node.elts = [ref(e) if is_t(e) else e for e in node.elts]
            changed = True
        elif isinstance(node, ast.Dict) and any(is_t(k) for k in node.keys):
            node.keys = [ref(k) if is_t(k) else k for k in node.keys]
            changed = True
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("add", "discard", "remove", "get", "pop", "setdefault") \
                and node.args and is_t(node.args[0]):
            node.args[0], changed = ref(node.args[0]), True
        elif isinstance(node, ast.Compare) and is_t(node.left) \
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            node.left, changed = ref(node.left), True
    return unparse(module) if changed else None


def replace_call_func(src: FunctionSource, calls: list[ast.Call], new_func: str) -> str:
    """Each of ``calls`` (located by position) with its function replaced by ``new_func``."""
    module = copy.deepcopy(src.module)
    where = {pos(c) for c in calls}
    for node in ast.walk(module.body[0]):
        if isinstance(node, ast.Call) and pos(node) in where:
            node.func = ast.parse(new_func, mode="eval").body
    return unparse(module)


def pos(node: ast.AST) -> tuple:
    # Start and end: ``Dense(3)(x)`` and its ``Dense(3)`` start at the same column.
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def unparse(module: ast.Module) -> str:
    return ast.unparse(ast.fix_missing_locations(module)) + "\n"


# --------------------------------------------------------------------------- more rewrites


def replace_expr(src: FunctionSource, old: ast.AST, new: str) -> str | None:
    """The module source with the expression ``old`` (a node of ``src.module``, found by its
    position) replaced by the expression ``new`` (source text; ``{}`` in it is ``old``'s text)."""
    module = copy.deepcopy(src.module)
    target = next((n for n in ast.walk(module.body[0]) if type(n) is type(old) and pos(n) == pos(old)), None)
    if target is None:
        return None
    repl = ast.parse(new.replace("{}", f"({ast.unparse(old)})"), mode="eval").body
    replace(module.body[0], target, repl)
    return unparse(module)


def insert_first_in_body(src: FunctionSource, loop: ast.stmt, code: str) -> str | None:
    """The module source with statement ``code`` put first in ``loop``'s body."""
    module = copy.deepcopy(src.module)
    target = next((n for n in ast.walk(module.body[0]) if type(n) is type(loop) and pos(n) == pos(loop)), None)
    if target is None:
        return None
    target.body.insert(0, ast.parse(code).body[0])
    return unparse(module)


def if_to_where(src: FunctionSource, stmt: ast.If) -> str | None:
    """``if C: return A`` + ``return B`` (or an if/else that returns or assigns one name in each
    branch) -> ``return tf.where(C, A, B)`` / ``y = tf.where(C, A, B)``: an elementwise choice."""
    module = copy.deepcopy(src.module)
    fdef = module.body[0]
    node = next((n for n in ast.walk(fdef) if isinstance(n, ast.If) and pos(n) == pos(stmt)), None)
    parent = _parent_stmt_list(fdef, node) if node is not None else None
    if parent is None or len(node.body) != 1:
        return None
    seq, i = parent
    first = node.body[0]
    if not node.orelse and isinstance(first, ast.Return) and i + 1 < len(seq) \
            and isinstance(seq[i + 1], ast.Return) and first.value is not None and seq[i + 1].value is not None:
        new = ast.Return(_where(node.test, first.value, seq[i + 1].value))
        seq[i:i + 2] = [new]
        return unparse(module)
    if len(node.orelse) != 1:
        return None
    second = node.orelse[0]
    if isinstance(first, ast.Return) and isinstance(second, ast.Return) and first.value and second.value:
        seq[i] = ast.Return(_where(node.test, first.value, second.value))
        return unparse(module)
    if all(isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)
           for b in (first, second)) and first.targets[0].id == second.targets[0].id:
        seq[i] = ast.Assign([ast.Name(first.targets[0].id, ast.Store())],
                            _where(node.test, first.value, second.value))
        return unparse(module)
    return None


def _where(test: ast.expr, a: ast.expr, b: ast.expr) -> ast.expr:
    return ast.parse(f"tf.where({ast.unparse(test)}, {ast.unparse(a)}, {ast.unparse(b)})", mode="eval").body


def list_to_tensor_array(src: FunctionSource, name: str, dtype: str) -> str | None:
    """A Python list ``name`` filled in a loop -> a `tf.TensorArray` (a loop variable):
    ``name = []`` -> ``name = tf.TensorArray(dtype, size=0, dynamic_size=True)``,
    ``name.append(v)`` -> ``name = name.write(name.size(), v)``, ``tf.stack(name)`` ->
    ``name.stack()`` and ``tf.add_n(name)`` -> ``tf.reduce_sum(name.stack(), axis=0)``.
    None when ``name`` is used any other way."""
    module = copy.deepcopy(src.module)
    fdef = module.body[0]
    changed = {"init": 0, "append": 0}
    uses = [n for n in ast.walk(fdef) if isinstance(n, ast.Name) and n.id == name]
    handled: set[int] = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == name and isinstance(node.value, ast.List) and not node.value.elts:
            node.value = ast.parse(f"tf.TensorArray({dtype}, size=0, dynamic_size=True)", mode="eval").body
            changed["init"] += 1
            handled.add(id(node.targets[0]))
    for parent in ast.walk(fdef):
        for field in ("body", "orelse"):
            seq = getattr(parent, field, None)
            if not isinstance(seq, list):
                continue
            for k, st in enumerate(seq):
                call = st.value if isinstance(st, ast.Expr) else None
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
                        and isinstance(call.func.value, ast.Name) and call.func.value.id == name and len(call.args) == 1:
                    handled.add(id(call.func.value))
                    seq[k] = ast.parse(f"{name} = {name}.write({name}.size(), {ast.unparse(call.args[0])})").body[0]
                    changed["append"] += 1
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call) and len(node.args) >= 1 and isinstance(node.args[0], ast.Name) \
                and node.args[0].id == name and dotted(node.func) in ("tf.stack", "tf.add_n"):
            handled.add(id(node.args[0]))
            new = f"{name}.stack()" if dotted(node.func) == "tf.stack" else f"tf.reduce_sum({name}.stack(), axis=0)"
            replace(fdef, node, ast.parse(new, mode="eval").body)
    if changed["init"] != 1 or not changed["append"] or any(id(u) not in handled for u in uses):
        return None
    return unparse(module)


# ---------------------------------------------------------------------------


def run_fixed(src: FunctionSource, module_source: str, args: tuple, kwargs: dict,
              materialize: Callable[[Any], Any], *, autograph: bool = True,
              extra: dict | None = None, inputs: list | None = None) -> Any:
    """Runs ``module_source`` (the rewritten function plus what it moved to module level)
    in a copy of the function's namespace (``extra`` added: other rewritten functions),
    traces the copy with ``tf.function(autograph=autograph)`` on ``args``/``kwargs`` and
    runs it once on their materialized values.

    The tf.Variables the copy captured are assigned their values back after the run, so a
    training step tried as a fix does not move the user's weights.

    ``inputs``: when given, a list of materialized ``(args, kwargs)``; the copy, traced once, is
    run on each, and ``outputs`` is the list of their outputs (the eager reference's inputs).

    Returns:
        ``(outputs, the copy's ConcreteFunction)``.

    Raises:
        whatever the copy raised.
    """
    import tensorflow as tf

    fd, path = tempfile.mkstemp(prefix=f"tflab_fix_{src.name}_", suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(module_source)
    lines = module_source.splitlines(keepends=True)
    linecache.cache[path] = (len(module_source), None, lines, path)
    namespace = dict(src.namespace)
    namespace.update(extra or {})
    namespace["__file__"] = path
    try:
        exec(compile(module_source, path, "exec"), namespace)
        fn = namespace[src.name]
        before: set = set()
        if src.instance is not None:
            before = set(vars(src.instance)) if hasattr(src.instance, "__dict__") else set()
            fn = types.MethodType(fn, src.instance)
        try:
            concrete = tf.function(fn, autograph=autograph).get_concrete_function(*args, **kwargs)
            # The user's tf.Variables the copy captured get their values back after the run.
            saved = [(v, tf.identity(v.read_value())) for v in concrete.variables]
            try:
                if inputs is None:
                    out = concrete(*materialize(args), **materialize(kwargs))
                else:
                    out = [concrete(*a, **k) for a, k in inputs]
            finally:
                for v, value in saved:
                    v.assign(value)
        finally:
            if src.instance is not None and hasattr(src.instance, "__dict__"):
                for k in [k for k in vars(src.instance) if k not in before]:
                    delattr(src.instance, k)  # the guard's attribute: the user's object is left as it was
        return out, concrete
    finally:
        linecache.cache.pop(path, None)
        try:
            os.remove(path)
        except OSError:
            pass


def run_source(src: FunctionSource, module_source: str, extra: dict) -> Callable:
    """The function ``module_source`` defines, executed in a copy of ``src``'s namespace with
    ``extra`` added (a fresh tf.Variable for a global): the user's own module is not touched."""
    namespace = dict(src.namespace)
    namespace.update(extra)
    path = f"<tflab fix of {src.name}>"
    linecache.cache[path] = (len(module_source), None, module_source.splitlines(keepends=True), path)
    exec(compile(module_source, path, "exec"), namespace)
    return namespace[src.name]


def trace_fixed(src: FunctionSource, module_source: str, args: tuple, kwargs: dict,
                materialize: Callable[[Any], Any]) -> str | None:
    """`run_fixed`, as None when the copy traced and ran, else TF's error type and first line."""
    try:
        run_fixed(src, module_source, args, kwargs, materialize)
        return None
    except Exception as e:  # the fix did not trace: report TF's first line
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}"


def function_def_text(module_source: str) -> str:
    """The rewritten source without tflab's blank lines: what the fix shows."""
    return module_source.rstrip("\n")
