"""An error TF or Keras raises on the user's model is the user's: exit 2, one line, TF's innermost message,
and the measured cause where there is one (tensorflow/tensorflow#44984: an input named "a feature")."""

from __future__ import annotations

import pytest

from tflab.errors import UsageError


def _model(inp: str, layer: str = "dense"):
    import keras

    i = keras.Input((4,), name=inp)
    return keras.Model(i, keras.layers.Dense(3, name=layer)(i))


@pytest.mark.parametrize("inp, layer, words", [
    ("a feature", "dense", "input name 'a feature' is not a valid TF node name (space); rename it, e.g. `a_feature` "
                           "(checked: exports); TF said: ValueError: Got non-flat/non-unique argument names"),
    ("a+b", "dense", "input name 'a+b' is not a valid TF node name ('+'); rename it, e.g. `a_b` (checked: exports)"),
    ("x", "out put", "layer name 'out put' is not a valid TF node name (space); rename it, e.g. `out_put` "
                     "(checked: exports); TF said: ValueError: 'out put' is not a valid scope name"),
], ids=["space-input", "plus-input", "space-layer"])
def test_invalid_node_name_is_named_with_a_checked_rename(tmp_path, inp, layer, words):
    """TF blamed "more than one argument … was named 'a feature'" for one uniquely named input; the cause is
    the space. The rename is checked by saving a renamed copy (same config and weights)."""
    from tflab.saved_model import save_and_reload

    with pytest.raises(UsageError) as info:
        save_and_reload(_model(inp, layer), tmp_path / "sm", None)
    assert words in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_valid_names_healthy_twin(tmp_path):
    from tflab.saved_model import save_and_reload

    assert save_and_reload(_model("a_feature"), tmp_path / "sm", None).bit_exact


def test_a_tflab_bug_keeps_its_traceback():
    """Only exceptions TF, Keras or user code raised are the user's; one raised in tflab stays a bug."""
    from tflab._io.paths import published_path
    from tflab.saved_model.node_names import raised_by_tf

    with pytest.raises(TypeError) as info:
        published_path(None)  # fails in os.path (the standard library) called from tflab: tflab's frame
    assert not raised_by_tf(info.value)


def test_cli_export_is_exit_2_not_70(tmp_path, monkeypatch, capsys):
    from tflab.cli import main

    monkeypatch.chdir(tmp_path)
    _model("a feature").save(tmp_path / "m.keras")
    code = main(["export", "m.keras", "--quantize", "none", "--out", "o"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tflab export")]
    assert code == 2 and len(err) == 1 and "input name 'a feature' is not a valid TF node name" in err[0], err
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.tmp-*"))
