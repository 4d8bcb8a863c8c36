"""Lab step 10: one function under float32, mixed_bfloat16 and mixed_float16, measured.

Mixed precision computes in a 16-bit float and keeps variables in float32
(Keras' ``DTypePolicy``: ``keras/src/dtype_policies/dtype_policy.py``). The
two 16-bit formats trade differently (IEEE 754 binary16 and Google's brain
float; values from `float_info`, which reads numpy / ml_dtypes):

* float16 has 11 significand bits (eps 2^-10) but 5 exponent bits: its
  largest finite value is 65504 and its smallest subnormal 2^-24, so small
  gradients *underflow* to 0 and large activations *overflow* to inf;
* bfloat16 has float32's 8 exponent bits (smallest normal 2^-126, max ~3.4e38)
  but only 8 significand bits (eps 2^-7): no range problem, more rounding.

Loss scaling is float16's fix: the loss times S before the backward pass (every
gradient S times larger, above 2^-24), the gradients divided by S in float32
after. Keras' ``LossScaleOptimizer`` (``keras/src/optimizers/loss_scale_optimizer.py``)
starts at S = 2^15 and halves S on each step with inf or NaN gradients.

`compare_precisions` runs a function (or a Keras model built by a factory
under each policy) forward and backward with a `tf.GradientTape` and measures,
against float32: the relative error of outputs and gradients, the gradient
elements that underflow to 0, the elements that overflow to inf/NaN, and what
a loss scale changes. When outputs overflow, the cause is the first
non-finite op of the policy's traced graph (`tflab.nonfinite`: e.g. the
constant 1e30 that is inf in float16, then inf * 0 = NaN in a Mul), and each
candidate fix is applied to a rewritten copy of the user's line and measured
(`tflab.precision.fixes`); only one that worked is printed as the fix. Gradients
zeroed below float16's range get loss_scale='dynamic' run on the same tape.
`tflab.demonstrate_loss_scaling` does it on the tour's MobileNetV3Small training step.

What tests/precision/test_precision.py measures on TF 2.21 (CPU, oneDNN on and off):
for ``reduce_sum(x @ w) * 2^-20`` with ``x = ones[8, 64]``, ``w = 2^-8``
(shape [64, 4]), dL/dx is 2^-26: 0 in float16 for all 512 elements, exact in
bfloat16, and 2^-26 again in float16 with a loss scale of 2^15 (fixed or
dynamic); ``100 * 1000`` overflows in float16 and not in bfloat16; on a
well-scaled MLP float16's output error is below bfloat16's (11 vs 8
significand bits). On the MobileNetV3Small training step (64×64×3, batch 4,
``training=True``), bfloat16 zeroes 0.1–0.4 % of gradient elements, none by range
(sums that round to 0 with 8 significand bits, which no loss scale changes); float16
a similar share, half of it below its range, which Keras' dynamic loss scale (2^14)
mostly rescues: bfloat16 needs no loss scaling because it has float32's exponent range.
"""


from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Callable

import numpy as np

from tflab._api.labels import variable_labels
from tflab._graph.analysis import flatten_sources, output_names_of, prepare_args
from tflab.precision.policy import (DEFAULT_POLICIES, INITIAL_LOSS_SCALE, MIN_LOSS_SCALE, POLICIES,  # noqa: F401
                           REFERENCE, check_float_values, global_policy, held_layers, is_keras_layer, keras_modules,
                           parse_loss_scale, parse_policies, record_compute_ops, takes_no_parameters)
from tflab.precision.records import PolicyResult, PrecisionComparison
from tflab._user.target import check_target, callable_name, recording_draws, signature_args
from tflab._user.usercode import user_entry
from tflab.errors import UsageError
from tflab.precision.float_formats import FloatInfo, float_info  # noqa: F401  (tflab.precision.float_info)

__all__ = ["compare_precisions", "PrecisionComparison", "PolicyResult", "parse_policies", "float_info",
           "FloatInfo", "global_policy", "POLICIES", "DEFAULT_POLICIES", "REFERENCE", "INITIAL_LOSS_SCALE",
           "MIN_LOSS_SCALE"]

@dataclasses.dataclass
class _Run:
    """What one policy's forward pass left: outputs and a persistent tape."""

    outputs: list
    output_names: list
    grad_fn: Callable  # scale -> (float32 numpy arrays, None where unconnected; seconds)
    forward_seconds: float
    variables: list


def _forward(call: Callable, sources: list, compute: str, variables: list | None,
             compute_ops: list | None = None, random_ops: list | None = None):
    """Runs ``call`` under a persistent tape; the target is sum(float outputs) in float32.

    ``compute_ops``, when a list, receives (op type, output dtype) of the
    MatMul/Conv-class ops the forward pass ran (`_record_compute_ops`).
    """
    import tensorflow as tf

    t0 = time.perf_counter()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(sources)
        if compute_ops is None:
            structure = call(sources)
        else:
            with record_compute_ops(random_ops) as seen:
                structure = call(sources)
            compute_ops.extend(seen)
        outputs = tf.nest.flatten(structure)
        outputs = [tf.convert_to_tensor(o) if not isinstance(o, tf.Tensor) else o for o in outputs]
        floats = [tf.cast(o, tf.float32) if o.dtype.is_floating else o for o in outputs]
        targets = [tf.reduce_sum(o) for o in floats if o.dtype == tf.float32]
        total = tf.add_n(targets) if targets else None
    if variables is None:
        variables = [v for v in tape.watched_variables() if v.trainable]
    srcs = list(sources) + list(variables)
    out_np = [o.numpy() for o in floats]
    seconds = time.perf_counter() - t0

    def grads(scale: float) -> tuple[list, float]:
        t = time.perf_counter()
        if total is None:
            return [None] * len(srcs), 0.0
        g = tape.gradient(total, srcs, output_gradients=tf.constant(scale, tf.float32),
                          unconnected_gradients=tf.UnconnectedGradients.NONE)
        # "divided back in float32": the division happens after the cast, as Keras'
        # LossScaleOptimizer divides float32 gradients (variables are float32).
        arrs = [None if x is None else (tf.convert_to_tensor(x).numpy().astype(np.float32) / np.float32(scale))
                for x in g]
        return arrs, time.perf_counter() - t

    return _Run(outputs=out_np, output_names=output_names_of(structure), grad_fn=grads,
                forward_seconds=seconds, variables=list(variables))


def _rel_errors(ref: np.ndarray, got: np.ndarray, floor: float) -> np.ndarray:
    """|got - ref| / |ref| on elements with finite |ref| >= floor (inf where got is not finite)."""
    r = ref.astype(np.float64).ravel()
    g = got.astype(np.float64).ravel()
    keep = np.isfinite(r) & (np.abs(r) >= floor)
    r, g = r[keep], g[keep]
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.abs(g - r) / np.abs(r)
    return np.where(np.isfinite(g), e, np.inf)


def _measured(errors: np.ndarray, refs: list) -> int | None:
    """How many elements an error was measured over; None when no float32 value was non-zero."""
    if not any(np.count_nonzero(np.isfinite(r) & (r != 0)) for r in refs):
        return None
    return int(errors.size)


def _measure(policy: str, ref_out: list, ref_grads: list, out: list, grads: list,
             output_names, grad_names, loss_scale, history, seconds, unscaled=None) -> PolicyResult:
    compute, variable = POLICIES[policy]
    floor = float_info(compute).smallest_normal
    # A loss-scaled gradient is held in the compute dtype as g * S: it is measured over the
    # elements whose scaled value the dtype holds at all (|g| * S >= its smallest subnormal;
    # 1e-9 * 2^15 = 3.3e-5 is below float16's smallest normal, yet held).
    grad_floor = floor if not loss_scale else float_info(compute).smallest_subnormal / float(loss_scale)
    out_err = [_rel_errors(r, o, floor) for r, o in zip(ref_out, out) if r.dtype.kind == "f"]
    grad_err = [_rel_errors(r, g, grad_floor) for r, g in zip(ref_grads, grads)
                if r is not None and g is not None]
    out_all = np.concatenate(out_err) if out_err else np.zeros(0)
    grad_all = np.concatenate(grad_err) if grad_err else np.zeros(0)
    underflow, below, overflow, nonzero = {}, {}, {}, {}
    for name, r, g in zip(grad_names, ref_grads, grads):
        if r is None or g is None:
            continue
        nz = r != 0
        nonzero[name] = int(nz.sum())
        zero = nz & (g == 0)
        if zero.any():
            underflow[name] = int(zero.sum())
            n_below = int((zero & (np.abs(r) < floor)).sum())
            if n_below:
                below[name] = n_below
    for name, r, g in list(zip(output_names, ref_out, out)) + list(zip(grad_names, ref_grads, grads)):
        if r is None or g is None or r.dtype.kind != "f":
            continue
        bad = np.isfinite(r) & ~np.isfinite(g)
        if bad.any():
            overflow[name] = int(bad.sum())
    # Nothing measured (no float32 element at or above the smallest normal): None, not 0.0,
    # which would read as "no error".
    out_n = _measured(out_all, [r for r in ref_out if r.dtype.kind == "f"])
    grad_n = _measured(grad_all, [r for r, g in zip(ref_grads, grads) if r is not None and g is not None])
    return PolicyResult(
        policy=policy, compute_dtype=compute, variable_dtype=variable,
        outputs=dict(zip(output_names, out)), gradients=dict(zip(grad_names, grads)),
        output_error=float(out_all.max()) if out_n else None,
        gradient_error=float(grad_all.max()) if grad_n else None,
        gradient_error_median=float(np.median(grad_all)) if grad_n else None,
        underflow=underflow, underflow_below_normal=below, overflow=overflow,
        loss_scale=loss_scale, loss_scale_history=tuple(history), seconds=seconds,
        nonzero_gradient_elements=sum(nonzero.values()), unscaled=unscaled,
        output_error_elements=out_n, gradient_error_elements=grad_n,
        gradient_error_floor=grad_floor, _nonzero_by_name=nonzero)


class PolicySubject:
    """A plain function (args cast to the compute dtype) or a Keras factory (built per policy)."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, factory: bool, seed: int):
        self.fn, self.args, self.kwargs, self.factory, self.seed = fn, args, kwargs, factory, seed
        self.python_fn = getattr(fn, "python_function", fn)
        self._flatten = flatten_sources
        self.reference_model = None
        # The first build's Keras layers and weights before any run: every build and run (`call`) starts there.
        self.reference_layers: list = []
        self.initial_weights: list | None = None
        self._held: dict[int, list] = {}
        self.random_ops: list = []  # random op types the float32 run ran (`PrecisionComparison.random_ops`)
        self.sources, self.source_names, self.rebuild = flatten_sources(self.python_fn, args, kwargs)

    def build(self, policy: str):
        """The callable for ``policy``: the plain function, or what the factory builds under it."""
        if not self.factory:
            return self.python_fn
        before = {m.__name__ for m in keras_modules()}
        with global_policy(policy, seed=self.seed):
            obj = self.fn()
        if {m.__name__ for m in keras_modules()} - before:
            # The factory imported Keras itself: build again with its policy set.
            with global_policy(policy, seed=self.seed):
                obj = self.fn()
        if not callable(obj):
            raise UsageError(f"the factory {getattr(self.fn, '__name__', self.fn)!r} returned "
                             f"{type(obj).__name__}; it must return a Keras model or a callable")
        if is_keras_layer(obj) and not obj.weights:  # a subclassed model builds its weights on the first call
            obj(*self.args, **self.kwargs)
        layers = [obj] if is_keras_layer(obj) else held_layers(obj)
        if self.initial_weights is None:
            if is_keras_layer(obj):
                self.reference_model = obj
            self.reference_layers = layers
            self.initial_weights = [layer.get_weights() for layer in layers]
        elif layers and not any(a is b for a, b in zip(layers, self.reference_layers)):
            # The first build's weights in every policy (a float64 build's initializers draw others from
            # the same seed); layers that do not match the first build's one for one stay as built.
            try:
                if len(layers) != len(self.initial_weights):
                    raise ValueError
                for layer, weights in zip(layers, self.initial_weights):
                    layer.set_weights(weights)
            except ValueError:
                layers = []
        self._held[id(obj)] = layers
        return obj

    def _restore(self, obj) -> None:
        """The weights of the Keras layers ``obj`` holds (state included) back to `initial_weights`:
        a training-mode run moves BatchNormalization's statistics, a seed generator, which the next
        run would read as a difference no rounding made. Eager (``tf.init_scope``), also when traced."""
        import tensorflow as tf

        layers = self._held.get(id(obj)) if self.factory else None
        if layers:
            with tf.init_scope():
                for layer, weights in zip(layers, self.initial_weights):
                    layer.set_weights(weights)

    def call(self, obj: Callable, compute: str):
        import tensorflow as tf

        def run(sources):
            self._restore(obj)
            if self.factory:  # Keras casts inputs to its compute dtype itself
                a, k = self.rebuild(list(sources))
            else:
                a, k = self.rebuild([tf.cast(s, compute) for s in sources])
            return obj(*a, **k)

        return run

    def variables_of(self, obj) -> list | None:
        return list(obj.trainable_variables) if is_keras_layer(obj) else None


def _source_labels(subject: PolicySubject, obj) -> list[str]:
    """``arg:NAME`` labels: the function's parameter names, or the built model's/callable's."""
    if not subject.factory:
        return list(subject.source_names)
    _, names, _ = subject._flatten(obj, subject.args, subject.kwargs)
    return names


def _var_name(v) -> str:
    return f"var:{getattr(v, 'path', None) or v.name}"


def run_policies(subject: PolicySubject, policies: tuple, loss_scale: Any, name: str,
                  progress: Callable[[str], None] | None = None, attribute: bool = True):
    """float32 first, then each policy; returns (results, output_names, gradient_names).

    ``attribute=False`` skips the per-op cause of a policy that disagrees with float32 (and the fixes
    planned from a cause): the measurements only.
    """
    from tflab._user.target import error_summary, recording_draws, user_frame
    from tflab._user.usercode import input_error

    results: dict[str, PolicyResult] = {}
    ref = None
    if any(POLICIES[p][0] == "bfloat16" for p in policies):
        # With oneDNN's ISA capped, bfloat16 MatMul can end this process (SIGSEGV): a child tries first.
        from tflab.process.bfloat16_probe import check_bfloat16_kernels

        check_bfloat16_kernels()
    for policy in policies:
        compute, _ = POLICIES[policy]
        if progress:
            progress(f"{policy}: build, forward and backward in {compute}")
        compute_ops: list = []
        try:
            obj = subject.build(policy)
            run = _forward(subject.call(obj, compute), subject.sources, compute,
                           subject.variables_of(obj), compute_ops, subject.random_ops if ref is None else None)
        except UsageError:
            raise
        except Exception as e:
            where = user_frame(e)
            hint = ("; only the arguments are cast: if it mixes them with float32 tf.Variables or "
                    "tensors, cast them (tf.cast(v, x.dtype)) or use Keras layers"
                    if not subject.factory and policy != REFERENCE else "")
            with recording_draws() as drawn:  # the caller's record: inputs tflab drew at random
                said = input_error(e, drawn) if policy == REFERENCE else error_summary(e)[:300]
            raise UsageError(f"{name} failed under {policy}: {said}"
                             + (f" (at {where})" if where else "") + hint) from e
        if compute_ops and (subject.factory or compute != "float32") \
                and not any(dt == compute for _, dt in compute_ops):
            # Every MatMul/Conv ran in another dtype. A function: only the arguments were cast, and a Keras
            # model built earlier keeps the policy it was built with and casts them back (autocasting).
            # A factory: its model set its own policy over the one set before the build.
            kinds = ", ".join(sorted({f"{op} in {dt}" for op, dt in compute_ops}))
            why = ("the factory's model sets its own dtype (set_global_policy or a layer's dtype=), which overrides "
                   f"the policy tflab sets before each build, so this would not measure {compute}; remove that "
                   "from the factory" if subject.factory else
                   "only the arguments are cast, and a Keras layer built earlier keeps its dtype policy and casts "
                   "them back, so this would measure float32 arithmetic; pass a zero-argument factory that builds "
                   "the model (it is built once per policy), or cast the weights inside the function")
            raise UsageError(f"{name} under {policy}: none of its {len(compute_ops)} MatMul/Conv op(s) ran in "
                             f"{compute} ({kinds}): {why}")
        scaled = compute == "float16" and loss_scale is not None
        if ref is None:
            grads, t = run.grad_fn(1.0)
            check_float_values(name, run.outputs, grads)
            out_names = tuple(run.output_names)
            sources = _source_labels(subject, obj)
            grad_names = tuple(sources + variable_labels(run.variables, sources))
            ref = (run.outputs, grads, [np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                                        for v in run.variables])
            ref_obj, ref_clean, noise_left, masks = obj, None, None, None
            results[policy] = _measure(policy, ref[0], ref[1], run.outputs, grads, out_names,
                                       grad_names, None, (), run.forward_seconds + t)
            continue
        if len(run.variables) != len(ref[2]) or any(
                tuple(v.shape) != r.shape for v, r in zip(run.variables, ref[2])):
            differ = next(((i, tuple(v.shape), r.shape) for i, (v, r) in enumerate(zip(run.variables, ref[2]))
                           if tuple(v.shape) != r.shape), None)
            what = (f"{len(run.variables)} trainable variable(s) under {policy} but {len(ref[2])} under float32"
                    if differ is None or len(run.variables) != len(ref[2]) else
                    f"trainable variable #{differ[0] + 1} of shape {differ[1]} under {policy} but {differ[2]} "
                    f"under float32")
            raise UsageError(f"{name} has {what}; the factory must build the same model")
        if subject.factory and subject.variables_of(obj) is None:
            _check_same_weights(run.variables, ref[2], policy, name)
        unscaled = None
        grads, t = run.grad_fn(1.0)
        total = run.forward_seconds + t
        history: list[float] = []
        if scaled:
            unscaled = _measure(policy, ref[0], ref[1], run.outputs, grads, out_names, grad_names,
                                None, (), total)
            scale = INITIAL_LOSS_SCALE if loss_scale == "dynamic" else loss_scale
            while True:
                history.append(scale)
                grads, t = run.grad_fn(scale)
                total += t
                finite = all(g is None or np.isfinite(g).all() for g in grads)
                if loss_scale != "dynamic" or finite or scale <= MIN_LOSS_SCALE:
                    break
                scale = max(scale / 2, MIN_LOSS_SCALE)
        if ref_clean is None and _may_be_noise(ref[1], grads, compute):
            # float32 elements a policy zeroed: are they values, or float32's own rounding noise?
            from tflab.precision.causes import cleaned, float64_gradients, noise_masks

            if progress:
                progress("float64: the float32 reference's own noise floor")
            masks = noise_masks(ref[1], float64_gradients(subject, _forward))
            ref_clean = cleaned(ref[1], masks)
            noise_left = (None if all(m is None for m in masks) else
                          sum(int((~m & (r != 0)).sum()) for m, r in zip(masks, ref[1]) if m is not None))
        mref = (ref[0], ref_clean if ref_clean is not None else ref[1], ref[2])
        if unscaled is not None and ref_clean is not None:
            unscaled = _measure(policy, mref[0], mref[1], run.outputs, run.grad_fn(1.0)[0], out_names, grad_names,
                                None, (), unscaled.seconds)
        result = _measure(policy, mref[0], mref[1], run.outputs, grads, out_names, grad_names,
                          history[-1] if history else None, history, total, unscaled)
        result = dataclasses.replace(result, reference_noise_elements=noise_left)
        results[policy] = _with_fixes(result, subject, policy, obj, run, mref, out_names, grad_names,
                                      scaled, progress, ref_obj if attribute else None, name, masks)
    return results, out_names, grad_names


def _may_be_noise(ref_grads: list, grads: list, compute: str) -> bool:
    """Whether a policy zeroed float32 gradient elements or differs from them by more than rounding."""
    from tflab.attribution.judge import significant

    return any(r is not None and g is not None and (bool(((r != 0) & (g == 0)).any()) or significant(g, r, compute))
               for r, g in zip(ref_grads, grads))


def _with_fixes(result: PolicyResult, subject: PolicySubject, policy: str, obj, run: _Run, ref,
                out_names, grad_names, scaled: bool, progress, ref_obj=None, name: str = "",
                masks=None) -> PolicyResult:
    """The measured cause and the checked fixes of a disagreement (`tflab.precision.causes`, `.fixes`)."""
    from tflab.precision.causes import attribute_policy, disagree
    from tflab.precision.fixes import cause_plan, loss_scale_plan, overflow_plan

    compute, _ = POLICIES[policy]
    changes: dict = {}
    cause = None
    if ref_obj is not None and disagree(result, ref[0], run.outputs):
        if progress:
            progress(f"{policy}: every op judged on its own inputs (the cause)")
        attribution = attribute_policy(subject, policy, obj, ref_obj, name or callable_name(subject.fn))
        cause = attribution.cause
        changes["attribution"] = attribution
        changes["cause"] = cause

    def rerun_fixed() -> PolicyResult:
        obj2 = subject.build(policy)
        run2 = _forward(subject.call(obj2, compute), subject.sources, compute, subject.variables_of(obj2))
        g2, _ = run2.grad_fn(1.0)
        return _measure(policy, ref[0], ref[1], run2.outputs, g2, out_names, grad_names, None, (), 0.0)

    out_overflow = any(k in out_names for k in result.overflow)
    zeroed_constant = cause is not None and cause.kind == "constant" and cause.evidence.get("became") == "0"
    if cause is not None and cause.kind in ("overflow", "constant", "ill-conditioned", "rounding", "domain") \
            and (not out_overflow or zeroed_constant):
        if progress:
            progress(f"{policy}: the candidate fixes of the cause, run on your inputs")
        changes["fix"] = cause_plan(result, cause, rerun_fixed, list(ref[0]), list(ref[1]), out_names, grad_names,
                                    masks)
    if out_overflow and not zeroed_constant:
        from tflab.nonfinite import analyse, trace_op_values

        if progress:
            progress(f"{policy}: the first non-finite op of the traced graph")
        try:
            ops, outs = trace_op_values(subject.call(obj, compute), subject.sources)
            found = analyse(ops, outs, callable_name(subject.fn))
        except Exception as e:  # noqa: BLE001 - the comparison stands without the cause
            from tflab.nonfinite import FirstNonFinite

            found = FirstNonFinite(callable_name(subject.fn), 0, None, None, False,
                                   error=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")

        def rerun() -> PolicyResult:
            obj2 = subject.build(policy)
            run2 = _forward(subject.call(obj2, compute), subject.sources, compute, subject.variables_of(obj2))
            g2, _ = run2.grad_fn(1.0)
            return _measure(policy, ref[0], ref[1], run2.outputs, g2, out_names, grad_names, None, (), 0.0)

        if progress:
            progress(f"{policy}: running the candidate fixes")
        changes["nonfinite"] = found
        big = max((float(np.max(np.abs(a[np.isfinite(a)]), initial=0)) for a in list(ref[0]) + list(ref[1])
                   if a is not None and a.dtype.kind == "f"), default=0.0)
        changes["fix"] = overflow_plan(result, found.origin, rerun, out_names, big)
    if compute == "float16" and not scaled and sum(result.underflow_below_normal.values()) \
            and (cause is None or cause.kind in ("underflow", "unexplained")):
        def measure(grads, scale, history):
            return _measure(policy, ref[0], ref[1], run.outputs, grads, out_names, grad_names, scale, history, 0.0)

        changes["loss_scale_fix"] = loss_scale_plan(result, run.grad_fn, measure, INITIAL_LOSS_SCALE,
                                                    MIN_LOSS_SCALE)
    return dataclasses.replace(result, **changes) if changes else result


def _check_same_weights(variables: list, ref_values: list, policy: str, name: str) -> None:
    """A factory returning a callable (not a model) must draw the same initial weights."""
    for v, r in zip(variables, ref_values):
        got = np.asarray(v.numpy()).astype(np.float32)
        if not np.array_equal(got, r.astype(got.dtype).astype(np.float32)) and \
                not np.array_equal(got, r.astype(np.dtype(v.dtype.as_numpy_dtype)).astype(np.float32)):
            raise UsageError(f"{name} built different initial weights under {policy} than under float32 "
                             f"({_var_name(v)}); seed its initializers, or return the Keras model itself "
                             "so its weights can be copied")


@user_entry("while running under each dtype policy")
def compare_precisions(fn: Callable, *args: Any,
                       policies: Any = DEFAULT_POLICIES, loss_scale: Any = None,
                       seed: int = 0, examples: Any = None, **kwargs: Any) -> PrecisionComparison:
    """Runs ``fn`` forward and backward under each dtype policy and measures it against float32.

    A plain function (or `tf.function`: its Python function runs eagerly, so
    its dtypes can change) gets its float tensor arguments cast to the
    policy's compute dtype; its outputs are cast back to float32. A Keras
    model must be given as a zero-argument **factory**: Keras fixes a layer's
    dtype policy when the layer is built, so each policy is set globally
    (``keras.mixed_precision.set_dtype_policy``; tf_keras'
    ``set_global_policy``) before the factory runs, and the previous policy is
    restored afterwards, also on error. A factory returning a Keras model gets
    the float32 build's weights copied in; one returning another callable (a
    loss closure over layers it built) must draw the same initial weights:
    Keras is seeded with ``seed`` before each build, and the weights are checked.

    Gradients are those of ``sum(reduce_sum(o) for o in float outputs)``
    (float32) with respect to the float tensor arguments and the trainable
    variables, from a `tf.GradientTape`. With a loss scale S the backward pass
    starts from S (``output_gradients``: the same arithmetic as multiplying
    the float32 loss by S) and the gradients are divided by S in float32.

    Args:
        fn: a function of tensors, a `tf.function`, or a zero-argument factory
            returning a Keras 3 / tf_keras model (or a callable using layers it
            built). A built Keras model is refused: it is too late to set its policy.
        *args, **kwargs: the arguments (model inputs for a factory). A fully
            defined `tf.TensorSpec` becomes a seeded standard-normal tensor.
        policies: Keras policy names, a sequence or a comma-separated string;
            float32 always runs first as the reference.
        loss_scale: None, a positive number, or ``"dynamic"`` (Keras'
            LossScaleOptimizer: start at 2^15, halve while a gradient is inf or
            NaN; stop at 1 as tf_keras does). Applied to the policies that
            compute in float16, as Keras' ``Model.compile`` wraps only
            ``mixed_float16``'s optimizer; their `PolicyResult.unscaled` holds
            the same forward pass without scaling.
        seed: seeds the random tensors made from TensorSpecs and Keras' initializers.
        examples: real inputs instead of ``*args``: a path to an ``.npz`` with one array per
            parameter name (a factory: its model's inputs, in the file's order) or a dict
            ``{name: array}``, bound as ``--examples`` binds them (`tflab.examples.example_inputs`).

    Returns:
        A `PrecisionComparison`; ``.policies[name]`` is a `PolicyResult` with
        outputs, gradients, output_error, gradient_error (relative, dimensionless),
        underflow, overflow (element counts), loss_scale and seconds.

    Raises:
        UsageError: an unknown policy, a bad loss_scale, a built Keras model
            instead of a factory, a plain function none of whose MatMul/Conv ops
            ran in the policy's compute dtype (it calls a Keras model built
            earlier, which casts the arguments back to float32: seen through TF's
            op callbacks), or ``fn`` failing under a policy (the message
            names the policy and the user's line).

    Example:
        >>> x, w = tf.ones([8, 64]), tf.fill([64, 4], 2.0 ** -8)
        >>> cmp = tflab.compare_precisions(lambda x, w: tf.reduce_sum(x @ w) * 2.0 ** -20, x, w)
        >>> cmp.policies["mixed_float16"].underflow["arg:x"], cmp.policies["mixed_bfloat16"].underflow
        (512, {})
    """
    from tflab._api.argcheck import check_seed

    seed = check_seed(seed, "seed", "compare_precisions")
    import tensorflow as tf

    policies = parse_policies(policies)
    loss_scale = parse_loss_scale(loss_scale)
    if is_keras_layer(fn):
        raise UsageError(f"{type(fn).__name__} is an already-built Keras model: its dtype policy is fixed; "
                         "pass a zero-argument factory instead, e.g. lambda: build_model()")
    if not callable(fn):
        raise UsageError(f"compare_precisions needs a callable, got {type(fn).__name__}")
    name = callable_name(fn)
    check_target(fn, name)
    if examples is not None:
        from tflab.examples import example_inputs, with_examples

        args, kwargs = (example_inputs(fn, examples, kwargs, flag="examples=", by_position=True)
                        if takes_no_parameters(fn) else with_examples(fn, examples, args, kwargs))
    factory = bool(args or kwargs) and takes_no_parameters(fn)
    if not factory:
        args, kwargs = signature_args(fn, args, kwargs)
    if any(isinstance(v, tf.TensorSpec) and not v.shape.is_fully_defined()
           for v in tf.nest.flatten((args, kwargs))):
        raise UsageError(f"{name}: pass tensors or TensorSpecs with every dim given, e.g. float32[4,8]")
    with recording_draws():  # the inputs drawn at random, named when the float32 run fails on them
        args, kwargs = prepare_args(args, kwargs, seed)
        subject = PolicySubject(fn, args, kwargs, factory, seed)
        results, out_names, grad_names = run_policies(subject, policies, loss_scale, name)
    return PrecisionComparison(function_name=name, kind="keras model factory" if factory else "function",
                               policies=results, loss_scale=loss_scale, output_names=out_names,
                               gradient_names=grad_names, random_ops=tuple(sorted(set(subject.random_ops))),
                               device=next((getattr(s, "device", "") for s in subject.sources), ""))


# --------------------------------------------------------------------------- the demonstration

