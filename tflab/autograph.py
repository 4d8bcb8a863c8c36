"""Lab step 5: what AutoGraph made of each Python ``if``, ``for`` and ``while``.

`tf.function` rewrites a function's Python source before tracing it
(``tensorflow/python/autograph/impl/api.py``: ``converted_call`` and
``PyToTF``). Every ``if``/``for``/``while`` becomes a call to an AutoGraph
operator (``ag__.if_stmt``, ``ag__.for_stmt``, ``ag__.while_stmt`` in
``autograph/operators/control_flow.py``) that decides at trace time, from the
values it gets:

* a `tf.Tensor` condition or a ``tf.range``/tensor iterable becomes graph
  control flow: ``tf.cond`` (an ``If``/``StatelessIf`` op, ``cond_v2.py``) or
  ``tf.while_loop`` (a ``While``/``StatelessWhile`` op, ``while_v2.py``);
* a Python condition or a Python iterable (``range(n)``) runs in Python at
  trace time: the branch taken, or every loop iteration, is traced into the
  FuncGraph as plain ops (a loop is unrolled).

Graph statements are found from the ops' creation tracebacks (below). Python
statements are counted while the trace runs: `autograph_diff` wraps the
``ag__`` operators and the Python paths ``_py_for_stmt``/``_py_while_stmt``/
``_py_if_stmt`` for the duration of its own trace, so a loop's ``unrolled`` is
the exact number of body runs and an ``if`` names the branch taken, or says it
was not reached.

`autograph_diff` shows the rewrite (`tf.autograph.to_code`), traces the
function with the given arguments, and reads the FuncGraph to say what each
statement became. Each op records the Python stack it was created from
(``Operation.traceback``, ``framework/ops.py``); while AutoGraph runs converted
code it installs a ``StackTraceMapper`` that maps generated lines back to the
user's file, so op tracebacks point at the original ``if``/``for`` lines.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import inspect
import logging
import os
import textwrap
from typing import Any, Callable, Iterator

from tflab.report.base import Report, config_field
from tflab._user.source_map import (TraceCounter, build_layer, error_line, same_file, shorten_error,
                               strip_comment, walk_ops)
from tflab.report.text import table as text_table
from tflab._tf.autograph import fresh_allowlist
from tflab._user.usercode import shorten, user_entry
from tflab.errors import UsageError

_IF_OPS = frozenset({"If", "StatelessIf"})
_WHILE_OPS = frozenset({"While", "StatelessWhile"})
# ``for x in dataset`` becomes a dataset reduction (``dataset_autograph._tf_ag_dataset_for_stmt``:
# ``ds.reduce``, after a ``ds.scan`` when the loop has a break): the body is traced once
# into the ReduceDataset op's function, not unrolled and not a While op.
_DATASET_LOOP_OPS = frozenset({"ReduceDataset"})
_STRICT_ENV = "AUTOGRAPH_STRICT_CONVERSION"

_GREEN, _RED, _CYAN, _BOLD, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[36m", "\x1b[1m", "\x1b[0m"


@dataclasses.dataclass(frozen=True)
class Statement:
    """One Python ``if``/``for``/``while`` of the function and what it became.

    Attributes:
        lineno: line number in the function's file.
        kind: ``"if"``, ``"for"`` or ``"while"``.
        outcome: ``"graph"`` (an If/While op in the FuncGraph, or a
            ReduceDataset op for ``for x in dataset``) or ``"python"``
            (evaluated at trace time).
        op: name of the first If/While op made from this statement (ops inside a
            branch/body FuncGraph are named there, e.g. ``"while/cond"``), or None.
        unrolled: for a ``"python"`` loop, how many times its body ran at trace
            time, counted exactly by wrapping AutoGraph's loop operators: the
            number of copies of the body in the graph. Summed over every time
            the statement was reached (an inner loop of 3 inside an outer loop
            of 2 is 6); an iteration ended by ``break`` counts. None for graph
            loops and for ``if``.
        ops: all If/While op names from this statement (several when the
            statement itself sits in an unrolled loop).
        op_type: the op type of ``op`` (``"StatelessIf"``, ``"While"`` …) or None.
        note: how the outcome was read (which branch was traced, caveats).
        source: the statement's first source line, stripped.
    """

    lineno: int
    kind: str
    outcome: str
    op: str | None
    unrolled: int | None
    ops: tuple[str, ...] = ()
    op_type: str | None = None
    note: str = ""
    source: str = ""

    def __repr__(self) -> str:
        what = self.op_type and f"{self.op_type} {self.op!r}" or "python"
        if self.unrolled is not None:
            what += f" ×{self.unrolled}"
        return f"<{self.kind}@{self.lineno} → {what}>"


@dataclasses.dataclass(frozen=True, repr=False)
class AutographDiff(Report):
    """AutoGraph's rewrite of a function and what each control-flow statement became.

    Attributes:
        function_name: the function's qualified name.
        filename: the file the source came from.
        original: the function's source text (``inspect.getsource``).
        converted: AutoGraph's generated source (`tf.autograph.to_code`).
        unified_diff: `difflib.unified_diff` of the two, as one string.
        statements: one `Statement` per ``if``/``for``/``while``, in source order.
        warnings: AutoGraph's "could not transform … will run it as-is" warnings
            seen while tracing (one line each); empty in strict mode, which raises.
        strict: whether strict conversion (``AUTOGRAPH_STRICT_CONVERSION``) was on.
        config: `tflab.runtime_config()`'s dict when the report was made.
        table: (property) the statement table as aligned text (`tflab.report.text.table`).
    """

    function_name: str
    filename: str
    original: str
    converted: str
    unified_diff: str
    statements: tuple[Statement, ...]
    warnings: tuple[str, ...] = ()
    strict: bool = False
    config: dict = config_field()

    def summary_line(self) -> str:
        """``while@27 → python ×2, while@31 → StatelessWhile 'while'`` (+ the warning count)."""
        parts = ", ".join(repr(s)[1:-1] for s in self.statements) or "no if/for/while"
        warn = f", {len(self.warnings)} warning(s)" if self.warnings else ""
        return parts + warn

    @property
    def table(self) -> str:
        """The statement table: line, kind, outcome, op, unrolled, source; a header and a rule."""
        if not self.statements:
            return f"{self.function_name} has no if, for or while statements"
        rows = []
        for s in self.statements:
            op = f"{s.op_type} {s.op}" if s.op else "-"
            if len(s.ops) > 1:
                op += f" (+{len(s.ops) - 1})"
            rows.append((s.lineno, s.kind, s.outcome, op, "-" if s.unrolled is None else str(s.unrolled),
                         s.source))
        return text_table(rows, header=("line", "kind", "outcome", "op", "unrolled", "source"),
                          align="<<<<<<")

    def to_text(self, color: bool = False, diff_lines: int | None = None) -> str:
        """The unified diff (optionally coloured, optionally cut), then the table.

        Args:
            color: colour ``+``/``-``/``@@`` lines with ANSI codes (the CLI does
                so only when stdout is a terminal).
            diff_lines: keep only this many diff lines; 0 leaves the diff out,
                None keeps all of it.

        Returns:
            The text, lines joined with ``"\\n"``.
        """
        all_lines = self.unified_diff.splitlines()
        lines = all_lines if diff_lines is None else all_lines[:diff_lines]
        if color:
            lines = [_colour(line) for line in lines]
        out = list(lines)
        if diff_lines and len(all_lines) > diff_lines:
            out.append(f"… ({len(all_lines) - diff_lines} more diff lines)")
        if out:
            out.append("")
        out.append(self.table)
        out += [f"note line {s.lineno}: {s.note}" for s in self.statements if s.note]
        out += [f"warning: {w}" for w in self.warnings]
        return "\n".join(out)


def _colour(line: str) -> str:
    if line.startswith(("+++", "---")):
        return _BOLD + line + _RESET
    if line.startswith("+"):
        return _GREEN + line + _RESET
    if line.startswith("-"):
        return _RED + line + _RESET
    if line.startswith("@@"):
        return _CYAN + line + _RESET
    return line


def _source_or_raise(fn: Callable) -> tuple[str, str, int]:
    """(source, filename, first line) of ``fn``, or one UsageError saying why there is none."""
    name = getattr(fn, "__qualname__", repr(fn))
    code = getattr(fn, "__code__", None)
    filename = getattr(code, "co_filename", "") if code else ""
    why = None
    if filename == "<string>":
        why = "it was defined with exec() or eval(), so its code has no file"
    elif filename.startswith("<stdin>") or filename.startswith("<ipython-input") \
            or filename == "<console>":
        why = f"it was typed into an interactive session ({filename})"
    if why is None:
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            why = f"inspect.getsource failed: {e}"
        else:
            return "".join(lines), inspect.getsourcefile(fn) or filename, start
    raise UsageError(
        f"{name} has no retrievable source: {why}. AutoGraph rewrites Python source, "
        f"so put the function in a .py file and import it from there")


@dataclasses.dataclass(frozen=True)
class _Stmt:
    lineno: int
    kind: str
    body: tuple[int, int]
    orelse: tuple[int, int] | None
    source: str
    simple_body: tuple[tuple[int, int], ...] = ()  # line ranges of simple body statements


def _find_statements(source: str, start: int) -> list[_Stmt]:
    """Every if/for/while in ``source`` (nested defs included) with file line ranges."""
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        # A lambda's getsource is the whole line it sits on, which may not parse alone.
        return []
    off = start - 1
    src_lines = text.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.For, ast.While)):
            kind = {ast.If: "if", ast.For: "for", ast.While: "while"}[type(node)]
            body = (node.body[0].lineno + off, node.body[-1].end_lineno + off)
            orelse = ((node.orelse[0].lineno + off, node.orelse[-1].end_lineno + off)
                      if node.orelse else None)
            simple = tuple((b.lineno + off, b.end_lineno + off) for b in node.body
                           if not any(isinstance(n, (ast.If, ast.For, ast.While, ast.With,
                                                     ast.Try, ast.FunctionDef))
                                      for n in ast.walk(b)))
            found.append(_Stmt(node.lineno + off, kind, body, orelse,
                               strip_comment(src_lines[node.lineno - 1]), simple))
    return sorted(found, key=lambda s: s.lineno)


def _user_lines(op, filename: str, first: int, last: int) -> tuple[int, ...]:
    """Line numbers of the op's creation stack that fall inside the function, outermost first."""
    tb = op.traceback
    if tb is None:  # some placeholders of body graphs carry no stack
        return ()
    out = []
    for frame in tb:
        if first <= frame.lineno <= last and same_file(frame.filename, filename):
            out.append(frame.lineno)
    return tuple(out)


def _period_copies(keys: list) -> int | None:
    """len/period for the smallest exact period of ``keys``; None when it has none."""
    n = len(keys)
    for p in range(1, n // 2 + 1):
        if n % p == 0 and all(keys[i] == keys[i - p] for i in range(p, n)):
            return n // p
    return None


def _count_copies(keys: list[tuple], simple: tuple[tuple[int, int], ...]) -> tuple[int, str]:
    """How many body copies a sequence of per-op keys holds, and a note on how it was read.

    ``keys`` are ``(op type, in-body line path)`` per op, in creation order.
    Each unrolled iteration re-runs the same body code, so it creates the same op
    types from the same source lines in the same order: the sequence is one
    iteration's sequence repeated, its smallest exact period is one iteration,
    and len/period is the number of copies. This is exact whenever iterations
    make the same ops, except that an iteration which is itself a repeat of
    identical op groups from one line (``x = (x + 1.0) + 1.0``) cannot be told
    from two iterations and counts twice: tracebacks carry lines, not columns.

    When they differ (a Python ``if`` on the loop index inside the body) there is
    no period. Then each simple statement of the body (one without nested control
    flow; ``simple`` holds their line ranges) is read alone: its own ops repeat
    once per time it ran, so its period gives how often it ran, and the most often
    run one gives the copy count; exact when some simple statement runs every
    iteration.
    """
    if not keys:
        return 0, "no op's creation stack points into the body"
    whole = _period_copies(keys)
    if whole is not None:
        return whole, ""
    best = 0
    for lo, hi in simple:
        sub = [k for k in keys if k[1] and lo <= k[1][0] <= hi]
        if sub:
            best = max(best, _period_copies(sub) or 1)
    if best == 0:
        return 1, "iterations traced different ops; no simple statement to count by"
    return best, ("iterations traced different ops; counted by the body statement "
                  "run most often")


@contextlib.contextmanager
def _strict_env(strict: bool) -> Iterator[None]:
    """Sets ``AUTOGRAPH_STRICT_CONVERSION`` to 1 or 0 for one trace, then restores it.
    AutoGraph reads the variable at each conversion failure, not at import."""
    old = os.environ.get(_STRICT_ENV)
    os.environ[_STRICT_ENV] = "1" if strict else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(_STRICT_ENV, None)
        else:
            os.environ[_STRICT_ENV] = old


class _FallbackWarnings(logging.Filter):
    """Collects AutoGraph's "could not transform" warnings, one line each, and keeps
    them off TF's own stderr handler: the report carries them instead."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "could not transform" not in msg:
            return True
        lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
        cause = next((ln for ln in lines if ln.startswith("Cause:")), "")
        self.messages.append(shorten_error(f"{lines[0]} {cause}"))
        return False


def _autograph_frame(e: BaseException, filename: str) -> str:
    """``file:line in fn`` of the innermost frame in ``filename`` that AutoGraph
    recorded for an error raised in converted code (its ``ag_error_metadata``,
    ``autograph/pyct/error_utils.py``: frames already mapped back to the user's
    source), or "" when there is none."""
    meta = getattr(e, "ag_error_metadata", None)
    for frame in reversed(getattr(meta, "translated_stack", None) or ()):
        if same_file(frame.filename, filename):
            return f"{frame.filename}:{frame.lineno} in {frame.function_name}"
    return ""


def _unconverted_hint(e: BaseException) -> str:
    """For a tensor used as a Python bool inside a function without source
    (defined with exec): AutoGraph could not convert that function, so it ran
    as plain Python, where ``if tensor:`` cannot become ``tf.cond``."""
    import traceback

    text = str(e)
    if "as a Python `bool`" not in text and type(e).__name__ != "OperatorNotAllowedInGraphError":
        return ""
    seen = set()
    while e is not None and id(e) not in seen:  # AutoGraph may re-raise: follow the chain
        seen.add(id(e))
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if f.filename.startswith("<") and not f.filename.startswith("<frozen")]
        if frames:
            f = frames[-1]
            return (f"; hint: {f.name} ({f.filename}, line {f.lineno}) has no source file "
                    f"(defined with exec), so AutoGraph ran it unconverted and its Python "
                    f"if/while on a tensor cannot become tf.cond/tf.while_loop: define it in a .py file")
        e = e.__cause__ or e.__context__
    return ""


def _is_strict(strict: bool | None) -> bool:
    if strict is not None:
        return bool(strict)
    try:
        return int(os.environ.get(_STRICT_ENV, "0")) > 0
    except ValueError:
        return False


@user_entry("while AutoGraph converted and traced it")
def autograph_diff(fn: Callable, *args: Any, strict: bool | None = None,
                   **kwargs: Any) -> AutographDiff:
    """Shows AutoGraph's rewrite of ``fn`` and what each ``if``/``for``/``while`` became.

    The function is traced once with ``args``/``kwargs`` (`tf.TensorSpec`s,
    tensors or Python values), because what a statement becomes depends on
    them: a `tf.Tensor` condition gives an ``If`` op, a Python one is decided at
    trace time; ``for i in tf.range(n)`` gives a ``While`` op, ``range(n)`` is
    unrolled into ``n`` body copies.

    Args:
        fn: a Python function, a `tf.function` (its ``python_function`` is
            used), a Keras layer or model (its ``call``) or a callable object
            (its ``__call__``).
        *args: positional arguments for the trace. With none, a `tf.function`'s
            ``input_signature`` is used.
        strict: True turns AutoGraph's "could not transform … will run it as-is"
            warning into an error by setting ``AUTOGRAPH_STRICT_CONVERSION=1``
            for the trace (``autograph/impl/api.py``,
            ``is_autograph_strict_conversion_mode``). None (default) follows the
            environment variable. Keyword-only: wrap ``fn`` in `functools.partial`
            if it takes its own ``strict``.
        **kwargs: keyword arguments for the trace.

    Returns:
        An `AutographDiff`.

    Raises:
        UsageError: ``fn`` has no retrievable source (defined with ``exec``, or
            typed into a REPL); ``fn`` is a class or an unbound method; an
            unbuilt Keras layer cannot be built from the first argument's
            shape; the arguments do not match a `tf.function`'s
            ``input_signature``; tracing raised (the message names the user's
            line, with a hint when the tensor ``if`` sits in an exec-defined
            helper AutoGraph ran unconverted); or, in strict mode, AutoGraph
            could not convert a function; ``strict`` is not a bool or None.

    Example:

    >>> def f(x, n):
    ...     if tf.reduce_sum(x) > 0:
    ...         x = -x
    ...     for _ in range(n):
    ...         x = x + 1.0
    ...     return x
    >>> d = tflab.autograph_diff(f, tf.TensorSpec([3]), 2)   # f saved in a file
    >>> [(s.kind, s.outcome, s.op_type, s.unrolled) for s in d.statements]
    [('if', 'graph', 'StatelessIf', None), ('for', 'python', None, 2)]
    """
    from tflab._api.argcheck import check_source_decodes, refuse_probe

    refuse_probe(fn, "fn", "autograph_diff")
    check_source_decodes(fn, "fn", "autograph_diff")
    import tensorflow as tf

    from tflab._user.target import user_frame

    if strict is not None and not isinstance(strict, bool):  # bool("no") is True: never guess
        raise UsageError(f"autograph_diff: strict must be True, False or None (follow "
                         f"{_STRICT_ENV}), got {type(strict).__name__} {shorten(repr(strict))}")
    from tflab._user.target import bound_user_method

    # The instance of a bound tf.function method is held (strongly) for the whole call;
    # one that was already freed (``Gate().run``) is traced with self=None, as TF does.
    python_fn, lead = bound_user_method(fn)
    if not callable(python_fn):
        raise UsageError(f"autograph_diff needs a function, got {type(fn).__name__}")
    from tflab._user.target import check_target, callable_name, signature_args

    check_target(fn, callable_name(fn))
    if not args and not kwargs and getattr(fn, "input_signature", None) is not None:
        args = tuple(fn.input_signature)
    else:
        args, kwargs = signature_args(fn, args, kwargs)
    if not (inspect.isfunction(python_fn) or inspect.ismethod(python_fn)):
        # A Keras layer/model or another callable object: convert the method
        # that holds its code (Keras' ``call``, else ``__call__``).
        call = _user_callable(getattr(python_fn, "call", None))
        if inspect.ismethod(call):
            build_layer(python_fn, args, kwargs)
        python_fn = call if inspect.ismethod(call) else _user_callable(python_fn.__call__)
    name = getattr(python_fn, "__qualname__", repr(python_fn))
    source, filename, start = _source_or_raise(python_fn)
    strict_on = _is_strict(strict)
    try:
        converted = tf.autograph.to_code(python_fn)
    except Exception as e:  # to_code re-parses the source; report why it could not
        raise UsageError(f"AutoGraph could not convert {name}: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from e
    diff = "".join(difflib.unified_diff(
        textwrap.dedent(source).splitlines(keepends=True),
        (converted if converted.endswith("\n") else converted + "\n").splitlines(keepends=True),
        fromfile=f"{filename} ({name})", tofile=f"tf.autograph.to_code({name})"))

    catcher = _FallbackWarnings()
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.addFilter(catcher)
    last = start + source.count("\n")
    counter = TraceCounter(filename, start, last)
    try:
        with _strict_env(strict_on), fresh_allowlist(), counter.installed():
            concrete = tf.function(python_fn).get_concrete_function(*lead, *args, **kwargs)
    except Exception as e:
        where = _autograph_frame(e, filename) or user_frame(e)
        mode = (f" under strict AutoGraph conversion ({_STRICT_ENV}=1)" if strict_on else "")
        from tflab.diagnosis import with_diagnosis

        raise with_diagnosis(UsageError(f"tracing {name}{mode} raised {error_line(e)}"
                                        + (f" (at {where})" if where else "") + _unconverted_hint(e)),
                             e, python_fn) from e
    finally:
        tf_logger.removeFilter(catcher)

    ops = [(op, _user_lines(op, filename, start, last)) for op in walk_ops(concrete.graph)]
    records = counter.by_graph.get(id(concrete.graph))
    if records is None and counter.active:  # no statement ran at all: none was reached
        records = {"runs": {}, "python": set(), "reached": {}, "branches": {}}
    statements = tuple(_classify(s, ops, records) for s in _find_statements(source, start))
    return AutographDiff(function_name=name, filename=filename, original=source,
                         converted=converted, unified_diff=diff, statements=statements,
                         warnings=tuple(catcher.messages), strict=strict_on)


def _user_callable(fn: Any) -> Any:
    """The user's own Python callable under ``fn`` (see `tflab._user.target.bound_user_method`);
    a bound method whose instance is gone stays TF's wrapper here (``autograph_diff``
    handles that case itself, with ``self=None`` as TF calls it)."""
    from tflab._user.target import bound_user_method

    callable_, lead = bound_user_method(fn)
    return getattr(fn, "python_function", fn) if lead else callable_


def _classify(stmt: _Stmt, ops: list, records: dict | None = None) -> Statement:
    want = _IF_OPS if stmt.kind == "if" else _WHILE_OPS | (_DATASET_LOOP_OPS if stmt.kind == "for" else set())
    # An If/While op belongs to the statement whose line is the innermost
    # in-function frame of its creation stack: AutoGraph's if_stmt/for_stmt call
    # is mapped back to the statement's own line.
    mine = [op for op, lines in ops if op.type in want and lines and lines[-1] == stmt.lineno]
    if mine:
        return Statement(stmt.lineno, stmt.kind, "graph", mine[0].name, None,
                         ops=tuple(op.name for op in mine), op_type=mine[0].type,
                         source=stmt.source)
    if records is not None:
        return _classify_counted(stmt, records)
    b0, b1 = stmt.body
    in_body = [(op, lines) for op, lines in ops if any(b0 <= ln <= b1 for ln in lines)]
    if stmt.kind == "if":
        in_else = stmt.orelse and [op for op, lines in ops
                                   if any(stmt.orelse[0] <= ln <= stmt.orelse[1] for ln in lines)]
        traced = [name for name, hit in (("then", in_body), ("else", in_else)) if hit]
        note = (f"Python condition; {' and '.join(traced)} branch traced" if traced
                else "Python condition; neither branch made ops")
        return Statement(stmt.lineno, stmt.kind, "python", None, None, note=note,
                         source=stmt.source)
    # Key: op type plus the in-function line path from the body on, so ops of one
    # iteration differ from each other but match the same op in the next iteration.
    keys = [(op.type, tuple(ln for ln in lines if ln >= b0)) for op, lines in in_body]
    copies, note = _count_copies(keys, stmt.simple_body)
    return Statement(stmt.lineno, stmt.kind, "python", None, copies, note=note,
                     source=stmt.source)


def _classify_counted(stmt: _Stmt, records: dict) -> Statement:
    """A statement with no If/While op of its own, read from the trace-time counts.

    ``unrolled`` is the number of times the loop body ran at trace time, which
    is the number of copies of the body traced into the FuncGraph (a ``break``
    iteration counts: its body ran up to the break)."""
    line = (stmt.lineno, stmt.kind)
    reached = records["reached"].get(line, 0)
    if stmt.kind == "if":
        if not reached:
            return Statement(stmt.lineno, "if", "python", None, None, source=stmt.source,
                             note="not reached at trace time (no branch traced)")
        taken = records["branches"].get(line, {"then": 0, "else": 0})
        times = (lambda n: f" {n}×") if reached > 1 else (lambda n: "")
        parts = [f"then branch traced{times(taken['then'])}"] if taken["then"] else []
        if taken["else"]:
            parts.append(f"else branch traced{times(taken['else'])}" if stmt.orelse
                         else f"condition False{times(taken['else'])} (then branch skipped)")
        return Statement(stmt.lineno, "if", "python", None, None, source=stmt.source,
                         note="Python condition; " + " and ".join(parts))
    runs = records["runs"].get(line, 0)
    if not reached:
        note = "not reached at trace time"
    elif stmt.kind == "while" and line not in records["python"] and runs == 0:
        note = "condition False at the first test: body never traced"
    else:
        note = f"statement reached {reached}× at trace time" if reached > 1 else ""
    return Statement(stmt.lineno, stmt.kind, "python", None, runs, note=note, source=stmt.source)
