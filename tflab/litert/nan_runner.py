"""Lab step 8, NaN origin: one signature rerun op by op with LiteRT's builtin kernels.

`run_per_op` runs a signature with ``experimental_preserve_all_tensors=True``
and the builtin kernels (XNNPACK fuses ops and keeps no intermediates) and
returns every tensor it computed; `nonfinite_mask` and `count_nonfinite` count
NaN and ±inf, where the builtin kernels' clamp to ±FLT_MAX counts as an inf,
and `describe_values` says what a tensor holds. `tflab.litert.nan` walks the
ops on these values.
"""

from __future__ import annotations

import re
import warnings
from typing import Mapping

import numpy as np

from tflab.litert.flatbuffer_notes import Graph, read_graphs


# LiteRT's builtin float kernels clamp a fused activation of NONE to
# [-FLT_MAX, FLT_MAX] (CalculateActivationRange in tflite/kernels/kernel_util.h),
# so where TF and XNNPACK give ±inf (x / 0) they give ±3.4028235e38: in the
# per-op rerun that value counts as an infinity.
_FLT_MAX = float(np.finfo(np.float32).max)


def nonfinite_mask(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind != "f":
        return np.zeros(a.shape, dtype=bool)
    bad = ~np.isfinite(a)
    return bad | (np.abs(a) >= _FLT_MAX) if a.dtype == np.float32 else bad


def count_nonfinite(a: np.ndarray) -> int:
    return int(nonfinite_mask(a).sum())


def as_fed(graph: Graph, feed: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The feed as LiteRT takes it (a float example quantized for an int8 input), and the inputs
    whose NaN/inf that quantization turned into integers (name → count)."""
    fed, swallowed = {}, {}
    for name, a in feed.items():
        a = np.asarray(a)
        t = graph.feeds.get(name)
        if t is not None and graph.dtypes[t] in ("int8", "uint8", "int16") and graph.scales[t] and a.dtype.kind == "f":
            info = np.iinfo(np.dtype(graph.dtypes[t]))
            bad = int((~np.isfinite(a)).sum())
            if bad:
                swallowed[name] = bad
            with np.errstate(invalid="ignore"):
                q = np.round(np.nan_to_num(a, nan=0.0) / graph.scales[t][0] + graph.zero_points[t][0])
            a = np.clip(q, info.min, info.max).astype(info.dtype)
        fed[name] = a
    return fed, swallowed


def run_per_op(model: bytes, key: str, feed: Mapping[str, np.ndarray]):
    """Runs signature ``key`` once with LiteRT's builtin kernels, keeping every tensor.

    Args:
        model: flatbuffer bytes.
        key: signature key.
        feed: ``{input name: array}``; a float array for an int8 input is quantized
            with that input's scale and zero point.

    Returns:
        ``(graph, values, failed)``: the `Graph` of that signature, ``{tensor index:
        array}`` for every tensor LiteRT could return, and ``(op index, message)``
        when an op failed to invoke (LiteRT's "Node number N (OP) failed to
        invoke"), else None.
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from tflab._tf.lite import signature_subgraph

    graphs = read_graphs(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging": that is what this is
        interp = Interpreter(model_content=model, experimental_preserve_all_tensors=True,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    runner = interp.get_signature_runner(key)
    sg = signature_subgraph(runner)
    graph = graphs[sg]
    failed = None
    try:
        runner(**as_fed(graph, feed)[0])
    except (RuntimeError, ValueError) as e:
        found = re.search(r"Node number (\d+) \((\w+)\) failed to invoke", str(e))
        failed = (int(found.group(1)) if found else -1, str(e).strip().splitlines()[0][:200])
    values: dict[int, np.ndarray] = {}
    for op in graph.ops:
        for t in op.inputs + op.outputs:
            if t < 0 or t in values or graph.dtypes[t] in ("resource", "variant", "string"):
                continue
            try:
                values[t] = np.array(interp.get_tensor(t, sg))
            except (ValueError, RuntimeError):
                pass
    for t in graph.inputs:
        if t not in values:
            try:
                values[t] = np.array(interp.get_tensor(t, sg))
            except (ValueError, RuntimeError):
                pass
    return graph, values, failed


def describe_values(values: np.ndarray) -> str:
    a = values.astype(np.float64).ravel()
    text = f"{int(np.isnan(a).sum())} NaN, {int(np.isposinf(a).sum())} +inf, {int(np.isneginf(a).sum())} -inf"
    clamped = int((np.isfinite(a) & (np.abs(a) >= _FLT_MAX)).sum()) if values.dtype == np.float32 else 0
    return text + (f", {clamped} ±3.4e38 (an inf the builtin kernel clamped to the float32 range)"
                   if clamped else "")
