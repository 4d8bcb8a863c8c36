"""Fixes for a retrace of a tf.function that Keras made (``one_step_on_data``, ``multi_step_on_iterator``).

``model.predict``/``fit``/``evaluate`` trace a step function that Keras builds
inside ``make_predict_function`` (and friends) with ``reduce_retracing=True``.
A user of ``predict`` has no place to give it an input_signature, so tflab
never offers one on it. What the user can change is their own call:

* nothing: Keras' tf.function relaxes the dims that vary (the batch) to None at
  the second size, so a further size adds no trace (measured: one more call
  of another size is traced on a fresh copy);
* one batch size for every call (pad the last batch, drop the padded rows);
* ``steps_per_execution`` (fit/evaluate), or calling the model through the
  user's own ``tf.function(model, input_signature=[...])``, traced on the
  recorded shapes when the model can be reached from the step function.
"""

from __future__ import annotations

from typing import Any, Sequence

from tflab import fix as fx
from tflab.retrace.bench import Bench, Recorded, SignatureError, history_signature, measured_fix, spec_text
from tflab.retrace.nodes import Node

__all__ = ["keras_owned", "keras_plan"]


def keras_owned(body: Any) -> str | None:
    """The Keras module that made ``body`` (``keras.src.backend.tensorflow.trainer``), or None for the user's own."""
    from tflab.retrace.sideeffects import user_function

    fn = user_function(body) if body is not None else None
    mod = getattr(fn, "__module__", None) or ""
    return mod if mod.split(".")[0] in ("keras", "tf_keras") else None


def _model_of(body: Any) -> Any:
    from tflab.retrace.sideeffects import user_function

    fn = user_function(body)
    for name, cell in zip(getattr(getattr(fn, "__code__", None), "co_freevars", ()), fn.__closure__ or ()):
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if name == "self" and callable(v) and hasattr(v, "inputs"):
            return v
    return None


def _tensors(nodes: Any) -> list[Node]:
    out: list[Node] = []

    def walk(n: Node) -> None:
        if n.kind == "tensor" and n.shape:
            out.append(n)
        for _, c in n.children:
            walk(c)
    for n in nodes.values():
        walk(n)
    return out


def _varying(calls: Sequence[Recorded]) -> dict[int, list[int]]:
    """tensor index -> the dims whose size differs between the calls (same ranks only)."""
    per = [_tensors(c.nodes) for c in calls]
    out: dict[int, list[int]] = {}
    if not per or len({len(p) for p in per}) != 1:
        return out
    for i, first in enumerate(per[0]):
        shapes = [p[i].shape for p in per]
        if len({len(s) for s in shapes}) != 1:
            continue
        dims = [d for d in range(len(first.shape)) if len({s[d] for s in shapes}) > 1]
        if dims:
            out[i] = dims
    return out


def _sized(nodes: Any, varying: dict[int, list[int]], size: Any) -> Any:
    """The nodes with every varying dim set by ``size(tensor index, dim, its size)``."""
    counter = iter(range(10 ** 6))

    def walk(n: Node) -> Node:
        if n.kind == "tensor" and n.shape:
            i = next(counter)
            if i in varying:
                return n._replace(shape=tuple(size(i, d, s) if d in varying[i] else s for d, s in enumerate(n.shape)))
            return n
        if n.children:
            return n._replace(children=tuple((k, walk(c)) for k, c in n.children))
        return n
    return {k: walk(v) for k, v in nodes.items()}


def keras_plan(bench: Bench, calls: Sequence[Recorded], module: str) -> fx.FixPlan:
    """What a Keras user can change at their own call, each run on the recorded call signatures.

    Returns:
        A `tflab.fix.FixPlan` of every candidate (alternatives to choose between):
        "nothing to fix" when a further size of the dims that vary adds no trace,
        one size for every call, the user's own tf.function of the model; never
        an input_signature on Keras' function.
    """
    where = f"this tf.function is made inside Keras ({module}), not by your code: it takes no input_signature"
    varying = _varying(calls)
    tried: list[fx.Fix] = []
    if calls and varying:
        largest = {(i, d): max(s for c in calls for s in [_tensors(c.nodes)[i].shape[d]] if s is not None)
                   for i, dims in varying.items() for d in dims}
        first = _tensors(calls[0].nodes)
        last = calls[-1]
        one_more = list(calls) + [Recorded(last.trace + 1000, 0, _sized(last.nodes, varying,
                                                                        lambda i, d, s: largest[(i, d)] + 1))]
        batch_only = all(dims == [0] for dims in varying.values())
        what = "batch dim" if batch_only else "dims that vary"
        tried.append(measured_fix(
            "none", "", f"nothing to fix: {where}; Keras makes it with reduce_retracing=True, so TF relaxed the "
            f"{what} to None and a further size reuses that trace", bench, "keras:none", one_more,
            reduce_retracing=True, values=False,
            how=f"re-traced a fresh tf.function(..., reduce_retracing=True) of Keras' function on "
                f"{bench.your_calls()} and one more, each varying dim one larger than any you passed",
            goal=lambda o: o.traces <= bench.traces,
            summary=lambda o: f"one more call of a new size adds no trace ({o.traces} in all, as yours)"
            if o.traces <= bench.traces else f"one more call of a new size traces again ({o.traces} traces)"))
        sizes = sorted({first[i].shape[d] for i, dims in varying.items() for d in dims})
        change = (f"batch_size={sizes[0]} for every call; pad the last batch to {sizes[0]} rows and drop the "
                  "padded rows from the output" if batch_only and len(sizes) == 1 else
                  "pad every call to the sizes of your first call (" + ", ".join(
                      f"dim {d} to {first[i].shape[d]}" for i, dims in varying.items() for d in dims) + ")")
        tried.append(measured_fix(
            "code", change, "call it with one size", bench, f"keras:one:{sizes}", calls,
            transform=lambda c: _sized(c.nodes, varying, lambda i, d, s: first[i].shape[d]), values=False,
            reduce_retracing=True, how="re-traced a fresh copy of Keras' function on your calls, each padded so",
            goal=lambda o: o.traces == 1, summary=lambda o: f"{o.traces} trace{'s' * (o.traces != 1)} for "
            f"{bench.your_calls()}, instead of {bench.traces}"))
    model = _model_of(bench.body)
    if model is not None and calls:
        tried.append(_own_function(model, calls, bench))
    tried.append(fx.unchecked("option", "steps_per_execution=N in model.compile(...)",
                              "for fit/evaluate: run N batches per call of Keras' function",
                              "it changes your compile() call; tflab does not re-run your training"))
    chosen = next((f for f in tried if f.checked), None)
    return fx.FixPlan(chosen, tuple(tried)) if chosen is not None else fx.first_working(tried)


def _own_function(model: Any, calls: Sequence[Recorded], bench: Bench) -> fx.Fix:
    """``tf.function(model, input_signature=[...])`` traced on the recorded input shapes."""
    import tensorflow as tf

    data = [c.nodes.get("data") for c in calls]
    inputs = []
    for d in data:
        n = d
        while n is not None and n.kind == "seq" and n.children:
            n = n.children[0][1]
        inputs.append({"x": n} if n is not None and n.kind == "tensor" else None)
    if not all(inputs):
        return fx.unchecked("code", "", "call the model through your own tf.function(model, input_signature=...)",
                            "the model's input is not one tensor here")
    try:
        sig = history_signature(inputs)
    except SignatureError as e:
        return fx.unchecked("code", "", "call the model through your own tf.function", str(e))
    text = f"step = tf.function(model, input_signature={spec_text(sig)}); step(x) instead of model.predict(x)"

    def check() -> tuple[bool, str, dict]:
        f = tf.function(model, input_signature=sig)
        for i in inputs:
            f.get_concrete_function(tf.TensorSpec(i["x"].shape, tf.as_dtype(i["x"].dtype)))
        n = int(f.experimental_get_tracing_count())
        return n == 1, f"{n} trace{'s' * (n != 1)} for {bench.your_calls()}; {fx.VALUES_NOT_KEPT}", {"traces": n}

    return fx.attempt("code", text, "call the model through your own tf.function", check,
                      how="traced tf.function(model, input_signature=...) on the recorded input shapes")
