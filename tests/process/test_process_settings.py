"""Every ``TFLAB_*`` environment variable is declared once (`tflab.process.settings`) and read through it.

Two checks over every tracked file, each shown to fail on a planted file:

* a ``TFLAB_*`` name used anywhere (Python, C++, Markdown, the Makefile) is
  declared in `SETTINGS`; C preprocessor names (``#define TFLAB_AVX2``, the
  include guard) are not variables and are left out;
* Python code reads a ``TFLAB_*`` name from the environment only through the
  table (``settings.get``), apart from the two readers the table itself lists
  as raw (the C++ kernel's ``std::getenv`` and the benchmark's
  ``sitecustomize``, which must not import tflab).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tflab.process import settings

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"(?<![A-Za-z0-9_])TFLAB_[A-Z0-9_]+")
DEFINE = re.compile(r"^\s*#\s*(?:define|ifndef|undef)\s+(TFLAB_[A-Z0-9_]+)", re.M)
# A read from the environment that does not go through the table.
RAW_READ = re.compile(r"""(?:\bos\.environ\.get|\bos\.getenv|\bgetenv|\benviron\.get|\benv\.get)\(\s*["']TFLAB_"""
                      r"""|\bos\.environ\[\s*["']TFLAB_[A-Z0-9_]+["']\s*\](?!\s*=[^=])""")
# The readers the table lists as raw, and why (its `Setting.readers` name them).
RAW_ALLOWED = {"benchmarks/_phases_site/sitecustomize.py": "runs at every start-up; must not import tflab",
               "tflab/process/settings.py": "the table itself"}
TEXT_SUFFIXES = {".py", ".md", ".cc", ".h", ".cu", ".toml", ".cfg", ".txt", ".sh", ".yml", ".yaml", ".json"}


PLANTS = "tests/process/test_process_settings.py"  # this file: its planted names are the point


def _tracked() -> list[tuple[str, str]]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = []
    for rel in out.decode().split("\0"):
        path = REPO / rel
        if rel and rel != PLANTS and (path.suffix in TEXT_SUFFIXES or path.name == "Makefile") and path.is_file():
            files.append((rel, path.read_text(errors="replace")))
    return files


def undeclared_names(files: list[tuple[str, str]]) -> list[str]:
    """``"path: NAME"`` for each ``TFLAB_*`` name in ``files`` that `SETTINGS` does not declare."""
    macros = {m for _, text in files for m in DEFINE.findall(text)}
    found = []
    for rel, text in files:
        for name in sorted(set(NAME.findall(text)) - macros):
            if name not in settings.SETTINGS:
                found.append(f"{rel}: {name}")
    return found


def raw_reads(files: list[tuple[str, str]]) -> list[str]:
    """``"path:line: text"`` for each Python read of a ``TFLAB_*`` name that bypasses the table."""
    found = []
    for rel, text in files:
        if not rel.endswith(".py") or rel in RAW_ALLOWED or rel.startswith("tests/"):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if RAW_READ.search(line):
                found.append(f"{rel}:{i}: {line.strip()}")
    return found


def test_every_tflab_name_in_a_tracked_file_is_declared():
    files = _tracked()
    assert len(files) > 100  # the scan saw the repository (tflab/, custom_ops/, benchmarks/, tests/)
    assert {rel.split("/")[0] for rel, _ in files} >= {"tflab", "custom_ops", "benchmarks", "tests"}
    assert undeclared_names(files) == []


def test_a_planted_undeclared_name_fails_the_scan():
    """The check can fail: a module reading TFLAB_TYPO_DIR (and a README naming TFLAB_NEW_KNOB) is caught;
    a C macro named TFLAB_* is not a variable."""
    planted = [("tflab/planted.py", 'import os\nroot = os.environ.get("TFLAB_TYPO_DIR", "/tmp")\n'),
               ("docs/planted.md", "Set `TFLAB_NEW_KNOB=1` to ...\n"),
               ("custom_ops/cc/planted.cc", "#define TFLAB_INLINE inline\nTFLAB_INLINE int f();\n")]
    assert undeclared_names(planted) == ["tflab/planted.py: TFLAB_TYPO_DIR", "docs/planted.md: TFLAB_NEW_KNOB"]


def test_python_reads_tflab_names_only_through_the_table():
    assert raw_reads(_tracked()) == []


def test_a_planted_raw_read_fails_the_scan():
    """A declared name read straight from os.environ (bypassing the table) is caught in each spelling;
    writing one into a child's environment is not a read."""
    planted = [("tflab/a.py", 'x = os.environ.get("TFLAB_TOUR_LANE", "1")\n'),
               ("tflab/b.py", 'x = os.environ["TFLAB_REPORT"]\n'),
               ("custom_ops/c.py", 'x = env.get("TFLAB_WARP_SOFTMAX_ISA")\n'),
               ("tflab/d.py", 'os.environ["TFLAB_REPORT"] = path\nenv = {"TFLAB_DEADLINE_S": "5"}\n'),
               ("tflab/e.py", 'x = setting("TFLAB_TOUR_LANE")\n')]
    assert raw_reads(planted) == ['tflab/a.py:1: x = os.environ.get("TFLAB_TOUR_LANE", "1")',
                                  'tflab/b.py:1: x = os.environ["TFLAB_REPORT"]',
                                  'custom_ops/c.py:1: x = env.get("TFLAB_WARP_SOFTMAX_ISA")']


def test_get_knows_only_declared_names_and_applies_the_default():
    assert settings.get("TFLAB_TOUR_LANE", {}) == "1"
    assert settings.get("TFLAB_TOUR_LANE", {"TFLAB_TOUR_LANE": "0"}) == "0"
    assert settings.get("TFLAB_WARP_SOFTMAX_SO", {}) is None
    assert settings.get_float("TFLAB_DEADLINE_S", 300.0, {}) == 300.0
    assert settings.get_float("TFLAB_DEADLINE_S", 300.0, {"TFLAB_DEADLINE_S": "12.5"}) == 12.5
    with pytest.raises(KeyError, match=r"TFLAB_TOUR_LANES is not a declared tflab setting: declare it in "
                                       r"tflab/process/settings.py"):
        settings.get("TFLAB_TOUR_LANES", {"TFLAB_TOUR_LANES": "0"})  # a typo is loud, not "unset"


def test_each_setting_has_a_meaning_a_kind_and_who_reads_or_sets_it():
    for s in settings.SETTINGS.values():
        assert s.name.startswith("TFLAB_") and len(s.meaning) > 20, s
        assert s.kind in ("user", "child", "test"), s
        assert s.readers or s.setters, s
        if s.kind != "user":
            assert s.setters, s  # tflab sets it: who does


def test_each_declared_reader_module_names_the_setting():
    """The table's readers are true: each Python reader module mentions the name (or its constant)."""
    for s in settings.SETTINGS.values():
        for reader in s.readers:
            if " " in reader or "/" in reader:
                continue  # a file, not a module (the C++ kernel, the sitecustomize)
            path = REPO / (reader.replace(".", "/") + ".py")
            assert path.is_file(), (s.name, reader)
            text = path.read_text()
            assert s.name in text or (s.name == "TFLAB_EXPORT_WORKER_CRASH" and "CRASH_ENV" in text) or (
                s.name == "TFLAB_CHILD_FDS" and "_ENV" in text), (s.name, reader)


def test_tflab_env_prints_the_table_and_json_carries_it(monkeypatch, capsys):
    from tflab.cli import main

    monkeypatch.setenv("TFLAB_TOUR_LANE", "0")
    monkeypatch.delenv("TFLAB_WARP_SOFTMAX_SO", raising=False)
    monkeypatch.delenv("TFLAB_DEADLINE_S", raising=False)
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    block = out.split("TFLAB_* settings (tflab/process/settings.py):\n", 1)[1].splitlines()
    rows = {ln.split()[0]: ln.split()[1] for ln in block[2:] if ln.strip()}
    assert list(rows) == list(settings.SETTINGS)  # every setting, in the table's order
    assert rows["TFLAB_TOUR_LANE"] == "0" and rows["TFLAB_WARP_SOFTMAX_SO"] == "(unset)"
    assert main(["env", "--json"]) == 0
    got = {r["name"]: r for r in json.loads(capsys.readouterr().out)["settings"]}
    assert list(got) == list(settings.SETTINGS)
    assert got["TFLAB_TOUR_LANE"]["value"] == "0" and got["TFLAB_TOUR_LANE"]["default"] == "1"
    assert got["TFLAB_DEADLINE_S"]["value"] is None and "tflab._tour.lane" in got["TFLAB_DEADLINE_S"]["readers"]


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan", "inf", "1e400", "1e-300", "0x10", "86401", " "])
def test_a_junk_fix_time_limit_is_refused_before_a_verb_starts(raw):
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match=r"TFLAB_FIX_TIMEOUT_S=.* give a number of seconds from 0\.1 to 86400"):
        settings.check_environment({"TFLAB_FIX_TIMEOUT_S": raw})
    assert "(refused: not a value it takes)" in settings.table_text({"TFLAB_FIX_TIMEOUT_S": raw})


@pytest.mark.parametrize("raw", ["30", "0.5", "2.5e1", "86400", ""])
def test_a_fix_time_limit_in_range_is_taken(raw):
    settings.check_environment({"TFLAB_FIX_TIMEOUT_S": raw})
    assert "refused" not in settings.table_text({"TFLAB_FIX_TIMEOUT_S": raw})


def test_tflab_refuses_a_junk_fix_time_limit_in_one_line_with_exit_2():
    import os
    import sys

    env = {**os.environ, "TFLAB_FIX_TIMEOUT_S": "inf", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    got = subprocess.run([sys.executable, "-m", "tflab", "env"], env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2
    lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "TFLAB_FIX_TIMEOUT_S='inf'" in lines[0] and "Traceback" not in got.stderr
