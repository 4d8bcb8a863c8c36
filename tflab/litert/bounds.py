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

`_sensitivity` computes the gradients (cached per SavedModel and example
set), `_bounds` the elementwise bound of one output, `_explanation` the
sentence the report prints.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
from typing import Any, Mapping

import numpy as np

from tflab._usercode import run_signature
from tflab.litert.conversion import _call_target
from tflab.examples import Examples, feed_for
from tflab.saved_model import load_saved_model, signature_inputs

UNIT_ROUNDOFF = 2.0 ** -24  # float32
FLOAT16_STEP = 2.0 ** -11  # relative rounding error of float16 (round to nearest)
MIN_WEIGHT_ELEMENTS = 1024  # dynamic-range quantization leaves smaller weights in float
ELEMENTWISE_ULPS = 4
# Bounds need one backward pass per output element; beyond this many per
# output, the remaining elements get the largest computed bound (an estimate).
MAX_GRADIENT_ELEMENTS = 1024


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
    for b in batches:
        for k in sorted(b):
            h.update(k.encode())
            h.update(np.ascontiguousarray(b[k]).tobytes() if b[k].dtype.kind not in "OU" else repr(b[k]).encode())
    return h.hexdigest()


def _sensitivity(saved_model_dir: str, loaded, batches) -> _Sensitivity:
    """Gradients of every output element of every signature, keyed ``"<signature>/<output>"``."""
    import tensorflow as tf

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
    values = [v.numpy() for v in variables]
    fan_in = np.array([max(1, a.size // a.shape[-1]) if a.ndim >= 2 and a.shape[-1] else 1 for a in values],
                      dtype=np.float64)
    quantizable = np.array([a.ndim >= 2 and a.size >= MIN_WEIGHT_ELEMENTS for a in values], dtype=bool)
    step = np.array([float(np.abs(a).max()) / 127.0 if a.size else 0.0 for a in values])
    abs_vals = [np.abs(a).astype(np.float64) for a in values]
    rel: dict[str, list] = collections.defaultdict(list)
    absl: dict[str, list] = collections.defaultdict(list)
    ins: dict[str, dict[str, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
    computed: collections.Counter = collections.Counter()
    done: dict[str, str] = {}  # call target -> signature key already differentiated
    for sig_key in keys:
        fn = loaded.signatures[sig_key]
        target = _call_target(fn)
        if target is not None and target in done:
            # Same FuncGraph behind another key: same gradients, copy them.
            for out_name in fn.structured_outputs:
                src, dst = f"{done[target]}/{out_name}", f"{sig_key}/{out_name}"
                rel[dst], absl[dst], ins[dst] = rel[src], absl[src], ins[src]
            continue
        if target is not None:
            done[target] = sig_key
        names = signature_inputs(fn)
        for batch in batches:
            # NaN inputs would make every gradient that mixes rows NaN; rows with NaN
            # have NaN outputs (compared by position, no bound needed), so their
            # gradients are taken at 0 and the other rows keep theirs.
            feed = {n: tf.constant(np.nan_to_num(a, nan=0.0) if a.dtype.kind == "f" else a)
                    for n, a in feed_for(batch, names).items()}
            float_inputs = {n: t for n, t in feed.items() if t.dtype.is_floating}
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(variables)
                tape.watch(list(float_inputs.values()))
                outs = run_signature(fn, sig_key, feed)
            for out_name, y in outs.items():
                okey = f"{sig_key}/{out_name}"
                n = int(np.prod(y.shape))
                if not y.dtype.is_floating:
                    rel[okey].append(np.zeros((n, len(variables))))
                    absl[okey].append(np.zeros((n, len(variables))))
                    for name in float_inputs:
                        ins[okey][name].append(np.zeros(n))
                    continue
                r = np.zeros((n, len(variables)))
                a_ = np.zeros((n, len(variables)))
                per_in = {name: np.zeros(n) for name in float_inputs}
                for i in range(n):
                    if computed[okey] >= MAX_GRADIENT_ELEMENTS:
                        # One backward pass per element: cap the cost for large outputs.
                        r[i], a_[i] = np.nan, np.nan
                        for name in float_inputs:
                            per_in[name][i] = np.nan
                        continue
                    computed[okey] += 1
                    seed = tf.reshape(tf.one_hot(i, n, dtype=y.dtype), y.shape)
                    grads = tape.gradient(y, variables + list(float_inputs.values()), output_gradients=seed,
                                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
                    for j in range(len(variables)):
                        # NaN gradients (a NaN output) count as 0: NaN marks only elements not computed.
                        g = np.nan_to_num(np.abs(tf.convert_to_tensor(grads[j]).numpy().astype(np.float64)))
                        r[i, j] = float((g * abs_vals[j]).sum())
                        a_[i, j] = float(g.sum())
                    for name, g in zip(float_inputs, grads[len(variables):]):
                        per_in[name][i] = float(np.nan_to_num(np.abs(g.numpy())).sum())
                rel[okey].append(r)
                absl[okey].append(a_)
                for name in float_inputs:
                    ins[okey][name].append(per_in[name])
            del tape
    sens = _Sensitivity(
        rel={k: np.concatenate(v) for k, v in rel.items()},
        abs={k: np.concatenate(v) for k, v in absl.items()},
        inputs={k: {n: np.concatenate(v) for n, v in d.items()} for k, d in ins.items()},
        fan_in=fan_in, quantizable=quantizable, step=step)
    if len(_SENSITIVITY_CACHE) >= 8:
        _SENSITIVITY_CACHE.clear()
    _SENSITIVITY_CACHE[key] = sens
    return sens


def prepare_bounds(saved_model_dir: str | os.PathLike, examples: Examples | Any) -> None:
    """Computes the gradients the bounds need, ahead of `check_tflite` (which then finds them cached).

    `tflab.export` calls it while the converter works in its worker process.
    """
    saved_model_dir = os.fspath(saved_model_dir)
    _sensitivity(saved_model_dir, load_saved_model(saved_model_dir), Examples.of(examples))


def _gamma(k: np.ndarray) -> np.ndarray:
    ku = k * UNIT_ROUNDOFF
    return ku / (1.0 - ku)


def _ulp32(x: np.ndarray) -> np.ndarray:
    x = np.abs(x.astype(np.float32))
    return np.spacing(np.maximum(x, np.finfo(np.float32).tiny)).astype(np.float64)


def _bounds(quantization: str, okey: str, ref: np.ndarray, sens: _Sensitivity, dyn_quantized: bool,
            input_scales: Mapping[str, float], output_scale: float | None) -> np.ndarray:
    """Elementwise bound for one output (flattened, all examples concatenated).

    Elements beyond `MAX_GRADIENT_ELEMENTS` have no gradients; they get the
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


def _explanation(quantization: str, dyn_quantized: bool, outputs: Mapping[str, Any]) -> str:
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
    steps = [f"{o.name} {o.bound / o.quantization[0]:.1f}" for o in outputs.values() if o.quantization]
    in_steps = f"; in output steps: {', '.join(steps)}" if steps else ""
    return ("full-integer: half an output step for the final rounding, plus the first-order effect of the "
            "weight steps and of the input quantization step, doubled to estimate the requantization of "
            f"intermediate tensors (an estimate, not a proof){in_steps}")
