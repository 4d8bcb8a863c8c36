"""Distances from eager and findings for `tflab.modes`: each array computed once.

For every mode and tensor, the element-wise ULP distance (`tflab._graph.numeric.ulp_distance`)
and absolute difference are computed once (`PairDistances`) and shared by the
maxima each `ModeResult` reports, the random-stream split, the findings (their two
worst elements) and the ill-conditioning note.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tflab._graph.analysis import RANDOM_OPS, STATEFUL_RANDOM_OPS, as_tensor
from tflab.modes.defaults import MODES
from tflab.modes.records import Distance, fmt_num
from tflab._graph.numeric import ulp_distance


def _abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fa, fb = np.asarray(a).astype(np.complex128 if np.iscomplexobj(a) else np.float64), \
        np.asarray(b).astype(np.complex128 if np.iscomplexobj(b) else np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(fa - fb)
    nan_a, nan_b = np.isnan(fa), np.isnan(fb)
    d = np.where(nan_a & nan_b, 0.0, d)
    d = np.where(nan_a ^ nan_b, np.inf, d)
    # inf - inf of one sign is nan; equal infinities agree.
    return np.where(np.isnan(d), np.where(fa == fb, 0.0, np.inf), d)


class PairDistances:
    """ULP and |diff| arrays per (mode, tensor name), computed once and shared by the
    maxima (`distances`), the findings and the condition note."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}

    def of(self, mode: str, name: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = (mode, name)
        if key not in self._memo:
            self._memo[key] = (ulp_distance(a, b), _abs_diff(a, b))
        return self._memo[key]


def _pairs(reference, outputs, grad_map, output_names):
    ref_out, ref_grads = reference
    for name, a, b in zip(output_names, ref_out, outputs):
        yield "outputs", name, a, b
    for name, a in ref_grads.items():
        yield "gradients", name, a, grad_map.get(name)


def distances(reference, outputs, grad_map, output_names, atol, skip=frozenset(), pairs=None, mode=""):
    """Max |diff|, max ULP, per-tensor ULP and max ULP above atol; tensors named
    in ``skip`` (random streams) are left out of all but the per-tensor numbers.
    ``pairs`` (a `PairDistances`) holds each tensor's arrays, computed once per ``mode``."""
    pairs = pairs if pairs is not None else PairDistances()
    abs_max = {"outputs": 0.0, "gradients": 0.0}
    ulp_max = {"outputs": 0.0, "gradients": 0.0}
    sig_max = {"outputs": 0.0, "gradients": 0.0}
    per: dict[str, float] = {}
    for group, name, a, b in _pairs(reference, outputs, grad_map, output_names):
        if name in skip:
            continue
        if a is None or b is None:
            if (a is None) != (b is None):
                per[name] = math.inf
                abs_max[group] = ulp_max[group] = sig_max[group] = math.inf
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            per[name] = math.inf
            abs_max[group] = ulp_max[group] = sig_max[group] = math.inf
            continue
        if a.dtype.kind not in "fciub" and a.dtype.name not in ("bfloat16",):
            # strings and objects: equal or not
            same = bool(np.all(a == b))
            per[name] = 0.0 if same else math.inf
            continue
        ulps, diffs = pairs.of(mode, name, a, b)
        u = float(ulps.max(initial=0.0))
        d = float(diffs.max(initial=0.0))
        with np.errstate(invalid="ignore"):
            big = (np.abs(a) > atol) | (np.abs(b) > atol) | np.isnan(a) | np.isnan(b)
        per[name] = u
        ulp_max[group] = max(ulp_max[group], u)
        sig_max[group] = max(sig_max[group], float(np.where(big, ulps, 0.0).max(initial=0.0)))
        abs_max[group] = max(abs_max[group], d)
    return (Distance(abs_max["outputs"], abs_max["gradients"]),
            Distance(_int_if_whole(ulp_max["outputs"]), _int_if_whole(ulp_max["gradients"])), per,
            Distance(_int_if_whole(sig_max["outputs"]), _int_if_whole(sig_max["gradients"])))


def _int_if_whole(x: float):
    return int(x) if math.isfinite(x) else x


def with_conditioning(findings: list[str], python_fn, sources, rebuild, results, reference,
                      output_names, ulp_bound: int, atol: float, restore, pairs=None) -> list[str]:
    """Adds a condition note to an output finding whose worst element is ill-conditioned.

    The function is run eagerly once more with every floating input moved by one
    ULP (``np.nextafter`` toward +inf). Where that moves eager's own output element
    by at least the mode's difference there, the difference is inside what one
    rounding of the input already does: the function is ill-conditioned at that
    point (tensorflow/tensorflow#58752: ``tan`` of 3.3e23, where one ULP of the
    argument spans millions of periods), and no mode can be expected to agree.
    """
    import tensorflow as tf

    pairs = pairs if pairs is not None else PairDistances()
    nudged = []
    for t in sources:
        a = np.asarray(t.numpy()) if hasattr(t, "numpy") else np.asarray(t)
        if a.dtype.kind == "f":
            a = np.nextafter(a, np.asarray(np.inf, a.dtype))
            nudged.append(tf.constant(a, dtype=t.dtype))
        else:
            nudged.append(t)
    try:
        a, k = rebuild(nudged)
        moved = [None if o is None else np.asarray(o) for o in
                 tf.nest.flatten(tf.nest.map_structure(as_tensor, python_fn(*a, **k)))]
    except Exception:  # the nudged inputs fail (a domain edge): no note
        return findings
    finally:
        restore()
    ref_out = list(reference[0])
    out = list(findings)
    for mode in MODES[1:]:
        r = results.get(mode)
        if r is None or r.error:
            continue
        for k_, (name, a0, b0) in enumerate(zip(output_names, ref_out, r.outputs)):
            m1 = moved[k_] if k_ < len(moved) else None
            if a0 is None or b0 is None or m1 is None or a0.shape != b0.shape or a0.shape != m1.shape \
                    or a0.dtype.kind != "f" or name in r.random_streams:
                continue
            u, d = pairs.of(mode, name, a0, b0)
            bad = (u > ulp_bound) & (d > atol)
            if not bad.any():
                continue
            i = int(np.argmax(np.where(bad, d, -1.0)))
            step = float(np.abs(m1.astype(np.float64).flat[i] - a0.astype(np.float64).flat[i]))
            if not (np.isfinite(step) and step >= float(d.flat[i])):
                continue
            prefix = f"{mode}: "
            for j, line in enumerate(out):
                if line.startswith(prefix) and f" of {name} differ" in line:
                    out[j] = (line + f"; ill-conditioned there: moving the inputs by one ULP moves eager's "
                              f"{name} at flat index {i} by {step:.3g}, at least the {mode} difference "
                              f"{float(d.flat[i]):.3g}, so the difference is within one rounding of the "
                              f"input (a large condition number: e.g. tan of a huge argument, where one ULP "
                              f"spans many periods)")
    return out


def mode_findings(results, reference, ulp_bound: int, atol: float, output_names, pairs=None) -> list[str]:
    """One line per mode that failed, and per tensor beyond both bounds (its two worst elements)."""
    pairs = pairs if pairs is not None else PairDistances()
    out = []
    for mode in MODES[1:]:
        r = results.get(mode)
        if r is None:
            continue
        if r.error:
            out.append(f"{mode} did not run: {r.error}")
            continue
        for group, name, a, b in _pairs(reference, r.outputs, r.gradients, output_names):
            if name in r.random_streams:  # not arithmetic: reported in the notes
                continue
            if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
                if a is not None or b is not None:
                    out.append(f"{mode}: {name} does not match eager in presence, shape or dtype")
                continue
            if a.dtype.kind not in "fc" and a.dtype.name != "bfloat16":
                if r.ulp_by_tensor.get(name, 0) > 0:
                    out.append(f"{mode}: {name} differs from eager (non-float values)")
                continue
            u, d = pairs.of(mode, name, a, b)
            bad = (u > ulp_bound) & (d > atol)
            if bad.any():
                # Two worsts, each labelled: the element with the largest |diff| and
                # the one with the largest ULP distance (near zero, a small |diff|
                # is many ULP), among the elements beyond both bounds.
                i = int(np.argmax(np.where(bad, d, -1.0)))
                j = int(np.argmax(np.where(bad, u, -1.0)))
                by_diff = (f"{float(d.flat[i]):.3g} ({fmt_num(float(u.flat[i]))} ULP) at flat index {i}")
                worst = (f"largest |diff| and largest ULP: {by_diff}" if u.flat[j] == u.flat[i] else
                         f"largest |diff| {by_diff}; largest ULP {fmt_num(float(u.flat[j]))} "
                         f"(|diff| {float(d.flat[j]):.3g}) at flat index {j}")
                out.append(f"{mode}: {int(bad.sum())} element(s) of {name} differ from eager by more "
                           f"than {ulp_bound} ULP and {atol:g}; {worst}")
    return out


def _noise_fix():
    from tflab import fix as fx

    return fx.unchecked("code", "", "to compare the arithmetic, pass the noise in as an argument: draw it (or "
                        "Dropout's mask) outside the function and give it to every mode",
                        "the random op is inside your function; tflab cannot move it out for you")


def separate_random_streams(results, reference, random_ops, output_names, atol, pairs=None) -> list[str]:
    """Moves tensors that differ because a mode draws other random numbers out of
    that mode's distances (they stay in ``ulp_by_tensor``) and says so, one note each.

    Under XLA every random op is compiled by XLA's own RNG lowering; in graph mode
    stateless ops run eager's kernel on eager's seed (same numbers), stateful ones
    a kernel seeded apart from eager's."""
    notes = []
    for mode in MODES[1:]:
        r = results.get(mode)
        if r is None or r.error:
            continue
        kinds = RANDOM_OPS if mode == "xla" else STATEFUL_RANDOM_OPS
        streams = {n: [o for o in ops if o in kinds] for n, ops in random_ops.items()}
        streams = {n: ops for n, ops in streams.items() if ops and r.ulp_by_tensor.get(n, 0) > 0}
        if not streams:
            continue
        abs_d, ulp_d, _, ulp_sig = distances(reference, list(r.outputs), r.gradients, output_names, atol,
                                             skip=set(streams), pairs=pairs, mode=mode)
        results[mode] = dataclasses.replace(r, abs_error=abs_d, ulp=ulp_d, ulp_above_atol=ulp_sig,
                                            random_streams=tuple(streams))
        why = ("XLA compiles random ops with its own RNG code (tf2xla), so it draws other numbers than "
               "TF's kernels" if mode == "xla" else
               "stateful random ops in a graph are seeded apart from the eager kernels, so they draw "
               "other numbers")
        where = "under XLA" if mode == "xla" else "in graph mode"
        for n, ops in streams.items():
            notes.append(f"{mode}: {n} is a different random stream {where} (not arithmetic): it depends on "
                         f"{', '.join(ops)}; {why}. Left out of the ULP columns and findings "
                         f"({fmt_num(r.ulp_by_tensor[n])} ULP). " + _noise_fix().line())
    return notes


