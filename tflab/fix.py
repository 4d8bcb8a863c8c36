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
from typing import Any, Callable, Iterable

from tflab.report.base import Report

__all__ = ["Fix", "FixPlan", "attempt", "unchecked", "first_working", "CHECKED", "FAILED", "NOT_CHECKED"]

CHECKED = "checked"
FAILED = "failed"
NOT_CHECKED = "not checked"
_STATUSES = (CHECKED, FAILED, NOT_CHECKED)


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
            "failed" (applied and it did not work) or "not checked".
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
    def what(self) -> str:
        """The change in one phrase: ``description: change`` (or either alone)."""
        if self.change and self.change not in self.description:
            return f"{self.description}: {self.change}" if self.description else self.change
        return self.description or self.change

    @property
    def check_text(self) -> str:
        """``checked: RESULT``, ``failed: RESULT`` or ``not checked: WHY``."""
        if self.status == CHECKED:
            return f"checked: {self.result}" if self.result else "checked"
        if self.status == FAILED:
            return f"failed: {self.result}" if self.result else "failed"
        return f"not checked: {self.why}" if self.why else "not checked"

    def line(self, label: str = "fix") -> str:
        """``fix: WHAT (checked: RESULT)``: the one line every report prints for a fix."""
        return f"{label}: {self.what} ({self.check_text})"

    def summary_line(self) -> str:
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
            *, how: str = "", source: str = "") -> Fix:
    """Apply one candidate fix by running ``check`` and record what it measured.

    Args:
        kind, change, description: as `Fix`'s fields.
        check: runs the fix on the user's case; returns ``(worked, result)`` or
            ``(worked, result, measured)``. An exception it raises makes the
            fix "failed" with the exception's first line as its result (the
            user's code may raise anything, sys.exit included); KeyboardInterrupt
            is let through.
        how: how it was applied, e.g. "re-traced on your 3 recorded calls".
        source: the rewritten source, for a "code" fix.

    Returns:
        A `Fix` with status "checked" or "failed".
    """
    measured: dict[str, Any] = {}
    try:
        out = check()
        worked, result = bool(out[0]), str(out[1])
        if len(out) > 2 and out[2]:
            measured = dict(out[2])
    except KeyboardInterrupt:  # a Ctrl-C stops the run; the user's code under the fix is not the user
        raise
    except BaseException as e:  # noqa: BLE001 - the user's code under the fix may raise anything, and a
        # sys.exit() in it (reached only because the fix changed what it sees) fails this fix, not the run
        if isinstance(e, SystemExit):
            return Fix(kind, change, description, status=FAILED, how=how, source=source,
                       result=f"your code called sys.exit({e.code!r}) under this fix")
        worked, result = False, f"raised {type(e).__name__}: {_first_line(e)}"
    return Fix(kind, change, description, status=CHECKED if worked else FAILED, how=how,
               result=result, measured=measured, source=source)


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
    """
    tried: list[Fix] = []
    for c in candidates:
        f = c() if callable(c) else c
        if not isinstance(f, Fix):
            raise TypeError(f"first_working: a candidate gave {type(f).__name__}, not a Fix")
        tried.append(f)
        if f.checked:
            return FixPlan(f, tuple(tried))
    pending = next((f for f in tried if f.status == NOT_CHECKED), None)
    return FixPlan(pending, tuple(tried))
