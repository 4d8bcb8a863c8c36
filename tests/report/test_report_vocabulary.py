"""One field vocabulary for every record of tflab (`tflab.report.base`).

* ``error`` is always a message: a str (or None), never a number;
* a number that measures a difference is an ``*_error`` (``max_abs_error``,
  ``max_rel_error``, ``worst_abs_error``, ``rms_error``) or an ``*_ulp``
  (``max_ulp``): no field or key named ``*diff*`` holds a number or a `Distance`;
* a name of that vocabulary (``*error*``, ``*ulp*``) means one kind of value
  everywhere: a number in one record and an object in another is two names
  (``ModeResult.ulp`` is the `Distance`, ``ModeResult.max_ulp`` its overall number).

The check reads the fields of every public dataclass defined in tflab (the
reports and the parts they hold), and the ``to_dict()`` keys of built records
(nested dicts included). Planted records with a float ``error``, a numeric
``max_abs_diff`` and a ``max_ulp`` object each fail it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil
import re
import sys
import types

import pytest

import tflab

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_report_convention import SKIP_MODULES  # noqa: E402

_NUMBER = re.compile(r"^(float|int|np\.floating|numbers\.Real)$")


def _kind_of_annotation(ann) -> str | None:
    """``"str"``, ``"number"``, ``"object"``, ``"list"``, ``"bool"`` from a field's annotation, else None."""
    text = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
    parts = {p.strip() for p in text.split("|")} - {"None"}
    if not parts:
        return None
    kinds = set()
    for p in parts:
        if p == "str":
            kinds.add("str")
        elif _NUMBER.match(p):
            kinds.add("number")
        elif p == "bool":
            kinds.add("bool")
        elif p.startswith(("dict", "Mapping", "Distance")):
            kinds.add("object")
        elif p.startswith(("tuple", "list", "Sequence")):
            kinds.add("list")
        else:
            return None  # Any, a record class, ...: not judged
    return kinds.pop() if len(kinds) == 1 else None


def _kind_of_value(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        # strict JSON writes non-finite floats as "nan"/"inf" (tflab.report.jsonable)
        return "number" if v in ("nan", "inf", "-inf") else "str"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "list"
    return None


def _in_vocabulary(name: str) -> bool:
    return "error" in name or "ulp" in name or "diff" in name


def problems(named_kinds: list[tuple[str, str, str | None]]) -> list[str]:
    """The vocabulary's breaks among ``(where, name, kind)`` triples (kind None: not judged)."""
    out = []
    seen: dict[str, dict[str, str]] = {}
    for where, name, kind in named_kinds:
        if kind is None:
            continue
        if name == "error" and kind != "str":
            out.append(f"{where}.error is a {kind}: `error` is a message (str); a number is max_abs_error, "
                       f"worst_abs_error, max_ulp, ...")
        if "diff" in name and kind in ("number", "object"):
            out.append(f"{where}.{name} holds a {kind}: a measured difference is *_error or *_ulp "
                       f"(max_abs_error, max_ulp)")
        if _in_vocabulary(name):
            seen.setdefault(name, {}).setdefault(kind, where)
    for name, kinds in sorted(seen.items()):
        if len(kinds) > 1:
            out.append(f"{name} means different things: " + ", ".join(
                f"{'an' if k[0] in 'aeiou' else 'a'} {k} in {w}" for k, w in sorted(kinds.items())))
    return out


def field_kinds(classes) -> list[tuple[str, str, str | None]]:
    return [(cls.__qualname__, f.name, _kind_of_annotation(f.type))
            for cls in classes for f in dataclasses.fields(cls) if not f.name.startswith("_")]


def dict_kinds(where: str, d, out=None) -> list[tuple[str, str, str | None]]:
    """Every ``(where, key, kind)`` of a ``to_dict()`` result, nested dicts and lists of dicts included."""
    out = [] if out is None else out
    if isinstance(d, dict):
        for k, v in d.items():
            if not isinstance(k, str) or k == "config":
                continue
            out.append((where, k, _kind_of_value(v)))
            dict_kinds(f"{where}.{k}", v, out)
    elif isinstance(d, list):
        for v in d:
            dict_kinds(where, v, out)
    return out


def _tflab_dataclasses() -> list[type]:
    found = {}
    for info in pkgutil.walk_packages(tflab.__path__, "tflab."):
        if info.name in SKIP_MODULES or info.name.rsplit(".", 1)[-1].endswith("_child"):
            continue
        mod = importlib.import_module(info.name)
        for obj in vars(mod).values():
            if inspect.isclass(obj) and obj.__module__ == mod.__name__ and dataclasses.is_dataclass(obj) \
                    and not obj.__name__.startswith("_"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


@pytest.fixture(scope="module")
def record_classes():
    return _tflab_dataclasses()


def test_every_record_field_follows_the_vocabulary(record_classes):
    from tflab.report.base import Report

    names = {c.__name__ for c in record_classes}
    # discovery works: the reports and the parts named in the issue are all read
    assert {"OpCheck", "OutputError", "ModeResult", "StabilizeReport", "OutputBits", "TFLiteCheck"} <= names
    assert sum(issubclass(c, Report) for c in record_classes) >= 25
    assert problems(field_kinds(record_classes)) == []


def _built_records() -> list:
    """Real records built from their constructors (no TF run): one of each kind that carries errors."""
    from tflab.litert.per_op import OpCheck, PerOpCheck
    from tflab.litert.records import OutputError
    from tflab.modes.records import Distance, ModeResult
    from tflab.retrace.log import ScriptTraces
    from tflab.saved_model import OutputBits
    from tflab.stabilization import StabilizeReport

    op = OpCheck(0, "FULLY_CONNECTED", "model/dense/MatMul", worst_abs_error=3e-3, bound=1e-2, ratio=0.3,
                 max_abs_error=4e-3, verdict="ok")
    per_op = PerOpCheck((op,), {}, 1, 0, 1, "builtin kernels", 0.1)
    out = OutputError("y", "float32", (-1, 5), max_abs_error=8.9e-05, max_rel_error=1e-4, max_ulp=9, bound=2e-4,
                      bound_ratio=0.6, argmax_agreement=1.0, reference_range=1.0, worst_abs_error=3.37e-05,
                      worst_bound=5.6e-05)
    mode = ModeResult("xla", None, None, Distance(2e-7, 1e-6), Distance(3, 12), 0.5, 0.01,
                      ulp_above_atol=Distance(1, 4))
    failed = ModeResult("xla", None, None, None, None, None, None, error="XlaRuntimeError: no kernel")
    stab = StabilizeReport("f", (), ("(2,)", "(3,)"), {}, max_abs_error=0.0)
    bits = OutputBits("y", "float32", (None, 5), False, 3, 2e-7, 4)
    script = ScriptTraces("s.py", (), error="ZeroDivisionError at s.py:3")
    return [op, per_op, out, mode, failed, stab, bits, script]


def test_the_dicts_of_built_records_follow_the_vocabulary():
    from tflab.report.jsonable import to_jsonable

    recs = _built_records()
    triples = []
    for r in recs:
        triples += dict_kinds(type(r).__name__, to_jsonable(r))  # to_dict() where it has one
    keys = {k for _, k, _ in triples}
    assert {"worst_abs_error", "max_abs_error", "max_ulp", "ulp", "abs_error", "error"} <= keys
    assert problems(triples) == []
    mode = recs[3]
    assert mode.max_ulp == 12.0 and mode.max_abs_error == pytest.approx(1e-6)  # the numbers of the Distances
    assert mode.to_dict()["max_ulp"] == 12.0 and mode.to_dict()["ulp"]["outputs"] == 3


def test_planted_records_that_break_the_vocabulary_fail_it():
    """The check can fail: a float `error`, a numeric `*diff*`, a `max_ulp` object beside a `max_ulp` int."""
    mod = types.ModuleType("tflab._planted_vocabulary")
    sys.modules[mod.__name__] = mod  # dataclasses reads the module of a string annotation
    code = '''
import dataclasses
from tflab.report.base import Report, config_field

@dataclasses.dataclass(repr=False)
class FloatError(Report):
    function_name: str
    error: float = 0.0
    config: dict = config_field()
    def to_text(self): return ""

@dataclasses.dataclass(repr=False)
class DiffNumber(Report):
    function_name: str
    max_abs_diff: float = 0.0
    config: dict = config_field()
    def to_text(self): return ""

@dataclasses.dataclass(repr=False)
class UlpObject(Report):
    function_name: str
    max_ulp: dict = dataclasses.field(default_factory=dict)
    config: dict = config_field()
    def to_text(self): return ""

@dataclasses.dataclass(repr=False)
class Healthy(Report):
    function_name: str
    error: str | None = None
    max_abs_error: float = 0.0
    max_ulp: int = 0
    config: dict = config_field()
    def to_text(self): return ""
'''
    try:
        exec(compile(code, "<planted>", "exec"), mod.__dict__)
    finally:
        del sys.modules[mod.__name__]
    from tflab.litert.records import OutputError

    healthy = [mod.Healthy, OutputError]
    assert problems(field_kinds(healthy)) == []
    bad = problems(field_kinds(healthy + [mod.FloatError]))
    assert bad == ["FloatError.error is a number: `error` is a message (str); a number is max_abs_error, "
                   "worst_abs_error, max_ulp, ...",
                   "error means different things: a number in FloatError, a str in Healthy"]
    assert any(p.startswith("DiffNumber.max_abs_diff holds a number") for p in
               problems(field_kinds(healthy + [mod.DiffNumber])))
    assert problems(field_kinds(healthy + [mod.UlpObject])) == [
        "max_ulp means different things: a number in Healthy, an object in UlpObject"]
    # the same from the built dicts
    h = dict_kinds("Healthy", mod.Healthy("f", error="boom").to_dict())
    assert problems(h) == []
    assert problems(h + dict_kinds("FloatError", mod.FloatError("f", 0.5).to_dict()))[0].startswith(
        "FloatError.error is a number")
    assert problems(h + dict_kinds("UlpObject", mod.UlpObject("f", {"outputs": 3}).to_dict())) == [
        "max_ulp means different things: a number in Healthy, an object in UlpObject"]
    # a nested record's key counts too (a list of dicts inside a dict)
    nested = dict_kinds("Outer", {"ops": [{"name": "a", "error": 1e-3}]})
    assert problems(nested) == ["Outer.ops.error is a number: `error` is a message (str); a number is "
                                "max_abs_error, worst_abs_error, max_ulp, ..."]


def test_a_stored_tour_expectation_reads_the_renamed_fields_under_their_new_names():
    """The tour's stored facts (written before the rename) still compare: a renamed key is the same key,
    a dropped one is still caught."""
    from tflab._tour.facts import compare_facts, current_path, report_facts

    assert current_path("modes.forward.modes.xla.max_abs_diff.outputs") == "modes.forward.modes.xla.abs_error.outputs"
    assert current_path("modes.gradients.modes.graph.max_ulp.gradients") == "modes.gradients.modes.graph.ulp.gradients"
    assert current_path("modes.forward.modes.xla.max_ulp_above_atol.outputs") == \
        "modes.forward.modes.xla.ulp_above_atol.outputs"
    assert current_path("stabilize.inference.max_abs_diff") == "stabilize.inference.max_abs_error"
    assert current_path("modes.gradients_grappler_off_max_ulp") == "modes.gradients_grappler_off_max_ulp"
    old = {"modes": {"forward": {"modes": {"xla": {"max_abs_diff": {"outputs": 1e-7, "gradients": 0.0},
                                                   "max_ulp": {"outputs": 3, "gradients": 0}, "error": None}}}},
           "stabilize": {"inference": {"max_abs_diff": 0.0}}}
    new = {"modes": {"forward": {"modes": {"xla": {"abs_error": {"outputs": 2e-7, "gradients": 0.0},
                                                   "ulp": {"outputs": 5, "gradients": 0}, "error": None,
                                                   "max_abs_error": 2e-7, "max_ulp": 5.0}}}},
           "stabilize": {"inference": {"max_abs_error": 0.0}}}
    assert compare_facts(new, report_facts(old)) == []
    del new["modes"]["forward"]["modes"]["xla"]["ulp"]
    assert compare_facts(new, report_facts(old)) == ["missing key modes.forward.modes.xla.ulp.gradients",
                                                     "missing key modes.forward.modes.xla.ulp.outputs"]
