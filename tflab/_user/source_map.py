"""Traced ops and AutoGraph statements mapped back to the user's source lines.

Shared by `tflab.autograph` (what each ``if``/``for``/``while`` became) and
`tflab.diagnosis` (which line made a trace fail), below both:

* `TraceCounter`: counts, per source line, what AutoGraph's operators did
  while one trace ran;
* `walk_ops`: every op of a FuncGraph and of its If/While branch graphs;
* `same_file`, `strip_comment`, `error_line`, `shorten_error`: source and error
  text helpers; `build_layer`: builds an unbuilt Keras layer before its
  ``call`` is traced.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterator

from tflab._tf.autograph import (branch_graphs, counting_operators, extract_stack,
                                 library_function_graph, traced_graph)
from tflab.errors import UsageError


def strip_comment(line: str) -> str:
    code, _, _ = line.partition("  #")  # table display only; keeps '#' inside strings mostly
    return code.strip()


def walk_ops(graph) -> Iterator:
    """Every op of a FuncGraph and of its If/While branch/body FuncGraphs, depth first,
    each nested graph's ops placed before the op that owns them (their creation order)."""
    for op in graph.get_operations():
        for sub in branch_graphs(op):
            yield from walk_ops(sub)
        for sub in _dataset_function_graphs(graph, op):
            yield from walk_ops(sub)
        yield op


def _dataset_function_graphs(graph, op) -> list:
    """The FuncGraphs of a tf.data op's functions (``f`` of ScanDataset/ReduceDataset/MapDataset,
    ``predicate`` of TakeWhileDataset/FilterDataset): where AutoGraph puts the body of a
    ``for x in dataset`` loop, kept in the graph's function library, not on the op."""
    if not op.type.endswith("Dataset"):
        return []
    out = []
    for attr in ("f", "predicate"):
        try:
            name = op.get_attr(attr).name
        except (ValueError, TypeError, AttributeError):
            continue
        sub = library_function_graph(graph, name)
        if sub is not None:
            out.append(sub)
    return out


def same_file(a: str, b: str) -> bool:
    if a == b:
        return True
    # Frames may carry a path relative to the root ("tmp/x.py" for "/tmp/x.py").
    return os.path.abspath(a) == os.path.abspath(b) or b.endswith(os.sep + a.lstrip(os.sep))


class TraceCounter:
    """Counts, per source line of the function, what AutoGraph's operators did
    while one trace ran: how often each ``for``/``while`` body ran, whether the
    loop ran as a Python loop, and which branch each Python ``if`` took.

    The generated code calls ``ag__.for_stmt``/``while_stmt``/``if_stmt``
    (``autograph/operators/control_flow.py``) through the ``ag__`` module that
    ``api.PyToTF.get_extra_locals`` builds once; those calls are wrapped there
    so each body call is counted under the statement's line (read from
    `tflab._tf.autograph.extract_stack`, which AutoGraph's ``StackTraceMapper`` maps back
    to the user's file, as for op tracebacks). ``_py_for_stmt``,
    ``_py_while_stmt`` and ``_py_if_stmt`` (the Python-loop/if paths) are
    wrapped in ``control_flow`` to mark a statement as run by Python.

    Body calls inside AutoGraph's temporary ``FuncGraph('tmp')`` (it stages one
    loop iteration there to type undefined loop variables; the graph is thrown
    away) are not counted, and counts are kept per traced FuncGraph, so a
    function traced twice (variable creation) is counted once.
    """

    def __init__(self, filename: str, first: int, last: int) -> None:
        self.filename, self.first, self.last = filename, first, last
        self.by_graph: dict[int, dict] = {}
        self._stack: list[int | None] = []
        self.active = False  # True once the operators were wrapped

    def _line(self) -> int | None:
        best = None
        for frame in extract_stack():
            if self.first <= frame.lineno <= self.last and same_file(frame.filename, self.filename):
                best = frame.lineno
        return best

    def _records(self) -> dict | None:
        """The records of the FuncGraph being traced, or None inside a 'tmp' staging graph."""
        g = traced_graph()
        if g is None:
            return None
        return self.by_graph.setdefault(id(g), {"runs": {}, "python": set(), "reached": {},
                                                "branches": {}})

    def _wrap_stmt(self, original, body_index: int, kind: str):
        counter = self

        def wrapper(*args, **kwargs):
            # Keyed by (line, kind): AutoGraph turns a `break` into an extra
            # if_stmt mapped to the loop's own line.
            line = counter._line()
            line = None if line is None else (line, kind)
            rec = counter._records()
            if line is None or rec is None:
                return original(*args, **kwargs)
            rec["reached"][line] = rec["reached"].get(line, 0) + 1
            args = list(args)
            body = args[body_index]

            def counted_body(*a, **k):
                r = counter._records()
                if r is not None:
                    r["runs"][line] = r["runs"].get(line, 0) + 1
                return body(*a, **k)

            args[body_index] = counted_body
            counter._stack.append(line)
            try:
                return original(*args, **kwargs)
            finally:
                counter._stack.pop()
        return wrapper

    def _wrap_py(self, original, kind: str):
        counter = self

        def wrapper(*args, **kwargs):
            line = counter._stack[-1] if counter._stack else None
            rec = counter._records()
            if line is not None and rec is not None:
                rec["python"].add(line)
                if kind == "if":
                    taken = "then" if args[0] else "else"
                    per = rec["branches"].setdefault(line, {"then": 0, "else": 0})
                    per[taken] += 1
            return original(*args, **kwargs)
        return wrapper

    @contextlib.contextmanager
    def installed(self) -> Iterator["TraceCounter"]:
        """Counts while the body runs (`tflab._tf.autograph.counting_operators`).

        When TF's layout changed nothing is wrapped and ``active`` stays False:
        ``by_graph`` stays empty and callers read op tracebacks instead.
        """
        with counting_operators(self._wrap_stmt, self._wrap_py) as wrapped:
            self.active = wrapped
            yield self


def shorten_error(text: str, limit: int = 240) -> str:
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", text.strip())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def error_line(e: BaseException) -> str:
    """The informative line of an exception: AutoGraph's StagingError starts with
    "in user code:" and puts the real ``XxxError: …`` line last."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].startswith("in user code"):
        inner = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception):", ln)]
        if inner:
            return shorten_error(inner[-1])
    return shorten_error(f"{type(e).__name__}: {lines[0]}")


def build_layer(layer: Any, args: tuple, kwargs: dict) -> None:
    """Builds an unbuilt Keras layer from its first argument's shape: tracing its
    ``call`` directly skips ``__call__``, which is where Keras would build it
    (and create the weights ``call`` reads)."""
    if getattr(layer, "built", True) or not hasattr(layer, "build"):
        return
    first = args[0] if args else next(iter(kwargs.values()), None)
    shape = getattr(first, "shape", None)
    name = type(layer).__name__
    if shape is None:
        raise UsageError(f"{name} is an unbuilt Keras layer and its first argument has no shape "
                         f"to build it with; call the layer once on an input first")
    try:
        layer.build(tuple(shape))
    except Exception as e:
        raise UsageError(f"{name} is an unbuilt Keras layer and {name}.build({tuple(shape)}) "
                         f"raised {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                         f"; call the layer once on an input first") from e
