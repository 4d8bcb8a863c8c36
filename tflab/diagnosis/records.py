"""The `Diagnosis` record: what went wrong, the culprit line and the fix."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar

from tflab.report.base import Report, config_field
from tflab.fix import CHECKED, FixPlan

# Size given to a None dim when a TensorSpec is materialized for the one call.
UNKNOWN_DIM_SIZE = 2

# Diagnosis.stage of a function that traced and ran but does not do what its Python says.
SILENT_STAGE = "silent"


@dataclasses.dataclass(frozen=True, repr=False)
class Diagnosis(Report):
    """What went wrong when a function was traced and run as a `tf.function`.

    Attributes:
        function_name: the function's qualified name.
        ok: True when the trace and the one call both succeeded.
        kind: a short stable id of the mistake (``python-list-in-tensor-loop``,
            ``tensor-as-python-bool``, ``shape-dim-is-none``,
            ``branch-variable-undefined``, ``branch-dtype-mismatch``,
            ``loop-variable-dtype-changes``, ``loop-variable-shape-changes``,
            ``loop-variable-undefined``, ``numpy-on-symbolic-tensor``,
            ``return-in-tensor-loop``, ``comprehension-over-tensor``,
            ``non-scalar-condition``,
            ``tensor-iterated-in-python``, ``dtype-mismatch``,
            ``python-state-in-tensor-if``, ``tensor-from-another-funcgraph``,
            ``variable-created-in-function``, ``layer-created-in-function``,
            ``state-rebound-to-tensor`` (silent: a global, closure variable or
            ``self`` attribute rebound to a tensor by the trace),
            ``tensor-as-dict-key``, ``tensor-in-set``, ``tensor-out-of-scope``,
            ``runtime-op-error`` (the trace was fine, an op failed when run),
            ``unrecognized``), or None when ``ok``; each comes from one entry of
            `tflab.diagnosis.RULES`.
        line: the culprit line (1-based) in ``filename``: the line to change,
            which is not always the line TF's traceback ends on; None if unknown.
        statement: that line's source text, stripped.
        filename: the file of the culprit line.
        error: TF's error type and its first meaningful line.
        explanation: what TF did, e.g. "the for over a tensor at line 4 became
            a While op; …".
        fix: one sentence naming the API to use (for a fix tflab checked, the
            change it ran).
        stage: ``"trace"`` (get_concrete_function raised), ``"call"`` (the
            ConcreteFunction raised when run), ``"silent"`` (nothing raised, but
            the graph does not do what the Python reads: a list appended to in
            a loop that became a While op gets one entry; ``error`` is empty)
            or ``""`` when ok.
        fix_plan: the `tflab.fix.FixPlan` behind ``fix``: each candidate tflab
            applied to a copy of the function (traced, run once on the same
            arguments and compared with the function run eagerly), in order,
            and the one to print; a candidate that failed is never its ``fix``.
            Its fix is "not checked" (with why) where no rewrite can be written.
        also: other candidates run for the same failure that also worked (the
            ``if`` on a vector: ``tf.where`` and ``tf.reduce_any``/``reduce_all``
            mean different things); each says what it gave.
        fixed_source: (property) the rewritten source of the printed fix when it
            was checked (plus what it moved to module level); "" otherwise.
        fix_traced: (property) True when the printed fix is a rewrite that was
            checked, False when rewrites were run and none worked, None when no
            rewrite was run.
        config: `tflab.runtime_config()`'s dict when the diagnosis was made.
        headline: (property) one line: kind, culprit and the fix (what other
            verbs print).
    """

    function_name: str
    ok: bool
    kind: str | None = None
    line: int | None = None
    statement: str = ""
    filename: str = ""
    error: str = ""
    explanation: str = ""
    fix: str = ""
    stage: str = ""
    fix_plan: FixPlan | None = None
    also: tuple = ()
    config: dict = config_field()

    DICT_PROPERTIES: ClassVar[tuple[str, ...]] = ("fixed_source", "fix_traced")

    @property
    def fixed_source(self) -> str:
        f = self.fix_plan.fix if self.fix_plan is not None else None
        return f.source.rstrip("\n") if f is not None and f.status == CHECKED and f.source else ""

    @property
    def fix_traced(self) -> bool | None:
        plan = self.fix_plan
        if plan is None:
            return None
        if plan.fix is not None and plan.fix.status == CHECKED and plan.fix.source:
            return True
        return False if any(f.source for f in plan.failures) else None

    def summary_line(self) -> str:
        """``ok``, or ``KIND at line N: 'statement'`` (for ``repr``)."""
        if self.ok:
            return "ok"
        where = f" at line {self.line}: {self.statement!r}" if self.line else ""
        return f"{self.kind}{where}"

    @property
    def headline(self) -> str:
        """One line: kind, culprit line and the fix (what other verbs print)."""
        if self.ok:
            return f"{self.function_name}: traced and ran"
        return diagnosis_suffix(self)

    def to_text(self) -> str:
        """At most about 10 lines: the culprit, the kind, TF's error, what TF did, the fix."""
        if self.ok:
            return f"{self.function_name}: ok (traced and ran once)"
        where = f"{self.filename}:{self.line}" if self.line else "(no line in the user's code)"
        head = ("traced and ran, but not as the Python reads" if self.stage == SILENT_STAGE
                else f"{self.stage} failed")
        lines = [f"{self.function_name}: {self.kind} ({head})",
                 f"  culprit: {where}"]
        if self.statement:
            lines.append(f"      {self.statement}")
        lines.append(f"  TF said: {self.error or 'nothing (no error)'}")
        if self.explanation:
            lines.append(f"  why: {self.explanation}")
        lines += [f"  {ln}" for ln in self.fix_lines]
        src = self.fixed_source.splitlines()
        if self.fix_traced and 0 < len(src) <= 12:
            lines.append("  the copy that ran:")
            lines += [f"      {ln}" for ln in src]
        return "\n".join(lines)

    @property
    def fix_lines(self) -> list[str]:
        """``fix: WHAT (checked: RESULT)`` (`tflab.fix.Fix.line`), what failed before it, and
        the other candidates that also ran; ``fix: TEXT`` for a diagnosis made without a plan."""
        plan = self.fix_plan
        if plan is None:
            return [f"fix: {self.fix}"] if self.fix else []
        out = plan.lines()
        failed = plan.failures
        if failed and (plan.fix is None or not plan.fix.checked):
            if plan.fix is not None:
                out.append("tried: " + "; ".join(f"{f.what} ({f.check_text})" for f in failed))
        out += [f.line("also") for f in self.also]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field, plus ``function`` (the tour's report.json key) = ``function_name``."""
        out = super().to_dict()
        out["function"] = self.function_name
        return out


def diagnosis_suffix(d: Diagnosis) -> str:
    """``KIND at FILE:LINE `statement`: FIX (checked: RESULT)``, for one-line reports: the fix
    with what its check measured (`tflab.fix.Fix.check_text`), or why it was not checked."""
    where = f" at {os.path.basename(d.filename)}:{d.line} `{d.statement}`" if d.line else ""
    fix = d.fix_plan.fix if d.fix_plan is not None else None
    if fix is None and d.fix_plan is not None and d.fix_plan.tried:
        n = len(d.fix_plan.tried)
        return f"{d.kind}{where}: {d.fix} (none of the {n} rewrite(s) tflab ran on a copy worked)"
    if fix is None:
        return f"{d.kind}{where}: {d.fix}"
    change = f": {fix.change}" if fix.checked and fix.change and fix.change not in d.fix else ""
    return f"{d.kind}{where}: {d.fix}{change} ({fix.check_text})"
