"""RetraceProbe's fixes for several changes, reduce_retracing, TF's own warning, and the retrace CLI on scripts.

Split from `test_retrace_probe.py` (no test file over 600 lines); its helpers and fixtures are imported from there.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_retrace_probe import (  # noqa: E402,F401  (helpers, fixtures and imports of the first part)
    json, os, pytest, tf, UsageError, RetraceError, RetraceProbe, capture_trace_events, expect_traces,
    parse_trace_log_message, SCRIPT, CREATES_SCRIPT, TWO_INSTANCES, _factory, _warm_train_step, _direct_step,
    LR_SCRIPT,)


def test_one_parameter_with_two_changes_lists_both_fixes():
    probe = RetraceProbe(lambda x: x * 2)
    probe(tf.ones([2]))
    probe(tf.ones([3], tf.int32))
    second = probe.traces[1]
    assert second.reasons == ["x: dtype float32 -> int32", "x: shape (2,) -> (3,)"]
    assert "tf.cast" in second.fixes[0] and "input_signature" in second.fixes[1]
    text = second.to_text()
    assert text.count("fix: ") == 2


def test_shape_fix_knows_reduce_retracing_is_on():
    plain = RetraceProbe(lambda x: x * 2.0)
    relaxed = RetraceProbe(lambda x: x * 2.0, reduce_retracing=True)
    for n in (1, 2, 3):
        plain(tf.ones([n]))
        relaxed(tf.ones([n]))
    assert (plain.trace_count, relaxed.trace_count) == (3, 2)
    # The input_signature was run and works; reduce_retracing (the fallback) is run only when none does.
    assert "input_signature=[tf.TensorSpec([None], tf.float32)] (checked: 1 trace" in plain.traces[1].fixes[0]
    assert "reduce_retracing=True" not in plain.traces[1].fixes[0]
    fix = relaxed.traces[1].fixes[0]
    assert "reduce_retracing=True" not in fix
    assert fix.startswith("reduce_retracing is already on") and "input_signature" in fix
    # The same through expect_traces on a bare tf.function (reasons from TF's log).
    g = tf.function(lambda x: x * 2.0, reduce_retracing=True)
    with pytest.raises(RetraceError) as info:
        with expect_traces(g, at_most=1):
            for n in (1, 2, 3):
                g(tf.ones([n]))
    assert info.value.count == 2
    assert info.value.traces[1].fixes[0].startswith("reduce_retracing is already on")


def test_frequent_retracing_warning_still_shows_for_user_code():
    import logging

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger = logging.getLogger("tensorflow")
    keep = Keep(level=logging.WARNING)
    old_level = logger.level
    logger.setLevel(logging.WARNING)  # TF's default, whatever an earlier test left
    logger.addHandler(keep)
    try:
        probe = RetraceProbe(lambda x: x * 2.0)
        for n in range(1, 7):
            probe(tf.ones([n]))
    finally:
        logger.removeHandler(keep)
        logger.setLevel(old_level)
    # Measured: TF warns from the 5th retracing call in its last 10 (at most twice per function).
    hits = [m for m in seen if "triggered tf.function retracing" in m]
    assert [h.split(" calls")[0] for h in hits] == ["5 out of the last 5", "6 out of the last 6"]


def test_retrace_cli_does_not_call_a_logged_failure_nothing_to_fix(run_cli, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CREATES_SCRIPT)
    code, out, err = run_cli("retrace", "--json", str(script))
    assert code == 0, err
    assert "caught ValueError" in err
    report = json.loads(out)
    (fn,) = report["functions"]
    assert fn["function"] == "creates" and [t["kind"] for t in fn["traces"]] == ["first", "variable_creation"]
    second = fn["traces"][1]
    # TF logs a trace as it starts: the log cannot tell that this one raised, so both outcomes are named.
    assert second["reasons"][0].endswith("TF's log does not say whether this trace succeeded")
    assert not second["fixes"][0].startswith("nothing to fix:")
    assert second["fixes"][0].startswith("nothing to fix if that call returned")
    assert "create it once outside the function, or guard it with `if self.v is None`" in second["fixes"][0]


def test_retrace_cli_places_a_syntax_error_in_the_script(run_cli, tmp_path):
    script = tmp_path / "syntax.py"
    script.write_text("x = 1\ndef f(:\n    pass\n")
    code, out, err = run_cli("retrace", str(script))
    assert code == 2 and out == ""  # refused before TF loads: nothing ran, so there is no report
    assert err.strip().startswith(f"tflab retrace: error: {script} raised SyntaxError: ")
    assert err.strip().endswith(f"(at {script}:2); fix it and run again")


def test_retrace_cli_args_are_optional_and_help_says_where_options_go(run_cli, capsys):
    code, out, err = run_cli("retrace")
    assert code == 2 and out == ""
    assert err == ("tflab retrace: error: the following arguments are required: SCRIPT.py "
                   "(see tflab retrace --help)\n")
    code, out, _ = run_cli("retrace", "--help")
    assert code == 0
    help_text = " ".join(out.split())
    assert "Options such as --json go BEFORE SCRIPT.py" in help_text
    assert "detected by tflab.RetraceProbe only" in help_text


def test_retrace_cli_report_notes_stale_reads_need_the_probe(run_cli):
    code, out, err = run_cli("retrace", SCRIPT)
    assert code == 0, err
    assert out.rstrip().splitlines()[-1] == (
        "note: stale closure or global reads (a Python value changed without a retrace) are "
        "detected by tflab.RetraceProbe only: TF's trace log carries no values")


def test_retrace_cli_tells_two_instances_of_one_method_apart(run_cli):
    """Each instance's @tf.function method is its own tf.function object, with its own cache."""
    code, out, err = run_cli("retrace", TWO_INSTANCES)
    assert code == 0, err
    ids = dict(zip(out.split()[0:4:2], out.split()[1:4:2]))  # the script prints both instances' ids
    assert set(ids) == {"student", "teacher"}
    assert "two_instances.py: 3 trace(s) in 2 tf.function(s)" in out
    assert f"Net.__call__ of Net@{ids['student']}: 1 trace(s)" in out
    teacher = out[out.index(f"Net.__call__ of Net@{ids['teacher']}: 2 trace(s)"):]
    assert "#2 retrace vs #1: x: shape (4, 3) -> (2, 3) (dim 0: 4 -> 2)" in teacher
    # The teacher's first trace is its own first one, not an "unexplained" retrace of the student's.
    assert "same input TraceTypes" not in out


def test_retrace_cli_json_has_one_entry_per_object(run_cli):
    code, out, err = run_cli("retrace", "--json", TWO_INSTANCES)
    assert code == 0, err
    fns = json.loads(out)["functions"]
    assert [(f["function"], f["trace_count"]) for f in fns] == [("Net.__call__", 1), ("Net.__call__", 2)]
    assert fns[0]["owner"] != fns[1]["owner"] and all(f["owner"].startswith("Net@0x") for f in fns)
    assert [t["kind"] for t in fns[1]["traces"]] == ["first", "retrace"]
    assert fns[1]["traces"][1]["reasons"] == ["x: shape (4, 3) -> (2, 3) (dim 0: 4 -> 2)"]


def test_closures_from_one_factory_are_separate_functions():
    """ the sibling: closures share a qualname; TF's records name distinct objects."""
    from tflab.retrace import group_logged_traces

    a, b = _factory(1.0), _factory(2.0)
    with capture_trace_events() as logged:
        a(tf.ones([2]))
        b(tf.ones([2]))
        b(tf.ones([3]))
    groups = group_logged_traces(logged)
    assert [(g.function_name, g.trace_count) for g in groups] == [("scaled", 1), ("scaled", 2)]
    assert [g.owner for g in groups] == [f"@{id(a):#x}", f"@{id(b):#x}"]
    assert groups[1].label == f"scaled of @{id(b):#x}"
    assert groups[1].traces[1].reasons == ["x: shape (2,) -> (3,)"]
    assert groups[1].traces[1].compared_with == 1


def test_log_text_groups_by_address_and_joins_tf_variable_creation_retrace():
    """From the log TEXT (no objects): the address TF prints tells objects apart; the
    second wrapper TF logs for the variable-creation re-trace joins its function."""
    import logging

    from tflab.retrace import group_logged_traces

    texts = []

    class Keep(logging.Handler):
        def emit(self, record):
            if str(record.msg).startswith("Creating new FuncGraph"):
                texts.append(record.getMessage())

    class Lazy(tf.Module):
        def __init__(self):
            super().__init__()
            self.v = None

        @tf.function
        def __call__(self, x):
            if self.v is None:
                self.v = tf.Variable(2.0)
            return x * self.v

    keep = Keep(level=1)
    logger = logging.getLogger("tensorflow")
    first, second = Lazy(), Lazy()
    with capture_trace_events():
        logger.addHandler(keep)
        try:
            first(tf.ones([2]))
            second(tf.ones([2]))
            second(tf.ones([3]))
        finally:
            logger.removeHandler(keep)
    groups = group_logged_traces([parse_trace_log_message(t) for t in texts])
    # Measured: 2 traces each on the first call (TF's variable-creation pair), +1 for [3].
    assert [[t.kind for t in g.traces] for g in groups] == [
        ["first", "variable_creation"], ["first", "variable_creation", "retrace"]]
    assert groups[1].traces[2].reasons == ["x: shape (2,) -> (3,)"]
    assert groups[1].traces[2].compared_with == 2  # the same scope: variable creation disabled
    assert groups[0].owner != groups[1].owner and groups[0].owner.startswith("@0x")


def test_expect_traces_on_one_instance_ignores_the_other():
    """Expect_traces(a.__call__) around calls of b, then a: only a's traces, with a's reason."""

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones([3, 2]))

        @tf.function
        def __call__(self, x):
            return x @ self.w

    a, b = Net(), Net()
    a(tf.ones([4, 3]))
    with pytest.raises(RetraceError) as info:
        with expect_traces(a.__call__, at_most=0):
            b(tf.ones([5, 3]))
            b(tf.ones([6, 3]))
            a(tf.ones([2, 3]))
    err = info.value
    assert err.count == 1 and len(err.traces) == 1
    assert err.traces[0].reasons == ["x: shape (4, 3) -> (2, 3) (dim 0: 4 -> 2)"]
    assert str(err).splitlines()[1].startswith("  #2 vs #1: x: shape (4, 3) -> (2, 3)")
    assert "(5, 3)" not in str(err) and "(6, 3)" not in str(err)


def test_expect_traces_on_a_method_from_the_class_counts_every_instance():
    """ the sibling: Net.__call__ from the class never traces itself; each instance's copy does."""

    class Net(tf.Module):
        @tf.function
        def __call__(self, x):
            return x * 2.0

    a, b = Net(), Net()
    a(tf.ones([2]))
    with pytest.raises(RetraceError) as info:
        with expect_traces(Net.__call__, at_most=1):
            a(tf.ones([3]))
            b(tf.ones([2]))
    assert info.value.count == 2
    text = str(info.value)
    assert f"Net@{id(a):#x} #2 vs #1: x: shape (2,) -> (3,)" in text
    assert f"Net@{id(b):#x} #1 first trace of this object" in text


def test_readme_expect_traces_example_on_a_warmed_function():
    """As the README says, the block's trace is compared with the one made before it."""
    from tflab.retrace import cached_traces

    train_step, dataset = _warm_train_step()
    (warm,), _ = cached_traces(train_step)  # the baseline: TF's trace cache before the block
    assert (warm.index, warm.kind, dict(warm.inputs)["x"]) == (
        1, "cached", "TensorSpec(shape=(32, 4), dtype=tf.float32, name=None)")
    # The README's example, as written (at_most=2): one new trace, for the last batch of 6.
    with expect_traces(train_step, at_most=2) as seen:
        for x, y in dataset:
            train_step(x, y)
    assert seen.count == 1 and seen.before == 1
    assert seen.traces[0].index == 2 and seen.traces[0].compared_with == 1
    assert seen.traces[0].reasons == ["x: shape (32, 4) -> (6, 4) (dim 0: 32 -> 6)",
                                      "y: shape (32, 1) -> (6, 1) (dim 0: 32 -> 6)"]


def test_expect_traces_on_a_warmed_function_names_the_real_reason():
    train_step, dataset = _warm_train_step()
    with pytest.raises(RetraceError) as info:
        with expect_traces(train_step, at_most=0):
            for x, y in dataset:
                train_step(x, y)
    lines = str(info.value).splitlines()
    assert lines[0] == ("train_step traced 1 time(s) in the block, expected at most 0 "
                        "(#1 was traced before the block):")
    assert lines[1].startswith("  #2 vs #1: x: shape (32, 4) -> (6, 4) (dim 0: 32 -> 6)  (fix: ")
    assert "first trace" not in str(info.value)


def test_expect_traces_on_a_warmed_function_that_created_variables():
    """The cache holds TF's variable-creation pair; a later trace compares with the second of it."""
    holder = []

    @tf.function
    def f(x):
        if not holder:
            holder.append(tf.Variable(1.0))
        return x * holder[0]

    f(tf.ones([2]))
    with pytest.raises(RetraceError) as info:
        with expect_traces(f, at_most=0):
            f(tf.ones([3]))
    (t,) = info.value.traces
    assert (t.index, t.kind, t.compared_with, t.scope) == (3, "retrace", 2, "NO_VARIABLE_CREATION")
    assert t.reasons == ["x: shape (2,) -> (3,)"]


def test_expect_traces_fails_when_no_call_went_through_the_probe():
    """Calling the tf.function itself bypasses the probe; say so instead of passing with 0."""
    train_step = _direct_step()
    probe = RetraceProbe(train_step)
    with pytest.raises(UsageError) as info:
        with expect_traces(probe, at_most=1):
            for n in (1, 2, 3, 4):
                train_step(tf.ones([n]))
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("expect_traces: no call went through RetraceProbe(train_step) inside the block "
                          "(train_step itself traced 4 time(s) there, unseen by the probe)")
    assert "expect_traces(train_step, at_most=...)" in msg
    # The fix the message gives, measured: the tf.function itself needs no probe.
    with pytest.raises(RetraceError) as info:
        with expect_traces(train_step, at_most=1):
            train_step(tf.ones([5]))
            train_step(tf.ones([6]))
    assert info.value.count == 2
    assert info.value.traces[0].compared_with is not None  # compared with the 4 earlier traces


def test_probe_text_says_whose_tracing_count_it_prints():
    """The probe's own copy traced, the tf.function given did not."""
    train_step = _direct_step()
    probe = RetraceProbe(train_step)
    probe(tf.ones([1]))
    probe(tf.ones([2]))
    assert (probe.tf_tracing_count, probe.original_tracing_count) == (2, 0)
    head = probe.to_text().splitlines()[:2]
    assert head == ["RetraceProbe(train_step): 2 trace(s) in 2 call(s) through the probe; TF's "
                    "experimental_get_tracing_count() on the probe's copy of the tf.function = 2",
                    "  train_step itself (calls not made through the probe are not seen): "
                    "experimental_get_tracing_count() = 0"]
    assert probe.to_dict()["original_tracing_count"] == 0
    assert RetraceProbe(lambda x: x).to_dict()["original_tracing_count"] is None


def test_a_tie_is_broken_toward_the_dtype_change_and_the_runner_up_is_listed():
    """#5 differs by one change from #2 (a dtype) and from #3 (dict keys): blame the dtype."""

    def f(batch, flag, imgs):
        if len(imgs) != 1:
            raise ValueError("one image per call")
        return batch["image"] * 2.0 + imgs[0] + tf.ones([2], tf.float32)

    probe = RetraceProbe(f)
    img = tf.ones([2])
    calls = [({"image": img}, True, [img]), ({"image": img}, False, [img]),
             ({"image": img, "mask": img}, False, [img]), ({"image": img}, False, [img, img]),
             ({"image": tf.ones([2], tf.float64)}, False, [img])]
    raised = []
    for c in calls:
        try:
            probe(*c)
        except (ValueError, TypeError) as e:
            raised.append(type(e).__name__)
    assert raised == ["ValueError", "TypeError"]  # #4 (two images) and #5 (float64) raised
    fifth = probe.traces[4]
    assert (fifth.kind, fifth.compared_with) == ("failed", 2)
    assert fifth.reasons[0] == "batch['image']: dtype float32 -> float64"
    assert fifth.reasons[1].startswith("raised TypeError")
    assert (fifth.runner_up, fifth.runner_up_reasons) == (3, ("batch: dict keys ['image', 'mask'] -> ['image']",))
    assert ("runner-up vs #3 (also 1 change): batch: dict keys ['image', 'mask'] -> ['image']"
            in fifth.to_text())
    assert fifth.to_dict()["runner_up"] == 3


def test_a_tie_of_equal_kinds_still_goes_to_the_latest_trace():
    probe = RetraceProbe(lambda x, n: x * n)
    probe(tf.ones([2]), 1)
    probe(tf.ones([3]), 1)
    probe(tf.ones([3]), 2)  # one change from #2 (n) only
    probe(tf.ones([2]), 2)  # one change from #1 (n) and from #3 (shape): latest wins
    fourth = probe.traces[3]
    assert fourth.compared_with == 3 and fourth.reasons == ["x: shape (3,) -> (2,)"]
    assert fourth.runner_up == 1 and fourth.runner_up_reasons == ("n: 1 -> 2",)


def test_retrace_cli_says_which_trace_each_reason_compares_with(run_cli, tmp_path):
    """#3 and #4 have the same reason text against different traces."""
    script = tmp_path / "lr.py"
    script.write_text(LR_SCRIPT)
    code, out, err = run_cli("retrace", str(script))
    assert code == 0, err
    assert "#3 retrace vs #1: lr: 0.1 -> 0.05" in out
    assert "#4 retrace vs #2: lr: 0.1 -> 0.05" in out


def test_a_failing_expect_traces_hides_tflab_frames_from_pytest():
    """Pytest's traceback shows the user's block and the reasons, not tflab's source."""
    probe = RetraceProbe(lambda x: x * 2.0)
    with pytest.raises(RetraceError) as info:
        with expect_traces(probe, at_most=0):
            probe(tf.ones([2]))
    shown = [e for e in info.traceback if not e.ishidden(info)]
    assert [os.path.basename(str(e.path)) for e in shown] == [os.path.basename(__file__)]
    rendered = str(info.getrepr(style="long"))
    assert "retrace.py" not in rendered and "contextlib" not in rendered
    assert "#1 first trace" in rendered


def test_trace_records_do_not_reach_pytests_log_capture(caplog):
    """ the sibling: the level-1/2 records read inside expect_traces stay out of the failure report."""
    import logging

    @tf.function
    def g(x):
        return x * 2.0

    logger = logging.getLogger("tensorflow")
    old = (logger.level, logger.propagate, logger.getEffectiveLevel())
    # TF's default: its level-1 records are not shown; or the tflab pytest plugin records this
    # test (make test's main pass): its own capture holds the logger at level 1, not propagating.
    assert old[2] >= logging.INFO or old[:2] == (1, False), old
    caplog.handler.setLevel(0)  # catch all that reaches the root logger, as pytest's report does
    g(tf.ones([2]))
    with pytest.raises(RetraceError):
        with expect_traces(g, at_most=0):
            g(tf.ones([3]))
            logger.warning("a warning still propagates")
    assert [r.getMessage() for r in caplog.records if r.name == "tensorflow"] == ["a warning still propagates"]
    assert (logger.level, logger.propagate, logger.getEffectiveLevel()) == old
