"""Docs/architecture.md's table of modules and the tests that cover them is the tests' own.

The table is read from the tests with `ast` (tests/_test_map.py): a test file covers a module when it
imports it, names it in a string or runs its CLI verb. Every module is covered, directly or through the
modules above it, and the table in the docs is exactly what the tests give.
"""

from __future__ import annotations

import os
import re
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)
from _test_map import coverage_map, covered_by, table_lines  # noqa: E402
from _import_graph import module_files  # noqa: E402

DOC = os.path.join(os.path.dirname(TESTS), "docs", "architecture.md")


def _doc_table() -> list[str]:
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"<!-- test-map:begin -->\n(.*?)\n<!-- test-map:end -->", text, flags=re.S)
    assert m, "docs/architecture.md lost its test-map block"
    return m.group(1).split("\n")


def test_the_docs_table_is_the_tests_own():
    assert _doc_table() == table_lines(), (
        "docs/architecture.md's module/test table is stale: regenerate it with `python tests/_test_map.py`")


def test_every_module_is_covered_by_a_test_directly_or_through_its_importers():
    uncovered = sorted(m for m, (tests, through) in coverage_map().items() if not tests and not through)
    assert uncovered == [], f"modules no test covers: {uncovered}"


def test_tests_live_in_package_folders_with_no_issue_or_step_numbers():
    flat = sorted(f for f in os.listdir(TESTS) if f.startswith("test_") and f.endswith(".py"))
    assert flat == [], f"test files outside tests/<package>/: {flat}"
    numbered = sorted(os.path.join(d, f) for d, _, files in os.walk(TESTS) for f in files
                      if re.match(r"test_\d", f))
    assert numbered == [], f"test files named by a number: {numbered}"


def test_the_map_sees_an_import_a_string_and_a_verb_and_misses_a_module_nobody_names(tmp_path):
    """The check can fail: a test that names nothing covers nothing; each way of naming a module counts."""
    files = module_files()
    t = tmp_path / "test_planted.py"
    pkg = "tflab"  # spelt in pieces, so this file itself names no module
    t.write_text(f"from {pkg}.retrace.diff import reasons_between\n"
                 f"CMD = ['python', '-m', '{pkg}.distribute.child']\n"
                 "def test_x(run_cli):\n    run_cli('lo' 'wer', 'f.py:g')\n")
    got = covered_by(str(t), files)
    assert {f"{pkg}.retrace.diff", f"{pkg}.distribute.child", f"{pkg}.commands.lower_cmd", f"{pkg}.cli"} <= got
    empty = tmp_path / "test_empty.py"
    empty.write_text("def test_nothing():\n    assert 1 + 1 == 2\n")
    assert covered_by(str(empty), files) == set()
