"""The one record of a fix that tflab prints: what to change, how it was checked, what it measured.

Every place that prints a fix (the retrace probe and `tflab retrace` log,
diagnose, compare_modes, precision, litert, saved_model, distribute) builds a
`Fix` and prints `Fix.line()`. A fix is either

* **checked**: tflab applied the change to the user's own case (their
  recorded calls re-traced with the new input_signature, a copy of their
  function run, a re-conversion) and it worked: ``result`` says what it
  measured ("1 trace for your 3 calls");
* **failed**: applied and it did not work (``result`` says what happened);
  a failed fix is never printed as *the* fix: `first_working` goes on to the
  next candidate, and when none works its `FixPlan` says so and shows what
  each candidate gave;
* **not checked**: tflab could not apply it here; ``why`` says why.

Example:
    >>> import tflab.fix as fx
    >>> bad = fx.attempt("input_signature", "tf.TensorSpec([2], tf.int32)",
    ...                  "give add an input_signature", lambda: (False, "rejects call 1: shape ()"))
    >>> good = fx.attempt("input_signature", "tf.TensorSpec(None, tf.int32)",
    ...                   "give add an input_signature", lambda: (True, "1 trace for your 3 calls"))
    >>> plan = fx.first_working([lambda: bad, lambda: good])
    >>> plan.fix.change, plan.fix.status
    ('tf.TensorSpec(None, tf.int32)', 'checked')
    >>> print(plan.fix.line())
    fix: give add an input_signature: tf.TensorSpec(None, tf.int32) (checked: 1 trace for your 3 calls)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Iterable, Sequence

from tflab.report.base import Report

__all__ = ["Fix", "FixPlan", "ValuesCheck", "attempt", "unchecked", "first_working", "values_match", "CHECKED", "FAILED",
           "NOT_CHECKED", "VALUES_NOT_KEPT"]

CHECKED = "checked"
FAILED = "failed"
NOT_CHECKED = "not checked"
_STATUSES = (CHECKED, FAILED, NOT_CHECKED)
# What a "checked" line says when the symptom is gone but tflab kept no values to compare with.
VALUES_NOT_KEPT = "traces only, values not kept"


def _first_line(text: str, limit: int = 200) -> str:
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclasses.dataclass(frozen=True, repr=False)
class Fix(Report):
    """One change tflab suggests, with how it was checked and what that measured.

    Attributes:
        kind: what is changed: "input_signature", "cast", "code" (a rewrite of
            the user's source), "option" (a tf.function or API option),
            "converter" (a TFLite converter setting), "optimizer_build", "move"
            (build an object once, elsewhere), "delegate", "save" ...
        change: the change as the user would write it: a code line, a spec
            (``tf.TensorSpec(None, tf.int32)``), an option (``reduce_retracing=True``).
            May be "" when ``description`` says it all.
        description: what to do, one sentence, without the check.
        status: "checked" (applied to the user's case and it worked),
            "failed" (applied and it did not work) or "not checked". A "checked"
            fix whose outputs could not be compared with eager's (no values kept)
            has ``values_compared`` False, in ``to_dict()`` too.
        how: how it was applied ("re-traced on your 3 recorded calls",
            "ran a copy of your function", "re-converted with ...").
        result: what the check measured ("1 trace for your 3 calls"), or for
            a failed fix what went wrong ("rejects call 1: ...").
        why: for "not checked": why tflab could not apply it.
        measured: numbers behind ``result`` (JSON-ready), e.g.
            ``{"traces": 1, "calls": 3}``.
        source: for a "code" fix, the rewritten source that was run.
    """

    kind: str
    change: str
    description: str
    status: str = NOT_CHECKED
    how: str = ""
    result: str = ""
    why: str = ""
    measured: dict = dataclasses.field(default_factory=dict)
    source: str = ""

    DICT_PROPERTIES: ClassVar[tuple[str, ...]] = ("values_compared",)

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise ValueError(f"Fix.status must be one of {_STATUSES}, got {self.status!r}")

    @property
    def checked(self) -> bool:
        """True when the fix was applied to the user's case and it worked."""
        return self.status == CHECKED

    @property
    def failed(self) -> bool:
        """True when the fix was applied and it did not work."""
        return self.status == FAILED

    @property
    def values_compared(self) -> bool:
        """True when the fix is checked on the user's values: the symptom is gone AND its outputs equal the
        original function's eager outputs on every recorded call (False for a fix checked on traces only:
        `VALUES_NOT_KEPT` in its result; it may change what the function computes)."""
        return self.status == CHECKED and VALUES_NOT_KEPT not in str(self.result or "")

    @property
    def what(self) -> str:
        """The change in one phrase: ``description: change`` (or either alone)."""
        if self.change and self.change not in self.description:
            return f"{self.description}: {self.change}" if self.description else self.change
        return self.description or self.change

    @property
    def check_text(self) -> str:
        """``checked: RESULT``, ``failed: RESULT`` or ``not checked: WHY``.

        A fix whose symptom is gone but whose outputs were not compared with the original function's
        eager outputs (no values kept: `VALUES_NOT_KEPT` in its result) reads ``checked on traces only,
        outputs not compared: RESULT``: it may change what the function computes.
        """
        if self.status == CHECKED:
            if not self.values_compared:
                # the symptom is gone, but no output was compared with eager's: say so before the result
                return f"checked on traces only, outputs not compared: {self.result}"
            return f"checked: {self.result}" if self.result else "checked"
        if self.status == FAILED:
            return f"failed: {self.result}" if self.result else "failed"
        return f"not checked: {self.why}" if self.why else "not checked"

    def line(self, label: str = "fix") -> str:
        """``fix: WHAT (checked: RESULT)``: the one line every report prints for a fix."""
        return f"{label}: {self.what} ({self.check_text})"

    def summary_line(self) -> str:
        if self.status == CHECKED and not self.values_compared:
            return f"{self.kind} checked on traces only, outputs not compared"
        return f"{self.kind} {self.status}"

    def to_text(self) -> str:
        return self.line()

    def __str__(self) -> str:
        return self.line()


@dataclasses.dataclass(frozen=True, repr=False)
class FixPlan(Report):
    """The candidates tried for one problem, in order, and the one to print.

    Attributes:
        fix: the first candidate that was checked and worked; when none was
            checked to work, the first "not checked" one; None when every
            candidate was applied and failed (or there was none).
        tried: every candidate, in the order tried, each with its status and
            result (failed ones included, so a report can show what each gave).
    """

    fix: Fix | None
    tried: tuple[Fix, ...] = ()

    @property
    def none_worked(self) -> bool:
        """True when candidates were tried and every one was applied and failed."""
        return self.fix is None and bool(self.tried)

    @property
    def failures(self) -> tuple[Fix, ...]:
        """The candidates that were applied and failed."""
        return tuple(f for f in self.tried if f.failed)

    def lines(self, label: str = "fix") -> list[str]:
        """The fix line, or "no fix worked" with what each candidate gave.

        A failed candidate tried before the printed fix is named on a second
        line (``tried first: ... (failed: ...)``) so the user sees why the
        obvious change is not the one printed.
        """
        if self.fix is not None:
            out = [self.fix.line(label)]
            before = [f for f in self.tried if f.failed]
            if before and self.fix.checked:
                out.append("tried first: " + "; ".join(f"{f.what} ({f.check_text})" for f in before))
            return out
        if not self.tried:
            return []
        gave = "; ".join(f"{f.what} ({f.check_text})" for f in self.tried)
        return [f"{label}: none of the {len(self.tried)} candidate fix(es) worked on your case: {gave}"]

    def summary_line(self) -> str:
        if self.fix is None:
            return "no fix worked" if self.tried else "no candidate"
        return f"{self.fix.kind} {self.fix.status} ({len(self.tried)} tried)"

    def to_text(self) -> str:
        return "\n".join(self.lines())


def attempt(kind: str, change: str, description: str, check: Callable[[], tuple[bool, str] | tuple[bool, str, dict]],
            *, how: str = "", source: str = "", timeout_s: float | None = None, apart: bool = True) -> Fix:
    """Apply one candidate fix by running ``check`` apart from the user's process, and record what it measured.

    ``check`` runs in a forked child (`tflab.process.apart.run_apart`): it sees
    the user's objects as they are, and what it changes there (a global list the
    body appends to, an iterator it advances, a tf.Variable it assigns) stays in
    the child; a file it opens for writing with ``open()`` is written in a
    scratch copy (listed in ``measured["files_kept_apart"]``). Only
    ``(worked, result, measured)`` comes back.

    Args:
        kind, change, description: as `Fix`'s fields.
        check: runs the fix on the user's case; returns ``(worked, result)`` or
            ``(worked, result, measured)`` (``measured`` pickles: numbers,
            strings, numpy arrays). An exception it raises makes the fix
            "failed" with the exception's first line as its result (the user's
            code may raise anything: a ``sys.exit``, ``os._exit``,
            ``KeyboardInterrupt`` or a signal that ends the child fails this
            fix, never the report).
        how: how it was applied, e.g. "re-traced on your 3 recorded calls".
        source: the rewritten source, for a "code" fix.
        timeout_s: seconds the check may run; default ``TFLAB_FIX_TIMEOUT_S``
            (60). A check that does not finish is "not checked: the candidate
            did not finish in N s".
        apart: False runs ``check`` in this process, for a check that cannot
            run in a forked child: XLA's compiler, once this process has
            compiled with it, hangs or aborts (SIGABRT) in a fork (its thread
            pools do not survive ``fork``; measured on TF 2.21). Such a check
            has no time limit, and what it changes stays changed.

    Returns:
        A `Fix` with status "checked", "failed" or (time limit) "not checked".

    Raises:
        KeyboardInterrupt: the user pressed Ctrl-C (the child is killed first).
    """
    if _SKIP_REASON:
        return Fix(kind, change, description, status=NOT_CHECKED, how=how, source=source, why=_SKIP_REASON[-1])
    if not apart:
        return _attempt_here(kind, change, description, check, how=how, source=source)
    from tflab.process import apart as apart_

    def in_child():
        out = check()
        return bool(out[0]), str(out[1]), dict(out[2]) if len(out) > 2 and out[2] else {}

    ran = apart_.run_apart(in_child, timeout_s)
    if ran.status == apart_.RETURNED:
        worked, result, measured = ran.value
        if ran.files_kept_apart:
            measured = {**measured, "files_kept_apart": list(ran.files_kept_apart)}
        return Fix(kind, change, description, status=CHECKED if worked else FAILED, how=how,
                   result=result, measured=measured, source=source)
    if ran.status == apart_.TIMED_OUT:
        return Fix(kind, change, description, status=NOT_CHECKED, how=how, source=source, why=ran.text,
                   measured={"timeout_s": ran.timeout_s})
    return Fix(kind, change, description, status=FAILED, how=how, source=source, result=ran.text)


def _attempt_here(kind: str, change: str, description: str, check: Callable, *, how: str, source: str) -> Fix:
    """`attempt` in this process (``apart=False``): an exception, ``sys.exit`` included, fails the fix."""
    try:
        out = check()
    except KeyboardInterrupt:
        from tflab.errors import own_interrupt

        if not own_interrupt():
            raise  # a Ctrl-C: the run stops
        return Fix(kind, change, description, status=FAILED, how=how, source=source,
                   result="your code raised KeyboardInterrupt under this fix (no Ctrl-C reached tflab)")
    except BaseException as e:  # noqa: BLE001 - the user's code under the fix may raise anything
        if isinstance(e, SystemExit):
            return Fix(kind, change, description, status=FAILED, how=how, source=source,
                       result=f"your code called sys.exit({e.code!r}) under this fix")
        return Fix(kind, change, description, status=FAILED, how=how, source=source,
                   result=f"raised {type(e).__name__}: {_first_line(e)}")
    measured = dict(out[2]) if len(out) > 2 and out[2] else {}
    return Fix(kind, change, description, status=CHECKED if out[0] else FAILED, how=how, result=str(out[1]),
               measured=measured, source=source)


def unchecked(kind: str, change: str, description: str, why: str) -> Fix:
    """A fix tflab could not apply here; ``why`` says why (printed as ``not checked: WHY``)."""
    return Fix(kind, change, description, status=NOT_CHECKED, why=why)


def first_working(candidates: Iterable[Callable[[], Fix] | Fix]) -> FixPlan:
    """Try candidate fixes in order and stop at the first one that was checked and worked.

    Args:
        candidates: `Fix` objects, or zero-argument callables that apply one
            candidate and return its `Fix` (so later candidates cost nothing
            once one works).

    Returns:
        A `FixPlan`: its ``fix`` is the first checked one; else the first
        "not checked" one; else None (every candidate failed). ``tried`` holds
        each candidate applied, in order.

    Once a candidate's check did not finish in its time limit (status "not
    checked" with ``measured["timeout_s"]``: the user's body loops or blocks),
    the later candidates' checks are not run: each is "not checked: an earlier
    candidate did not finish in N s" (a callable candidate is still called, and
    its `attempt` returns at once without running its check), so one stuck
    body costs one time limit, not one per candidate.
    """
    tried: list[Fix] = []
    stuck = ""
    for c in candidates:
        if stuck and callable(c):
            _SKIP_REASON.append(stuck)  # its `attempt` records it as not checked, without running its check
            try:
                f = c()
            finally:
                _SKIP_REASON.pop()
        else:
            f = c() if callable(c) else c
        if not isinstance(f, Fix):
            raise TypeError(f"first_working: a candidate gave {type(f).__name__}, not a Fix")
        tried.append(f)
        if f.checked:
            return FixPlan(f, tuple(tried))
        if not stuck and f.status == NOT_CHECKED and "timeout_s" in f.measured:
            stuck = f"an earlier candidate did not finish in {f.measured['timeout_s']:g} s"
    pending = next((f for f in tried if f.status == NOT_CHECKED), None)
    return FixPlan(pending, tuple(tried))


#: While not empty, `attempt` does not run its check: the last entry is why (a candidate of the same problem
#: did not finish in its time limit, so the next ones would very likely spend theirs too).
_SKIP_REASON: list[str] = []


# ---------------------------------------------------------------------------
# "Checked" on the user's values: the one comparison every fix's check uses
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ValuesCheck:
    """The fixed function's outputs against the original function's eager outputs, call by call.

    Attributes:
        ok: True when every recorded call's outputs match (see `values_match`).
        text: one phrase for a fix line: ``"outputs equal eager's on your 3 calls (bit for bit)"``,
            ``"call 2: output[0] 0 where eager gave 0.5"``, or `VALUES_NOT_KEPT`.
        calls: how many calls were compared.
        max_ulp: the largest distance in ULP of the reference's dtype (0 for bit-equal;
            inf for a NaN against a number, a shape or a structure that differs).
        ulp_bound: the bound the comparison allowed.
        kept: False when no values were kept (nothing was compared).
    """

    ok: bool
    text: str
    calls: int = 0
    max_ulp: float = 0.0
    ulp_bound: float = 0.0
    kept: bool = True

    @property
    def measured(self) -> dict:
        """The numbers, JSON-ready, for `Fix.measured`."""
        return {"calls_compared": self.calls, "max_ulp": self.max_ulp, "ulp_bound": self.ulp_bound,
                "values_kept": self.kept}


def _leaves(value: Any) -> list:
    """The leaves of a nested output (tf.nest's flattening when TF is loaded, else lists/tuples/dicts)."""
    import sys

    tf = sys.modules.get("tensorflow")
    if tf is not None:
        return list(tf.nest.flatten(value, expand_composites=True))
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _leaves(value[k])]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _array(x: Any):
    import numpy as np

    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x)


def _show(a) -> str:
    return str(a.item()) if a.size == 1 else f"{a.dtype}{list(a.shape)}"


def values_match(reference_calls: Sequence[Any] | None, fixed_calls: Sequence[Any], *, ulp_bound: float = 0,
                 why_bound: str = "") -> ValuesCheck:
    """Compares a fixed function's outputs with the original function's eager outputs, on every call.

    The reference is never transformed: a fix that changes an output's dtype is
    compared in the reference's own dtype with both values read exactly as
    float64 (an int32 ``0`` against eager's float32 ``0.5`` is 0.5 away, not
    "equal as int32"). ``ulp_bound`` is counted in ULP of the reference's dtype
    and is printed; a fix that keeps the dtypes should pass with 0.

    Args:
        reference_calls: one output structure per recorded call, from the
            ORIGINAL function run eagerly before any change (tensors, numpy
            arrays or Python numbers, nested in lists/tuples/dicts). None when
            tflab kept no values: the result says `VALUES_NOT_KEPT` and is ok
            only in the sense that nothing was compared (``kept`` False).
        fixed_calls: the fixed function's outputs for the same calls, in order.
        ulp_bound: the largest distance allowed, in ULP of the reference's dtype
            (integers and bools: the absolute difference).
        why_bound: why a non-zero bound is allowed, printed after it
            (``"the fix computes in float32 on purpose"``).

    Returns:
        A `ValuesCheck`.

    Example:
        >>> values_match([0.5, 1.0], [0.5, 1.0]).text
        "outputs equal eager's on your 2 calls (bit for bit)"
        >>> values_match([0.5], [0]).text
        "call 1: output[0] is 0 where eager gave 0.5"
    """
    import numpy as np

    from tflab._graph.numeric import ulp_distance

    if reference_calls is None:
        return ValuesCheck(True, VALUES_NOT_KEPT, kept=False, ulp_bound=ulp_bound)
    if len(reference_calls) != len(fixed_calls):
        return ValuesCheck(False, f"{len(fixed_calls)} call(s) ran where eager ran {len(reference_calls)}",
                           len(reference_calls), float("inf"), ulp_bound)
    worst = 0.0
    for i, (ref, got) in enumerate(zip(reference_calls, fixed_calls), 1):
        rl, gl = _leaves(ref), _leaves(got)
        if len(rl) != len(gl):
            return ValuesCheck(False, f"call {i}: {len(gl)} output(s) where eager gave {len(rl)}", i, float("inf"),
                               ulp_bound)
        for j, (r, g) in enumerate(zip(rl, gl)):
            r, g = _array(r), _array(g)
            if r.shape != g.shape:
                return ValuesCheck(False, f"call {i}: output[{j}] has shape {list(g.shape)} where eager's has "
                                   f"{list(r.shape)}", i, float("inf"), ulp_bound)
            if r.dtype.kind in "OSU" or g.dtype.kind in "OSU":
                same = r.dtype == g.dtype and bool(np.all(r == g))
                d = 0.0 if same else float("inf")
            elif g.dtype == r.dtype:
                d = float(ulp_distance(r, g).max()) if r.size else 0.0
            else:
                # the fix changed the dtype: read the fixed value exactly as float64, round it to
                # the reference's dtype only to count ULP there; a value the reference's dtype
                # cannot hold at all (0 vs 0.5 is fine; 1e40 in float32 is inf) counts as inf
                gv = g.astype(np.float64)
                if r.dtype.kind == "f":
                    with np.errstate(over="ignore", invalid="ignore"):
                        g_in_r = gv.astype(r.dtype)
                    exact = np.isnan(gv) | (g_in_r.astype(np.float64) == gv)
                    d_arr = ulp_distance(r, g_in_r)
                    d = float(np.where(exact, d_arr, np.maximum(d_arr, 1.0)).max()) if r.size else 0.0
                else:
                    d = float(np.abs(r.astype(np.float64) - gv).max()) if r.size else 0.0
            worst = max(worst, d)
            if d > ulp_bound:
                eager_v, fix_v, at = _first_off(r, g)
                return ValuesCheck(False, f"call {i}: output[{j}]{at} is {fix_v} where eager gave {eager_v}"
                                   + (f" ({d:g} ULP, bound {ulp_bound:g})" if ulp_bound else ""),
                                   i, d, ulp_bound)
    n = len(reference_calls)
    how = "bit for bit" if worst == 0 else f"within {worst:g} ULP, bound {ulp_bound:g}" + (
        f": {why_bound}" if why_bound else "")
    return ValuesCheck(True, f"outputs equal eager's on your {n} call{'s' if n != 1 else ''} ({how})", n, worst,
                       ulp_bound)


def _first_off(r, g) -> tuple[str, str, str]:
    """The first differing element of two same-shaped arrays, as text: (eager's, the fix's, where)."""
    import numpy as np

    if r.size == 1:
        return _show(r), _show(g), ""
    rf = r.astype(np.float64).ravel() if r.dtype.kind not in "OSU" else r.ravel()
    gf = g.astype(np.float64).ravel() if g.dtype.kind not in "OSU" else g.ravel()
    for k in range(rf.size):
        a, b = rf[k], gf[k]
        if not (a == b or (isinstance(a, float) and np.isnan(a) and np.isnan(b))):
            idx = np.unravel_index(k, r.shape)
            ta, tb = f"{a:g}", f"{b:g}"
            if ta == tb and r.dtype.kind == "f":  # a few ULP apart: each in its own dtype's shortest form
                ta, tb = str(r.dtype.type(a)), str(g.dtype.type(b) if g.dtype.kind == "f" else b)
            return ta, tb, f"{list(map(int, idx))}"
    return _show(r), _show(g), ""
