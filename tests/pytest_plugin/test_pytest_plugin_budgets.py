"""Two trace budgets stacked on one test are refused in one line, not one of them kept silently.

``@tflab_max_traces(1)`` over ``@tflab_max_traces(5)``: pytest's closest marker was (5), and a test
that traced twice passed.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def plugin_args() -> list[str]:
    """``-p tflab.pytest_plugin`` unless the ``pytest11`` entry point already loads it (installed)."""
    from importlib.metadata import distributions

    installed = any(ep.group == "pytest11" and ep.value == "tflab.pytest_plugin"
                    for dist in distributions() for ep in dist.entry_points)
    return [] if installed else ["-p", "tflab.pytest_plugin"]

SUITE = '''
import pytest
import tensorflow as tf

@tf.function
def step(x):
    return x * 2.0

@pytest.mark.tflab_max_traces(1)
@pytest.mark.tflab_max_traces(5)
def test_stacked():  # handed: two budgets, two traces
    step(tf.ones([1])); step(tf.ones([2]))

@pytest.mark.tflab_max_traces(2, function="step")
@pytest.mark.tflab_max_traces(2)
def test_stacked_function():  # sibling: the same n, one names a function
    step(tf.ones([3]))

@pytest.mark.tflab_max_traces(3)
class TestOverride:
    @pytest.mark.tflab_max_traces(2)
    def test_method_overrides_class(self):  # healthy twin: the closest marker is an override
        step(tf.ones([4])); step(tf.ones([5]))

@pytest.mark.tflab_max_traces(2)
@pytest.mark.tflab_max_traces(2)
def test_same_budget_twice():  # healthy twin: the same budget written twice is one budget
    step(tf.ones([6]))
'''


def test_stacked_budgets_are_one_line_each(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess(*plugin_args(), "-p", "no:randomly", "-q")
    result.assert_outcomes(passed=2, errors=2)
    lines = [ln for ln in result.outlines if "budgets on one test" in ln]
    assert any("tflab_max_traces(1)" in ln and "tflab_max_traces(5)" in ln for ln in lines), result.outlines
    assert any("tflab_max_traces(2, function='step')" in ln and "tflab_max_traces(2) " in ln for ln in lines)
    assert not any("Traceback" in ln or "pytest_plugin.py" in ln for ln in result.outlines)  # one line, no frames
