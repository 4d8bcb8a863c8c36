"""Bad examples (all NaN, all inf, 0 rows) are refused before any conversion, with the counts; not judged."""

from __future__ import annotations

import numpy as np
import pytest

from tflab.errors import UsageError


@pytest.mark.parametrize("array, words", [
    (np.full((2, 4), np.nan, np.float32), "every value of keras_tensor is NaN (8 NaN, 0 inf of 8 non-finite)"),
    (np.full((2, 4), np.inf, np.float32), "every value of keras_tensor is ±inf (0 NaN, 8 inf of 8 non-finite)"),
    (np.array([[np.nan, -np.inf]], np.float64), "is NaN or ±inf (1 NaN, 1 inf of 2 non-finite)"),
], ids=["nan", "inf", "mixed"])
def test_all_non_finite_input_is_refused_with_the_counts(array, words):
    """all-NaN examples made export blame its own int8 recipe and check-tflite pass (exit 0)."""
    from tflab.examples import Examples

    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Examples.of({"keras_tensor": array}).check_rows()


def test_healthy_twins_are_kept():
    """Some finite values (NaN propagation worth checking), integer inputs, several batches: not refused."""
    from tflab.examples import Examples

    part = np.array([[np.nan, 1.0]], np.float32)
    Examples.of({"x": part, "ids": np.zeros((1, 3), np.int32)}).check_rows()
    Examples.of([{"x": np.full((1, 2), np.nan, np.float32)}, {"x": np.ones((1, 2), np.float32)}]).check_rows()


@pytest.mark.parametrize("verb", ["check-tflite", "export"])
def test_cli_refuses_before_loading_or_converting(verb, tmp_path, monkeypatch, capsys):
    """Both verbs answer before the model is read: a junk .tflite and an empty SavedModel are never looked at."""
    from tflab.cli import main

    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "kt_nan.npz", keras_tensor=np.full((2, 4), np.nan, np.float32))
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    (tmp_path / "m.tflite").write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(32))  # the identifier only: never read
    argv = (["check-tflite", "m.tflite", "sm"] if verb == "check-tflite"
            else ["export", "sm", "--quantize", "int8", "--out", "o"]) + ["--examples", "kt_nan.npz"]
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "every value of keras_tensor is NaN" in err[-1], err
    assert not (tmp_path / "o").exists()
