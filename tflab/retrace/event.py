"""One `TraceEvent` per trace, made at one place from TF's own tracing frame.

TF 2.21 has no callback registry for traces. It has two points that run only
while it traces, both in
``tensorflow/python/eager/polymorphic_function/tracing_compilation.py``,
``_maybe_define_function``:

* the level-1 record ``"Creating new FuncGraph for Python function %r (key:
  %r, %r)"`` on the ``tensorflow`` logger, logged just before the trace; and
* ``tracing_options.python_function`` (``TracingOptions``, made by
  ``polymorphic_function.Function._generate_scoped_tracing_options``), which
  ``_create_concrete_function`` calls to build the FuncGraph, and never on a
  cached call: the probe's wrapper runs there.

Both are inside the ``_maybe_define_function`` frame, whose locals are TF's
own structures: ``tracing_options`` (reduce_retracing, input_signature, the
FunctionCache), ``current_func_context`` (the FunctionContext, whose
``scope_type`` says whether variable creation is allowed),
``lookup_func_type`` (the call's FunctionType) and, once the trace starts,
``target_func_type`` (the FunctionType TF traces: the lookup type, or its
``FunctionCache.generalize`` under reduce_retracing). `event_from_frame`
reads them, so the two triggers make the same record. The Function object is
``self`` in the nearest ``polymorphic_function.py`` frame above.

`capture_trace_events` installs the logging trigger for a block (it serves
``tflab retrace``, `expect_traces` and any script run in this process);
`on_each_trace` is the trace-time wrapper (the probe and stabilize's count
use it), which calls `current_trace_event`. Only when no tracing frame is
found (a saved log's text) does `parse_trace_log_message` parse text. TF's
frame and private attributes are read through `tflab._tf.function` only.

Consumer API (stable; a new consumer uses one of these, never its own hook):

* ``with capture_trace_events(on_event=None, identify=None) as events:``:
  every trace any tf.function starts in the block, as `TraceEvent`s in trace
  order; ``on_event(event)`` runs at trace time (arguments alive), and
  ``identify`` (default a new `ObjectSerials`) keys the Function objects;
* ``on_each_trace(fn, callback, name)``: a TF decorator of ``fn`` whose body
  calls ``callback(event, args, kwargs)`` each time TF traces it (for one
  function you wrap yourself: pass the result to ``tf.function``);
* `TraceEvent` fields: ``function`` (qualified name), ``function_object()``,
  ``function_id``, ``key``, ``owner``, ``lookup_type`` / ``traced_type`` (TF
  FunctionTypes) and ``relaxed``, ``nodes`` / ``traced_nodes`` (`Node` trees),
  ``options`` (``reduce_retracing``, ``input_signature``, ``jit_compile``),
  ``scope``, ``context``, ``site`` (the user's ``file:line``), ``replica``
  (``"MirroredStrategy replica 0"`` or None); a `Trace` with reasons is
  ``tflab.retrace.log.trace_from_event(event, index, previous)``;
* ``TraceEvent.seconds``: the trace's measured seconds (tracing plus the first
  run's instantiation), set by a `TraceClock` (``with clock.watching()``, and
  ``clock.on_event`` as or inside ``on_event``); None when not timed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import sys
import threading
import time
import types
import weakref
from typing import Any, Callable, Iterator

from tflab._tf import function as _tf
from tflab._user.usercode import is_library_file

_LOG_PREFIX = "Creating new FuncGraph for Python function "


@dataclasses.dataclass(frozen=True)
class TraceEvent:
    """One trace TF started for a tf.function, from TF's own structures.

    Attributes:
        function: the Python function's qualified name (``step``, ``Net.__call__``).
        module: its module ("" from text); TF's own helpers are hidden by it.
        scope: the FunctionContext ``scope_type`` name (VARIABLE_CREATION,
            NO_VARIABLE_CREATION) or None.
        context: the FunctionContext ``context`` text (device scope, outer graph…).
        inputs: (parameter, TraceType repr) pairs of ``lookup_type``, for
            JSON and the text fallback (reasons never use them).
        key: which tf.function object traced: ``("object", n)`` in-process,
            ``("address", qualname, "0x…")`` from a log's text, or None.
        function_id: ``id()`` of the tf.function object, or None.
        owner: tells objects with one qualified name apart: ``Net@0x7f…`` for
            a method's instance, else ``@0x7f…`` (the Function's id), or "".
        lookup_type: the call's FunctionType (TF ``FunctionType``, structured
            TraceTypes), or None from text.
        traced_type: the FunctionType TF traced: ``lookup_type`` exactly, or
            relaxed by reduce_retracing (None dims), or None from text.
        options: the options in force: ``reduce_retracing``,
            ``input_signature`` (bool), ``jit_compile``; {} when unknown.
        site: the user's call site ``file:line`` (the first frame outside
            TensorFlow, Keras and tflab), or "".
        replica: the tf.distribute strategy and replica in force
            (``MirroredStrategy replica 0``), or None outside a strategy.
        source: "frame" (read from TF's tracing frame) or "text" (parsed).
    """

    function: str
    module: str
    scope: str | None
    context: str | None
    inputs: tuple[tuple[str, str], ...]
    key: Any = None
    function_id: int | None = None
    owner: str = ""
    lookup_type: Any = dataclasses.field(default=None, repr=False, compare=False)
    traced_type: Any = dataclasses.field(default=None, repr=False, compare=False)
    options: Any = dataclasses.field(default_factory=dict, compare=False)
    site: str = ""
    replica: str | None = None
    source: str = "frame"
    tf_function: Any = dataclasses.field(default=None, repr=False, compare=False)
    # The `tflab.retrace.diff.Node` trees of lookup_type / traced_type, made
    # when the event is (while the argument objects are alive; O(parameters)).
    nodes: Any = dataclasses.field(default=None, repr=False, compare=False)
    traced_nodes: Any = dataclasses.field(default=None, repr=False, compare=False)
    # A `Trace` made from this event at trace time by a consumer that keeps
    # the history (`tflab.retrace.log`), so an argument object's liveness is
    # judged when TF looked it up; [] until then.
    explained: list = dataclasses.field(default_factory=list, repr=False, compare=False)
    # TF's FunctionContext.context as {field: repr} (`tflab._tf.function.context_fields`): which part
    # of the cache key beside the FunctionType differs (save context, graph, device, strategy).
    context_fields: Any = dataclasses.field(default=None, repr=False, compare=False)
    # Trace time (`TraceClock`): ``time.perf_counter()`` when the event was made
    # (the trace's start), and [seconds] once the call that made it returned.
    started: float | None = dataclasses.field(default=None, repr=False, compare=False)
    timing: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    @property
    def seconds(self) -> float | None:
        """Seconds of this trace, measured by a `TraceClock`: None when not timed.

        From TF starting the trace to the next trace the same call of the same
        tf.function started (TF's variable-creation re-trace), or else to the
        return of that call: tracing the FuncGraph, plus its instantiation and
        first run. A nested tf.function's trace is also part of its caller's.
        """
        return self.timing[0] if self.timing else None

    @property
    def relaxed(self) -> bool:
        """TF traced a more general FunctionType than the call's (reduce_retracing)."""
        return (self.traced_type is not None and self.lookup_type is not None
                and self.traced_type != self.lookup_type)

    @property
    def reduce_retracing(self) -> bool:
        return bool((self.options or {}).get("reduce_retracing"))

    def function_object(self) -> Any:
        """The tf.function object that traced, while it is alive (TF's `Function`), else None."""
        return self.tf_function() if self.tf_function is not None else None


def _user_site(start: Any) -> str:
    f = start
    for _ in range(200):
        if f is None:
            return ""
        name = f.f_code.co_filename
        if not name.startswith("<") and not is_library_file(name):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return ""


def function_owner(fn: Any) -> str:
    """``Net@0x7f…`` for a tf.function method bound to an instance, else ``@0x7f…`` (the Function's id)."""
    instance = _tf.method_instance(fn)
    if instance is not None and not isinstance(instance, (type, types.ModuleType)):
        return f"{type(instance).__name__}@{id(instance):#x}"
    return f"@{id(fn):#x}"


def _replica() -> str | None:
    try:
        import tensorflow as tf

        if not tf.distribute.has_strategy():
            return None
        strategy = tf.distribute.get_strategy()
        rc = tf.distribute.get_replica_context()
        where = "cross-replica" if rc is None else f"replica {rc.replica_id_in_sync_group}"
        return f"{type(strategy).__name__} {where}"
    except Exception:
        return None


def _options(loc: "_tf.TracingLocals", fn: Any) -> dict:
    return {"reduce_retracing": loc.reduce_retracing, "input_signature": loc.input_signature,
            "jit_compile": _tf.jit_compile(fn) if fn is not None else None}


def event_from_frame(frame: Any, identify: Callable[[Any], Any] | None = None) -> TraceEvent | None:
    """The `TraceEvent` of the trace TF is making in ``frame`` (``_maybe_define_function``).

    Args:
        frame: TF's ``tracing_compilation._maybe_define_function`` frame.
        identify: maps the tf.function object to a grouping key (see
            `TraceEvent.key`); None leaves the key unset.

    Returns:
        The event, or None when the frame lacks TF 2.21's locals.
    """
    from tflab.retrace.diff import function_type_inputs, nodes_of

    loc = _tf.tracing_locals(frame)
    if loc is None:
        return None
    lookup, traced, ctx = loc.lookup_type, loc.traced_type, loc.context
    fn, fn_frame = _tf.function_frame(frame)
    py = loc.python_function
    nodes = nodes_of(lookup)
    return TraceEvent(
        function=getattr(py, "__qualname__", None) or repr(py),
        module=getattr(py, "__module__", "") or "",
        scope=getattr(getattr(ctx, "scope_type", None), "name", None),
        context=repr(getattr(ctx, "context", None)),
        inputs=function_type_inputs(lookup),
        key=identify(fn) if (fn is not None and identify is not None) else None,
        function_id=id(fn) if fn is not None else None,
        owner=function_owner(fn) if fn is not None else "",
        lookup_type=lookup, traced_type=traced, options=_options(loc, fn),
        site=_user_site(fn_frame if fn_frame is not None else frame), replica=_replica(),
        source="frame", tf_function=weakref.ref(fn) if fn is not None else None,
        nodes=nodes, traced_nodes=nodes if traced is lookup else nodes_of(traced),
        context_fields=_tf.context_fields(ctx), started=time.perf_counter())


def current_trace_event(identify: Callable[[Any], Any] | None = None) -> TraceEvent | None:
    """The `TraceEvent` of the trace in progress, called from inside the traced body.

    Returns:
        The event of the innermost tf.function being traced, or None when no
        TF tracing frame is on the stack (TF internals moved).
    """
    frame = _tf.tracing_frame(sys._getframe(1))
    return event_from_frame(frame, identify) if frame is not None else None


_FUNC_REPR = re.compile(r"^<(?:function|bound method) (\S+?)(?: at (0x[0-9a-fA-F]+)| of )")
_PARAM_LINE = re.compile(r"^  (\S+) \((\w+)\): (.*)$")
_SCOPE_RE = re.compile(r"scope_type=<ScopeType\.(\w+)")
_CONTEXT_RE = re.compile(r"FunctionContext\(context=(.*), scope_type=")


def parse_trace_log_message(message: str) -> TraceEvent | None:
    """The fallback: a `TraceEvent` from the TEXT of TF 2.21's "Creating new FuncGraph …" record.

    For a saved log, where no tracing frame exists. The record comes from
    ``tracing_compilation._maybe_define_function``: ``"Creating new FuncGraph
    for Python function %r (key: %r, %r)"`` with the Python function, its
    FunctionContext and the FunctionType TF looked up. The text has no
    traced (relaxed) type and no options.

    Returns:
        A `TraceEvent` (source "text"), or None when ``message`` is another record.
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
    return TraceEvent(function=function, module="", scope=sm.group(1) if sm else None,
                      context=cm.group(1) if cm else None, inputs=tuple(inputs),
                      key=("address", function, address) if address else None,
                      owner=f"@{address}" if address else "", source="text")


class ObjectSerials:
    """``("object", n)``: the n-th distinct tf.function object seen (an id is reused once freed).

    Keys a tf.function object without keeping it alive: ``id()`` alone is not
    enough, since CPython gives a freed object's address to the next one.
    Pass one instance as ``identify`` to `capture_trace_events` and to any
    other consumer (a call counter) so their keys agree.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, int]] = {}
        self._serial = 0

    def __call__(self, obj: Any) -> tuple[str, int]:
        known = self._seen.get(id(obj))
        if known is not None and known[0]() is obj:
            return ("object", known[1])
        self._serial += 1
        self._seen[id(obj)] = (weakref.ref(obj), self._serial)
        return ("object", self._serial)


class _TraceHandler(logging.Handler):
    """Turns each "Creating new FuncGraph" record into a `TraceEvent` from TF's tracing frame."""

    def __init__(self, sink: list[TraceEvent], on_event: Callable[[TraceEvent], None] | None = None,
                 identify: Callable[[Any], Any] | None = None):
        super().__init__(level=1)
        self.sink = sink
        self.on_event = on_event
        self._identify = identify if identify is not None else ObjectSerials()

    def emit(self, record: logging.LogRecord) -> None:
        if not isinstance(record.msg, str) or not record.msg.startswith(_LOG_PREFIX):
            return
        try:
            event = None
            frame = _tf.tracing_frame(sys._getframe(1))
            if frame is not None:
                event = event_from_frame(frame, self._identify)
            if event is None:  # no tracing frame (TF internals moved): the record's text
                event = parse_trace_log_message(record.getMessage())
        except Exception:  # a log handler must never break the user's program
            return
        if event is not None:
            self.sink.append(event)
            if self.on_event is not None:
                try:
                    self.on_event(event)
                except Exception:  # the trace is listed; only its early explanation is lost
                    pass


class _PropagateFrom(logging.Handler):
    """Propagates records at or above ``level`` to the parent loggers' handlers.

    Does what ``Logger.callHandlers`` does past the logger itself, for the
    records that would have passed the logger's own level before
    `capture_trace_events` lowered it.
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


@contextlib.contextmanager
def capture_trace_events(on_event: Callable[[TraceEvent], None] | None = None,
                         identify: Callable[[Any], Any] | None = None) -> Iterator[list[TraceEvent]]:
    """Collects a `TraceEvent` for every trace any tf.function starts inside the block.

    Lowers the ``tensorflow`` logger to level 1 for the block, so TF's
    trace-time record reaches the handler, which reads TF's tracing frame;
    the logger's existing handlers keep their previous threshold (nothing
    extra is printed), and records below it do not propagate to the parent
    loggers either. TF itself is not patched.

    Args:
        on_event: called with each event as TF starts the trace (TF's frame
            and the argument objects are alive); it must not raise.
        identify: maps a tf.function object to ``TraceEvent.key``; default a
            new `ObjectSerials` (``("object", n)``, never shared by two objects).

    Yields:
        A list that fills with `TraceEvent`s, in trace order.

    Example:

    >>> with capture_trace_events() as events:
    ...     step(tf.ones([3]))
    >>> events[0].traced_type
    """
    logger = logging.getLogger("tensorflow")
    sink: list[TraceEvent] = []
    handler = _TraceHandler(sink, on_event, identify)
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


def on_each_trace(fn: Callable, callback: Callable[[TraceEvent | None, tuple, dict], None],
                  name: str) -> Callable:
    """``fn`` wrapped so that ``callback(event, args, kwargs)`` runs each time TF traces it, never on a cached call.

    The trace-time trigger of the probe (`tflab.retrace.probe.RetraceProbe`)
    and of stabilize's count (`tflab.stabilization.count_traces`): the wrapper's
    body runs only while TF builds a FuncGraph, and it takes that trace's
    `TraceEvent` from TF's tracing frame (`current_trace_event`). It is a TF
    decorator (``tf.__internal__.decorator.make_decorator``), so AutoGraph
    unwraps it and converts ``fn`` itself.

    Args:
        fn: the Python function (the body of a tf.function to be).
        callback: called with the event (None where TF's tracing frame could
            not be read) and the arguments the body is traced with (symbolic
            tensors), before the body runs; what it raises propagates.
        name: the decorator's name (shown by TF's decorator tools).

    Returns:
        The wrapper, to pass to ``tf.function`` (or TF's ``Function._clone``).
    """

    def traced_body(*args, **kwargs):
        try:
            event = current_trace_event()
        except Exception:  # TF internals moved: the trace still counts
            event = None
        callback(event, args, kwargs)
        # TF's decorator rewrap swaps __wrapped__ for the AutoGraph-converted
        # target, so the call must go through the attribute.
        return traced_body.__wrapped__(*args, **kwargs)

    return _tf.make_decorator(fn, traced_body, name)


class TraceClock:
    """Measures each trace's seconds: from TF starting it to the return of the call that made it.

    TF 2.21 has no trace-end callback. A trace runs inside a call of its
    tf.function (``Function.__call__`` or ``get_concrete_function``), so the
    clock watches those calls (`tflab._tf.function.watch_calls`) and closes
    each trace when the call of the same Function object that was open when
    it started returns; a second trace in that call (TF's variable-creation
    re-trace) closes the first one. The seconds are tracing, the
    ConcreteFunction's instantiation and its first run (``call_flat``), as the
    call measured them; nested tf.functions' traces are part of their caller's.
    An event with no open call of its Function (the clock started inside the
    call, or TF's frame gave no Function) stays untimed (``seconds`` None).

    Use: ``with clock.watching(), capture_trace_events(on_event=clock.on_event)``;
    or call `on_event` from an `on_each_trace` callback. Calls are tracked per
    thread (a tf.distribute replica traces in its own thread).

    Attributes:
        calls: top-level (not nested) calls seen, and their total seconds in ``call_seconds``.
        nested: ``id()`` of each event that started while another timed trace was
            in progress (its seconds are part of that one's: a total skips them).
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self.calls = 0
        self.call_seconds = 0.0
        self.nested: set[int] = set()

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def enter(self, fn: Any) -> None:
        """A call of tf.function ``fn`` starts."""
        self._stack().append((id(fn), time.perf_counter(), []))

    def exit(self, fn: Any) -> None:
        """That call returned (or raised): its traces are closed."""
        stack = self._stack()
        if not stack:
            return
        fid, began, events = stack.pop()
        now = time.perf_counter()
        if not stack:
            self.calls += 1
            self.call_seconds += now - began
        for i, ev in enumerate(events):
            end = events[i + 1].started if i + 1 < len(events) else now
            if not ev.timing and ev.started is not None:
                ev.timing.append(max(0.0, end - ev.started))

    def on_event(self, event: TraceEvent | None) -> None:
        """A trace started: it belongs to the innermost open call of its Function."""
        if event is None or event.function_id is None or event.started is None:
            return
        stack = self._stack()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == event.function_id:
                stack[i][2].append(event)
                if any(frame[2] for frame in stack[:i]):  # inside another trace in progress
                    self.nested.add(id(event))
                return

    @contextlib.contextmanager
    def watching(self) -> Iterator["TraceClock"]:
        """Watches every tf.function call in the block (imports TensorFlow)."""
        with _tf.watch_calls(self.enter, self.exit):
            yield self
