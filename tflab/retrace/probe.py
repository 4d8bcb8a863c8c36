"""Lab step 2: `RetraceProbe` wraps a function, counts its traces and explains each one.

The probe counts traces by a Python side effect in the traced body (it runs
only while TF traces), cross-checked with TF's own
``experimental_get_tracing_count()``. At that moment it takes the trace's
`TraceEvent` from TF's tracing frame (`tflab.retrace.event.current_trace_event`)
and turns it into a `Trace` with the same function the log path uses
(`tflab.retrace.log.trace_from_event`). It also notices a stale closure or
global (a Python number read at trace time that changed later without a
retrace: on TF 2.21 the graph keeps the old value), and lists the body's
Python side effects that run only while tracing (`tflab.retrace.sideeffects`).
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import types
from typing import Any, Callable

from tflab.report.text import seconds_text, trace_time_line
from tflab._user.usercode import user_entry
from tflab.errors import UsageError
from tflab.report.base import HtmlDisplay, current_config
from tflab.report.html.dispatch import renders
from tflab.report.html.timeline import probe_fragment
from tflab._tf import function as _tf
from tflab.retrace.event import TraceEvent, on_each_trace
from tflab.retrace.log import trace_from_event
from tflab.retrace.records import NO_VARIABLE_CREATION, Trace, short_name
from tflab.retrace.sideeffects import SideEffect, trace_time_effects, user_function
from tflab.retrace.stale import (  # noqa: F401 (re-exported)
    StaleRead, MISSING, closure_cells, code_names, is_watchable, same_value, value_repr, what_it_is)
from tflab.retrace.probe_state import StateWatch
from tflab.retrace.values import ValueLog, World


# ---------------------------------------------------------------------------
# RetraceProbe
# ---------------------------------------------------------------------------


def _check_tf_function_kwargs(kwargs: dict) -> None:
    """A keyword tf.function does not take raises UsageError here, naming it (not TF's TypeError)."""
    if not kwargs:
        return
    import tensorflow as tf

    try:
        allowed = [n for n in inspect.signature(tf.function).parameters if n != "func"]
    except (TypeError, ValueError):
        return
    unknown = [k for k in kwargs if k not in allowed]
    if unknown:
        raise UsageError(f"RetraceProbe: unknown keyword argument{'s' * (len(unknown) > 1)} "
                         f"{', '.join(repr(k) for k in unknown)}: RetraceProbe takes watch_stale and "
                         f"tf.function's own options ({', '.join(allowed)})")


class RetraceProbe(StateWatch, HtmlDisplay):
    """Wraps a function, counts its traces and explains each one.

    The wrapper calls a Python side effect inside the traced body: it runs
    while TF traces a new FuncGraph and never on a cached call, so the count is
    exact. Each trace gets the FunctionType TF looked up (TF 2.21
    ``function_type_utils.make_canonicalized_monomorphic_type``, the same type
    the "Creating new FuncGraph" log prints) and the FunctionContext scope of
    the cache entry it added, and `explain` turns the difference with the
    nearest earlier trace into reasons.

    A `tf.function` is re-wrapped with all its options (input_signature,
    reduce_retracing, jit_compile, autograph…) through TF's own
    ``Function._clone`` (`tflab._tf.function.clone`), the same path TF uses to
    copy a Function onto a new Python function; the side-effect wrapper is
    `tflab.retrace.event.on_each_trace`, a TF decorator, so AutoGraph
    still converts the user's function (``autograph_util.py_func_from_autograph``
    unwraps decorators and converts the innermost target). The probe has its
    own trace cache: calls of the original tf.function itself are not seen
    (`expect_traces` on the tf.function itself needs no probe).

    Args:
        fn: a `tf.function` (options kept) or a plain Python callable (wrapped
            in ``tf.function(**tf_function_kwargs)``).
        watch_stale: record the closure cells, globals and attributes of
            ``self`` (and of plain objects ``self`` holds: ``self.cfg.scale``)
            the Python function reads (its own code, nested
            lambdas/comprehensions, and for ``self`` the methods it calls) that
            hold numbers, strings, bools, eager tensors or tf.Variables at
            trace time, and report in `stale` when one changed without a
            retrace, with its tf.Variable fix run on your calls against eager.
            The per-call check compares identities only. Each call's arguments
            are kept too (`tflab.retrace.values.ValueLog`, within a budget) so
            every fix is compared with your function's eager outputs.
        **tf_function_kwargs: options for ``tf.function`` when ``fn`` is a plain
            callable (e.g. ``reduce_retracing=True``); not allowed with a tf.function.

    Attributes:
        function: the wrapped `tf.function` that calls go through (the
            probe's own copy when ``fn`` is a tf.function).
        function_name: the user's function's name, as in every other result
            (``function`` is the wrapped tf.function itself).
        config: `tflab.runtime_config()` as a dict, read when the probe is made.
        original: ``fn`` when it is a tf.function, else None.
        trace_count: traces counted by the side effect (includes failed traces).
        traces: one `Trace` per trace, oldest first.
        stale: `StaleRead` records, oldest first.
        calls: number of calls made through the probe.

    Raises:
        UsageError: ``fn`` is not callable, or tf.function options were given
            for a function that already is a tf.function.

    Example:

    >>> probe = RetraceProbe(lambda x, n: x * n)
    >>> for n in (1, 2, 3):
    ...     _ = probe(tf.constant([1.0]), n)
    >>> probe.trace_count
    3
    >>> probe.traces[1].reasons
    ['n: 1 -> 2']
    """

    def __init__(self, fn: Callable, *, watch_stale: bool = True, **tf_function_kwargs: Any):
        import tensorflow as tf

        if not callable(fn):
            raise UsageError(f"RetraceProbe needs a callable (a tf.function or a Python function), "
                             f"got {type(fn).__name__}")
        if isinstance(fn, type):  # callable, but calling it builds an instance: nothing to trace
            raise UsageError(f"RetraceProbe needs a function, a tf.function or a callable object, got the "
                             f"class {fn.__name__}; pass an instance (RetraceProbe({fn.__name__}(...))) "
                             f"or one of its bound methods")
        _refuse_keras_loop(fn)
        _check_tf_function_kwargs(tf_function_kwargs)
        if not isinstance(watch_stale, bool):
            raise UsageError(f"RetraceProbe: watch_stale must be True or False, got {watch_stale!r}")
        self._count = 0
        self.calls = 0
        self._traces: list[Trace] = []     # as recorded; `traces` gives them with checked fixes
        self._contexts: list = []           # each trace's FunctionContext fields (TF's cache key part)
        self._seen = 0                      # traces recorded (the rest ran outside a probe call)
        self._recording = False
        self._checked: list[Trace] = []
        self._checked_key: tuple | None = None
        self._memo: dict = {}               # fix candidate -> outcome (`tflab.retrace.check.Bench`)
        self._stale: list[StaleRead] = []
        self._traced_values: list[dict[str, Any]] = []   # per trace: name -> value read
        self._gwatch: list[list] = []   # [globals dict, name, last seen value]
        self._cwatch: list[list] = []   # [name, cell, last seen value]
        self._awatch: list[list] = []   # [label, object, attribute, last seen value]: self.weights, self.cfg.scale
        self._values = ValueLog()   # each call's arguments, for the values a fix is checked on
        self._world = World()       # the Python state the body reads or writes, for replaying those calls
        self._stale_key: tuple | None = None
        self._watch_stale = watch_stale
        self._cache_len = 0
        self._events: list[TraceEvent | None] = []   # one per trace, from TF's tracing frame
        self.call_seconds = 0.0   # wall seconds of the calls made through the probe
        self._call_end: float | None = None   # when the last call through the probe returned

        is_tf_function = _tf.can_clone(fn)
        python_fn = fn.python_function if is_tf_function else fn
        self._python_fn = python_fn
        self._user_fn = user_function(python_fn)
        self.config = current_config()
        if not is_tf_function and not hasattr(fn, "__qualname__"):
            self.function_name = type(fn).__name__  # a callable object, e.g. a Keras model
        else:
            self.function_name = short_name(getattr(self._user_fn, "__qualname__", None)
                                    or getattr(fn, "__name__", type(fn).__name__))

        wrapper = on_each_trace(python_fn, self._on_trace, "RetraceProbe")
        if is_tf_function:
            if tf_function_kwargs:
                raise UsageError("RetraceProbe: tf.function options (" + ", ".join(tf_function_kwargs)
                                 + ") only apply to a plain callable; this is already a tf.function, "
                                 "so its own options are kept")
            self.function = _tf.clone(fn, wrapper)
            self.original = fn
        else:
            from tflab._api.argcheck import check_keywords

            check_keywords(tf_function_kwargs, tf.function, "RetraceProbe", "tf.function")
            self.function = tf.function(wrapper, **tf_function_kwargs)
            self.original = None
        self._watch_names = self._stale_candidates() if watch_stale else ([], [])
        self._attrs = self._attribute_candidates() if watch_stale else []
        self._effects = trace_time_effects(self._user_fn)

    # -- trace-time side effect --------------------------------------------
    def _on_trace(self, event: TraceEvent | None, args: tuple = (), kwargs: dict | None = None) -> None:
        self._count += 1
        self._events.append(event)
        if not self._watch_stale:
            return
        gnames, cells = self._watch_names
        globs = getattr(self._user_fn, "__globals__", {})
        snapshot: dict[str, Any] = {}
        gwatch, cwatch = [], []
        for n in gnames:
            v = globs.get(n, MISSING)
            if v is not MISSING and is_watchable(v):
                snapshot[n] = v
                gwatch.append([globs, n, v])
        for n, cell in cells:
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if is_watchable(v):
                snapshot[n] = v
                cwatch.append([n, cell, v])
        awatch = []
        for label, owner, attr, _ in self._attrs:
            v = getattr(owner, attr, MISSING)
            if v is not MISSING and is_watchable(v):
                snapshot[label] = v
                awatch.append([label, owner, attr, v])
        for label, v in snapshot.items():   # the state this call ran with, for replaying it
            if self._world.initial.get(label, MISSING) is not v:
                self._world.changed(self.calls, label, v)
        self._traced_values.append(snapshot)
        self._gwatch, self._cwatch, self._awatch = gwatch, cwatch, awatch

    # -- calls ----------------------------------------------------------------
    @user_entry("when called through RetraceProbe", name=lambda self, *a, **k: self.function_name)
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped tf.function; records any traces it made.

        Raises:
            UsageError: an argument has no TraceType (e.g. a non-frozen
                dataclass): the message names the parameter and the fixes.
            Whatever the function raises while tracing or running.
        """
        from tflab._api.argcheck import check_binds  # else TF's raw "Binding inputs … failed"

        check_binds(self.function.python_function, args, kwargs, "RetraceProbe", self.function_name)
        self._catch_up()
        if not self._world.started:
            self._world.start(self._user_fn)
        self._values.record(args, kwargs)
        self.calls += 1
        before = self._count
        try:
            out = self._timed_call(args, kwargs)
        except TypeError as e:
            if "Could not generate a generic TraceType" in str(e):
                raise self._no_trace_type_error(args, kwargs, e) from e
            self._record(before, args, kwargs, error=e)
            raise
        except Exception as e:
            self._record(before, args, kwargs, error=e)
            raise
        if self._count != before:
            self._record(before, args, kwargs)
        elif self._gwatch or self._cwatch or self._awatch:
            self._check_stale()
        return out

    def _timed_call(self, args: tuple, kwargs: dict) -> Any:
        began = time.perf_counter()
        try:
            return self.function(*args, **kwargs)
        finally:
            self._call_end = time.perf_counter()
            self.call_seconds += self._call_end - began

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Any:
        """``get_concrete_function`` of the wrapped tf.function; a trace it makes is recorded.

        Returns:
            The `ConcreteFunction` for these arguments / `tf.TensorSpec`s.
        """
        self._catch_up()
        before = self._count
        try:
            cf = self.function.get_concrete_function(*args, **kwargs)
        except Exception as e:
            self._record(before, args, kwargs, kind="concrete", error=e)
            raise
        self._record(before, args, kwargs, kind="concrete")
        return cf

    def _check_stale(self) -> None:
        # Hot path of a cached call: identity checks only, the slow compare
        # runs only when an identity changed.
        for w in self._gwatch:
            cur = w[0].get(w[1], MISSING)
            if cur is not w[2]:
                self._note_change(w[1], "global", w, cur)
        for w in self._cwatch:
            try:
                cur = w[1].cell_contents
            except ValueError:
                cur = MISSING
            if cur is not w[2]:
                self._note_change(w[0], "closure", w, cur)
        for w in self._awatch:
            cur = getattr(w[1], w[2], MISSING)
            if cur is not w[3]:
                self._note_change(w[0], "attribute", w, cur)

    def _note_change(self, name: str, scope: str, w: list, cur: Any) -> None:
        w[-1] = cur
        self._world.changed(self.calls, name, cur)
        last = len(self._traced_values)
        traced = self._traced_values[-1].get(name, MISSING) if last else MISSING
        if traced is MISSING or same_value(traced, cur):
            return
        self._stale.append(StaleRead(name=name, scope=scope, traced=value_repr(traced),
                                     current=value_repr(cur), trace=last, call=self.calls,
                                     what=what_it_is(traced)))

    def _record(self, before: int, args: tuple, kwargs: dict, kind: str | None = None,
                error: BaseException | None = None) -> None:
        n_new = self._count - before
        if n_new <= 0:
            return
        self._recording = True
        try:
            self._record_traces(before, n_new, kind, error)
        finally:
            self._recording = False
            self._seen = self._count

    def _catch_up(self) -> None:
        """Records traces made outside a probe call (``tf.saved_model.save`` tracing the probe's function)."""
        if self._seen >= self._count or self._recording:
            return
        before, n_new = self._seen, self._count - self._seen
        self._recording = True
        try:
            self._record_traces(before, n_new, None, None, call=0)
        finally:
            self._recording = False
            self._seen = self._count

    def _record_traces(self, before: int, n_new: int, kind: str | None, error: BaseException | None,
                       call: int | None = None) -> None:
        from tflab._user.target import error_summary

        self._time_traces(before)
        # TF caches one ConcreteFunction per successful trace; a trace that
        # raised left none, and it is the last trace of its call.
        cache_len = _tf.cache_size(self.function)
        cache_len = cache_len if cache_len is not None else self._cache_len + n_new
        n_cached, self._cache_len = cache_len - self._cache_len, cache_len
        events = self._events[before:self._count]
        for j in range(n_new):
            event = events[j] if j < len(events) else None
            trace_failed = j >= n_cached
            failed = None
            if trace_failed:
                failed = error_summary(error) if error is not None else "an error (not seen by the probe)"
                failed = failed.split(". Make sure", 1)[0]  # TF's advice follows; ours is the fix
            kept = [(p, c) for p, c in zip(self._traces, self._contexts) if p.kind != "failed"]
            previous = [p for p, _ in kept]
            contexts = [c for _, c in kept]
            this_call = (self.calls if kind is None else 0) if call is None else call
            if event is not None:
                if trace_failed and event.scope is None and _tf.created_variables(self.function):
                    event = dataclasses.replace(event, scope=NO_VARIABLE_CREATION)
                t = trace_from_event(event, len(self._traces) + 1, previous, contexts, call=this_call,
                                     kind=kind, error=failed)
            else:
                from tflab.retrace.diff import make_trace

                t = make_trace(len(self._traces) + 1, (), previous, call=this_call, kind=kind, error=failed)
            if error is not None and j == n_new - 1:  # this trace or its call raised: why
                from tflab.diagnosis import probe_diagnosis

                entry = None if trace_failed else _tf.last_cache_entry(self.function)
                t = probe_diagnosis(self, t, error, entry)
            self._traces.append(t)
            self._contexts.append((event.context_fields or event.context) if event is not None else None)

    def _time_traces(self, before: int) -> None:
        """Each new trace's seconds: to the next trace of the same call, the last to the call's return (now)."""
        new = self._events[before:self._count]
        now = self._call_end
        self._call_end = None
        if now is None or any(e is not None and e.started is not None and e.started > now for e in new):
            now = time.perf_counter()  # get_concrete_function (no timed call): its traces end here
        for j, ev in enumerate(new):
            if ev is None or ev.started is None or ev.timing:
                continue
            nxt = next((e.started for e in new[j + 1:] if e is not None and e.started is not None), now)
            ev.timing.append(max(0.0, nxt - ev.started))

    @property
    def trace_seconds(self) -> list[float | None]:
        """Each trace's seconds (tracing plus the first run's instantiation), None where not timed."""
        return [e.seconds if e is not None else None for e in self._events]

    @property
    def seconds(self) -> float:
        """Seconds of all the timed traces."""
        return sum(s for s in self.trace_seconds if s is not None)

    @property
    def time_text(self) -> str | None:
        """``train_step: 3 traces, 18.4 s of the 25.0 s its calls took (74%)``, or None before a timed trace."""
        if not any(s is not None for s in self.trace_seconds):
            return None
        return trace_time_line(self.function_name, self.trace_count, self.seconds, self.call_seconds,
                               "the {} its calls through the probe took")

    def _no_trace_type_error(self, args: tuple, kwargs: dict, err: Exception) -> UsageError:
        culprit, value = None, None
        try:
            sig = inspect.signature(self._user_fn)
            bound = sig.bind_partial(*args, **kwargs) if not isinstance(self._user_fn, types.MethodType) else None
            items = list(bound.arguments.items()) if bound else list(kwargs.items())
        except (TypeError, ValueError):
            items = [(f"argument {i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        for name, v in items:
            try:
                _tf.trace_type_of(v)
            except TypeError:
                culprit, value = name, v
                break
        what = f"argument {culprit!r} ({type(value).__name__})" if culprit else "an argument"
        # Measured (tests/retrace/test_retrace_user_cases.py T4): frozen=True alone makes it
        # hashable, so TF traces it as a Weakref TraceType matched by == while
        # alive; a fresh instance per call retraces once the previous is freed.
        return UsageError(
            f"{self.function_name}: {what} has no TraceType: it is mutable or unhashable (a non-frozen "
            f"dataclass?), so tf.function cannot key its cache on it; @dataclass(frozen=True) "
            f"makes it traceable (TF keeps a weak reference and matches equal live instances), "
            f"add __tf_tracing_type__ to trace it by value and avoid a retrace per new instance, "
            f"or pass its numbers as tensors")

    # -- reports ------------------------------------------------------------------
    @property
    def traces(self) -> list[Trace]:
        """One `Trace` per trace, oldest first, each reason's fix run on the calls recorded so far.

        Each fix is a `tflab.fix.Fix` (``Reason.plan``; ``Reason.fix`` is its
        line): the candidate input_signature, cast, tensor or object change is
        applied to a fresh tf.function of your function and traced on every
        call signature the probe recorded (`tflab.retrace.check`); then it is
        called with every recorded call's values and its outputs compared with
        your original function run eagerly on the same calls, from the same
        state (`tflab.fix.values_match`): "checked" means both. Several causes
        of one retrace are searched together (`tflab.retrace.search`). The
        check runs when this is read after a new trace: your function's Python
        body runs once per recorded call eagerly (the reference) and is traced
        once per candidate tried; every tf.Variable gets its value back after.
        """
        self._catch_up()
        if self._recording or not self._traces:
            return self._traces
        key = (len(self._traces), self.calls)
        if self._checked_key != key:
            self._checked = self._check_fixes()
            self._checked_key = key
        return self._checked

    def _check_fixes(self) -> list[Trace]:
        from tflab.retrace.check import Bench, plan_fixes, recorded_calls

        options = {"reduce_retracing": _tf.reduce_retracing(self.function),
                   "input_signature": getattr(self.function, "input_signature", None) is not None,
                   "jit_compile": _tf.jit_compile(self.function)}
        bench = Bench(self._python_fn, recorded_calls(self._traces), self.calls,
                      sum(t.kind != "failed" for t in self._traces), options, self._memo,
                      values=self._case_values(), rebinds=tuple(self.rebinds))
        return plan_fixes(self._traces, bench)

    @property
    def trace_count(self) -> int:
        """Traces counted by the trace-time side effect (failed traces included)."""
        return self._count

    @property
    def tf_tracing_count(self) -> int:
        """TF's own count: ``experimental_get_tracing_count()``, the number of cache entries."""
        return int(self.function.experimental_get_tracing_count())

    @property
    def original_tracing_count(self) -> int | None:
        """``experimental_get_tracing_count()`` of the tf.function given (its own calls), or None."""
        if self.original is None:
            return None
        return int(self.original.experimental_get_tracing_count())

    @property
    def side_effects(self) -> list[str]:
        """The body's Python side effects that ran only while tracing, one line each.

        For example "`o.value += 1` (line 9) ran 1 time in 5 calls: it runs only while
        tracing; use a tf.Variable …" (`tflab.retrace.sideeffects`). Empty
        before the first trace, or when every call traced (nothing was skipped).
        """
        if not self._count or self._count >= self.calls:
            return []
        return [e.text(self._count, self.calls) for e in self._effects]

    @property
    def side_effect_records(self) -> list[SideEffect]:
        """The `SideEffect` statements found in the body (whether or not a call skipped them)."""
        return list(self._effects)

    @property
    def events(self) -> list[TraceEvent | None]:
        """The `TraceEvent` of each trace (None where TF's tracing frame could not be read)."""
        return list(self._events)

    @property
    def reasons(self) -> list[str]:
        """Every reason line of every trace after the first, as ``#N reason``."""
        return [f"#{t.index} {r}" for t in self._traces for r in t.reasons]

    def to_text(self) -> str:
        """A readable report: counts, one block per trace, then stale reads."""
        tf_count = self.tf_tracing_count
        failed = sum(t.kind == "failed" for t in self.traces)
        note = f" ({failed} trace(s) raised, and TF caches only traces that succeed)" if failed else ""
        whose = "the probe's copy of the tf.function" if self.original is not None else "the probe's tf.function"
        lines = [f"RetraceProbe({self.function_name}): {self.trace_count} trace(s) in {self.calls} call(s) "
                 f"through the probe; TF's experimental_get_tracing_count() on {whose} = {tf_count}{note}"]
        if self.original is not None:
            lines.append(f"  {self.function_name} itself (calls not made through the probe are not seen): "
                         f"experimental_get_tracing_count() = {self.original_tracing_count}")
        if self.time_text is not None:
            per = ", ".join(f"#{t.index} {seconds_text(s)}" for t, s in zip(self.traces, self.trace_seconds))
            lines.append(f"  trace time: {self.time_text} ({per}; tracing plus the first run's instantiation)")
        for t in self.traces:
            lines.extend("  " + ln for ln in t.to_text().splitlines())
        for s in self.stale:
            lines.append(f"  stale: {s.text}\n      {s.fix_record.line()}")
        for rb in self.rebinds:
            lines.extend("  " + ln for ln in rb.lines())
        for e in self.side_effects:
            lines.append(f"  side effect: {e}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready dict of the counts, traces and stale reads."""
        return {"function": self.function_name, "function_name": self.function_name,
                "config": self.config, "trace_count": self.trace_count,
                "tf_tracing_count": self.tf_tracing_count, "calls": self.calls,
                "original_tracing_count": self.original_tracing_count,
                "traces": [t.to_dict() for t in self.traces],
                "stale": [{f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "plan"}
                          | {"text": s.text, "fix": s.fix, "fix_record": s.fix_record.to_dict(),
                             "fix_tried": [f.to_dict() for f in s.plan.tried] if s.plan is not None else []}
                          for s in self.stale],
                "rebinds": [rb.to_dict() for rb in self.rebinds],
                "side_effects": self.side_effects, "trace_seconds": self.trace_seconds,
                "seconds": self.seconds, "call_seconds": self.call_seconds}

    def __repr__(self) -> str:
        last = next((t for t in reversed(self._traces) if t.reasons), None)
        why = f", last reason: {last.reasons[0]!r}" if last else ""
        stale = ""
        if self.stale:  # name the stale read (the latest one when there are several)
            n = len(self.stale)
            stale = (f", 1 stale: {self.stale[0].change}" if n == 1
                     else f", {n} stale, latest: {self.stale[-1].change}")
        return (f"<RetraceProbe {self.function_name}: {self.trace_count} trace(s) in {self.calls} call(s)"
                f"{why}{stale}>")


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(RetraceProbe)(probe_fragment)


# Keras' driver loops: each builds its own tf.function (the step) and calls it per batch; tracing
# the loop itself into a graph fails inside Keras (a symbolic tensor has no .numpy()).
_KERAS_LOOPS = ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch")


def _refuse_keras_loop(fn: Callable) -> None:
    """One UsageError for ``RetraceProbe(model.predict)`` and the other Keras loops, with what works."""
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    if owner is None or name not in _KERAS_LOOPS:
        return
    mro = [c.__module__ for c in type(owner).__mro__]
    if not any(m.startswith(("keras.", "tf_keras.")) for m in mro):
        return
    raise UsageError(f"RetraceProbe({type(owner).__name__}.{name}): {name} is Keras' own loop, which builds its own "
                     f"tf.function and calls it per batch; it cannot be traced as one function. Run your script "
                     f"with `tflab retrace SCRIPT.py` (it follows Keras' step function and explains its retraces), "
                     f"or probe the model's call: RetraceProbe(model) for model(x)")
