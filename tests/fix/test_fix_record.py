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


def test_ctrl_c_during_a_check_is_not_swallowed_but_a_keyboard_interrupt_the_check_raises_fails_it():
    import os
    import signal
    import threading
    import time

    def ctrl_c_raised_by_the_code():
        raise KeyboardInterrupt

    f = fx.attempt("code", "", "x", ctrl_c_raised_by_the_code)  # no Ctrl-C came: the candidate's own doing
    assert f.check_text == "failed: your code raised KeyboardInterrupt under this fix"

    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()  # the user presses Ctrl-C
    with pytest.raises(KeyboardInterrupt):
        fx.attempt("code", "", "x", lambda: time.sleep(1e9), timeout_s=60)


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
    """A body that calls sys.exit only under the fix's None dim lost the whole report."""
    import sys

    f = fx.attempt("input_signature", "tf.TensorSpec([None])", "relax x", lambda: sys.exit(7))
    assert f.failed and f.result == "your code called sys.exit(7) under this fix"
    assert fx.first_working([f]).none_worked


# --- "checked" on the user's values: the fixed outputs against the original's eager outputs ---

def test_values_match_never_casts_the_reference():
    import numpy as np

    from tflab.fix import values_match

    # a fix that turns eager's float 0.5 into an int 0 changed the answer
    v = values_match([np.float32(0.5)], [np.int32(0)])
    assert not v.ok and v.text == "call 1: output[0] is 0 where eager gave 0.5"
    # the same value in a wider dtype is the same value
    assert values_match([np.float32(0.5)], [np.float64(0.5)]).ok
    # a wider value the reference's dtype cannot hold is not equal
    assert not values_match([np.float32(1.0)], [np.float64(1.0 + 2.0 ** -40)]).ok


def test_values_match_checks_every_call_and_says_which():
    from tflab.fix import values_match

    ok = values_match([42.0, 43.0], [42.0, 43.0])
    assert ok.ok and ok.calls == 2 and ok.max_ulp == 0 and "bit for bit" in ok.text
    bad = values_match([42.0, 43.0], [42.0, 1.0])
    assert not bad.ok and bad.text == "call 2: output[0] is 1.0 where eager gave 43.0"
    assert not values_match([1.0, 2.0], [1.0]).ok


def test_values_match_bound_is_stated_and_binding():
    import numpy as np

    from tflab.fix import values_match

    ref = np.float32([1, 2, 3])
    near = np.nextafter(ref, np.float32(10))
    assert not values_match([ref], [near]).ok
    v = values_match([ref], [near], ulp_bound=1, why_bound="the fix computes in float32 on purpose")
    assert v.ok and v.max_ulp == 1 and "bound 1: the fix computes in float32 on purpose" in v.text
    far = values_match([[ref]], [[np.float32([1, 2, 4])]])
    assert not far.ok and "output[0][2] is 4 where eager gave 3" in far.text


def test_values_not_kept_says_so():
    from tflab.fix import VALUES_NOT_KEPT, values_match

    v = values_match(None, [1.0])
    assert v.text == VALUES_NOT_KEPT and not v.kept


# --------------------------------------------------------------------------- interrupts under a check in this process


def _raise_keyboard_interrupt():
    raise KeyboardInterrupt


def test_a_keyboard_interrupt_of_the_users_code_fails_an_in_process_check(monkeypatch):
    """A check that cannot run apart (``apart=False``) re-raised every KeyboardInterrupt, so the user's own
    ``raise KeyboardInterrupt`` (or a SIGINT it sent itself, which tflab's supervisor never received)
    ended the verb as if Ctrl-C came. Under tflab's handler with no SIGINT at all, or with the
    supervisor's word that none reached it, it fails that candidate; a real Ctrl-C still stops the run."""
    import signal

    import tflab.errors as errors
    import tflab.fix as fx

    previous = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(errors, "_INT_RECEIVED", False)
    errors.install_sigint_handler()  # the CLI's handler records every SIGINT
    try:
        f = fx.attempt("code", "x", "change x", _raise_keyboard_interrupt, apart=False)
        assert (f.status, f.check_text) == (fx.FAILED, "failed: your code raised KeyboardInterrupt under this "
                                                       "fix (no Ctrl-C reached tflab)")
        monkeypatch.setattr(errors, "_INT_RECEIVED", True)  # a SIGINT came ...
        monkeypatch.setattr(errors, "_INT_WITNESS", lambda: False)  # ... from inside the run (sibling)
        assert fx.attempt("code", "x", "change x", _raise_keyboard_interrupt, apart=False).status == fx.FAILED
        monkeypatch.setattr(errors, "_INT_WITNESS", lambda: True)  # the healthy twin: the supervisor got it
        with pytest.raises(KeyboardInterrupt):
            fx.attempt("code", "x", "change x", _raise_keyboard_interrupt, apart=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.setattr(errors, "_INT_RECEIVED", False)  # the Python API: tflab's handler not in place
    with pytest.raises(KeyboardInterrupt):
        fx.attempt("code", "x", "change x", _raise_keyboard_interrupt, apart=False)


def test_a_candidate_that_signals_tflabs_process_fails_that_candidate(monkeypatch):
    """A check run apart whose body sends SIGINT to tflab's own process (its parent): under the CLI the
    supervisor received none, so it is the candidate's interrupt, a failed fix, not the end of the run.
    The healthy twin: the same SIGINT with the supervisor's word that it came (a Ctrl-C) stops the run."""
    import os
    import signal

    import tflab.errors as errors
    import tflab.fix as fx

    previous = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(errors, "_INT_RECEIVED", False)
    errors.install_sigint_handler()
    try:
        monkeypatch.setattr(errors, "_INT_WITNESS", lambda: False)

        def signal_parent():
            os.kill(os.getppid(), signal.SIGINT)
            import time
            time.sleep(30)

        f = fx.attempt("code", "x", "change x", signal_parent, timeout_s=20)
        assert (f.status, f.check_text) == (fx.FAILED, "failed: your code raised KeyboardInterrupt under this fix")
        monkeypatch.setattr(errors, "_INT_WITNESS", lambda: True)
        with pytest.raises(KeyboardInterrupt):
            fx.attempt("code", "x", "change x", signal_parent, timeout_s=20)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_fix_checked_without_values_never_reads_plain_checked():
    """A fix whose symptom is gone but whose outputs were never compared (`tflab retrace SCRIPT.py`
    keeps no values) must not print "(checked: …)": such a fix (``n = tf.constant(n)`` for
    ``tf.stack([x] * n)``) can change what the function computes. Twin: outputs compared."""
    from tflab.fix import CHECKED, VALUES_NOT_KEPT, Fix

    traces_only = Fix("retrace", "n = tf.constant(n, tf.int32)", "", status=CHECKED,
                      result=f"1 trace for your 3 calls, instead of 3; {VALUES_NOT_KEPT}")
    line = traces_only.line()
    assert "(checked on traces only, outputs not compared: 1 trace" in line and "(checked: " not in line
    compared = Fix("retrace", "input_signature=[...]", "", status=CHECKED,
                   result="1 trace for your 3 calls, instead of 3; outputs equal eager's on your 3 calls (bit for bit)")
    assert "(checked: 1 trace for your 3 calls" in compared.line()
    # What a program reads says the same: the record, its JSON and its repr.
    assert (traces_only.values_compared, compared.values_compared) == (False, True)
    assert (traces_only.to_dict()["values_compared"], compared.to_dict()["values_compared"]) == (False, True)
    assert "traces only" in repr(traces_only) and "traces only" not in repr(compared)
    assert not Fix("retrace", "x", "", status="failed", result="rejects call 1").values_compared
    # A result that is not a str (a number from a caller's own check) still prints and serializes.
    odd = Fix("cast", "c", "d", status=CHECKED, result=3)
    assert odd.values_compared and "(checked: 3)" in odd.line() and "cast checked" in repr(odd)
    assert odd.to_dict()["values_compared"] is True


def test_a_value_a_few_ulp_off_is_printed_with_the_digits_that_tell_it_apart():
    """``56.502 where eager gave 56.502`` said nothing: values one ULP apart print in their dtype's
    shortest form (``56.502003``); values far apart keep the short ``%g`` form."""
    import numpy as np

    from tflab.fix import values_match

    eager = [[np.array([1.0, 56.502, 3.0], np.float32)]]
    one_ulp = [[np.array([1.0, np.nextafter(np.float32(56.502), np.float32(100)), 3.0], np.float32)]]
    text = values_match(eager, one_ulp, ulp_bound=0).text
    assert text == "call 1: output[0][1] is 56.502003 where eager gave 56.502", text
    far = values_match(eager, [[np.array([1.0, 56.6, 3.0], np.float32)]], ulp_bound=0).text
    assert far == "call 1: output[0][1] is 56.6 where eager gave 56.502", far
