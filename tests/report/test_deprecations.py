"""Renamed public names keep working for two releases through one table (tflab/_api/deprecations.py).

Each old record field, top-level name and module path gives the new one's value and
warns once with the table's sentence; an unknown name is still an AttributeError.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import warnings

import pytest

import tflab
from tflab._api import deprecations as dep

# Where each record class of the table lives (the test fails when the table names another one).
RECORDS = {
    "ModeResult": "tflab.modes.records", "ModeComparison": "tflab.modes.records",
    "StabilizeReport": "tflab.stabilization", "OutputBits": "tflab.saved_model.records",
    "SavedModelCheck": "tflab.saved_model.records", "OpCheck": "tflab.litert.records.ops",
    "LossScalingDemo": "tflab.precision.records", "PrecisionComparison": "tflab.precision.records",
    "AutographDiff": "tflab.autograph", "Diagnosis": "tflab.diagnosis.records",
    "FunctionTraces": "tflab.retrace.records", "NameGroup": "tflab.retrace.log",
    "ReplicaRun": "tflab.distribute.probe",
}


def _record_class(name: str) -> type:
    return getattr(importlib.import_module(RECORDS[name]), name)


def _bare(cls: type, field: str, value: object):
    """An instance of ``cls`` holding only ``field`` (the deprecation hook reads nothing else)."""
    obj = object.__new__(cls)
    object.__setattr__(obj, field, value)
    return obj


@pytest.fixture(autouse=True)
def _fresh_warnings():
    dep.reset_warned()
    yield
    dep.reset_warned()


@pytest.mark.parametrize("d", dep.FIELDS, ids=lambda d: d.old)
def test_an_old_field_gives_the_new_fields_value_and_warns_once(d):
    cls_name, old = d.old.split(".")
    new = d.new.split(".")[1]
    cls = _record_class(cls_name)
    assert new in {f.name for f in dataclasses.fields(cls)}, f"{d.new} is no field of {cls_name}"
    assert old not in {f.name for f in dataclasses.fields(cls)} and not hasattr(cls, old)
    value = object()
    obj = _bare(cls, new, value)
    with pytest.warns(DeprecationWarning) as record:
        assert getattr(obj, old) is value
    assert [str(w.message) for w in record] == [
        f"{cls_name}.{old} is {cls_name}.{new} since 0.2.0; the old name goes in 0.4.0"]
    assert record[0].filename == __file__  # the warning points at the line that read the old name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(obj, old) is value  # once: the second read is quiet


def test_the_issues_sentence_for_a_mode_result():
    from tflab.modes.records import Distance, ModeResult

    r = _bare(ModeResult, "abs_error", Distance(outputs=1e-7, gradients=3e-7))
    with pytest.warns(DeprecationWarning, match=r"^ModeResult\.max_abs_diff is ModeResult\.abs_error since "
                                                r"0\.2\.0; the old name goes in 0\.4\.0$"):
        old = r.max_abs_diff
    assert old.outputs == 1e-7 and float(old) == 3e-7  # the same Distance: parts and overall number


def test_a_name_in_no_table_is_still_an_attribute_error():
    """Healthy twin: the hook answers only the table's names, with Python's own message."""
    from tflab.modes.records import ModeResult
    from tflab.stabilization import StabilizeReport

    for cls, name in ((ModeResult, "max_abs_difff"), (StabilizeReport, "function"), (ModeResult, "error_")):
        obj = _bare(cls, "mode", "graph")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(AttributeError, match=f"object has no attribute '{name}'"):
                getattr(obj, name)
    assert not hasattr(tflab, "no_such_name")


@pytest.mark.parametrize("d", dep.NAMES, ids=lambda d: d.old)
def test_an_old_top_level_name_gives_the_new_object(d):
    package, _, name = d.old.rpartition(".")
    module, _, attr = d.new.rpartition(".")
    with pytest.warns(DeprecationWarning, match=d.message.replace(".", r"\.")):
        got = getattr(importlib.import_module(package), name)
    assert got is getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("d", dep.MODULES, ids=lambda d: d.old)
def test_an_old_module_path_imports_the_module_that_holds_its_names(d):
    sys.modules.pop(d.old, None)
    with pytest.warns(DeprecationWarning) as record:
        mod = importlib.import_module(d.old)
    assert mod is importlib.import_module(d.new)
    assert [str(w.message) for w in record if "since 0.2.0" in str(w.message)] == [d.message]
    sys.modules.pop(d.old, None)


def test_a_real_module_wins_over_the_alias_finder():
    """Healthy twin: a module that exists is imported as is, with no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module("tflab.litert.check").__name__ == "tflab.litert.check"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tflab.retrace_nonexistent")


def test_to_dict_keys_are_listed_and_an_old_document_reads_with_todays_keys():
    assert {d.old for d in dep.KEYS} >= {"ModeResult.to_dict()['max_abs_diff']",
                                         "OpCheck.to_dict()['max_error']"}
    old = {"function_name": "f", "max_abs_diff": 0.25, "variants": []}
    assert dep.renamed_keys("StabilizeReport", old) == {"function_name": "f", "max_abs_error": 0.25,
                                                        "variants": []}
    assert dep.renamed_keys("TraceReport", old) == old  # a record with no renamed key


def test_every_entry_warns_with_one_sentence_and_goes_in_a_later_release():
    olds = [d.old for d in dep.TABLE]
    assert len(olds) == len(set(olds))
    for d in dep.TABLE:
        assert d.kind in ("field", "name", "module", "key")
        assert tuple(map(int, d.removal.split("."))) > tuple(map(int, d.since.split(".")))
        assert d.message == f"{d.old} is {d.new} since {d.since}; the old name goes in {d.removal}"
    assert set(RECORDS) == {d.old.split(".")[0] for d in dep.FIELDS}
