"""Traces read from TF's log: `capture_trace_log`, `group_logged_traces`, `trace_script`.

TF 2.21 logs "Creating new FuncGraph …" at level 1 on the ``tensorflow``
logger for every trace (``tracing_compilation._maybe_define_function``), so
any script can be explained without patching TF (``tflab retrace SCRIPT.py``).
Traces are keyed by the tf.function OBJECT that made them (found on the call
stack in-process, or by the address in the log text), so two instances of a
class with a ``@tf.function`` method, or two closures from one factory, are
explained apart. TF logs a trace as it starts, so this path cannot tell a
trace that raised, and it has no values, so it cannot see stale reads (only
`tflab.RetraceProbe` can). `cached_traces` reads a tf.function's trace cache,
the baseline later traces are compared with. The reasons come from
`tflab.retrace_reasons`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import runpy
import sys
import types
from typing import Any, Callable, Iterator, Sequence

from tflab.errors import Terminated, UsageError
from tflab.retrace_reasons import (NO_VARIABLE_CREATION, VARIABLE_CREATION, Trace, _short_name,
                                   function_type_inputs, make_trace)

# ---------------------------------------------------------------------------
# The "Creating new FuncGraph" log record
# ---------------------------------------------------------------------------

_LOG_PREFIX = "Creating new FuncGraph for Python function "
_FUNC_REPR = re.compile(r"^<(?:function|bound method) (\S+?)(?: at (0x[0-9a-fA-F]+)| of )")
_PARAM_LINE = re.compile(r"^  (\S+) \((\w+)\): (.*)$")
_SCOPE_RE = re.compile(r"scope_type=<ScopeType\.(\w+)")
_CONTEXT_RE = re.compile(r"FunctionContext\(context=(.*), scope_type=")


@dataclasses.dataclass(frozen=True)
class LoggedTrace:
    """One parsed "Creating new FuncGraph …" record.

    Attributes:
        function: the Python function's qualified name (``step``, ``Model.call``).
        module: its module when known ("" from text), used to hide TF's own helpers.
        scope: the FunctionContext scope_type name.
        context: the FunctionContext ``context`` text (eager context, device scope…).
        inputs: (parameter, TraceType text) pairs of the FunctionType TF looked up.
        key: which tf.function object traced: ``("object", n)`` in-process
            (the n-th distinct live `tf.function` seen), ``("address",
            qualname, "0x…")`` from the log text (the address TF prints is
            that of the traced wrapper, one per object and FunctionContext
            scope), or None when unknown (grouped by name).
        function_id: ``id()`` of the tf.function object in-process, else None.
        owner: a label that tells objects with one qualified name apart: the
            instance a method is bound to (``Net@0x7f…``), else the
            tf.function's address (``@0x7f…``); "" when unknown.
    """

    function: str
    module: str
    scope: str | None
    context: str | None
    inputs: tuple[tuple[str, str], ...]
    key: Any = None
    function_id: int | None = None
    owner: str = ""


def parse_trace_log_message(message: str) -> LoggedTrace | None:
    """Parses the text of TF 2.21's level-1 "Creating new FuncGraph …" log message.

    The record comes from ``tracing_compilation._maybe_define_function``:
    ``"Creating new FuncGraph for Python function %r (key: %r, %r)"`` with the
    Python function, its FunctionContext and the FunctionType TF looked up.

    Returns:
        A `LoggedTrace`, or None when ``message`` is another record.
    """
    if not message.startswith(_LOG_PREFIX):
        return None
    rest = message[len(_LOG_PREFIX):]
    fm = _FUNC_REPR.match(rest)
    function = fm.group(1) if fm else rest.split(" (key: ", 1)[0]
    sm = _SCOPE_RE.search(rest)
    cm = _CONTEXT_RE.search(rest)
    inputs = []
    in_params = False
    for line in rest.splitlines():
        if line.rstrip().endswith("Input Parameters:"):
            in_params = True
            continue
        if line.startswith("Output Type:"):
            break
        if in_params:
            pm = _PARAM_LINE.match(line)
            if pm:
                inputs.append((pm.group(1), pm.group(3)))
    address = fm.group(2) if fm and fm.group(2) else None
    return LoggedTrace(function=function, module="", scope=sm.group(1) if sm else None,
                       context=cm.group(1) if cm else None, inputs=tuple(inputs),
                       key=("address", function, address) if address else None,
                       owner=f"@{address}" if address else "")


def _tracing_function_object() -> Any:
    """The `tf.function` object whose trace is being logged, found on the call stack.

    TF 2.21 logs the wrapper it traces (``TracingOptions.python_function``, a
    new one per object and per FunctionContext scope), not the Function. The
    Function is ``self`` in the nearest frame of
    ``polymorphic_function.py`` (``Function._call``, ``_initialize``,
    ``get_concrete_function``…); the nearest one, so a tf.function called
    while another traces is told apart from its caller.

    Returns:
        The `Function`, or None when no such frame is found.
    """
    from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf

    frame = sys._getframe(1)
    for _ in range(80):
        if frame is None:
            return None
        if frame.f_code.co_filename.endswith("polymorphic_function.py"):
            obj = frame.f_locals.get("self")
            if isinstance(obj, pf.Function):
                return obj
        frame = frame.f_back
    return None


def _function_owner(fn: Any) -> str:
    """``Net@0x7f…`` for a tf.function method bound to an instance, else ``@0x7f…`` (the Function's id)."""
    from tensorflow.python.util import tf_decorator

    try:
        _, target = tf_decorator.unwrap(getattr(fn, "_python_function", None))
        holder = getattr(target, "__self__", None)
        # A method decorated in its class: TF binds it to a TfMethodTarget
        # holding a weak reference to the instance (class_method_to_instance_method).
        instance = holder.target if type(holder).__name__ == "TfMethodTarget" else holder
    except Exception:
        instance = None
    if instance is not None and not isinstance(instance, (type, types.ModuleType)):
        return f"{type(instance).__name__}@{id(instance):#x}"
    return f"@{id(fn):#x}"


def _logged_trace_from_record(record: logging.LogRecord,
                              identify: Callable[[Any], Any] | None = None) -> LoggedTrace | None:
    if not isinstance(record.msg, str) or not record.msg.startswith(_LOG_PREFIX):
        return None
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) == 3 and hasattr(args[2], "parameters"):
        # In-process: the record carries the real FunctionContext and FunctionType,
        # and the traced tf.function object is on the stack.
        fn, key, ftype = args
        scope = getattr(getattr(key, "scope_type", None), "name", None)
        owner = _tracing_function_object()
        return LoggedTrace(function=getattr(fn, "__qualname__", None) or repr(fn),
                           module=getattr(fn, "__module__", "") or "", scope=scope,
                           context=repr(getattr(key, "context", None)),
                           inputs=function_type_inputs(ftype),
                           key=identify(owner) if (owner is not None and identify) else None,
                           function_id=id(owner) if owner is not None else None,
                           owner=_function_owner(owner) if owner is not None else "")
    return parse_trace_log_message(record.getMessage())


class _TraceLogHandler(logging.Handler):
    def __init__(self, sink: list[LoggedTrace]):
        super().__init__(level=1)
        self.sink = sink
        # id -> (weak reference, serial): an id is reused once its object is
        # freed, so a key is a serial number per distinct live object.
        self._seen: dict[int, tuple[Any, int]] = {}
        self._serial = 0

    def _identify(self, obj: Any) -> tuple[str, int]:
        import weakref

        known = self._seen.get(id(obj))
        if known is not None and known[0]() is obj:
            return ("object", known[1])
        self._serial += 1
        self._seen[id(obj)] = (weakref.ref(obj), self._serial)
        return ("object", self._serial)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            t = _logged_trace_from_record(record, self._identify)
        except Exception:  # a log handler must never break the user's program
            return
        if t is not None:
            self.sink.append(t)


@contextlib.contextmanager
def capture_trace_log() -> Iterator[list[LoggedTrace]]:
    """Collects every "Creating new FuncGraph …" record logged inside the block.

    Lowers the ``tensorflow`` logger to level 1 for the block and keeps its
    existing handlers at their previous threshold, so nothing extra is printed.
    Records below that threshold do not propagate to the parent loggers'
    handlers either (pytest's log capture would show every trace record, with
    the tensors TF logs at level 2, under a failing test). TF itself is not
    patched.

    Yields:
        A list that fills with `LoggedTrace` records, in trace order.
    """
    logger = logging.getLogger("tensorflow")
    sink: list[LoggedTrace] = []
    handler = _TraceLogHandler(sink)
    old_level = logger.level
    threshold = logger.getEffectiveLevel()
    old_handlers = [(h, h.level) for h in logger.handlers]
    old_propagate = logger.propagate
    forward = _PropagateFrom(logger, threshold) if old_propagate else None
    for h, lvl in old_handlers:
        h.setLevel(max(lvl, threshold))
    logger.addHandler(handler)
    if forward is not None:
        logger.addHandler(forward)
        logger.propagate = False
    logger.setLevel(1)
    try:
        yield sink
    finally:
        logger.removeHandler(handler)
        if forward is not None:
            logger.removeHandler(forward)
            logger.propagate = old_propagate
        logger.setLevel(old_level)
        for h, lvl in old_handlers:
            h.setLevel(lvl)


class _PropagateFrom(logging.Handler):
    """Propagates records at or above ``level`` to the parent loggers' handlers.

    Does what ``Logger.callHandlers`` does past the logger itself, for the
    records that would have passed the logger's own level before
    `capture_trace_log` lowered it.
    """

    def __init__(self, logger: logging.Logger, level: int):
        super().__init__(level=level)
        self.logger = logger

    def handle(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return False
        parent = self.logger.parent
        while parent is not None:
            for h in parent.handlers:
                if record.levelno >= h.level:
                    h.handle(record)
            if not parent.propagate:
                break
            parent = parent.parent
        return True

    def emit(self, record: logging.LogRecord) -> None:  # handle() does the work
        pass


@dataclasses.dataclass(frozen=True)
class FunctionTraces:
    """The traces of one tf.function seen in a log, with reasons.

    Attributes:
        function: the Python function's name (its qualified name without the
            enclosing function's ``<locals>`` prefix).
        traces: one `Trace` per "Creating new FuncGraph" record, oldest first.
        owner: what tells this tf.function object apart from others with the
            same name (``Net@0x7f…``: the instance of a method; ``@0x7f…``:
            the object's address), or "".
        label: the name printed: ``function``, plus ``of OWNER`` when
            another tf.function in the same report has the same name.
    """

    function: str
    traces: tuple[Trace, ...]
    owner: str = ""
    label: str = ""

    @property
    def trace_count(self) -> int:
        return len(self.traces)

    @property
    def function_name(self) -> str:
        """``function``, under the name every result uses for the function's name."""
        return self.function

    def to_text(self) -> str:
        lines = [f"{self.label or self.function}: {self.trace_count} trace(s)"]
        for t in self.traces:
            lines.extend("  " + ln for ln in t.to_text().splitlines())
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"function": self.function, "label": self.label or self.function,
                "owner": self.owner, "trace_count": self.trace_count,
                "traces": [t.to_dict() for t in self.traces]}

    def __repr__(self) -> str:
        return f"<FunctionTraces {self.label or self.function}: {self.trace_count} trace(s)>"


def _is_tf_internal(t: LoggedTrace) -> bool:
    # TF's own helpers (variable initializers, tf.data wrappers) are not the user's functions.
    return t.module.startswith("tensorflow") or t.function.startswith(
        ("Function._initialize_uninitialized_variables", "StructuredFunctionWrapper."))


def _group_key(t: LoggedTrace, aliases: dict, groups: dict) -> Any:
    """The tf.function object a record belongs to (see `group_logged_traces`)."""
    if t.key is None:
        return ("name", t.function)
    if t.key[0] != "address" or t.key in groups:
        return aliases.get(t.key, t.key)
    if t.key in aliases:
        return aliases[t.key]
    # From the log text: TF logs a new wrapper (a new address) for the first
    # trace with variable creation disabled. It belongs to the latest object
    # of that name whose variable-creation trace had the same inputs.
    if t.scope == NO_VARIABLE_CREATION:
        for key in reversed(list(groups)):
            recs = groups[key]
            if (key[0] == "address" and recs[0].function == t.function
                    and not any(r.scope == NO_VARIABLE_CREATION for r in recs)
                    and any(r.scope == VARIABLE_CREATION and r.inputs == t.inputs for r in recs)):
                aliases[t.key] = key
                return key
    return t.key


def explain_records(records: Sequence[LoggedTrace], prior: Sequence[Trace] = (),
                    prior_contexts: Sequence[str | None] = (),
                    reduce_retracing: bool = False) -> list[Trace]:
    """Explains the logged traces of ONE tf.function object, after its ``prior`` traces.

    Args:
        records: that object's records, in trace order.
        prior: traces the object made before the records (`cached_traces`);
            the new traces are numbered after them and compared with them too.
        prior_contexts: the FunctionContext ``context`` text of each prior trace.
        reduce_retracing: the function has ``reduce_retracing=True``.

    Returns:
        One `Trace` per record (the prior ones are not repeated).
    """
    traces: list[Trace] = list(prior)
    contexts: list[str | None] = list(prior_contexts) + [None] * (len(prior) - len(prior_contexts))
    for rec in records:
        traces.append(make_trace(len(traces) + 1, rec.inputs, traces, scope=rec.scope,
                                 context=rec.context, previous_contexts=contexts,
                                 reduce_retracing=reduce_retracing, outcome_known=False))
        contexts.append(rec.context)
    return traces[len(prior):]


def group_logged_traces(logged: Sequence[LoggedTrace], include_internal: bool = False,
                        reduce_retracing: bool = False) -> tuple[FunctionTraces, ...]:
    """Groups logged traces by tf.function object and explains each one with `explain`.

    TF logs a trace when it starts, so a logged trace may have raised: the
    reasons never claim it succeeded (TF's variable-creation re-trace names
    both outcomes).

    Records are grouped by the tf.function OBJECT that traced (``key``), so
    two instances of a class with a ``@tf.function`` method, or two closures
    made by one factory, are two functions, each compared with its own
    traces only. Records without a key are grouped by qualified name.

    Args:
        logged: records from `capture_trace_log`, in trace order.
        include_internal: keep TF's own helper functions (variable
            initializers, tf.data wrappers).
        reduce_retracing: the functions have ``reduce_retracing=True`` (the
            log does not say; known when the tf.function object is at hand).

    Returns:
        One `FunctionTraces` per tf.function object, in first-trace order;
        objects that share a name are labelled ``NAME of OWNER``.
    """
    groups: dict[Any, list[LoggedTrace]] = {}
    aliases: dict[Any, Any] = {}
    for t in logged:
        if include_internal or not _is_tf_internal(t):
            groups.setdefault(_group_key(t, aliases, groups), []).append(t)
    names = [_short_name(recs[0].function) for recs in groups.values()]
    out = []
    for name, records in zip(names, groups.values()):
        owner = records[0].owner
        label = f"{name} of {owner}" if owner and names.count(name) > 1 else name
        out.append(FunctionTraces(function=name, owner=owner, label=label,
                                  traces=tuple(explain_records(records,
                                                               reduce_retracing=reduce_retracing))))
    return tuple(out)


def _cache_keys(fn: Any) -> list[tuple[Any, Any]]:
    """The (FunctionContext, FunctionType) keys of a tf.function's trace cache, oldest first."""
    primary = getattr(getattr(fn, "_function_cache", None), "_primary", None)
    try:
        return list(primary.keys()) if primary is not None else []
    except Exception:  # private TF API moved: no earlier traces to compare with
        return []


def cached_traces(fn: Any, keys: Sequence[tuple[Any, Any]] | None = None) -> tuple[list[Trace], list[str]]:
    """The traces a tf.function already holds in its trace cache, as `Trace` records.

    TF 2.21's ``FunctionCache`` (``tensorflow/core/function/polymorphism/
    function_cache.py``) is an ordered map ``(FunctionContext, FunctionType)
    -> ConcreteFunction``; ``experimental_get_tracing_count()`` is its length.
    The FunctionTypes are the ones TF traced (relaxed by
    ``reduce_retracing``), oldest first; traces that raised are not cached.
    The records are the baseline later traces are compared with: their kind
    is "cached" and they carry no reasons of their own.

    Args:
        fn: a `tf.function`.
        keys: the cache keys read earlier (``_cache_keys``); read now when None.

    Returns:
        (traces numbered from 1, the FunctionContext ``context`` text of each).
        Both empty when the cache cannot be read.
    """
    traces: list[Trace] = []
    contexts: list[str] = []
    for ctx, ftype in (_cache_keys(fn) if keys is None else keys):
        scope = getattr(getattr(ctx, "scope_type", None), "name", None)
        traces.append(Trace(index=len(traces) + 1, kind="cached", reasons=[], fixes=[],
                            inputs=function_type_inputs(ftype), scope=scope))
        contexts.append(repr(getattr(ctx, "context", None)))
    return traces, contexts


# What the log-based report cannot show (also in ``tflab retrace --help``).
STALE_READ_NOTE = ("stale closure or global reads (a Python value changed without a retrace) are "
                   "detected by tflab.RetraceProbe only: TF's trace log carries no values")


@dataclasses.dataclass(frozen=True)
class ScriptTraces:
    """What ``tflab retrace SCRIPT.py`` found.

    Attributes:
        script: the script path.
        functions: one `FunctionTraces` per tf.function that traced, in first-trace order.
        error: None, or one line saying how the script failed and where.
        note: None, or why some traces may be missing (the script raised the
            ``tensorflow`` logger's level, which hides TF's level-1 records).
    """

    script: str
    functions: tuple[FunctionTraces, ...]
    error: str | None = None
    note: str | None = None

    @property
    def trace_count(self) -> int:
        return sum(f.trace_count for f in self.functions)

    def to_text(self) -> str:
        if not self.functions:
            head = f"{self.script}: no tf.function traced"
        else:
            head = (f"{self.script}: {self.trace_count} trace(s) in {len(self.functions)} "
                    f"tf.function(s)")
        tail = [f"note: {self.note}"] if self.note else []
        if self.functions:
            tail.append(f"note: {STALE_READ_NOTE}")
        return "\n".join([head] + [f.to_text() for f in self.functions] + tail)

    def to_dict(self) -> dict:
        return {"script": self.script, "trace_count": self.trace_count,
                "functions": [f.to_dict() for f in self.functions], "error": self.error,
                "note": self.note}

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the fragment the ``--html`` pages use (`tflab._html.fragment`)."""
        from tflab._html import fragment

        return fragment(self)

    def __repr__(self) -> str:
        return (f"<ScriptTraces {self.script}: " + ", ".join(
            f"{f.label or f.function}×{f.trace_count}" for f in self.functions) + ">")


def trace_script(path: str, argv: Sequence[str] = (), include_internal: bool = False) -> ScriptTraces:
    """Runs a Python script as ``__main__`` and explains every tf.function trace it made.

    Args:
        path: the script (``.py``).
        argv: its command-line arguments (``sys.argv[1:]`` inside the script).
        include_internal: also list TF's own helper functions.

    Returns:
        A `ScriptTraces`; when the script raised or exited non-zero, ``error``
        says so in one line (the traces up to then are still listed).

    Raises:
        UsageError: ``path`` does not exist or is not a ``.py`` file.
    """
    from tflab._target import user_frame
    from tflab._usercode import process_guard

    if not os.path.exists(path):
        raise UsageError(f"script {path!r} does not exist; give a path to a .py file")
    if os.path.isdir(path) or not path.endswith(".py"):
        raise UsageError(f"script {path!r} is not a .py file")
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    error = note = None
    with capture_trace_log() as logged:
        try:
            with process_guard():  # a fork()ed child ends here; the script's chdir is undone
                runpy.run_path(path, run_name="__main__")
        except Terminated:  # SIGTERM (the CLI's handler), not the script's sys.exit: exit 143
            raise
        except SystemExit as e:
            if e.code not in (None, 0):
                error = f"{path} exited with status {e.code}"
        except SyntaxError as e:  # raised by runpy's compile: the place is in the error itself
            where = f"{e.filename or path}:{e.lineno}" if e.lineno else ""
            error = f"{path} raised SyntaxError: {e.msg}" + (f" (at {where})" if where else "")
        except Exception as e:  # the user's script failed: one line, their frame
            where = user_frame(e)
            first = (str(e).strip().splitlines() or [""])[0]
            error = (f"{path} raised {type(e).__name__}: {first}" + (f" (at {where})" if where else ""))
        except BaseException as e:  # e.g. raise BaseException("x"): one line too; Ctrl-C still interrupts
            if isinstance(e, (KeyboardInterrupt, GeneratorExit)):
                raise
            from tflab._usercode import describe

            error = describe(e, path, "while running")
        finally:
            sys.argv, sys.path[:] = old_argv, old_path
        level = logging.getLogger("tensorflow").level
        if level != 1:
            note = (f"the script set the tensorflow logger to level {logging.getLevelName(level)}, "
                    f"which hides TF's level-1 trace records: traces after that are not listed")
    return ScriptTraces(script=path, functions=group_logged_traces(logged, include_internal),
                        error=error, note=note)

