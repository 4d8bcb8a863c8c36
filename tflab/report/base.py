"""The one record convention of tflab's report objects.

Every report (TraceReport, ModeComparison, TFLiteCheck, ...) is a dataclass that
mixes in `Report` and follows one convention:

* ``function_name`` (a str) names the function it is about; ``function`` is only
  ever the callable itself;
* ``config`` is `tflab.runtime_config()`'s dict, filled once when the report is
  made (declare it with `config_field()`);
* data are properties or fields, never methods;
* ``to_text()`` and ``to_dict()`` take no required argument; ``to_dict()`` is
  derived from the dataclass fields (names starting with ``_`` and fields with
  ``metadata={"dict": False}`` are left out) plus the names in ``DICT_PROPERTIES``;
* ``repr()`` is one line, ``<Kind function_name: summary>``, from ``summary_line()``;
* one field vocabulary (tests/report/test_report_vocabulary.py): ``error`` is always a message
  (a str, or None); a measured difference is a number named ``*_error``
  (``max_abs_error``, ``max_rel_error``, ``worst_abs_error``: the ``|Δ|`` at the element
  with the worst ``|Δ|/bound``, ``rms_error``) or ``*_ulp`` (``max_ulp``), never ``*diff*``;
  a name means one kind of value in every record (``ModeResult.ulp`` is the `Distance`
  split by outputs and gradients, ``ModeResult.max_ulp`` its overall number);
* ``_repr_html_()`` (Jupyter's rich display) is written once, here (`HtmlDisplay`): the
  fragment of the renderer its lab package registered with
  `tflab.report.html.dispatch.renders`, else its ``to_text()``.

Declare the dataclass with ``repr=False`` so the dataclass machinery keeps this
``__repr__``.

Example:
    >>> @dataclasses.dataclass(repr=False)
    ... class Check(Report):
    ...     function_name: str
    ...     passed: bool
    ...     config: dict = config_field()
    ...     def summary_line(self): return "passed" if self.passed else "FAILED"
    ...     def to_text(self): return f"{self.function_name}: {self.summary_line()}"
    >>> Check("f", True)
    <Check f: passed>
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, ClassVar

from tflab._api.deprecations import record_getattr

__all__ = ["HtmlDisplay", "Report", "config_field", "current_config"]

# The variables that change what runtime_config() reports within one process.
_CONFIG_ENV = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA", "XLA_FLAGS", "TFLAB_WARP_SOFTMAX_ISA",
               "CUDA_VISIBLE_DEVICES", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


@functools.lru_cache(maxsize=8)
def _config_for(_env: tuple) -> dict:
    from tflab.runtime import runtime_config

    return runtime_config().to_dict()


def current_config() -> dict:
    """`tflab.runtime_config()`'s dict for this process, read once per environment.

    Returns:
        A new dict each call (callers may keep it on a report); the reading behind
        it is cached while the environment variables that change it stay the same.
    """
    return dict(_config_for(tuple(os.environ.get(k) for k in _CONFIG_ENV)))


def config_field() -> Any:
    """A keyword-only dataclass field ``config`` filled with `current_config()` when the report is made."""
    return dataclasses.field(default_factory=current_config, kw_only=True, compare=False)


class HtmlDisplay:
    """Mixin: Jupyter's rich display (``_repr_html_``) for every record a notebook shows.

    `Report` has it; a record that is not a report (`tflab.RetraceProbe`, a
    wrapper around the user's function) mixes it in directly. The fragment is
    the one the ``--html`` pages use: `tflab.report.html.dispatch.fragment`.
    """

    def _repr_html_(self) -> str:
        """Jupyter's rich display (``IPython.core.formatters.HTMLFormatter``): the fragment of the pages."""
        from tflab.report.html.dispatch import fragment

        return fragment(self)


class Report(HtmlDisplay):
    """Mixin for report dataclasses; see the module docstring for the convention."""

    DICT_PROPERTIES: ClassVar[tuple[str, ...]] = ()

    # An old field name (``ModeComparison.function``) gives the new field's value and warns once:
    # the one table of renamed names is tflab/_api/deprecations.py.
    __getattr__ = record_getattr

    def summary_line(self) -> str:
        """One short phrase for ``repr()``; subclasses override it."""
        return ""

    def to_text(self) -> str:
        """The report as text, for a terminal."""
        raise NotImplementedError(f"{type(self).__name__} must define to_text()")

    def to_dict(self) -> dict:
        """The report as JSON-ready data: its dataclass fields plus ``DICT_PROPERTIES``."""
        from tflab.report.jsonable import to_jsonable

        out = {}
        for f in dataclasses.fields(self):
            if f.name.startswith("_") or not f.metadata.get("dict", True):
                continue
            out[f.name] = to_jsonable(getattr(self, f.name))
        for name in self.DICT_PROPERTIES:
            out[name] = to_jsonable(getattr(self, name))
        return out

    def __repr__(self) -> str:
        name = getattr(self, "function_name", "") or ""
        summary = self.summary_line()
        head = f"{type(self).__name__} {name}".rstrip()
        return f"<{head}: {summary}>" if summary else f"<{head}>"
