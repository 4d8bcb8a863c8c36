"""Why a traced mode failed where eager ran: TF's own error line, and the tf.cond branch eager skipped.

* `innermost_error`: a graph or XLA failure arrives wrapped. Keras 3 re-raises
  an error from a layer's ``call`` as ``Exception encountered when calling
  TestModel.call(). … Arguments received by …`` (``keras/src/utils/
  traceback_utils.py``, ``inject_argument_info_in_traceback``) with the original
  as ``__context__`` (raised ``from None``); AutoGraph prefixes ``in user code:``
  and the user's frames. This walks ``__cause__``/``__context__`` to the
  innermost exception and strips those layers from its message, so the line
  quoted is TF's (or Python's) own: ``TypeError: 'module' object is not callable``.
* `cond_branch_at`: whether the failing line lies inside a function passed as a
  branch of ``tf.cond`` (``true_fn``/``false_fn``, a lambda or a named function),
  read from the file's AST.
* `eager_calls`: how many times the eager run called that branch function,
  measured with ``sys.setprofile`` on one eager forward pass. Eager ``tf.cond``
  calls only the branch its predicate picks (``tensorflow/python/ops/cond.py``:
  in eager mode ``cond`` runs ``true_fn()`` or ``false_fn()``); tracing builds
  both (``cond_v2.cond_v2`` traces each branch into its own FuncGraph), so an
  error in the branch eager skipped shows only in graph and XLA.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
import re
import sys
from typing import Callable

__all__ = ["innermost_error", "error_chain", "cond_branch_at", "CondBranch", "eager_calls", "user_line"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WRAPPER = re.compile(r"^(Exception encountered when calling|Arguments received by|•|in user code:|File \"|"
                      r"Graph execution error:|Detected at node)")


def error_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every ``__cause__``/``__context__`` below it, outermost first (no cycles)."""
    out: list[BaseException] = []
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        out.append(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return out


def _own_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message that is not a Keras/AutoGraph wrapper line or a code echo."""
    text = _ANSI.sub("", str(getattr(exc, "message", None) or exc))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].startswith("in user code"):
        for ln in reversed(lines):  # AutoGraph: the real error is the last 'XError: …' line
            if re.match(r"^[A-Z]\w*(Error|Exception|Warning)\b", ln):
                return ln
    wrapped = bool(lines) and lines[0].startswith("Exception encountered when calling")
    for i, ln in enumerate(lines):
        if _WRAPPER.match(ln):
            continue
        if wrapped and i > 0 and lines[i - 1].startswith("File \""):
            continue  # a source line echoed under a frame
        return f"{type(exc).__name__}: {ln}"
    return type(exc).__name__


def innermost_error(exc: BaseException, limit: int = 300) -> str:
    """TF's (or Python's) own error line under Keras' and AutoGraph's wrappers.

    Args:
        exc: what the traced mode raised.
        limit: characters kept.

    Returns:
        E.g. ``"TypeError: 'module' object is not callable"`` for Keras'
        ``"Exception encountered when calling TestModel.call(). …"``.
    """
    # TF's private status exceptions (_NotOkStatusException under an InvalidArgumentError) are
    # the same error in TF's C++ words: the innermost public one is quoted.
    from tflab._user.usercode import uncaught_chain

    # Only what the error was raised from: a context TF caught and handled (tf.gather's
    # AttributeError on a Keras variable) is not the error (`tflab._user.usercode.uncaught_chain`).
    chain = [e for e in uncaught_chain(exc) if not type(e).__name__.startswith("_")] or [exc]
    line = _own_line(chain[-1])
    if line == type(chain[-1]).__name__ and len(chain) > 1:
        line = _own_line(chain[0])
    return line if len(line) <= limit else line[: limit - 1] + "…"


def user_line(exc: BaseException) -> tuple[str, int] | None:
    """The innermost user frame (file, line) of ``exc`` or the exceptions it wraps."""
    from tflab._user.usercode import user_frame

    for e in reversed(error_chain(exc)):
        where = user_frame(e)
        m = re.match(r"^(.*):(\d+) in \S+$", where)
        if m:
            return m.group(1), int(m.group(2))
    return None


@dataclasses.dataclass(frozen=True)
class CondBranch:
    """A function passed to ``tf.cond`` as a branch, found in the source.

    Attributes:
        which: ``"true_fn"`` or ``"false_fn"``.
        name: ``"<lambda>"`` or the function's name.
        filename, lineno: where the branch function starts.
        cond_line: the line of the ``tf.cond`` call.
    """

    which: str
    name: str
    filename: str
    lineno: int
    cond_line: int


@functools.lru_cache(maxsize=32)
def _parsed(filename: str) -> ast.AST | None:
    source = "".join(linecache.getlines(filename))
    try:
        return ast.parse(source) if source else None
    except SyntaxError:
        return None


def cond_branch_at(filename: str, line: int) -> CondBranch | None:
    """The ``tf.cond`` branch function whose body holds ``filename:line``, or None."""
    tree = _parsed(filename)
    if tree is None:
        return None
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found: list[tuple[int, CondBranch]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name != "cond":
            continue
        branches = list(zip(("true_fn", "false_fn"), node.args[1:3]))
        branches += [(k.arg, k.value) for k in node.keywords if k.arg in ("true_fn", "false_fn")]
        for which, arg in branches:
            fn = arg if isinstance(arg, ast.Lambda) else defs.get(arg.id) if isinstance(arg, ast.Name) else None
            if fn is None:
                continue
            body_start = fn.body.lineno if isinstance(fn, ast.Lambda) else fn.lineno
            if body_start <= line <= (fn.end_lineno or fn.lineno) or fn.lineno <= line <= (fn.end_lineno or fn.lineno):
                found.append(((fn.end_lineno or fn.lineno) - fn.lineno,
                              CondBranch(which, "<lambda>" if isinstance(fn, ast.Lambda) else fn.name, filename,
                                         fn.lineno, node.lineno)))
    if not found:
        return None
    span = min(s for s, _ in found)
    inner = [b for s, b in found if s == span]
    # Two branch functions on the same line (cond(p, lambda: a, lambda: b)): the line alone cannot
    # say which failed, and eager_calls could not tell them apart: no claim.
    return inner[0] if len({(b.name, b.lineno) for b in inner}) == 1 and len(inner) == 1 else None


def eager_calls(run_eager: Callable[[], object], branch: CondBranch) -> int:
    """How many times one eager run of ``run_eager`` calls the branch function (``sys.setprofile``)."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event == "call":
            code = frame.f_code
            if code.co_name == branch.name and code.co_firstlineno == branch.lineno \
                    and code.co_filename == branch.filename:
                calls += 1

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        run_eager()
    finally:
        sys.setprofile(old)
    return calls
