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

    from tflab._user.usercode import is_library_file

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
    return list(eager.outputs) + [eager.gradients[n] for n in _present(eager, grad_names)]


def _present(result, grad_names) -> list:
    """The gradient names with a value (not None), in order, each once (the dict keeps one per name)."""
    return [n for n in dict.fromkeys(grad_names) if result.gradients.get(n) is not None]


def _flat(result, grad_names) -> list:
    return list(result.outputs) + [result.gradients[n] for n in _present(result, grad_names)]


def _graph_cause(run, reference: list, ulp_bound: float, grappler_options: Callable, budget_s: float):
    """Grappler optimizers off one at a time, in this process; the `Bisection` of graph mode."""
    import tensorflow as tf

    from tflab._graph.analysis import to_numpy
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
        except Exception as e:  # noqa: BLE001 - an option the function cannot run under is a setting whose run failed
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


def _one_rounding(mul, add):
    """``(one rounding, eager's value, ULP between them, flat index)`` of ``add``'s multiply-add, or None.

    ``mul``/``add`` are `tflab.nonfinite.OpValue` s with their actual inputs. A
    product of two float32 (or float16) values is exact in float64, so
    ``float64(a)*b ± c`` rounded once to the dtype is what one fused
    multiply-add gives (up to a double rounding, at most one ULP).
    """
    import numpy as np

    from tflab._graph.numeric import ulp_distance

    ins = [x for x in mul.inputs if x is not None]
    if len(ins) != 2 or not mul.outputs or not add.outputs or len(add.inputs) != 2 or any(
            x is None for x in add.inputs):
        return None
    prod, out = mul.outputs[0], add.outputs[0]
    if out.dtype.kind != "f" or out.dtype.itemsize > 4:
        return None
    at = next((i for i, x in enumerate(add.inputs) if x.shape == prod.shape and np.array_equal(x, prod)), None)
    if at is None:
        return None
    exact = ins[0].astype(np.float64) * ins[1].astype(np.float64)
    other = add.inputs[1 - at].astype(np.float64)
    sign = -1.0 if (add.op_type == "Sub" and at == 1) else 1.0
    if add.op_type == "Sub" and at == 0:
        other = -other
    try:
        one = np.asarray(sign * exact + other).astype(out.dtype)
        one = np.broadcast_to(one, out.shape)
    except ValueError:
        return None
    ulp = ulp_distance(out, one)
    if not ulp.size:
        return None
    i = int(np.argmax(ulp))
    return float(one.ravel()[i]), float(out.ravel()[i]), float(ulp.ravel()[i]), i


def _measure_sites(run, sites) -> tuple:
    """The site whose multiply-add, rounded once on the ops' actual inputs, moves eager's value most.

    Returns ``(site, measured sentence)``; ``(first site, "")`` when no site could be measured.
    """
    from tflab.nonfinite import trace_op_values

    if not sites:
        return None, ""
    try:
        def call(srcs):
            a, k = run.rebuild(list(srcs))
            return run.python_fn(*a, **k)

        ops, _ = trace_op_values(call, run.sources)
    except Exception:  # noqa: BLE001 - the bisection's finding stands without the measurement
        return sites[0], ""
    finally:
        run.snapshot.restore()
    by_name = {o.name: o for o in ops}
    best = None
    for site in sites:
        for add_name in site.add_ops:
            for mul_name in site.mul_ops:
                if add_name in by_name and mul_name in by_name:
                    m = _one_rounding(by_name[mul_name], by_name[add_name])
                    if m is not None and (best is None or m[2] > best[1][2]):
                        best = (site, m, add_name)
    if best is None or best[1][2] == 0:
        return sites[0], ""
    site, (one, eager, ulp, i), add_name = best
    return site, (f"on {add_name}'s actual inputs one rounding gives {one:.6g} where eager's two give "
                  f"{eager:.6g} ({ulp:.3g} ULP, flat index {i})")


def _cause_from(bis, run, mode: str, ulp_bound: float):
    """The `Cause` a `Bisection` names, with its setting as a fix checked on eager's values."""
    from tflab import fix as fx
    from tflab.attribution.records import Cause

    runs = f"eager vs {mode}"
    evidence = bis.to_dict()
    if bis.found is None:
        detail = (bis.why_not or "no setting tried") + f"; bisection {bis.seconds:.1f} s"
        return Cause(run.name, runs, "unexplained", detail=detail, evidence=evidence)
    t = bis.found
    measured = ""
    if mode == "xla" and len(bis.sites) > 0:
        site, measured = _measure_sites(run, bis.sites)
        bis.fusion, bis.instruction, bis.hlo, bis.tf_ops = site.fusion, site.instruction, site.hlo, site.tf_ops
        evidence = bis.to_dict()
        evidence["sites_measured"] = measured
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
                      f"{bis.hlo or 'multiply+add'}{ops}" + (f"; {measured}" if measured else "") + f"; {detail}")
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
            with SavedStep(run.step_for("xla-bisect"), run.sources,
                           grad_names=lambda: run.grad_names("xla-bisect")) as saved:
                bis = bisect_xla(saved, reference, _flat(run.results["xla"], names), ulp_bound,
                                 budget_s=budget_s, grad_names=_present(run.results["eager"], names))
        causes.append(_cause_from(bis, run, mode, ulp_bound))
    return tuple(causes)
