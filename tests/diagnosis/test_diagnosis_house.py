"""Diagnosis / autograph / examples: the package cut by concern, TF internals behind
`tflab._tf.autograph`, and one record convention.

Each check can fail: the `RULES` list is shown to be what classifies (a rule taken out of it
changes the answer); each adapter accessor is run on the pinned TF and on a case where it must
give the "not a tf.function" answer; each patch is shown to be undone after an error raised
inside it; the reports are checked for the convention, and the removed aliases must stay gone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

from tflab._user.target import load_module

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "diagnose")
c = load_module(os.path.join(DATA, "cases.py"))
S = tf.TensorSpec


# ------------------------------------------------------------------ the package


def test_the_package_parts_stay_under_600_lines_and_the_old_modules_are_gone():
    import importlib

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tflab")
    mine = [os.path.join("diagnosis", f) for f in os.listdir(os.path.join(root, "diagnosis")) if f.endswith(".py")]
    mine += ["autograph.py", os.path.join("_user", "source_map.py"), "examples.py", os.path.join("_tf", "autograph.py")]
    sizes = {f: sum(1 for _ in open(os.path.join(root, f), encoding="utf-8")) for f in mine}
    assert max(sizes.values()) <= 600, sizes
    assert not os.path.exists(os.path.join(root, "diagnosis_fixes.py"))  # its path is served by the
    with pytest.warns(DeprecationWarning, match="tflab.diagnosis_fixes is tflab.diagnosis.fixes"):  # table
        sys.modules.pop("tflab.diagnosis_fixes", None)
        from tflab._api.deprecations import reset_warned

        reset_warned()
        assert importlib.import_module("tflab.diagnosis_fixes") is importlib.import_module("tflab.diagnosis.fixes")
    sys.modules.pop("tflab.diagnosis_fixes", None)
    import tflab.diagnosis as pkg

    for name in pkg.__all__:  # every public name resolves from the package root
        assert getattr(pkg, name) is not None, name
    assert not [n for n in pkg.__all__ if n.startswith("_")]


def test_the_rules_list_is_what_classifies(monkeypatch):
    """Healthy: D5 is ``shape-dim-is-none``. Planted: with that rule taken out of `RULES`, the same
    failure is no longer called so (the list, not a hidden chain, decides)."""
    from tflab import diagnose
    from tflab.diagnosis import rules

    assert diagnose(c.d5_shape).kind == "shape-dim-is-none"
    names = [r.name for r in rules.RULES]
    assert len(names) == len(set(names)) == 13
    kept = tuple(r for r in rules.RULES if r.name != "shape-none")
    monkeypatch.setattr(rules, "RULES", kept)
    assert diagnose(c.d5_shape).kind != "shape-dim-is-none"
    # Every kind a rule gives is named by that rule (the Diagnosis docstring lists them all).
    from tflab.diagnosis import Diagnosis

    for r in rules.RULES:
        for kind in r.kinds:
            assert f"``{kind}``" in Diagnosis.__doc__, kind


# ------------------------------------------------------------------ the adapter on the pinned TF


def _twice(x):
    return x * 2.0


def test_each_adapter_accessor_reads_the_pinned_tf():
    from tflab._tf import autograph as ag

    plain = tf.function(_twice)
    off = tf.function(_twice, autograph=False)
    assert (ag.autograph_enabled(plain), ag.autograph_enabled(off), ag.autograph_enabled(_twice)) == (True, False, True)
    sig = tf.function(_twice, input_signature=[S([None], tf.float32)])
    sig(tf.ones([2]))
    clone = ag.clone_function(sig)
    assert clone is not sig and clone.input_signature == sig.input_signature
    assert clone.experimental_get_tracing_count() == 0 and sig.experimental_get_tracing_count() == 1
    assert ag.clone_function(_twice) is None
    plain(tf.ones([2]))
    plain(tf.ones([3]))
    entries = ag.cached_traces(plain)
    assert len(entries) == 2 and len({id(cf.graph) for _k, cf in entries}) == 2  # one per trace, in order
    assert [cf.structured_input_signature[0][0].shape.as_list() for _k, cf in entries] == [[2], [3]]
    assert ag.cached_traces(_twice) == []

    def cond(x):
        return tf.cond(tf.reduce_sum(x) > 0, lambda: x, lambda: -x)

    graph = tf.function(cond).get_concrete_function(S([2])).graph
    ifs = [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]
    assert len(ifs) == 1 and len(ag.branch_graphs(ifs[0])) == 2
    assert ag.branch_graphs(graph.get_operations()[0]) == []

    def total(ds):
        return ds.reduce(np.int64(0), lambda a, b: a + b)

    ds = tf.data.Dataset.range(3)
    g = tf.function(total).get_concrete_function(ds).graph
    (reduce_op,) = [op for op in g.get_operations() if op.type == "ReduceDataset"]
    body = ag.library_function_graph(g, reduce_op.get_attr("f").name)
    assert body is not None and any(op.type == "AddV2" for op in body.get_operations())
    assert ag.library_function_graph(g, "no_such_function") is None


def test_each_patch_is_undone_also_when_the_body_raises():
    from tflab._tf import autograph as ag

    # ag.operator_slots() reads TF's own slots (ag__.for_stmt/while_stmt/if_stmt of AutoGraph's
    # operator module, control_flow._py_for_stmt/_py_while_stmt/_py_if_stmt).
    before = ag.operator_slots()
    seen = []
    with pytest.raises(RuntimeError):
        with ag.counting_operators(lambda f, i, k: (lambda *a, **kw: f(*a, **kw)),
                                   lambda f, k: (lambda *a, **kw: f(*a, **kw))) as wrapped:
            inside = ag.operator_slots()
            seen.append((wrapped, [now is was for now, was in zip(inside, before)]))
            raise RuntimeError("inside")
    assert seen == [(True, [False] * 6)]  # every slot patched inside
    assert all(now is was for now, was in zip(ag.operator_slots(), before))  # and each put back
    cache = ag.allowlist_cache()  # conversion._ALLOWLIST_CACHE
    with pytest.raises(RuntimeError):
        with ag.fresh_allowlist():
            assert ag.allowlist_cache() is not cache
            raise RuntimeError("inside")
    assert ag.allowlist_cache() is cache
    assert tf.debugging.is_traceback_filtering_enabled()
    with pytest.raises(RuntimeError):
        with ag.full_tracebacks():
            assert not tf.debugging.is_traceback_filtering_enabled()
            raise RuntimeError("inside")
    assert tf.debugging.is_traceback_filtering_enabled()
    tf.debugging.disable_traceback_filtering()  # the user's own setting is kept as it was
    try:
        with ag.full_tracebacks():
            pass
        assert not tf.debugging.is_traceback_filtering_enabled()
    finally:
        tf.debugging.enable_traceback_filtering()


# ------------------------------------------------------------------ one record convention


def _check_report(r, kind: str, name: str | None):
    from tflab.report.base import Report

    assert isinstance(r, Report) and dataclasses.is_dataclass(r)
    text = repr(r)
    assert "\n" not in text and text.startswith(f"<{kind}") and text.endswith(">")
    if name is not None:
        assert r.function_name == name and text.startswith(f"<{kind} {name}")
    assert isinstance(r.to_text(), str) and r.to_text()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["config"]["tf_version"] == tf.__version__  # filled once, by the base
    return d


def test_diagnosis_autograph_diff_and_examples_follow_the_record_convention():
    from tflab import Examples, autograph_diff, diagnose

    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=DeprecationWarning, module="tflab")
        bad = diagnose(c.d7_branch_none, S([3]))
        diff = autograph_diff(c.healthy, S([None, 3]), S([], tf.int32))
        ex = Examples.of({"x": np.ones((4, 3), np.float32)})
    d = _check_report(bad, "Diagnosis", "d7_branch_none")
    assert d["function"] == d["function_name"] == "d7_branch_none"  # report.json's key kept
    assert d["kind"] == "branch-variable-undefined"
    assert bad.headline.startswith("branch-variable-undefined at cases.py:") and bad.fix in bad.headline
    a = _check_report(diff, "AutographDiff", "healthy")
    assert "function" not in a and set(a) >= {"function_name", "statements", "warnings", "strict"}
    assert isinstance(diff.table, str) and diff.table.splitlines()[0].split() == [
        "line", "kind", "outcome", "op", "unrolled", "source"]
    e = _check_report(ex, "Examples", None)
    assert (e["batch_count"], e["names"], e["batches"]) == (1, ["x"], [{"x": "float32[4,3]"}])
    assert ex.to_text().splitlines()[-1].split() == ["0", "x", "float32[4,3]"]
    # the old spellings are no fields: `.function` is served by the deprecation table (with a warning),
    # `.summary` is gone
    assert "function" not in {f.name for f in dataclasses.fields(bad)} | {f.name for f in dataclasses.fields(diff)}
    from tflab._api.deprecations import reset_warned

    reset_warned()  # each old name warns once per process
    with pytest.warns(DeprecationWarning, match="since 0.2.0"):
        assert bad.function == bad.function_name
    assert not hasattr(bad, "summary")
    assert not hasattr(ex, "describe") and not callable(diff.table)
