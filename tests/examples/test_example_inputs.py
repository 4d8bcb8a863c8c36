"""Real inputs for every verb: ``--examples FILE.npz`` (CLI) and ``examples=`` (API) go through one
binder, `tflab.examples.example_inputs`; a function that fails on the inputs tflab drew quotes TF's
own uncaught error, its op and layer, and the ``--examples`` hint.

The handed case is a Keras ``Embedding(2, 4)``: tflab's random ints are uniform in [0, 10). The
sibling is ``tf.gather_nd`` on a 3-row table (another op, another message); the healthy twin an
``Embedding(100, 4)``, which every int in [0, 10) fits.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tflab  # noqa: E402
from tflab._graph.failures import innermost_error  # noqa: E402
from tflab.errors import UsageError  # noqa: E402
from tflab.examples import example_inputs  # noqa: E402

FNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "examples_fns.py")
IDS = np.array([[0, 1, 1], [1, 0, 1]], np.int32)
FAST = ("--no-grad", "--repeats", "1", "--no-cause")


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    d = tmp_path_factory.mktemp("examples")
    np.savez(d / "ids.npz", ids=IDS)
    np.savez(d / "x.npz", x=np.array([[1.0, -2.0, 0.5]], np.float32))
    np.savez(d / "bad_name.npz", tokens=IDS)
    (d / "not.npz").write_text("x,y\n1,2\n")
    return d


@pytest.fixture(scope="module")
def fns():
    from tflab._user.target import load_module

    return load_module(FNS)


# ------------------------------------------------------------------ the innermost uncaught error


def test_a_context_that_was_handled_is_not_the_error():
    """``raise X`` inside ``except Y``: Y was handled (tf.gather's sparse_read probe); X is the error."""
    try:
        try:
            raise AttributeError("'Variable' object has no attribute 'sparse_read'")
        except AttributeError:
            raise ValueError("indices[0,0] = 6 is not in [0, 2)")
    except ValueError as e:
        assert innermost_error(e) == "ValueError: indices[0,0] = 6 is not in [0, 2)"
    try:  # healthy twin: ``raise X from Y`` names Y as the direct cause, which is followed
        try:
            raise KeyError("row 6")
        except KeyError as inner:
            raise RuntimeError("lookup failed") from inner
    except RuntimeError as e:
        assert innermost_error(e) == "KeyError: 'row 6'"


@pytest.mark.parametrize("fn, arg, said, op", [
    ("emb", "ids=int32[2,3]", "is not in [0, 2)", "in op GatherV2 (layer "),
    ("gather_rows", "idx=int32[2,3]", "does not index into param shape [3,4]", "in op GatherNd"),
], ids=["embedding-handed", "gather_nd-sibling"])
def test_drawn_ints_that_break_the_model_quote_tf_its_op_and_the_examples_hint(run_cli, fn, arg, said, op):
    code, out, err = run_cli("compare", f"{FNS}:{fn}", "--arg", arg, *FAST)
    line = err.strip().splitlines()[-1]
    assert code == 2 and "sparse_read" not in line and "AttributeError" not in line
    assert "InvalidArgumentError: " in line and said in line and op in line
    assert f"--arg {arg.split('=')[0]} int32[2,3] (ints in [0, 10))" in line and "--examples FILE.npz" in line


def test_a_python_error_in_the_function_is_not_blamed_on_the_drawn_values():
    from tflab._user.usercode import input_error

    line = input_error(TypeError("unsupported operand type(s) for +: 'Tensor' and 'str'"),
                       ["--arg x float32[2] (standard normal)"])
    assert line == "TypeError: unsupported operand type(s) for +: 'Tensor' and 'str'"


def test_healthy_twin_runs_on_drawn_ints(run_cli):
    code, out, err = run_cli("compare", f"{FNS}:healthy", "--arg", "ids=int32[2,3]", *FAST)
    assert code == 0, err


# ------------------------------------------------------------------ every verb honours --examples


def test_compare_runs_on_the_examples(run_cli, npz, fns):
    code, out, err = run_cli("compare", f"{FNS}:emb", "--examples", str(npz / "ids.npz"), *FAST)
    assert code == 0, err  # drawn ints fail this function (above): the file's ids were used
    api = tflab.compare_modes(fns.emb, examples=str(npz / "ids.npz"), gradients=False, repeats=1,
                              attribute=False, hlo=False)
    np.testing.assert_array_equal(api.modes["eager"].outputs[0], fns.small(IDS).numpy())
    # An Examples value (what save_and_reload hands on) is taken as every other API takes it: its first batch.
    ex = tflab.Examples.of({"ids": IDS})
    from_examples = tflab.compare_modes(fns.emb, examples=ex, gradients=False, repeats=1, attribute=False, hlo=False)
    np.testing.assert_array_equal(from_examples.modes["eager"].outputs[0], api.modes["eager"].outputs[0])


def test_precision_runs_on_the_examples(run_cli, npz, fns):
    code, out, err = run_cli("precision", f"{FNS}:scaled", "--examples", str(npz / "x.npz"),
                             "--policies", "float32", "--json")
    assert code == 0, err
    r = tflab.compare_precisions(fns.emb, examples={"ids": IDS}, policies="float32")
    np.testing.assert_array_equal(r.policies["float32"].outputs[next(iter(r.policies["float32"].outputs))],
                                  fns.small(IDS).numpy())


def test_diagnose_runs_on_the_examples(run_cli, npz):
    drawn = run_cli("diagnose", f"{FNS}:emb", "--arg", "ids=int32[2,3]")
    assert drawn[0] == 1 and "--examples FILE.npz" in drawn[1] and "drawn for ids" in drawn[1]
    code, out, err = run_cli("diagnose", f"{FNS}:emb", "--examples", str(npz / "ids.npz"))
    assert code == 0 and "ok (traced and ran once)" in out, out + err


def test_inspect_traces_the_examples_shape_and_dtype(run_cli, npz):
    code, out, err = run_cli("inspect", f"{FNS}:emb", "--examples", str(npz / "ids.npz"))
    assert code == 0, err
    assert "inputs:  (ids: int32[2,3])" in out  # no --arg: the file's array is the only source of it


def test_lower_is_handed_the_examples(run_cli, npz, monkeypatch):
    """lower compiles in a child process (seconds): the verb's hand-over is what is checked here."""
    import tflab.lowering as lowering

    seen = {}

    def fake_lower(fn, *args, **kwargs):
        seen.update(kwargs)
        raise UsageError("stop: inputs seen")

    monkeypatch.setattr(lowering, "lower", fake_lower)
    code, out, err = run_cli("lower", f"{FNS}:emb", "--examples", str(npz / "ids.npz"))
    assert code == 2 and "stop: inputs seen" in err
    np.testing.assert_array_equal(seen["ids"].numpy(), IDS)


def test_export_reads_the_examples_through_the_same_reader(npz):
    from tflab.examples import load_examples

    (batch,) = load_examples(str(npz / "ids.npz"))
    np.testing.assert_array_equal(batch["ids"], IDS)


# ------------------------------------------------------------------ bad examples: one line each


def test_bad_examples_are_one_line_each(npz, fns):
    with pytest.raises(UsageError, match=r"array\(s\) 'tokens' name no parameter of pair; its parameters are \(a, b\)"):
        example_inputs(fns.pair, str(npz / "bad_name.npz"))
    with pytest.raises(UsageError, match=r"'ids' is int32\[2, 3\], but --arg ids says float32"):
        example_inputs(fns.emb, str(npz / "ids.npz"), {"ids": tf.TensorSpec([2, 3], tf.float32, name="ids")})
    with pytest.raises(UsageError, match="give the other arguments by keyword"):
        tflab.trace_and_inspect(fns.scaled, 1.0, examples={"x": np.ones(2, np.float32)})
    # healthy twin: a spec that describes the array, and a Python value for the other parameter
    args, kwargs = example_inputs(fns.scaled, str(npz / "x.npz"), {"factor": 2.0})
    assert kwargs["factor"] == 2.0 and kwargs["x"].shape == (1, 3)


# ------------------------------------------------------------------ an array's name is its parameter's


def test_an_array_named_after_no_parameter_is_refused_not_bound_to_the_only_one(npz, fns):
    """``tokens`` for ``emb(ids)`` was bound to ``ids`` without a word: refused, naming the array and
    the parameter expected."""
    with pytest.raises(UsageError, match=r"array\(s\) 'tokens' name no parameter of emb; its parameters are "
                                         r"\(ids\), expected: 'ids'.*np.savez\(path, ids=array\)"):
        example_inputs(fns.emb, str(npz / "bad_name.npz"))
    # sibling: another name (a SignatureDef's keras_tensor) for another one-parameter function, through
    # the API's examples= dict, and with a default parameter beside it
    with pytest.raises(UsageError, match=r"'keras_tensor' name no parameter of scaled; its parameters are "
                                         r"\(x, factor\), expected: 'x', 'factor'"):
        example_inputs(fns.scaled, {"keras_tensor": np.ones((1, 3), np.float32)}, flag="examples=")


def test_numpy_default_name_feeds_only_a_function_with_one_parameter_to_feed(fns):
    """``np.savez(path, array)`` names the array ``arr_0``: it feeds the one parameter left to feed
    (a default or an ``--arg`` leaves the others), never one of two."""
    assert example_inputs(fns.emb, {"arr_0": IDS})[1]["ids"].shape == (2, 3)
    assert example_inputs(fns.pair, {"arr_0": IDS}, {"b": 1})[1]["a"].shape == (2, 3)  # b given by --arg
    with pytest.raises(UsageError, match=r"'arr_0' name no parameter of pair.*numpy's name for an array saved "
                                         r"without a name"):
        example_inputs(fns.pair, {"arr_0": IDS})
    with pytest.raises(UsageError, match=r"'arr_1' name no parameter of emb"):  # a second unnamed array's name
        example_inputs(fns.emb, {"arr_1": IDS})


def test_a_one_input_keras_model_takes_an_array_named_after_its_input():
    """Healthy twin: an export's ``examples.npz`` names the array after the model's Input (the
    SignatureDef input), which feeds the model's one input; another name is still refused."""
    import keras

    inp = keras.Input(shape=(3,), name="feat")
    model = keras.Model(inp, keras.layers.Dense(2)(inp))
    x = np.ones((2, 3), np.float32)
    args, kwargs = example_inputs(model, {"feat": x})
    assert [v.shape for v in list(args) + list(kwargs.values()) if hasattr(v, "shape")] == [(2, 3)]
    with pytest.raises(UsageError, match=r"'feature' name no parameter of"):
        example_inputs(model, {"feature": x})


@pytest.mark.parametrize("verb", ["inspect", "lower", "compare", "precision", "diagnose", "export"])
def test_every_verb_refuses_a_non_npz_before_tf_work(verb, npz):
    import argparse

    from tflab.cli import preflight

    target = "m.keras" if verb == "export" else f"{FNS}:emb"
    args = argparse.Namespace(target=target, model=target, arg=[], examples=str(npz / "not.npz"),
                              quantize="none", policies="float32", loss_scale=None, out=None, html=None,
                              force=False, hlo=None, dot=None, tensorboard=None, stage=[])
    if verb == "export":
        args.model = FNS.replace("examples_fns.py", "") + "examples_fns.py:emb"
    with pytest.raises(UsageError, match="is not an .npz archive"):
        preflight(verb, args)


def test_a_factorys_array_named_after_no_arg_input_is_refused_naming_both(tmp_path):
    """``precision conv.py:make_classifier --arg img=float32[…] --examples wrong.npz`` (array ``image``)
    passed both the array and the --arg spec to the model, the second as Keras' ``training``: "multiple
    values for argument 'training'". The names are now compared first; the healthy twin (the array named
    after the --arg) binds as before."""
    import tensorflow as tf

    def factory():
        return None  # not called: binding only

    np.savez(tmp_path / "wrong.npz", image=np.ones((2, 4), np.float32))
    np.savez(tmp_path / "right.npz", img=np.ones((2, 4), np.float32))
    spec = {"img": tf.TensorSpec([2, 4], tf.float32)}
    with pytest.raises(UsageError, match=r"array\(s\) 'image' name no --arg input of the factory's model \(img\)"):
        example_inputs(factory, str(tmp_path / "wrong.npz"), spec, by_position=True)
    args, kwargs = example_inputs(factory, str(tmp_path / "right.npz"), spec, by_position=True)
    assert len(args) == 1 and kwargs == {} and args[0].shape == (2, 4)
