"""Comments, docstrings, test names and docs give reasons in the product's terms, never the work's history.

A line that cites a milestone ("M3"), a trial or its finding labels ("s8 B3",
"trial s7 #2", "P5", "the newcomer trial"), an internal issue or its items
("issue 33 B11", "item 4") or the case files they came from tells a reader who
was not there nothing; the reason itself belongs on the line, the history in
``git log``. A public thread may be cited where a reader can open it, with its
repository: ``tensorflow/tensorflow#117318``, ``keras-team/keras#19458``.

Scanned: every tracked text file under tflab/, tests/, benchmarks/, docs/,
custom_ops/ and README.md; in Python files the comments, the string literals
(docstrings included) and the names of test functions.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOPS = ("tflab", "tests", "benchmarks", "docs", "custom_ops", "README.md")
TEXT = (".py", ".md", ".txt", ".cc", ".h", ".cu", ".sh", ".toml", ".cfg", ".ipynb")

# Each pattern names one kind of citation; a match anywhere in a scanned text is a finding.
PATTERNS: dict[str, re.Pattern] = {
    "milestone": re.compile(r"(?i:\bmilestones?\b)|\bM\d{1,2}\b"),
    "finding label": re.compile(r"\b[BPH]\d{1,2}[a-z]?\b|\(round \d+\)"),
    "trial or session": re.compile(r"(?i)\btrial_\w+|\b(?:newcomer|hostile|lead's)(?:\s+\w+)?\s+trials?\b"
                                   r"|\btrials?\s+(?:s\d|of this session|round)|\bsessions?\s+\d+\b|\bnewcomer\b"
                                   r"|\bs\d{1,2}(?:\s*#\d+|\s+[BP]\d+)|\bhostile (?:pass|round)\b|\baudit\s*#?\d+|\bold main\b"),
    "internal issue": re.compile(r"(?i)(?<![\w/-])issue\s*#?\d+|(?<![\w/-])issues\s*#?\d+(?:\s*(?:,|and)\s*#?\d+)+|\bitems?\s+\d+(?:\s*[-–,]\s*\d+)*\b(?!\s*(?:of|in|x|×))"),
    "case file": re.compile(r"\b(?:reports(?:_s\d+)?|trial_\w+|PRELUDE|STYLE)\.md\b"),
    "bare thread number": re.compile(r"(?<![\w/&-])#\d{4,}\b"),
}
# Test names: a test named for a label (test_b4_..., test_issue33_...) says nothing of what it tests.
TEST_NAME = re.compile(r"(?i)^test_(?:.*_)?(?:[bpmwx]\d{1,2}|s\d{1,2}|issue\d+|item\d+|trial)(?:_|$)")


def _tracked(repo: Path) -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--", *TOPS], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.split()
        files = [repo / p for p in out]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:  # not a git checkout (a planted tree): every file
        files = [p for top in TOPS for p in ([repo / top] if (repo / top).is_file()
                                             else (repo / top).rglob("*"))]
    return [p for p in files if p.is_file() and (p.suffix in TEXT or p.name in ("BUILD", "Makefile"))
            and p.name != Path(__file__).name]


def _python_texts(source: str):
    """``(line, text)`` of each comment, string literal and test function name of a Python file."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        yield from enumerate(source.splitlines(), 1)
        return
    for i, tok in enumerate(tokens):
        if tok.type in (tokenize.COMMENT, tokenize.STRING) or (
                tok.type == tokenize.FSTRING_MIDDLE if hasattr(tokenize, "FSTRING_MIDDLE") else False):
            for k, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + k, line
        elif tok.type == tokenize.NAME and tok.string == "def" and i + 1 < len(tokens):
            name = tokens[i + 1].string
            if TEST_NAME.match(name):
                yield tok.start[0], f"test name {name}"


def _c_comments(source: str):
    """``(line, text)`` of each ``//`` comment and each line inside ``/* … */`` of a C++/CUDA file."""
    inside = False
    for n, line in enumerate(source.splitlines(), 1):
        if inside or line.lstrip().startswith(("/*", "*")):
            inside = "*/" not in line
            yield n, line
        elif "//" in line:
            yield n, line.split("//", 1)[1]


def findings(repo: Path = REPO) -> list[str]:
    """``path:line: kind: text`` for every cited milestone, trial, finding or internal issue."""
    out = []
    for path in _tracked(repo):
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if path.suffix == ".py":
            if not any(p.search(source) for p in PATTERNS.values()) and not any(
                    TEST_NAME.match(n) for n in re.findall(r"(?m)^\s*(?:async\s+)?def\s+(test_\w+)", source)):
                continue  # nothing to look at: tokenizing every file costs seconds
            texts = _python_texts(source)
        elif path.suffix in (".cc", ".h", ".cu"):
            texts = _c_comments(source)
        else:
            texts = enumerate(source.splitlines(), 1)
        rel = path.relative_to(repo).as_posix()
        for line, text in texts:
            if text.startswith("test name "):
                out.append(f"{rel}:{line}: test named for a label: {text[10:]}")
                continue
            for kind, pattern in PATTERNS.items():
                m = pattern.search(text)
                if m:
                    out.append(f"{rel}:{line}: {kind} {m.group(0)!r}: {text.strip()[:140]}")
                    break
    return out


def test_no_line_cites_the_works_history():
    found = findings()
    assert not found, ("lines that cite the work's history instead of the reason (say the reason in the "
                       "product's terms):\n" + "\n".join(found))


def test_the_check_sees_each_kind_of_citation_in_a_planted_tree(tmp_path):
    """Planted: one line of each kind fails; the healthy twins beside them (a public thread with its
    repository, an op index, a variable named s1, the word "items") pass."""
    (tmp_path / "tflab").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tflab" / "bad.py").write_text(
        "def f():\n"
        "    # issue 33 B11: a FIFO named like the owner file blocked open\n"
        "    return 1  # M3\n\n\n"
        "def g():\n"
        '    """The second process replays two steps (newcomer trial s8 #4)."""\n'
        "    return 2\n")
    (tmp_path / "tests" / "test_bad.py").write_text(
        "def test_b4_interrupt():\n    pass\n\n\n"
        "def test_reports_case():\n    '''From reports_s5.md, #38561.'''\n")
    (tmp_path / "tflab" / "good.py").write_text(
        "def h(items, s1):\n"
        "    # a FIFO named like the owner file would block `open` (tensorflow/tensorflow#117318)\n"
        '    label = f"#{3} ADD"  # the op index of the LiteRT table\n'
        "    return [s1 for s1 in items], label, 'items 3 of 4'\n\n\n"
        "def test_a_fifo_is_refused():\n    pass\n")
    (tmp_path / "README.md").write_text("Measured at commit 1a2b3c4 on an AMD EPYC (AVX2).\n"
                                        "Fixed in milestone 3.\n")
    found = findings(tmp_path)
    where = sorted({f.split(": ", 1)[0] for f in found})
    assert where == ["README.md:2", "tests/test_bad.py:1", "tests/test_bad.py:6", "tflab/bad.py:2",
                     "tflab/bad.py:3", "tflab/bad.py:7"], found
    assert not [f for f in found if f.startswith("tflab/good.py")]
