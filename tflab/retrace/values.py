"""The argument values of each call through the probe, the Python state the body reads, and eager's outputs.

A retrace fix is "checked" only when the symptom is gone AND the fixed
function's outputs equal the ORIGINAL function's eager outputs on every
recorded call (`tflab.fix.values_match`). This module keeps what that needs:

* `ValueLog`: each call's arguments, as passed (an EagerTensor is immutable,
  so it is kept by reference: the same as a copy, at no cost on the call;
  a NumPy array is copied; Python values as they are), up to a budget in
  bytes and calls. Past it, nothing more is kept and every check says
  `tflab.fix.VALUES_NOT_KEPT`.
* `World`: the Python state the body reads and may write (globals, closure
  cells, attributes of ``self`` and of objects it holds): its value at the
  first call, the changes the user made between calls (seen by the probe's
  stale watch, by identity), and the tf.Variables' values at the first call.
  `World.replay` runs a function over the recorded calls from that state,
  then puts every name and variable back as it found it.
* `CaseValues`: the reference (the original Python function run eagerly
  over the recorded calls, every nested tf.function run eagerly too,
  computed once, before any candidate) and the run of a candidate on the
  same calls and state, compared with `values_match`.

Replaying re-runs the user's code: it happens only inside the check
callables passed to `tflab.fix.attempt` (so it runs wherever ``attempt`` runs
its checks), never on a call through the probe.
"""

from __future__ import annotations

import inspect
import re
import weakref
from typing import Any, Callable, Mapping, Sequence

from tflab import fix as fx
from tflab._tf import function as _tf
from tflab.retrace.world import (MISSING, STATE_BYTES, Raised, World, as_numpy, attr_slot, cell_slot,  # noqa: F401
                                 global_slot, is_variable)

__all__ = ["ValueLog", "World", "CaseValues", "VALUE_BYTES", "VALUE_CALLS", "STATE_BYTES"]

# What the probe keeps of the user's arguments, at most (beyond: "traces only, values not kept").
VALUE_BYTES = 64 << 20
VALUE_CALLS = 10_000
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_EAGER: list = [None]   # TF's EagerTensor class, once seen


class _Unkept(Exception):
    pass


def _kept(v: Any) -> tuple[Any, int]:
    """(what to keep of one argument, its bytes)."""
    t = type(v)
    if t is _EAGER[0]:  # the common case first: a cached call's tensors
        return v, _tf.eager_nbytes(v)
    if t in _SCALAR_TYPES:
        return v, 8
    if t.__name__ == "EagerTensor":
        _EAGER[0] = t
        return v, _tf.eager_nbytes(v)
    if t is tuple or t is list:
        out, n = [], 0
        for x in v:
            k, b = _kept(x)
            out.append(k)
            n += b
        return t(out), n
    if t is dict:
        out_d, n = {}, 0
        for key, x in v.items():
            k, b = _kept(x)
            out_d[key] = k
            n += b
        return out_d, n
    if (t.__module__ or "") == "numpy":
        import numpy as np

        a = np.array(v, copy=True)
        return a, int(a.nbytes)
    # A tf.Variable, a Keras model, a dataclass, a function...: a weak reference, so the probe never
    # keeps alive an object TF keys its cache on (a collected object is what makes TF trace again).
    try:
        return _Ref(v), 64
    except TypeError:  # not weakly referenceable: TF cannot key on it weakly either
        return v, 64


class _Ref:
    __slots__ = ("ref",)

    def __init__(self, v: Any):
        self.ref = weakref.ref(v)


class Gone(Exception):
    """An object a recorded call passed has been garbage-collected: that call cannot be run again."""


def _live(v: Any, call: int) -> Any:
    t = type(v)
    if t is _Ref:
        obj = v.ref()
        if obj is None:
            raise Gone(f"the object call {call} passed has been garbage-collected")
        return obj
    if t is tuple or t is list:
        return t(_live(x, call) for x in v)
    if t is dict:
        return {k: _live(x, call) for k, x in v.items()}
    return v


def live_calls(calls: Sequence[tuple[tuple, dict]]) -> list[tuple[tuple, dict]]:
    """The recorded calls with every weakly kept object resolved (raises `Gone` for a collected one)."""
    return [(_live(a, i), _live(k, i)) for i, (a, k) in enumerate(calls, 1)]


class ValueLog:
    """Each call's arguments, in call order, within a budget.

    Args:
        max_bytes: the most bytes of tensors and arrays kept (all calls).
        max_calls: the most calls kept.

    Attributes:
        calls: ``(args, kwargs)`` per call, oldest first.
        kept: False once the budget was passed (then ``calls`` is cleared).
        why: why values were not kept ("" while kept).
    """

    def __init__(self, max_bytes: int = VALUE_BYTES, max_calls: int = VALUE_CALLS):
        self.calls: list[tuple[tuple, dict]] = []
        self.max_bytes, self.max_calls = max_bytes, max_calls
        self.bytes = 0
        self.kept = True
        self.why = ""

    def record(self, args: tuple, kwargs: dict) -> None:
        """Keeps one call's arguments (a cached call's hot path: type checks and a size)."""
        if not self.kept:
            return
        if len(self.calls) >= self.max_calls:
            return self.drop(f"more than {self.max_calls} calls")
        a, n = _kept(args)
        k, m = _kept(kwargs) if kwargs else ({}, 0)
        self.bytes += n + m
        if self.bytes > self.max_bytes:
            return self.drop(f"your calls passed more than {self.max_bytes >> 20} MiB of arguments")
        self.calls.append((a, k))

    def drop(self, why: str) -> None:
        self.kept, self.why, self.calls = False, why, []


_STEP = re.compile(r"\[(\d+|'[^']*'|\"[^\"]*\")\]|\.(\w+)")


def _convert_at(value: Any, steps: list, make: Callable[[Any], Any]) -> Any:
    if not steps:
        return make(value)
    key, rest = steps[0], steps[1:]
    if isinstance(value, dict):
        out = dict(value)
        out[key] = _convert_at(value[key], rest, make)
        return out
    if isinstance(value, (list, tuple)) and isinstance(key, int):
        items = list(value)
        items[key] = _convert_at(items[key], rest, make)
        return type(value)(items) if type(value) in (list, tuple) else type(value)(*items)
    return make(value)


def convert_call(body: Callable, args: tuple, kwargs: dict, convert: Mapping[str, tuple[str, str]]
                 ) -> tuple[tuple, dict]:
    """The call's arguments with each ``path -> ("tensor"|"cast", dtype)`` applied (what a fix's user writes)."""
    if not convert:
        return args, kwargs
    import tensorflow as tf

    try:
        bound = inspect.signature(body).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs
    for path, (how, dt) in convert.items():
        m = re.match(r"\w+", path)
        if m is None or m.group(0) not in bound.arguments:
            continue
        steps = []
        for idx, attr in _STEP.findall(path[m.end():]):
            steps.append(attr if attr else (int(idx) if idx.isdigit() else idx[1:-1]))

        def make(v: Any, how: str = how, dt: str = dt) -> Any:
            if how == "cast":
                return tf.cast(v, tf.as_dtype(dt))
            return tf.constant(v, tf.as_dtype(dt))
        bound.arguments[m.group(0)] = _convert_at(bound.arguments[m.group(0)], steps, make)
    return tuple(bound.args), dict(bound.kwargs)


def _largest_ulp(reference: Sequence[Any], outs: Sequence[Any]) -> float:
    """The largest distance (ULP) of ``outs`` from ``reference`` over every call and output; inf if unlike."""
    return fx.values_match(reference, outs, ulp_bound=float("inf")).max_ulp


class CaseValues:
    """The user's calls with their values, the reference, and a candidate's run on them.

    Args:
        body: the ORIGINAL Python function (a bound method included).
        log: the `ValueLog` of the calls.
        world: the `World` the body reads.
    """

    def __init__(self, body: Callable, log: ValueLog, world: World | None):
        self.body, self.log, self.world = body, log, world or World()
        self._reference: list | None = None
        self._gone = ""
        self._again: str | None = None
        self._floor: float | None = None
        self._floor_calls = 0  # the recorded calls the floor was measured on (the first ones)
        self.unkept = ""  # why no candidate's outputs can be compared with eager's ("" when they can)

    @property
    def kept(self) -> bool:
        return self.log.kept and bool(self.log.calls)

    @property
    def n(self) -> int:
        return len(self.log.calls)

    def reference(self) -> list:
        """The original function's eager outputs on every recorded call (nested tf.functions eager too)."""
        if self._reference is None:
            import tensorflow as tf

            try:
                calls = live_calls(self.log.calls)
            except Gone as e:
                self._gone = str(e)
                self._reference = []
                return self._reference
            self.world.protect()
            if self.world.unkept:
                self._gone = self.world.unkept
                self._reference = []
                return self._reference
            was = tf.config.functions_run_eagerly()
            tf.config.run_functions_eagerly(True)
            try:
                self._reference = self.world.replay(self.body, calls)
            finally:
                tf.config.run_functions_eagerly(was)
        return self._reference

    def prefetch(self) -> None:
        """Eager's outputs (twice), made once in a child and kept here.

        Each candidate's check runs in its own forked child (`tflab.fix.attempt`):
        what a child computes is lost with it, so without this every candidate
        would replay the user's function eagerly again. The parent keeps the
        NumPy results, and every later child inherits them. Eager's outputs and
        eager's again are made in one child (so that a body drawing random numbers
        draws new ones the second time: two children forked from one state would
        draw the same), with the whole time limit (``TFLAB_FIX_TIMEOUT_S``), which
        ends a body that blocks; a candidate's own child then has the whole limit
        for its run.

        The graph-vs-eager floor (a fresh trace per recorded call) is not made
        here: only a candidate whose outputs differ from eager's by a finite amount
        reads it, so its child makes it then (`compare`); a candidate equal to
        eager, the common case, costs no such traces.
        """
        from tflab.process import apart

        if apart.in_child() or self._reference is not None or not self.kept or self.unkept:
            return
        self.world.protect()  # found here, so no child has to walk its whole (frozen) heap for them

        def eager():
            self.reference()
            if not self._gone:
                self._repeatable()
            return self._reference, self._gone, self._again

        ran = apart.run_apart(eager)
        if ran.status == apart.RETURNED:
            self._reference, self._gone, self._again = ran.value
        elif ran.status == apart.TIMED_OUT:  # the reference, not a candidate, is what did not finish
            self._reference = []
            self._gone = (f"your function run eagerly on the {self.n} recorded calls did not finish in "
                          f"{ran.timeout_s:g} s (TFLAB_FIX_TIMEOUT_S), so there is no eager output to compare with")

    def run(self, fn: Callable, convert: Mapping[str, tuple[str, str]] | None = None, **replay: Any) -> list:
        """A candidate (a tf.function) over the recorded calls, each call's arguments converted so."""
        try:
            live = live_calls(self.log.calls)
        except Gone:
            return []
        calls = [convert_call(self.body, a, k, convert or {}) for a, k in live]
        return self.world.replay(fn, calls, **replay)

    def compare(self, outs: list) -> fx.ValuesCheck:
        """``outs`` against the reference with `values_match`; a call that raised fails it, named."""
        if not self.kept:
            return fx.values_match(None, outs)
        if self.unkept:
            return fx.ValuesCheck(True, f"{fx.VALUES_NOT_KEPT} ({self.unkept})", kept=False)
        ref = self.reference()
        if self._gone:
            return fx.ValuesCheck(True, f"{fx.VALUES_NOT_KEPT} ({self._gone})", kept=False)
        bad = next((r for r in ref if isinstance(r, Raised)), None)
        if bad is not None:  # no eager value to compare with: say so, do not pretend
            return fx.ValuesCheck(True, f"{fx.VALUES_NOT_KEPT} (eager raised on call {bad.call}: {bad.text})",
                                  kept=False)
        got = next((o for o in outs if isinstance(o, Raised)), None)
        if got is not None:
            return fx.ValuesCheck(False, f"call {got.call} raised {got.text} where eager returned a value",
                                  got.call, float("inf"))
        vc = fx.values_match(ref, outs)
        if not vc.ok and self._repeatable() is not None:
            return fx.ValuesCheck(True, f"{fx.VALUES_NOT_KEPT} ({self._repeatable()})", kept=False)
        if not vc.ok and vc.max_ulp != float("inf"):
            # values_match stops at the first call past its bound: the candidate's largest distance
            # over every call is read with no bound, and compared with the floor's over its calls
            need = _largest_ulp(ref, outs)
            floor = self._graph_floor(need)
            if floor is not None and need <= floor:
                k = self._floor_calls
                where = ("for each call, is that far from eager on these calls" if k >= self.n else
                         "for your first call, is that far from eager on it" if k == 1 else
                         f"for each of your first {k} calls, is that far from eager on them")
                return fx.values_match(ref, outs, ulp_bound=floor, why_bound=(
                    f"your function unchanged, traced afresh {where} (graph vs eager rounding)"))
        return vc

    def _graph_floor(self, need: float = float("inf")) -> float | None:
        """How far the user's own function, as a fresh tf.function per call, is from eager (ULP), or None.

        A graph may round differently from eager (other kernels, another order of
        a reduction, fused ops): that distance is no fault of a fix. A fresh
        tf.function per call traces each call from the state it runs in, so a
        stale read or a rebound name does not enter it; where such a run raises
        or differs by a non-finite amount there is no floor (None).

        Each fresh trace costs what the user's first call did (a training step:
        seconds), and the floor is only asked whether it reaches ``need`` (the
        candidate's own distance): the calls are replayed in order, as the user
        made them, and the replay stops at the first call after which the
        largest distance so far reaches ``need``. The floor is then that
        largest distance, measured on the calls up to there (`_floor_calls`).

        Args:
            need: the distance, in ULP, that the floor is compared with.

        Returns:
            The largest ULP distance measured, or None.
        """
        if self._floor is None or (self._floor == self._floor and self._floor < need
                                   and self._floor_calls < self.n):
            import tensorflow as tf

            ref = self._reference or []
            done: list = []
            raised: list = []

            class _Stop(BaseException):  # not an Exception: replay must not record it as the call's error
                pass

            def fresh(*a: Any, **k: Any) -> Any:
                try:
                    out = tf.function(self.body)(*a, **k)
                except Exception as e:  # noqa: BLE001 - no floor where the user's graph raises
                    raised.append(e)
                    raise _Stop from e
                done.append(as_numpy(out))
                if len(done) < len(ref) and need <= _largest_ulp(ref[:len(done)], done) != float("inf"):
                    raise _Stop
                return out

            try:
                self.world.replay(fresh, live_calls(self.log.calls))
            except _Stop:
                pass
            self._floor_calls = len(done)
            most = _largest_ulp(ref[:len(done)], done) if done else float("inf")
            self._floor = float("nan") if raised or most == float("inf") else most
        return None if self._floor != self._floor else self._floor

    def _repeatable(self) -> str | None:
        """Why eager's outputs are no reference (two eager runs differ: random numbers), or None."""
        if self._again is None:
            import tensorflow as tf

            was = tf.config.functions_run_eagerly()
            tf.config.run_functions_eagerly(True)
            try:
                again = self.world.replay(self.body, live_calls(self.log.calls))
            finally:
                tf.config.run_functions_eagerly(was)
            vc = fx.values_match(self._reference, again)
            self._again = "" if vc.ok else (f"two eager runs of your function differ ({vc.text}): it draws random "
                                            "numbers or reads state tflab does not replay, so eager's outputs are "
                                            "no reference")
        return self._again or None
