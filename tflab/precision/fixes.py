"""The fixes `tflab.compare_precisions` prints, each applied to the user's case and measured.

* **Overflow to inf/NaN in the forward pass**: the cause is the first
  non-finite op of the policy's FuncGraph (`tflab.nonfinite`). Candidates, in
  order, each a `tflab.fix.Fix` (`first_working` prints the first that worked):

  1. compute the loss in float32 (the model's output cast to float32 before
     the loss): measured on the policy's own run, whose outputs
     compare_precisions casts to float32 before its float32 sum; it cannot
     help when the output is already non-finite, and then it says so;
  2. compute the op's line in float32 and cast back to the dtype of its first
     operand (``tf.cast(tf.cast(scores, tf.float32) - 1e30 * (1.0 -
     tf.cast(mask, tf.float32)), scores.dtype)``: "mask in float32");
  3. the same line in float32 without the cast back (a loss computed in the
     user's function stays float32);
  4. a literal beyond the dtype's range replaced by one it holds (``1e30`` ->
     ``1e4`` for float16).

  Candidates 2-4 rewrite the line in a copy of the user's function
  (`tflab._code_swap`), build the model again with the policy (the factory is
  re-run; its weights are the float32 build's) and run forward and backward:
  "checked" when every output and every variable's gradient is finite, with
  the output's max relative error against float32.
* **Gradients underflowing below float16's range**: loss_scale='dynamic' is
  run on the same tape (Keras' rule: 2^15, halved on inf/NaN) and counts what
  it rescues; "checked" only when no gradient element stays zeroed by range.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tflab import fix as fx

__all__ = ["overflow_plan", "loss_scale_plan"]


def _output_overflow(result, out_names) -> int:
    return sum(v for k, v in result.overflow.items() if k in out_names)


def overflow_plan(result, origin, rerun: Callable[[], Any], out_names) -> fx.FixPlan:
    """The candidates for a forward overflow, applied and measured (see the module docstring).

    Args:
        result: the policy's `PolicyResult` (its outputs overflowed).
        origin: the `tflab.nonfinite.NonFiniteOp` where the values went non-finite, or None.
        rerun: ``rerun()`` builds and runs the policy again and returns its `PolicyResult`
            (called inside a rewritten line's ``with`` block).
        out_names: the output names (to tell outputs from gradients in ``overflow``).
    """
    from tflab._code_swap import finite_literals, in_float32, swapped_line
    from tflab.precision.records import fmt_err

    dt = result.compute_dtype
    n_out = sum(int(np.size(a)) for a in result.outputs.values())

    def loss_in_float32():
        bad = _output_overflow(result, out_names)
        if bad:
            return False, (f"the output is already non-finite before any cast: {bad} of {n_out} output "
                           f"element(s) inf/NaN with the output cast to tf.float32 before the loss")
        return True, "outputs finite once cast to float32"

    candidates: list = [lambda: fx.attempt(
        "cast", "tf.cast(model(x), tf.float32) before the loss (or dtype='float32' on the last layer)",
        "compute the loss in float32", loss_in_float32,
        how="the outputs cast to tf.float32 before the float32 sum compare_precisions takes as the loss")]

    def measured(r) -> tuple[bool, str, dict]:
        out_bad = _output_overflow(r, out_names)
        var_bad = sum(v for k, v in r.overflow.items() if k.startswith("var:"))
        arg_bad = sum(v for k, v in r.overflow.items() if k.startswith("arg:"))
        facts = {"output_nonfinite": out_bad, "variable_gradient_nonfinite": var_bad,
                 "argument_gradient_nonfinite": arg_bad, "output_error": r.output_error,
                 "gradient_error": r.gradient_error}
        if out_bad or var_bad:
            return False, (f"still {out_bad} non-finite output and {var_bad} non-finite variable-gradient "
                           f"element(s) in {dt}"), facts
        text = (f"NaN/inf gone: outputs and variable gradients finite in {dt}, max rel. error "
                f"{fmt_err(r.output_error)} vs float32 (gradients: median {fmt_err(r.gradient_error_median)})")
        if arg_bad:
            text += f"; {arg_bad} input-gradient element(s) still inf/NaN"
        return True, text, facts

    import os

    frame = tuple(origin.frame) if origin is not None and origin.frame else ()
    where = f"{os.path.basename(frame[0])}:{frame[1]}" if frame else "the line"

    def rewritten(rewrite, kind: str, description: str):
        def run() -> fx.Fix:
            if not frame:
                return fx.unchecked(kind, "", description, "the first non-finite op has no line of yours "
                                    "(it is made inside TF or Keras)")
            box: dict = {}

            def check():
                with swapped_line(frame[0], frame[1], frame[2], rewrite) as (what, line):
                    box["line"] = line
                    r = rerun()
                return measured(r)

            f = fx.attempt(kind, "", description, check, how=f"ran a copy of {frame[2]} with {where} rewritten, "
                           f"rebuilt and re-ran under the policy")
            if "line" not in box:  # the rewrite did not apply to that line (RewriteError): not run
                return fx.unchecked(kind, "", description, f.result.split(": ", 1)[-1])
            return fx.Fix(f.kind, box["line"], f.description, status=f.status, how=f.how, result=f.result,
                          measured=f.measured, source=box["line"])
        return run

    candidates.append(rewritten(in_float32(cast_back=True), "code",
                                f"compute {where} in float32 and cast the result back to its first operand's dtype "
                                f"(for a mask: do the masking in float32)"))
    candidates.append(rewritten(in_float32(cast_back=False), "code",
                                f"compute {where} in float32 and keep the result float32 (the loss in float32, where "
                                f"the loss is computed on that line)"))
    if origin is not None and origin.literal and origin.dtype_max:
        candidates.append(rewritten(finite_literals(origin.dtype_max), "code",
                                    f"use a finite constant {dt} holds instead of {origin.literal} "
                                    f"(e.g. -1e4 or tf.{dt}.min for a mask)"))
    return fx.first_working(candidates)


def loss_scale_plan(result, grad_fn: Callable, measure: Callable, initial: float, minimum: float) -> fx.FixPlan:
    """loss_scale='dynamic' run on the policy's own tape, for gradients zeroed below float16's range.

    Args:
        result: the unscaled float16 `PolicyResult`.
        grad_fn: ``grad_fn(scale) -> (gradients, seconds)`` of that run (a persistent tape).
        measure: ``measure(grads, scale, history) -> PolicyResult``.
        initial, minimum: Keras' dynamic rule (2^15, halved while inf/NaN, not below 1).
    """
    from tflab.precision.float_formats import pow2_text

    lost = sum(result.underflow_below_normal.values())

    def check():
        scale, history = initial, []
        while True:
            history.append(scale)
            grads, _ = grad_fn(scale)
            if all(g is None or np.isfinite(g).all() for g in grads) or scale <= minimum:
                break
            scale = max(scale / 2, minimum)
        r = measure(grads, scale, tuple(history))
        left = sum(r.underflow_below_normal.values())
        facts = {"loss_scale": scale, "zeroed_below_normal_before": lost, "zeroed_below_normal_after": left,
                 "overflow": r.overflow_count}
        if r.overflow_count:
            return False, f"loss scale {pow2_text(scale)} leaves {r.overflow_count} inf/NaN gradient element(s)", facts
        if left:
            return False, (f"loss scale {pow2_text(scale)} rescues {lost - left} of the {lost} gradient element(s) "
                           f"zeroed below {result.compute_dtype}'s range ({left} still 0: the scaled gradient "
                           f"is still below {result.compute_dtype}'s smallest subnormal)"), facts
        return True, (f"loss scale {pow2_text(scale)} rescues all {lost} gradient element(s) zeroed below "
                      f"{result.compute_dtype}'s range, max rel. error "
                      f"{'n/a' if r.gradient_error is None else f'{r.gradient_error:.2g}'}"), facts

    return fx.first_working([lambda: fx.attempt(
        "option", "loss_scale='dynamic'", "use a loss scale (Keras' LossScaleOptimizer)", check,
        how="the dynamic rule run on the same float16 backward pass")])
