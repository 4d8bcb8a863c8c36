"""``import tflab.diagnose`` (a public function, not a module) answers with the import that works,
through one finder (`tflab._api.not_modules.NameNotModule`) for every public name of ``tflab`` and of
its package roots; real modules, old module paths and unknown names keep their own behaviour.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings

import pytest

import tflab


def _import_error(name):
    sys.modules.pop(name, None)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        return e
    return None


def test_import_of_tflab_diagnose_names_the_import_that_works():
    e = _import_error("tflab.diagnose")
    assert e is not None and e.name == "tflab.diagnose"
    assert str(e).startswith("No module named 'tflab.diagnose': diagnose is a public name of tflab (defined in "
                             "tflab.diagnosis), not a module; write `from tflab import diagnose`"), e


def test_every_public_name_that_is_not_a_module_answers_the_same_way():
    """Siblings: every name in ``tflab.__all__`` without a module of its own (``lower``, ``stabilize``,
    ``compare_modes``, …), and a package root's lazily loaded name (``tflab.lowering.GraphNode``)."""
    modules = {m.name for m in pkgutil.iter_modules(tflab.__path__)}
    names = [n for n in tflab.__all__ if n not in modules]
    assert {"diagnose", "lower", "stabilize", "compare_modes", "export_model"} <= set(names)
    for name in names:
        e = _import_error(f"tflab.{name}")
        assert e is not None and f"`from tflab import {name}`" in str(e), name
    importlib.import_module("tflab.lowering")
    e = _import_error("tflab.lowering.GraphNode")
    assert "defined in tflab.lowering.records" in str(e) and "`from tflab.lowering import GraphNode`" in str(e)


def test_real_modules_old_paths_and_unknown_names_are_unchanged():
    """Healthy twins: a module wins over a name (``tflab.export``, ``tflab.diagnosis``), an old module
    path still loads its new module with a warning, and a name tflab never had keeps Python's words."""
    assert importlib.import_module("tflab.export").__name__ == "tflab.export"
    assert importlib.import_module("tflab.diagnosis").diagnose is tflab.diagnose
    from tflab._api.deprecations import reset_warned

    sys.modules.pop("tflab.retrace_probe", None)
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            assert importlib.import_module("tflab.retrace_probe") is importlib.import_module("tflab.retrace")
    finally:  # each old name warns once per process: leave it unwarned for the tests that check the warning
        sys.modules.pop("tflab.retrace_probe", None)
        reset_warned()
    assert str(_import_error("tflab.no_such_thing")) == "No module named 'tflab.no_such_thing'"
    from tflab import diagnose  # noqa: F401  (the attribute: no import of a submodule)


def test_without_the_finder_the_message_is_pythons_bare_one(monkeypatch):
    """The check can fail: the finder taken off ``sys.meta_path`` gives the bare message back."""
    from tflab._api.not_modules import NameNotModule

    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, NameNotModule)])
    assert str(_import_error("tflab.diagnose")) == "No module named 'tflab.diagnose'"
