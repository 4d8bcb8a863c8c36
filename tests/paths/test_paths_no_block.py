"""An output never waits for ever on a FIFO, and a full disk is one line, not a crash.

``--dot FIFO`` (and check-tflite's ``--node-data FIFO``) with no reader hung after the whole
verb's work; a full disk while ``lower`` wrote its stages exited 70 with tflab's traceback.
"""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest

from tflab.errors import UsageError


def test_a_fifo_nobody_reads_is_one_line_not_a_hang(tmp_path):
    from tflab._io.paths import FIFO_READER_GRACE_S, output_path

    fifo = tmp_path / "graph.dot"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(UsageError, match=r"--dot .*graph.dot: is a FIFO that no process reads"):
        output_path(fifo, "--dot").write("digraph {}")
    # sibling: a FIFO reached through a symlink, as check-tflite's --node-data
    link = tmp_path / "nodes.json"
    link.symlink_to(fifo)
    with pytest.raises(UsageError, match=r"no process reads"):
        output_path(link, "--node-data", overwrite=True).write("{}")
    assert time.monotonic() - start < 2 * FIFO_READER_GRACE_S + 5  # the grace per FIFO, never a hang
    assert sorted(os.listdir(tmp_path)) == ["graph.dot", "nodes.json"]


def test_a_fifo_with_a_slow_reader_gets_every_byte(tmp_path):
    """Healthy twin: a reader that starts late and drains slowly still gets a payload larger than
    the pipe's buffer (64 KiB), so the non-blocking open does not make the write partial."""
    from tflab._io.paths import output_path

    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    payload = b"<p>" + b"x" * (300 << 10) + b"</p>"
    got = []

    def read_slowly():
        with open(fifo, "rb") as f:
            time.sleep(0.3)
            got.append(f.read())

    reader = threading.Thread(target=read_slowly, daemon=True)
    reader.start()
    deadline = time.monotonic() + 5
    while True:  # the reader's open comes first; before it, the write is refused (see above)
        try:
            output_path(fifo, "--html").write(payload)
            break
        except UsageError:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    reader.join(10)
    assert got == [payload]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_inside_a_verb_is_one_usage_line(code):
    """Handed: ENOSPC while lower wrote its stage files; sibling: a quota (EDQUOT)."""
    from tflab._user.usercode import cli_verb

    with pytest.raises(UsageError, match=r"cannot write .*stage.ll: .*; free space there"):
        with cli_verb():
            raise OSError(code, os.strerror(code), "/out/.x.tmp-1/08_llvm_ir_stage.ll")


def test_other_os_errors_inside_a_verb_pass_through():
    """Healthy twin: a permission error is not a full disk (it keeps its own handling)."""
    from tflab._user.usercode import cli_verb

    with pytest.raises(PermissionError):
        with cli_verb():
            raise PermissionError(errno.EACCES, "Permission denied", "/x")


# ------------------------------------------------------------------ a FIFO output is judged up front


def test_html_fifo_nobody_reads_is_refused_before_tf(tmp_path):
    """``lower --html FIFO`` with no reader was found only when the page was written, after the whole
    lowering: the FIFO is opened when the path is checked, before TF loads."""
    from tests.commands.test_cli_preflight import tflab

    (tmp_path / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    os.mkfifo(tmp_path / "page.html")
    code, lines, tf_loaded = tflab(tmp_path, "lower", "m.py:f", "--arg", "x=float32[2,8]", "--html", "page.html")
    assert code == 2 and len(lines) == 1 and not tf_loaded, lines
    assert "--html page.html: is a FIFO that no process reads" in lines[0], lines


@pytest.mark.parametrize("verb, flag, extra", [
    ("retrace", "--html", ["s.py"]), ("inspect", "--dot", ["m.py:f"]), ("compare", "--hlo", ["m.py:f"]),
])
def test_every_file_output_judges_its_fifo_in_the_preflight(tmp_path, monkeypatch, verb, flag, extra):
    """Siblings: the other verbs' file outputs, judged by the same check (`output_path` → `claim_fifo`)."""
    import argparse

    from tflab._io import fifo_out
    from tflab.cli import preflight

    monkeypatch.setattr(fifo_out, "FIFO_READER_GRACE_S", 0.1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    (tmp_path / "s.py").write_text("print(1)\n")
    os.mkfifo(tmp_path / "out.fifo")
    dest = flag.lstrip("-")
    args = argparse.Namespace(verb=verb, target=extra[0], script=extra[0], arg=["x=float32[2]"], examples=None,
                              force=False, dot=None, html=None, hlo=None, tensorboard=None, json=False,
                              stage=[], path="xla", runs=20, repeats=1, internal=False, script_args=[])
    setattr(args, dest, "out.fifo")
    with pytest.raises(UsageError, match=rf"{flag} out.fifo: is a FIFO that no process reads"):
        preflight(verb, args)


def test_a_fifo_with_a_reader_is_held_from_the_check_and_gets_the_page(tmp_path):
    """Healthy twin: a reader that opened the FIFO passes the check, and does not see an end of file
    while the verb works (the check's descriptor is held): it gets the whole page once written."""
    from tflab._io.fifo_out import _HELD_FIFOS
    from tflab._io.paths import output_path

    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    out = output_path(fifo, "--html")  # the check: the reader's open completes here
    assert os.path.realpath(fifo) in _HELD_FIFOS
    time.sleep(0.3)  # the verb's work
    assert not got  # no end of file yet
    out.write(b"<html>" + b"x" * (200 << 10) + b"</html>")
    reader.join(10)
    assert got and got[0].startswith(b"<html>") and len(got[0]) == (200 << 10) + 13 and not _HELD_FIFOS


def test_a_held_fifo_the_verb_never_wrote_is_closed_when_it_ends(tmp_path):
    """A verb that failed after the check closes the FIFO (`release_fifos`): its reader sees the end."""
    from tflab._io.fifo_out import release_fifos
    from tflab._io.paths import output_path

    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    output_path(fifo, "--html")
    release_fifos()
    reader.join(10)
    assert got == [b""]
