"""The plugin's files refused or written by POSIX habits: the baseline read only as a regular file with its
schema checked at session start, and the JSON record's symlink and permission rules.

Each refusal is one ``ERROR:`` line and exit status 4 before any test runs (never a hang on a FIFO, never an
INTERNALERROR traceback from a bad field later); each has a healthy twin that passes.
"""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from tests.pytest_plugin.test_pytest_plugin_ci import ONE, run

pytest_plugins = ["pytester"]


def refused(result, *words):
    """Exit 4, one error line holding every word, no traceback, no test run."""
    text = "\n".join(result.errlines + result.outlines)
    lines = [ln for ln in result.errlines if ln.startswith("ERROR:")]
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert len(lines) == 1 and all(w in lines[0] for w in words), (words, text)
    assert "INTERNALERROR" not in text and "Traceback" not in text, text
    assert not any("test_one" in ln for ln in result.outlines), text
    return lines[0]


@pytest.fixture(scope="module")
def base_doc() -> dict:
    """A baseline written by the plugin itself (the healthy record every mutation starts from)."""
    return {"version": 1, "tool": "tflab.pytest_plugin",
            "tests": [{"nodeid": "test_one.py::test_one", "trace_count": 1,
                       "functions": [{"function": "test_one.f", "qualname": "f", "module": "test_one",
                                      "group": "tf.function", "trace_count": 1}],
                       "data_trace_count": 0, "data_functions": []}]}


def test_the_plugin_s_own_record_is_a_healthy_baseline(pytester, tmp_path, base_doc):
    """What ``--tflab-traces-json`` writes passes the schema check, and the hand-made record matches it."""
    pytester.makepyfile(test_one=ONE)
    own = tmp_path / "own.json"
    assert run(pytester, f"--tflab-traces-json={own}").ret == 0
    doc = json.loads(own.read_text())
    from tflab._pytest.output import check_baseline
    assert check_baseline(doc) is None and check_baseline(base_doc) is None
    again = run(pytester, f"--tflab-traces-baseline={own}", "--tflab-traces-fail-on-increase")
    assert again.ret == 0 and any("no function traced more than in the baseline" in ln for ln in again.outlines)
    link = tmp_path / "link.json"  # a symlink to a regular file is read as that file
    link.symlink_to(own)
    assert run(pytester, f"--tflab-traces-baseline={link}").ret == 0


def test_a_baseline_that_is_not_a_regular_file_is_refused_without_reading_it(pytester, tmp_path):
    """A FIFO (``open`` would block for ever), a folder, /dev/zero and /dev/null: one line each."""
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    fifo = tmp_path / "base.fifo"
    os.mkfifo(fifo)
    stop = threading.Event()

    def unblock():  # should the plugin ever block reading the FIFO, a writer ends it: a failure, not a hang
        while not stop.wait(2.0):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            os.close(fd)

    t = threading.Thread(target=unblock, daemon=True)
    t.start()
    try:
        for path, kind in ((fifo, "a FIFO"), (tmp_path, "a folder"), ("/dev/zero", "a character device"),
                           ("/dev/null", "a character device")):
            refused(run(pytester, f"--tflab-traces-baseline={path}"), "--tflab-traces-baseline", kind,
                    "not a regular file")
    finally:
        stop.set()
        t.join()


def _mutated(doc: dict, change) -> dict:
    doc = json.loads(json.dumps(doc))
    change(doc)
    return doc


def _set(path, value):
    def change(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


BAD = {  # field path -> (mutation, words in the one line)
    "trace_count a word": (_set(["tests", 0, "functions", 0, "trace_count"], "three"),
                           'tests[0].functions[0].trace_count is "three"'),
    "trace_count null": (_set(["tests", 0, "functions", 0, "trace_count"], None),
                         "tests[0].functions[0].trace_count is null"),
    "trace_count negative": (_set(["tests", 0, "functions", 0, "trace_count"], -5),
                             "tests[0].functions[0].trace_count is -5"),
    "trace_count fraction": (_set(["tests", 0, "functions", 0, "trace_count"], 2.5),
                             "tests[0].functions[0].trace_count is 2.5"),
    "trace_count bool": (_set(["tests", 0, "functions", 0, "trace_count"], True),
                         "tests[0].functions[0].trace_count is true"),
    "trace_count NaN": (_set(["tests", 0, "functions", 0, "trace_count"], float("nan")),
                        "tests[0].functions[0].trace_count is nan"),
    "functions null": (_set(["tests", 0, "functions"], None), "tests[0].functions is null, not a list"),
    "functions of numbers": (_set(["tests", 0, "functions"], [5]), "tests[0].functions[0] is 5, not an object"),
    "data_functions a string": (_set(["tests", 0, "data_functions"], "x"), "tests[0].data_functions is"),
    "qualname a number": (_set(["tests", 0, "functions", 0, "qualname"], 7), "tests[0].functions[0].qualname"),
    "module a list": (_set(["tests", 0, "functions", 0, "module"], ["m"]), "tests[0].functions[0].module"),
    "nodeid null": (_set(["tests", 0, "nodeid"], None), "tests[0].nodeid is null"),
    "a test a string": (lambda d: d["tests"].append("t"), 'tests[1] is "t", not an object'),
    "version unknown": (_set(["version"], 99), "version is 99"),
    "version missing": (lambda d: d.pop("version"), "version is missing"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_baseline_is_one_line_naming_the_field(pytester, tmp_path, base_doc, case):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    change, words = BAD[case]
    path = tmp_path / "base.json"
    path.write_text(json.dumps(_mutated(base_doc, change)))  # NaN is written as the bare word NaN
    refused(run(pytester, f"--tflab-traces-baseline={path}"), str(path), words, "write the baseline again")


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000, "nested too deeply"),
    ('{"tests": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
    (b"\xff\xfe{}", "not a readable JSON"),
    ('{"version": 1, "tool": "tflab.pytest_plugin", "tests": [', "not a readable JSON"),
])
def test_baseline_json_that_cannot_be_parsed_is_one_line(pytester, tmp_path, text, words):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    path = tmp_path / "base.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    refused(run(pytester, f"--tflab-traces-baseline={path}"), words)


# ---------------------------------------------------------------------------
# --tflab-traces-json through a symlink, and the written file's mode
# ---------------------------------------------------------------------------


def test_a_symlinked_json_path_is_refused_unless_forced_then_its_target_is_written(pytester, tmp_path):
    """Without the flag the link and its target stay as they were; with it the target (in another folder) is
    replaced atomically from its own folder and the link still points at it; a dangling link's target is created.
    """
    pytester.makepyfile(test_one=ONE)
    there = tmp_path / "there"
    here = tmp_path / "here"
    there.mkdir()
    here.mkdir()
    target = there / "traces.json"
    target.write_text("old\n")
    link = here / "lnk.json"
    link.symlink_to(target)
    refused(run(pytester, f"--tflab-traces-json={link}"), "is a symlink", "--tflab-traces-force")
    assert link.is_symlink() and target.read_text() == "old\n"
    forced = run(pytester, f"--tflab-traces-json={link}", "--tflab-traces-force")
    assert forced.ret == 0, forced.outlines
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["tool"] == "tflab.pytest_plugin"
    assert sorted(os.listdir(there)) == ["traces.json"] and sorted(os.listdir(here)) == ["lnk.json"]
    dangling = here / "new.json"  # sibling: a link whose target does not exist yet
    dangling.symlink_to(there / "new-target.json")
    refused(run(pytester, f"--tflab-traces-json={dangling}"), "is a symlink")
    assert run(pytester, f"--tflab-traces-json={dangling}", "--tflab-traces-force").ret == 0
    assert dangling.is_symlink() and json.loads((there / "new-target.json").read_text())["tests"]


@pytest.mark.parametrize("umask, want", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)],
                         ids=["umask022", "umask002", "umask077"])
def test_a_new_record_gets_the_umask_s_mode_and_a_replaced_one_keeps_its_own(tmp_path, umask, want):
    from tflab._pytest.output import write_json_atomically

    old = os.umask(umask)
    try:
        new = tmp_path / "new.json"
        write_json_atomically(str(new), {"tool": "tflab.pytest_plugin", "tests": []})
        assert stat.S_IMODE(os.stat(new).st_mode) == want
        kept = tmp_path / "kept.json"  # healthy twin: the user's chosen mode on an existing file survives
        kept.write_text("{}")
        os.chmod(kept, 0o640)
        write_json_atomically(str(kept), {"tool": "tflab.pytest_plugin", "tests": []})
        assert stat.S_IMODE(os.stat(kept).st_mode) == 0o640
    finally:
        os.umask(old)


def test_the_session_s_record_is_0644_under_umask_022(pytester, tmp_path):
    pytester.makepyfile(test_one=ONE)
    old = os.umask(0o022)
    try:
        out = tmp_path / "t.json"
        assert run(pytester, f"--tflab-traces-json={out}").ret == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
