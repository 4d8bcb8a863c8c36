"""The cause line of a child's stderr (`tflab.process.stderr.cause_line`): TF's and absl's import-time
logging (a cuInit failure on every machine without a GPU) is never quoted as why a child ended."""

from __future__ import annotations

from tflab.process.stderr import cause_line

NOISE = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
         "I0000 00:00:1796640015.467606   18467 port.cc:153] oneDNN custom operations are on.\n"
         "E0000 00:00:1796640017.102513   18467 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n")


def test_tf_log_lines_are_left_out_and_the_last_other_line_kept():
    assert cause_line(NOISE) == ""
    assert cause_line(NOISE + "Fatal Python error: Segmentation fault\n\n") == "Fatal Python error: Segmentation fault"
    assert cause_line("ValueError: bad\n" + NOISE) == "ValueError: bad"


def test_a_fatal_tf_line_is_kept_and_cut_to_the_limit():
    fatal = "F0000 00:00:1.0 1 tensor.cc:12] Check failed: shape ok"
    assert cause_line(NOISE + fatal) == fatal
    assert cause_line("x" * 500, limit=10) == "x" * 10
