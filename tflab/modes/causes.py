"""The cause of a traced mode's difference from eager, found by turning one transformation off at a time.

Runs only for a mode whose outputs or gradients disagree with eager beyond the
comparison's bound (a mode within it costs nothing here):

* **graph**: Grappler's optimizers (``grappler/optimizers/meta_optimizer.cc``)
  turned off one at a time with ``tf.config.optimizer.set_experimental_options``
  (in this process: Grappler reads the options when a function is first
  instantiated), the step traced and run again each time;
* **xla**: one XLA flag or HLO pass at a time, each in a child process
  (`tflab.modes.bisection`).

The first setting under which the mode's outputs and gradients equal the eager
values recorded before any change (`tflab.fix.values_match`, the comparison's
ULP bound) is the cause: a `tflab.attribution.Cause` of kind ``compiler``, with
the fusion and the machine instruction where XLA's code differs (a fused
multiply-add: ``vfmadd…`` in that fusion's code), the user's line, and the
setting as a fix checked on those values. Nothing restored: a Cause of kind
``unexplained`` that lists what was tried, never a guess.
"""

from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["GRAPPLER_OPTIMIZERS", "disagreeing_modes", "attribute_modes", "user_line_of_op"]

# tf.config.optimizer.set_experimental_options' optimizer switches (config.py, TF 2.21), most often
# arithmetic-changing first.
GRAPPLER_OPTIMIZERS = ("remapping", "arithmetic_optimization", "constant_folding", "layout_optimizer",
                       "loop_optimization", "function_optimization", "dependency_optimization",
                       "shape_optimization", "implementation_selector", "debug_stripper",
                       "pin_to_host_optimization", "scoped_allocator_optimization")


def disagreeing_modes(findings, results) -> list[str]:
    """The traced modes that ran and have a value finding (not a failure to run)."""
    out = []
    for mode in ("graph", "xla"):
        r = results.get(mode)
        if r is None or r.error:
            continue
        if any(f.startswith(f"{mode}: ") for f in findings):
            out.append(mode)
    return out


def user_line_of_op(graph, op_names) -> str:
    """``file.py:N`` of the first op in ``op_names`` whose traceback has a frame of the user's code."""
    import os

    from tflab._usercode import is_library_file

    for name in op_names:
        try:
            op = graph.get_operation_by_name(name)
        except (KeyError, ValueError):
            continue
        for frame in reversed(list(op.traceback or ())):
            if not is_library_file(frame.filename):
                return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return ""


def _reference(results, grad_names) -> list:
    eager = results["eager"]
    return list(eager.outputs) + [eager.gradients[n] for n in grad_names if eager.gradients.get(n) is not None]


def _flat(result, grad_names) -> list:
    return list(result.outputs) + [result.gradients[n] for n in grad_names if result.gradients.get(n) is not None]


def _graph_cause(run, reference: list, ulp_bound: float, grappler_options: Callable, budget_s: float):
    """Grappler optimizers off one at a time, in this process; the `Bisection` of graph mode."""
    import tensorflow as tf

    from tflab._graph_analysis import to_numpy
    from tflab.fix import values_match
    from tflab.modes.bisection import Bisection, Trial

    out = Bisection("graph")
    t_start = time.perf_counter()
    for name in GRAPPLER_OPTIMIZERS:
        if time.perf_counter() - t_start > budget_s:
            out.why_not = f"not bisected: out of time ({budget_s:.0f} s) at optimizer {name!r}"
            break
        trial = Trial("optimizer", name, f"Grappler's {name} off")
        t0 = time.perf_counter()
        try:
            with grappler_options({name: False}):
                run.snapshot.restore()
                outputs, grads = tf.function(run.step_for(f"graph-{name}"))(run.sources)
                got = [to_numpy(o) for o in tf.nest.flatten(outputs)] + [to_numpy(g) for g in grads
                                                                          if g is not None]
            trial.check = values_match([reference], [got], ulp_bound=ulp_bound,
                                       why_bound="the comparison's own ULP bound")
            trial.restored = trial.check.ok
        except Exception as e:  # noqa: BLE001 - an option the function cannot run under is a trial that failed
            trial.error = f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            run.snapshot.restore()
        trial.seconds = time.perf_counter() - t0
        out.trials.append(trial)
        if trial.restored:
            out.found = trial
            break
    else:
        out.why_not = "no single Grappler optimizer off gave eager's values back (tried: " + \
            ", ".join(GRAPPLER_OPTIMIZERS) + ")"
    out.seconds = time.perf_counter() - t_start
    return out


def _cause_from(bis, run, mode: str, ulp_bound: float):
    """The `Cause` a `Bisection` names, with its setting as a fix checked on eager's values."""
    from tflab import fix as fx
    from tflab.attribution import Cause

    runs = f"eager vs {mode}"
    evidence = bis.to_dict()
    if bis.found is None:
        detail = (bis.why_not or "no setting tried") + f"; bisection {bis.seconds:.1f} s"
        return Cause(run.name, runs, "unexplained", detail=detail, evidence=evidence)
    t = bis.found
    graph = run.runners["xla" if mode == "xla" else "graph"].get_concrete_function(run.sources).graph
    line = user_line_of_op(graph, bis.tf_ops) if bis.tf_ops else ""
    if mode == "xla":
        change = f"XLA_FLAGS={t.setting}" if t.kind == "flag" else f"XLA_FLAGS=--xla_disable_hlo_passes={t.setting}"
        what = (f"XLA_FLAGS={t.setting}" if t.kind == "flag" else f"XLA_FLAGS=--xla_disable_hlo_passes={t.setting}")
        detail = f"under {what} ({t.what}) XLA gives eager's values ({t.check.text})"
        if bis.instruction:
            ops = f" (TF ops {', '.join(bis.tf_ops)})" if bis.tf_ops else ""
            detail = (f"XLA contracted a multiply and an add into one fused multiply-add (one rounding where "
                      f"eager rounds twice): `{bis.instruction}` in this fusion's code, from HLO "
                      f"{bis.hlo or 'multiply+add'}{ops}; {detail}")
        fix = fx.attempt("xla_flag", change, "run XLA with the transformation off",
                         lambda: (t.check.ok, t.check.text, t.check.measured),
                         how="your step compiled in a child process under that setting, run on your inputs")
        return Cause(run.name, runs, "compiler", op_name=bis.fusion, op_type="fusion" if bis.fusion else "",
                     line=line, detail=detail, evidence=evidence, fix=fx.first_working([fix]))
    change = f"tf.config.optimizer.set_experimental_options({{{t.setting!r}: False}})"
    fix = fx.attempt("grappler", change, "run graph mode with that Grappler optimizer off",
                     lambda: (t.check.ok, t.check.text, t.check.measured),
                     how="your step traced again with the option set, run on your inputs")
    return Cause(run.name, runs, "compiler", op_name="", op_type="",
                 detail=f"Grappler's {t.setting} rewrote the graph's arithmetic: with it off graph mode gives "
                        f"eager's values", evidence=evidence, fix=fx.first_working([fix]))


def attribute_modes(run, findings, ulp_bound: float, grappler_options: Callable,
                    budget_s: float) -> tuple[Any, ...]:
    """One `Cause` per traced mode that disagrees with eager (empty when none does).

    Args:
        run: the comparison's `tflab.modes.api._ModeRun` after its runs.
        findings: the comparison's findings.
        ulp_bound: the comparison's ULP bound.
        grappler_options: the context manager that sets Grappler options for a graph run.
        budget_s: the time limit of each mode's bisection, seconds.
    """
    from tflab.modes.bisection import SavedStep, bisect_xla

    causes = []
    modes = disagreeing_modes(findings, run.results)
    names = run.grad_names("eager")
    reference = _reference(run.results, names)
    for mode in modes:
        if mode == "graph":
            bis = _graph_cause(run, reference, ulp_bound, grappler_options, budget_s)
        else:
            run.snapshot.restore()
            with SavedStep(run.step_for("xla-bisect"), run.sources) as saved:
                bis = bisect_xla(saved, reference, _flat(run.results["xla"], run.grad_names("xla")), ulp_bound,
                                 budget_s=budget_s)
        causes.append(_cause_from(bis, run, mode, ulp_bound))
    return tuple(causes)
