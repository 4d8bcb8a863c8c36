"""Lab step 8, error bounds: how far a TFLite variant may be from TF, and why.

Why it is not bit-exact, and the bound each variant asserts (elementwise, per
output; ``u = 2**-24`` is float32's unit roundoff):

* ``none`` (float32): the converter folds BatchNorm into weights and fuses
  bias/activations, and XNNPACK accumulates dot products in its own order. A
  length-K dot product summed in any order is the exact product of weights
  perturbed by at most ``γ_K = K·u/(1−K·u)`` relatively (Higham, *Accuracy and
  Stability of Numerical Algorithms*, §3.1), so two orders differ by at most
  ``2·γ_K`` relative weight perturbation. Propagated to the output to first
  order with TF's own gradients: ``Σ_w 2·γ_K(w)·|∂y/∂w|·|w|`` plus 4 ULP of
  ``max(|y|, max over the output of |y|)`` for elementwise kernels (exp, tanh)
  that differ in their last bits, measured at the scale of the tensor.
* ``float16``: every float weight is rounded to float16 (relative step
  ``2**-11``) and dequantized back: ``Σ_w 2**-11·|∂y/∂w|·|w|`` + the float bound.
* ``dynamic`` (dynamic-range): weight tensors of at least 1024 elements are
  stored as int8 with step ``s = max|w|/127``; rounding moves each weight by at
  most ``s/2``: ``Σ_w (s/2)·|∂y/∂w|``. The hybrid kernels also quantize each
  activation row to int8 at run time; we estimate that as a second term of
  the same size (``×2``: an estimate, not a proof), plus the float bound.
  Smaller weight tensors stay float (``QuantizationSpecs.
  minimum_elements_for_weights`` defaults to 1024 in TF's MLIR quantizer,
  tensorflow/compiler/mlir/lite); when none is large enough the variant is
  the float model and the bound is the float one.
* ``int8`` (full integer, int8 inputs and outputs, calibrated by a
  representative dataset made from the examples): half an output step for the
  final rounding, plus the first-order effect of the weight steps and of the
  input quantization step, doubled to estimate the requantization of the
  intermediate tensors (an estimate, not a proof), and never less than one
  output step (TFLite's int8 softmax is measured one step off for correctly
  computed inputs): a small multiple of the output scale, which the report
  states in output steps.

The first-order gradient terms use the unfolded TF variables and per-tensor
steps ``max|w|/127``, an upper bound of the per-channel steps the converter
uses; they are computed once per SavedModel and example set and shared by the
four variants.

`sensitivity` computes the gradients (cached per SavedModel and example
set), `output_bounds` the elementwise bound of one output, `bound_explanation` the
sentence the report prints.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
from typing import Any, Callable, Mapping

import numpy as np

from tflab._tf.grappler import without_grappler
from tflab._user.usercode import run_signature
from tflab.litert import bound_store
from tflab.litert.bound_passes import gradient_sums_fn, joined_feed, same_rows, spread_elements  # noqa: F401 (re-exported)
from tflab.litert.conversion import call_target
from tflab.examples import Examples, feed_for
from tflab.saved_model import load_saved_model, signature_inputs

UNIT_ROUNDOFF = 2.0 ** -24  # float32
FLOAT16_STEP = 2.0 ** -11  # relative rounding error of float16 (round to nearest)
MIN_WEIGHT_ELEMENTS = 1024  # dynamic-range quantization leaves smaller weights in float
ELEMENTWISE_ULPS = 4
# Bounds need one backward pass per output element; beyond this many per
# output (each row's largest, then spread evenly: `chosen_elements`), the remaining elements get the
# largest computed bound (an estimate).
MAX_GRADIENT_ELEMENTS = 1024
# Each backward pass costs about one sweep over the parameters: a model with P float
# parameters gets GRADIENT_BUDGET // P passes per output (never fewer than
# MIN_GRADIENT_ELEMENTS, never more than MAX_GRADIENT_ELEMENTS), so a CNN's bound stays
# within a few conversions' time (1024 passes made ConvNeXtTiny's export 17× the
# plain work) while a small model keeps every element exact. The floor holds each example
# row's largest element (`chosen_elements`): on ResNet50 and ConvNeXtTiny at 32×32 (5 example
# rows) the largest float and weight terms among 32 such elements equal those among 128, measured,
# and a backward pass of ConvNeXtTiny costs 11× its forward pass (0.26 s on one row).
GRADIENT_BUDGET = 1 << 26
MIN_GRADIENT_ELEMENTS = 32


# Which elements get the passes (`chosen_elements`): part of a stored bound's key, with the budget.
ELEMENT_CHOICE = "row-max+spread"


def _budget_now() -> tuple:
    return (MIN_GRADIENT_ELEMENTS, MAX_GRADIENT_ELEMENTS, GRADIENT_BUDGET, ELEMENT_CHOICE)


def gradient_elements(n_params: int) -> int:
    """How many elements of one output get a backward pass, for a model of ``n_params`` float parameters."""
    return int(min(MAX_GRADIENT_ELEMENTS, max(MIN_GRADIENT_ELEMENTS, GRADIENT_BUDGET // max(1, n_params))))


# ------------------------------------------------------- first-order sensitivities


@dataclasses.dataclass
class _Sensitivity:
    """Per output element: Σ|∂y/∂w|·|w| and Σ|∂y/∂w| per variable, Σ|∂y/∂x| per input."""

    rel: dict[str, np.ndarray]  # output key -> [elements, variables]
    abs: dict[str, np.ndarray]  # output key -> [elements, variables]
    inputs: dict[str, dict[str, np.ndarray]]  # output key -> input -> [elements] (per-row input step applied later)
    fan_in: np.ndarray  # [variables] reduction length K of each variable
    quantizable: np.ndarray  # [variables] bool: rank ≥ 2 and ≥ MIN_WEIGHT_ELEMENTS
    step: np.ndarray  # [variables] max|w|/127


_SENSITIVITY_CACHE: dict[str, _Sensitivity] = {}


def _cache_key(saved_model_dir: str, batches) -> str:
    h = hashlib.sha256(os.path.realpath(saved_model_dir).encode())
    pb = os.path.join(saved_model_dir, "saved_model.pb")
    h.update(str(os.stat(pb).st_mtime_ns if os.path.exists(pb) else 0).encode())
    index = os.path.join(saved_model_dir, "variables", "variables.index")  # new weights, same graph file
    if os.path.isfile(index):
        with open(index, "rb") as f:
            h.update(f.read())
    for b in batches:
        for k in sorted(b):
            h.update(k.encode())
            h.update(np.ascontiguousarray(b[k]).tobytes() if b[k].dtype.kind not in "OU" else repr(b[k]).encode())
    return h.hexdigest()


def sensitivity_cached(saved_model_dir: str | os.PathLike, batches) -> bool:
    """Whether `sensitivity` has the gradients of this SavedModel and example set already."""
    try:
        return _cache_key(os.fspath(saved_model_dir), batches) in _SENSITIVITY_CACHE
    except OSError:
        return False


def sensitivity(saved_model_dir: str, loaded, batches, progress: Callable[[str], None] | None = None) -> _Sensitivity:
    """Gradients of every output element of every signature, keyed ``"<signature>/<output>"``.

    One backward pass per output element (one-hot seed), as a persistent
    ``tf.GradientTape`` would take them one `GradientTape.gradient` call at a
    time, but run by one traced function per signature (`gradient_sums_fn`):
    the forward pass runs once per example batch and a ``tf.map_fn`` loop
    takes the backward passes and reduces each to per-variable sums in
    float64 inside the graph, so no gradient is copied to numpy.

    Args:
        saved_model_dir: the SavedModel folder (part of the cache key, with
            the mtime of its ``saved_model.pb``).
        loaded: the loaded SavedModel (``load_saved_model(saved_model_dir)``).
        batches: example batches, ``{input name: ndarray}`` each; float inputs
            have NaN fed as 0 (the rows with NaN have NaN outputs, compared by
            position; their gradients are taken at 0 so that other rows keep
            theirs).
        progress: called with a line before each traced backward graph and each
            batch's backward passes (seconds each on a CNN), or None.

    Returns:
        `_Sensitivity`: per output key, ``rel``/``abs`` float64 arrays
        ``[elements, variables]`` (elements of all batches concatenated,
        row-major within a batch) holding ``Σ|∂y/∂w|·|w|`` and ``Σ|∂y/∂w|``
        over each float variable, and ``inputs[key][name]`` float64
        ``[elements]`` holding ``Σ|∂y/∂x|`` per float input. NaN gradients
        count as 0 and ±inf as the largest finite value (``np.nan_to_num``).
        Past `gradient_elements` elements of one output (counted over
        the batches: on all their rows at once where `joined_feed` and
        `same_rows` allow it, else each batch its share by example rows), only those
        `chosen_elements` picks are computed, the others are NaN; non-float outputs have zeros. Signatures calling the same
        function share one set of arrays. Cached per SavedModel and examples, in
        this process and, after ``tflab export``, in the SavedModel's
        ``assets.extra`` (`tflab.litert.bound_store`: read back only for the same
        graph, weights and examples).

    Raises:
        LookupError: an op of the model has no registered gradient (raised
            when the backward pass is built).
        UsageError: the signature fails on the examples (`run_signature`).
    """
    import tensorflow as tf

    say = progress or (lambda msg: None)
    key = _cache_key(saved_model_dir, batches)
    keys = sorted(loaded.signatures)
    if key in _SENSITIVITY_CACHE:
        return _SENSITIVITY_CACHE[key]
    variables = []
    seen = set()
    for sig in loaded.signatures.values():
        for v in sig.variables:
            if id(v) not in seen and v.dtype.is_floating:
                seen.add(id(v))
                variables.append(v)
    stored = bound_store.load(saved_model_dir, batches, _budget_now(), len(variables))
    if stored is not None:  # export computed them for this SavedModel and these examples
        say("end-to-end bound: the gradients stored with this SavedModel by tflab export (same weights, same "
            "examples)")
        _SENSITIVITY_CACHE[key] = _Sensitivity(**stored)
        return _SENSITIVITY_CACHE[key]
    values = [v.numpy() for v in variables]
    fan_in = np.array([max(1, a.size // a.shape[-1]) if a.ndim >= 2 and a.shape[-1] else 1 for a in values],
                      dtype=np.float64)
    quantizable = np.array([a.ndim >= 2 and a.size >= MIN_WEIGHT_ELEMENTS for a in values], dtype=bool)
    # A NaN or ±inf weight counts as numpy's nan_to_num does (as a NaN or inf gradient): a bound of NaN
    # would judge nothing, and inf·0 (an infinite weight no example reaches) would make it NaN.
    step = np.array([float(np.nan_to_num(np.abs(a.astype(np.float64))).max()) / 127.0 if a.size else 0.0
                     for a in values])
    cap = gradient_elements(sum(int(a.size) for a in values))
    rel: dict[str, list] = collections.defaultdict(list)
    absl: dict[str, list] = collections.defaultdict(list)
    ins: dict[str, dict[str, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
    computed: collections.Counter = collections.Counter()
    done: dict[str, str] = {}  # call target -> signature key already differentiated
    for sig_key in keys:
        fn = loaded.signatures[sig_key]
        target = call_target(fn)
        if target is not None and target in done:
            # Same FuncGraph behind another key: same gradients, copy them.
            for out_name in fn.structured_outputs:
                src, dst = f"{done[target]}/{out_name}", f"{sig_key}/{out_name}"
                rel[dst], absl[dst], ins[dst] = rel[src], absl[src], ins[src]
            continue
        if target is not None:
            done[target] = sig_key
        names = signature_inputs(fn)
        own_ids = {id(v) for v in fn.variables}
        own = [j for j, v in enumerate(variables) if id(v) in own_ids]  # the others' gradients are 0
        out_names = list(fn.structured_outputs)
        float_out = [o for o in out_names if fn.structured_outputs[o].dtype.is_floating]
        traced: dict = {}
        abs_w = None
        # Each batch's share of the cap, by its example rows (cumulative: a batch whose output is smaller
        # than its share leaves the rest to the next), so every example gets backward passes.
        rows = [max((int(np.shape(a)[0]) for a in b.values() if np.ndim(a) >= 1), default=1) for b in batches]
        feeds = [{n: tf.constant(np.nan_to_num(a, nan=0.0) if a.dtype.kind == "f" else a)
                  for n, a in feed_for(batch, names).items()} for batch in batches]
        joined = joined_feed(fn, feeds)  # one input shape for every pass, where the rows are independent
        plan = [(joined, len(batches))] if joined is not None else [(f, i + 1) for i, f in enumerate(feeds)]
        step_i = 0
        while step_i < len(plan):
            feed, upto = plan[step_i]
            step_i += 1
            float_in = [n for n, t in feed.items() if t.dtype.is_floating]
            spec_key = tuple((n, t.dtype.name, t.shape.rank) for n, t in feed.items())
            if spec_key not in traced:
                say(f"end-to-end bound: tracing the backward pass of {sig_key} ({len(own)} variables)")
                try:
                    traced[spec_key] = gradient_sums_fn(fn, [variables[j] for j in own], out_names, float_out,
                                                        float_in, feed)
                except LookupError:  # an op without a registered gradient: check_tflite says so
                    raise
                except Exception:
                    run_signature(fn, sig_key, feed)  # the signature's own failure, as one line
                    raise
            share = -(-cap * sum(rows[:upto]) // max(1, sum(rows)))  # ceil
            caps = [max(0, min(cap, share) - computed[f"{sig_key}/{o}"]) for o in float_out]
            if sum(caps):
                where = f"batch {upto} of {len(batches)}" if feed is not joined else \
                    f"the {len(batches)} batches' {sum(rows)} rows at once"
                say(f"end-to-end bound: up to {sum(caps)} backward passes, one per output element, on "
                    f"{where} ({sig_key})")
            if abs_w is None:  # |w| of this signature's variables, once: an input, not ops to trace
                abs_w = tf.constant(np.concatenate([np.nan_to_num(np.abs(values[j].astype(np.float64))).ravel()
                                                    for j in own]
                                                   + [np.zeros(1)]))
            with without_grappler():  # Grappler took seconds on this graph and made no pass faster
                sizes, chosen, r_own, a_own, in_sums, forward = run_signature(
                    lambda **f: traced[spec_key](f, tf.constant(caps, tf.int32), abs_w), sig_key, feed)
            if feed is joined and not same_rows([t.numpy() for t in forward], [
                    [run_signature(fn, sig_key, f)[o].numpy() for o in out_names] for f in feeds]):
                # The rows interact (or the outputs have no batch axis): each batch on its own after all.
                say(f"end-to-end bound: {sig_key}'s outputs on the joined batches are not the batches' own; "
                    f"each batch is differentiated on its own")
                plan, step_i = [(f, i + 1) for i, f in enumerate(feeds)], 0
                continue
            sizes, chosen, row = sizes.numpy(), chosen.numpy(), 0
            r_own, a_own, in_sums = r_own.numpy(), a_own.numpy(), in_sums.numpy()
            bad = ~np.isfinite(a_own).all(axis=1)
            if bad.any():  # a NaN or inf gradient: these rows again, each |g| cleaned before the sums
                say(f"end-to-end bound: {int(bad.sum())} backward passes again with NaN/inf gradients counted "
                    f"as numpy's nan_to_num does ({sig_key})")
                clean_key = spec_key + ("clean",)
                if clean_key not in traced:
                    traced[clean_key] = gradient_sums_fn(fn, [variables[j] for j in own], out_names, float_out,
                                                         float_in, feed, clean=True)
                with without_grappler():
                    _, _, r_clean, a_clean, _, _ = run_signature(
                        lambda **f: traced[clean_key](f, tf.constant(caps, tf.int32), abs_w), sig_key, feed)
                r_own[bad], a_own[bad] = r_clean.numpy()[bad], a_clean.numpy()[bad]
            for out_name, n in zip(out_names, sizes.tolist()):
                okey = f"{sig_key}/{out_name}"
                r = np.zeros((n, len(variables)))
                a_ = np.zeros((n, len(variables)))
                per_in = {name: np.zeros(n) for name in float_in}
                if out_name in float_out:
                    # One backward pass per element: cap the cost for large outputs.
                    m = min(n, caps[float_out.index(out_name)])
                    computed[okey] += m
                    at = chosen[row:row + m]  # `chosen_elements`: each row's largest |y|, then spread
                    r[:], a_[:] = np.nan, np.nan  # elements without a backward pass
                    # A computed element's gradient is 0 for a variable its signature does not capture
                    # (another signature's weight): 0 in those columns, not NaN.
                    r[at], a_[at] = 0.0, 0.0
                    r[np.ix_(at, own)], a_[np.ix_(at, own)] = r_own[row:row + m], a_own[row:row + m]
                    for i, name in enumerate(float_in):
                        per_in[name][:] = np.nan
                        per_in[name][at] = in_sums[row:row + m, i]
                    row += m
                rel[okey].append(r)
                absl[okey].append(a_)
                for name in float_in:
                    ins[okey][name].append(per_in[name])
    sens = _Sensitivity(
        rel={k: np.concatenate(v) for k, v in rel.items()},
        abs={k: np.concatenate(v) for k, v in absl.items()},
        inputs={k: {n: np.concatenate(v) for n, v in d.items()} for k, d in ins.items()},
        fan_in=fan_in, quantizable=quantizable, step=step)
    if len(_SENSITIVITY_CACHE) >= 8:
        _SENSITIVITY_CACHE.clear()
    _SENSITIVITY_CACHE[key] = sens
    return sens


def float_variable_sizes(loaded) -> list[int]:
    """Element counts of the float variables, in `sensitivity`'s column order (first seen across signatures)."""
    sizes, seen = [], set()
    for sig in loaded.signatures.values():
        for v in sig.variables:
            if id(v) not in seen and v.dtype.is_floating:
                seen.add(id(v))
                sizes.append(int(np.prod(v.shape)))
    return sizes


def with_stored_weights(sens: _Sensitivity, loaded, stored_sizes) -> _Sensitivity:
    """``sens`` with every variable the int8 flatbuffer stores as an integer constant counted as quantized.

    A full-integer conversion stores *every* weight in int8, whatever its size: the
    ``MIN_WEIGHT_ELEMENTS`` rule is the dynamic-range recipe's. The weight term of the int8
    bound must then include the small ones too: an Embedding table of 160 elements whose rows a
    GATHER passes on with the table's own scale (no requantization: its rounding is the table's),
    or a 32-element Dense kernel. Without them, a model with no float input (token ids) had a bound
    of one output step and LiteRT, computing its quantized model correctly, was over it.

    Args:
        sens: the cached sensitivities (not modified; a copy is returned).
        loaded: the SavedModel `sensitivity` was computed on (its variables give the column order).
        stored_sizes: element counts of the flatbuffer's integer (int8/int16) constant tensors.
            A variable is matched by its element count (the converter transposes and folds, but keeps
            the count; a count shared with another constant counts it, which only widens the bound).

    Returns:
        A `_Sensitivity` whose ``quantizable`` also marks the matched variables; ``sens`` itself when
        the variables cannot be lined up with its columns.
    """
    sizes = float_variable_sizes(loaded)
    if len(sizes) != len(sens.quantizable):
        return sens
    stored = np.array([n in stored_sizes for n in sizes], dtype=bool)
    return dataclasses.replace(sens, quantizable=sens.quantizable | stored)



def prepare_bounds(saved_model_dir: str | os.PathLike, examples: Examples | Any,
                   progress: Callable[[str], None] | None = None) -> None:
    """Computes the gradients the bounds need, ahead of `check_tflite` (which then finds them cached).

    `tflab.export` calls it while the converter works in its worker process; ``progress`` hears
    a line per step that takes seconds (as `sensitivity`'s).
    """
    saved_model_dir = os.fspath(saved_model_dir)
    sensitivity(saved_model_dir, load_saved_model(saved_model_dir), Examples.of(examples), progress=progress)


def store_computed(saved_model_dir: str | os.PathLike, batches, float_tflite: str | os.PathLike | None = None
                   ) -> str | None:
    """Stores with the SavedModel what `sensitivity` computed here for it and ``batches`` (`tflab.litert.bound_store`).

    Returns:
        The file written, or None when nothing was computed for them in this process.
    """
    try:
        sens = _SENSITIVITY_CACHE.get(_cache_key(os.fspath(saved_model_dir), batches))
    except OSError:
        return None
    return None if sens is None else bound_store.store(saved_model_dir, batches, _budget_now(), sens, float_tflite)


def _gamma(k: np.ndarray) -> np.ndarray:
    ku = k * UNIT_ROUNDOFF
    return ku / (1.0 - ku)


def _ulp32(x: np.ndarray) -> np.ndarray:
    x = np.abs(x.astype(np.float32))
    return np.spacing(np.maximum(x, np.finfo(np.float32).tiny)).astype(np.float64)


def output_bounds(quantization: str, okey: str, ref: np.ndarray, sens: _Sensitivity, dyn_quantized: bool,
                  input_scales: Mapping[str, float], output_scale: float | None) -> np.ndarray:
    """Elementwise bound for one output (flattened, all examples concatenated).

    Elements past `gradient_elements` (`chosen_elements`) have no gradients; they get the
    largest bound computed for this output.
    """
    b = _bounds_computed(quantization, okey, ref, sens, dyn_quantized, input_scales, output_scale)
    missing = np.isnan(b)
    if missing.any() and (~missing).any():
        b[missing] = b[~missing].max()
    return b


def _bounds_computed(quantization: str, okey: str, ref: np.ndarray, sens: _Sensitivity, dyn_quantized: bool,
                     input_scales: Mapping[str, float], output_scale: float | None) -> np.ndarray:
    if ref.dtype.kind not in "f":
        return np.zeros(ref.size)
    rel, ab = sens.rel[okey], sens.abs[okey]
    # A NaN reference element has no ULP: its bound is 0 (only a NaN in LiteRT matches it).
    # The elementwise term is 4 ULP of the element or of the output's largest
    # magnitude, whichever is larger: exp(x - max) in a softmax carries the
    # absolute rounding of its argument (≈ u·|x - max|) as a *relative* error,
    # so a 1e-33 probability can be ~50 of its own ULPs off while being exact
    # at the scale of the tensor (measured: 6.6e-39 on a 1e-33 element).
    finite = np.abs(ref[np.isfinite(ref)])
    scale = _ulp32(np.array([finite.max()]))[0] if finite.size else 0.0
    float_b = rel @ (2.0 * _gamma(sens.fan_in)) + ELEMENTWISE_ULPS * np.maximum(
        np.nan_to_num(_ulp32(ref)), scale)
    if quantization == "none":
        return float_b
    if quantization == "float16":
        return float_b + FLOAT16_STEP * rel.sum(axis=1)
    weight_term = ab @ (np.where(sens.quantizable, sens.step, 0.0) / 2.0)
    if quantization == "dynamic":
        return float_b + (2.0 * weight_term if dyn_quantized else 0.0)
    # int8: weights, input quantization, intermediate requantization, final rounding.
    input_term = np.zeros(ref.size)
    for name, s in input_scales.items():
        if name in sens.inputs.get(okey, {}):
            input_term = input_term + sens.inputs[okey][name] * (s / 2.0)
    # At least one output step: TFLite's int8 kernels (softmax in particular)
    # routinely land one step away from the correctly rounded value.
    return np.maximum(float_b + 2.0 * (weight_term + input_term) + (output_scale or 0.0) / 2.0,
                      output_scale or 0.0)


def bound_explanation(quantization: str, dyn_quantized: bool, outputs: Mapping[str, Any]) -> str:
    float_why = ("XNNPACK and the converter's fusions (BatchNorm folded into weights, bias and activation "
                 "fused) reorder float32 sums; a length-K sum in another order is off by at most 2·γ_K "
                 "relative weight error (Higham §3.1), propagated to the output with TF's gradients "
                 f"(Σ 2γ_K·|∂y/∂w|·|w|) plus {ELEMENTWISE_ULPS} ULP for exp/tanh kernels")
    if quantization == "none":
        return float_why
    if quantization == "float16":
        return ("weights are stored as float16 (relative step 2^-11) and dequantized to float32: "
                "Σ 2^-11·|∂y/∂w|·|w| to first order, plus the float bound")
    if quantization == "dynamic":
        if not dyn_quantized:
            return (f"no weight tensor has ≥ {MIN_WEIGHT_ELEMENTS} elements, so none was quantized and the "
                    f"float bound applies: {float_why}")
        return ("int8 weights with step s = max|w|/127 move each weight by ≤ s/2: Σ (s/2)·|∂y/∂w| to first "
                "order; the hybrid kernels also quantize activations to int8 at run time, which we estimate "
                "as a second term of the same size (×2, an estimate, not a proof), plus the float bound")
    steps = [f"{o.name} {o.bound / o.step:.1f}" for o in outputs.values() if o.step]
    in_steps = f"; in output steps: {', '.join(steps)}" if steps else ""
    return ("full-integer: half an output step for the final rounding, plus the first-order effect of the "
            "weight steps and of the input quantization step, doubled to estimate the requantization of "
            f"intermediate tensors (an estimate, not a proof){in_steps}")
