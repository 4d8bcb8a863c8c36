"""Lab step 3: what makes a tf.function trace again, measured on the running TF.

`demonstrate_retracing` calls small tf.functions through `RetraceProbe` and
records, for each classic trigger, how many traces TF made, then applies the
usual prevention and measures again. Nothing here is quoted from a book: the
numbers are whatever the installed TensorFlow does (the tests pin TF 2.21's).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

from tflab.retrace.probe import RetraceProbe
from tflab.retrace.records import RetracingDemo, TriggerResult


def _first_line(e: BaseException) -> str:
    # TF wraps errors raised while tracing in an "in user code:" block; the
    # last non-empty line is TF's own message.
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = (lines[-1] if lines else "").split(". Make sure")[0]
    prefix = f"{type(e).__name__}: "
    return msg if msg.startswith(prefix) else prefix + msg


def _new_shape(tf) -> TriggerResult:
    probe = RetraceProbe(lambda x: x * 2.0)
    for n in (2, 3, 4):
        probe(tf.ones([n]))
    fixed = RetraceProbe(tf.function(lambda x: x * 2.0,
                                     input_signature=[tf.TensorSpec([None], tf.float32)]))
    for n in (2, 3, 4):
        fixed(tf.ones([n]))
    return TriggerResult("new shape", "f(x) with x: float32 (2,), (3,), (4,)", probe.trace_count,
                         probe.tf_tracing_count, tuple(probe.reasons), "",
                         "input_signature=[TensorSpec([None], float32)]", fixed.trace_count)


def _new_dtype(tf) -> TriggerResult:
    probe = RetraceProbe(lambda x: x + x)
    probe(tf.constant([1.0, 2.0]))
    probe(tf.constant([1, 2]))
    fixed = RetraceProbe(lambda x: x + x)
    fixed(tf.constant([1.0, 2.0]))
    fixed(tf.cast(tf.constant([1, 2]), tf.float32))
    return TriggerResult("new dtype", "f(x) with x: float32 (2,), then int32 (2,)", probe.trace_count,
                         probe.tf_tracing_count, tuple(probe.reasons), "",
                         "tf.cast(x, tf.float32) before the call", fixed.trace_count)


def _python_value(tf) -> TriggerResult:
    x = tf.ones([2])
    probe = RetraceProbe(lambda x, n: x * tf.cast(n, tf.float32))
    for n in (1, 2, 3):
        probe(x, n)
    fixed = RetraceProbe(lambda x, n: x * tf.cast(n, tf.float32))
    for n in (1, 2, 3):
        fixed(x, tf.constant(n))
    return TriggerResult("new Python value", "f(x, n) with n = 1, 2, 3 (Python ints)",
                         probe.trace_count, probe.tf_tracing_count, tuple(probe.reasons), "",
                         "pass tf.constant(n)", fixed.trace_count)


def _closure(tf) -> TriggerResult:
    threshold = 0.5

    def above(x):
        return x > threshold

    probe = RetraceProbe(above)
    x = tf.constant([0.7])
    first = bool(probe(x).numpy()[0])
    threshold = 0.9
    graph = bool(probe(x).numpy()[0])
    eager = bool((x > threshold).numpy()[0])
    stale = probe.stale[0].text if probe.stale else "no stale read reported"

    def above_arg(x, t):
        return x > t

    fixed = RetraceProbe(above_arg)
    fixed_first = bool(fixed(x, tf.constant(0.5)).numpy()[0])
    fixed_second = bool(fixed(x, tf.constant(0.9)).numpy()[0])
    return TriggerResult(
        "changed closure", "threshold = 0.5; f(x=[0.7]); threshold = 0.9; f(x=[0.7])",
        probe.trace_count, probe.tf_tracing_count, tuple(probe.reasons),
        f"no retrace; results {first} then {graph} (stale: eager gives {eager}); {stale}",
        "pass threshold as a tensor argument", fixed.trace_count,
        f"results {fixed_first} then {fixed_second}")


def _variable_first_call(tf) -> TriggerResult:
    holder: dict[str, Any] = {}

    def make_and_use(x):
        if "v" not in holder:
            holder["v"] = tf.Variable(2.0)
        return x * holder["v"]

    probe = RetraceProbe(make_and_use)
    probe(tf.ones([2]))
    outside = tf.Variable(2.0)
    fixed = RetraceProbe(lambda x: x * outside)
    fixed(tf.ones([2]))
    kinds = ", ".join(t.kind for t in probe.traces)
    return TriggerResult("tf.Variable on the first call", "f(x) that creates a tf.Variable once, called once",
                         probe.trace_count, probe.tf_tracing_count, tuple(probe.reasons),
                         f"trace kinds: {kinds}", "create the tf.Variable outside the tf.function",
                         fixed.trace_count)


def _variable_later_call(tf) -> TriggerResult:
    per_size: dict[int, Any] = {}

    def add_bias(x):
        n = int(x.shape[0])
        if n not in per_size:
            per_size[n] = tf.Variable(tf.zeros([n]))
        return x + per_size[n]

    probe = RetraceProbe(add_bias)
    probe(tf.ones([2]))
    try:
        probe(tf.ones([3]))
        observed = "no error"
    except ValueError as e:
        observed = _first_line(e)
    observed += (f" (the probe counted {probe.trace_count} traces, the failed one included; "
                 f"TF's experimental_get_tracing_count() is {probe.tf_tracing_count}: "
                 f"a trace that raised is not cached)")
    made = {n: tf.Variable(tf.zeros([n])) for n in (2, 3)}
    fixed = RetraceProbe(lambda x: x + made[int(x.shape[0])])
    fixed(tf.ones([2]))
    fixed(tf.ones([3]))
    return TriggerResult(
        "tf.Variable on a later call", "f(x) that creates a tf.Variable per new length: x (2,), then (3,)",
        probe.trace_count, probe.tf_tracing_count, tuple(probe.reasons), observed,
        "create every tf.Variable before the first call", fixed.trace_count,
        "no error")


def _type_hints(tf) -> TriggerResult:
    # Case D10: tf.function(experimental_follow_type_hints=True) once converted a
    # Python value passed to a `tf.Tensor`-hinted parameter into a tensor. TF 2.21
    # still accepts the option (deprecated through deprecation.deprecated_args,
    # which logs once) but no longer converts: each value is a new Literal.
    def double(x: tf.Tensor):
        return x * 2

    probe = RetraceProbe(double, experimental_follow_type_hints=True)
    probe(1)
    probe(2)
    fixed = RetraceProbe(double, experimental_follow_type_hints=True)
    fixed(tf.constant(1))
    fixed(tf.constant(2))
    return TriggerResult(
        "Python value with a tf.Tensor hint",
        "f(x: tf.Tensor) with experimental_follow_type_hints=True, x = 1, then 2",
        probe.trace_count, probe.tf_tracing_count, tuple(probe.reasons),
        "the hint does not turn the Python ints into tensors: each is its own Literal",
        "pass tf.constant(n)", fixed.trace_count)

# TF 2.21 polymorphic_function._FrequentTracingDetector warns "N out of the last
# M calls to <function> triggered tf.function retracing…" on the `tensorflow`
# logger; here the retraces are the point of the demo.
FREQUENT_RETRACING_WARNING = "triggered tf.function retracing"


class _DropFrequentRetracingWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return FREQUENT_RETRACING_WARNING not in record.getMessage()
        except Exception:  # a record whose args do not format: not ours to judge
            return True


@contextlib.contextmanager
def _quiet_frequent_retracing_warning() -> Iterator[None]:
    # A filter, not a level change: RetraceProbe's log capture needs the
    # logger's level-1 records, and other warnings must still show.
    logger = logging.getLogger("tensorflow")
    flt = _DropFrequentRetracingWarning()
    logger.addFilter(flt)
    try:
        yield
    finally:
        logger.removeFilter(flt)


def demonstrate_retracing() -> RetracingDemo:
    """Measures each classic retrace trigger and its prevention on the installed TF.

    Triggers, in order (each through its own `RetraceProbe`):

    * **new shape**: x of length 2, 3, 4; prevented by an input_signature
      with a ``None`` dim.
    * **new dtype**: float32 then int32; prevented by casting before the call.
    * **new Python value**: ``n = 1, 2, 3`` as Python ints (each is a
      ``Literal`` in the FunctionType); prevented by passing ``tf.constant(n)``.
    * **changed closure**: a closure variable read by the traced body changes
      from 0.5 to 0.9. The function does *not* retrace and keeps returning the
      0.5 answer; the probe reports the stale read. Prevented by passing the
      threshold as a tensor argument.
    * **tf.Variable on the first call**: TF traces twice on that call (once
      allowing variable creation, once with it disabled,
      ``polymorphic_function.Function._initialize``); prevented by creating the
      variable outside.
    * **tf.Variable on a later call**: a variable created while tracing for a
      new input raises ``ValueError: tf.function only supports singleton
      tf.Variables created on the first call``; prevented by creating every
      variable before the first call.
    * **Python value with a tf.Tensor hint** (case D10):
      ``experimental_follow_type_hints=True`` no longer stops retracing on TF
      2.21 (the option is deprecated): ``f(1)`` then ``f(2)`` trace twice;
      prevented by passing ``tf.constant(n)``.

    Where TF 2.21 differs from common teaching: many guides (and this
    project's seed document) list "a changed closure" as a retrace trigger. On
    TF 2.21 it is not: a Python value read from a closure or global is baked
    into the FuncGraph as a constant and is not part of the FunctionType
    (``tensorflow/core/function/polymorphism/function_type.py``), so the
    cached graph runs with the old value, silently. Also, the "one trace per
    call signature" rule has an exception: a function that creates variables
    traces twice on its first call.

    TF's own "N out of the last M calls … triggered tf.function retracing"
    warning is filtered out of the ``tensorflow`` logger while the demo runs
    (it retraces on purpose), and only then: `RetraceProbe` on user code
    leaves it alone.

    Returns:
        A `RetracingDemo` (``demo["new shape"].traces`` etc.).

    Example:

    >>> demo = demonstrate_retracing()
    >>> demo["new Python value"].traces, demo["new Python value"].traces_after
    (3, 1)
    >>> demo["changed closure"].traces
    1
    """
    import tensorflow as tf

    with _quiet_frequent_retracing_warning():
        results = (_new_shape(tf), _new_dtype(tf), _python_value(tf), _closure(tf),
                   _variable_first_call(tf), _variable_later_call(tf), _type_hints(tf))
    return RetracingDemo(tf_version=tf.__version__, results=results)
