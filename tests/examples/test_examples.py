"""One Examples type, normalized once, checked once, passed on as is."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tflab  # noqa: E402
from tflab import examples as examples_mod  # noqa: E402
from tflab.errors import UsageError  # noqa: E402
from tflab.examples import Examples  # noqa: E402


class _Scale(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x * self.w}


def test_examples_of_every_form_and_the_natural_wrong_guesses():
    x = np.ones((4, 3), np.float32)
    one = Examples.of({"x": x})
    assert len(one) == 1 and one.names == ("x",) and repr(one) == "<Examples: 1 batch: x float32[4,3]>"
    assert Examples.of(one) is one  # nothing read twice
    two = Examples.of([{"x": x}, {"x": x[:1]}])
    assert [b["x"].shape for b in two] == [(4, 3), (1, 3)]
    per = Examples.of({"serve": {"x": x}, "other": [{"m": x[:, :1]}, {"m": x[:2, :1]}]})
    assert [sorted(b) for b in per] == [["m", "x"], ["m", "x"]]
    with pytest.raises(UsageError, match=r"bare ndarray: name it by its signature input, e.g. \{'x': array\}"):
        Examples.of(x)
    with pytest.raises(UsageError, match=r"list of ndarray, not of dicts.*\[\{'x': array\}\]"):
        Examples.of([x])
    with pytest.raises(UsageError, match="examples must be a dict"):
        Examples.of(5)


def test_an_npz_path_is_read_as_every_verbs_examples(tmp_path):
    """The path of an .npz (export's examples.npz layout included) is the same batches as its arrays."""
    import pathlib

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.savez(tmp_path / "one.npz", x=x)
    np.savez(tmp_path / "two.npz", **{"0/x": x, "1/x": x[:1]})
    for path in (str(tmp_path / "one.npz"), pathlib.Path(tmp_path / "one.npz")):
        (b,) = Examples.of(path).batches
        assert list(b) == ["x"] and np.array_equal(b["x"], x) and b["x"].dtype == np.float32
    two = Examples.of(tmp_path / "two.npz")
    assert [b["x"].shape for b in two] == [(4, 3), (1, 3)]
    with pytest.raises(UsageError, match="nope.npz"):
        Examples.of(str(tmp_path / "nope.npz"))


def test_check_is_once_and_names_the_mismatch():
    from tflab.saved_model import TensorInfo

    sig = {"serve": {"x": TensorInfo("x", "float32", (None, 3))}}
    ex = Examples.of({"x": np.ones((2, 3), np.float32)})
    checked = ex.check(sig)
    assert checked.check(sig) is checked and checked.feeds("serve")[0]["x"].shape == (2, 3)
    with pytest.raises(UsageError, match=r"examples\['x'\] is float64 but signature 'serve' wants float32"):
        Examples.of({"x": np.ones((2, 3))}).check(sig)
    with pytest.raises(UsageError, match=r"has shape \[2, 4\] but signature 'serve' wants x: float32\[None,3\]"):
        Examples.of({"x": np.ones((2, 4), np.float32)}).check(sig)
    with pytest.raises(UsageError, match=r"no signature takes \['z'\]"):
        Examples.of({"x": np.ones((2, 3), np.float32), "z": np.ones(1)}).check(sig)


def test_one_roundtrip_reads_the_examples_once_and_passes_them_on(tmp_path, monkeypatch):
    """save_and_reload → tflite_roundtrip (convert, the representative dataset, check): one read."""
    reads = []
    real = examples_mod._normalize
    monkeypatch.setattr(examples_mod, "_normalize", lambda e: reads.append(1) or real(e))
    sm = tflab.save_and_reload(_Scale(), tmp_path / "sm", {"x": np.full((2, 3), 1.5, np.float32)})
    assert len(reads) == 1 and isinstance(sm.example_batches, Examples)
    assert sm.batch_count == 1 and set(sm.example_batches.signatures) == set(sm.signatures) == {"serving_default"}
    c = tflab.tflite_roundtrip(sm.path, sm.example_batches, "int8")
    assert len(reads) == 1, "tflite_roundtrip, convert and check_tflite took the value as is"
    assert c.within_bound is True
    tflab.tflite_roundtrip(sm.path, {"x": np.ones((1, 3), np.float32)}, "none")
    assert len(reads) == 2  # a raw dict: read once more, once
