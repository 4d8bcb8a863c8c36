"""Lab step 2: `expect_traces` asserts how often a tf.function traces in a block.

For a tf.function it reads TF's own trace count and log records
(`tflab.retrace.event` TraceEvents) and compares them with the function's trace cache; for a
`RetraceProbe` it reads the probe's records. Too many traces raise
`RetraceError`, an AssertionError that lists each trace's reasons and fixes.
"""

from __future__ import annotations

from typing import Any, Sequence

from tflab._tf import function as _tf
from tflab.errors import UsageError
from tflab.retrace.event import function_owner
from tflab.retrace.log import is_tf_internal, cached_traces, capture_explained, explain_records
from tflab.retrace.probe import RetraceProbe
from tflab.retrace.sideeffects import user_function
from tflab.retrace.records import Trace, short_name

class RetraceError(AssertionError):
    """`expect_traces` saw more traces than allowed; the message lists the reasons.

    A subclass of AssertionError so pytest shows it as a test failure.

    Attributes:
        traces: the `Trace` records made inside the ``with`` block.
        count: how many traces TF made inside the block.
        at_most: the limit that was exceeded.
    """

    def __init__(self, message: str, traces: Sequence[Trace], count: int, at_most: int):
        super().__init__(message)
        self.traces = list(traces)
        self.count = count
        self.at_most = at_most



# ---------------------------------------------------------------------------
# expect_traces
# ---------------------------------------------------------------------------


class TraceExpectation:
    """What `expect_traces` measured inside its block (filled in on exit).

    Attributes:
        count: traces made inside the block.
        traces: their `Trace` records with reasons, numbered after the
            traces the function made before the block.
        before: traces the function had made before the block (for a
            tf.function: its cache entries, which the block's traces are
            compared with).
    """

    def __init__(self) -> None:
        self.count = 0
        self.traces: list[Trace] = []
        self.before = 0

    def __repr__(self) -> str:
        return f"<TraceExpectation {self.count} trace(s)>"


def _method_instances(fn: Any) -> list[Any]:
    """The per-instance tf.functions TF made for a ``@tf.function`` method so far.

    ``Function.__get__`` gives each instance its own Function (own cache), so
    ``Net.__call__`` taken from the class never traces itself.
    """
    return _tf.method_instances(fn)


class _FunctionWatch:
    """Counts and explains the traces of one tf.function (and its per-instance copies) in a block."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.counts = {id(f): (f, f.experimental_get_tracing_count()) for f in [fn, *_method_instances(fn)]}
        # The keys only (cheap); they become Trace records for the objects that trace again.
        self.prior_keys = {i: _tf.cache_keys(f) for i, (f, _) in self.counts.items()}
        self._log = capture_explained()
        self.logged = self._log.__enter__()
        self.checkable: list[tuple[Any, list[Trace]]] = []

    def finish(self, result: TraceExpectation) -> list[tuple[str, list[Trace]]]:
        """Stops reading the log; fills ``result``; returns (label, traces) per object that traced."""
        self._log.__exit__(None, None, None)
        members = {id(f): f for f in [self.fn, *_method_instances(self.fn)]}
        result.count = sum(f.experimental_get_tracing_count() - self.counts.get(i, (f, 0))[1]
                           for i, f in members.items())
        result.before = sum(len(self.prior_keys.get(i, ())) for i in members)
        by_object = any(t.function_id is not None for t in self.logged)
        target = user_function(self.fn)
        qualname = getattr(target, "__qualname__", None) or getattr(self.fn, "__name__", "function")
        reduce_retracing = _tf.reduce_retracing(self.fn)
        out = []
        for i, f in members.items():
            if by_object:
                mine = [t for t in self.logged if t.function_id == i and not is_tf_internal(t)]
            else:  # the log records carry no object (TF internals moved): match the name
                mine = [t for t in self.logged if t.function == qualname] if f is self.fn else []
            if not mine:
                continue
            prior, contexts = cached_traces(f, self.prior_keys.get(i, []))
            traces = explain_records(mine, prior, contexts, reduce_retracing)
            self.checkable.append((f, prior))
            out.append((function_owner(f) if f is not self.fn else "", traces))
            result.traces.extend(traces)
        return out

    def checked(self, groups: list[tuple[str, list[Trace]]]) -> list[tuple[str, list[Trace]]]:
        """The groups with each fix run on a fresh tf.function over the cached and new call signatures."""
        from tflab.retrace.check import Bench, plan_fixes, recorded_calls

        out = []
        for (owner, traces), (f, prior) in zip(groups, self.checkable):
            every = list(prior) + list(traces)
            options = {"reduce_retracing": _tf.reduce_retracing(f),
                       "input_signature": getattr(f, "input_signature", None) is not None}
            bench = Bench(getattr(f, "python_function", None), recorded_calls(every), 0,
                          sum(t.kind != "failed" for t in every), options)
            out.append((owner, plan_fixes(every, bench)[len(prior):]))
        return out


class _ExpectTraces:
    """The context manager `expect_traces` returns (see there)."""

    def __init__(self, fn_or_probe: Any, at_most: int):
        if not isinstance(at_most, int) or at_most < 0:
            raise UsageError(f"expect_traces: at_most must be an int >= 0, got {at_most!r}")
        if not isinstance(fn_or_probe, RetraceProbe) and not hasattr(fn_or_probe,
                                                                    "experimental_get_tracing_count"):
            raise UsageError(f"expect_traces needs a tf.function or a RetraceProbe, got "
                             f"{type(fn_or_probe).__name__}; wrap a plain function: RetraceProbe(fn)")
        self.target = fn_or_probe
        self.at_most = at_most
        self.result = TraceExpectation()
        self._watch: _FunctionWatch | None = None

    def __enter__(self) -> TraceExpectation:
        t = self.target
        if isinstance(t, RetraceProbe):
            self._before = (len(t.traces), t.trace_count, t.calls, t.original_tracing_count)
            self.result.before = len(t.traces)
        else:
            self._watch = _FunctionWatch(t)
        return self.result

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True  # pytest shows the user's block, not this frame
        t, result = self.target, self.result
        no_probe_call = None
        if self._watch is not None:
            groups = self._watch.finish(result)
            target = user_function(t)
            name = short_name(getattr(target, "__qualname__", None) or getattr(t, "__name__", "function"))
        else:
            n_traces, count, calls, original = self._before
            result.count = t.trace_count - count
            result.traces = t.traces[n_traces:]
            groups = [("", result.traces)]
            name = t.function_name
            if t.calls == calls and t.trace_count == count:
                no_probe_call = _no_probe_call_error(t, original)
        if exc_type is not None:
            return False  # the block raised: that error is the story
        if no_probe_call is not None:
            raise no_probe_call
        if result.count > self.at_most:
            if self._watch is not None:  # the fixes are run only when they are printed
                groups = self._watch.checked(groups)
                result.traces = [tr for _, trs in groups for tr in trs]
            raise RetraceError(_retrace_message(name, result, self.at_most, groups),
                               result.traces, result.count, self.at_most)
        return False


def _no_probe_call_error(probe: RetraceProbe, original_before: int | None) -> UsageError:
    traced = ""
    if probe.original is not None and original_before is not None:
        n = probe.original_tracing_count - original_before
        traced = f" ({probe.function_name} itself traced {n} time(s) there, unseen by the probe)"
    return UsageError(
        f"expect_traces: no call went through RetraceProbe({probe.function_name}) inside the block"
        f"{traced}, so nothing was counted: the probe sees only calls made through it; call "
        f"probe(...) in the block, or pass the tf.function itself: "
        f"expect_traces({probe.function_name}, at_most=...)")


def _retrace_message(name: str, result: TraceExpectation, at_most: int,
                     groups: Sequence[tuple[str, Sequence[Trace]]]) -> str:
    before = ""
    if result.before:
        before = (f" (#1-#{result.before} were traced before the block)" if result.before > 1
                  else " (#1 was traced before the block)")
    lines = [f"{name} traced {result.count} time(s) in the block, expected at most {at_most}{before}:"]
    for owner, traces in groups:
        tag = f"{owner} " if owner and len(groups) > 1 else ""
        for tr in traces:
            head = f"  {tag}#{tr.index}{tr.versus}"
            if tr.kind == "first" and not tr.reasons:
                lines.append(f"{head} first trace" + (" of this object" if tag else ""))
            for r, fix in zip(tr.reasons, tr.fixes):
                lines.append(f"{head}: {r}  (fix: {fix})")
            if tr.runner_up is not None:
                lines.append(f"{' ' * len(head)}  runner-up vs #{tr.runner_up}: "
                             + "; ".join(tr.runner_up_reasons))
    return "\n".join(lines)


def expect_traces(fn_or_probe: Any, at_most: int) -> _ExpectTraces:
    """Asserts that a tf.function traces at most ``at_most`` times inside the ``with`` block.

    For a tf.function, the traces are TF's own: ``experimental_get_tracing_count()``
    counts them, TF's "Creating new FuncGraph" log records (matched to this
    tf.function OBJECT, not to its name) give their FunctionTypes, and each is
    compared with the traces the function made BEFORE the block too (its
    trace cache, `cached_traces`), so a function warmed up before the block
    gets the real reason (``x: shape (32, 4) -> (6, 4)``), not "first trace".
    A ``@tf.function`` method taken from the class (``Net.__call__``) counts
    the traces of every instance's copy together.

    Frames of this module are hidden from pytest's traceback
    (``__tracebackhide__``), so a failure shows the user's block and the reasons.

    Args:
        fn_or_probe: a `tf.function` (no probe needed), or a `RetraceProbe`
            (only calls made through the probe are seen).
        at_most: the most traces allowed inside the block (>= 0).

    Returns:
        A context manager; ``with expect_traces(...) as seen:`` gives a
        `TraceExpectation` whose ``count`` and ``traces`` are set on exit.

    Raises:
        RetraceError: more traces than ``at_most``; the message lists each
            trace's reasons, the trace it is compared with (``vs #N``) and fixes.
        UsageError: ``fn_or_probe`` is neither a probe nor a tf.function,
            ``at_most`` is negative, or no call went through the probe
            inside the block (a probe counts only its own calls).

    Example:

    >>> @tf.function
    ... def step(x):
    ...     return x * 2.0
    >>> _ = step(tf.ones([32, 4]))          # warmed up before the block
    >>> with expect_traces(step, at_most=0):
    ...     _ = step(tf.ones([6, 4]))
    Traceback (most recent call last):
    RetraceError: step traced 1 time(s) in the block, expected at most 0 (#1 was traced before the block):
      #2 vs #1: x: shape (32, 4) -> (6, 4) (dim 0: 32 -> 6)  (fix: …)
    """
    return _ExpectTraces(fn_or_probe, at_most)

