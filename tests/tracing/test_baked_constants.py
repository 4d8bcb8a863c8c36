"""NumPy data baked into a FuncGraph as Const ops is counted in bytes.

Row: (pymc-devs/pymc4#312, "Cannot create a tensor proto whose content is
larger than 2GB"): ``tf.cast(X.T, tf.float32)`` with a NumPy ``X`` of 20000 x 50 float64 makes a
``Cast/x`` Const of 8,000,000 bytes; without the fix, tflab said "eager tensors: none" and gave no size.
The sizes are read from the FuncGraph's ops; the test measures them independently from the
serialized GraphDef. Byte counts are dtype sizes times element counts, the same on every CPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tflab import trace_and_inspect
from tflab._user.target import load_module
from tflab.diagnosis.baked import LARGE_CONST_BYTES, baked_constants

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "diagnose", "baked_cases.py")
B = load_module(CASES)
LINES = open(CASES).read().splitlines()
S = tf.TensorSpec


def graphdef_const_bytes(graph) -> int:
    """Bytes of tensor_content in the Const nodes of the serialized GraphDef (the test's own count)."""
    return sum(len(n.attr["value"].tensor.tensor_content) for n in graph.as_graph_def().node if n.op == "Const")


def test_312_the_baked_dataset_is_sized_named_and_placed():
    r = trace_and_inspect(B.logp, S([50]))
    (c,) = r.constants
    assert (c.name, c.dtype, c.shape, c.bytes) == ("Cast/x", "float64", [50, 20000], 50 * 20000 * 8)
    assert c.bytes == graphdef_const_bytes(r.func_graph)  # what the GraphDef itself holds
    line = next(i + 1 for i, ln in enumerate(LINES) if ln.endswith("# culprit"))
    assert c.where == f"baked_cases.py:{line}" and c.statement == "xt = tf.cast(X.T, tf.float32)"
    assert "8.0 MB of data baked into the GraphDef as Const ops (GraphDef limit 2 GB)" in repr(r)
    text = r.to_text(max_ops=0)
    assert "Const Cast/x: float64[50, 20000], 8,000,000 bytes baked into the GraphDef at baked_cases.py" in text
    assert r.to_dict()["constants"][0]["bytes"] == 8_000_000 and r.to_dict()["const_bytes"] >= 8_000_000


def test_312_the_fix_is_run_the_array_passed_as_an_argument_leaves_no_large_const():
    r = trace_and_inspect(B.logp, S([50]))
    fix = r.constants_fix
    assert fix.checked, fix.line()
    assert fix.measured["const_bytes_before"] == 8_000_000 and fix.measured["const_bytes_after"] < 1024
    assert "X.T passed as an argument: 0 bytes of large Const data left (was 8,000,000)" in fix.result
    assert "outputs equal eager's on your 1 call" in fix.result
    assert fix.line() in r.to_text(max_ops=0)
    # The test's own check: run the rewritten source, trace it with the data as a TensorSpec.
    ns = dict(vars(B))
    exec(compile(fix.source, "<fixed logp>", "exec"), ns)
    cf = tf.function(ns["logp"]).get_concrete_function(S([50]), x_t=S([50, 20000], tf.float64))
    assert graphdef_const_bytes(cf.graph) == 0
    beta = tf.constant(np.linspace(-1, 1, 50), tf.float32)
    np.testing.assert_allclose(cf(beta, x_t=tf.constant(B.X.T)).numpy(),
                               tf.function(B.logp)(beta).numpy(), rtol=1e-6)


def test_healthy_the_data_as_an_argument_bakes_nothing():
    r = trace_and_inspect(B.logp_arg, S([50]), S([20000, 50], tf.float64))
    assert r.constants == () and r.constants_fix is None
    assert "baked into the GraphDef" not in repr(r) and "Const data" not in r.to_text()
    assert r.const_bytes < 1024 and graphdef_const_bytes(r.func_graph) < 1024


def test_a_small_numpy_constant_is_counted_but_not_named():
    r = trace_and_inspect(B.small_const, S([50]))
    assert r.constants == () and r.const_bytes >= 50 * 8  # SMALL: 400 bytes of float64


@pytest.mark.parametrize("n,named", [(LARGE_CONST_BYTES // 4, True), (LARGE_CONST_BYTES // 4 - 1, False)])
def test_the_size_threshold_is_a_real_boundary(n, named):
    """Planted: a float32 array one element under and exactly at the threshold."""
    data = np.ones(n, np.float32)

    def f(x):
        return x + tf.reduce_sum(tf.constant(data))

    graph = tf.function(f).get_concrete_function(S([])).graph
    total, big = baked_constants(graph)
    assert total >= n * 4 and bool(big) == named


def test_a_baked_array_tflab_cannot_name_is_not_claimed_fixed():
    """Planted: the array is built inside the function by a NumPy call, so there is no Python
    value to pass instead: the fix says not checked, and why."""

    def made_inside(x):
        return x + tf.reduce_sum(tf.constant(np.ones((200, 100), np.float32)))

    r = trace_and_inspect(made_inside, S([]))
    assert r.constants and r.constants[0].bytes == 80_000
    assert r.constants_fix.status == "not checked" and "found no NumPy value" in r.constants_fix.why


def test_a_branch_funcgraph_const_is_counted_too():
    data = np.ones(20000, np.float32)

    def f(x):
        if tf.reduce_sum(x) > 0:
            x = x + tf.reduce_sum(tf.constant(data))
        return x

    total, big = baked_constants(tf.function(f).get_concrete_function(S([3])).graph)
    assert [c.bytes for c in big] == [80_000]
