"""Lab step 8, op domains: which inputs make an op's right answer NaN or ±inf.

One table, `DOMAINS`, for every op whose float result leaves the reals on
part of its input: each rule is a predicate on the op's actual input values
(broadcast as the op broadcasts them) and what the op gives there. The NaN
origin (`tflab.litert.nan`) applies it to whatever op first makes a NaN/inf,
so a new op is one row here, never a branch elsewhere:

=============  ==========================================  ==============
op             inputs outside the domain                   result
=============  ==========================================  ==============
SQRT           x < 0                                       NaN
RSQRT          x < 0; x = 0                                NaN; +inf
LOG            x < 0; x = 0                                NaN; -inf
POW            base < 0 with a non-integer exponent;       NaN; inf
               base = 0 with a negative exponent
DIV            0 / 0; x / 0 (x ≠ 0)                        NaN; ±inf
FLOOR_DIV,     divisor 0                                   NaN/inf
FLOOR_MOD
ACOS, ASIN     abs(x) > 1                                  NaN
ATANH          abs(x) > 1; abs(x) = 1                      NaN; ±inf
=============  ==========================================  ==============

These are IEEE 754 / C99 Annex F results of ``sqrt``, ``log``, ``pow`` and
division, which TF's kernels (Eigen) and LiteRT's float kernels both follow.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import numpy as np

__all__ = ["DOMAINS", "DomainRule", "DomainViolation", "dequantized", "domain_violation"]


@dataclasses.dataclass(frozen=True)
class DomainRule:
    """One part of an op's input set where its float result is NaN or ±inf.

    Attributes:
        label: the inputs, e.g. ``"x < 0"``.
        result: what the op gives there (``"NaN"``, ``"-inf"``).
        what: the phrase after the op's name: ``"of a negative number is NaN"``.
        test: the op's float inputs (float64, broadcast) → boolean mask of the elements in this part.
        cause: the `tflab.litert.nan.CAUSES` label.
    """

    label: str
    result: str
    what: str
    test: Callable[[Sequence[np.ndarray]], np.ndarray]
    cause: str = "outside_domain"


def _non_integer(e: np.ndarray) -> np.ndarray:
    return np.isfinite(e) & (e != np.round(e))


_NEG = DomainRule("x < 0", "NaN", "of a negative number is NaN", lambda v: v[0] < 0)
_ZERO_DIV = "guard the divisor (tf.math.divide_no_nan, or add an epsilon)"
_CLAMP = "clamp the input into the op's domain first (tf.maximum(x, eps), or tf.clip_by_value)"

DOMAINS: Mapping[str, tuple[tuple[DomainRule, ...], str]] = {
    "SQRT": ((_NEG,), "clamp the input first (tf.math.sqrt(tf.maximum(x, 0.0)))"),
    "RSQRT": ((_NEG, DomainRule("x = 0", "+inf", "of zero is +inf", lambda v: v[0] == 0)),
              "clamp the input first (tf.math.rsqrt(tf.maximum(x, eps)))"),
    "LOG": ((dataclasses.replace(_NEG, cause="log_of_negative"),
             DomainRule("x = 0", "-inf", "of zero is -inf", lambda v: v[0] == 0, "log_of_zero")),
            "clamp the input first (tf.math.log(tf.maximum(x, eps)) or log1p)"),
    "POW": ((DomainRule("base < 0 with a non-integer exponent", "NaN",
                        "of a negative base to a non-integer power is NaN",
                        lambda v: (v[0] < 0) & _non_integer(v[1])),
             DomainRule("base = 0 with a negative exponent", "inf", "of zero to a negative power is inf",
                        lambda v: (v[0] == 0) & (v[1] < 0))),
            "keep the base non-negative for fractional powers (tf.pow(tf.abs(x), p) * tf.sign(x), or clamp)"),
    "DIV": ((DomainRule("0 / 0", "NaN", "of zero by zero is NaN", lambda v: (v[0] == 0) & (v[1] == 0),
                        "division_by_zero"),
             DomainRule("x / 0", "±inf", "by zero is ±inf", lambda v: (v[0] != 0) & (v[1] == 0),
                        "division_by_zero")), _ZERO_DIV),
    "FLOOR_DIV": ((DomainRule("divisor 0", "NaN/inf", "by zero is NaN/inf", lambda v: v[1] == 0,
                              "division_by_zero"),), _ZERO_DIV),
    "FLOOR_MOD": ((DomainRule("divisor 0", "NaN", "by zero is NaN", lambda v: v[1] == 0, "division_by_zero"),),
                  _ZERO_DIV),
    "ACOS": ((DomainRule("|x| > 1", "NaN", "of |x| > 1 is NaN", lambda v: np.abs(v[0]) > 1),), _CLAMP),
    "ASIN": ((DomainRule("|x| > 1", "NaN", "of |x| > 1 is NaN", lambda v: np.abs(v[0]) > 1),), _CLAMP),
    "ATANH": ((DomainRule("|x| > 1", "NaN", "of |x| > 1 is NaN", lambda v: np.abs(v[0]) > 1),
               DomainRule("|x| = 1", "±inf", "of ±1 is ±inf", lambda v: np.abs(v[0]) == 1)), _CLAMP),
}


@dataclasses.dataclass(frozen=True)
class DomainViolation:
    """An op given inputs outside its domain: the NaN/inf it made is its right answer there.

    Attributes:
        op: the op's builtin name.
        rules: the parts of the domain table the inputs fell in, with their element counts.
        inputs: the op's input tensor names (float inputs only, in order).
        producer: the op that wrote the first input (``"FULLY_CONNECTED #0"``), or "" for a model input.
        negative, zeros: counts of negative and zero values of the first input (measured).
        fix: what to change (not checked: it changes the user's model).
    """

    op: str
    rules: tuple[tuple[DomainRule, int], ...]
    inputs: tuple[str, ...]
    producer: str
    negative: int
    zeros: int
    fix: str
    nans: int = 0
    infs: int = 0

    @property
    def count(self) -> int:
        """Elements outside the domain, over all rules."""
        return sum(n for _, n in self.rules)

    @property
    def cause(self) -> str:
        """The rule the output's NaN/inf counts point to (most NaN → the NaN rule), as a `CAUSES` label."""
        if len(self.rules) == 1:
            return self.rules[0][0].cause
        nan_rules = [r for r, _ in self.rules if r.result == "NaN"]
        other = [r for r, _ in self.rules if r.result != "NaN"]
        pick = nan_rules if (self.nans >= self.infs and nan_rules) or not other else other
        return pick[0].cause

    @property
    def label(self) -> str:
        return "; ".join(f"{n} element(s) with {r.label} → {r.result}" for r, n in self.rules)

    @property
    def result(self) -> str:
        return "/".join(dict.fromkeys(r.result for r, _ in self.rules))

    def why(self, graph, op, made: str) -> str:
        """The measured sentence: input, producer, counts per rule, what the op gives there."""
        by = f" (written by {self.producer})" if self.producer else ""
        if len(self.inputs) == 1:
            what = " and ".join(r.what for r, _ in self.rules)
            return (f"its input {self.inputs[0]!r}{by} has {self.negative} negative value(s) and {self.zeros} "
                    f"zero(s), and {self.op} {what} ({made})")
        names = ", ".join(repr(n) for n in self.inputs)
        if self.op in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
            zeros = self.zeros_divisor
            return (f"its divisor {self.inputs[1]!r} has {zeros} zero(s) ({self.label}), and {self.op} "
                    + " and ".join(r.what for r, _ in self.rules) + f" ({made})")
        return (f"its inputs {names}{by} have {self.label}, and {self.op} "
                + " and ".join(r.what for r, _ in self.rules) + f" ({made})")

    zeros_divisor: int = 0


def dequantized(graph, t: int, a: np.ndarray) -> np.ndarray:
    """A tensor's values as float64, dequantized with its own (per-tensor) scale and zero point."""
    a = np.asarray(a)
    if a.dtype.kind in "iu" and graph.scales[t]:
        return (a.astype(np.float64) - graph.zero_points[t][0]) * graph.scales[t][0]
    return a.astype(np.float64)


def domain_violation(graph, op, values: Mapping[int, np.ndarray]) -> DomainViolation | None:
    """Whether ``op``'s actual inputs fall outside its domain (`DOMAINS`), measured; None otherwise.

    Args:
        graph: the subgraph (`tflab.litert.flatbuffer_notes.Graph`).
        op: one of its ops (`tflab.litert.flatbuffer_notes.Op`).
        values: tensor index → the values the per-op rerun kept.

    Returns:
        A `DomainViolation` with the count per rule, or None when the op is not in the table, an
        input was not kept, or no input element lies outside the domain.
    """
    entry = DOMAINS.get(op.name)
    if entry is None:
        return None
    rules, fix = entry
    ts = [t for t in op.inputs if t >= 0]
    if not ts or any(t not in values for t in ts):
        return None
    try:
        arrays = np.broadcast_arrays(*[dequantized(graph, t, values[t]) for t in ts])
    except ValueError:
        return None
    with np.errstate(invalid="ignore"):
        hits = tuple((r, int(np.sum(r.test(arrays)))) for r in rules)
    hits = tuple(h for h in hits if h[1])
    if not hits:
        return None
    writer = {t: o for o in graph.ops for t in o.outputs}
    src = writer.get(ts[0])
    out = values.get(op.outputs[0]) if op.outputs else None
    out = np.zeros(0) if out is None else np.asarray(out, np.float64)
    x = np.asarray(dequantized(graph, ts[0], values[ts[0]]))
    divisor = np.asarray(dequantized(graph, ts[1], values[ts[1]])) if len(ts) > 1 else np.zeros(0)
    return DomainViolation(op.name, hits, tuple(graph.names[t] for t in ts),
                           f"{src.name} #{src.index}" if src is not None else "", int((x < 0).sum()),
                           int((x == 0).sum()), fix, int(np.isnan(out).sum()), int(np.isinf(out).sum()),
                           zeros_divisor=int((divisor == 0).sum()))
