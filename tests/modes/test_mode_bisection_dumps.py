"""The bisection's child processes leave the user's own XLA dump folder as it was.

A user who compares modes with ``XLA_FLAGS=--xla_dump_to=D`` asks for the dumps of their compiles; the
bisection's children (one per compiler setting tried) appended theirs to the same ``D``. One real child
runs here (one TF import): the folder's listing before and after must be equal.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from tflab.modes.bisection import SavedStep


def test_a_bisection_child_writes_nothing_into_the_users_dump_folder(tmp_path, monkeypatch):
    mine = tmp_path / "my_dumps"
    mine.mkdir()
    (mine / "module_0001.mine.txt").write_text("the user's own dump")
    graphs = tmp_path / "my_graphs"
    graphs.mkdir()
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to={mine} --xla_dump_hlo_as_text")
    monkeypatch.setenv("TF_DUMP_GRAPH_PREFIX", str(graphs))
    before = sorted(os.listdir(mine)), sorted(os.listdir(graphs))
    x = tf.constant(np.arange(4, dtype=np.float32))
    with SavedStep(lambda xs: ([xs[0] * 3.0 + 1.0], []), [x]) as saved:
        assert not saved.error, saved.error
        outs, _ = saved.run("xla", {}, timeout=120)  # a trial's run: the user's flags as they are
        after = sorted(os.listdir(mine)), sorted(os.listdir(graphs))
        dumped_apart = any((saved.tmp / "user_dumps").rglob("*.txt"))
    np.testing.assert_array_equal(outs[0], np.arange(4, dtype=np.float32) * 3.0 + 1.0)
    assert after == before
    assert dumped_apart, "the child dumped nowhere: the test would prove nothing"
