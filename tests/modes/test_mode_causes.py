"""compare_modes names the compiler transformation behind a mode's difference, found by bisection.

The XLA cases run one bisection each (a module-scoped fixture): a baseline child
process with XLA's dump, then one child per setting until eager's values come
back. What is asserted holds on any x86 CPU with FMA3, oneDNN on or off: XLA's
CPU backend lets LLVM contract a multiply and an add into one fused
multiply-add, and capping the ISA at AVX (no FMA3) takes that away. A CPU
without FMA3 gives eager's values under XLA, and those tests skip.
"""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import tflab
from tflab.modes.bisection import FMA_RE


def normalize(x, mean, variance):
    # tensorflow/tensorflow#117318: x*inv + (-mean*inv), two 3.2e16 terms that cancel exactly in eager
    return tf.nn.batch_normalization(x, mean, variance, None, None, 1e-3)


def cross(a, b, c, d):
    return a * b - c * d  # a sibling: a*b equals c*d, so eager gives 0; one FMA keeps a*b's rounding error


def addtree(x):
    return x + x + x + x + x + x


def healthy(x):
    return x * 2.0 + 1.0  # x*2 is exact: a fused multiply-add rounds the same as eager


def _line(fn, text):
    src, first = inspect.getsourcelines(fn)
    return f"test_mode_causes.py:{first + next(i for i, s in enumerate(src) if text in s)}"


@pytest.fixture(scope="module")
def xla_cases():
    x = tf.constant([1e15] * 3)
    bn = tflab.compare_modes(normalize, x, tf.constant(1e15), tf.constant(0.0), modes=("xla",), repeats=1,
                             hlo=False)
    a, b = np.array([1.1e7, 3.3e6, 7.0e5], np.float32), np.array([1.3e7, 7.7e6, 9.1e5], np.float32)
    cr = tflab.compare_modes(cross, tf.constant(a), tf.constant(b), tf.constant(b.copy()), tf.constant(a.copy()),
                             modes=("xla",), repeats=1, hlo=False, gradients=False)
    return bn, cr, (a, b)


def _needs_fma(cmp):
    if not cmp.findings:
        pytest.skip("XLA gives eager's values here (a CPU without FMA3: nothing to contract)")


def test_issue_117318_the_fma_contraction_is_found_by_bisection_at_its_fusion_and_line(xla_cases):
    bn = xla_cases[0]
    _needs_fma(bn)
    c = bn.cause
    assert c is not None and c.kind == "compiler" and c.runs == "eager vs xla"
    assert c.op_type == "fusion" and c.op_name
    assert c.line == _line(normalize, "return tf.nn.batch_normalization")
    ev = c.evidence
    assert FMA_RE.search(ev["instruction"]), ev["instruction"]
    assert ev["found"]["restored"] is True
    assert ev["found"]["setting"] in ("--xla_cpu_max_isa=AVX", "fusion")  # found, not given: see the trials
    assert ev["trials"][0]["setting"] == ev["found"]["setting"] or not ev["trials"][0]["restored"]
    assert "one rounding gives" in c.detail and "where eager's two give 0" in c.detail
    assert c.fix.fix.status == "checked" and c.fix.fix.change.startswith("XLA_FLAGS=")
    text = bn.to_text()
    assert f"cause: compiler at fusion '{c.op_name}' ({c.line}): XLA contracted" in text
    assert bn.to_dict()["causes"][0]["kind"] == "compiler"


def test_sibling_products_cross_term_the_fma_keeps_exactly_the_products_rounding_error(xla_cases):
    cr, (a, b) = xla_cases[1], xla_cases[2]
    _needs_fma(cr)
    # Planted by construction: a*b - b*a. One FMA computes exact(a*b) - round(a*b) (or its negative).
    exact = a.astype(np.float64) * b.astype(np.float64)
    err = (exact - (a * b).astype(np.float64)).astype(np.float32)
    got = cr.modes["xla"].outputs[0]
    assert np.all((got == err) | (got == -err)) and np.any(err != 0)
    assert np.all(cr.modes["eager"].outputs[0] == 0)
    c = cr.cause
    assert c.kind == "compiler" and c.line == _line(cross, "return a * b - c * d")
    assert "subtract" in c.evidence["hlo"] or "add" in c.evidence["hlo"]
    assert c.fix.fix.status == "checked"


def test_grappler_arithmetic_optimizer_is_named_when_graph_mode_regroups_an_add_tree():
    cmp = tflab.compare_modes(addtree, tf.constant([0.1, 0.7, 1.3, 3.3]), modes=("graph",), repeats=1,
                              hlo=False, ulp_bound=0, atol=0.0)
    if not cmp.findings:
        pytest.skip("graph mode rounds this add tree as eager does here")
    c = cmp.cause
    assert c.kind == "compiler" and c.runs == "eager vs graph"
    assert c.evidence["found"]["setting"] == "arithmetic_optimization"
    assert c.fix.fix.status == "checked" and "bit for bit" in c.fix.fix.result
    assert "arithmetic_optimization': False" in c.fix.fix.change


def test_healthy_twin_runs_no_bisection_and_names_no_cause(monkeypatch):
    import tflab.modes.causes as causes

    def refuse(*a, **k):
        raise AssertionError("a bisection ran although the modes agree")

    monkeypatch.setattr(causes, "attribute_modes", refuse)
    cmp = tflab.compare_modes(healthy, tf.constant([0.1, 0.7, 1.3]), repeats=1, hlo=False)
    assert cmp.findings == () and cmp.causes == () and cmp.cause is None
    assert "cause:" not in cmp.to_text() and cmp.to_dict()["causes"] == []


def test_the_html_fragment_shows_the_cause_line(xla_cases):
    from tflab.report.html.lab import modes_fragment

    bn = xla_cases[0]
    _needs_fma(bn)
    html = modes_fragment(bn)
    assert 'class="cause"' in html and f"cause: compiler at fusion &#x27;{bn.cause.op_name}&#x27;" in html
