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
