"""The breaks that need TensorFlow, each with its reproducer.

a user KeyboardInterrupt, corrupt SavedModels through the one loader), the loader's
content key, through the API (`run_tour`).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tflab.errors import UsageError

USER = '''
import tensorflow as tf

def f(x):
    return x * 2.0

def kbint(x):
    raise KeyboardInterrupt
'''


def one_error_line(verb: str, err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"tflab {verb}: error: ") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------

def test_keyboard_interrupt_raised_by_user_code_is_exit_2(run_cli, tmp_path):
    """`def kbint(x): raise KeyboardInterrupt` exited 130 "interrupted" although no signal came."""
    (tmp_path / "m.py").write_text(USER)
    code, out, err = run_cli("inspect", f"{tmp_path / 'm.py'}:kbint", "--arg", "x=float32[2,4]")
    line = one_error_line("inspect", err)
    assert code == 2 and "raised KeyboardInterrupt" in line and "no Ctrl-C came" in line, line
    assert "m.py:" in line  # where in the user's file


def test_a_real_sigint_is_still_130(run_cli, tmp_path):
    """Healthy case: a SIGINT that really came (here sent to this process from the user's function)."""
    (tmp_path / "m.py").write_text("import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGINT)\n"
                                   "    return x\n")
    code, out, err = run_cli("inspect", f"{tmp_path / 'm.py'}:f", "--arg", "x=float32[2]")
    assert code == 130 and err.strip().endswith("interrupted"), err


# ------------------------------------------------------------------ the one SavedModel loader

class _Scale(tf.Module):
    def __init__(self, rows, cols, value):
        super().__init__()
        self.w = tf.Variable(tf.fill([rows, cols], value))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.matmul(x, self.w[:4])}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A SavedModel, its TFLite flatbuffer, and its corruptions: no variables/, a truncated, an empty
    saved_model.pb, variables of a model with other shapes."""
    root = tmp_path_factory.mktemp("sm")
    tf.saved_model.save(_Scale(4, 3, 1.0), str(root / "sm"))
    other = root / "other"
    tf.saved_model.save(_Scale(8, 5, 2.0), str(other))
    tflite = tf.lite.TFLiteConverter.from_saved_model(str(root / "sm")).convert()
    (root / "model.tflite").write_bytes(tflite)
    for name in ("novars", "trunc", "empty", "swap"):
        shutil.copytree(root / "sm", root / name)
    shutil.rmtree(root / "novars" / "variables")
    pb = (root / "sm" / "saved_model.pb").read_bytes()
    (root / "trunc" / "saved_model.pb").write_bytes(pb[: len(pb) // 2])
    (root / "empty" / "saved_model.pb").write_bytes(b"")
    shutil.rmtree(root / "swap" / "variables")
    shutil.copytree(other / "variables", root / "swap" / "variables")
    return root


@pytest.mark.parametrize("case", ["novars", "trunc", "empty", "swap"])
def test_check_tflite_on_a_corrupt_saved_model_is_one_line(models, case, run_cli):
    """Exit 70 after TF's traceback (py_checkpoint_reader / loader_impl / resource_variable_ops)."""
    code, out, err = run_cli("check-tflite", str(models / "model.tflite"), str(models / case))
    line = one_error_line("check-tflite", err)
    assert code == 2 and "not a readable SavedModel" in line and str(models / case) in line, line


@pytest.mark.parametrize("case, words", [("novars", "variables/ folder is missing"),
                                         ("swap", "incompatible tensor with shape")])
def test_api_on_a_corrupt_saved_model_raises_usage_error(models, case, words):
    """Raw FileNotFoundError (TensorSliceReader) and ValueError (incompatible tensor) from TF."""
    from tflab import tflite_roundtrip
    from tflab.litert import check_tflite

    x = {"x": np.ones((2, 4), np.float32)}
    with pytest.raises(UsageError, match=words):
        check_tflite((models / "model.tflite").read_bytes(), models / case, x)
    with pytest.raises(UsageError, match="not a readable SavedModel"):
        tflite_roundtrip(models / case, x)


def test_loader_caches_by_content_not_mtime(models, tmp_path):
    """The cache was keyed by saved_model.pb's mtime, so a replaced variables/ was not read."""
    from tflab.saved_model import load_saved_model

    sm = tmp_path / "sm"
    shutil.copytree(models / "sm", sm)
    first = load_saved_model(sm)
    assert float(first.w.numpy()[0, 0]) == 1.0
    assert load_saved_model(sm) is first  # unchanged: the cached load
    tf.saved_model.save(_Scale(4, 3, 3.0), str(tmp_path / "three"))
    stamp = os.stat(sm / "saved_model.pb")
    shutil.rmtree(sm / "variables")
    shutil.copytree(tmp_path / "three" / "variables", sm / "variables")
    os.utime(sm / "saved_model.pb", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the same pb, same mtime
    again = load_saved_model(sm)
    assert again is not first and float(again.w.numpy()[0, 0]) == 3.0


# ------------------------------------------------------------------ through the API

def test_run_tour_force_refuses_a_folder_of_user_files(tmp_path, small_keras_file):
    """ the API side: `run_tour(out_dir=…, force=True)` deleted the user's thesis.txt."""
    from tflab.tour import run_tour

    user = tmp_path / "user"
    user.mkdir()
    (user / "thesis.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a tflab tour"):
        run_tour(model_path=str(small_keras_file), out_dir=str(user), only=["s01_trace"], quiet=True, force=True)
    assert os.listdir(user) == ["thesis.txt"]
