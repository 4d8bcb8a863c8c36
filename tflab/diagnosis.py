"""Why did my tf.function fail? The culprit line, the kind of mistake, the fix.

`diagnose` traces a function the way `autograph_diff` does, runs the
ConcreteFunction once, and when either step raises it classifies the failure by
the mechanism that raised it, not by the message text:

* **the frame that raised**: TF raises each of these mistakes from one place,
  and that frame's locals hold the objects involved. AutoGraph's checks in
  ``autograph/operators/control_flow.py`` (``verify_single_cond_var``: a
  variable None or of another dtype in one branch of an ``If``;
  ``_verify_single_loop_var``: a loop variable whose dtype/shape changes;
  ``verify_loop_init_vars``: a ``return`` in a ``While``), ``Tensor._disallow_*``
  (``framework/tensor.py``: a symbolic tensor used as a Python bool or
  iterated), ``Tensor.__getattr__`` (``.numpy()``), ``op_def_library``'s
  ``_ExtractInputsAndAttrs`` (an op's inputs of two dtypes; the frame holds the
  operands) and ``CaptureContainer.capture_by_value``
  (``core/function/capture/capture_container.py``: the tensor that cannot be
  captured, whose ``.graph`` says where it was made);
* **the culprit statement's AST**, read from the user's file at the line
  AutoGraph maps the error to (``ag_error_metadata.translated_stack``,
  ``autograph/pyct/error_utils.py``), evaluated against the failing frame's
  locals where a static shape matters (``x.shape[0]`` is None);
* **AutoGraph's statement map** (`tflab.autograph`'s trace-time counter): which
  ``if``/``for``/``while`` became an ``If``/``While`` op, and which branch or
  body FuncGraph a tensor belongs to.

Traceback filtering (``tf.debugging.disable_traceback_filtering``) is turned
off for the trace so the raising frame is kept. A failure no rule explains is
``unrecognized`` and still names the user's line and TF's first line.

The engine is `diagnose_exception`: other modules that caught a tracing error
(`trace_and_inspect`, `autograph_diff`, `compare_modes`, `RetraceProbe`) call it
to turn TF's wall of text into one `Diagnosis`.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import linecache
import os
import re
import textwrap
from typing import Any, Callable, Iterator

from tflab._usercode import user_entry
from tflab.errors import UsageError

# Size given to a None dim when a TensorSpec is materialized for the one call.
UNKNOWN_DIM_SIZE = 2

_CONTAINER_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault",
                                "appendleft", "__setitem__"})
_SKIP_PATHS = (os.sep + "tensorflow" + os.sep, os.sep + "keras" + os.sep, os.sep + "tflab" + os.sep,
               os.sep + "tf_keras" + os.sep, os.sep + "absl" + os.sep, os.sep + "numpy" + os.sep)


@dataclasses.dataclass(frozen=True, repr=False)
class Diagnosis:
    """What went wrong when a function was traced and run as a `tf.function`.

    Attributes:
        function: the function's qualified name.
        ok: True when the trace and the one call both succeeded.
        kind: a short stable id of the mistake (``python-list-in-tensor-loop``,
            ``tensor-as-python-bool``, ``shape-dim-is-none``,
            ``branch-variable-undefined``, ``branch-dtype-mismatch``,
            ``loop-variable-dtype-changes``, ``loop-variable-shape-changes``,
            ``loop-variable-undefined``, ``numpy-on-symbolic-tensor``,
            ``return-in-tensor-loop``, ``comprehension-over-tensor``,
            ``tensor-iterated-in-python``, ``dtype-mismatch``,
            ``python-state-in-tensor-if``, ``tensor-from-another-funcgraph``,
            ``runtime-op-error`` (the trace was fine, an op failed when run),
            ``unrecognized``), or None when ``ok``.
        line: the culprit line (1-based) in ``filename``: the line to change,
            which is not always the line TF's traceback ends on; None if unknown.
        statement: that line's source text, stripped.
        filename: the file of the culprit line.
        error: TF's error type and its first meaningful line.
        explanation: what TF did, e.g. "the for over a tensor at line 4 became
            a While op; …".
        fix: one sentence naming the API to use.
        stage: ``"trace"`` (get_concrete_function raised), ``"call"`` (the
            ConcreteFunction raised when run), ``"silent"`` (nothing raised, but
            the graph does not do what the Python reads: a list appended to in
            a loop that became a While op gets one entry; ``error`` is empty)
            or ``""`` when ok.
        fixed_source: the function rewritten with the fix (plus what the fix
            moved to module level), where the rule can rewrite it; "" otherwise.
        fix_traced: True when tflab traced and ran ``fixed_source`` on the same
            arguments (`tflab.diagnosis_fixes.trace_fixed`), False when that
            failed, None when the fix was not tried.
    """

    function: str
    ok: bool
    kind: str | None = None
    line: int | None = None
    statement: str = ""
    filename: str = ""
    error: str = ""
    explanation: str = ""
    fix: str = ""
    stage: str = ""
    fixed_source: str = ""
    fix_traced: bool | None = None

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        if self.ok:
            return f"Diagnosis({self.function}: ok)"
        where = f" at line {self.line}: {self.statement!r}" if self.line else ""
        return f"Diagnosis({self.function}: {self.kind}{where})"

    def summary(self) -> str:
        """One line: kind, culprit line and the fix (what other verbs print)."""
        if self.ok:
            return f"{self.function}: traced and ran"
        where = f" at {os.path.basename(self.filename)}:{self.line} `{self.statement}`" if self.line else ""
        return f"{self.kind}{where}: {self.fix}"

    def to_text(self) -> str:
        """At most about 10 lines: the culprit, the kind, TF's error, what TF did, the fix."""
        if self.ok:
            return f"{self.function}: ok (traced and ran once)"
        where = f"{self.filename}:{self.line}" if self.line else "(no line in the user's code)"
        head = ("traced and ran, but not as the Python reads" if self.stage == SILENT_STAGE
                else f"{self.stage} failed")
        lines = [f"{self.function}: {self.kind} ({head})",
                 f"  culprit: {where}"]
        if self.statement:
            lines.append(f"      {self.statement}")
        lines.append(f"  TF said: {self.error or 'nothing (no error)'}")
        if self.explanation:
            lines.append(f"  why: {self.explanation}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        if self.fix_traced is not None:
            lines.append("  fix checked: tflab applied it to a copy of the function, which "
                         + ("traced and ran" if self.fix_traced else "still failed"))
        src = self.fixed_source.splitlines()
        if self.fix_traced and 0 < len(src) <= 12:
            lines.append("  the copy that traced:")
            lines += [f"      {ln}" for ln in src]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- frames


@dataclasses.dataclass
class _Frame:
    filename: str
    lineno: int
    name: str
    locals: dict


def _frames(exc: BaseException) -> list[_Frame]:
    """Every traceback frame of ``exc``, outermost first, with its locals.

    AutoGraph re-raises an error from converted code as a new exception of the
    same type (``ag_error_metadata.to_exception``, ``autograph/impl/api.py``)
    whose traceback stops at the re-raise; the original, with the raising
    frames, is its ``__context__``. Those frames are appended after.
    """
    out = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            f = tb.tb_frame
            try:
                loc = dict(f.f_locals)
            except Exception:  # a frame whose locals cannot be read
                loc = {}
            out.append(_Frame(f.f_code.co_filename, tb.tb_lineno, f.f_code.co_name, loc))
            tb = tb.tb_next
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or not (type(nxt) is type(exc) or hasattr(exc, "ag_error_metadata")):
            break
        exc = nxt
    return out


def _is_generated(filename: str) -> bool:
    return "__autograph_generated" in filename


def _is_user_file(filename: str) -> bool:
    if not filename or filename.startswith("<") or _is_generated(filename):
        return False
    if any(s in filename for s in _SKIP_PATHS):
        return False
    return not filename.startswith(os.path.dirname(os.__file__))


def _user_site(exc: BaseException, frames: list[_Frame]) -> tuple[str, int | None, dict]:
    """(file, line, locals) of the innermost user frame.

    Converted code runs from AutoGraph's generated file; its errors carry
    ``ag_error_metadata.translated_stack`` with the frames mapped back to the
    user's lines. The locals come from the innermost raw frame that is user
    code or AutoGraph-generated code (the generated function keeps the user's
    variable names).
    """
    loc: dict = {}
    # Frames before the first TF frame are the caller's (the line that called
    # get_concrete_function), not the function's code.
    first_tf = next((i for i, fr in enumerate(frames)
                     if os.sep + "tensorflow" + os.sep in fr.filename), 0)
    frames = frames[first_tf:]
    for fr in reversed(frames):
        if _is_user_file(fr.filename) or _is_generated(fr.filename):
            loc = fr.locals
            if _is_user_file(fr.filename):
                # Unconverted user code (autograph=False, do_not_convert, a helper
                # AutoGraph skipped) runs from the user's file: its line is real.
                return fr.filename, fr.lineno, loc
            break
    meta = getattr(exc, "ag_error_metadata", None)
    for fr in reversed(getattr(meta, "translated_stack", None) or ()):
        if _is_user_file(fr.filename):
            return fr.filename, fr.lineno, loc
    for fr in reversed(frames):
        if _is_user_file(fr.filename):
            return fr.filename, fr.lineno, loc
    return "", None, loc


def _frame_named(frames: list[_Frame], *names: str) -> _Frame | None:
    for fr in reversed(frames):
        if fr.name in names:
            return fr
    return None


# --------------------------------------------------------------------------- source


class _Source:
    """The user's file parsed once: statements by line, and enclosing functions."""

    _cache: dict[str, "_Source | None"] = {}

    def __init__(self, filename: str, tree: ast.AST, lines: list[str]):
        self.filename, self.tree, self.lines = filename, tree, lines

    @classmethod
    def of(cls, filename: str) -> "_Source | None":
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


def _walk_header(node: ast.stmt) -> Iterator[ast.AST]:
    for h in _header_nodes(node):
        yield from ast.walk(h)


def _shape_reads(node: ast.stmt) -> list[tuple[str, int, ast.AST]]:
    """``NAME.shape[i]`` / ``NAME.get_shape()[i]`` / ``len(NAME)`` reads in the
    statement's own line(s): (name, dim, node)."""
    out = []
    for n in _walk_header(node):
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


def _static_dim(value: Any, dim: int) -> tuple[bool, Any]:
    """(is a tensor with a known rank, the static dim or None)."""
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(shape, "rank") or shape.rank is None:
        return False, None
    try:
        return True, shape[dim]
    except (IndexError, ValueError):
        return False, None


def _container_stores(stmts: list[ast.stmt], names: set[str] | None = None) -> list[tuple[int, str]]:
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


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (one implementation: `tflab.diagnosis_fixes`)."""
    from tflab.diagnosis_fixes import _dotted as dotted

    return dotted(node)


def _assignments_before(src: _Source, name: str, before: int) -> int | None:
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


class _StatementMap:
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


def _recorder(filename: str, first: int, last: int):
    """A `tflab.autograph._TraceCounter` that also remembers, for each body
    FuncGraph it sees, the statement running it."""
    from tflab._source_map import _TraceCounter

    class _Recorder(_TraceCounter):
        def __init__(self, *a):
            super().__init__(*a)
            self.graph_owner: dict[int, tuple[int, str]] = {}

        def _records(self):
            from tensorflow.python.framework import ops

            if self._stack:
                self.graph_owner.setdefault(id(ops.get_default_graph()), self._stack[-1])
            return super()._records()

    return _Recorder(filename, first, last)


def _owner_from_ops(graph, src: _Source | None) -> tuple[int, str] | None:
    """(line, kind) of the graph if/for/while whose body made ``graph``'s ops, read
    from the ops' creation tracebacks (used when no statement map was recorded):
    the innermost frame, in the user's file, on an if/for/while header line."""
    from tflab._source_map import _same_file

    if src is None or graph is None:
        return None
    kinds = {ast.For: "for", ast.While: "while", ast.If: "if"}
    found: dict[int, int] = {}
    for op in getattr(graph, "get_operations", lambda: [])():
        last = None
        for frame in op.traceback or ():
            if _same_file(frame.filename, src.filename):
                node = src.stmt_at(frame.lineno)
                if isinstance(node, tuple(kinds)) and node.lineno == frame.lineno:
                    last = node
        if last is not None:
            found[last.lineno] = found.get(last.lineno, 0) + 1
    if not found:
        return None
    line = max(found, key=lambda ln: (found[ln], ln))
    return line, kinds[type(src.stmt_at(line))]


# --------------------------------------------------------------------------- engine


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


def diagnose_exception(exc: BaseException, fn: Callable | None = None, *, stage: str = "trace",
                       concrete: Any = None, graph_labels: dict | None = None,
                       args: tuple = (), kwargs: dict | None = None) -> Diagnosis:
    """Classifies an exception raised while tracing or calling ``fn``.

    The helper behind `diagnose` that other modules call when they caught a
    failed trace themselves (no statement map then: graph statements are read
    from the frames and the op tracebacks instead).

    Args:
        exc: the exception TF raised (the original, not a tflab wrapper).
        fn: the function that was traced, for its name, options and Python state.
        stage: ``"trace"`` or ``"call"``.
        concrete: the ConcreteFunction, for a call-time failure.
        graph_labels: ``{id(FuncGraph): "trace #1"}`` to name the trace a foreign
            tensor belongs to (RetraceProbe passes its traces).
        args, kwargs: what ``fn`` was traced with (TensorSpecs or values).

    Returns:
        A `Diagnosis` with ``ok=False``.
    """
    ctx = _Context(name=getattr(fn, "__qualname__", None) or "<function>")
    try:
        ctx = _context(fn, args, kwargs or {}, from_signature=False)
        ctx.stage, ctx.concrete, ctx.graph_labels = stage, concrete, dict(graph_labels or {})
        return _classify(exc, ctx)
    except Exception as bug:  # never let the diagnosis hide the user's own error
        from tflab._source_map import _error_line

        return Diagnosis(function=ctx.name, ok=False, kind="unrecognized", error=_error_line(exc),
                         explanation=f"tflab could not classify it ({type(bug).__name__}: {bug})",
                         fix="read TF's error", stage=stage)


def with_diagnosis(err: BaseException, exc: BaseException, fn: Callable | None = None,
                   **kw: Any) -> BaseException:
    """Adds the diagnosis of ``exc`` to a tflab error about the same failure.

    The hook other modules call where they turn a failed trace into one line
    (`trace_and_inspect`, `autograph_diff`, `compare_modes`): the error keeps its
    type and its message, gains ``; KIND at FILE:LINE: FIX`` (unless the kind is
    ``unrecognized``) and carries the `Diagnosis` as ``err.diagnosis``.

    Args:
        err: the error about to be raised (its message is one line).
        exc: the exception TF raised.
        fn: the function that was traced.
        **kw: passed to `diagnose_exception`.

    Returns:
        ``err``, for ``raise with_diagnosis(UsageError(...), e, fn) from e``.
    """
    d = diagnose_exception(exc, fn, **kw)
    err.diagnosis = d
    if d.kind != "unrecognized" and err.args and isinstance(err.args[0], str):
        err.args = (f"{err.args[0]}; {diagnosis_suffix(d)}",) + tuple(err.args[1:])
    return err


def diagnosed_error(what: str, exc: BaseException, fn: Callable | None = None, **kw: Any) -> UsageError:
    """``UsageError("{what} raised {TF's first line}; KIND at FILE:LINE: FIX")`` with
    ``.diagnosis``, for ``raise diagnosed_error("…", e, fn) from e``."""
    from tflab._source_map import _error_line

    return with_diagnosis(UsageError(f"{what} raised {_error_line(exc)}"), exc, fn, **kw)


def diagnosis_note(exc: BaseException, fn: Callable | None = None) -> str:
    """``"; KIND at FILE:LINE `statement`: FIX"`` for ``exc``, or "" when unrecognized:
    what `compare_modes` appends to a failed mode's one-line error."""
    d = diagnose_exception(exc, fn)
    return "" if d.kind == "unrecognized" else "; " + diagnosis_suffix(d)


def diagnosis_suffix(d: Diagnosis) -> str:
    """``KIND at FILE:LINE `statement`: FIX``, for one-line reports."""
    where = f" at {os.path.basename(d.filename)}:{d.line} `{d.statement}`" if d.line else ""
    return f"{d.kind}{where}: {d.fix}"


def probe_diagnosis(probe: Any, trace: Any, exc: BaseException, entry: Any) -> Any:
    """``trace`` (a `tflab.retrace.Trace`) with ``.diagnosis`` set, for a trace
    that raised (``entry`` None) or a new trace whose call raised.

    Each earlier trace's FuncGraph is labelled ``#N`` from the probe's function
    cache (an ordered map, one entry per successful trace), so a tensor kept
    from trace #1 is named as such.
    """
    concrete = None
    labels: dict[int, str] = {}
    try:
        primary = probe.function._function_cache._primary
        kept = [t for t in probe.traces if t.kind != "failed"] + ([trace] if entry is not None else [])
        for t, (_key, cf) in zip(kept, list(primary.items())):
            labels[id(cf.graph)] = f"#{t.index}"
        if entry is not None:
            concrete = primary.get(entry)
    except (AttributeError, TypeError):
        pass
    d = diagnose_exception(exc, getattr(probe, "_user_fn", None) or getattr(probe, "function", None),
                           stage="trace" if entry is None else "call", concrete=concrete,
                           graph_labels=labels)
    return dataclasses.replace(trace, diagnosis=d)


def renamed_keys_hint(missing: list[str], unknown: list[str], inputs: Any, batch: Any) -> str:
    """Why a SignatureDef does not take a dict input's own keys (case D9), or "".

    A SignatureDef's inputs are the flattened leaves of the function's
    arguments: a dict argument is flattened in sorted key order
    (`tf.nest.flatten`) and each leaf is named after the parameter, ``inputs``,
    ``inputs_1``, … unless its `tf.TensorSpec` has a ``name``. When the missing
    names are exactly such a run (``P``, ``P_1``, …, ``P_{k-1}``) and the user
    gave ``k`` unknown keys whose sorted order matches them dtype by dtype, the
    keys were renamed: the hint gives the mapping and the fix.

    Args:
        missing: the signature's input names the examples lack.
        unknown: the example keys the signature does not take.
        inputs: name -> TensorInfo (with ``.dtype`` as a string) of the signature;
            a plain collection of names skips the dtype check.
        batch: the example batch, key -> array.

    Returns:
        ``"; TF flattened … 'bar' -> 'inputs', …"`` or "".
    """
    import numpy as np

    if not missing or len(missing) != len(unknown):
        return ""
    stem = min(missing, key=len)
    flat = [stem] + [f"{stem}_{i}" for i in range(1, len(missing))]
    if sorted(flat) != sorted(missing):
        return ""
    pairs = list(zip(sorted(unknown), flat))
    for key, name in pairs:
        arr = np.asarray(batch[key])
        want = getattr(inputs.get(name) if isinstance(inputs, dict) else None, "dtype", None)
        got = "string" if arr.dtype.kind in "OSU" else arr.dtype.name
        if want is not None and str(want) != got:
            return ""
    mapping = ", ".join(f"{k!r} -> {n!r}" for k, n in pairs)
    first = pairs[0][0]
    return (f"; TF flattened the dict input {stem!r} in sorted key order and named its leaves "
            f"{stem}, {stem}_1, …: {mapping}. Feed those names, or keep your keys as input "
            f"names with tf.TensorSpec(..., name={first!r}) for each entry of the input_signature")


class ShapeReadWarning(UserWarning):
    """A function reads a static dim (``x.shape[i]``, ``len(x)``) that its
    input_signature leaves None: at trace time Python gets None (or AutoGraph an
    int32 tensor) instead of a number."""


def shape_read_warnings(fn: Callable, input_signature: Any) -> list[str]:
    """One message per ``x.shape[i]`` / ``x.get_shape()[i]`` / ``len(x)`` in ``fn``'s
    source whose dim is None in ``input_signature`` (case D5), read from the AST
    before any call.

    Args:
        fn: the Python function (a `tf.function`'s ``python_function``).
        input_signature: one `tf.TensorSpec` per positional parameter.

    Returns:
        Messages, empty when there is no such read or no source.
    """
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
        for name, dim, n in _shape_reads(node):
            spec = specs.get(name)
            if spec is None or spec.shape.rank is None:
                continue
            rank = spec.shape.rank
            if not -rank <= dim < rank or spec.shape[dim] is not None:
                continue
            line = n.lineno + start - 1
            where = f"{os.path.basename(filename)}:{line}"
            if isinstance(n, ast.Call):
                out.append(f"{where}: len({name}) reads dim 0 of {name}, which is None in the "
                           f"input_signature {spec.shape}: AutoGraph makes it an int32 tensor, not a "
                           f"Python int; tf.cast it before mixing it with {spec.dtype.name}")
            else:
                out.append(f"{where}: {ast.unparse(n)} is None when traced: dim {dim} of {name} is None "
                           f"in the input_signature {spec.shape}; use tf.shape({name})[{dim}]")
    return sorted(set(out), key=lambda m: int(m.split(":")[1]))


def warn_shape_reads(fn: Callable, input_signature: Any, stacklevel: int = 3) -> None:
    """Warns (`ShapeReadWarning`) once per read that `shape_read_warnings` finds."""
    import warnings

    for message in shape_read_warnings(fn, input_signature):
        warnings.warn(message, ShapeReadWarning, stacklevel=stacklevel)


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

    return _Context(name=name, python_fn=python_fn, filename=code.co_filename if code else "",
                    autograph=bool(getattr(fn, "_autograph", True)),
                    params=params, from_signature=from_signature, args=tuple(args),
                    kwargs=dict(kwargs), lead=bound_user_method(fn)[1])


def _make(ctx: _Context, exc: BaseException, kind: str, filename: str, line: int | None,
          explanation: str, fix: str) -> Diagnosis:
    from tflab._source_map import _error_line

    from tflab._source_map import _strip_comment

    src = _Source.of(filename)
    return Diagnosis(function=ctx.name, ok=False, kind=kind, line=line,
                     statement=_strip_comment(src.text(line)) if src else "", filename=filename,
                     error=_error_line(exc), explanation=explanation, fix=fix, stage=ctx.stage)


def _classify(exc: BaseException, ctx: _Context) -> Diagnosis:
    frames = _frames(exc)
    filename, line, loc = _user_site(exc, frames)
    if not filename and ctx.filename:  # raised after the body returned (its outputs)
        filename = ctx.filename
    src = _Source.of(filename)
    node = src.stmt_at(line) if src and line else None
    for rule in (_rule_created_in_function, _rule_unhashable_tensor,
                 _rule_escaped_tensor, _rule_foreign_capture, _rule_bool_or_iter, _rule_numpy,
                 _rule_cond_vars, _rule_loop_vars, _rule_loop_init, _rule_shape_none,
                 _rule_dtype_mismatch, _rule_runtime_op):
        d = rule(exc, ctx, frames, filename, line, loc, src, node)
        if d is not None:
            return d
    return _make(ctx, exc, "unrecognized", filename, line,
                 "no tflab rule matches this failure; the culprit is the innermost line of "
                 "your code in the traceback", "read TF's error above at the culprit line")


def _stmt_label(line: int, kind: str, op: str) -> str:
    return f"the {kind} at line {line} became a{'n' if op[0] in 'AEIOU' else ''} {op} op"


def _op_for(kind: str) -> str:
    return "If" if kind == "if" else "While"


# --- rules: each returns a Diagnosis or None --------------------------------------------


def _rule_escaped_tensor(exc, ctx, frames, filename, line, loc, src, node):
    """A tensor made inside a graph loop/branch, or in another trace, used outside it."""
    fr = _frame_named(frames, "capture_by_value", "_validate_in_scope", "capture")
    tensor = fr.locals.get("tensor") if fr else None
    if tensor is None or not hasattr(tensor, "graph"):
        return None
    current = fr.locals.get("graph") or fr.locals.get("self")
    inner = tensor.graph
    lineage = []
    g = inner
    while g is not None:
        lineage.append(g)
        g = getattr(g, "outer_graph", None)
    if current is not None and not any(g is current for g in lineage[1:]):
        return _foreign(exc, ctx, tensor, filename, line, src)
    owner = ctx.stmap.owner_of(inner) or _owner_from_ops(inner, src)
    holder_names = _holders_of(tensor, [loc] + [f.locals for f in frames
                                                if _is_generated(f.filename) or _is_user_file(f.filename)])
    if owner is None or src is None:
        return _make(ctx, exc, "tensor-out-of-scope", filename, line,
                     f"{tensor.name} was made in FuncGraph {inner.name!r}, a branch or loop body "
                     f"that ended before this line used it",
                     "return the value from the tf.cond/tf.while_loop (or use tf.TensorArray) "
                     "instead of keeping it in Python state")
    o_line, o_kind = owner
    stmt = src.stmt_at(o_line)
    body = list(getattr(stmt, "body", [])) + list(getattr(stmt, "orelse", []))
    stores = _container_stores(body, holder_names or None) or _container_stores(body)
    culprit = stores[0][0] if stores else line
    holder = stores[0][1] if stores else (sorted(holder_names)[0] if holder_names else None)
    what = f"the Python {'list' if holder else 'state'} {holder!r}" if holder else "Python state"
    if o_kind == "if":
        return _make(ctx, exc, "python-state-in-tensor-if", filename, culprit,
                     f"{_stmt_label(o_line, 'if', 'If')}; {what} is not a branch output, so "
                     f"{tensor.name} made inside the branch cannot leave it",
                     "assign the value to a variable in both branches (the If op's outputs) "
                     "instead of storing it in a Python container")
    return _make(ctx, exc, "python-list-in-tensor-loop", filename, culprit,
                 f"{_stmt_label(o_line, o_kind, 'While')}; {what} is not a loop variable, so "
                 f"the tensors stored in it inside the body ({tensor.name}) cannot leave the loop",
                 _LIST_FIX)


_LIST_FIX = ("use a tf.TensorArray (ta = ta.write(i, value) in the loop, ta.stack() after it), "
             "which is a loop variable")


def _holders_of(tensor, scopes: list[dict]) -> set[str]:
    """Names in ``scopes`` whose value is a list/tuple/dict/set holding ``tensor``."""
    out = set()
    for scope in scopes:
        for name, value in (scope or {}).items():
            if isinstance(value, dict):
                vals = list(value.values())
            elif isinstance(value, (list, tuple, set)):
                vals = list(value)
            else:
                continue
            if any(v is tensor for v in vals):
                out.add(name)
    return out


def _python_state(ctx: _Context) -> list[tuple[str, Any]]:
    """(label, value) of the Python state the function reads: globals named in its
    code, closure cells, and ``self``'s attributes for a bound method."""
    fn = ctx.python_fn
    out: list[tuple[str, Any]] = []
    if fn is None:
        return out
    inner = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(inner, "__code__", None)
    if code is not None:
        names = set()
        stack = [code]
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
        g = getattr(inner, "__globals__", {})
        out += [(f"global {n}", g[n]) for n in sorted(names) if n in g]
        for n, cell in zip(code.co_freevars, inner.__closure__ or ()):
            try:
                out.append((f"closure variable {n}", cell.cell_contents))
            except ValueError:
                pass
    obj = getattr(inspect.unwrap(fn), "__self__", None)
    if type(obj).__name__ == "TfMethodTarget":  # a tf.function method: the instance is .target
        obj = obj.target
    if obj is not None:
        out += [(f"self.{k}", v) for k, v in vars(obj).items()] if hasattr(obj, "__dict__") else []
    return out


def _holder_in_state(tensor, ctx: _Context) -> tuple[str, str] | None:
    """(label, short name) of the Python state that holds ``tensor``."""
    for label, value in _python_state(ctx):
        short = label.split()[-1]
        if value is tensor:
            return label, short
        vals = list(value.values()) if isinstance(value, dict) else (
            list(value) if isinstance(value, (list, tuple, set)) else [])
        if any(v is tensor for v in vals):
            kind = type(value).__name__
            return f"the {kind} `{short}` ({label.split()[0]})", short
    return None


def _foreign(exc, ctx: _Context, tensor, filename, line, src):
    graph = tensor.graph
    label = ctx.graph_labels.get(id(graph))
    where = f"trace {label}'s FuncGraph" if label else f"another trace's FuncGraph {graph.name!r}"
    holder = _holder_in_state(tensor, ctx)
    culprit, fname = line, filename
    if holder is not None and ctx.python_fn is not None:
        try:
            fsrc_file = inspect.getsourcefile(inspect.unwrap(getattr(ctx.python_fn, "__func__",
                                                                     ctx.python_fn)))
            lines, start = inspect.getsourcelines(ctx.python_fn)
        except (OSError, TypeError):
            fsrc_file = None
        if fsrc_file:
            fsrc = _Source.of(fsrc_file)
            fnode = fsrc.function_at(start + 1) if fsrc else None
            if fnode is not None:
                stores = _container_stores(list(getattr(fnode, "body", [])), {holder[1]})
                if stores:
                    culprit, fname = stores[0][0], fsrc_file
    via = f"; it reached this trace through Python state ({holder[0]})" if holder else \
        "; it reached this trace through Python state kept between calls"
    this = "this trace's FuncGraph"
    if ctx.graph_labels and ctx.concrete is not None:
        own = ctx.graph_labels.get(id(ctx.concrete.graph))
        this = f"the graph of trace {own}" if own else this
    return _make(ctx, exc, "tensor-from-another-funcgraph", fname, culprit,
                 f"{this} captured {tensor.name}, a tensor that belongs to {where}{via}",
                 "return the value from the tf.function, or keep it in a tf.Variable "
                 "(assign to it) instead of a Python list or attribute")


def _rule_foreign_capture(exc, ctx, frames, filename, line, loc, src, node):
    """A call-time failure of a ConcreteFunction that captured a symbolic tensor of
    another FuncGraph (its captures hold a graph tensor, not a value)."""
    if ctx.concrete is None:
        return None
    graph = ctx.concrete.graph
    for external, _internal in getattr(graph, "captures", ()):
        g = getattr(external, "graph", None)
        if g is not None and g is not graph and type(external).__name__ != "EagerTensor" \
                and not hasattr(external, "numpy") and getattr(external, "dtype", None) is not None \
                and external.dtype.name != "resource":
            return _foreign(exc, ctx, external, filename, line, src)
    return None


def _why_unconverted(ctx: _Context, filename: str, line: int | None, src) -> str:
    if not ctx.autograph:
        return "the tf.function has autograph=False, so AutoGraph did not convert this statement"
    fnode = src.function_at(line) if src and line else None
    if fnode is not None:
        for dec in getattr(fnode, "decorator_list", []):
            if "do_not_convert" in ast.unparse(dec):
                return f"{fnode.name} is marked do_not_convert, so AutoGraph ran it as plain Python"
    return ("AutoGraph ran this code as plain Python (it converts only if/for/while statements "
            "of functions whose source it can read; bool(), and/or in call arguments and code "
            "in unconverted helpers stay Python)")


def _rule_bool_or_iter(exc, ctx, frames, filename, line, loc, src, node):
    names = {f.name for f in frames}
    if "_disallow_bool_casting" in names:
        why = _why_unconverted(ctx, filename, line, src)
        kind_word = ("if" if isinstance(node, ast.If) else "while" if isinstance(node, ast.While)
                     else "statement")
        return _make(ctx, exc, "tensor-as-python-bool", filename, line,
                     f"this {kind_word} needs a Python bool but got a symbolic tensor; {why}",
                     "use tf.cond (or tf.where for elementwise choices); or let AutoGraph convert "
                     "the if (drop autograph=False / do_not_convert)")
    if "_disallow_iteration" in names:
        comp = node is not None and any(isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp,
                                                       ast.GeneratorExp)) for n in _walk_header(node))
        static = _static_range_fix(ctx, filename, line, node, loc) if comp else None
        if static is not None:
            it_text, values, fsrc, text = static
            bound = ", ".join(map(str, values))
            d = _make(ctx, exc, "comprehension-over-tensor", filename, line,
                      f"AutoGraph converts for statements, not comprehensions: this comprehension "
                      f"iterates over the symbolic tensor {it_text} in Python; its bound is static "
                      f"here ({bound} at trace time)",
                      f"use Python range({bound if len(values) > 1 else ast.unparse(node) and ''}"
                      f"{'' if len(values) > 1 else it_text[it_text.index('(') + 1:-1]}) instead of "
                      f"{it_text}: Python unrolls the comprehension at trace time, one copy per "
                      f"index, and the index stays a Python int")
            return _try_fix(d, ctx, fsrc, text)
        if comp:
            return _make(ctx, exc, "comprehension-over-tensor", filename, line,
                         "AutoGraph converts for statements, not comprehensions: this comprehension "
                         "iterates over a symbolic tensor in Python",
                         "use tf.map_fn or a vectorized op on the whole tensor (or a for over "
                         "tf.range writing a tf.TensorArray)")
        if isinstance(node, ast.Assign) and any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets):
            return _make(ctx, exc, "tensor-iterated-in-python", filename, line,
                         "unpacking a tensor into Python names iterates over it in Python",
                         "use tf.unstack(x, num=N) (or index x[0], x[1])")
        why = _why_unconverted(ctx, filename, line, src)
        return _make(ctx, exc, "tensor-iterated-in-python", filename, line,
                     f"this line iterates over a symbolic tensor in Python; {why}",
                     "iterate with a for over tf.range (AutoGraph makes a While op) or use "
                     "tf.map_fn; drop autograph=False if it is set")
    return None


def _rule_numpy(exc, ctx, frames, filename, line, loc, src, node):
    fr = _frame_named(frames, "__getattr__", "__array__", "_numpy")
    if fr is None or "tensor" not in os.path.basename(fr.filename):
        return None
    attr = fr.locals.get("name")
    if fr.name == "__getattr__" and attr != "numpy":
        return None
    expl = ("inside a tf.function tensors are symbolic (SymbolicTensor): they have no value "
            "until the graph runs, so .numpy() / np.asarray cannot read one")
    fix, np_name, fsrc, module_source = _numpy_fix(ctx, filename, line, node) if attr != "numpy" \
        else ("", "", None, None)
    if not fix:
        return _make(ctx, exc, "numpy-on-symbolic-tensor", filename, line, expl,
                     "use tf.print(x) to look at the value while it runs, TF ops instead of NumPy, "
                     "or return the tensor and call .numpy() outside the tf.function")
    d = _make(ctx, exc, "numpy-on-symbolic-tensor", filename, line,
              f"np.{np_name} needs a NumPy array, and {expl.split(': ', 1)[1]}", fix)
    if module_source is None:
        return dataclasses.replace(d, fix_traced=False if fsrc is not None and "has no TF" not in fix
                                   else None)
    return dataclasses.replace(d, fixed_source=module_source.rstrip("\n"), fix_traced=True)


def _graph_stmt(ctx: _Context, frames: list[_Frame], src, line: int | None, want: str):
    """(line, kind) of the graph if/loop the failing user line belongs to."""
    graph_lines = ctx.stmap.graph_lines()
    node = src.stmt_at(line) if src and line else None
    types = (ast.If,) if want == "if" else (ast.For, ast.While)
    if node is not None and isinstance(node, types):
        return node.lineno, {ast.If: "if", ast.For: "for", ast.While: "while"}[type(node)]
    for cand in reversed(src.loops_around(line) if src and line else []):
        if isinstance(cand, types) and (not graph_lines or cand.lineno in graph_lines):
            return cand.lineno, {ast.If: "if", ast.For: "for", ast.While: "while"}[type(cand)]
    return None


def _var_name(name: str) -> str:
    return "the return value" if name.startswith("retval") else f"'{name}'"


def _rule_cond_vars(exc, ctx, frames, filename, line, loc, src, node):
    fr = _frame_named(frames, "verify_single_cond_var", "_verify_tf_cond_branch_vars")
    if fr is None or src is None:
        return None
    stmt = _graph_stmt(ctx, frames, src, line, "if")
    if_line = stmt[0] if stmt else line
    name = fr.locals.get("name", "?")
    body_var, orelse_var = fr.locals.get("body_var"), fr.locals.get("orelse_var")
    if fr.name == "_verify_tf_cond_branch_vars" or body_var is None or orelse_var is None:
        branch = "main" if fr.name == "verify_single_cond_var" and body_var is None else "else"
        if fr.name == "_verify_tf_cond_branch_vars":
            branch = fr.locals.get("branch_name", "else")
        return _make(ctx, exc, "branch-variable-undefined", filename, if_line,
                     f"{_stmt_label(if_line, 'if', 'If')}; both branches of an If op must produce "
                     f"{_var_name(name)}, but the {branch} branch leaves it None or unset",
                     f"set {name} in the {branch} branch too (add an else if there is none), "
                     f"or before the if to a tensor of the same dtype and shape")
    bd = getattr(body_var, "dtype", type(body_var).__name__)
    od = getattr(orelse_var, "dtype", type(orelse_var).__name__)
    bd = getattr(bd, "name", bd)
    od = getattr(od, "name", od)
    return _make(ctx, exc, "branch-dtype-mismatch", filename, if_line,
                 f"{_stmt_label(if_line, 'if', 'If')}; an If op's output has one dtype, but "
                 f"{_var_name(name)} is {bd} in the main branch and {od} in the else branch",
                 "give both branches the same dtype (tf.cast one of them, or return a tensor "
                 "of the other branch's dtype)")


def _rule_loop_vars(exc, ctx, frames, filename, line, loc, src, node):
    fr = _frame_named(frames, "_verify_single_loop_var")
    if fr is None or src is None:
        return None
    stmt = _graph_stmt(ctx, frames, src, line, "loop")
    loop_line, loop_kind = stmt if stmt else (line, "loop")
    name = fr.locals.get("name", "?")
    entry, exit_ = fr.locals.get("entry"), fr.locals.get("exit_")
    init_line = _assignments_before(src, name, loop_line) or loop_line
    head = _stmt_label(loop_line, loop_kind, "While")
    if exit_ is None:
        return _make(ctx, exc, "loop-variable-undefined", filename, loop_line,
                     f"{head}; loop variable {_var_name(name)} is None after one iteration",
                     f"give {name} a tensor value on every path of the loop body")
    ed, xd = getattr(entry, "dtype", None), getattr(exit_, "dtype", None)
    if ed is not None and xd is not None and ed != xd:
        return _make(ctx, exc, "loop-variable-dtype-changes", filename, init_line,
                     f"{head}; a While op's loop variables keep their dtype, but {_var_name(name)} "
                     f"is {ed.name} before the loop and {xd.name} after one iteration",
                     f"initialize {name} with the dtype the body gives it (e.g. tf.constant(0.0) "
                     f"or tf.zeros(..., dtype=...)), or tf.cast in the body")
    return _make(ctx, exc, "loop-variable-shape-changes", filename, loop_line,
                 f"{head}; {_var_name(name)} has shape {getattr(entry, 'shape', '?')} before the "
                 f"loop and {getattr(exit_, 'shape', '?')} after one iteration",
                 f"declare the changing dim with tf.autograph.experimental.set_loop_options("
                 f"shape_invariants=[({name}, tf.TensorShape([None]))]) at the top of the body, "
                 f"or use tf.TensorArray")


def _rule_loop_init(exc, ctx, frames, filename, line, loc, src, node):
    fr = _frame_named(frames, "verify_loop_init_vars")
    if fr is None or src is None:
        return None
    stmt = _graph_stmt(ctx, frames, src, line, "loop")
    loop_line, loop_kind = stmt if stmt else (line, "loop")
    name = fr.locals.get("name", "?")
    head = _stmt_label(loop_line, loop_kind, "While")
    if str(name).startswith("retval") or isinstance(exc, NotImplementedError):
        loop_node = src.stmt_at(loop_line)
        rets = sorted(n.lineno for n in ast.walk(loop_node) if isinstance(n, ast.Return)) \
            if loop_node is not None else []
        return _make(ctx, exc, "return-in-tensor-loop", filename, rets[0] if rets else loop_line,
                     f"{head}; a While op cannot end the function early, so a return inside its "
                     f"body has no graph equivalent",
                     "store the result in a variable defined before the loop, `break`, and "
                     "return after the loop")
    return _make(ctx, exc, "loop-variable-undefined", filename, loop_line,
                 f"{head}; {_var_name(name)} is a loop variable (set in the body) but has no "
                 f"tensor value before the loop",
                 f"define {name} before the loop with a tensor of the dtype and shape the body gives it")


def _param_note(ctx: _Context, name: str, dim: int) -> str:
    import tensorflow as tf

    spec = ctx.params.get(name)
    if isinstance(spec, tf.TensorSpec):
        where = "the input_signature" if ctx.from_signature else "its TensorSpec"
        return f" ({name} is traced as {tf.TensorShape(spec.shape)} in {where})"
    return ""


def _rule_shape_none(exc, ctx, frames, filename, line, loc, src, node):
    if node is None or not isinstance(exc, (TypeError, ValueError)):
        return None
    for name, dim, n in _shape_reads(node):
        known, value = _static_dim(loc.get(name), dim)
        if not known or value is not None:
            continue
        if isinstance(n, ast.Call):  # len(x): AutoGraph's len gives tf.shape(x)[0]
            continue
        return _make(ctx, exc, "shape-dim-is-none", filename, line,
                     f"{name}.shape[{dim}] is the static shape, and dim {dim} of {name} is None "
                     f"here{_param_note(ctx, name, dim)}, so Python gets None instead of a number",
                     f"use the dynamic shape tf.shape({name})[{dim}], which is a tensor at run time")
    return None


def _rule_dtype_mismatch(exc, ctx, frames, filename, line, loc, src, node):
    fr = _frame_named(frames, "_ExtractInputsAndAttrs", "_apply_op_helper", "_truediv_python3")
    if fr is None or not isinstance(exc, TypeError):
        return None
    # _ExtractInputsAndAttrs pops each input from ``keywords`` into ``inputs`` as it
    # converts it; ``values`` is the one that failed to convert.
    op_type = fr.locals.get("op_type_name", "an")
    pool = list(fr.locals.get("inputs") or []) + [fr.locals.get("values")] \
        + list((fr.locals.get("keywords") or {}).values()) + [fr.locals.get("x"), fr.locals.get("y")]
    if fr.name == "_truediv_python3":  # math_ops: x / y checks dtypes itself
        op_type = "RealDiv"
    operands = [(i, v) for i, v in enumerate(pool) if hasattr(v, "dtype") and hasattr(v, "op")]
    user_scopes = [f.locals for f in frames if _is_generated(f.filename) or _is_user_file(f.filename)]
    # A loop variable whose first value fixed its dtype: its body placeholder is the operand.
    for _k, t in operands:
        owner = ctx.stmap.owner_of(t.graph) or _owner_from_ops(t.graph, src)
        if t.op.type == "Placeholder" and owner is not None and owner[1] in ("for", "while"):
            names = [n for scope in user_scopes for n, v in scope.items() if v is t]
            if names and src is not None:
                init = _assignments_before(src, names[0], owner[0])
                if init is not None:
                    return _make(ctx, exc, "loop-variable-dtype-changes", filename, init,
                                 f"{_stmt_label(owner[0], owner[1], 'While')}; loop variable "
                                 f"'{names[0]}' took dtype {t.dtype.name} from its value before "
                                 f"the loop, and the body's {op_type} op mixes it with another dtype",
                                 f"initialize {names[0]} with the dtype the body needs (e.g. 0.0 "
                                 f"for float32), or tf.cast in the body")
    # An operand made on another line of the user's code (len(x), tf.shape(x)…).
    for _k, t in operands:
        origin = [fr_.lineno for fr_ in (t.op.traceback or ()) if src is not None
                  and os.path.abspath(fr_.filename) == os.path.abspath(src.filename)]
        if origin and origin[-1] != line:
            o_line = origin[-1]
            o_node = src.stmt_at(o_line)
            lens = [r for r in (_shape_reads(o_node) if o_node is not None else [])
                    if isinstance(r[2], ast.Call)]
            if lens:
                nm = lens[0][0]
                known, val = _static_dim(loc.get(nm), 0)
                none = " (dim 0 of {0} is None, so it is not a Python int)".format(nm) \
                    if known and val is None else ""
                expl = (f"AutoGraph turned len({nm}) at line {o_line} into an int32 tensor"
                        f" (tf.shape({nm})[0]){none}; the {op_type} op at line {line} mixes it "
                        f"with a {_other_dtype(operands, t)} tensor")
            else:
                expl = (f"the {t.dtype.name} operand of the {op_type} op at line {line} was made "
                        f"at line {o_line}; the other operand is {_other_dtype(operands, t)}")
            return _make(ctx, exc, "dtype-mismatch", filename, o_line, expl,
                         f"tf.cast the value to the other operand's dtype "
                         f"(e.g. tf.cast(..., tf.{_other_dtype(operands, t)}))")
    return _make(ctx, exc, "dtype-mismatch", filename, line,
                 f"the {op_type} op needs all its inputs in one dtype; TF does not convert "
                 f"between dtypes", "tf.cast one operand to the other's dtype")


def _rule_runtime_op(exc, ctx, frames, filename, line, loc, src, node):
    """An op that failed when the ConcreteFunction ran (the trace was fine): the
    runtime names the node (``[[{{node NAME}}]]``); the op of that name in the
    FuncGraph, or in an If/While branch/body FuncGraph, records the Python stack
    it was made from (``Operation.traceback``), whose innermost user frame is the
    culprit."""
    from tflab._source_map import _walk_ops

    if ctx.stage != "call" or ctx.concrete is None or not hasattr(exc, "error_code"):
        return None
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    failed = None
    for op in _walk_ops(ctx.concrete.graph):
        if "{{node " + op.name + "}}" in text:
            failed = op
    if failed is None:
        return None
    frames_ = [f for f in (failed.traceback or ()) if _is_user_file(f.filename)]
    o_file, o_line = (frames_[-1].filename, frames_[-1].lineno) if frames_ else (filename, line)
    marker = next((i for i, ln in enumerate(lines) if ln.startswith("[[")), len(lines))
    detail = lines[marker - 1] if marker > 0 else lines[0] if lines else ""
    d = _make(ctx, exc, "runtime-op-error", o_file, o_line,
              f"the trace was fine; the {failed.type} op {failed.name!r} failed when the "
              f"ConcreteFunction ran (diagnose runs it once on seeded random values for each "
              f"TensorSpec, {UNKNOWN_DIM_SIZE} for a None dim)",
              "the values, not the trace, are wrong: check what reaches this op "
              "(tf.debugging.assert_* or tf.print inside the function)")
    return dataclasses.replace(d, error=f"{type(exc).__name__}: {detail}")


def _other_dtype(operands, t) -> str:
    for _k, v in operands:
        if v is not t and getattr(v, "dtype", None) is not None and v.dtype != t.dtype:
            return v.dtype.name
    return "differently typed"


# --------------------------------------------------------------------------- diagnose


@contextlib.contextmanager
def _full_tracebacks() -> Iterator[None]:
    """Keeps TF's internal frames in tracebacks for the duration (their locals
    are what the rules read); restores the user's setting after."""
    from tensorflow.python.util import traceback_utils

    was = traceback_utils.is_traceback_filtering_enabled()
    if was:
        traceback_utils.disable_traceback_filtering()
    try:
        yield
    finally:
        if was:
            traceback_utils.enable_traceback_filtering()


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


def _check_inputs_fit(args: Any, kwargs: Any) -> None:
    """Refuses random inputs that cannot fit (`tflab._memory.check_fits`) before any is drawn.

    Peak copies: the numpy draw, the tensor and an output as large (elementwise).

    Raises:
        UsageError: too large (bad input, exit 2), never a diagnosed failure of the user's code.
    """
    import numpy as np
    import tensorflow as tf

    from tflab._memory import check_fits
    from tflab._target import MAX_RANDOM_BYTES

    specs = [_sized(v) for v in tf.nest.flatten((args, kwargs)) if isinstance(v, tf.TensorSpec)]
    sizes = [int(np.prod(s.shape.as_list(), dtype=np.float64)) * max(s.dtype.size, 1) for s in specs]
    if all(n <= MAX_RANDOM_BYTES for n in sizes):  # else materialize names the argument over its cap
        check_fits(sum(sizes), 3, "diagnose", "use a smaller shape")


def _tf_function_for(fn: Callable, python_fn: Callable):
    """A fresh `tf.function` with ``fn``'s options (input_signature, autograph,
    jit_compile, reduce_retracing…) and an empty trace cache, so the trace
    really runs."""
    import tensorflow as tf

    if hasattr(fn, "_clone") and hasattr(fn, "python_function"):
        return fn._clone(None)  # Function._clone: same options (polymorphic_function.py)
    return tf.function(python_fn)


@user_entry("while tracing and running")
def diagnose(fn: Callable, *args: Any, **kwargs: Any) -> Diagnosis:
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
            (`tflab._memory.check_fits`).

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
    from tflab._target import _check_target, _function_name, signature_args

    if not callable(fn):
        raise UsageError(f"diagnose needs a function, got {type(fn).__name__}")
    _check_target(fn, _function_name(fn))
    from_sig = False
    if not args and not kwargs and getattr(fn, "input_signature", None) is not None:
        args, from_sig = tuple(fn.input_signature), True
    else:
        args, kwargs = signature_args(fn, args, kwargs)
        from_sig = getattr(fn, "input_signature", None) is not None
    python_fn = _python_target(fn)
    if python_fn is not getattr(fn, "python_function", fn):  # a Keras layer/model: build it first
        from tflab._source_map import _build_layer

        _build_layer(getattr(fn, "python_function", fn), args, kwargs)
    ctx = _context(fn, args, kwargs, from_signature=from_sig)
    tf_fn = _tf_function_for(fn, python_fn)
    counter = None
    code = getattr(inspect.unwrap(getattr(python_fn, "__func__", python_fn)), "__code__", None)
    if code is not None:
        # The whole file: errors may sit in helpers the function calls.
        counter = _recorder(code.co_filename, 1, 10 ** 9)
    ctx.stmap = _StatementMap(counter)
    with _full_tracebacks():
        try:
            with (counter.installed() if counter is not None else contextlib.nullcontext()):
                concrete = tf_fn.get_concrete_function(*args, **kwargs)
        except Exception as e:
            if _is_binding_error(e):
                from tflab._target import binding_error

                target = getattr(tf_fn, "python_function", tf_fn)
                mismatch = binding_error(getattr(target, "__name__", None) or type(target).__name__, tf_fn, e)
                if mismatch is not None:  # the same one line as trace_and_inspect's
                    raise mismatch from e
            return _classify(e, ctx)
        ctx.concrete, ctx.stage = concrete, "call"
        # Inputs too large are bad input (UsageError, exit 2), not a failure of the user's code.
        _check_inputs_fit(args, kwargs)
        call_args, call_kwargs = _materialize(args), _materialize(kwargs)
        try:
            concrete(*call_args, **call_kwargs)
        except Exception as e:
            return _classify(e, ctx)
    silent = _silent_list_append(ctx, code.co_filename if code is not None else "")
    return silent or Diagnosis(function=ctx.name, ok=True)


# Diagnosis.stage of a function that traced and ran but does not do what its Python says.
SILENT_STAGE = "silent"

_LIST_MUTATORS = frozenset({"append", "extend", "insert"})


def _silent_list_append(ctx: _Context, filename: str) -> Diagnosis | None:
    """A Python list appended to inside a loop that became a While op, with no error.

    The While body is traced once (``while_v2``), so ``acc.append(v)`` runs once at
    trace time: when ``v`` is a tensor from outside the loop (or a Python value)
    nothing fails and ``acc`` silently ends with one entry instead of one per
    iteration; eager Python gives one per iteration.
    """
    graph = ctx.stmap.graph_lines() if ctx.stmap is not None else {}
    loops = {line for line, kind in graph.items() if kind in ("for", "while")}
    src = _Source.of(filename) if filename and loops else None
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
                        from tflab._source_map import _strip_comment

                        return Diagnosis(
                            function=ctx.name, ok=False, kind="python-list-in-tensor-loop",
                            line=call.lineno, statement=_strip_comment(src.text(call.lineno)),
                            filename=filename, error="",
                            explanation=(f"{_stmt_label(loop.lineno, kind, 'While')}, whose body is traced "
                                         f"once: '{name}.{call.func.attr}(...)' ran once at trace time, so "
                                         f"'{name}' gets one entry, not one per iteration as in eager "
                                         "Python; no error is raised"),
                            fix=_LIST_FIX, stage=SILENT_STAGE)
    return None


def _is_binding_error(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, TypeError) and ("Binding inputs" in text or "missing a required" in text
                                         or "got an unexpected keyword" in text)


# --------------------------------------------------------------------------- rules with a checked fix


def _fix_source(ctx: _Context, line: int | None, filename: str):
    """`tflab.diagnosis_fixes.FunctionSource` of the traced function when the
    culprit line is in it (a fix is tried on that function only), else None."""
    from tflab.diagnosis_fixes import FunctionSource

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
    from tflab.diagnosis_fixes import trace_fixed

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


def _created_call(node, namespace: dict):
    """(call, "variable" | "layer", class name) of the first ``tf.Variable(...)`` or
    Keras layer / tf.Module constructor in a statement's own line(s)."""
    import tensorflow as tf

    from tflab.diagnosis_fixes import resolve

    if node is None:
        return None
    for n in _walk_header(node):
        if not isinstance(n, ast.Call):
            continue
        obj = resolve(n.func, namespace)
        if not isinstance(obj, type):
            continue
        if issubclass(obj, tf.Variable):
            return n, "variable", obj.__name__
        try:
            import keras

            if issubclass(obj, keras.layers.Layer):
                return n, "layer", obj.__name__
        except ImportError:  # pragma: no cover - keras ships with TF 2.21
            pass
        if issubclass(obj, tf.Module):
            return n, "layer", obj.__name__
    return None


def _rule_created_in_function(exc, ctx, frames, filename, line, loc, src, node):
    """A tf.Variable, or a Keras layer (whose build makes variables), created inside
    the function: TF traces a variable-creating function twice on its first call
    and lets only the first trace create variables (``polymorphic_function.py``,
    ``Function._initialize``: the second trace runs under ``invalid_creator_scope``),
    so a creation that runs on every trace raises there (#26812, case X2)."""
    if _frame_named(frames, "invalid_creator_scope") is None:
        return None
    fsrc = _fix_source(ctx, line, filename)
    found = _created_call(node, fsrc.namespace if fsrc else _namespace(ctx))
    is_method = fsrc is not None and (fsrc.instance is not None or (
        bool(fsrc.fdef.args.args) and fsrc.fdef.args.args[0].arg == "self"))
    stmt_text = _Source.of(filename).text(line) if _Source.of(filename) else ""
    common = ("TF traces a function that creates tf.Variables twice on its first call and lets only "
              "the first trace create them (the second runs under invalid_creator_scope, "
              "polymorphic_function.py); this line creates a new one on every trace")
    if found is None:
        return _make(ctx, exc, "variable-created-in-function", filename, line,
                     common, "create the tf.Variable once outside the tf.function, or guard it: "
                             "`if self.v is None: self.v = tf.Variable(...)`")
    call, what, cls = found
    code = ast.unparse(call)
    uses_local = fsrc is not None and bool({n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
                                           & fsrc.local_names())
    if what == "variable":
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        vname = ast.unparse(target) if target is not None else "v"
        attr = vname.split(".")[-1]
        guard = f"`if self.{attr} is None: self.{attr} = {code}`"
        if is_method or vname.startswith("self."):
            fix = (f"create it on the first trace only: {guard} (with self.{attr} = None in "
                   f"__init__)" if uses_local else
                   f"create it once: `self.{attr} = {code}` in __init__, or guard it: {guard}")
        elif uses_local:
            fix = (f"create it on the first trace only (its value depends on the arguments): keep it "
                   f"on an object and guard it, {guard}, or a module-level `{vname} = None` with "
                   f"`global {vname}; if {vname} is None: {vname} = {code}`")
        else:
            fix = (f"create it once outside the tf.function (module level `{vname} = {code}`), or "
                   f"keep it on an object and guard it: {guard}")
        d = _make(ctx, exc, "variable-created-in-function", filename, line, common, fix)
        stem = attr if attr.isidentifier() else "v"
    else:
        stem = re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()
        fix = (f"build the {cls} once outside the function and call it inside: "
               + (f"`self.{stem} = {code}` in __init__, then `self.{stem}(...)`" if is_method
                  else f"`{stem} = {code}` at module level (or as a model attribute), then `{stem}(...)`"))
        d = _make(ctx, exc, "layer-created-in-function", filename, line,
                  f"`{code}` builds a new {cls}, and with it new tf.Variables, on every trace; "
                  + common.split("; ")[0], fix)
    if fsrc is None:
        return d
    from tflab.diagnosis_fixes import hoist_created

    fstmt = fsrc.stmt_at(line)
    fcall = _created_call(fstmt, fsrc.namespace) if fstmt is not None else None
    return _try_fix(d, ctx, fsrc, hoist_created(fsrc, fcall[0], stem) if fcall else None) \
        if stmt_text else d


def _rule_unhashable_tensor(exc, ctx, frames, filename, line, loc, src, node):
    """A symbolic tensor used as a dict key or a set element: ``Tensor.__hash__``
    raises inside a FuncGraph (``framework/tensor.py``; a tensor's ``==`` is
    elementwise there), case X2 ``out[x] = …``."""
    fr = _frame_named(frames, "__hash__")
    if fr is None or not isinstance(exc, TypeError) or "tensor" not in os.path.basename(fr.filename):
        return None
    tensor = fr.locals.get("self")
    names = {n for n, v in (loc or {}).items() if v is tensor} or \
        {n for n, v in (loc or {}).items() if hasattr(v, "graph") and hasattr(v, "ref")}
    in_set = node is not None and any(isinstance(n, (ast.Set, ast.SetComp)) or (
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("add", "discard"))
        for n in _walk_header(node))
    name = sorted(names)[0] if names else "x"
    kind = "tensor-in-set" if in_set else "tensor-as-dict-key"
    where = "a set element" if in_set else "a dict key"
    d = _make(ctx, exc, kind, filename, line,
              f"a symbolic tensor cannot be {where}: inside a tf.function Tensor.__hash__ raises "
              f"(tensor == is elementwise there, so hashing by value is undefined)",
              f"key by {name}.ref() (a hashable reference; .deref() gives the tensor back), or by a "
              f"Python value such as the loop index; for a value-keyed table use tf.lookup")
    fsrc = _fix_source(ctx, line, filename)
    if fsrc is None or not names:
        return d
    from tflab.diagnosis_fixes import ref_keys

    return _try_fix(d, ctx, fsrc, ref_keys(fsrc, names))


def _numpy_fix(ctx: _Context, filename: str, line: int | None, node) -> tuple[str, str, Any, Any]:
    """(fix text, the NumPy name, FunctionSource, rewritten source) for the NumPy
    call at the culprit line; the TF op of *that* call (`NUMPY_TO_TF`)."""
    from tflab.diagnosis_fixes import numpy_calls, numpy_equivalent, replace_call_func

    fsrc = _fix_source(ctx, line, filename)
    ns = fsrc.namespace if fsrc else _namespace(ctx)
    calls = numpy_calls(node, ns) if node is not None else []
    if not calls:
        return "", "", None, None
    call, name = calls[0]
    op, tnp = numpy_equivalent(name)
    shown = ast.unparse(call.func)
    keep = f"tf.numpy_function({shown}, [x], Tout) if it must stay NumPy (it then runs as Python, " \
           f"outside the graph: not in a SavedModel's serving or TFLite)"
    if op is None and tnp is None:
        return (f"{shown} has no TF equivalent: wrap it with {keep}", name, fsrc, None)
    alts = " or ".join(x for x in (f"`{op}`" if op else None, f"`{tnp}`" if tnp else None) if x)
    fix = f"replace {shown} with {alts}; or {keep}"
    module_source = None
    if fsrc is not None:
        fcalls = [c for c, n in numpy_calls(fsrc.stmt_at(line), fsrc.namespace) if n == name] \
            if fsrc.stmt_at(line) is not None else []
        for cand in (op, tnp):
            if cand and "(" not in cand and fcalls:
                text = replace_call_func(fsrc, fcalls, cand)
                from tflab.diagnosis_fixes import trace_fixed

                lead = ctx.lead if fsrc.instance is None else ()
                if trace_fixed(fsrc, text, tuple(lead) + ctx.args, ctx.kwargs, _materialize) is None:
                    module_source = text
                    fix = f"replace {shown} with `{cand}`" + (
                        f" (or `{tnp}`)" if cand == op and tnp else f" (or `{op}`)" if op and cand != op
                        else "") + f"; or {keep}"
                    break
    return fix, name, fsrc, module_source


def _static_range_fix(ctx: _Context, filename: str, line: int | None, node, loc: dict):
    """For a comprehension over ``tf.range(E)`` whose bound E is static here
    (``bands.shape[1]`` is 3 at trace time: tensorflow/tensorflow#33308): the
    bound values, and the function with ``range(E)``, which Python unrolls."""
    from tflab.diagnosis_fixes import replace_call_func, resolve

    if node is None:
        return None
    import tensorflow as tf

    ns = dict(_namespace(ctx))
    ns.update(loc or {})
    for comp in _walk_header(node):
        if not isinstance(comp, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        for gen in comp.generators:
            it = gen.iter
            if not (isinstance(it, ast.Call) and resolve(it.func, ns) is tf.range and it.args):
                continue
            try:
                values = [eval(compile(ast.Expression(a), "<bound>", "eval"), ns) for a in it.args]
            except Exception:  # a bound that reads something not in the frame
                return None
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return None
            fsrc = _fix_source(ctx, line, filename)
            text = None
            if fsrc is not None:
                fstmt = fsrc.stmt_at(line)
                fcalls = [c for c in ast.walk(fstmt) if isinstance(c, ast.Call)
                          and ast.unparse(c) == ast.unparse(it)] if fstmt is not None else []
                text = replace_call_func(fsrc, fcalls, "range") if fcalls else None
            return ast.unparse(it), values, fsrc, text
    return None
