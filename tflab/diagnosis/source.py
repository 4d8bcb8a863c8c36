"""The user's source, read once: statements by line, shape reads, Python-state stores, and
AutoGraph's statement map (which ``if``/``for``/``while`` became an ``If``/``While`` op)."""

from __future__ import annotations

import ast
import linecache
from typing import Any, Iterator

from tflab.diagnosis.fixes import dotted as _dotted

_CONTAINER_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault",
                                "appendleft", "__setitem__"})

# --------------------------------------------------------------------------- source


class Source:
    """The user's file parsed once: statements by line, and enclosing functions."""

    _cache: dict[str, "Source | None"] = {}

    def __init__(self, filename: str, tree: ast.AST, lines: list[str]):
        self.filename, self.tree, self.lines = filename, tree, lines

    @classmethod
    def of(cls, filename: str) -> "Source | None":
        if not filename:
            return None
        lines = linecache.getlines(filename)
        key = filename
        cached = cls._cache.get(key)
        if cached is not None and cached.lines == lines:
            return cached
        try:
            tree = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            return None
        src = cls(filename, tree, lines)
        cls._cache[key] = src
        return src

    def text(self, line: int | None) -> str:
        if not line or line > len(self.lines):
            return ""
        return self.lines[line - 1].strip()

    def stmt_at(self, line: int) -> ast.stmt | None:
        """The innermost statement spanning ``line``; a compound statement when
        ``line`` is its header line."""
        best = None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or (node.end_lineno - node.lineno) <= (best.end_lineno - best.lineno):
                    best = node
        return best

    def function_at(self, line: int) -> ast.AST | None:
        best = None
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                    and node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
        return best

    def loops_around(self, line: int) -> list[ast.stmt]:
        """for/while/if statements whose body or orelse holds ``line``, innermost last."""
        fn = self.function_at(line)
        root = fn if fn is not None else self.tree
        out = []
        for node in ast.walk(root):
            if isinstance(node, (ast.For, ast.While, ast.If)) and node.lineno < line <= node.end_lineno:
                out.append(node)
        return sorted(out, key=lambda n: n.lineno)


def _header_nodes(node: ast.stmt) -> list[ast.AST]:
    """The expressions of a statement's own line(s): an if/while test, a for's
    target and iterable; the whole statement for a simple one."""
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, ast.For):
        return [node.target, node.iter]
    if isinstance(node, (ast.With,)):
        return list(node.items)
    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Try)):
        return []
    return [node]


def walk_header(node: ast.stmt) -> Iterator[ast.AST]:
    for h in _header_nodes(node):
        yield from ast.walk(h)


def shape_reads(node: ast.stmt) -> list[tuple[str, int, ast.AST]]:
    """``NAME.shape[i]`` / ``NAME.get_shape()[i]`` / ``len(NAME)`` reads in the
    statement's own line(s): (name, dim, node)."""
    out = []
    for n in walk_header(node):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) \
                and isinstance(n.slice.value, int):
            base = n.value
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) \
                    and base.func.attr in ("get_shape", "as_list") and not base.args:
                base = base.func.value
                if isinstance(base, ast.Attribute) and base.attr == "shape":
                    base = base.value
            elif isinstance(base, ast.Attribute) and base.attr == "shape":
                base = base.value
            else:
                continue
            if isinstance(base, ast.Name):
                out.append((base.id, n.slice.value, n))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len" \
                and len(n.args) == 1 and isinstance(n.args[0], ast.Name):
            out.append((n.args[0].id, 0, n))
    return out


def unknown_dim_reads(fn: Any, input_signature: Any) -> list[tuple[str, str, str, int, Any]]:
    """Each static-dim read in ``fn``'s own source that ``input_signature`` leaves None.

    Args:
        fn: a Python function or a `tf.function` (its ``python_function`` is read).
        input_signature: one `tf.TensorSpec` per positional parameter (``self`` skipped).

    Returns:
        ``(FILE:LINE, the read's source, parameter, dim, its TensorSpec)`` per read
        (`shape_reads`), ``len(x)`` reads giving ``"len(x)"``; [] without source.
    """
    import inspect
    import os
    import textwrap

    import tensorflow as tf

    target = inspect.unwrap(getattr(fn, "python_function", fn))
    try:
        lines, start = inspect.getsourcelines(target)
        filename = inspect.getsourcefile(target) or ""
        params = [p.name for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, ValueError, SyntaxError):
        return []
    if params and params[0] == "self" and inspect.ismethod(getattr(fn, "python_function", fn)):
        params = params[1:]
    specs = {n: s for n, s in zip(params, input_signature or ()) if isinstance(s, tf.TensorSpec)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        for name, dim, n in shape_reads(node):
            spec = specs.get(name)
            if spec is None or spec.shape.rank is None:
                continue
            if not -spec.shape.rank <= dim < spec.shape.rank or spec.shape[dim] is not None:
                continue
            text = f"len({name})" if isinstance(n, ast.Call) else ast.unparse(n)
            out.append((f"{os.path.basename(filename)}:{n.lineno + start - 1}", text, name, dim, spec))
    return out


def static_dim(value: Any, dim: int) -> tuple[bool, Any]:
    """(is a tensor with a known rank, the static dim or None)."""
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(shape, "rank") or shape.rank is None:
        return False, None
    try:
        return True, shape[dim]
    except (IndexError, ValueError):
        return False, None


def container_stores(stmts: list[ast.stmt], names: set[str] | None = None) -> list[tuple[int, str]]:
    """(line, holder) of statements that put a value into Python state: a
    ``holder.append(...)``-style call, ``holder[k] = ...``, ``holder += [...]``,
    ``obj.attr = ...``. With ``names``, only holders of those names."""
    out = []
    for st in stmts:
        for n in ast.walk(st):
            holder = None
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr in _CONTAINER_METHODS:
                holder = _dotted(n.func.value)
            elif isinstance(n, (ast.Assign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, ast.Subscript):
                        holder = _dotted(t.value)
                    elif isinstance(t, ast.Attribute):
                        holder = _dotted(t)
                    elif isinstance(n, ast.AugAssign) and isinstance(t, ast.Name) \
                            and isinstance(n.value, (ast.List, ast.ListComp, ast.Tuple)):
                        holder = t.id
            if holder and (names is None or holder in names or holder.split(".")[0] in names):
                out.append((n.lineno, holder))
    return sorted(set(out))


def assignments_before(src: Source, name: str, before: int) -> int | None:
    """The last line before ``before``, in the same function, that assigns ``name``."""
    fn = src.function_at(before)
    root = fn if fn is not None else src.tree
    best = None
    for n in ast.walk(root):
        targets = []
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign)):
            targets = [n.target]
        for t in targets:
            if any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(t)) \
                    and n.lineno < before and (best is None or n.lineno > best):
                best = n.lineno
    if best is None and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if name in {a.arg for a in fn.args.args + fn.args.kwonlyargs}:
            return fn.lineno
    return best


# --------------------------------------------------------------------------- statement map


class StatementMap:
    """Which if/for/while became graph control flow, from `tflab.autograph`'s
    trace-time counter, plus which branch/body FuncGraph belongs to which line."""

    def __init__(self, counter=None):
        self.counter = counter

    def graph_lines(self) -> dict[int, str]:
        """line -> kind for statements reached that did not run as Python."""
        out: dict[int, str] = {}
        if self.counter is None:
            return out
        for rec in self.counter.by_graph.values():
            for (line, kind) in rec["reached"]:
                if (line, kind) not in rec["python"]:
                    out[line] = kind
        return out

    def owner_of(self, graph) -> tuple[int, str] | None:
        """(line, kind) of the statement whose body/branch FuncGraph ``graph`` is."""
        if self.counter is None:
            return None
        return getattr(self.counter, "graph_owner", {}).get(id(graph))


def recorder(filename: str, first: int, last: int):
    """A `tflab._user.source_map.TraceCounter` that also remembers, for each body
    FuncGraph it sees, the statement running it."""
    from tflab._user.source_map import TraceCounter
    from tflab._tf.autograph import current_graph

    class _Recorder(TraceCounter):
        def __init__(self, *a):
            super().__init__(*a)
            self.graph_owner: dict[int, tuple[int, str]] = {}

        def _records(self):
            if self._stack:
                self.graph_owner.setdefault(id(current_graph()), self._stack[-1])
            return super()._records()

    return _Recorder(filename, first, last)


def owner_from_ops(graph, src: Source | None) -> tuple[int, str] | None:
    """(line, kind) of the graph if/for/while whose body made ``graph``'s ops, read
    from the ops' creation tracebacks (used when no statement map was recorded):
    the innermost frame, in the user's file, on an if/for/while header line."""
    from tflab._user.source_map import same_file

    if src is None or graph is None:
        return None
    kinds = {ast.For: "for", ast.While: "while", ast.If: "if"}
    found: dict[int, int] = {}
    for op in getattr(graph, "get_operations", lambda: [])():
        last = None
        for frame in op.traceback or ():
            if same_file(frame.filename, src.filename):
                node = src.stmt_at(frame.lineno)
                if isinstance(node, tuple(kinds)) and node.lineno == frame.lineno:
                    last = node
        if last is not None:
            found[last.lineno] = found.get(last.lineno, 0) + 1
    if not found:
        return None
    line = max(found, key=lambda ln: (found[ln], ln))
    return line, kinds[type(src.stmt_at(line))]


