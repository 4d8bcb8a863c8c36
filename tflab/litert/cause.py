"""Lab step 8, the root cause of a LiteRT variant's difference from TF, as one `tflab.attribution.Cause`.

The per-op check (`tflab.litert.per_op`) judges every op on the inputs it
actually received against its own bound. The cause is named from that and
from the NaN analysis (`tflab.litert.nan`), in this order:

* a **kernel** difference: the default XNNPACK delegate and LiteRT's builtin
  kernels disagree on where the NaN/inf are (`tflab.litert.nan.KernelDifference`);
  the kernel that ran is named, the checked fix (run without the default
  delegate) compared with TF's values, and the branch the NaN took is derived
  from the builtin run's intermediate values (`select_branch`);
* a **domain** cause: the first op making a NaN/inf was given inputs outside
  its domain (`tflab.litert.domains`), with the count and the producing op;
* the **first op outside its bound** in execution order: ``constant`` when
  one of its constants is a value the variant's dtype cannot hold (a float16
  weight past 65504 became inf, a literal that became 0), else ``rounding``
  for a quantized variant (its quantization step is too coarse for that op)
  and ``kernel`` for the float variant (its weights are the float model's: the
  builtin kernel's own arithmetic is over the float32 rounding bound). The
  ops downstream of it only carry the error (``carried_by``);
* ``unexplained``: an output over its end-to-end bound and no op outside its own.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from tflab.attribution.records import Cause

__all__ = ["litert_cause", "select_branch", "constant_defect"]

FLOAT16_MAX = 65504.0
FLOAT16_TINY = 2.0 ** -25  # half the smallest float16 subnormal: below it a value underflows to 0
# Origins that are the data's, not a kernel's: a NaN/inf the examples already hold is the root of
# whatever the ops after it do with it (an op over its bound on a -3.4e38 that MaxPool made of a NaN
# only carries it), as is a value outside an op's domain.
_DOMAIN_CAUSES = ("outside_domain", "log_of_negative", "log_of_zero", "division_by_zero", "integer_kernel_domain",
                  "int8_nonfinite_input", "nonfinite_input")


def _runs(quantization: str) -> str:
    return f"tf vs litert {quantization}"


def constant_defect(op, f_op, producer: Mapping[int, object]) -> dict | None:
    """A constant of ``op`` that its dtype in the checked model cannot hold, measured against the float model's.

    Args:
        op: the checked model's `tflab.litert.ops.OpInfo`.
        f_op: the matching float-model op (its constants are the reference values), or None.
        producer: tensor index → the checked op writing it (a float16 weight reaches its op through
            a DEQUANTIZE).

    Returns:
        ``{"tensor", "what", "value", "stored", "held"}`` for the first such constant, or None;
        ``held`` is False where the dtype cannot hold the value (past its range, or every non-zero
        element became 0), True where it could but the stored value is another one.
    """
    if f_op is None or len(f_op.inputs) != len(op.inputs):
        return None
    for t, ft in zip(op.inputs, f_op.inputs):
        if ft is None or ft.constant is None or np.dtype(ft.dtype).kind != "f":
            continue
        if t is None:  # the float model's op has a constant here (a bias), this op has no input at all
            want = np.asarray(ft.constant, np.float64).reshape(-1)
            if want.size and (want != 0).any():
                i = int(np.argmax(np.abs(want)))
                return {"tensor": ft.name, "value": float(want[i]), "stored": 0.0, "held": True,
                        "what": (f"the op has no input where the float model's op has the constant {ft.name!r} "
                                 f"({want.size} values, the largest {want[i]:.6g}): it computes without it, "
                                 f"as if it were 0")}
            continue
        src, stored_t = t, t
        if t.constant is None:
            w = producer.get(t.index)
            if w is None or w.op_type != "DEQUANTIZE" or w.inputs[0] is None or w.inputs[0].constant is None:
                continue
            stored_t = w.inputs[0]
        try:
            stored = np.asarray(stored_t.dequantize(stored_t.constant), np.float64).reshape(-1)
        except Exception:  # noqa: BLE001 - a layout we cannot read: no claim
            continue
        want = np.asarray(ft.constant, np.float64).reshape(-1)
        if stored.size != want.size:
            continue
        dtype = stored_t.dtype
        became_inf = np.isfinite(want) & ~np.isfinite(stored)
        if became_inf.any():
            i = int(np.argmax(became_inf))
            return {"tensor": src.name, "value": float(want[i]), "stored": float(stored[i]),
                    "held": False, "what": f"the constant {want[i]:.6g} is past {dtype}'s largest finite value "
                            f"{FLOAT16_MAX if dtype == 'float16' else np.finfo(np.float32).max:g}: it overflows "
                            f"to {stored[i]:g}"}
        past = np.isfinite(stored) & (np.abs(want) > FLOAT16_MAX) if dtype == "float16" else np.zeros(0, bool)
        if past.any():  # stored finite (TF 2.21 saturates to ±65504): past the range, not an overflow to inf
            i = int(np.argmax(past))
            return {"tensor": src.name, "value": float(want[i]), "stored": float(stored[i]),
                    "held": False,
                    "what": f"the constant {want[i]:.6g} is past float16's largest finite value {FLOAT16_MAX:g}: "
                            f"stored as {stored[i]:g}"}
        # Not this weight rounded: the stored value is further from the float model's than half a step
        # (int8: the tensor's scale; float16: half its spacing at that value).
        try:
            half = _half_step(stored_t, ft, want, dtype)
        except ValueError:  # a layout we cannot broadcast: no claim about this constant
            continue
        with np.errstate(invalid="ignore"):
            off = np.abs(stored - want) - half * (1 + 1e-6)
        if np.isfinite(want).all() and np.isfinite(stored).all() and (off > 0).any():
            i = int(np.argmax(off))
            return {"tensor": src.name, "value": float(want[i]), "stored": float(stored[i]),
                    "held": True, "what": (f"the stored {dtype} constant is not the float model's rounded: {stored[i]:.6g} where "
                             f"the float weight is {want[i]:.6g}, {abs(stored[i] - want[i]):.3g} apart, more than "
                             f"half a step ({half[i]:.3g})")}
        nonzero = want != 0
        vanished = nonzero & (stored == 0)
        if nonzero.any() and vanished[nonzero].all():
            i = int(np.argmax(vanished))
            if dtype == "float16" and abs(want[i]) < FLOAT16_TINY:
                what = (f"the constant {want[i]:.3g} underflows to 0 in float16 (below {FLOAT16_TINY:.3g}, half "
                        f"its smallest subnormal {2.0 ** -24:.3g})")
            else:
                what = f"the constant {want[i]:.3g} rounds to 0 in {dtype}"
            return {"tensor": src.name, "value": float(want[i]), "stored": 0.0, "what": what, "held": False}
    return None


def _body_constant_defect(op, f_op, pq, pf) -> dict | None:
    """`constant_defect` of the first op in a WHILE's body (a recurrent kernel) against the float body's op."""
    from tflab.litert.ops import loop_body
    from tflab.litert.per_op import match_ops

    body = loop_body(op, pq)
    f_body = loop_body(f_op, pf) if f_op is not None else None
    if body is None or f_body is None:
        return None
    q_ops, f_ops = pq.subgraphs[body], pf.subgraphs[f_body]
    pairs, _ = match_ops(q_ops, f_ops)
    producer = {t.index: o for o in q_ops for t in o.outputs}
    for b in q_ops:
        if b.index in pairs:
            found = constant_defect(b, f_ops[pairs[b.index]], producer)
            if found is not None:
                where = f" in {b.op_type} #{b.index} of {op.op_type} #{op.index}'s body (subgraph {body})"
                return {**found, "what": found["what"] + where}
    return None


def _half_step(stored_t, ft, want: np.ndarray, dtype: str) -> np.ndarray:
    """Half the stored dtype's step at each element: the scale (per channel) for int8, the spacing for floats."""
    if stored_t.quantized:
        scale = np.asarray(stored_t.scale, np.float64)
        if scale.size > 1:
            nd = len(np.asarray(ft.constant).shape)
            scale = scale.reshape([-1] + [1] * (nd - 1 - stored_t.quantized_dimension))
        return np.broadcast_to(scale / 2, np.asarray(ft.constant).shape).reshape(-1)
    ftype = np.float16 if dtype == "float16" else np.float32
    return np.spacing(np.abs(want).astype(ftype)).astype(np.float64) / 2


def _downstream(ops, start: int) -> list[str]:
    """The ops that read, directly or not, what op ``start`` writes, in execution order."""
    tainted = {t.index for op in ops if op.index == start for t in op.outputs}
    out = []
    for op in ops:
        if op.index <= start:
            continue
        if any(t is not None and t.index in tainted for t in op.inputs):
            tainted |= {t.index for t in op.outputs}
            out.append(f"{op.op_type} #{op.index}")
    return out


def litert_cause(check_fields: Mapping, model: bytes, float_model: bytes | None, quantization: str,
                 function_name: str = "") -> Cause | None:
    """The one cause of a variant's difference from TF, or None when every op and output is within bound.

    Args:
        check_fields: ``{"per_op": PerOpCheck | None, "outputs": {name: OutputError},
            "nan": [(NanOrigin | None, KernelDifference | None), ...]}``.
        model: the checked flatbuffer.
        float_model: the float conversion the per-op check used (constants are compared with it).
        quantization: the variant's recipe.
        function_name: the model's name in the report.

    Returns:
        A `tflab.attribution.Cause`, or None.
    """
    runs = _runs(quantization)
    per_op = check_fields.get("per_op")
    over = [o for o in check_fields.get("outputs", {}).values() if not o.within_bound]
    if over or (per_op is not None and per_op.outside):
        # A literal the stored dtype cannot hold (1e-12 in float16 is 0) is within its op's rounding
        # bound, and yet every op after it computes on another number: it is the cause when it comes first.
        found = _unheld_constant(model, float_model, per_op)
        first_out = min(per_op.outside, key=lambda o: (o.signature, o.index)) if per_op and per_op.outside else None
        if found is not None and first_out is not None and not (
                first_out.index == found[0].index or f"{first_out.op_type} #{first_out.index}" in found[2]):
            found = None  # an op over its own bound that this constant does not feed comes first: that one
        if found is not None:
            op, defect, carried = found
            return Cause(function_name, runs, "constant", defect["tensor"].split(";")[0], op.op_type,
                         detail=f"{defect['what']} (tensor {defect['tensor'].split(';')[0]!r}, read by "
                                f"{op.op_type} #{op.index}); every op after it computes on that value",
                         carried_by=carried, evidence={"op_index": op.index, "constant": defect})
    for origin, diff in check_fields.get("nan", ()):
        if diff is not None:
            fix = diff.fix
            detail = diff.branch or diff.to_text()
            return Cause(function_name, runs, "kernel", diff.op_name, diff.op_type, detail=(
                f"the XNNPACK delegate's kernels (the default, which ran this check) differ from TF on {diff.lost} "
                f"at {diff.checked} element(s), LiteRT's builtin kernels at {diff.builtin}: {detail}"),
                evidence={"differ_checked": diff.checked, "differ_builtin": diff.builtin,
                          "values": list(diff.values), "ops": list(diff.ops)},
                fix=None if fix is None else _plan(fix))
    alike = all(o.within_bound for o in check_fields.get("outputs", {}).values())
    for origin, _ in check_fields.get("nan", ()):
        if origin is not None and origin.cause in _DOMAIN_CAUSES:
            # The NaN/inf is the op's right answer: TF and LiteRT may well agree on it (then the check passes
            # and this names where the NaN comes from).
            return Cause(function_name, runs, "domain", origin.tensor, origin.op, detail=(
                "NaN/inf in TF and LiteRT alike: " if alike else "") + origin.why,
                         evidence={"nan_cause": origin.cause, "op_index": origin.op_index},
                         fix=None if origin.fix_record is None else _plan(origin.fix_record))
        if origin is not None and origin.cause == "overflow":
            return Cause(function_name, runs, "overflow", origin.tensor, origin.op, detail=(
                "inf in TF and LiteRT alike: " if alike else "") + origin.why,
                evidence={"nan_cause": origin.cause, "op_index": origin.op_index})
        if origin is not None and origin.cause == "float16_overflow":
            return Cause(function_name, runs, "constant" if origin.constant else "overflow",
                         origin.tensor, origin.op, detail=origin.why, evidence={"nan_cause": origin.cause})
    outside = () if per_op is None else per_op.outside
    if outside:
        first = min(outside, key=lambda o: (o.signature, o.index))
        from tflab.litert.ops import read_ops

        pq = read_ops(bytes(model))
        ops = pq.subgraphs[pq.signatures.get(first.signature, pq.subgraph_of(None))] if pq.signatures \
            else pq.subgraphs[0]
        op = next(o for o in ops if o.index == first.index)
        defect = None
        if float_model is not None and first.float_index is not None:
            pf = read_ops(bytes(float_model))
            f_ops = pf.subgraphs[pf.signatures.get(first.signature, 0)] if pf.signatures else pf.subgraphs[0]
            producer = {t.index: o for o in ops for t in o.outputs}
            f_op = next((o for o in f_ops if o.index == first.float_index), None)
            defect = constant_defect(op, f_op, producer) or _body_constant_defect(op, f_op, pq, pf)
        carried = tuple(_downstream(ops, first.index))
        measured = (f"its own error {first.worst_abs_error:.3g} on the inputs it received is {first.ratio:.3g}× "
                    f"its bound {first.bound:.3g}")
        if defect is not None:
            kind, detail = "constant", f"{defect['what']} (tensor {defect['tensor'].split(';')[0]!r}); {measured}"
        elif quantization == "none":
            kind, detail = "kernel", (f"LiteRT's builtin {op.op_type} kernel, with the float model's own weights: "
                                      f"{measured}")
        else:
            outs = [t for t in op.outputs if t.quantized]
            step = f"; its output step is {float(outs[0].scale.max()):.3g}" if outs else ""
            kind, detail = "rounding", f"{quantization} quantization at this op: {measured}{step}"
        return Cause(function_name, runs, kind, first.name.split(";")[0], first.op_type, detail=detail,
                     local_error=first.worst_abs_error, bound=first.bound, carried_by=carried,
                     evidence={"op_index": first.index, "ratio": first.ratio, "signature": first.signature,
                               **({"constant": defect} if defect else {})})
    if over:
        o = max(over, key=lambda o: o.bound_ratio)
        un = "" if per_op is None or not per_op.unchecked else (
            f"; {sum(per_op.unchecked.values())} op(s) have no per-op verdict "
            f"({', '.join(per_op.unchecked)}): the cause may be there")
        return Cause(function_name, runs, "unexplained", o.name, "output",
                     detail=(f"{o.name} is {o.bound_ratio:.3g}× its end-to-end bound while every checked op is "
                             f"within its own{un}"), evidence={"bound_ratio": o.bound_ratio})
    return None


def _unheld_constant(model: bytes, float_model: bytes | None, per_op):
    """The first op (execution order) with a constant its stored dtype cannot hold, or None.

    Returns:
        ``(op, defect, carried_by)``: the checked `OpInfo`, `constant_defect`'s dict (``held`` False),
        and the ops downstream of it.
    """
    if float_model is None or per_op is None:
        return None
    from tflab.litert.ops import read_ops

    pq, pf = read_ops(bytes(model)), read_ops(bytes(float_model))
    for o in sorted((o for o in per_op.ops if o.float_index is not None), key=lambda o: (o.signature, o.index)):
        sq = pq.signatures.get(o.signature, 0) if pq.signatures else 0
        sf = pf.signatures.get(o.signature, 0) if pf.signatures else 0
        ops, f_ops = pq.subgraphs[sq], pf.subgraphs[sf]
        op = next((x for x in ops if x.index == o.index), None)
        f_op = next((x for x in f_ops if x.index == o.float_index), None)
        if op is None or f_op is None:
            continue
        producer = {t.index: x for x in ops for t in x.outputs}
        defect = constant_defect(op, f_op, producer)
        if defect is not None and not defect["held"]:
            return op, defect, tuple(_downstream(ops, op.index))
    return None


def _plan(fix):
    from tflab.fix import first_working

    return first_working([fix])


def select_branch(graph, values: Mapping[int, np.ndarray], lost_values) -> tuple[str, str, str]:
    """Why a NaN input gives a number: which branch a SELECT took there, derived from the builtin run's tensors.

    A comparison with NaN is false (IEEE 754), so ``SELECT(x > 0, a, b)`` takes ``b`` where ``x`` is
    NaN. This reads, in the builtin per-op run, each SELECT/SELECT_V2 whose condition is False where
    the comparison's input is NaN, and names the ops of the branch taken.

    Args:
        graph: the subgraph (`tflab.litert.flatbuffer_notes.Graph`).
        values: tensor index → values of the builtin per-op run.
        lost_values: the checked run's values where TF has NaN (≤ 4).

    Returns:
        ``(sentence, op_type, op_name)`` naming the SELECT, or ``("", "", "")`` when no SELECT took a
        branch on a NaN.
    """
    writer = {t: op for op in graph.ops for t in op.outputs}
    for op in graph.ops:
        if op.name not in ("SELECT", "SELECT_V2") or len(op.inputs) < 3 or op.inputs[0] not in values:
            continue
        cond = np.asarray(values[op.inputs[0]])
        cmp_op = writer.get(op.inputs[0])
        if cmp_op is None or not cmp_op.inputs or cmp_op.inputs[0] not in values:
            continue
        x = np.asarray(values[cmp_op.inputs[0]], np.float64)
        try:
            xb, cb = np.broadcast_arrays(x, cond)
        except ValueError:
            continue
        nan = np.isnan(xb)
        if not nan.any():
            continue
        false_at_nan = int((~cb[nan].astype(bool)).sum())
        taken = 2 if false_at_nan == int(nan.sum()) else 1 if false_at_nan == 0 else None
        if taken is None:
            continue
        chain, frontier = [], {op.inputs[taken]}
        for o in reversed(graph.ops):
            if o.index < op.index and set(o.outputs) & frontier:
                chain.append(f"{o.name} #{o.index}")
                frontier |= {t for t in o.inputs if t >= 0 and t not in graph.constant_ids}
        branch = np.asarray(values.get(op.inputs[taken], np.zeros(0)), np.float64)
        try:
            carried_nan = int(np.isnan(np.broadcast_to(branch, nan.shape)[nan]).sum())
        except ValueError:
            carried_nan = 0
        shown = ", ".join(f"{v:.4g}" for v in lost_values)
        path = " → ".join(reversed(chain)) if chain else repr(graph.names[op.inputs[taken]])
        sentence = (f"{cmp_op.name} #{cmp_op.index} gives {'False' if taken == 2 else 'True'} at all "
                    f"{int(nan.sum())} element(s) where its input {graph.names[cmp_op.inputs[0]]!r} is NaN "
                    f"(measured in the builtin run: a comparison with NaN is false), so {op.name} #{op.index} "
                    f"takes its {'third' if taken == 2 else 'second'} input there, the branch "
                    f"{path}, which is NaN at "
                    f"{carried_nan} of them with the builtin kernels; XNNPACK's kernels give {shown or 'a number'} "
                    f"there")
        return sentence, op.name, graph.names[op.outputs[0]]
    return "", "", ""
