"""The Python state a `RetraceProbe`'s body reads: what is watched, replayed, and the fixes run on it.

A mixin of `tflab.retrace.probe.RetraceProbe`: which globals, closure cells and
attributes of ``self`` (and of plain objects ``self`` holds) the body reads or
writes (`tflab.retrace.values.World` slots; the stale watch's candidates), the
recorded calls' values with eager's outputs on them (``_case_values``), and the
two records whose fixes run on them: `rebinds` (a line that rebinds a
tf.Variable's name) and `stale` (a value baked into the graph, then replaced).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

from tflab._tf import function as _tf
from tflab.retrace.sideeffects import global_writes
from tflab.retrace.stale import StaleRead, attribute_reads, cell_stores, closure_cells, code_names
from tflab.retrace.values import attr_slot, cell_slot, global_slot


class StateWatch:
    """What `RetraceProbe` knows of the state its body reads (its attributes are the probe's)."""

    def _stale_candidates(self) -> tuple[list[str], list[tuple[str, Any]]]:
        fn = self._user_fn
        code = getattr(fn, "__code__", None)
        if code is None:
            return [], []
        globs = getattr(fn, "__globals__", {})
        # A global the body itself writes (`global TRACES; TRACES += 1`) is the
        # user's own trace counter: it changes because the body ran, it is not
        # a value the graph read and kept.
        written = global_writes(code)
        gnames = sorted(n for n in code_names(code) if n in globs and n not in written)
        rebound = cell_stores(code)
        for n in sorted(n for n in code_names(code) if n in globs):
            self._world.add(global_slot(globs, n, n in written))
        for n, cell in closure_cells(fn):
            self._world.add(cell_slot(n, cell, n in rebound))
        # a cell the body rebinds (`nonlocal c; c = c + x`) is its own state, not a value it read and kept
        return gnames, [(n, c) for n, c in closure_cells(fn) if n not in rebound]

    def _instance(self) -> Any:
        """The object a method's ``self`` is (a bound method, a tf.function method, a callable object), or None."""
        fn = self._python_fn
        obj = getattr(fn, "__self__", None)
        if obj is None and self.original is not None:
            obj = _tf.method_instance(self.original)  # a method decorated in its class
        if obj is None and not isinstance(fn, (types.FunctionType, types.MethodType)):
            obj = fn  # a callable object: its __call__ reads self
        return obj

    def _attribute_candidates(self) -> list[tuple[str, Any, str, bool]]:
        obj = self._instance()
        found = attribute_reads(obj, self._user_fn) if obj is not None else []
        for label, owner, attr, written in found:
            self._world.add(attr_slot(label, owner, attr, written))
        return [f for f in found if not f[3]]

    def _case_values(self) -> Any:
        """The recorded calls' values, the state they ran with, and eager's outputs on them (made once per call count)."""
        from tflab.retrace.values import CaseValues

        if getattr(self, "_cases", (None, -1))[1] != self.calls:
            self._cases = (CaseValues(self._python_fn, self._values, self._world), self.calls)
        return self._cases[0]

    @property
    def rebinds(self) -> list:
        """`tflab.retrace.statefix.Rebind` records: a line of the body that rebinds a tf.Variable's name.

        ``global v; v = v + x`` (or ``nonlocal``, or ``self.v = self.v + x``) turns the
        name into a tensor of the FuncGraph at the first trace: the Variable is no
        longer read, and the next trace fails ("out of scope") or a cached call
        computes from the Variable's old value. Each record names the line and its
        fix (``v.assign_add(x)``), run on your calls and compared with eager.
        """
        if not self.calls:
            return []
        key = ("rebinds", self.calls)
        if self._memo.get("rebinds_key") != key:
            from tflab.retrace.statefix import find_rebinds

            self._memo["rebinds"] = find_rebinds(self._python_fn, self._user_fn, self._world, self._case_values(),
                                                 self.trace_count, instance=self._instance())
            self._memo["rebinds_key"] = key
        return self._memo["rebinds"]

    @property
    def stale(self) -> list[StaleRead]:
        """`StaleRead` records, oldest first, each with its fix run on your calls (`StaleRead.plan`)."""
        key = (len(self._stale), self.calls)
        if self._stale and self._stale_key != key and not self._recording:
            from tflab.retrace.statefix import stale_plan

            vals = self._case_values()
            self._stale = [dataclasses.replace(s, plan=stale_plan(s, vals, self._python_fn, self.trace_count))
                           for s in self._stale]
            self._stale_key = key
        return self._stale

