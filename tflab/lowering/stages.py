"""The levels `tflab.lower` makes in the caller's process: python, autograph, funcgraph, tf_mlir, stablehlo, hlo.

Each producer returns ``(text, ops, pieces)``: the level's text, op name →
count in its own names, and the `Piece` list provenance reads. What ties a
piece to the user's code at each level:

* **funcgraph**: the op itself (its full name, ``while/mul`` for an op of a
  While body) and its traceback (``Operation.traceback``), whose innermost
  frame outside TF, Keras and tflab is the user's line;
* **tf_mlir**: ``tf.mlir.experimental.convert_function(…, show_debug_info=True)``
  gives each op a location whose name is the FuncGraph node name (inside a
  While body, the body's own name, prefixed here with the While op's);
* **stablehlo**: the ``loc("op_name")`` tf2xla gives each op;
* **hlo**: each instruction's ``metadata={op_name=…}``;
* **python / autograph**: source lines; an AutoGraph line is tied to the user
  line whose statement it converts (the k-th ``while``/``for``/``if`` to the
  k-th ``ag__.while_stmt``/``for_stmt``/``if_stmt`` in the order AutoGraph
  writes them, innermost first; other statements by the names they call).
"""

from __future__ import annotations

import ast
import collections
import inspect
import os
import re
import textwrap
from typing import Any

from tflab.lowering.hlo import opcode_counts, parse_module
from tflab.lowering.records import Piece

__all__ = ["OpRecord", "op_index", "user_frame", "python_stage", "autograph_stage", "funcgraph_stage",
           "tf_mlir_stage", "stablehlo_stage", "hlo_stage", "short_line"]

_TFLAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# The lab's own custom op package (its Python wrapper makes the op): a library frame like tflab's.
_CUSTOM_OPS_DIR = os.path.join(os.path.dirname(os.path.dirname(_TFLAB_DIR)), "custom_ops") + os.sep


def _library_frame(filename: str) -> bool:
    from tflab._user.usercode import is_library_file

    return (filename.startswith("<") or filename.startswith(_TFLAB_DIR) or filename.startswith(_CUSTOM_OPS_DIR)
            or "__autograph_generated" in filename or is_library_file(filename))


_WRAPPER = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "build.py"), "flat")


def user_frame(traceback, memo: dict | None = None) -> tuple[str, int, str] | None:
    """The innermost frame of an op's traceback outside TF, Keras, absl and tflab: (path, line, code).

    Only frames inside the lowered call count (below `tflab.lowering.build`'s
    wrapper): an op a Keras layer made has no user line, not the line that
    called `tflab.lower`. ``memo`` (file name → library or not) is shared by the
    calls of one `op_index`: a model's ops repeat the same few hundred files
    tens of thousands of times (MobileNetV2: 43,903 frames, 1.8 CPU s unshared).
    """
    memo = {} if memo is None else memo
    frames = list(traceback or ())
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        if (getattr(f, "filename", None) or f[0]) == _WRAPPER[0] and (getattr(f, "name", None) or f[2]) == _WRAPPER[1]:
            frames = frames[i + 1:]
            break
    for frame in reversed(frames):
        filename = getattr(frame, "filename", None) or frame[0]
        library = memo.get(filename)
        if library is None:
            library = memo[filename] = _library_frame(filename)
        if not library:
            lineno = getattr(frame, "lineno", None) or frame[1]
            code = getattr(frame, "line", None) or ""
            return filename, int(lineno), (code or "").strip()
    return None


def short_line(path: str, line: int) -> str:
    return f"{os.path.basename(path)}:{line}"


class OpRecord:
    """One FuncGraph op (nested ones included) with its user line."""

    __slots__ = ("name", "type", "path", "line", "code", "depth")

    def __init__(self, name, type_, path, line, code, depth):
        self.name, self.type, self.path, self.line, self.code, self.depth = name, type_, path, line, code, depth

    @property
    def source(self) -> str:
        return short_line(self.path, self.line) if self.path else ""


def op_index(graph) -> list[OpRecord]:
    """Every op of the FuncGraph and of its If/While branch and body graphs, with full names."""
    from tflab._tf.autograph import branch_graphs

    out: list[OpRecord] = []
    memo: dict[str, bool] = {}

    def walk(g, depth: int) -> None:
        for op in g.get_operations():
            where = user_frame(op.traceback, memo)
            out.append(OpRecord(op.name, op.type, where[0] if where else "", where[1] if where else 0,
                                where[2] if where else "", depth))
            for sub in branch_graphs(op):
                walk(sub, depth + 1)  # while_v2/cond_v2 name body ops under the op's scope already

    walk(graph, 0)
    return out


# --------------------------------------------------------------------------- python and autograph


def _callee(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _callee(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return ""


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@", ast.Pow: "**",
           ast.FloorDiv: "//", ast.Mod: "%"}


def python_source(fn: Any) -> tuple[str, int, list[str]] | None:
    """(file, first line, source lines) of a Python function, or None when Python cannot show it."""
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError):
        return None
    return os.path.abspath(path), first, lines


def python_stage(fn: Any, layers: list | None) -> tuple[str, dict, list[Piece], str]:
    """The user's Python: its source (a Functional Keras model: its layers), calls and operators counted."""
    if layers is not None and fn is None:
        text = "".join(f"{layer.name}: {type(layer).__name__}\n" for layer in layers)
        ops = collections.Counter(type(layer).__name__ for layer in layers)
        return text, dict(ops.most_common()), [], "a Functional Keras model: its layers, in order"
    src = python_source(fn)
    if src is None:
        return "", {}, [], ""
    path, first, lines = src
    text = "".join(lines)
    ops: collections.Counter = collections.Counter()
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                ops[_callee(node.func) or "call"] += 1
            elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
                ops[_BINOPS[type(node.op)]] += 1
            elif isinstance(node, (ast.While, ast.For, ast.If)):
                ops[type(node).__name__.lower()] += 1
    pieces = [Piece(f"{short_line(path, first + i)}: {line.rstrip()}", lines=(short_line(path, first + i),),
                    key=f"{path}:{first + i}")
              for i, line in enumerate(lines) if line.strip() and not line.strip().startswith("#")]
    return text, dict(ops.most_common()), pieces, f"source of {path}"


_AG_CALL_RE = re.compile(r"\bag__\.(\w+)")
_STMT_OPERATOR = {ast.While: "while_stmt", ast.For: "for_stmt", ast.If: "if_stmt"}


def _postorder(node: ast.AST, kinds: tuple, out: list) -> list:
    for child in ast.iter_child_nodes(node):
        _postorder(child, kinds, out)
    if isinstance(node, kinds):
        out.append(node)
    return out


def autograph_stage(fn: Any) -> tuple[str, dict, list[Piece], str]:
    """The code AutoGraph generates for ``fn`` (``tf.autograph.to_code``), its ``ag__`` calls counted."""
    import tensorflow as tf

    src = python_source(fn)
    text = tf.autograph.to_code(fn)
    ops = collections.Counter(f"ag__.{m}" for m in _AG_CALL_RE.findall(text))
    conv_lines = text.splitlines()
    pieces: list[Piece] = []
    if src is not None:
        path, first, lines = src
        try:
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except SyntaxError:
            tree = None
        matched: dict[int, str] = {}
        if tree is not None:
            for kind, operator in _STMT_OPERATOR.items():
                stmts = _postorder(tree, (kind,), [])
                calls = [i for i, line in enumerate(conv_lines) if f"ag__.{operator}(" in line]
                for stmt, ci in zip(stmts, calls):
                    matched[ci] = short_line(path, first + stmt.lineno - 1)
            simple = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.Return, ast.Expr))]
            for stmt in simple:
                names = {n.attr for n in ast.walk(stmt) if isinstance(n, ast.Attribute)}
                names |= {_callee(n.func).rsplit(".", 1)[-1] for n in ast.walk(stmt) if isinstance(n, ast.Call)}
                names.discard("")
                plain = {n.func.id for n in ast.walk(stmt) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                targets = [t.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)])
                           if isinstance(t, ast.Name)]
                where = short_line(path, first + stmt.lineno - 1)
                for ci, line in enumerate(conv_lines):
                    if ci in matched:
                        continue
                    if names and "ag__." in line and any(re.search(rf"\.{re.escape(n)}\b", line) for n in names):
                        matched[ci] = where
                    elif plain and any(f"ag__.converted_call(ag__.ld({n})" in line for n in plain):
                        matched[ci] = where  # a call of a plain name: model(x) → converted_call(ag__.ld(model), …)
                    elif not names and targets and re.match(rf"\s*{re.escape(targets[0])} \S?=", line):
                        matched[ci] = where
        for ci, line in enumerate(conv_lines):
            if ci in matched:
                pieces.append(Piece(f"line {ci + 1}: {line.strip()}", lines=(matched[ci],)))
    return text, dict(ops.most_common()), pieces, "tf.autograph.to_code"


# --------------------------------------------------------------------------- graph levels


def funcgraph_stage(graph, index: list[OpRecord]) -> tuple[str, dict, list[Piece], str]:
    """The FuncGraph: one line per op (nested body ops indented); ops = TF's own top-level op types."""
    ops = collections.Counter(op.type for op in graph.get_operations())
    lines, pieces = [], []
    for rec in index:
        where = f"  # {rec.source}" if rec.source else ""
        line = f"{'  ' * rec.depth}{rec.name} = {rec.type}{where}"
        lines.append(line)
        pieces.append(Piece(line.strip(), names=(rec.name,), lines=(rec.source,) if rec.source else (), key=rec.name))
    return "\n".join(lines) + "\n", dict(ops.most_common()), pieces, "ConcreteFunction.graph, If/While bodies nested"


_LOC_DEF_RE = re.compile(r"^(#loc\d*) = (.*)$", re.M)
_LOC_NAME_RE = re.compile(r'loc\("([^"]+)"\(')
_LOC_PLAIN_RE = re.compile(r'^loc\("([^"]+)"\)$')
_LOC_REF_RE = re.compile(r"(#loc\d*)")
_TRAILING_LOC_RE = re.compile(r"loc\((#loc\d*|\"[^\"]*\")\)\s*$")


def _loc_resolver(text: str, mlir: bool):
    defs = dict(_LOC_DEF_RE.findall(text))
    cache: dict[str, tuple[str, ...]] = {}

    def names(ref: str, depth: int = 0) -> tuple[str, ...]:
        if ref in cache:
            return cache[ref]
        cache[ref] = ()
        body = defs.get(ref, "")
        found: list[str] = []
        if mlir:  # the tf dialect: the node name is a NameLoc around its callsite
            found = _LOC_NAME_RE.findall(body)[:1]
        else:
            m = _LOC_PLAIN_RE.match(body)
            if m:
                found = [m.group(1)]
        if not found and depth < 8:
            for sub in _LOC_REF_RE.findall(body)[:4]:
                found.extend(names(sub, depth + 1))
                if found:
                    break
        cache[ref] = tuple(found)
        return cache[ref]

    return names


def _op_lines(text: str, op_re: re.Pattern) -> list[tuple[int, str, str]]:
    """(line index, op name, location ref) of each op line; an op with regions takes the loc of its closing ``}``."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = op_re.search(line)
        if not m:
            continue
        loc = _TRAILING_LOC_RE.search(line)
        if loc is None:
            indent = len(line) - len(line.lstrip())
            for j in range(i + 1, min(len(lines), i + 20000)):
                other = lines[j]
                other_indent = len(other) - len(other.lstrip())
                if other_indent < indent or other_indent == indent and op_re.search(other):
                    break  # left the op's block, or the next op began: no location
                if other.strip().startswith(("}", ")")) and other_indent == indent:
                    loc = _TRAILING_LOC_RE.search(other)
                    if loc:
                        break
        out.append((i, m.group(1), loc.group(1) if loc else ""))
    return out


_TF_OP_RE = re.compile(r'"(tf\.\w+)"\(')
_FUNC_RE = re.compile(r"^\s*func\.func (?:private )?@([\w.]+)\(")
_BRANCH_ATTR_RE = re.compile(r"\b(?:body|cond|then_branch|else_branch|f)\s*=\s*@([\w.]+)")


def tf_mlir_stage(concrete) -> tuple[str, dict, list[Piece], str]:
    """The tf dialect (``tf.mlir.experimental.convert_function``, with locations), ``tf.*`` ops counted."""
    import tensorflow as tf

    text = tf.mlir.experimental.convert_function(concrete, show_debug_info=True)
    ops = collections.Counter(_TF_OP_RE.findall(text))
    resolve = _loc_resolver(text, mlir=True)
    lines = text.splitlines()
    func_of, current = {}, ""
    for i, line in enumerate(lines):
        m = _FUNC_RE.match(line)
        if m:
            current = m.group(1)
        func_of[i] = current
    prefix: dict[str, str] = {}
    pieces = []
    for i, op, loc in _op_lines(text, _TF_OP_RE):
        names = resolve(loc) if loc.startswith("#") else ((loc.strip('"'),) if loc else ())
        pre = prefix.get(func_of[i], "")
        # A body op's location reads "while/mul@while_body_18": the node name, then its function.
        full = tuple(n.split("@")[0] if "@" in n else (n if n.startswith(pre) else pre + n) for n in names)
        for callee in _BRANCH_ATTR_RE.findall(lines[i]):
            if full:
                prefix.setdefault(callee, full[0] + "/")
        pieces.append(Piece(_cut(lines[i].strip()), names=full, key=op))
    return text, dict(ops.most_common()), pieces, "tf.mlir.experimental.convert_function(show_debug_info=True)"


_SHLO_OP_RE = re.compile(r'(?:=\s*|^\s*)"?(stablehlo\.[\w.]+)')


def stablehlo_stage(ir_generator) -> tuple[str, dict, list[Piece], str]:
    """StableHLO (``experimental_get_compiler_ir(...)(stage="stablehlo")``), ``stablehlo.*`` ops counted."""
    text = ir_generator(stage="stablehlo")
    resolve = _loc_resolver(text, mlir=False)
    ops: collections.Counter = collections.Counter()
    pieces = []
    lines = text.splitlines()
    for i, op, loc in _op_lines(text, _SHLO_OP_RE):
        ops[op] += 1
        names = resolve(loc) if loc.startswith("#") else ((loc.strip('"'),) if loc else ())
        pieces.append(Piece(_cut(lines[i].strip()), names=names, key=op))
    return text, dict(ops.most_common()), pieces, 'experimental_get_compiler_ir(...)(stage="stablehlo")'


def hlo_stage(text: str, note: str, call_levels: int = 0) -> tuple[str, dict, list[Piece], str]:
    """HLO text (unoptimized or optimized): opcodes counted, one piece per instruction.

    ``call_levels``: call ops in front of every op name (2 in the child's dump, `tflab.lowering.hlo`).
    """
    comps = parse_module(text, call_levels)
    pieces = [Piece(_cut(ins.line), names=ins.op_names, key=ins.name) for c in comps for ins in c.instructions]
    return text, opcode_counts(comps), pieces, note


def _cut(line: str, limit: int = 240) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"
