"""Lab step 4, measured: how many traces a tf.function makes without a signature, with one, and with
``reduce_retracing=True`` (`stabilization_report`, `StabilizeReport`, `count_traces`).

`tflab.signatures` infers the input_signature; this module counts the traces each variant makes
over the same calls, from the TraceEvent each trace gives (`tflab.retrace.event.on_each_trace`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Sequence

from tflab.report.base import Report, config_field
from tflab.errors import UsageError
from tflab.signatures import FixedShapeWarning, dataset_element_spec, examples_list, python_function, stabilize


@dataclasses.dataclass(frozen=True)
class VariantTraces:
    """Trace counts of one tf.function variant over the examples.

    Attributes:
        variant: ``"plain"``, ``"reduce_retracing"`` or ``"input_signature"``.
        traces: total traces over all example calls (the Python body's side effect count).
        first_call_traces: traces during the first call (2 when it creates variables).
        later_traces: traces after the first call: the retraces the user pays per new shape.
        traced_specs: for each trace, the argument specs it was traced with, as text.
        events: for each trace, its `tflab.retrace.TraceEvent` (the FunctionType TF
            looked up and the one it traced, relaxed or exact; the options in force).
    """

    variant: str
    traces: int
    first_call_traces: int
    later_traces: int
    traced_specs: tuple[str, ...]
    events: tuple = dataclasses.field(default=(), repr=False, compare=False)

    @property
    def relaxed(self) -> tuple[bool, ...]:
        """For each trace: TF traced a more general FunctionType than the call's (reduce_retracing)."""
        return tuple(bool(e is not None and e.relaxed) for e in self.events)

    def to_dict(self) -> dict:
        return {"variant": self.variant, "traces": self.traces, "first_call_traces": self.first_call_traces,
                "later_traces": self.later_traces, "traced_specs": list(self.traced_specs),
                "relaxed": list(self.relaxed)}


@dataclasses.dataclass(frozen=True, repr=False)
class StabilizeReport(Report):
    """Plain vs ``reduce_retracing=True`` vs input_signature, measured on the same examples.

    Attributes:
        function_name: the Python function's name.
        input_signature: the signature `stabilize` used.
        example_shapes: the argument shapes of each example call, as text.
        variants: `VariantTraces` per variant, in the order measured.
        max_abs_error: max |output(stabilized) − output(plain)| over all calls and outputs.
        note: None, or why the inferred signature will still fail on another
            shape (no dim varied across the examples; see `FixedShapeWarning`).
        config: `tflab.runtime_config()` as a dict, filled when the report is made.
    """

    function_name: str
    input_signature: tuple
    example_shapes: tuple[str, ...]
    variants: dict
    max_abs_error: float
    note: str | None = None
    config: dict = config_field()

    def summary_line(self) -> str:
        counts = ", ".join(f"{k}={v.traces} ({v.later_traces} after first call)" for k, v in self.variants.items())
        return f"{len(self.example_shapes)} calls; traces: {counts}"

    def to_text(self) -> str:
        from tflab.report.text import table
        from tflab.tracing import nested_str

        lines = [f"stabilize {self.function_name}: input_signature {nested_str(self.input_signature)}",
                 f"  calls: {', '.join(self.example_shapes)}"]
        rows = [(v.variant, f"{v.traces} traces", f"({v.first_call_traces} on the first call,",
                 f"{v.later_traces} after)") for v in self.variants.values()]
        body = table(rows, indent="  ", gap=1, align="<<<<").splitlines()
        for line, v in zip(body, self.variants.values()):
            lines.append(line)
            lines.extend(f"    traced {s}" for s in v.traced_specs)
        lines.append(f"  max |stabilized - plain| = {self.max_abs_error:g}")
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        from tflab.report.jsonable import to_jsonable

        return {"function": self.function_name, "function_name": self.function_name,
                "input_signature": to_jsonable(self.input_signature),
                "example_shapes": list(self.example_shapes),
                "variants": {k: v.to_dict() for k, v in self.variants.items()},
                "max_abs_error": self.max_abs_error, "note": self.note, "config": self.config}


def _describe_call(args: tuple) -> str:
    import tensorflow as tf

    def one(v):
        if isinstance(v, (tf.Tensor, tf.Variable)) or hasattr(v, "shape") and hasattr(v, "dtype"):
            shape = tf.TensorShape(v.shape)
            dims = "?" if shape.rank is None else ",".join("None" if d is None else str(d) for d in shape.as_list())
            return f"{tf.as_dtype(v.dtype).name}[{dims}]"
        return repr(v)

    return "(" + ", ".join(str(tf.nest.map_structure(one, a)) for a in args) + ")"


def count_traces(fn: Callable, log: list, events: list | None = None) -> Callable:
    """Wraps a Python function so each trace appends its argument specs to ``log``.

    The count is the retrace package's trace-time trigger
    (`tflab.retrace.event.on_each_trace`, the one `tflab.RetraceProbe` uses):
    it runs when TF traces the body, never when the ConcreteFunction runs,
    and it takes each trace's `tflab.retrace.TraceEvent` from TF's tracing
    frame (the FunctionType TF looked up and the one it traced, the options
    in force, the call site). The wrapper is a TF decorator, so AutoGraph
    unwraps it and converts ``fn`` itself; a plain ``functools.wraps`` wrapper
    named ``<lambda>`` would send AutoGraph looking for the lambda's source in
    this file.

    Args:
        fn: the Python function (the body of a tf.function to be).
        log: a list; each trace appends text like ``"(float32[None,8])"``
            (the arguments TF traced the body with, relaxed dims as None).
        events: a list, or None; each trace appends its `TraceEvent` (None
            where TF's tracing frame could not be read).

    Returns:
        The wrapper, to pass to `tf.function` or `stabilize`.
    """
    from tflab.retrace.event import on_each_trace

    def on_trace(event: Any, args: tuple, kwargs: dict) -> None:
        log.append(_describe_call(args))
        if events is not None:
            events.append(event)

    return on_each_trace(fn, on_trace, "count_traces")


def stabilization_report(fn: Callable, examples: Iterable[Any],
                         input_signature: Sequence[Any] | None = None,
                         variants: Sequence[str] = ("plain", "reduce_retracing", "input_signature")
                         ) -> StabilizeReport:
    """Measures trace counts of ``fn`` over ``examples``: plain, reduce_retracing, stabilized.

    Each variant is a fresh `tf.function` over the same Python function, called
    with every example in order. Traces are counted by a Python side effect in
    the body. A function that creates variables creates them in the first
    variant's first call only; ``later_traces`` (traces after the first call)
    is the number to compare across variants.

    Args:
        fn: a Python function or `tf.function`.
        examples: example calls (see `infer_input_signature`), e.g. the batches
            of a `tf.data.Dataset`.
        input_signature: as in `stabilize`; inferred from ``examples`` when None.
        variants: which variants to measure, in order.

    Returns:
        A `StabilizeReport`.

    Raises:
        UsageError: as `stabilize`.
    """
    import numpy as np
    import tensorflow as tf

    py_fn = python_function(fn)
    calls = examples_list(examples)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FixedShapeWarning)
        # A dataset goes as itself: its element_spec relaxes dims too.
        stable = stabilize(fn, input_signature=input_signature,
                           examples=examples if dataset_element_spec(examples) is not None else calls)
    note = next((str(w.message) for w in caught if issubclass(w.category, FixedShapeWarning)), None)
    for w in caught:  # anything else goes on to the caller's filters
        if not issubclass(w.category, FixedShapeWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    results = {}
    outputs = {}
    for variant in variants:
        log: list[str] = []
        events: list = []
        body = count_traces(py_fn, log, events)
        if variant == "plain":
            f = tf.function(body)
        elif variant == "reduce_retracing":
            f = tf.function(body, reduce_retracing=True)
        elif variant == "input_signature":
            f = tf.function(body, input_signature=stable.input_signature)
        else:
            raise UsageError(f"unknown variant {variant!r}; use plain, reduce_retracing or input_signature")
        outs = []
        first = None
        for call in calls:
            try:
                outs.append(f(*call))
            except Exception as e:  # one line with the diagnosis instead of TF's wall
                from tflab.diagnosis import diagnosed_error

                raise diagnosed_error(f"stabilization_report: the {variant} variant", e, py_fn) from e
            if first is None:
                first = len(log)
        outputs[variant] = outs
        results[variant] = VariantTraces(variant, len(log), first or 0, len(log) - (first or 0), tuple(log),
                                         events=tuple(events))
    diff = 0.0
    if "plain" in outputs and "input_signature" in outputs:
        for a, b in zip(outputs["plain"], outputs["input_signature"]):
            for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
                x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
                if x.size:
                    diff = max(diff, float(np.max(np.abs(x - y))))
    return StabilizeReport(
        function_name=getattr(py_fn, "__qualname__", getattr(py_fn, "__name__", "fn")),
        input_signature=tuple(stable.input_signature),
        example_shapes=tuple(_describe_call(c) for c in calls),
        variants=results,
        max_abs_error=diff,
        note=note)
