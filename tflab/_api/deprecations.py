"""The one table of public names renamed since 0.1.0, and the hooks that serve them with a warning.

A script written against an earlier tflab keeps running: an old record field, an
old top-level name or an old module path gives the new one's value and warns
once, with the same sentence everywhere::

    DeprecationWarning: ModeResult.max_abs_diff is ModeResult.abs_error since 0.2.0; the old name goes in 0.4.0

Like JAX's ``jax/_src/deprecations.py`` with its module ``__getattr__``, the old
names live in this table only, never in facade modules or alias properties:

* record fields: `record_getattr` is the ``__getattr__`` of `tflab.report.base.Report`
  and of the records that are not reports (`deprecated_fields` adds it);
* top-level names of ``tflab``: `name_getattr`, called by ``tflab.__getattr__``;
* module paths (``import tflab.retrace_probe``): `ModuleAliases`, a `sys.meta_path`
  finder that ``tflab/__init__.py`` installs, hands out the new module;
* ``to_dict()`` keys: a dict has no ``__getattr__``; the table lists each renamed key
  (`KEYS`) so docs/api-stability.md and CHANGELOG.md name them, and `renamed_keys`
  rewrites an old JSON document's keys for a reader that wants them.

An entry is removed in its ``removal`` release; the API golden test
(tests/house/test_api_golden.py) refuses a name that leaves the public surface
without an entry here and a line in CHANGELOG.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

__all__ = ["Deprecation", "FIELDS", "NAMES", "MODULES", "KEYS", "TABLE", "record_getattr", "name_getattr",
           "deprecated_fields", "ModuleAliases", "install_module_aliases", "renamed_keys", "reset_warned"]


@dataclasses.dataclass(frozen=True)
class Deprecation:
    """One renamed public name.

    Attributes:
        old: the name as an earlier release spelled it (``"ModeResult.max_abs_diff"``,
            ``"tflab.retrace_probe"``).
        new: the name that serves it now.
        kind: ``"field"`` (a record attribute), ``"name"`` (a top-level name of a
            package), ``"module"`` (a module path) or ``"key"`` (a ``to_dict()`` key).
        since: the release that renamed it.
        removal: the release in which the old name stops working.
    """

    old: str
    new: str
    kind: str
    since: str = "0.2.0"
    removal: str = "0.4.0"

    @property
    def message(self) -> str:
        """The one warning sentence."""
        return f"{self.old} is {self.new} since {self.since}; the old name goes in {self.removal}"


def _fields(cls: str, renames: dict[str, str]) -> list[Deprecation]:
    return [Deprecation(f"{cls}.{old}", f"{cls}.{new}", "field") for old, new in renames.items()]


# Record fields, by class name: old attribute -> the attribute that holds the same value now.
# ModeResult.max_abs_diff was a `Distance` (outputs, gradients); `abs_error` is that Distance
# (``float()`` of it is ``max_abs_error``), so ``.outputs`` and comparisons keep working.
FIELDS: tuple[Deprecation, ...] = tuple(
    _fields("ModeResult", {"max_abs_diff": "abs_error", "max_ulp_above_atol": "ulp_above_atol"})
    + _fields("StabilizeReport", {"max_abs_diff": "max_abs_error"})
    + _fields("OutputBits", {"max_abs_diff": "max_abs_error"})
    + _fields("OpCheck", {"error": "worst_abs_error", "max_error": "max_abs_error"})
    + _fields("SavedModelCheck", {"examples": "example_batches"})
    + _fields("LossScalingDemo", {"configuration": "config"})
    + [d for cls in ("AutographDiff", "Diagnosis", "FunctionTraces", "ModeComparison", "NameGroup",
                     "PrecisionComparison", "ReplicaRun")
       for d in _fields(cls, {"function": "function_name"})]
)

# Top-level names: old dotted name -> the object's dotted path now.
NAMES: tuple[Deprecation, ...] = (
    # stabilization_report raises UsageError with the diagnosis where DiagnosedError was planned
    Deprecation("tflab.DiagnosedError", "tflab.UsageError", "name"),
)

# Module paths: old module -> the module (or package root) that holds its public names now.
MODULES: tuple[Deprecation, ...] = tuple(
    Deprecation(old, new, "module") for old, new in {
        "tflab.retrace_reasons": "tflab.retrace",
        "tflab.retrace_probe": "tflab.retrace",
        "tflab.retrace_log": "tflab.retrace",
        "tflab.retrace_expect": "tflab.retrace",
        "tflab.retrace_demo": "tflab.retrace",
        "tflab.litert_convert": "tflab.litert",
        "tflab.litert_bounds": "tflab.litert",
        "tflab.litert_check": "tflab.litert",
        "tflab.litert_nan": "tflab.litert.nan",
        "tflab.litert_ops": "tflab.litert.ops",
        "tflab.litert_per_op": "tflab.litert.per_op",
        "tflab.litert_pool": "tflab.litert.pool",
        "tflab.litert_reference": "tflab.litert.references",
        "tflab.litert.result": "tflab.litert.records",
        "tflab.diagnosis.record": "tflab.diagnosis.records",
        "tflab.diagnosis_fixes": "tflab.diagnosis.fixes",
        "tflab.distribute_user": "tflab.distribute.user",
        "tflab.float_formats": "tflab.precision.float_formats",
    }.items())

# to_dict() keys: the dict of a record names its fields, so each field rename renamed its key.
KEYS: tuple[Deprecation, ...] = tuple(
    Deprecation(f"{d.old.split('.')[0]}.to_dict()['{d.old.split('.')[1]}']",
                f"{d.new.split('.')[0]}.to_dict()['{d.new.split('.')[1]}']", "key")
    for d in FIELDS)

TABLE: tuple[Deprecation, ...] = FIELDS + NAMES + MODULES + KEYS

_FIELD_BY = {tuple(d.old.split(".")): d for d in FIELDS}
_NAME_BY = {d.old: d for d in NAMES}
_MODULE_BY = {d.old: d for d in MODULES}
_warned: set[str] = set()


def _warn(d: Deprecation, stacklevel: int) -> None:
    if d.old not in _warned:
        _warned.add(d.old)
        warnings.warn(d.message, DeprecationWarning, stacklevel=stacklevel + 1)


def reset_warned() -> None:
    """Forgets which old names warned (each warns once per process), for tests."""
    _warned.clear()


def record_getattr(self: Any, name: str) -> Any:
    """``__getattr__`` of a record: an old field name gives the new field's value and warns once.

    Raises:
        AttributeError: ``name`` is no old field of this record's class (or of a base class).
    """
    for klass in type(self).__mro__:
        d = _FIELD_BY.get((klass.__name__, name))
        if d is not None:
            _warn(d, stacklevel=2)
            return getattr(self, d.new.split(".")[1])
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def deprecated_fields(cls: type) -> type:
    """Class decorator: the record serves its old field names from `FIELDS`."""
    cls.__getattr__ = record_getattr
    return cls


def name_getattr(package: str, name: str) -> Any:
    """An old top-level name of ``package`` (``tflab.DiagnosedError``): the new object, warned once.

    Raises:
        AttributeError: ``package.name`` is no old name.
    """
    d = _NAME_BY.get(f"{package}.{name}")
    if d is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(d, stacklevel=3)
    module, _, attr = d.new.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def old_module(package: str, name: str) -> Any:
    """``tflab.retrace_probe`` read as an attribute of ``tflab``: the new module, warned once, or None."""
    d = _MODULE_BY.get(f"{package}.{name}")
    if d is None:
        return None
    _warn(d, stacklevel=3)
    return importlib.import_module(d.new)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, d: Deprecation):
        self.d = d

    def create_module(self, spec):
        _warn(self.d, stacklevel=2)  # importlib's own frames are skipped: the warning names the import line
        return importlib.import_module(self.d.new)

    def exec_module(self, module) -> None:
        return None


class ModuleAliases(importlib.abc.MetaPathFinder):
    """Finds the old module paths of `MODULES`: ``import tflab.retrace_probe`` gives ``tflab.retrace``."""

    def find_spec(self, fullname, path=None, target=None):
        d = _MODULE_BY.get(fullname)
        if d is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(d))


def install_module_aliases() -> None:
    """Puts one `ModuleAliases` finder on `sys.meta_path` (at its end: a real module always wins)."""
    if not any(isinstance(f, ModuleAliases) for f in sys.meta_path):
        sys.meta_path.append(ModuleAliases())


def renamed_keys(record_class: str, doc: dict) -> dict:
    """``doc`` (a ``to_dict()`` of ``record_class`` written by an earlier release) with today's keys.

    Example:

    >>> renamed_keys("StabilizeReport", {"max_abs_diff": 0.5})
    {'max_abs_error': 0.5}
    """
    renames = {d.old.split(".")[1]: d.new.split(".")[1] for d in FIELDS if d.old.split(".")[0] == record_class}
    return {renames.get(k, k): v for k, v in doc.items()}
