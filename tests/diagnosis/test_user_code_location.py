"""User code is told from library code by where it lives, not by words in its path.

A clone at ``.../tflab/`` lost every culprit line (96 failures of `make test`): six filters skipped any
file whose path held ``/tflab/``, ``keras`` or ``/lib/python3``. `tflab._user.usercode.library_of` compares
a file with the installed package folders instead.
"""

from __future__ import annotations

import os

import pytest


def test_library_of_names_installed_packages_and_not_a_users_folder_named_like_one(tmp_path):
    import keras
    import tensorflow as tf

    import tflab
    from tflab._user.usercode import is_library_file, library_of

    assert library_of(tf.__file__) == "tensorflow"
    assert library_of(keras.__file__) == "keras"
    assert library_of(tflab.__file__) == "tflab"
    assert library_of(os.__file__) == "python"
    for folder in ("tflab", "keras", "tensorflow", os.path.join("lib", "python3.11")):
        user = tmp_path / folder / "model.py"
        assert library_of(str(user)) is None and not is_library_file(str(user)), user


@pytest.mark.parametrize("folder", ["tflab", "keras"])
def test_diagnose_names_the_culprit_line_of_a_file_under_a_folder_named_tflab(tmp_path, folder):
    import tensorflow as tf

    import tflab
    from tflab._user.target import load_target

    d = tmp_path / folder
    d.mkdir()
    src = d / f"d3_{folder}.py"
    src.write_text(f"import tensorflow as tf\n\n\ndef make_{folder}(x):\n    y = x * 2.0\n    return y.numpy()\n")
    fn = load_target(f"{src}:make_{folder}")
    report = tflab.diagnose(fn, tf.TensorSpec([], tf.float32))
    assert (report.filename, report.line) == (str(src), 6), report
