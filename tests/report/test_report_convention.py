"""One record convention for every report class of tflab.

A report class is a class defined in tflab that subclasses `tflab.report.base.Report`,
or a dataclass with both ``to_text`` and ``to_dict``. Each one must:

* subclass `tflab.report.base.Report` and be a dataclass with a ``config`` field
  (`tflab.report.base.config_field()`, filled once when the report is made);
* have ``function_name`` (a field or property) when it is about a function;
  the classes that are about something else are listed in `NOT_ABOUT_A_FUNCTION`
  with what they are about;
* take no required argument in ``to_text()`` and ``to_dict()``;
* keep data in fields and properties: no other public method that can be called
  with no argument (``summary()``, ``capture_summary()``, ``counts()``: make them
  properties); exporters named ``to_*`` and ``summary_line`` are allowed;
* built, give a ``to_dict()`` that `json.dumps` accepts holding ``config`` (and
  ``function_name`` where it is about a function), and a one-line ``repr`` that
  starts with ``<ClassName``.

Other developers convert their classes in parallel: `PENDING_REPORTS` names the
classes not converted in this worktree (the lead empties it when merging). The
test fails for a class outside it that breaks the rule, and for a listed class
that already follows it (so the list cannot go stale).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
import sys
import types

import pytest

import tflab
from tflab.report.base import Report

# Class names (not module paths: modules move while the classes are converted).
PENDING_REPORTS: set[str] = set()

# Reports about something other than one function: what they are about.
NOT_ABOUT_A_FUNCTION: dict[str, str] = {
    "SavedModelCheck": "a saved object: its SavedModel folder, signature by signature",
    "Examples": "the user's example batches, normalized once and checked against SignatureDefs",
    "Attribution": "a quantized .tflite model's output error, shared out over its ops",
    "FloatTensors": "a float .tflite model's intermediate tensors against TF's of the same name",
    "Simulation": "a quantized .tflite model's tensors against the float model run with its quantization simulated",
    "TFLiteCheck": "a .tflite model, signature by signature",
    "ExportReport": "a model exported to a folder of variants",
    "PerOpCheck": "the ops of a .tflite model",
    "FloatInfo": "a floating-point dtype",
    "RetracingDemo": "TF's retracing triggers, measured on the lab's own functions",
    "ScriptTraces": "a script: every tf.function it traced, each named in its FunctionTraces",
}

# Not reports, though they have to_text/to_dict: what they are instead.
EXEMPT: dict[str, str] = {
    "RuntimeConfig": "it is the config: every report's config field is its to_dict()",
    "FloatInfo": "a float format's limits (numpy.finfo's fields): the same on every machine, not a measurement",
}

# Parts of a report: records a report holds many of; their parent carries config and the name.
PARTS: dict[str, str] = {
    "OpCheck": "one op of a PerOpCheck",
    "Trace": "one trace of a RetraceProbe or a FunctionTraces",
    "OutputError": "one output of a TFLiteCheck",
    "OpShare": "one op's share of an Attribution",
    "KeptFloat": "the kept-float re-conversion of an Attribution",
    "Fix": "one fix a report prints (tflab.fix): the report that prints it carries config and the name",
    "FixPlan": "the candidate fixes a report tried for one problem (tflab.fix)",
}

# Methods whose one parameter is a real option with a default, not data: what the option is.
METHODS_WITH_AN_OPTION: dict[str, str] = {
    "Fix.line": "label: the word the line starts with ('fix', 'also', ...)",
    "FixPlan.lines": "label: the word the fix line starts with",
}

# Modules that run something on import, and child-process entry points.
SKIP_MODULES = {"tflab.__main__", "tflab.distribute.child"}

ALLOWED_NO_ARG_METHODS = {"to_text", "to_dict", "summary_line",
                          # a validator, not data: raises UsageError, returns self for chaining
                          "check_rows"}


def _import_all() -> list[types.ModuleType]:
    mods = []
    for info in pkgutil.walk_packages(tflab.__path__, "tflab."):
        if info.name in SKIP_MODULES or info.name.rsplit(".", 1)[-1].endswith("_child"):
            continue
        mods.append(importlib.import_module(info.name))
    return mods


def is_report_class(cls: type) -> bool:
    if cls is Report or not cls.__module__.startswith("tflab"):
        return False
    if issubclass(cls, Report):
        return True
    return dataclasses.is_dataclass(cls) and callable(getattr(cls, "to_text", None)) \
        and callable(getattr(cls, "to_dict", None))


def report_classes(modules) -> list[type]:
    found: dict[str, type] = {}
    for mod in modules:
        for obj in vars(mod).values():
            if inspect.isclass(obj) and obj.__module__ == mod.__name__ and is_report_class(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


def _no_required_args(fn) -> bool:
    params = list(inspect.signature(fn).parameters.values())[1:]  # after self
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def class_problems(cls: type) -> list[str]:
    """What breaks the convention in the class itself (no instance needed)."""
    name = cls.__name__
    out = []
    if not issubclass(cls, Report):
        out.append("does not subclass tflab.report.base.Report")
    if not dataclasses.is_dataclass(cls):
        return out + ["is not a dataclass"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    part = name in PARTS
    if part:
        pass
    elif "config" not in fields:
        out.append("has no config field (config: dict = config_field())")
    elif not fields["config"].kw_only or fields["config"].default_factory is dataclasses.MISSING:
        out.append("config is not config_field() (keyword-only, filled when the report is made)")
    if not part and name not in NOT_ABOUT_A_FUNCTION and "function_name" not in fields \
            and not isinstance(inspect.getattr_static(cls, "function_name", None), property):
        out.append("has no function_name (or list it in NOT_ABOUT_A_FUNCTION with what it is about)")
    if "function" in fields and fields["function"].type in ("str", str):
        out.append("has a str field 'function': the name is function_name; function is only the callable")
    for meth in ("to_text", "to_dict"):
        if not _no_required_args(getattr(cls, meth)):
            out.append(f"{meth}() takes a required argument")
    for attr, value in vars(cls).items():
        if attr.startswith("_") or attr in ALLOWED_NO_ARG_METHODS or attr.startswith("to_"):
            continue
        if f"{name}.{attr}" in METHODS_WITH_AN_OPTION:
            continue
        if inspect.isfunction(value) and _no_required_args(value):
            out.append(f"{attr}() is a method that takes no argument: make it a property")
    if _dataclass_made_repr(cls):
        out.append("the dataclass writes __repr__: declare it with repr=False")
    return out


def _dataclass_made_repr(cls: type) -> bool:
    """True when the ``__repr__`` in the class body is the one `dataclasses` generated (its code is exec'd text)."""
    fn = vars(cls).get("__repr__")
    if fn is None:
        return False
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return code is not None and code.co_filename == "<string>"


def instance_problems(obj: Report) -> list[str]:
    """What breaks the convention in a built report: its dict and its repr."""
    name = type(obj).__name__
    out = []
    try:
        d = obj.to_dict()
        json.dumps(d, allow_nan=False)  # strict JSON, as tflab.report.jsonable writes it
    except Exception as e:  # noqa: BLE001 - any failure is the finding
        return [f"to_dict() is not JSON data: {type(e).__name__}: {e}"]
    if not isinstance(d.get("config"), dict) or not d["config"]:
        out.append("to_dict() holds no config dict")
    if name not in NOT_ABOUT_A_FUNCTION and not isinstance(d.get("function_name"), str):
        out.append("to_dict() holds no function_name str")
    r = repr(obj)
    if "\n" in r or not r.startswith(f"<{name}"):
        out.append(f"repr is not one line starting with <{name}: {r[:80]!r}")
    if not isinstance(obj.to_text(), str):
        out.append("to_text() is not a str")
    return out


# ------------------------------------------------------------------ small real instances

def _saved_model_check():
    from tflab.saved_model import OutputBits, SavedModelCheck, SignatureCheck, TensorInfo

    sig = SignatureCheck("serving_default", {"x": TensorInfo("x", "float32", (None, 64))},
                         {"y": OutputBits("y", "float32", (None, 64), True)})
    return SavedModelCheck(path="/tmp/sm", kind="tf.Module", bit_exact=True, signatures={"serving_default": sig},
                           batch_count=2, notes=("a note",))


FACTORIES = {"SavedModelCheck": _saved_model_check}


def _problems(classes, pending) -> dict[str, list[str]]:
    found = {}
    for cls in classes:
        if cls.__name__ in pending or cls.__name__ in EXEMPT:
            continue
        p = class_problems(cls)
        if not p and cls.__name__ in FACTORIES:
            p = instance_problems(FACTORIES[cls.__name__]())
        if p:
            found[f"{cls.__module__}.{cls.__qualname__}"] = p
    return found


@pytest.fixture(scope="module")
def classes():
    return report_classes(_import_all())


def test_every_report_class_follows_the_record_convention(classes):
    names = {c.__name__ for c in classes}
    assert {"SavedModelCheck", "TraceReport", "ModeComparison", "TFLiteCheck"} <= names  # discovery works
    bad = _problems(classes, PENDING_REPORTS)
    assert not bad, "report classes that break the convention (tflab/report/base.py):\n" + "\n".join(
        f"{k}: {'; '.join(v)}" for k, v in bad.items())


def test_the_pending_list_is_current(classes):
    """A listed class that is gone, or already follows the convention, is taken off the list."""
    by_name = {c.__name__: c for c in classes}
    gone = sorted(PENDING_REPORTS - set(by_name))
    done = sorted(n for n in PENDING_REPORTS & set(by_name) if not class_problems(by_name[n]))
    assert not gone, f"PENDING_REPORTS names classes that no longer exist: {gone}"
    assert not done, f"no longer pending (they follow the convention), remove from PENDING_REPORTS: {done}"


def test_every_converted_report_is_built_and_checked(classes):
    """Each converted class with a factory is checked as an instance too; the factories build real ones."""
    converted = [c for c in classes if c.__name__ not in PENDING_REPORTS and c.__name__ not in EXEMPT]
    assert "SavedModelCheck" in {c.__name__ for c in converted}
    for cls in converted:
        if cls.__name__ in FACTORIES:
            obj = FACTORIES[cls.__name__]()
            assert type(obj) is cls and instance_problems(obj) == []


def test_a_planted_class_that_breaks_the_rule_fails_the_check():
    """The check can fail: planted report classes, in a planted tflab module, each caught for what it breaks."""
    mod = types.ModuleType("tflab._planted_reports")
    sys.modules[mod.__name__] = mod
    try:
        code = '''
import dataclasses
from tflab.report.base import Report, config_field

@dataclasses.dataclass
class OldStyle:                       # not a Report, no config, name as .function, summary() method
    function: str
    def summary(self): return "x"
    def to_text(self, verbose): return ""
    def to_dict(self): return {}

@dataclasses.dataclass(repr=False)
class NoConfig(Report):
    function_name: str
    def to_text(self): return ""

@dataclasses.dataclass
class DataclassRepr(Report):          # the dataclass's own multi-field repr
    function_name: str
    config: dict = config_field()
    def to_text(self): return ""

@dataclasses.dataclass
class CustomRepr(Report):             # its own one-line __repr__: the dataclass keeps it
    function_name: str
    config: dict = config_field()
    def __repr__(self): return f"<CustomRepr {self.function_name}>"
    def to_text(self): return ""

@dataclasses.dataclass(repr=False)
class Healthy(Report):
    function_name: str
    passed: bool
    config: dict = config_field()
    @property
    def verdict(self): return "ok" if self.passed else "FAILED"
    def summary_line(self): return self.verdict
    def to_text(self): return f"{self.function_name}: {self.verdict}"
'''
        exec(compile(code, "<planted>", "exec"), mod.__dict__)
        for c in ("OldStyle", "NoConfig", "DataclassRepr", "CustomRepr", "Healthy"):
            getattr(mod, c).__module__ = mod.__name__
        classes = report_classes([mod])
        assert [c.__name__ for c in classes] == ["CustomRepr", "DataclassRepr", "Healthy", "NoConfig", "OldStyle"]
        bad = _problems(classes, pending=set())
        old = bad["tflab._planted_reports.OldStyle"]
        assert "does not subclass tflab.report.base.Report" in old
        assert any(p.startswith("has no config field") for p in old)
        assert any(p.startswith("has no function_name") for p in old)
        assert any("str field 'function'" in p for p in old)
        assert "to_text() takes a required argument" in old
        assert "summary() is a method that takes no argument: make it a property" in old
        assert any(p.startswith("has no config field") for p in bad["tflab._planted_reports.NoConfig"])
        assert bad["tflab._planted_reports.DataclassRepr"] == [
            "the dataclass writes __repr__: declare it with repr=False"]
        assert "tflab._planted_reports.Healthy" not in bad and "tflab._planted_reports.CustomRepr" not in bad
        assert instance_problems(mod.CustomRepr("g")) == []
        # pending, a broken class is let through; the healthy one is an instance that passes too
        assert _problems(classes, pending={"OldStyle", "NoConfig", "DataclassRepr"}) == {}
        h = mod.Healthy("step", True)
        assert instance_problems(h) == [] and repr(h) == "<Healthy step: ok>"
        assert h.to_dict()["function_name"] == "step" and h.to_dict()["config"]["tf_version"]
        # an instance whose dict is not JSON data, or whose repr spans lines, is caught
        mod.Healthy.to_dict = lambda self: {**Report.to_dict(self), "ulps": {1, 2}}  # a set: not JSON
        assert instance_problems(h)[0].startswith("to_dict() is not JSON data")
        mod.Healthy.to_dict = lambda self: {**Report.to_dict(self), "max_ulp": float("nan")}  # not strict JSON
        assert instance_problems(h)[0].startswith("to_dict() is not JSON data")
        mod.Healthy.to_dict = lambda self: {k: v for k, v in Report.to_dict(self).items() if k != "config"}
        assert instance_problems(h) == ["to_dict() holds no config dict"]
        del mod.Healthy.to_dict
        mod.Healthy.summary_line = lambda self: "two\nlines"
        assert any(p.startswith("repr is not one line") for p in instance_problems(mod.Healthy("f", True)))
    finally:
        del sys.modules[mod.__name__]
