"""`tflab.lower`'s own options checked on every path, and the graph path's profiler: one already running,
and SIGTERM between profiled runs."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tflab
from tflab.errors import UsageError


def f(x):
    return tf.reduce_sum(x * 2.0)


X = tf.TensorSpec([2, 4], tf.float32)


@pytest.fixture
def built(monkeypatch):
    """Records what reaches the builders instead of building (the options are what is under test)."""
    seen = {}
    monkeypatch.setattr("tflab.lowering.graph_build.build_graph_lowering",
                        lambda fn, args, kwargs, runs: seen.setdefault("graph", runs))
    monkeypatch.setattr("tflab.lowering.build.build_lowering",
                        lambda fn, args, kwargs, passes: seen.setdefault("xla", passes))
    return seen


@pytest.mark.parametrize("kwargs, said", [
    ({"path": "graph", "passes": True}, "passes=True shows XLA's HLO passes"),
    ({"passes": "no"}, "must be True or False"),              # a non-empty string is truthy
    ({"path": "graph", "passes": 1}, "must be True or False"),
    ({"runs": 0}, "runs=0 must be a whole number from 1"),     # the xla path checks runs too
    ({"path": "graph", "runs": 10**9}, "from 1 to 100000"),
    ({"path": "graph", "runs": True}, "runs=True must be"),
    ({"path": "graph", "runs": 2.0}, "runs=2.0 must be"),
])
def test_an_option_the_path_cannot_use_is_one_usage_error(built, kwargs, said):
    with pytest.raises(UsageError, match=re.escape(said)):
        tflab.lower(f, X, **kwargs)
    assert built == {}  # refused before any work


@pytest.mark.parametrize("kwargs, expect", [
    ({"path": "graph", "runs": np.int64(3)}, ("graph", 3)),   # a numpy integer is a whole number
    ({"path": "graph", "runs": np.int32(100000)}, ("graph", 100000)),
    ({"path": "xla", "passes": True, "runs": 20}, ("xla", True)),
    ({"path": "graph", "passes": False}, ("graph", 20)),
])
def test_valid_options_reach_the_builder(built, kwargs, expect):
    tflab.lower(f, X, **kwargs)
    assert list(built.items()) == [expect] and type(built[expect[0]]) in (int, bool)


def test_a_running_profiler_is_one_usage_error_and_the_next_profile_works(tmp_path):
    from tflab._tf.run_metadata import kernel_events

    calls = []
    tf.profiler.experimental.start(str(tmp_path / "theirs"))
    try:
        with pytest.raises(UsageError, match=r"already running.*tf\.profiler\.experimental\.stop\(\).*path='xla'"):
            kernel_events(lambda: calls.append(1), 3)
    finally:
        tf.profiler.experimental.stop()
    assert calls == []
    with tf.profiler.experimental.Profile(str(tmp_path / "ctx")):  # sibling: the context-manager form
        with pytest.raises(UsageError, match="already running"):
            kernel_events(lambda: calls.append(1), 3)
    kernel_events(lambda: calls.append(1), 3)  # healthy twin: none running
    assert calls == [1, 1, 1]


def test_a_pending_sigterm_ends_the_profile_between_runs(monkeypatch):
    """Planted: a SIGTERM whose exception was lost (the sticky flag set); twin: no SIGTERM, every run."""
    import tflab.errors as errors
    from tflab._tf.run_metadata import kernel_events

    calls = []
    monkeypatch.setattr(errors, "_TERM_RECEIVED", True)
    with pytest.raises(errors.Terminated):
        kernel_events(lambda: calls.append(1), 1000)
    assert calls == [1]
    monkeypatch.setattr(errors, "_TERM_RECEIVED", False)
    kernel_events(lambda: calls.append(1), 4)  # the profiler was stopped: a new one starts
    assert len(calls) == 5
