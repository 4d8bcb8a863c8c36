"""Fits the CPU kernel's exp polynomial: exp(r) ~ 1 + r + r^2 q(r) on |r| <= ln2/2, q of degree 4.

Prints the float32 coefficients kQ2..kQ6 of ``cc/kernels/warp_softmax_cpu.cc`` and the fit's maximum
relative error in exact (float64) arithmetic. Least squares at 4000 Chebyshev nodes, weighted for
relative error on exp(r), then reweighted 30 times towards the minimax error (Lawson's iteration).
``--degree 3`` shows why a degree lower does not do: 1.2e-7 relative (~2 ULP) before float32 rounding.

Usage: ``python custom_ops/cc/bench/fit_exp_polynomial.py [--degree 4]``
"""

from __future__ import annotations

import argparse

import numpy as np


def fit(degree: int = 4, nodes: int = 4000, iterations: int = 30) -> tuple[np.ndarray, float]:
    """Coefficients of q (constant term first, float64) and the max relative error of 1 + r + r^2 q."""
    half = np.log(2.0) / 2
    r = half * np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    target = (np.exp(r) - 1 - r) / r ** 2
    w = r ** 2 / np.exp(r)  # an error in q is r^2 / exp(r) of relative error in exp(r)
    a = np.vstack([r ** j for j in range(degree + 1)]).T
    c = np.linalg.lstsq(a * w[:, None], target * w, rcond=None)[0]
    for _ in range(iterations):
        err = np.abs((a @ c - target) * w)
        w2 = w * np.sqrt(err / err.max() + 1e-3)
        c = np.linalg.lstsq(a * w2[:, None], target * w2, rcond=None)[0]
    rel = np.abs(1 + r + r ** 2 * (a @ c) - np.exp(r)) / np.exp(r)
    return c, float(rel.max())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--degree", type=int, default=4, help="degree of q (the kernel uses 4)")
    args = p.parse_args(argv)
    if args.degree < 1:
        p.error(f"--degree must be >= 1, got {args.degree}")
    c, err = fit(args.degree)
    print(f"max relative error (float64 evaluation): {err:.3g}")
    for j, v in enumerate(c.astype(np.float32), start=2):
        print(f"constexpr float kQ{j} = {v:.10e}f;")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
