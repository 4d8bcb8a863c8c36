"""``tflab.lower(fn, path="graph")``: what a plain tf.function ran, from TF's own RunMetadata, tied to the user's lines.

One lowering of a small module (a MatMul+BiasAdd+Relu line, a Conv2D+BiasAdd+Relu
line the remapper also fuses, and a multiply it leaves alone) serves most tests.
Each check can fail: the op counts are compared with RunMetadata graphs TF
records for a second, independent tf.function of the same body; a wrong
fused-op mapping is planted; the remapper is turned off; the profile's events are
inflated past their bound; the kernel library follows this process's oneDNN setting.
"""

from __future__ import annotations

import collections
import importlib.util
import textwrap

import pytest

tf = pytest.importorskip("tensorflow")

import tflab  # noqa: E402
from tflab.lowering import GRAPH_STAGES  # noqa: E402

SOURCE = textwrap.dedent("""\
    import tensorflow as tf

    w = tf.Variable(tf.random.stateless_normal([32, 16], seed=[1, 2]))
    b = tf.Variable(tf.fill([16], 0.5))
    k = tf.Variable(tf.random.stateless_normal([3, 3, 4, 8], seed=[3, 4]))
    kb = tf.Variable(tf.fill([8], 0.25))


    def app(x, im):
        h = tf.nn.relu(tf.nn.bias_add(x @ w, b))
        c = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(im, k, 1, "SAME"), kb))
        out = h * 3.0
        return out, c
    """)
MATMUL_LINE, CONV_LINE, MUL_LINE = "graph_app.py:10", "graph_app.py:11", "graph_app.py:12"


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "graph_app.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("graph_app", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def inputs():
    return tf.ones([8, 32]), tf.ones([1, 6, 6, 4])


@pytest.fixture(scope="module")
def low(module, inputs):
    return tflab.lower(module.app, *inputs, path="graph", runs=5)


def _node(low, line, op_prefix="_Fused"):
    return next(n for n in low.nodes if line in n.source_lines and n.grappler_op.startswith(op_prefix))


def test_the_levels_are_the_graph_paths_and_each_was_produced(low):
    assert [s.name for s in low.stages] == list(GRAPH_STAGES) and low.path == "graph"
    assert all(s.why == "" and s.text for s in low.stages), [(s.name, s.why) for s in low.stages]


def test_op_counts_equal_tfs_own_runmetadata_graphs(module, inputs, low):
    """A second tf.function of the same body, its graphs read straight from RunMetadata: the same op counts."""
    from tflab._tf.run_metadata import function_graphs

    fn = tf.function(module.app)
    graphs = function_graphs(lambda: fn(*inputs))
    pre, post, parts = max(graphs, key=lambda g: len(g[0].node))
    count = lambda gdefs: dict(collections.Counter(n.op for g in gdefs for n in g.node))  # noqa: E731
    grappler, partition = low.stage("grappler").ops, low.stage("partition").ops
    # _Arg/_Retval differ in number between the two wrappers (the lowering returns a flat dict); compute ops do not.
    strip = lambda d: {k: v for k, v in d.items() if k not in ("_Arg", "_Retval", "Identity", "NoOp")}  # noqa: E731
    assert strip(grappler) == strip(count([post])) and strip(partition) == strip(count(parts))
    assert sum(grappler.values()) == len(low.nodes)  # one GraphNode per post-optimization node


def test_a_line_is_followed_to_the_fused_node_the_kernel_that_ran_and_its_time(low):
    from tflab._tf.runtime import onednn_enabled

    prov = low.provenance(MATMUL_LINE)
    assert any("= MatMul" in p for p in prov["funcgraph"])
    assert any("_FusedMatMul(fused_ops=BiasAdd,Relu)" in p for p in prov["grappler"])
    ran = "_MklNativeFusedMatMul" if onednn_enabled() else "_FusedMatMul"
    assert any(f"= {ran}" in p for p in prov["partition"]), prov["partition"]
    assert any(ran in p and "us/run" in p for p in prov["profile"])
    node = _node(low, MATMUL_LINE)
    assert node.replaced_types == ("MatMul", "BiasAdd", "Relu") and node.seconds > 0
    assert node.flops == 2 * 8 * 32 * 16 + 2 * 8 * 16 and node.provenance_problem == ""  # matmul, bias, relu


def test_a_sibling_fusion_a_convolution_maps_to_its_own_line(low):
    node = _node(low, CONV_LINE)
    assert node.grappler_op == "_FusedConv2D" and node.replaced_types == ("Conv2D", "BiasAdd", "Relu")
    assert node.source_lines == (CONV_LINE,) and node.flops >= 2 * 6 * 6 * 8 * 3 * 3 * 4


def test_a_healthy_twin_the_multiply_is_not_rewritten(low):
    prov = low.provenance(MUL_LINE)
    assert all("_Fused" not in p for level in ("grappler", "partition") for p in prov[level])
    mul = next(n for n in low.nodes if n.grappler_op == "Mul")
    assert mul.replaced == (mul.name,) and mul.op == "Mul" and mul.kernel == "TF (Eigen)"


def test_a_planted_wrong_fused_op_mapping_fails_the_provenance_check(module, inputs, monkeypatch):
    """The fused matmul's Relu handed to the multiply: check_fused names the missing op."""
    import tflab.lowering.graph as graph_mod
    from tflab._tf.run_metadata import function_graphs

    real = graph_mod.map_rewrites

    def planted(pre, post):
        mapping, removed = real(pre, post)
        fused = next(n for n in post.node if n.op == "_FusedMatMul").name
        mul = next(n for n in post.node if n.op == "Mul").name
        mapping[fused] = tuple(n for n in mapping[fused] if n != fused)
        mapping[mul] = mapping[mul] + (fused,)
        return mapping, removed

    fn = tf.function(module.app)
    pre, post, parts = max(function_graphs(lambda: fn(*inputs)), key=lambda g: len(g[0].node))
    healthy, _ = graph_mod.graph_nodes(pre, post, parts, {})
    assert all(n.provenance_problem == "" for n in healthy)
    monkeypatch.setattr(graph_mod, "map_rewrites", planted)
    nodes, _ = graph_mod.graph_nodes(pre, post, parts, {})
    bad = next(n for n in nodes if n.grappler_op == "_FusedMatMul")
    assert "fuses Relu" in bad.provenance_problem and "hold no Relu" in bad.provenance_problem


def test_remapper_effect_is_measured_and_with_remapping_off_the_fusion_is_gone(module, inputs, low):
    from tflab._tf.run_metadata import grappler_options

    effect = {e.name: e for e in low.optimizers}
    assert effect["remapping"].changed and effect["remapping"].added.get("_FusedMatMul") == 1
    assert effect["remapping"].removed.get("MatMul") == 1 and "+Relu = _FusedMatMul" in effect["remapping"].diff
    assert not effect["shape_optimization"].changed or effect["shape_optimization"].diff  # no empty "change"
    before = dict(tf.config.optimizer.get_experimental_options())  # other tests of the process may set some
    with grappler_options({"remapping": False}):
        off = tflab.lower(module.app, *inputs, path="graph", runs=1)
    grappler = off.stage("grappler")
    assert "_FusedMatMul" not in grappler.ops and "_FusedConv2D" not in grappler.ops
    assert grappler.ops["MatMul"] == 1 and "remapping=False" in grappler.note
    assert "remapping=False" in grappler.text.splitlines()[0]
    assert tf.config.optimizer.get_experimental_options() == before  # restored exactly


def test_the_profile_total_is_within_its_stated_bound_and_an_inflated_profile_is_not(module, inputs, low,
                                                                                      monkeypatch):
    p = low.profile
    assert p["runs"] == 5 and 0 < p["node_seconds"] <= p["wall_seconds"] * p["threads"] and p["within_bound"]
    assert sum(n.seconds for n in low.nodes) * p["runs"] == pytest.approx(p["node_seconds"], rel=1e-6)
    assert p["copy_gbps"] > 0 and "within the bound" in low.to_text()
    import tflab._tf.run_metadata as rm

    real = rm.kernel_events

    def inflated(call, runs):
        events, wall = real(call, runs)
        return [(n, o, s + 10 * wall, line) for n, o, s, line in events], wall

    monkeypatch.setattr(rm, "kernel_events", inflated)
    bad = tflab.lower(module.app, *inputs, path="graph", runs=1)
    assert not bad.profile["within_bound"] and "OUTSIDE the bound" in bad.to_text()


@pytest.mark.onednn
def test_the_kernel_library_follows_this_processs_onednn_setting(low):
    """oneDNN on: the runtime rewrote the fused matmul to oneDNN's kernel; off: TF's Eigen kernel ran it."""
    from tflab._tf.runtime import onednn_enabled

    node = _node(low, MATMUL_LINE)
    if onednn_enabled():
        assert node.op == "_MklNativeFusedMatMul" and node.kernel == "oneDNN"
    else:
        assert node.op == "_FusedMatMul" and node.kernel == "TF (Eigen)"
    assert node.grappler_op == "_FusedMatMul"  # Grappler's choice does not depend on it


def test_bad_path_and_runs_are_one_clear_error(module, inputs):
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match="path='graph'"):
        tflab.lower(module.app, *inputs, path="grappler")
    with pytest.raises(UsageError, match="runs=0"):
        tflab.lower(module.app, *inputs, path="graph", runs=0)


def test_the_tour_line_names_the_three_slowest_nodes_with_kernel_and_layer():
    """Step 6's graph-mode line, built directly on a small Keras model (the tour itself is not run)."""
    import keras

    from tflab._tf.runtime import onednn_enabled
    from tflab.lowering.tour import graph_top_line

    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu", name="hidden"),
                              keras.layers.Dense(4, name="head")])
    line = graph_top_line(lambda x: model(x, training=False), tf.ones([4, 16]), runs=2)
    assert line.startswith("graph mode, slowest nodes over 2 runs: ") and line.count(" us (") == 3, line
    kernel = "oneDNN" if onednn_enabled() else "TF (Eigen)"
    assert f"[{kernel}]" in line and "layer hidden" in line
