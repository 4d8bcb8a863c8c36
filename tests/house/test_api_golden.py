"""tflab's public API is written down (tests/house/api_golden.txt) and changes only on purpose.

* The surface generated from the package equals the golden file; a difference fails
  with what was removed, added or changed (regenerate: ``python tests/_api_golden.py --write``).
* A name that leaves the surface passes only with an entry in the deprecation table
  (tflab/_api/deprecations.py) and a line in CHANGELOG.md's Deprecated or Removed
  section: the golden file's last change is compared with the version before it
  (git), so a commit that removes a name carries the table and the changelog with it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _api_golden import (CHANGELOG, GOLDEN, REPO, diff_text, read_golden, removal_problems,  # noqa: E402
                         surface)

from tflab._api import deprecations  # noqa: E402

TABLE_OLDS = {d.old for d in deprecations.TABLE}


def test_the_public_api_is_the_golden_file():
    golden, now = read_golden(), surface()
    assert now == golden, ("the public API differs from tests/house/api_golden.txt; if this is on purpose, "
                           "run `python tests/_api_golden.py --write` (and for a removed or renamed name add it "
                           "to tflab/_api/deprecations.py and CHANGELOG.md):\n" + diff_text(golden, now))


def _previous_golden() -> list[str] | None:
    """The golden file before its last change: HEAD's when the working tree changed it, else the version
    before the commit that last touched it ([] where it is new). None outside a git checkout."""
    rel = os.path.relpath(GOLDEN, REPO)

    def show(rev: str) -> str | None:
        p = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=REPO, capture_output=True, text=True)
        return p.stdout if p.returncode == 0 else None

    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode != 0:
        return None
    head = show("HEAD")
    if head is None:  # the file is new: no name can have left it
        return []
    current = open(GOLDEN, encoding="utf-8").read()
    if head != current:
        text = head
    else:
        last = subprocess.run(["git", "log", "-1", "--format=%H", "--", rel], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()
        text = (show(f"{last}^") if last else None) or ""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_a_name_leaves_the_golden_file_only_with_the_table_and_the_changelog():
    before = _previous_golden()
    if before is None:
        pytest.skip("not a git checkout: the golden file's history is not here")
    problems = removal_problems(before, read_golden(), TABLE_OLDS, open(CHANGELOG, encoding="utf-8").read())
    assert problems == [], "\n".join(problems)


BEFORE = ["tflab.StabilizeReport: class(Report)", "tflab.StabilizeReport.max_abs_error: float | None",
          "tflab.stabilize(fn: 'Callable') -> 'Callable'"]
RENAMED = ["tflab.StabilizeReport: class(Report)", "tflab.StabilizeReport.max_abs_err: float | None",
           "tflab.stabilize(fn: 'Callable') -> 'Callable'"]
LOG = "# Changelog\n\n## [0.3.0]\n\n### Added\n\n- `StabilizeReport.max_abs_err`.\n"
LOG_WITH_ENTRY = LOG + "\n### Deprecated\n\n- `StabilizeReport.max_abs_error`: use `max_abs_err`.\n"


def test_a_planted_rename_fails_until_the_table_and_the_changelog_carry_it():
    """Planted: a field renamed in the golden file alone fails; with the table entry alone it still
    fails (the changelog's Added section does not count); with both it passes."""
    alone = removal_problems(BEFORE, RENAMED, TABLE_OLDS, LOG)
    assert alone == ["tflab.StabilizeReport.max_abs_error left the public API with no entry in "
                     "tflab/_api/deprecations.py"]
    table = TABLE_OLDS | {"StabilizeReport.max_abs_error"}
    assert removal_problems(BEFORE, RENAMED, table, LOG) == [
        "tflab.StabilizeReport.max_abs_error left the public API and CHANGELOG.md's Deprecated/Removed "
        "section does not name it (`StabilizeReport.max_abs_error`)"]
    assert removal_problems(BEFORE, RENAMED, table, LOG_WITH_ENTRY) == []


def test_an_addition_or_a_changed_signature_needs_no_deprecation():
    """Healthy twin: a new name, or new lines for a name that stays, are no removal."""
    added = BEFORE + ["tflab.StabilizeReport.rms_error: float"]
    changed = BEFORE[:2] + ["tflab.stabilize(fn: 'Callable', *, seed: 'int' = 0) -> 'Callable'"]
    assert removal_problems(BEFORE, added, set(), "") == []
    assert removal_problems(BEFORE, changed, set(), "") == []


def test_the_diff_says_what_changed():
    text = diff_text(BEFORE, RENAMED[:2] + ["tflab.stabilize(fn: 'Callable', x: 'int') -> 'Callable'"])
    assert text.splitlines() == [
        "removed: tflab.StabilizeReport.max_abs_error",
        "added: tflab.StabilizeReport.max_abs_err: float | None",
        "changed: tflab.stabilize(fn: 'Callable') -> 'Callable'",
        "     now: tflab.stabilize(fn: 'Callable', x: 'int') -> 'Callable'"]


def test_the_renames_since_0_1_0_are_in_the_changelog():
    """Every entry of the table is named in CHANGELOG.md's Deprecated section of 0.2.0."""
    from _api_golden import changelog_sections

    notes = changelog_sections(open(CHANGELOG, encoding="utf-8").read())
    missing = sorted(d.old for d in deprecations.TABLE if d.kind != "key" and f"`{d.old}`" not in notes)
    assert missing == [], f"deprecated names CHANGELOG.md does not name: {missing}"
