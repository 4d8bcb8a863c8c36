"""Lab step 1: trace_and_inspect reads a ConcreteFunction's FuncGraph.

Every number here was measured on tensorflow 2.21.0 (CPU).
"""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest
import tensorflow as tf

from tflab import TraceReport, trace_and_inspect
from tflab.errors import UsageError
from tflab.tracing import TraceError

SPEC8 = tf.TensorSpec([None, 8], tf.float32)


def test_ops_counts_and_signature_of_a_dense_layer():
    w = tf.Variable(tf.ones([8, 4]), name="w")

    def dense(x, n):
        y = tf.nn.relu(x @ w)
        for _ in range(n):  # Python loop over a Python int: unrolled at trace time
            y = y * 2.0
        return {"y": y, "total": tf.reduce_sum(y)}

    r = trace_and_inspect(dense, SPEC8, 3)
    assert isinstance(r, TraceReport)
    assert r.func_graph is r.concrete_function.graph
    # One MatMul and Relu; range(3) unrolled into exactly three Mul ops.
    assert r.op_counts["MatMul"] == 1 and r.op_counts["Relu"] == 1
    assert r.op_counts["Mul"] == 3
    assert sum(r.op_counts.values()) == len(r.ops)
    matmul = next(o for o in r.ops if o.type == "MatMul")
    assert matmul.inputs == ("x:0", "matmul/ReadVariableOp:0")
    assert matmul.outputs == (("matmul:0", "float32", [None, 4]),)
    # The Python int is part of the FunctionType as a Literal; the tensor as its TensorSpec.
    assert "n: Literal[3]" in r.function_type
    args, kwargs = r.structured_input_signature
    assert args[0] == tf.TensorSpec([None, 8], tf.float32, name="x") and args[1] == 3 and kwargs == {}
    assert r.output_spec == {"y": tf.TensorSpec([None, 4], tf.float32),
                             "total": tf.TensorSpec([], tf.float32)}
    assert "dense(x: float32[None,8], n=3)" in repr(r)


def test_captures_split_variables_and_tensors_with_bytes():
    w = tf.Variable(tf.ones([8, 4]), name="w")
    small = tf.constant(np.ones(128, np.float32))   # 128 elements: at the threshold
    large = tf.constant(np.ones(129, np.float32))   # 129 elements: above it

    def f(x):
        return x @ w + tf.reduce_sum(small) + tf.reduce_sum(large)

    r = trace_and_inspect(f, SPEC8)
    (var,) = r.variables
    assert (var.name, var.dtype, var.shape, var.bytes) == ("w:0", "float32", [8, 4], 8 * 4 * 4)
    assert var.internal_op_type == "Placeholder"  # a resource handle fed at call time
    tensors = sorted(r.captured_tensors, key=lambda c: c.bytes)
    # capture_container.py's _EAGER_CONST_THRESHOLD = 128 elements: up to it the
    # value is baked into the GraphDef as a Const, above it it is fed at call time.
    assert [(c.internal_op_type, c.bytes, c.baked_bytes) for c in tensors] == [
        ("Const", 512, 512), ("Placeholder", 516, 0)]
    assert r.baked_bytes == 512


def test_control_flow_ops_stateless_and_stateful():
    v = tf.Variable(0.0)

    def f(x, py_flag):
        y = x
        if py_flag:                      # Python bool: decided at trace time, no op
            y = y + 1.0
        if tf.reduce_sum(x) > 0:         # tensor condition, pure branches: StatelessIf
            y = y * 2.0
        for _ in tf.range(3):            # tf.range: StatelessWhile
            y = y + 1.0
        if tf.reduce_sum(x) > 10:        # a branch that assigns a variable: stateful If
            v.assign_add(1.0)
        return y

    r = trace_and_inspect(f, SPEC8, True)
    assert [o.type for o in r.control_flow] == ["StatelessIf", "StatelessWhile", "If"]
    stateless_if = r.control_flow[0]
    assert len(stateless_if.functions) == 2  # then_branch, else_branch FuncGraphs
    assert len(r.control_flow[1].functions) == 2  # cond, body


def test_tf_function_keeps_its_input_signature_and_mismatch_is_one_error():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def f(x):
        return x + 1

    r = trace_and_inspect(f, tf.constant([1, 2, 3]))
    assert r.structured_input_signature[0][0].shape.as_list() == [None]  # the signature, not the value's [3]
    with pytest.raises(UsageError, match="does not match f's signature"):
        trace_and_inspect(f, tf.constant([1.0, 2.0]))


def test_bad_input_errors():
    with pytest.raises(UsageError, match="expected a function"):
        trace_and_inspect(42, SPEC8)

    def broken(x):
        return x @ tf.ones([3, 3])

    with pytest.raises(TraceError) as info:
        trace_and_inspect(broken, SPEC8)
    msg = str(info.value)
    assert "Dimensions must be equal, but are 8 and 3" in msg
    assert "test_trace_and_inspect.py" in msg and "in broken" in msg  # the user's frame
    assert "\n" not in msg


def test_dot_has_nodes_edges_and_shapes():
    w = tf.Variable(tf.ones([8, 4]))
    r = trace_and_inspect(lambda x: tf.nn.relu(x @ w), SPEC8)
    dot = r.to_dot()
    assert dot.startswith("digraph")
    assert "x -> matmul" in dot and 'label="float32[None,8]"' in dot
    assert "matmul -> Relu" in dot or "matmul -> relu" in dot.lower()
    text = r.to_text()
    assert "1 variables (128 bytes" in text and "MatMul" in text


@pytest.mark.tflab_max_traces(1)  # measured: serve traces once (~6 s on 2 cores)
def test_tour_model_inference_graph(tour_model):
    def serve(x):
        return tour_model(x, training=False)

    r = trace_and_inspect(serve, tf.TensorSpec([None, 96, 96, 3], tf.float32))
    # Every weight of the model (trainable and BatchNorm statistics) is captured.
    assert len(r.variables) == len(tour_model.weights)
    assert sum(c.bytes for c in r.variables) == sum(int(np.prod(w.shape)) * 4 for w in tour_model.weights)
    convs = [layer for layer in tour_model.layers if type(layer).__name__ == "Conv2D"]
    assert r.op_counts["Conv2D"] == len(convs)
    assert r.output_spec == tf.TensorSpec([None, 10], tf.float32)


def test_cli_inspect_text_json_and_dot(run_cli, tmp_path):
    dot = tmp_path / "g.dot"
    code, out, err = run_cli("inspect", "tests/data/user_fns.py:dense", "--arg", "x=float32[None,8]",
                             "--arg", "n=3", "--dot", str(dot))
    assert code == 0, err
    assert "Mul×3" in out and "n=3" in out
    assert dot.read_text().startswith("digraph")
    code, out, _ = run_cli("inspect", "tests/data/user_fns.py:branchy", "--arg", "x=float32[4]", "--json")
    data = json.loads(out)
    assert code == 0 and data["op_counts"]["StatelessIf"] == 1
    assert data["input_signature"]["args"][0] == {"shape": [4], "dtype": "float32", "name": "x"}


@pytest.mark.parametrize("argv, message", [
    (["missing.py:f"], "does not exist"),
    (["tests/data/user_fns.py:nope"], "has no 'nope'; callables defined there: branchy, broken, dense"),
    (["tests/data/user_fns.py:NOT_A_FUNCTION"], "is an int, not a function"),
    (["tests/data/user_fns.py:dense", "--arg", "y=3"], "takes no parameter 'y'"),
    (["tests/data/user_fns.py:dense", "--arg", "x=flot32[3]"], "not a TensorSpec"),
    (["tests/data/user_fns.py:dense"], "missing --arg x="),
    (["tests/data/user_fns.py:broken", "--arg", "x=float32[None,8]"], "user_fns.py:23 in broken"),
], ids=["missing-file", "missing-name", "not-callable", "unknown-param", "bad-dtype", "missing-arg",
        "raises-while-tracing"])
def test_cli_bad_input_one_line_exit_2(run_cli, argv, message):
    code, out, err = run_cli("inspect", *argv)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_concrete_function_is_inspected_as_is_and_missing_argument_is_named():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def signed(x):
        return x * 2.0

    r = trace_and_inspect(signed.get_concrete_function())
    assert isinstance(r.function_name, str) and "signed" in r.function_name
    assert r.op_counts["Mul"] == 1
    with pytest.raises(UsageError, match="already traced"):
        trace_and_inspect(signed.get_concrete_function(), tf.ones([2]))
    with pytest.raises(UsageError, match="needs argument 'x'"):
        trace_and_inspect(lambda x: x)


def test_cli_inspect_unwritable_dot_paths(run_cli, tmp_path):
    for target, message in [(tmp_path, "is a directory"), (tmp_path / "no" / "g.dot", "does not exist")]:
        code, out, err = run_cli("inspect", "tests/data/user_fns.py:dense", "--arg", "x=float32[None,8]",
                                 "--dot", str(target))
        assert code == 2 and message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_cli_inspect_module_that_exits_on_import(run_cli, tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    code, out, err = run_cli("inspect", f"{script}:f")
    assert code == 2 and "called sys.exit(3)" in err and err.count("\n") == 1


class _ScaledModule(tf.Module):
    def __init__(self):
        self.w = tf.Variable([2.0, 3.0, 4.0])

    @tf.function
    def __call__(self, x):
        return x * self.w


def test_a_module_whose_call_is_a_tf_function_is_traced_as_itself_not_wrapped():
    """It reported a wrapper FuncGraph holding one StatefulPartitionedCall, not the module's ops."""
    module = _ScaledModule()
    r = trace_and_inspect(module, tf.TensorSpec([3]))
    own = module.__call__.get_concrete_function(tf.TensorSpec([3])).graph.get_operations()
    assert r.op_counts == dict(collections.Counter(op.type for op in own).most_common())
    assert "StatefulPartitionedCall" not in r.op_counts and r.op_counts["Mul"] == 1
    assert [c.name for c in r.variables] == [module.w.name]


@pytest.mark.slow
def test_tour_model_output_depends_on_its_input(tour_model):
    """Freshly initialized MobileNetV3Small gave softmax exactly 0.1 everywhere (logits ~1e-10),
    so every tour comparison compared a constant; its BatchNorm statistics are now calibrated."""
    from tflab.models import example_batch, model_input_spec

    spec = model_input_spec(tour_model)
    a = tour_model(example_batch(spec, 2, seed=1), training=False).numpy()
    b = tour_model(example_batch(spec, 2, seed=2), training=False).numpy()
    assert not np.array_equal(a, b)
    assert np.abs(a - np.float32(0.1)).max() > 1e-3  # not the uniform distribution
    np.testing.assert_allclose(a.sum(axis=1), 1.0, rtol=1e-5)


def test_a_missing_name_lists_the_models_the_file_built_and_the_closest(tmp_path):
    """A Keras model built at a file's top level has keras' ``__module__``: the list said "none" for a
    file of four models. It names them (not what the file imported), and the closest to the name given."""
    from tflab._user.target import load_target
    from tflab.errors import UsageError

    (tmp_path / "zoo.py").write_text(
        "import numpy as np\nimport keras\nfrom keras import layers\n"
        "def build():\n    return keras.Sequential([layers.Dense(2)])\n"
        "twohead = keras.Sequential([keras.Input((3,)), layers.Dense(2)])\n"
        "cnn = keras.Sequential([keras.Input((8, 8, 1)), layers.Conv2D(2, 3)])\n")
    with pytest.raises(UsageError) as e:
        load_target(f"{tmp_path / 'zoo.py'}:twohaed")
    msg = str(e.value)
    assert "has no 'twohaed' (did you mean 'twohead'?); callables defined there: build, cnn, twohead" in msg, msg
    assert "np" not in msg.split("there:")[1] and "layers" not in msg.split("there:")[1]
