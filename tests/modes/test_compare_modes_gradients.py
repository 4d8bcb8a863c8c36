"""compare_modes' gradients (watched constants, stop_gradient, custom gradients) and the compare CLI.

Split from `test_compare_modes.py` (no test file over 600 lines); its helpers and fixtures are imported from there.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_compare_modes import (  # noqa: E402,F401  (helpers, fixtures and imports of the first part)
    json, os, np, pytest, tf, st, compare_modes, UsageError, ulp_distance, FNS, fns, X64, U, x64, dense_cmp,
    _softmax_bounds, _grads_by_mode, _tensor_while, _range_while,)


def test_watch_constant_or_get_none():
    x = tf.constant([1.0, -2.0])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(x * x)
    assert tape.gradient(y, x) is None  # constants are not watched
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(x * x)
    assert tape.gradient(y, x).numpy().tolist() == [2.0, -4.0]
    # compare_modes watches its arguments, so a constant argument gets 2x, not None, in each mode.
    assert _grads_by_mode(lambda x: tf.reduce_sum(x * x), x) == dict.fromkeys(("eager", "graph", "xla"),
                                                                                [2.0, -4.0])


def test_stop_gradient_blocks_one_path():
    x = tf.constant(4.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * tf.stop_gradient(x)  # d/dx treats the second factor as a constant
    assert float(tape.gradient(y, x)) == 4.0  # not 2x = 8
    # The same through compare_modes: x in each mode, not 2x (XLA keeps StopGradient's meaning).
    assert _grads_by_mode(lambda x: x * tf.stop_gradient(x), tf.constant([4.0, -1.5])) == dict.fromkeys(
        ("eager", "graph", "xla"), [4.0, -1.5])


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_custom_gradient_survives_tf_function_and_jit(mode):
    x = tf.constant([0.5, -2.0, 3.0])

    def grad_of(inp):
        with tf.GradientTape() as tape:
            tape.watch(inp)
            y = tf.reduce_sum(fns.scaled_clip(inp))
        return tape.gradient(y, inp)

    run = {"eager": grad_of, "graph": tf.function(grad_of),
           "xla": tf.function(grad_of, jit_compile=True)}[mode]
    # Upstream gradient is 5 per element; clip_grad clips it to 1, so the
    # gradient is 1, not 5, in every mode: XLA compiles the custom gradient too.
    assert run(x).numpy().tolist() == [1.0, 1.0, 1.0]


def test_custom_gradient_in_compare_modes():
    c = compare_modes(fns.scaled_clip, tf.TensorSpec([16]), repeats=1, hlo=False)
    for m in ("eager", "graph", "xla"):
        assert np.all(c.modes[m].gradients["arg:x"] == 1.0), f"{m}: clipped gradient"
    assert c.findings == ()


def test_cli_compare_json_and_hlo_file(run_cli, tmp_path):
    out_file = tmp_path / "hlo.txt"
    code, out, err = run_cli("compare", f"{FNS}:relu_chain", "--arg", "x=float32[64,128]",
                             "--seed", "3", "--repeats", "1", "--hlo", str(out_file), "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["fusion_count"] == 3 and payload["modes"]["graph"]["ulp"]["outputs"] == 0
    text = out_file.read_text()
    assert "// ===== stage: hlo =====\nHloModule" in text and "stage: optimized_hlo =====" in text
    code, _, err = run_cli("compare", f"{FNS}:relu_chain", "--arg", "x=float32[64,128]",
                           "--hlo", str(out_file))
    assert code == 2 and "exists; pass --force" in err


def test_cli_xla_failure_prints_report_then_one_line_exit_1(run_cli):
    """Eager ran, so the input was valid: XLA not compiling an op is a finding (exit 1), not
    bad input (exit 2)."""
    code, out, err = run_cli("compare", f"{FNS}:with_py_function", "--arg", "x=float32[8]", "--repeats", "1")
    assert code == 1
    assert "graph " in out and "error: XLA cannot compile EagerPyFunc" in out
    assert err.startswith("tflab compare: finding: with_py_function: xla failed: XLA cannot compile EagerPyFunc op")
    assert err.endswith("; eager and graph still compared\n") and err.count("\n") == 1


@pytest.mark.parametrize("argv, message", [
    (["--arg", "y=float32[8]"], "--arg y: the function takes no parameter 'y'"),
    (["--arg", "x=float32[None,8]"], "--arg x: shape [None, 8] has unknown dims; give every dim"),
    ([], "missing --arg x="),
], ids=["unknown-name", "unknown-dim", "missing"])
def test_cli_bad_args_exit_2(run_cli, argv, message):
    code, out, err = run_cli("compare", f"{FNS}:dense_tanh", *argv)
    assert code == 2 and out == ""
    assert err.startswith("tflab compare: error: " + message) and err.count("\n") == 1


def test_tour_steps_5_and_6_on_a_small_user_model(tmp_path, small_keras_file):
    from tflab.tour import run_tour

    report = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "tour"), quiet=True,
                      only=["s05_autograph", "s06_modes"])
    # Step 5: the clipping `if` on a tensor norm is an If op, the tf.range loop a
    # While op, and the SGD loop over 4 variables (2 kernels, 2 biases) unrolls 4×.
    st = report["autograph"]["statements"]
    assert [(s["kind"], s["op_type"], s["unrolled"]) for s in st] == [
        ("if", "StatelessIf", None), ("for", "StatelessWhile", None), ("for", None, 4)]
    # Step 6: the forward pass in graph mode is bit-identical to eager; XLA ran
    # and fused (at least the conv's bias+relu epilogue).
    fwd = report["modes"]["forward"]
    assert fwd["modes"]["graph"]["ulp"]["outputs"] == 0
    assert fwd["modes"]["xla"]["error"] is None and fwd["fusion_count"] >= 1
    # Its speed line names the TF CPU kernels eager and graph ran.
    assert report["modes"]["tf_cpu_kernels"] == ("oneDNN" if fwd["config"]["onednn_enabled"] else "Eigen")
    # Gradients cover the input and the 4 trainable variables.
    assert len(report["modes"]["gradients"]["gradient_names"]) == 5


@pytest.mark.parametrize("fn, var", [
    ("counter", "COUNTER"),       # trainable, assign_add each call
    ("moving_mean", "MOVING"),    # trainable=False: only the traced FuncGraph sees it
], ids=["counter", "non-trainable"])
def test_stateful_function_starts_each_mode_from_the_same_state(fn, var):
    v = getattr(fns, var)
    before = float(v.numpy())
    x = tf.constant([1.0, -2.0, 0.5, 4.0])
    c = compare_modes(getattr(fns, fn), x, repeats=3, hlo=False)
    # Every mode's first call starts from the saved state: counter gives x * 2
    # (1 + 1), the moving mean 0.5 * mean(x), in eager, graph and XLA alike.
    expected = (x * 2.0 if fn == "counter" else x - 0.5 * tf.reduce_mean(x)).numpy()
    for m in ("eager", "graph", "xla"):
        np.testing.assert_array_equal(c.modes[m].outputs[0], expected, err_msg=m)
    assert c.findings == () and c.modes["xla"].ulp.outputs == 0
    # 1 probe + 3 modes × (1 + 3 repeats) calls ran, yet the variable is as before.
    assert float(v.numpy()) == before
    assert c.variables_restored == (v.name,)


def test_mode_failing_inside_the_function_names_the_user_line(run_cli):
    c = compare_modes(fns.graph_only_bug, tf.TensorSpec([3]), repeats=1, hlo=False)
    err = c.modes["graph"].error
    # Not AutoGraph's "in user code:" preamble: the real error and the user's line.
    assert err.startswith("ValueError: graph-only bug (at ") and "fns.py:" in err
    assert "in user code" not in err and c.modes["xla"].error is not None
    code, out, err = run_cli("compare", f"{FNS}:graph_only_bug", "--arg", "x=float32[3]", "--repeats", "1")
    assert code == 2 and "finding: graph did not run: ValueError: graph-only bug" in out
    assert err.startswith("tflab compare: error: graph_only_bug: graph failed: ValueError: graph-only bug")
    assert err.endswith("; only eager ran\n") and err.count("\n") == 1


@pytest.mark.onednn
def test_headline_ulp_ignores_elements_below_atol():
    x = x64()
    p = fns.softmax_matmul(tf.constant(x)).numpy()  # eager: what compare_modes' eager gives
    out_bound, grad_bound = _softmax_bounds(x, p)
    atol = 2 * grad_bound  # every gradient element is below it in every mode (see above)
    c = compare_modes(fns.softmax_matmul, X64, repeats=1, hlo=False, atol=atol)
    x = c.modes["xla"]
    # The raw maxima count elements near 0 (the gradient's rounding noise, the
    # softmax's outputs near FLT_MIN), where ULP means nothing: on oneDNN one
    # output is 0 vs 2.3e-38 (16.7 M ULP), on Eigen a gradient element is
    # 4e-7 vs 0 (8.9e8 ULP). The headline counts only |value| > atol.
    assert x.ulp_above_atol.gradients == 0, "|gradient| <= bound < atol in every mode"
    assert x.ulp_above_atol.outputs <= x.ulp.outputs
    # Above atol, ULP(p) >= 2^-24·|p|, so the relative bound caps the ULP count.
    big = np.abs(p) > atol
    assert x.ulp_above_atol.outputs <= np.max(out_bound[big] / (np.abs(p[big]) * U))
    assert f"xla: out {x.ulp_above_atol.outputs} ULP, grad {x.ulp_above_atol.gradients} ULP" in repr(c)
    text = c.to_text()
    # (the ULP-columns footnote names the atol in use and the raw maxima)
    assert f"> atol {atol:g}" in text and "all elements (out / grad): xla" in text
    assert "the largest ULP distance over elements with |value| > atol" in text  # labelled worst
    assert str(int(x.ulp.gradients)) in text


def test_python_number_output_and_dict_output_names():
    # A Python number is the same value in every mode: "no findings" would be measured over nothing.
    with pytest.raises(UsageError, match=r"constant_three: nothing to compare across modes: it returns no tensor "
                                         r"\(float\)"):
        compare_modes(fns.constant_three, tf.TensorSpec([4]), repeats=1, hlo=False)
    d = compare_modes(fns.named_outputs, tf.TensorSpec([4]), repeats=1, hlo=False, modes=("graph",))
    assert d.output_names == ("output[double]", "output[sum]")  # tf.nest sorts dict keys
    assert set(d.modes["graph"].ulp_by_tensor) >= {"output[double]", "output[sum]"}
    assert d.to_text().endswith("no findings: graph within 4096 ULP or 1e-05 of eager")


def test_input_signature_is_checked_and_used(run_cli):
    c = compare_modes(fns.sig_fixed, repeats=1, hlo=False, modes=("graph",))
    assert c.modes["eager"].outputs[0].shape == (2,)  # from input_signature [2, 3]
    with pytest.raises(UsageError, match=r"sig_rows's input_signature has unknown \(None\) dims"):
        compare_modes(fns.sig_rows)
    with pytest.raises(UsageError, match=r"x does not match sig_rows's input_signature: "
                                         r"expected TensorSpec\(shape=\(None, 3\)"):
        compare_modes(fns.sig_rows, tf.TensorSpec([2, 4]))
    assert compare_modes(fns.sig_rows, tf.TensorSpec([5, 3]), repeats=1, hlo=False,
                         modes=("graph",)).modes["graph"].outputs[0].shape == (5,)
    code, out, err = run_cli("compare", f"{FNS}:sig_rows", "--arg", "x=float32[2,4]")
    assert code == 2 and out == "" and "x does not match sig_rows's input_signature" in err
    code, out, err = run_cli("compare", f"{FNS}:sig_fixed", "--repeats", "1")
    assert code == 0, err


def test_names_of_partial_keras_model_and_bad_targets():
    import functools

    import keras

    c = compare_modes(functools.partial(fns.with_seed, seed=2.0), tf.TensorSpec([3]),
                      repeats=1, hlo=False, modes=("graph",))
    assert c.function_name == "with_seed"
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    m = compare_modes(model, tf.TensorSpec([2, 3]), repeats=1, hlo=False, modes=("graph",))
    assert m.gradient_names[0] == "arg:inputs"  # Model.call's parameter, not *args
    with pytest.raises(UsageError, match="Scaler is a class; name an instance"):
        compare_modes(fns.Scaler, tf.TensorSpec([3]))
    with pytest.raises(UsageError, match="Scaler.scale is a method of class Scaler, not bound"):
        compare_modes(fns.Scaler.scale, tf.TensorSpec([3]))


@pytest.mark.parametrize("hlo_path, message", [
    ("{tmp}", "is a directory"),
    ("{tmp}/missing/h.txt", "does not exist"),
    ("{fns}/h.txt", "is a regular file, not a folder"),  # a file where a folder should be
], ids=["directory", "missing-folder", "file-as-folder"])
def test_cli_bad_hlo_path_fails_before_running(run_cli, tmp_path, hlo_path, message):
    path = hlo_path.format(tmp=tmp_path, fns=FNS)
    code, out, err = run_cli("compare", f"{FNS}:relu_chain", "--arg", "x=float32[4,4]",
                             "--hlo", path, "--force")
    assert code == 2 and out == ""  # nothing ran
    assert err.startswith(f"tflab compare: error: --hlo {path}: ") and message in err
    assert err.count("\n") == 1 and not os.path.exists(path + ".tmp")


def test_hlo_write_error_is_one_line_and_removes_the_tmp(tmp_path):
    from tflab._io.paths import output_path
    from tflab.commands.compare_cmd import _write_hlo

    target = tmp_path / "became_a_dir"
    out = output_path(target, "--hlo", overwrite=True)  # --force (_write_hlo writes through it)
    kept = output_path(target, "--hlo")  # no --force: the path is published only if still free
    (target / "inside").mkdir(parents=True)  # appears after the up-front check
    with pytest.raises(UsageError, match=r"--hlo .*became_a_dir: cannot write it: Is a directory"):
        _write_hlo({"hlo": "HloModule m"}, out)
    with pytest.raises(UsageError, match=r"--hlo .*became_a_dir already exists \(another run wrote it since"):
        _write_hlo({"hlo": "HloModule m"}, kept)
    assert os.listdir(tmp_path) == ["became_a_dir"]  # no temporary file left


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "argument --repeats: must be an integer >= 1, got 0"),
    (["--ulp-bound", "-1"], "argument --ulp-bound: must be an integer >= 0, got -1"),
    (["--atol=-1e-3"], "argument --atol: must be a finite number >= 0, got -1e-3"),
    (["--atol", "inf"], "argument --atol: must be a finite number >= 0, got inf"),  # inf is >= 0: say finite
], ids=["repeats", "ulp-bound", "atol", "atol-inf"])
def test_cli_option_ranges_exit_2(capsys, argv, message):
    from tflab.cli import main

    # argparse refuses the value before any TF work; main() returns 2 after one error line
    code = main(["compare", f"{FNS}:relu_chain", "--arg", "x=float32[4,4]", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"tflab compare: error: {message} (see tflab compare --help)\n"


def test_stateless_random_op_differs_only_under_xla():
    """Tf.random.stateless_uniform gives eager's numbers as a graph, XLA's own
    RNG lowering gives others: a different random stream, not an arithmetic difference."""
    c = compare_modes(fns.stateless_noise, tf.TensorSpec([8]), repeats=1, hlo=False)
    assert c.random_ops == {"output": ("StatelessRandomUniformV2",)}
    g, x = c.modes["graph"], c.modes["xla"]
    assert g.random_streams == () and g.ulp.overall == 0  # same kernel, same seed, same bits
    assert x.random_streams == ("output",) and x.ulp_by_tensor["output"] > 4096
    assert x.ulp.outputs == 0 and x.ulp_above_atol.outputs == 0
    assert c.findings == ()
    (note,) = c.notes
    assert note.startswith("xla: output is a different random stream under XLA (not arithmetic): "
                           "it depends on StatelessRandomUniformV2")
    assert "pass the noise in as an argument" in note
    text = c.to_text()
    assert "random stream: xla: output" in text and text.endswith("(random streams left out, above)")
    # The advice works: the same noise passed in gives XLA's arithmetic only.
    noise = tf.random.stateless_uniform([8], seed=[1, 2])
    d = compare_modes(fns.noise_as_argument, tf.TensorSpec([8]), noise, repeats=1, hlo=False)
    assert d.random_ops == {} and d.notes == () and d.modes["xla"].ulp.overall == 0


def test_keras_dropout_mask_is_a_random_stream_under_xla():
    import keras

    layer = keras.layers.Dropout(0.5, seed=3)

    def dropout(x):
        return layer(x, training=True) * 3.0

    c = compare_modes(dropout, tf.TensorSpec([4, 8]), repeats=1, hlo=False)
    # Keras draws the mask with stateless ops from a SeedGenerator variable, which
    # compare_modes restores before each mode: graph mode draws eager's mask.
    assert c.modes["graph"].ulp.overall == 0 and c.modes["graph"].random_streams == ()
    # The output and its gradient wrt x (the mask over the keep rate) both depend on it.
    assert set(c.random_ops) == {"output", "arg:x"}
    assert all("StatelessRandomUniformV2" in ops for ops in c.random_ops.values())
    assert set(c.modes["xla"].random_streams) == {"output", "arg:x"}
    assert c.findings == () and c.modes["xla"].ulp.overall == 0


def test_random_dependencies_follow_data_flow_into_loops_not_through_shapes():
    from tflab.modes import random_dependencies

    def f(x):
        seeds = tf.constant([4, 2])
        noise = tf.random.stateless_normal([3], seed=seeds)
        plain = x * 2.0
        shaped = tf.ones(tf.shape(noise))  # reads only the noise's shape

        def body(i, acc):
            return i + 1, acc + tf.random.uniform([3])

        _, looped = tf.while_loop(lambda i, acc: i < 2, body, (0, x))
        called = x + inner()  # a nested tf.function: a PartitionedCall of its function
        return plain, shaped, noise, looped, called

    inner = tf.function(lambda: tf.random.stateless_uniform([3], seed=[1, 1]))
    cf = tf.function(f).get_concrete_function(tf.TensorSpec([3]))
    got = random_dependencies(cf.graph, tf.nest.flatten(cf.structured_outputs))
    assert got == [(), (), ("StatelessRandomNormalV2",), ("RandomUniform",), ("StatelessRandomUniformV2",)]


def test_finding_labels_its_two_worst_elements():
    """The element with the largest |diff| and the one with the largest ULP
    distance are different elements here; each number says which worst it is."""
    from tflab.modes.findings import mode_findings
    from tflab.modes import ModeResult

    eager = np.array([1.0, 1e-6, 0.5], np.float32)
    other = np.array([1.001, 3e-6, 0.5], np.float32)
    u = ulp_distance(eager, other)
    assert u[1] > u[0]  # near zero, 2e-6 is more ULP than 1e-3 at 1.0
    r = ModeResult("graph", (other,), {}, None, None, 0.1, 0.1, ulp_by_tensor={"output": float(u.max())})
    (finding,) = mode_findings({"graph": r}, ((eager,), {}), 0, 0.0, ["output"])
    assert finding == (f"graph: 2 element(s) of output differ from eager by more than 0 ULP and 0; "
                       f"largest |diff| 0.001 ({int(u[0])} ULP) at flat index 0; "
                       f"largest ULP {int(u[1])} (|diff| 2e-06) at flat index 1")
    # One element worst both ways: one label for both.
    import dataclasses

    both = dataclasses.replace(r, outputs=(np.array([1.5, 1e-6, 0.5], np.float32),))
    (finding,) = mode_findings({"graph": both}, ((eager,), {}), 0, 0.0, ["output"])
    assert finding.endswith(f"largest |diff| and largest ULP: 0.5 ({int(ulp_distance(eager, both.outputs[0])[0])} "
                            f"ULP) at flat index 0")


def test_xla_gradient_of_a_while_loop_without_maximum_iterations_is_named_as_such():
    """TF's error speaks of a TensorArray the code does not have; the cause is the loop's gradient."""
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    m = compare_modes(_tensor_while, x, repeats=1, hlo=False, modes=("eager", "xla"))
    err = m.modes["xla"].error
    assert err.startswith("XLA cannot compile the gradient of a while loop without maximum_iterations"), err
    assert "/accumulator'" in err and "tf.range(n)" in err and "gradients=False" in err
    # Each fix it names works: forward only, and the tf.range form with gradients.
    assert compare_modes(_tensor_while, x, repeats=1, hlo=False, modes=("eager", "xla"),
                         gradients=False).modes["xla"].error is None
    fixed = compare_modes(_range_while, x, repeats=1, hlo=False, modes=("eager", "xla")).modes["xla"]
    assert fixed.error is None and len(fixed.gradients) == 1


def test_unnamed_variables_each_keep_their_gradient():
    """TF names every unnamed tf.Variable ``Variable:0``: as report keys the second hid the first's
    gradient (compare showed 2 of 3 sources, and the worst gradient's error was left out)."""
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 7.0)
    b = tf.Variable(np.ones(3, np.float32))

    def block(x):
        return tf.tanh(tf.matmul(x, w) + b)

    c = compare_modes(block, tf.TensorSpec([2, 4]), repeats=1, hlo=False)
    names = c.gradient_names
    assert list(names) == ["arg:x", "var:Variable:0", "var:Variable:0#2"], names
    grads = c.modes["eager"].gradients
    assert set(grads) == set(names)
    assert grads["var:Variable:0"].shape == (4, 3) and grads["var:Variable:0#2"].shape == (3,)
    x = c.modes["graph"]
    assert set(x.ulp_by_tensor) >= {"var:Variable:0", "var:Variable:0#2"}


def test_variable_labels_number_repeats_after_the_arguments():
    from tflab._api.labels import variable_labels

    class V:
        def __init__(self, name):
            self.name = name

    assert variable_labels([V("a"), V("a"), V("b"), V("a")], taken=["arg:x"]) == [
        "var:a", "var:a#2", "var:b", "var:a#3"]
    assert variable_labels([V("x")], taken=["var:x"]) == ["var:x#2"]
