"""`compare_modes` does each expensive thing once.

* it traces the function once per traced mode (graph, XLA): the variables to save
  come from graph mode's own trace, not from a trace made only to look (tflab without the fix
  traced three times);
* it computes each mode's ULP and |diff| arrays once per tensor, shared by the
  maxima, the findings and the condition note (tflab without the fix computed them again for
  the findings);
* it fetches HLO with one XLA compile beyond the run's own: TF 2.21's
  ``experimental_get_compiler_ir`` builds a fresh executable for each optimized
  stage (``tensorflow/compiler/jit/get_compiler_ir.cc``, ``BuildExecutable``), so
  ``optimized_hlo_dot`` (a second compile of the same program) is fetched only
  when named (tflab without the fix fetched it by default: two compiles).

The counts are of real events: a counter in the traced Python body (it runs once
per trace, `tf.executing_eagerly()` is False there), calls of the one ULP function,
and the stage calls made on the XLA tf.function's compiler-IR generator.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tflab._graph.numeric import ulp_distance
from tflab.modes import compare_modes

X = np.linspace(-2.0, 2.0, 64, dtype=np.float32)


def _tanh3(traces):
    def tanh3(x):
        if not tf.executing_eagerly():
            traces.append(1)
        return tf.tanh(x) * 3.0

    return tanh3


def test_traced_once_per_mode():
    traces: list = []
    c = compare_modes(_tanh3(traces), X, repeats=1, hlo=False)
    assert c.modes["xla"].error is None and c.modes["graph"].error is None
    assert len(traces) == 2  # graph once, XLA once
    traces.clear()
    compare_modes(_tanh3(traces), X, repeats=1, hlo=False, modes=("graph",))
    assert len(traces) == 1


def test_stateful_function_traced_once_per_mode_and_its_variable_restored():
    """The variable to save is found by graph mode's own trace, and still put back."""
    v = tf.Variable(tf.zeros([64]), trainable=False)
    traces: list = []

    def bump(x):
        if not tf.executing_eagerly():
            traces.append(1)
        v.assign_add(tf.ones([64]))
        return x * v

    c = compare_modes(bump, X, repeats=2, hlo=False)
    assert len(traces) == 2
    assert c.variables_restored == (v.name,) and float(v.numpy().max()) == 0.0
    # Every mode started from v = 0, so its first call gave x * 1 in each mode.
    for m in ("eager", "graph", "xla"):
        np.testing.assert_array_equal(c.modes[m].outputs[0], X * np.float32(1.0))


def _ulp32(a, b) -> np.ndarray:
    """ULP distance of float32 arrays from their bit patterns, independent of tflab's helper:
    the sign-magnitude int32 view mapped onto one ordered integer line (-0.0 and +0.0 both 0)."""
    def ordered(x):
        i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))


def test_ulp_arrays_computed_once_per_mode_and_tensor(monkeypatch):
    calls = []

    def counting(a, b):
        calls.append(1)
        return ulp_distance(a, b)

    # Every binding a mode comparison reaches: the one in findings (its memo), the module itself
    # (a function-level `from tflab._graph.numeric import ulp_distance` reads it there).
    import tflab._graph.numeric
    import tflab.modes.findings

    for mod in (tflab._graph.numeric, tflab.modes.findings):
        monkeypatch.setattr(mod, "ulp_distance", counting)
    # A bound of 0 ULP and atol 0 make every XLA difference a finding, so the
    # findings (and the condition note) read the arrays too.
    # attribute=False: finding the cause reruns XLA under other settings and checks those values on
    # their own (tests/modes/test_mode_causes.py); what is counted here is the comparison's own work.
    c = compare_modes(_tanh3([]), X, repeats=1, hlo=False, ulp_bound=0, atol=0.0, attribute=False)
    assert any(f.startswith("xla: ") for f in c.findings), c.findings
    # 3 modes (eager against itself included) x 2 tensors (the output, dL/dx).
    assert len(calls) == 3 * 2
    # The shared arrays give what an independent computation on the outputs gives.
    e, x = c.modes["eager"], c.modes["xla"]
    assert x.ulp.outputs == float(_ulp32(e.outputs[0], x.outputs[0]).max())
    assert x.ulp.gradients == float(_ulp32(e.gradients["arg:x"], x.gradients["arg:x"]).max())
    assert x.ulp.outputs > 0 or x.ulp.gradients > 0  # the findings above say XLA differs


def test_the_independent_ulp_helper_counts_nextafter_steps():
    """_ulp32 is the oracle above, so it is checked on its own: k nextafter steps are k ULP, across 0 too."""
    a = np.float32([1.0, -1.0, 0.0, -0.0, 3e-45, 1e30])
    for k in (1, 2, 7):
        b = a.copy()
        for _ in range(k):
            b = np.nextafter(b, np.float32(np.inf))
        assert _ulp32(a, b).tolist() == [k] * len(a)
    assert _ulp32(np.float32([0.0]), np.float32([-0.0])).tolist() == [0]
    smallest = np.float32(1e-45)
    assert _ulp32(np.float32([-smallest]), np.float32([smallest])).tolist() == [2]


@pytest.fixture
def stage_calls(monkeypatch):
    """Records every stage asked of an XLA tf.function's compiler-IR generator."""
    kind = type(tf.function(lambda: 0))
    original = kind.experimental_get_compiler_ir
    seen: list[str] = []

    def recording(self, *args, **kwargs):
        gen = original(self, *args, **kwargs)

        def stage(stage="hlo", **kw):
            seen.append(stage)
            return gen(stage=stage, **kw)

        return stage

    monkeypatch.setattr(kind, "experimental_get_compiler_ir", recording)
    return seen


def test_hlo_costs_one_xla_compile_beyond_the_run(stage_calls):
    c = compare_modes(_tanh3([]), X, repeats=1)
    compiles = [s for s in stage_calls if s.startswith("optimized")]
    assert compiles == ["optimized_hlo"]  # one XLA compile for the HLO
    assert set(c.hlo) == {"hlo", "optimized_hlo"} and c.hlo["optimized_hlo"].startswith("HloModule")
    assert "optimized_hlo_dot" in c.hlo_stages  # offered, not fetched unasked
    assert c.fusion_count is not None and c.fusion_count >= 1
    stage_calls.clear()
    d = compare_modes(_tanh3([]), X, repeats=1, hlo=("optimized_hlo_dot",))
    assert [s for s in stage_calls if s.startswith("optimized")] == ["optimized_hlo_dot"]
    assert d.hlo["optimized_hlo_dot"].lstrip().startswith("digraph")
