"""The one Fix record (tflab/fix.py): a failed candidate is never the printed fix."""

import pytest

import tflab.fix as fx


def test_failed_candidate_is_not_the_fix_and_is_shown_as_tried():
    bad = fx.attempt("input_signature", "tf.TensorSpec([2], tf.int32)", "give add an input_signature",
                     lambda: (False, "rejects call 1 (shape ())"))
    good = fx.attempt("input_signature", "tf.TensorSpec(None, tf.int32)", "give add an input_signature",
                      lambda: (True, "1 trace for your 3 calls", {"traces": 1, "calls": 3}))
    plan = fx.first_working([bad, good])
    assert plan.fix is good and plan.fix.checked
    assert plan.fix.measured == {"traces": 1, "calls": 3}
    lines = plan.lines()
    assert lines[0] == ("fix: give add an input_signature: tf.TensorSpec(None, tf.int32) "
                        "(checked: 1 trace for your 3 calls)")
    assert "tried first" in lines[1] and "TensorSpec([2]" in lines[1] and "failed: rejects call 1" in lines[1]


def test_every_candidate_failed_says_none_worked_with_what_each_gave():
    def boom():
        raise ValueError("Can not cast TensorSpec(shape=()) to TensorSpec(shape=(2,))\nmore")

    a = fx.attempt("code", "tnp.arange(n)", "use tf.experimental.numpy", boom)
    b = fx.attempt("code", "tf.range(n)", "use the core op", lambda: (False, "output differs by 3 ULP"))
    plan = fx.first_working([lambda: a, lambda: b])
    assert plan.fix is None and plan.none_worked
    [line] = plan.lines()
    assert line.startswith("fix: none of the 2 candidate fix(es) worked on your case")
    assert "raised ValueError: Can not cast" in line and "more" not in line
    assert "output differs by 3 ULP" in line


def test_lazy_candidates_stop_at_the_first_that_works():
    ran = []

    def cand(i, ok):
        def run():
            ran.append(i)
            return fx.attempt("option", f"opt{i}", "set an option", lambda: (ok, f"r{i}"))
        return run

    plan = fx.first_working([cand(0, False), cand(1, True), cand(2, True)])
    assert ran == [0, 1] and plan.fix.change == "opt1" and len(plan.tried) == 2


def test_unchecked_fix_is_printed_with_why_only_when_nothing_was_checked():
    u = fx.unchecked("converter", "", "run without the default delegate", "needs your device")
    assert u.line() == "fix: run without the default delegate (not checked: needs your device)"
    good = fx.attempt("option", "x", "do x", lambda: (True, "ok"))
    assert fx.first_working([u, good]).fix is good
    assert fx.first_working([u]).fix is u
    assert fx.first_working([]).lines() == []


def test_keyboard_interrupt_in_a_check_is_not_swallowed():
    def ctrl_c():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fx.attempt("code", "", "x", ctrl_c)


def test_status_is_checked_and_dict_is_json_ready():
    with pytest.raises(ValueError):
        fx.Fix("code", "", "x", status="ok")
    d = fx.attempt("cast", "tf.cast(x, tf.float32)", "cast", lambda: (True, "runs")).to_dict()
    assert d["status"] == "checked" and d["result"] == "runs" and d["kind"] == "cast"


def test_the_phrases_are_properties():
    f = fx.attempt("cast", "tf.cast(x, tf.float32)", "cast x", lambda: (False, "still NaN"))
    assert f.what == "cast x: tf.cast(x, tf.float32)" and f.check_text == "failed: still NaN"
    assert fx.first_working([f]).failures == (f,)


def test_sys_exit_under_a_fix_fails_that_fix_not_the_run():
    """Hostile trial H5: a body that calls sys.exit only under the fix's None dim lost the whole report."""
    import sys

    f = fx.attempt("input_signature", "tf.TensorSpec([None])", "relax x", lambda: sys.exit(7))
    assert f.failed and f.result == "your code called sys.exit(7) under this fix"
    assert fx.first_working([f]).none_worked
