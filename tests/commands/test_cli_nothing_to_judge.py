"""Runs that would be judged over nothing, and inputs known bad before TF loads, are refused in one line.

* ``compare`` on outputs with 0 elements, or on a function that returns no tensor, reported "no
  findings" measured over nothing; now a `UsageError` saying why (healthy twin: one element).
* ``Examples(batches=...)`` took any value; now a tuple of ``{name: np.ndarray}`` dicts only.
* ``build-op`` named a FIFO ``.lock`` in its cache folder only after TF loaded; now before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tflab.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def _compare(fn, *args):
    import tflab

    return tflab.compare_modes(fn, *args, repeats=1, hlo=False, attribute=False, gradients=False,
                               modes=("graph",))


def test_compare_on_zero_elements_is_refused():
    import tensorflow as tf

    with pytest.raises(UsageError, match=r"nothing to compare across modes: its outputs hold 0 elements \(shapes \[0, 2\]\)"
                                         r".*e\.g\. np\.zeros\(\(2, 3\), np\.float32\)$"):  # Python's words, not --arg
        _compare(lambda x: x * 2.0, tf.zeros([0, 2]))
    # sibling: a reduction keeps elements, a slice of nothing does not
    with pytest.raises(UsageError, match="0 elements"):
        _compare(lambda x: (x[:0] + 1.0, x[:, :0]), tf.ones([3, 2]))


def test_compare_on_a_function_returning_no_tensor_is_refused():
    import tensorflow as tf

    with pytest.raises(UsageError, match=r"returns no tensor \(int\)"):
        _compare(lambda x: {"a": 1}, tf.ones([2]))
    with pytest.raises(UsageError, match=r"returned no tensor \(None\)"):
        _compare(lambda x: None, tf.ones([2]))


def test_healthy_twin_one_element_is_compared():
    import tensorflow as tf

    cmp = _compare(lambda x: x * 2.0 + 1.0, tf.ones([1, 1]))
    assert cmp.modes["graph"].outputs and not cmp.findings


@pytest.mark.parametrize("batches", ["x", ({"x": [1.0, 2.0]},), [{"x": np.ones(2)}], ({1: np.ones(2)},)])
def test_examples_batches_must_be_a_tuple_of_name_to_array_dicts(batches):
    from tflab.examples import Examples

    with pytest.raises(UsageError, match=r"Examples\(batches=\.\.\.\) takes a tuple of \{input name: np.ndarray\} dicts"):
        Examples(batches)


def test_examples_healthy_twins():
    from tflab.examples import Examples

    assert len(Examples(({"x": np.ones(2, np.float32)},))) == 1
    assert Examples.of({"x": np.ones((4, 2), np.float32)}).names == ("x",)


_ENTRY = ("import sys; from tflab.cli import supervise; rc = supervise(sys.argv[1:]); "
          "sys.stderr.write('TF-IMPORTED\\n' if 'tensorflow' in sys.modules else ''); sys.exit(rc)")


@pytest.mark.parametrize("name", [".lock", "warp_softmax_abc.json"])
def test_build_op_refuses_a_fifo_in_its_cache_before_tf(tmp_path, name):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.mkfifo(cache / name)
    env = dict(os.environ, PYTHONPATH=str(REPO), TFLAB_CUSTOM_OPS_BUILD_DIR=str(cache), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TFLAB_IN_PROCESS", None)
    p = subprocess.run([sys.executable, "-c", _ENTRY, "build-op", "--no-cuda"], capture_output=True, text=True,
                       env=env, stdin=subprocess.DEVNULL, timeout=60, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "TF-IMPORTED" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"{name} in the build cache {cache} is a FIFO, not a regular file" in lines[0]


def test_build_cache_healthy_twin_passes(tmp_path, monkeypatch):
    from tflab.commands.preflight_checks import check_build_cache

    (tmp_path / ".lock").write_text("")
    (tmp_path / "warp_softmax_abc.json").write_text("{}")
    monkeypatch.setenv("TFLAB_CUSTOM_OPS_BUILD_DIR", str(tmp_path))
    check_build_cache()
