"""The root cause of a difference between two runs of one TF graph: the first op over its own bound.

`attribute_runs` takes the op values of the run under test and of the
reference run (`tflab.nonfinite.trace_op_values`: every float op output of
the FuncGraph, forward and backward, from one run each), pairs the ops of the
two runs (by name, then by aligned op type: a mixed policy adds ``Cast`` ops),
judges every op on its own inputs (`tflab.attribution.judge`), and walks the
ops in creation order (a topological order). The first op that is

* over its bound, or made a range event (a finite value became inf; a value
  above its reference's noise floor became 0; a constant the dtype cannot
  hold), **and** whose error shows: it, or an op that reads it, differs from
  the reference run by more than rounding (`judge.significant`), or
* a NaN that the reference gives too on the same finite inputs (``domain``), or
* within its bound, yet its output differs from the reference run by more
  than rounding while its inputs do not (``ill-conditioned``: its condition
  number at this input is measured by perturbing each input element on its
  own, on up to `PERTURBED_ELEMENTS` elements per input, the ones whose
  inherited error is largest; nudging all together keeps ``x - x'`` at 0 and
  would see nothing)

is the cause, named with its class (`tflab.attribution.records.CAUSE_CLASSES`),
the user's line, and what was measured. The ops after it that read its error
(downstream, differing from the reference run) carry it (``carried_by``).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from tflab._graph.analysis import RANDOM_OPS
from tflab.attribution.judge import SOURCES, JudgedOp, inherited, judge_op, noise_mask, significant
from tflab.attribution.records import Attribution, Cause, OpJudgement

__all__ = ["attribute_runs", "attribute_calls", "Attribution", "PERTURBED_ELEMENTS"]

PERTURBED_ELEMENTS = 16
_RELATIVE_NUDGE = 2.0 ** -20


def _where(op) -> str:
    return f"{os.path.basename(op.frame[0])}:{op.frame[1]}" if op.frame else ""


def _pair(test: Sequence, ref: Sequence) -> dict[int, int]:
    """Test op index -> reference op index: same name and type first, then aligned op types."""
    by_name = {(o.name, o.op_type): i for i, o in enumerate(ref)}
    pairs = {i: by_name[(o.name, o.op_type)] for i, o in enumerate(test) if (o.name, o.op_type) in by_name}
    if len(pairs) >= 0.9 * len(test):
        return pairs
    sm = difflib.SequenceMatcher(None, [o.op_type for o in test], [o.op_type for o in ref], autojunk=False)
    aligned = {}
    for a, b, n in sm.get_matching_blocks():
        for k in range(n):
            aligned[a + k] = b + k
    return aligned


def _consumers(ops: Sequence) -> dict[str, list[int]]:
    """op name -> indices of the ops reading one of its outputs."""
    out: dict[str, list[int]] = {}
    for i, o in enumerate(ops):
        for t in o.input_names:
            out.setdefault(t.rsplit(":", 1)[0], []).append(i)
    return out


def _literal_on_line(op, ref_value: float, dtype: str) -> str:
    """The numeric literal on the op's line nearest ``ref_value`` that the dtype cannot hold, as written."""
    import ast
    import linecache

    if not op.frame:
        return ""
    line = linecache.getline(op.frame[0], op.frame[1]).strip()
    try:
        tree = ast.parse(line.rstrip(":") if not line.endswith(":") else line + " pass")
    except SyntaxError:
        return ""
    from tflab.attribution.bounds import np_dtype

    best, dist = "", np.inf
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            v = float(node.value)
            with np.errstate(over="ignore"):
                held = float(np.asarray(v).astype(np_dtype(dtype)))
            if v != 0 and (held == 0 or np.isinf(held)) and np.isfinite(ref_value) and ref_value:
                d = abs(np.log(abs(v)) - np.log(abs(ref_value)))
                if d < dist:
                    best, dist = ast.get_source_segment(line, node) or repr(v), d
    return best


def _fmt(v: float) -> str:
    return "inf" if np.isinf(v) else "NaN" if np.isnan(v) else f"{v:.3g}"


def _range_text(dtype: str) -> tuple[float, float, float]:
    from tflab.precision.float_formats import float_info

    fi = float_info(dtype)
    return float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal)


def _condition(j: JudgedOp, ref_run_op, scale_out) -> tuple[float, int, float]:
    """``(κ, input index, relative error of that input)``: the largest condition number at this input.

    κ_j = |Δout| / |out_ref| ÷ (|δx_j| / |x_j|) for one input element x_j nudged
    alone by δ = 2^-20·|x_j| in the float64 re-evaluation, ``out_ref`` the
    reference run's value of this op (the value it should have had) where it is
    not 0. The elements nudged are, per input, the `PERTURBED_ELEMENTS` whose
    inherited error (against the reference run's input) is largest.
    """
    from tflab.attribution.reeval import Unevaluable, evaluate

    op = j.op
    base = j.reference[0]
    scale = np.maximum(np.abs(scale_out), np.abs(base)).reshape(-1)
    best = (0.0, -1, 0.0)
    for n, a in enumerate(op.inputs):
        if a is None or not (a.dtype.kind == "f" or a.dtype.name == "bfloat16") or np.size(a) == 0:
            continue
        a64 = a.astype(np.float64)
        r_in = ref_run_op.inputs[n] if ref_run_op is not None and n < len(ref_run_op.inputs) else None
        if r_in is not None and np.shape(r_in) == np.shape(a):
            err = np.abs(a64 - r_in.astype(np.float64)).reshape(-1)
            _, rel_in, _ = inherited(a, r_in)
        else:
            err, rel_in = np.zeros(a64.size), 0.0
        picks = np.argsort(-err, kind="stable")[:PERTURBED_ELEMENTS]
        for p in picks:
            x = a64.reshape(-1).copy()
            d = _RELATIVE_NUDGE * (abs(x[p]) or 1.0)
            x[p] += d
            ins = list(op.inputs)
            ins[n] = x.reshape(a.shape)
            try:
                out, _ = evaluate(op.op_type, op.attrs, ins, op.num_outputs)
            except Unevaluable:
                return best
            delta = np.abs(np.asarray(out[0], np.float64) - base).reshape(-1)
            with np.errstate(invalid="ignore", divide="ignore"):
                rel_out = np.where(scale > 0, delta / scale, 0.0)
            kappa = float(np.nanmax(rel_out)) / (d / (abs(x[p] - d) or 1.0)) if rel_out.size else 0.0
            if kappa * max(rel_in or 0.0, 1e-30) > best[0] * max(best[2], 1e-30) or best[1] < 0:
                best = (kappa, n, float(rel_in or 0.0))
    return best


def _producer(ops: Sequence, index_of: dict, op, n: int):
    if n >= len(op.input_names):
        return None
    k = index_of.get(op.input_names[n].rsplit(":", 1)[0])
    return ops[k] if k is not None else None


LOSS_SCOPE = "tflab_loss"


def attribute_runs(test_ops: Sequence, ref_ops: Sequence, function_name: str, runs: str,
                   outputs_finite: bool = True, require_cause: bool = False, seconds0: float = 0.0,
                   higher_ops: Sequence | None = None) -> Attribution:
    """Judges every op of ``test_ops`` and names the cause (see the module docstring).

    Args:
        test_ops: `tflab.nonfinite.OpValue` list of the run under test (creation order).
        ref_ops: the same for the reference run (float32, or float64).
        function_name: for the record.
        runs: ``"float32 vs float16"``.
        outputs_finite: whether the run under test's outputs were all finite (for the detail).
        require_cause: the runs are known to differ: with no cause found, name ``unexplained``.
        higher_ops: the same for a run in a higher precision than the reference (float64),
            or None: where given, reference elements below their own noise floor
            (`tflab.attribution.judge.noise_mask`) are left out of every comparison.

    Returns:
        An `Attribution`.
    """
    t0 = time.perf_counter() - seconds0
    backward = _backward_frames(test_ops)
    pairs = _pair(test_ops, ref_ops)
    index_of = {o.name: i for i, o in enumerate(test_ops)}
    consumers = _consumers(test_ops)
    judged: list[JudgedOp] = []
    unchecked: list[str] = []
    sig_cache: dict[int, bool | None] = {}
    masks: dict[int, Any] = {}
    if higher_ops:
        for a, b in _pair(ref_ops, higher_ops).items():
            if ref_ops[a].outputs and higher_ops[b].outputs:
                masks[a] = noise_mask(ref_ops[a].outputs[0], higher_ops[b].outputs[0])
    in_masks: dict[tuple, Any] = {}

    def in_mask(k: int, n: int):
        ref_op = ref_ops[k]
        if n >= len(ref_op.input_names):
            return None
        key = (k, n)
        if key not in in_masks:
            src = ref_index.get(ref_op.input_names[n].rsplit(":", 1)[0])
            in_masks[key] = masks.get(src) if src is not None else None
        return in_masks[key]

    ref_index = {o.name: i for i, o in enumerate(ref_ops)}

    def sig(i: int) -> bool | None:
        if i not in sig_cache:
            o = test_ops[i]
            k = pairs.get(i)
            if k is None or not o.outputs:
                sig_cache[i] = None
            else:
                dt = o.outputs[0].dtype.name
                sig_cache[i] = significant(o.outputs[0], ref_ops[k].outputs[0], dt, masks.get(k)) \
                    if ref_ops[k].outputs else None
        return sig_cache[i]

    def shows(i: int) -> bool:
        s = sig(i)
        if s:
            return True
        return any(sig(c) for c in consumers.get(test_ops[i].name, ()))

    cause_j: JudgedOp | None = None
    kind = ""
    extra: dict = {}
    for i, op in enumerate(test_ops):
        ref_op = ref_ops[pairs[i]] if i in pairs else None
        j = judge_op(i, op, ref_op)
        if not j.dtype:
            continue
        judged.append(j)
        if j.unchecked:
            unchecked.append(f"{op.op_type} {op.name!r}: {j.unchecked}")
        if cause_j is not None or op.name.startswith(LOSS_SCOPE + "/"):
            continue
        if j.event == "domain":
            cause_j, kind = j, "domain"
        elif j.over_bound and shows(i):
            if j.event.startswith("constant") or (j.event in ("overflow", "underflow")
                                                   and op.input_ops and all(t == "Const" for t in op.input_ops)):
                kind = "constant"
            elif op.op_type in RANDOM_OPS:
                kind = "random"
            else:
                kind = {"overflow": "overflow", "underflow": "underflow"}.get(j.event, "rounding")
            cause_j = j
        elif sig(i) and j.reference is not None and not j.over_bound and op.op_type not in SOURCES and ref_op:
            ins_sig = [significant(a, r, j.dtype, in_mask(pairs[i], n)) if a is not None and r is not None else None
                       for n, (a, r) in enumerate(zip(op.inputs, ref_op.inputs))]
            if not any(ins_sig):
                kappa, n, rel_in = _condition(j, ref_op, ref_op.outputs[0] if np.shape(ref_op.outputs[0]) ==
                                              np.shape(j.reference[0]) else j.reference[0])
                if kappa > 1.0:
                    cause_j, kind = j, "ill-conditioned"
                    extra = {"condition_number": kappa, "input": n, "input_relative_error": rel_in,
                             "upstream": _producer(test_ops, index_of, op, n)}
    judgements = tuple(OpJudgement(j.op.name, j.op.op_type, j.local_error, j.bound,
                                   _inh(j, test_ops, ref_ops, pairs), _where(j.op)) for j in judged)
    cause = None
    if cause_j is not None:
        cause = _cause(cause_j, kind, extra, test_ops, ref_ops, pairs, consumers, function_name, runs,
                       outputs_finite, sig, backward.get(cause_j.op.name, ""))
    elif require_cause:
        cause = Cause(function_name, runs, "unexplained",
                      detail=f"no op of {len(judged)} was over its bound or grew an error past rounding "
                             f"({len(unchecked)} not re-evaluated)",
                      evidence={"unchecked": unchecked[:20]})
    return Attribution(function_name, runs, cause, judgements, tuple(unchecked), len(judged),
                       time.perf_counter() - t0)


GRADIENT_SCOPE = "gradient_tape/"


def _backward_frames(ops: Sequence) -> dict[str, str]:
    """A backward op (``gradient_tape/matmul/MatMul``) gets the line of the forward op it differentiates.

    ``tape.gradient`` creates the backward ops where it is called (tflab's code);
    their name scope repeats the forward op's name, so the longest forward op
    name that prefixes the rest of the name is the op whose line the user wrote.
    """
    forward = {o.name: o for o in ops if not o.name.startswith(GRADIENT_SCOPE)}
    of: dict[str, str] = {}
    for o in ops:
        if not o.name.startswith(GRADIENT_SCOPE):
            continue
        parts = o.name[len(GRADIENT_SCOPE):].split("/")
        for n in range(len(parts), 0, -1):
            f = forward.get("/".join(parts[:n]))
            if f is not None:
                o.frame = f.frame
                of[o.name] = f"{f.op_type} {f.name!r}"
                break
    return of


def _inh(j: JudgedOp, test_ops, ref_ops, pairs) -> float | None:
    k = pairs.get(j.index)
    if k is None or not ref_ops[k].outputs:
        return None
    return inherited(j.op.outputs[0], ref_ops[k].outputs[0])[0]


def _cause(j: JudgedOp, kind: str, extra: dict, test_ops, ref_ops, pairs, consumers, function_name, runs,
           outputs_finite, sig, backward_of: str = "") -> Cause:
    op = j.op
    dt = j.dtype
    mx, normal, sub = _range_text(dt) if dt in ("float16", "bfloat16", "float32", "float64") else (0, 0, 0)
    ratio = (j.local_error / j.bound) if j.local_error is not None and j.bound else None
    evidence: dict[str, Any] = {"dtype": dt, "local_error": j.local_error, "bound": j.bound,
                                "event_elements": j.event_count, "elements": j.event_of or int(np.size(op.outputs[0])),
                                "terms_per_output": j.k, "frame": list(op.frame) if op.frame else []}
    if kind == "constant":
        lit = _literal_on_line(op, j.reference_max, dt) if op.op_type in SOURCES else ""
        if not lit and op.inputs:
            prod = _producer(test_ops, {o.name: i for i, o in enumerate(test_ops)}, op, 0)
            lit = _literal_on_line(prod, j.reference_max, dt) if prod is not None else ""
        became = "inf" if j.event in ("constant-inf", "overflow") else "0"
        why = (f"beyond {dt}'s max {mx:.6g}" if became == "inf" else
               f"below half of {dt}'s smallest subnormal {sub:.3g}, so it rounds to 0")
        detail = (f"the constant {lit or _fmt(j.reference_max)} is {became} in {dt} ({why})")
        evidence["literal"] = lit
        evidence["became"] = became
        evidence["reference_value"] = j.reference_max
    elif kind == "overflow":
        detail = (f"{j.event_count} of {j.event_of} elements became inf in {dt} from finite inputs; the float64 "
                  f"value on the same inputs is up to {_fmt(j.reference_max)}, beyond {dt}'s max {mx:.6g}")
        if outputs_finite:
            detail += "; the outputs stay finite (an inf inside the graph, e.g. 1/sqrt(inf) = 0)"
        evidence["reference_max"] = j.reference_max
    elif kind == "underflow":
        detail = (f"{j.event_count} of {j.event_of} elements became 0 in {dt} where the float64 value on the same "
                  f"inputs is up to {_fmt(j.reference_max)} (above its own noise floor; {dt}'s smallest "
                  f"subnormal {sub:.3g}, smallest normal {normal:.3g})")
        evidence["reference_max"] = j.reference_max
    elif kind == "random":
        detail = (f"the two runs drew other numbers here (a random op draws in its output dtype, {dt} against "
                  f"the reference's; its own error {_fmt(j.local_error)}), so what follows it differs by the draws, "
                  f"not by rounding; run it without random layers (training=False) to compare rounding alone")
    elif kind == "rounding":
        detail = (f"its own error {_fmt(j.local_error)} is {_fmt(ratio or float('inf'))}× its bound "
                  f"{_fmt(j.bound or 0.0)} on the inputs it received, with no overflow or underflow")
    elif kind == "domain":
        ins = [a for a in op.inputs if a is not None and (a.dtype.kind == "f" or a.dtype.name == "bfloat16")]
        lo = min((float(np.min(a.astype(np.float64))) for a in ins if np.size(a)), default=float("nan"))
        detail = (f"{j.event_count} of {j.event_of} elements NaN, and NaN is the float64 answer on the same "
                  f"finite inputs too (smallest input {_fmt(lo)}): inputs outside the op's domain")
        evidence["smallest_input"] = lo
    else:  # ill-conditioned
        up = extra.get("upstream")
        up_text = f"{up.op_type} {up.name!r}" + (f" ({_where(up)})" if _where(up) else "") if up is not None \
            else f"its input {extra.get('input')}"
        detail = (f"within its bound (local/bound {_fmt(ratio or 0.0)}), but its condition number at this input "
                  f"is {_fmt(extra['condition_number'])} (each input element nudged on its own): it amplifies "
                  f"the {_fmt(extra['input_relative_error'])} relative error of {up_text}")
        evidence.update({k: v for k, v in extra.items() if k != "upstream"})
        evidence["upstream_op"] = getattr(up, "name", "")
    if backward_of:
        detail += f" (in the backward pass of {backward_of})"
        evidence["backward_of"] = backward_of
    carried = _carried(op, test_ops, consumers, sig)
    return Cause(function_name, runs, kind, op.name, op.op_type, _where(op), detail, j.local_error, j.bound,
                 carried, evidence)


def _carried(op, test_ops, consumers, sig) -> tuple[str, ...]:
    """The ops downstream of ``op`` (transitively) whose values differ from the reference run, in order."""
    idx = {o.name: i for i, o in enumerate(test_ops)}
    seen, stack = set(), [op.name]
    while stack:
        name = stack.pop()
        for c in consumers.get(name, ()):
            if c not in seen:
                seen.add(c)
                stack.append(test_ops[c].name)
    return tuple(f"{test_ops[i].op_type} {test_ops[i].name!r}" for i in sorted(seen)
                 if sig(i) and i != idx.get(op.name))


def _grad_call(call: Callable) -> Callable:
    """``call`` plus the gradients of sum(float outputs, in float32) wrt its sources and trainable variables."""
    import tensorflow as tf

    def run(srcs):
        with tf.GradientTape() as tape:
            tape.watch(srcs)
            out = call(srcs)
            flat = [o for o in tf.nest.flatten(out) if isinstance(o, tf.Tensor) and o.dtype.is_floating]
            with tf.name_scope(LOSS_SCOPE):  # tflab's loss: judged, never named as the cause
                total = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in flat]) if flat else None
        if total is None:
            return out
        targets = list(srcs) + [v for v in tape.watched_variables() if v.trainable]
        grads = tape.gradient(total, targets, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return out, grads

    return run


def attribute_calls(test_call: Callable, ref_call: Callable, test_sources: Sequence, ref_sources: Sequence,
                    function_name: str, runs: str, gradients: bool = True,
                    require_cause: bool = False, higher: tuple | None = None) -> Attribution:
    """Traces both calls once (every float op output kept, backward pass included) and attributes.

    Args:
        test_call, ref_call: functions of one list of tensors (the run under test, the reference run).
        test_sources, ref_sources: their tensors.
        function_name, runs: for the record.
        gradients: also trace the gradients of sum(outputs) (so the backward ops are judged too);
            ``"auto"``: the forward pass first, and forward and backward (with ``higher``)
            only when the forward pass names no cause.
        require_cause: the runs are known to differ (see `attribute_runs`).
        higher: ``(call, sources)`` of the same function in float64, or None: the reference
            run's noise floor (its distance to this run). A float64 run that fails is skipped.

    Returns:
        An `Attribution` (``error`` set when a run could not be traced).
    """
    import tensorflow as tf

    from tflab.nonfinite import trace_op_values

    t0 = time.perf_counter()
    if gradients == "auto":
        # the forward pass alone first (a third of the ops, no float64 run): most causes are there
        first = attribute_calls(test_call, ref_call, test_sources, ref_sources, function_name, runs, False,
                                False, None)
        if first.cause is not None or first.error:
            return dataclasses.replace(first, seconds=time.perf_counter() - t0)
        gradients = True
    try:
        test_ops, test_out = trace_op_values(_grad_call(test_call) if gradients else test_call, test_sources)
        ref_ops, _ = trace_op_values(_grad_call(ref_call) if gradients else ref_call, ref_sources)
    except Exception as e:  # noqa: BLE001 - the comparison stands without its cause
        return Attribution(function_name, runs, None, error=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    higher_ops = None
    if higher is not None:
        try:
            higher_ops, _ = trace_op_values(_grad_call(higher[0]) if gradients else higher[0], higher[1])
        except Exception:  # noqa: BLE001 - code that mixes in float32 constants: no noise floor, said in docs
            higher_ops = None
    first = test_out[0] if gradients and isinstance(test_out, tuple) and len(test_out) == 2 else test_out
    finite = all(np.isfinite(np.asarray(a, np.float64)).all() for a in tf.nest.flatten(first)
                 if np.asarray(a).dtype.kind == "f")
    return attribute_runs(test_ops, ref_ops, function_name, runs, finite, require_cause,
                          seconds0=time.perf_counter() - t0, higher_ops=higher_ops)


def attribute(fn: Callable, *args: Any, dtype: str = "float16", reference: str = "float32",
              gradients: bool = True) -> Attribution:
    """Runs ``fn`` with its float tensor arguments cast to ``dtype`` and to ``reference``, and names the cause.

    Args:
        fn: a function of tensors (a `tf.function`'s Python function is used).
        *args: its arguments; float tensors/arrays are cast to each run's dtype.
        dtype: the run under test's dtype (``"float16"``, ``"bfloat16"``).
        reference: the reference run's dtype (``"float32"`` or ``"float64"``).
        gradients: also judge the backward ops of sum(outputs).

    Returns:
        An `Attribution`; ``.cause`` is a `Cause` or None.

    Example:
        >>> a = attribute(lambda x: tf.sqrt(tf.reduce_mean(tf.square(x))) , tf.fill([64], 300.0))
        >>> a.cause.kind, a.cause.op_type
        ('overflow', 'Square')
    """
    import tensorflow as tf

    python_fn = getattr(fn, "python_function", fn)
    leaves = list(args)
    at = [i for i, v in enumerate(leaves) if isinstance(v, (tf.Tensor, np.ndarray)) and tf.as_dtype(v.dtype).is_floating]

    def make(dt):
        srcs = [tf.cast(tf.convert_to_tensor(leaves[i]), dt) for i in at]

        def call(s):
            flat = list(leaves)
            for i, t in zip(at, s):
                flat[i] = t
            return python_fn(*flat)
        return call, srcs

    tc, ts = make(dtype)
    rc, rs = make(reference)
    name = getattr(python_fn, "__name__", type(python_fn).__name__)
    higher = make("float64") if reference != "float64" else None
    return attribute_calls(tc, rc, ts, rs, name, f"{reference} vs {dtype}", gradients, require_cause=False,
                           higher=higher)
