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
  (`tflab._user.code_swap`), build the model again with the policy (the factory is
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


def overflow_plan(result, origin, rerun: Callable[[], Any], out_names, reference_max: float = 0.0) -> fx.FixPlan:
    """The candidates for a forward overflow, applied and measured (see the module docstring).

    Args:
        result: the policy's `PolicyResult` (its outputs overflowed).
        origin: the `tflab.nonfinite.NonFiniteOp` where the values went non-finite, or None.
        rerun: ``rerun()`` builds and runs the policy again and returns its `PolicyResult`
            (called inside a rewritten line's ``with`` block).
        out_names: the output names (to tell outputs from gradients in ``overflow``).
        reference_max: the largest finite float32 magnitude among outputs and gradients;
            beyond the dtype's max, the plan ends with a note that no fix in the dtype exists.
    """
    from tflab._user.code_swap import finite_literals, in_float32, swapped_line
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
        if out_bad or var_bad or arg_bad:
            # a gradient left inf/NaN fails the fix: "gone" is said only of every output and gradient
            return False, (f"still {out_bad} non-finite output, {var_bad} variable-gradient and {arg_bad} "
                           f"input-gradient element(s) in {dt}"), facts
        text = (f"NaN/inf gone: outputs and every gradient finite in {dt}, max rel. error "
                f"{fmt_err(r.output_error)} vs float32 (gradients: median {fmt_err(r.gradient_error_median)})")
        return True, text, facts

    import os

    frame = tuple(origin.frame) if origin is not None and origin.frame else ()
    where = f"{os.path.basename(frame[0])}:{frame[1]}" if frame else "the line"

    def rewritten(rewrite, kind: str, description: str):
        def run() -> fx.Fix:
            if not frame:
                return fx.unchecked(kind, "", description, "the first non-finite op has no line of yours "
                                    "(it is made inside TF or Keras)")
            def check():
                with swapped_line(frame[0], frame[1], frame[2], rewrite) as (what, line):
                    try:
                        r = rerun()
                    except Exception as e:  # noqa: BLE001 - the rewritten code ran and raised: a failed fix
                        return _raised(e, line)
                return _with_line(measured(r), line)

            f = fx.attempt(kind, "", description, check, how=f"ran a copy of {frame[2]} with {where} rewritten, "
                           f"rebuilt and re-ran under the policy")
            return _rewritten_fix(f, kind, description)
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
    limit = float(float_info_max(dt))
    if reference_max > limit:
        # the true values themselves exceed the range: say so, instead of a fix that cannot exist
        candidates.append(fx.Fix("note", "", f"keep these values in float32: no {dt} fix exists",
                                 status=fx.NOT_CHECKED,
                                 why=f"their float32 values reach {reference_max:.4g}, beyond {dt}'s max {limit:.6g}"))
    return fx.first_working(candidates)


def float_info_max(dtype: str) -> float:
    from tflab.precision.float_formats import float_info

    return float(float_info(dtype).max)


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


# --------------------------------------------------------------------------- fixes of a measured cause


def _rel_text(x) -> str:
    return "inf" if x is None or not np.isfinite(x) else f"{x:.2g}"


def values_within(r, ref_outputs: list, ref_grads: list, out_names, grad_names,
                  grad_masks: list | None = None) -> tuple[bool, str, dict]:
    """Outputs and every gradient finite and within `significance_threshold` of float32, on the user's inputs.

    The relative error is taken over the elements whose float32 magnitude is at
    least 1/16 of the tensor's largest (`tflab.attribution.judge.inherited`), and
    an element inf/NaN where float32 is finite fails the check. ``grad_masks``
    leaves out the float32 gradient elements below float32's own noise floor
    (`tflab.precision.causes`): they have no value to match.
    """
    from tflab.attribution.judge import inherited, significance_threshold

    tol = significance_threshold(r.compute_dtype)
    worst, bad = 0.0, []
    gm = list(grad_masks) if grad_masks is not None else [None] * len(grad_names)
    for kind, names, refs, got, ms in (("output", out_names, ref_outputs, r.outputs, [None] * len(out_names)),
                                       ("gradient", grad_names, ref_grads, r.gradients, gm)):
        for n, ref, m in zip(names, refs, ms):
            g = got.get(n)
            if ref is None or g is None or np.asarray(ref).dtype.kind != "f":
                continue
            _, rel, mism = inherited(g, ref, m)
            if rel is None:
                continue
            worst = max(worst, rel)
            if mism or rel > tol:
                bad.append(f"{kind} {n.split(':', 1)[-1]} " + (f"{mism} inf/NaN" if mism else f"rel. error {rel:.2g}"))
    facts = {"max_relative_error": worst, "tolerance": tol, "off": bad[:5]}
    if bad:
        return False, f"{'; '.join(bad[:3])} vs float32 (tolerance {tol:.3g})", facts
    return True, (f"outputs and every gradient finite and within {tol:.3g} relative of float32 on your inputs "
                  f"(max {_rel_text(worst)})"), facts


def _keras_layer_classes(frame) -> list[type]:
    """Every live Keras layer class whose method holds the user's line (a module loaded twice has two)."""
    from tflab._user.code_swap import find_function

    out: list[type] = []
    for f in find_function(*frame) if frame else []:
        owner = f.__globals__.get(f.__qualname__.split(".")[0])
        if isinstance(owner, type) and owner not in out and any(
                c.__name__ == "Layer" and c.__module__.split(".")[0] in ("keras", "tf_keras") for c in owner.__mro__):
            out.append(owner)
    return out


def cause_plan(result, cause, rerun: Callable[[], Any], ref_outputs: list, ref_grads: list, out_names,
               grad_names, grad_masks: list | None = None) -> fx.FixPlan:
    """The candidates for a measured `Cause`, each run on the user's inputs, in order.

    1. ``constant``: the literal replaced by one the dtype holds (a value below
       the smallest normal becomes the power of ten at or above 16 of it: 1e-3
       in float16; one beyond the max becomes 1e4);
    2. the Keras layer whose ``call`` holds the cause's line computed in float32
       (``dtype="float32"`` on that layer: Keras casts its inputs to float32 and
       its outputs stay float32);
    3. the cause's line computed in float32 and cast back.

    Each is "checked" only when outputs and every gradient are finite and
    within the tolerance of `values_within`; a rewrite that leaves a gradient
    inf/NaN is failed.
    """
    import math
    import os

    from tflab._user.code_swap import in_float32, representable_literals, swapped_line
    from tflab.precision.float_formats import float_info

    dt = result.compute_dtype
    frame = tuple(cause.evidence.get("frame") or ())
    where = f"{os.path.basename(frame[0])}:{frame[1]}" if frame else "the line"

    def check_run() -> tuple[bool, str, dict]:
        return values_within(rerun(), ref_outputs, ref_grads, out_names, grad_names, grad_masks)

    def rewritten(rewrite, description: str):
        def run() -> fx.Fix:
            if not frame:
                return fx.unchecked("code", "", description, "the cause op has no line of yours")
            def check():
                with swapped_line(frame[0], frame[1], frame[2], rewrite) as (_, line):
                    try:
                        return _with_line(check_run(), line)
                    except Exception as e:  # noqa: BLE001 - the rewritten code ran and raised: a failed fix
                        return _raised(e, line)

            f = fx.attempt("code", "", description, check, how=f"ran a copy with {where} rewritten, rebuilt and "
                           "re-ran forward and backward under the policy")
            return _rewritten_fix(f, "code", description)
        return run

    candidates: list = []
    if cause.kind == "constant":
        fi = float_info(dt)
        small = 10.0 ** math.ceil(math.log10(16 * float(fi.smallest_normal)))
        candidates.append(rewritten(representable_literals(float(fi.smallest_normal), float(fi.max), small),
                                    f"use a constant {dt} holds (e.g. {small:g} for an epsilon)"))
    classes = _keras_layer_classes(frame)
    if classes:
        cls = classes[0]

        def layer_f32():
            # every live copy of the class: the factory may build from another copy than the first found
            origs = [(k, k.__init__) for k in classes]

            def patched(orig):
                def init(self, *a, **k):
                    orig(self, *a, **k)
                    self.dtype_policy = "float32"
                return init

            for k, orig in origs:
                k.__init__ = patched(orig)
            try:
                return check_run()
            finally:
                for k, orig in origs:
                    k.__init__ = orig

        candidates.append(lambda: fx.attempt(
            "code", f"{cls.__name__}(..., dtype='float32')", f"compute the layer {cls.__name__} in float32",
            layer_f32, how=f"rebuilt under the policy with every {cls.__name__} in float32 and re-ran forward "
            "and backward"))
    candidates.append(rewritten(in_float32(cast_back=True),
                                f"compute {where} in float32 and cast the result back to its first operand's dtype"))
    # whatever the class: float32 values beyond the dtype's range have no fix in that dtype
    big = max((float(np.max(np.abs(g[np.isfinite(g)]), initial=0)) for g in ref_grads + ref_outputs
               if g is not None and np.asarray(g).dtype.kind == "f"), default=0.0)
    if big > float(float_info(dt).max):
        candidates.append(fx.Fix("note", "", f"keep these values in float32: no {dt} fix exists",
                                 status=fx.NOT_CHECKED,
                                 why=f"their float32 values reach {big:.4g}, beyond {dt}'s max "
                                     f"{float(float_info(dt).max):.6g}"))
    return fx.first_working(candidates)


def _with_line(out: tuple, line: str) -> tuple:
    """A check's ``(worked, result, measured)`` with the rewritten line in ``measured``.

    The check runs in a child (`tflab.fix.attempt`): only what it returns comes
    back, so the line the rewrite produced travels in ``measured``.
    """
    extra = dict(out[2]) if len(out) > 2 and out[2] else {}
    extra["rewritten_line"] = line
    return bool(out[0]), str(out[1]), extra


def _raised(e: Exception, line: str) -> tuple:
    """A rewrite that applied and then raised: failed, with the exception's first line (as `tflab.fix.attempt`)."""
    first = next((s.strip() for s in str(e).splitlines() if s.strip()), "")
    return False, f"raised {type(e).__name__}: {first[:199]}", {"rewritten_line": line}


def _rewritten_fix(f: fx.Fix, kind: str, description: str) -> fx.Fix:
    """The Fix of a one-line rewrite; "not checked" when the rewrite did not apply to the line (nothing ran)."""
    measured = dict(f.measured)
    line = measured.pop("rewritten_line", None)
    if line is None:
        why = (f.result or f.why).split(": ", 1)[-1]
        return fx.unchecked(kind, "", description, why)
    return fx.Fix(f.kind, line, f.description, status=f.status, how=f.how, result=f.result, why=f.why,
                  measured=measured, source=line)
