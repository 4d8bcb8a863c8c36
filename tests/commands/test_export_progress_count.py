"""``tflab export``'s progress line counts the steps it takes: never ``[export 7/6 …]``.

The total is loading + SavedModel + (convert, check) per variant; the worker-pool announcement
and a failed conversion's fix attempts are lines within a step, not steps.
"""

from __future__ import annotations

import re

from tflab._io.progress import Progress
from tflab.litert.pool import ConversionPool


def _counts(err: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"^\[export (\d+)/(\d+) ", err, re.M)]


def _export_steps(quants, workers, capsys):
    progress = Progress("export", total=2 + 2 * len(quants))
    progress("loading")
    progress("SavedModel round trip")
    pool = ConversionPool(quants, lambda qs, done: [(progress(f"converting {q}"), done(q, {"event": "done"}))
                                                   for q in qs], progress=progress, workers=workers)
    for q in quants:
        pool[q]
        progress(f"checking {q} with LiteRT")
    return _counts(capsys.readouterr().err)


def test_two_variants_in_two_workers_end_at_the_total(capsys):
    counts = _export_steps(["int8", "dynamic"], 2, capsys)  # the pool's line is a note within step 2
    assert counts[-1] == (6, 6) and all(i <= n for i, n in counts), counts


def test_three_variants_in_three_workers_end_at_the_total(capsys):
    counts = _export_steps(["none", "int8", "float16"], 3, capsys)
    assert counts[-1] == (8, 8) and all(i <= n for i, n in counts), counts


def test_one_worker_has_no_pool_line_and_the_same_count(capsys):
    """Healthy twin: no pool announcement; the count was right already."""
    counts = _export_steps(["int8", "dynamic"], 1, capsys)
    assert counts == [(i, 6) for i in range(1, 7)], counts


def test_an_uncounted_step_raises_the_total_instead_of_passing_it(capsys):
    progress = Progress("export", total=2)
    for m in ("a", "b", "c"):
        progress(m)
    assert _counts(capsys.readouterr().err) == [(1, 2), (2, 2), (3, 3)]


def test_a_failed_conversions_fix_attempt_is_a_line_within_its_step(capsys, monkeypatch):
    """The fix attempt (the converter run again) prints within the variant's step: the count stays."""
    from tflab.litert import conversion_fixes

    monkeypatch.setattr(conversion_fixes, "layer_of", lambda model, scope: None)
    monkeypatch.setattr(conversion_fixes, "try_fixes", lambda *a: ())
    failure = type("Failure", (), {"scope": "", "line": lambda self, q, layer: f"{q} failed"})()
    progress = Progress("export", total=4)
    progress("converting int8")
    assert conversion_fixes.explain_failure(None, "sm", None, "int8", failure, progress, fixes=True) == (
        "int8 failed", ())
    err = capsys.readouterr().err
    assert _counts(err) == [(1, 4), (1, 4)] and "trying a fixed batch size" in err, err
