"""The bisection's own rules, without child processes: a stand-in step answers each setting.

A real child costs one TF import; these check what the bisection concludes from
what the children give back: a baseline that does not reproduce this process's
XLA values stops it, the first setting that gives eager's values back is named,
none restoring is said as such, and the time limit is kept.
"""

import numpy as np

from tflab.modes import bisection as bi

EAGER = [np.array([0.0, 0.0], np.float32)]
XLA = [np.array([3403776.0, 398336.0], np.float32)]


class FakeStep:
    """A saved step whose runs return fixed values per XLA_FLAGS; records the settings it was run under."""

    def __init__(self, tmp, answers, baseline=XLA):
        self.tmp, self.error, self.runs, self.answers, self.baseline, self.seen = tmp, "", 0, answers, baseline, []

    def run(self, mode, env_changes, timeout, dump=None):
        self.runs += 1
        flags = env_changes.get("XLA_FLAGS", "")
        self.seen.append(flags)
        if dump is not None:
            return list(self.baseline), {}
        for key, value in self.answers.items():
            if key in flags:
                if isinstance(value, Exception):
                    raise value
                return list(value), {}
        return list(XLA), {}


def test_a_user_fast_math_flag_undone_restores_eager_and_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    step = FakeStep(tmp_path, {"--xla_cpu_enable_fast_math=false": EAGER})
    out = bi.bisect_xla(step, EAGER, XLA, ulp_bound=0)
    assert out.found is not None and out.found.setting == "--xla_cpu_enable_fast_math=false"
    assert out.found.check.ok and "bit for bit" in out.found.check.text
    assert step.seen[-1].endswith("--xla_cpu_enable_fast_math=false")  # the user's flags, then the change


def test_planted_no_setting_restores_then_the_bisection_says_so_and_names_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    out = bi.bisect_xla(FakeStep(tmp_path, {}), EAGER, XLA, ulp_bound=0)
    assert out.found is None and out.trials and out.trials[0].restored is False
    assert out.why_not.startswith("no single setting gave eager's values back (tried: --xla_cpu_enable_fast_math")


def test_a_baseline_that_does_not_reproduce_this_process_stops_the_bisection(tmp_path, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    step = FakeStep(tmp_path, {}, baseline=EAGER)
    out = bi.bisect_xla(step, EAGER, XLA, ulp_bound=0)
    assert out.found is None and out.trials == [] and step.runs == 1
    assert out.why_not.startswith("not bisected: the step compiled again in a child process does not give")


def test_the_time_limit_stops_before_a_child_and_names_what_was_left(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true --xla_cpu_enable_fast_min_max=true")
    step = FakeStep(tmp_path, {})
    out = bi.bisect_xla(step, EAGER, XLA, ulp_bound=0, budget_s=1.0)
    assert out.trials == [] and step.runs == 1
    assert out.why_not.startswith("not bisected: out of time (1 s) before trying --xla_cpu_enable_fast_math=false")


def test_a_setting_the_child_cannot_run_is_a_failed_not_a_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    step = FakeStep(tmp_path, {"fast_math=false": RuntimeError("the child ended with exit 1")})
    out = bi.bisect_xla(step, EAGER, XLA, ulp_bound=0)
    assert out.found is None and out.trials[0].restored is None and "exit 1" in out.trials[0].error


def test_fma_mnemonics_are_recognised_and_plain_arithmetic_is_not():
    asm = {"fusion_a": "  10:\tvfmsub213ss %xmm1,%xmm0,%xmm2\n", "fusion_b": "  4:\tvmulss %xmm1,%xmm0,%xmm0\n",
           "fusion_c": "  8:\tvfnmadd231ps %ymm2,%ymm1,%ymm0\n"}
    assert bi.fma_sites(asm) == [("fusion_a", "vfmsub213ss %xmm1,%xmm0,%xmm2"),
                                 ("fusion_c", "vfnmadd231ps %ymm2,%ymm1,%ymm0")]


def test_only_passes_that_changed_the_module_and_move_arithmetic_are_candidates(tmp_path):
    for name in ("module_0000.m.0004.simplification.after_pipeline-start.before_algsimp.txt",
                 "module_0000.m.0005.simplification.after_algsimp.before_simplify-sorts.txt",
                 "module_0000.m.0009.HLO_passes.after_layout-assignment.before_x.txt",
                 "module_0000.m.0015.HLO_passes.after_fusion.before_fusion-wrapper.txt",
                 "module_0000.m.0017.copy-insertion.after_adding_copies_to_resolve_interference.txt"):
        (tmp_path / name).write_text("")
    assert bi._changed_passes(tmp_path) == ["algsimp", "fusion"]
