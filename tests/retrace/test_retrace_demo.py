"""Lab step 3: demonstrate_retracing measures each retrace trigger and its prevention.

The numbers are TF 2.21's, measured; the closure row is where TF differs from
common teaching (no retrace, a stale result).
"""

from __future__ import annotations

import contextlib
import json
import logging

import pytest

pytest.importorskip("tensorflow")

from tflab.retrace import demo as retrace_demo  # noqa: E402
from tflab.retrace.demo import RetracingDemo, demonstrate_retracing  # noqa: E402

RETRACING_WARNING = "triggered tf.function retracing"


@contextlib.contextmanager
def _tf_warnings():
    """Collects the messages of WARNING records that reach the `tensorflow` logger's handlers."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger = logging.getLogger("tensorflow")
    keep, old_level = Keep(level=logging.WARNING), logger.level
    logger.setLevel(logging.WARNING)  # TF's default, whatever an earlier test left
    logger.addHandler(keep)
    try:
        yield seen
    finally:
        logger.removeHandler(keep)
        logger.setLevel(old_level)


@pytest.fixture(scope="module")
def demo_run() -> tuple[RetracingDemo, list[str], tuple, int]:
    # Run twice: TF keys its frequent-retracing detector by code object, so in
    # one process the demo's second run is the one that made TF warn (measured:
    # 4 warnings, for the new-shape and new-Python-value lambdas).
    logger = logging.getLogger("tensorflow")
    with _tf_warnings() as seen:
        filters_before = tuple(logger.filters)
        demonstrate_retracing()
        demo = demonstrate_retracing()
        filters_after, level_after = tuple(logger.filters), logger.level
    assert filters_after == filters_before
    return demo, seen, filters_after, level_after


@pytest.fixture(scope="module")
def demo(demo_run) -> RetracingDemo:
    return demo_run[0]


# trigger -> (traces, traces after prevention), measured on TF 2.21.
EXPECTED = {
    "new shape": (3, 1),                      # lengths 2, 3, 4 -> input_signature [None]
    "new dtype": (2, 1),                      # float32, int32 -> tf.cast first
    "new Python value": (3, 1),               # n = 1, 2, 3 -> tf.constant(n)
    "changed closure": (1, 1),                # no retrace at all (stale), tensor argument
    "tf.Variable on the first call": (2, 1),  # TF's own second trace -> variable outside
    "tf.Variable on a later call": (3, 2),    # 2 + the failed trace -> variables made first
    "Python value with a tf.Tensor hint": (2, 1),  # D10: the hint no longer converts -> tf.constant(n)
}


@pytest.mark.parametrize("trigger", list(EXPECTED), ids=lambda t: t.replace(" ", "_"))
def test_measured_counts(demo, trigger):
    r = demo[trigger]
    assert (r.traces, r.traces_after) == EXPECTED[trigger]


def test_triggers_in_lab_order(demo):
    assert [r.trigger for r in demo.results] == list(EXPECTED)


@pytest.mark.parametrize("trigger,reasons", [
    ("new shape", ("#2 x: shape (2,) -> (3,)", "#3 x: shape (3,) -> (4,)")),
    ("new dtype", ("#2 x: dtype float32 -> int32",)),
    ("new Python value", ("#2 n: 1 -> 2", "#3 n: 2 -> 3")),
    ("changed closure", ()),
    ("Python value with a tf.Tensor hint", ("#2 x: 1 -> 2",)),
], ids=["shape", "dtype", "python_value", "closure", "type_hint"])
def test_reasons(demo, trigger, reasons):
    assert demo[trigger].reasons == reasons


def test_changed_closure_is_stale_not_retraced(demo):
    r = demo["changed closure"]
    assert r.tf_tracing_count == 1
    assert r.observed.startswith("no retrace; results True then True (stale: eager gives False); "
                                 "closure 'threshold' was 0.5 at trace #1, now 0.9")
    assert r.observed_after == "results True then False"  # the tensor argument is read each call


def test_variable_on_first_call_is_tf_own_retrace(demo):
    r = demo["tf.Variable on the first call"]
    assert r.tf_tracing_count == 2
    assert r.observed == "trace kinds: first, variable_creation"
    assert r.reasons[0].startswith("#2 TF's own re-trace")


def test_variable_on_later_call_raises(demo):
    r = demo["tf.Variable on a later call"]
    assert r.observed.startswith("ValueError: tf.function only supports singleton tf.Variables "
                                 "created on the first call")
    # The probe's side effect saw the failed trace; TF's cache did not keep it.
    assert (r.traces, r.tf_tracing_count) == (3, 2)
    assert r.observed_after == "no error"


def test_renders(demo):
    assert repr(demo).startswith("<RetracingDemo TF 2.21")
    compact = demo.to_text(compact=True).splitlines()
    assert len(compact) == 1 + len(EXPECTED)
    assert compact[4].split() == ["changed", "closure", "1", "pass", "threshold", "as", "a",
                                  "tensor", "argument", "->", "1"]
    d = json.loads(json.dumps(demo.to_dict()))
    assert d["results"][0]["trigger"] == "new shape" and d["results"][0]["traces"] == 3
    # The configuration it ran on; the counts above hold on every one.
    assert isinstance(d["config"]["onednn_enabled"], bool)
    assert demo.to_text().splitlines()[-1] == f"measured on: {demo.config['one_line']}"
    assert demo.counts["new Python value"] == (3, 1) and not callable(demo.counts)  # no deprecated alias
    with pytest.raises(KeyError, match="no trigger 'nope'"):
        demo["nope"]


def test_demo_shows_no_frequent_retracing_warning_and_leaves_the_logger_as_it_was(demo_run):
    _, seen, filters_after, level_after = demo_run
    assert not [m for m in seen if RETRACING_WARNING in m]
    assert level_after == logging.WARNING  # a filter, not a level change
    assert filters_after == ()  # removed afterwards


def test_the_filter_drops_tf_own_warning_only_while_it_is_on():
    tf = pytest.importorskip("tensorflow")
    inside = tf.function(lambda x: x * 2.0)   # two lambdas: two code objects, two detectors
    outside = tf.function(lambda x: x * 3.0)
    with _tf_warnings() as seen:
        with retrace_demo._quiet_frequent_retracing_warning():
            for n in range(1, 7):
                inside(tf.ones([n]))
        assert seen == []
        for n in range(1, 7):
            outside(tf.ones([n]))
    # Measured: TF warns at the 5th and 6th retracing call (at most twice per function).
    assert [m.split(" calls")[0] for m in seen if RETRACING_WARNING in m] == [
        "5 out of the last 5", "6 out of the last 6"]
