"""The hooks other modules call when they caught a failed trace themselves: `diagnose_exception`
(an exception to a `Diagnosis`), `with_diagnosis` / `diagnosed_error` (a tflab error that names
the kind, culprit line and fix), `diagnosis_note` (the same as a suffix) and `probe_diagnosis`
(`RetraceProbe`'s traces, each earlier FuncGraph labelled by its trace number)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from tflab.diagnosis.context import Context, make_context
from tflab.diagnosis.records import Diagnosis, diagnosis_suffix
from tflab.diagnosis.rules import classify_error
from tflab.errors import UsageError

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
    ctx = Context(name=getattr(fn, "__qualname__", None) or "<function>")
    try:
        ctx = make_context(fn, args, kwargs or {}, from_signature=False)
        ctx.stage, ctx.concrete, ctx.graph_labels = stage, concrete, dict(graph_labels or {})
        return classify_error(exc, ctx)
    except Exception as bug:  # never let the diagnosis hide the user's own error
        from tflab._user.source_map import error_line

        return Diagnosis(function_name=ctx.name, ok=False, kind="unrecognized", error=error_line(exc),
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
    from tflab._user.source_map import error_line

    return with_diagnosis(UsageError(f"{what} raised {error_line(exc)}"), exc, fn, **kw)


def diagnosis_note(exc: BaseException, fn: Callable | None = None) -> str:
    """``"; KIND at FILE:LINE `statement`: FIX"`` for ``exc``, or "" when unrecognized:
    what `compare_modes` appends to a failed mode's one-line error."""
    d = diagnose_exception(exc, fn)
    return "" if d.kind == "unrecognized" else "; " + diagnosis_suffix(d)



def probe_diagnosis(probe: Any, trace: Any, exc: BaseException, entry: Any) -> Any:
    """``trace`` (a `tflab.retrace.Trace`) with ``.diagnosis`` set, for a trace
    that raised (``entry`` None) or a new trace whose call raised.

    Each earlier trace's FuncGraph is labelled ``#N`` from the probe's function
    cache (an ordered map, one entry per successful trace), so a tensor kept
    from trace #1 is named as such.
    """
    from tflab._tf.autograph import cached_traces

    concrete = None
    labels: dict[int, str] = {}
    entries = cached_traces(getattr(probe, "function", None))
    kept = [t for t in probe.traces if t.kind != "failed"] + ([trace] if entry is not None else [])
    for t, (_key, cf) in zip(kept, entries):
        labels[id(cf.graph)] = f"#{t.index}"
    if entry is not None:
        concrete = next((cf for key, cf in entries if key == entry), None)
    d = diagnose_exception(exc, getattr(probe, "_user_fn", None) or getattr(probe, "function", None),
                           stage="trace" if entry is None else "call", concrete=concrete,
                           graph_labels=labels)
    return dataclasses.replace(trace, diagnosis=d)


