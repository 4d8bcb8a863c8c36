"""Every bad example array is one line, wherever it is given: the ``.npz`` reader
(`tflab._io.path_checks.read_npz`), the binder of a function's parameters
(`tflab.examples.example_inputs`, every verb's ``--examples`` and the API's ``examples=``) and
`tflab.examples.Examples` (export) share `tflab._user.arrays`.

Each mechanism has the handed case, a sibling it does not name, and a healthy twin that passes.
"""

from __future__ import annotations

import os
import re
import zipfile

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tflab._io.path_checks import read_npz  # noqa: E402
from tflab.errors import UsageError  # noqa: E402
from tflab.examples import Examples, example_inputs, renamed_keys_hint, with_examples  # noqa: E402

FNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "examples_fns.py")
X = np.array([[1.0, -2.0, 0.5]], np.float32)
FAST = ("--no-grad", "--repeats", "1", "--no-cause")


def ident(x):
    return x


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    d = tmp_path_factory.mktemp("arrays")
    np.savez(d / "x.npz", x=X)
    np.savez(d / "nan.npz", x=np.full((2, 3), np.nan, np.float32))
    np.savez(d / "inf.npz", x=np.full((2, 3), -np.inf, np.float64))
    np.savez(d / "some_nan.npz", x=np.array([[np.nan, 1.0, 2.0]], np.float32))
    return d


# ------------------------------------------------------------------ member names: ASCII batch indices


@pytest.mark.parametrize("key", ["\u00b2/x", "\u0663/x"], ids=["superscript-two", "arabic-indic-three"])
def test_a_non_ascii_digit_is_no_batch_index(tmp_path, key):
    """str.isdigit takes '²' and '٣', int() refuses '²': only ASCII digits make a '<i>/<name>' batch."""
    np.savez(tmp_path / "e.npz", **{key: X})
    batches = read_npz(tmp_path / "e.npz")
    assert len(batches) == 1 and list(batches[0]) == [key]  # one batch, the name kept as given
    with pytest.raises(UsageError, match="name no parameter"):
        example_inputs(lambda a, b: a, str(tmp_path / "e.npz"))


def test_a_batch_member_with_no_input_name_is_one_line(tmp_path):
    np.savez(tmp_path / "e.npz", **{"0/": X})
    with pytest.raises(UsageError, match="names no input after its batch index"):
        read_npz(tmp_path / "e.npz")


def test_two_members_for_one_input_of_one_batch_are_refused(tmp_path):
    """'0/x' and '00/x' are both batch 0's x: one would silently replace the other."""
    np.savez(tmp_path / "e.npz", **{"0/x": X, "00/x": X + 1})
    with pytest.raises(UsageError, match="two members name input 'x' of batch 0"):
        read_npz(tmp_path / "e.npz")


def test_healthy_twin_batch_layout_is_read(tmp_path):
    np.savez(tmp_path / "e.npz", **{"0/x": X, "1/x": 2 * X})
    batches = read_npz(tmp_path / "e.npz")
    assert len(batches) == 2 and np.array_equal(batches[1]["x"], 2 * X)


# ------------------------------------------------------------------ dtypes TF has no tensor for


@pytest.mark.parametrize("array, words", [
    (np.array(["2020-01-01"], "datetime64[D]"), "datetime64[D] array"),
    (np.zeros(2, [("a", "f4"), ("b", "i4")]), "structured array (fields a, b)"),
    (np.array([1], "timedelta64[s]"), "timedelta64[s] array"),
    (np.zeros(2, "V4"), "raw 4-byte record array (|V4)"),
], ids=["datetime64-handed", "structured-handed", "timedelta64-sibling", "void-sibling"])
def test_a_dtype_tf_cannot_take_is_refused_naming_the_array(tmp_path, array, words):
    np.savez(tmp_path / "e.npz", x=array)
    with pytest.raises(UsageError, match=re.escape(f"'x' is a {words}: TF has no tensor")) as e:
        example_inputs(ident, str(tmp_path / "e.npz"))
    assert "--examples" in str(e.value)
    with pytest.raises(UsageError, match=re.escape(f"'x' is a {words}")):
        with_examples(ident, {"x": array}, (), {})  # the API's dict: the same rule
    with pytest.raises(UsageError, match=re.escape(f"'x' is a {words}")):
        Examples.of({"x": array})  # export's examples: the same rule


@pytest.mark.parametrize("array", [np.array([b"a", b"b"]), np.array(["a", "b"]), np.ones(2, np.float16),
                                   np.ones(2, np.complex64), np.ones(2, bool)])
def test_healthy_twin_dtypes_tf_takes_are_bound(array):
    _, kwargs = with_examples(ident, {"x": array}, (), {})
    assert kwargs["x"].shape == (2,)


# ------------------------------------------------------------------ a zip member that is no .npy


@pytest.mark.parametrize("member", ["x", "notes.txt"], ids=["bare-name-handed", "text-file-sibling"])
def test_a_zip_member_that_is_no_npy_is_refused(tmp_path, member):
    with zipfile.ZipFile(tmp_path / "e.npz", "w") as z:
        z.writestr(member, b"hello")
    with pytest.raises(UsageError, match=f"not an .npz written by np.savez: member '{member}' is not a .npy"):
        read_npz(tmp_path / "e.npz")


@pytest.mark.parametrize("content", [b"garbage", b"\x93NUMPX" + b"\0" * 20], ids=["garbage", "near-magic"])
def test_a_member_named_npy_that_is_not_one_is_refused(tmp_path, content):
    """np.load hands back the raw bytes of a member whose magic is not numpy's: it was read as an array
    (a traceback on ``.dtype``, exit 70, from every verb's --examples and the API's examples=)."""
    with zipfile.ZipFile(tmp_path / "e.npz", "w") as z:
        z.writestr("x.npy", content)
    with pytest.raises(UsageError, match="member 'x.npy' is not an array in numpy's .npy format"):
        read_npz(tmp_path / "e.npz")


def test_healthy_twin_npz_written_by_savez_compressed(tmp_path):
    np.savez_compressed(tmp_path / "e.npz", x=X)
    assert np.array_equal(read_npz(tmp_path / "e.npz")[0]["x"], X)


# ------------------------------------------------------------------ all non-finite: export's rule, every verb


@pytest.mark.parametrize("name, words", [("nan.npz", "every value of x is NaN (6 NaN, 0 inf of 6"),
                                         ("inf.npz", "every value of x is ±inf (0 NaN, 6 inf of 6")])
def test_all_non_finite_examples_are_refused_by_the_binder(d, name, words):
    with pytest.raises(UsageError, match=re.escape(words)):
        example_inputs(ident, str(d / name))
    with pytest.raises(UsageError, match="every value of x is"):
        with_examples(ident, {"x": np.full(3, np.nan)}, (), {})


@pytest.mark.parametrize("verb", ["compare", "precision"])
def test_compare_and_precision_refuse_all_nan_before_any_work(run_cli, d, verb):
    code, out, err = run_cli(verb, f"{FNS}:scaled", "--examples", str(d / "nan.npz"))
    assert code == 2 and "every value of x is NaN (6 NaN" in err and "Traceback" not in err


def test_healthy_twin_some_nan_is_kept(d):
    _, kwargs = example_inputs(ident, str(d / "some_nan.npz"))
    assert np.isnan(kwargs["x"].numpy()[0, 0])


# ------------------------------------------------------------------ --arg with None dims beside --examples


@pytest.mark.parametrize("verb, spec", [("compare", "x=float32[None,3]"), ("precision", "x=float32[?,3]")],
                         ids=["compare-handed", "precision-sibling"])
def test_a_spec_fed_by_the_examples_may_have_unknown_dims(run_cli, d, verb, spec):
    extra = FAST if verb == "compare" else ("--policies", "float32")
    code, out, err = run_cli(verb, f"{FNS}:scaled", "--examples", str(d / "x.npz"), "--arg", spec, *extra)
    assert code == 0, err


def test_healthy_twin_unknown_dims_are_refused_where_values_are_drawn(run_cli, d, tmp_path):
    code, _, err = run_cli("compare", f"{FNS}:scaled", "--arg", "x=float32[None,3]", *FAST)
    assert code == 2 and "has unknown dims; give every dim" in err  # no --examples: random values drawn
    np.savez(tmp_path / "a.npz", a=X)  # b is not fed by the file: its values are drawn, so refused
    code, _, err = run_cli("compare", f"{FNS}:pair", "--examples", str(tmp_path / "a.npz"),
                           "--arg", "b=float32[None,3]", *FAST)
    assert code == 2 and "--arg b" in err and "unknown dims" in err


def test_a_fed_spec_still_must_describe_the_array(d):
    with pytest.raises(UsageError, match="make them agree"):
        example_inputs(ident, str(d / "x.npz"), {"x": tf.TensorSpec([None, 4], tf.float32)})


# ------------------------------------------------------------------ the dict-input hint only for a dict input


def test_one_misnamed_input_is_not_blamed_on_a_dict_input():
    hint = renamed_keys_hint(["x"], ["z"], ["x"], {"z": X})
    assert "flattened" not in hint and "the examples have ['z'], the model's inputs are ['x']" in hint
    hint = renamed_keys_hint(["inputs"], ["features"], ["inputs"], {"features": X})  # sibling
    assert "flattened" not in hint and "['features']" in hint


def test_healthy_twin_a_flattened_dict_input_keeps_its_hint():
    hint = renamed_keys_hint(["inputs", "inputs_1"], ["a", "b"], ["inputs", "inputs_1"], {"a": X, "b": X})
    assert "TF flattened the dict input 'inputs'" in hint and "'a' -> 'inputs', 'b' -> 'inputs_1'" in hint


# ------------------------------------------------------------------ the API's dict: what is wrong, in one line


@pytest.mark.parametrize("examples, words", [
    ({"x": [[1.0, 2.0], [1.0]]}, r"'x' is a ragged list \(rows of different lengths\)"),
    ({"x": [[[1.0], [2.0]], [[1.0]]]}, "'x' is a ragged list"),
    ({}, "the dict is empty"),
    ({1: X}, r"keys must be parameter names \(str\), got int 1"),
    ({("x",): X}, r"keys must be parameter names \(str\), got tuple"),
], ids=["ragged-handed", "ragged-deep-sibling", "empty-handed", "int-key-handed", "tuple-key-sibling"])
def test_a_bad_examples_dict_says_what_is_wrong(examples, words):
    with pytest.raises(UsageError, match=words):
        with_examples(ident, examples, (), {})


def test_healthy_twin_a_nested_list_is_bound():
    _, kwargs = with_examples(ident, {"x": [[1.0, 2.0], [3.0, 4.0]]}, (), {})
    np.testing.assert_array_equal(kwargs["x"].numpy(), [[1.0, 2.0], [3.0, 4.0]])
