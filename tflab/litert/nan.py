"""Lab step 8, NaN origin: which TFLite op first makes a NaN or ±inf, and why.

"My TFLite model outputs NaN" has a handful of causes, and each leaves a
different trace in the per-op tensors. What the flatbuffer alone shows
(uninitialized resource variables, int8 scales of 0, saturated float16
weights) is said right after conversion by `tflab.litert.flatbuffer_notes`.
This module finds the rest:

* `find_nan_origin` reruns one signature with LiteRT's builtin kernels and
  ``experimental_preserve_all_tensors=True`` (the XNNPACK delegate fuses ops
  and keeps no intermediates, so it is off for this pass; the builtin
  kernels are the reference LiteRT itself falls back on) and walks the ops
  in execution order. The first op whose output holds a NaN/inf is named,
  with the cause its inputs show: an input or weight already non-finite, a
  cast to float16 past 65504, an int8 tensor whose scale is zero, a division
  or log of zero. When TF has a NaN that LiteRT does not, the op named is the
  first one that takes a non-finite input and gives a finite output (an int8
  input or a dynamic-range kernel turns NaN into an integer).
* `nan_note` turns that into the note `tflab.litert.check.check_tflite` gives.

Only what is measured is named: a NaN from finite inputs by another op is
reported as such, with the input range, and no guessed cause.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from tflab.fix import first_working
from tflab.litert.flatbuffer_notes import FLOAT16_MAX, VARIABLE_FIX, Graph, Op
from tflab.litert.nan_runner import (  # noqa: F401 (re-exported)
    as_fed, count_nonfinite, describe_values, nonfinite_mask, run_per_op)

CAUSES = ("uninitialized_variable", "nonfinite_input", "nonfinite_weight", "float16_overflow",
          "int8_zero_scale", "int8_nonfinite_input", "division_by_zero", "log_of_zero", "log_of_negative",
          "integer_kernel_domain", "outside_domain", "overflow", "unexplained")

from tflab.litert.domains import DOMAINS, dequantized, domain_violation  # noqa: E402,F401 (re-exported)


@dataclasses.dataclass(frozen=True)
class NanOrigin:
    """The first TFLite op where a NaN/inf appears (or disappears), and its measured cause.

    Attributes:
        signature: signature key that was run.
        op_index: the op's index in its subgraph (execution order).
        op: the builtin op name, e.g. ``"DIV"``.
        tensor: name of the op's output tensor holding the non-finite values
            (or, for ``int8_nonfinite_input``, of the input it swallowed).
        cause: one of `CAUSES`.
        why: one sentence of measured facts.
        fix: what to change, or "" when no fix is known.
    """

    signature: str
    op_index: int
    op: str
    tensor: str
    cause: str
    why: str
    fix: str = ""
    dropped: bool = False  # True: the first op that loses TF's NaN/inf (`find_nan_sink`)
    constant: bool = False  # True: the non-finite value is a constant (weight) of the flatbuffer

    @property
    def fix_record(self):
        """``fix`` as a `tflab.fix.Fix`: not checked (a change to the user's model or data, which tflab
        cannot make to a converted flatbuffer), with that reason; None when there is no fix."""
        from tflab.fix import unchecked

        if not self.fix:
            return None
        return unchecked("code", "", self.fix, FIX_NOT_RUN)

    def cause_text(self) -> str:
        where = "NaN/inf lost at" if self.dropped else "first non-finite value at"
        return (f"{where} op {self.op_index} {self.op} (tensor {self.tensor!r}, signature "
                f"{self.signature!r}): {self.cause.replace('_', ' ')}: {self.why}")

    def to_text(self) -> str:
        fix = self.fix_record
        return self.cause_text() + (f"; {fix.line()}" if fix is not None else "")


FIX_NOT_RUN = ("it changes your model or your data, which tflab cannot do to a converted flatbuffer; "
               "convert again after the change and tflab checks the result")


def _zero_scale(graph: Graph, t: int) -> bool:
    return graph.dtypes[t] in ("int8", "uint8", "int16", "int32") and any(s == 0.0 for s in graph.scales[t]) \
        and len(graph.scales[t]) > 0


def _classify(graph: Graph, op: Op, values: Mapping[int, np.ndarray], key: str) -> NanOrigin:
    out = next((t for t in op.outputs if t in values and count_nonfinite(values[t])), op.outputs[0])
    made = describe_values(values[out]) if out in values else "non-finite values"
    name = graph.names[out]

    def origin(cause, why, fix="", constant=False):
        return NanOrigin(key, op.index, op.name, name, cause, why, fix, constant=constant)

    bad_in = [t for t in op.inputs if t >= 0 and t in values and count_nonfinite(values[t])]
    for t in bad_in:
        if t in graph.inputs:
            return origin("nonfinite_input", f"the model input {graph.names[t]!r} already holds "
                          f"{describe_values(values[t])} (the examples fed), and {op.name} passes them on ({made})",
                          "clean the examples (np.nan_to_num, or drop the rows) before feeding them")
        if t in graph.constants and graph.dtypes[t] == "float16":
            return origin("float16_overflow", f"the float16 weight {graph.names[t]!r} holds "
                          f"{describe_values(values[t])}: float16's largest finite value is {FLOAT16_MAX:g}, so a "
                          f"float32 weight beyond it became inf when converted",
                          f"keep that weight below {FLOAT16_MAX:g} in magnitude (rescale it, or fold the "
                          f"scale into the next op) or use the float32 or dynamic variant", constant=True)
        if t in graph.constant_ids:
            return origin("nonfinite_weight", f"the constant {graph.names[t]!r} already holds "
                          f"{describe_values(values[t])}, as in the SavedModel's weights", constant=True)
    zero = [t for t in op.inputs + op.outputs if t >= 0 and _zero_scale(graph, t)]
    if zero:
        return origin("int8_zero_scale", f"tensor {graph.names[zero[0]]!r} is {graph.dtypes[zero[0]]} with "
                      f"quantization scale 0, so dequantizing or requantizing by it divides by zero ({made})",
                      "give the representative dataset rows that make this tensor vary (a tensor constant "
                      "over every calibration row gets a degenerate range)")
    dom = domain_violation(graph, op, values)
    if dom is not None:
        return origin(dom.cause, dom.why(graph, op, made), dom.fix)
    finite_in = [values[t] for t in op.inputs if t >= 0 and t in values and values[t].dtype.kind == "f"
                 and values[t].size]
    span = max((float(np.abs(v).max()) for v in finite_in), default=0.0)
    if graph.dtypes[out] == "float16" and span > FLOAT16_MAX:
        return origin("float16_overflow", f"{op.name} writes the float16 tensor {name!r} from values up to "
                      f"{span:.6g}, past float16's largest finite value {FLOAT16_MAX:g} ({made})",
                      f"scale the values below {FLOAT16_MAX:g} before the cast, or keep that tensor float32")
    out_v = np.asarray(values[out], np.float64) if out in values else np.zeros(0)
    if out_v.size and not np.isnan(out_v).any() and np.isinf(out_v).any() and graph.dtypes[out] == "float32":
        # Finite inputs, ±inf out, no NaN, and no input outside the op's domain: a finite result past
        # float32's largest value (exp(100)), which is what overflow means.
        return origin("overflow", f"{op.name} made {made} from finite inputs (largest |input| {span:.3g}): "
                      f"its result passes float32's largest finite value {float(np.finfo(np.float32).max):.4g}",
                      "keep the values in range before this op (subtract the max before exp, as softmax "
                      "does; clip the input)")
    return origin("unexplained", f"{op.name} made {made} from finite inputs (largest |input| {span:.3g}); "
                  f"none of the causes tflab recognizes (non-finite input, float16 weight overflow, int8 "
                  f"scale 0, an input outside the op's domain) applies")


def find_nan_origin(model: bytes, key: str, feed: Mapping[str, np.ndarray]) -> NanOrigin | None:
    """The first op of signature ``key`` that makes a NaN/inf on ``feed``, and why.

    Args:
        model: flatbuffer bytes.
        key: signature key.
        feed: ``{input name: array}`` as fed to TF (quantized here for an int8 input).

    Returns:
        A `NanOrigin`, or None when no tensor of the run holds a NaN/inf.
        A READ_VARIABLE that fails because its variable was never written is
        the origin too (cause ``uninitialized_variable``): the builtin kernel
        refuses where XNNPACK returns garbage.

    Raises:
        RuntimeError: another op failed to invoke with the builtin kernels before
            any NaN/inf appeared (the message names it).

    Example (``x / y`` with a zero in ``y``):

    >>> find_nan_origin(model, "serving_default", {"x": x, "y": y}).cause
    'division_by_zero'
    """
    graph, values, failed = run_per_op(model, key, feed)
    if failed is not None:
        at = next((op for op in graph.ops if op.index == failed[0]), None)
        if at is not None and at.name == "READ_VARIABLE":
            var = graph.variables.get(at.inputs[0], graph.names[at.inputs[0]]).lstrip("/")
            return NanOrigin(key, at.index, at.name, graph.names[at.outputs[0]], "uninitialized_variable",
                             f"it reads resource variable {var!r}, which no initializer subgraph or signature "
                             f"writes (LiteRT's builtin kernel: {failed[1]})", VARIABLE_FIX)
    for op in graph.ops:
        if failed is not None and op.index >= failed[0] >= 0:
            break  # tensors from the failing op on were never computed
        if any(t >= 0 and t in values and count_nonfinite(values[t]) for t in op.outputs):
            return _classify(graph, op, values, key)
    if failed is not None:
        raise RuntimeError(f"op {failed[0]} failed to invoke: {failed[1]}")
    return None


def find_nan_sink(model: bytes, key: str, feed: Mapping[str, np.ndarray]) -> NanOrigin | None:
    """The first op that takes a NaN/inf and gives finite values (TF keeps the NaN, LiteRT loses it).

    Args:
        model: flatbuffer bytes.
        key: signature key.
        feed: ``{input name: array}`` as fed to TF (quantized here for an int8 input).

    Raises:
        RuntimeError: an op failed to invoke with the builtin kernels.

    Returns:
        A `NanOrigin` (cause ``int8_nonfinite_input`` when the op's output is an
        integer tensor, e.g. QUANTIZE; else ``nonfinite_input`` for a float op
        that drops it), or None when no tensor of the LiteRT run is non-finite.
    """
    graph, values, failed = run_per_op(model, key, feed)
    if failed is not None:
        raise RuntimeError(f"op {failed[0]} failed to invoke: {failed[1]}")
    swallowed = as_fed(graph, feed)[1]
    for name, count in swallowed.items():
        t = graph.feeds[name]
        op = next((op for op in graph.ops if t in op.inputs), None)
        scale, zp = graph.scales[t][0], graph.zero_points[t][0]
        return NanOrigin(key, op.index if op else -1, op.name if op else "(none)", graph.names[t],
                         "int8_nonfinite_input", dropped=True, why=
                         f"the model input {name!r} is {graph.dtypes[t]} (scale {scale:.6g}, zero point {zp}) and "
                         f"the examples hold {count} NaN/inf there: an integer has no NaN, so quantizing the "
                         f"example makes them integers and LiteRT's output is finite where TF's is NaN/inf",
                         fix="feed finite inputs (int8 kernels cannot carry NaN/inf), or keep float inputs")
    for op in graph.ops:
        bad_in = [t for t in op.inputs if t >= 0 and t in values and count_nonfinite(values[t])]
        outs = [t for t in op.outputs if t in values]
        if not bad_in or not outs or any(count_nonfinite(values[t]) for t in outs):
            continue
        t, o = bad_in[0], outs[0]
        src = "model input" if t in graph.inputs else "tensor"
        if graph.dtypes[o] in ("int8", "uint8", "int16", "int32"):
            return NanOrigin(key, op.index, op.name, graph.names[t], "int8_nonfinite_input",
                             f"its input, {src} {graph.names[t]!r}, holds {describe_values(values[t])}, and it "
                             f"writes the {graph.dtypes[o]} tensor {graph.names[o]!r}: an integer has no NaN, so "
                             f"LiteRT's output is finite where TF's is NaN/inf",
                             "feed finite inputs (int8 kernels cannot carry NaN/inf)", dropped=True)
        weights = [w for w in op.inputs if w >= 0 and w not in graph.inputs and graph.dtypes[w] in ("int8", "int4")]
        if weights:  # a hybrid (dynamic-range) kernel: int8 weights, float activations quantized on the fly
            return NanOrigin(key, op.index, op.name, graph.names[t], "int8_nonfinite_input",
                             f"its input, {src} {graph.names[t]!r}, holds {describe_values(values[t])}, and its "
                             f"weight {graph.names[weights[0]]!r} is {graph.dtypes[weights[0]]}: this dynamic-range "
                             f"kernel quantizes its float input to int8 on the fly, where a NaN/inf becomes an "
                             f"integer, so its output {graph.names[o]!r} is finite where TF's is NaN/inf",
                             "feed finite inputs (int8 kernels cannot carry NaN/inf)", dropped=True)
        return NanOrigin(key, op.index, op.name, graph.names[t], "nonfinite_input",
                         f"its input, {src} {graph.names[t]!r}, holds {describe_values(values[t])}, and its output "
                         f"{graph.names[o]!r} is finite", "feed finite inputs", dropped=True)
    # An integer kernel on values outside its float op's domain: TF's log of a negative number is NaN,
    # the int8 LOG gives a code. Measured on the dequantized inputs of each op of the domain table.
    for op in graph.ops:
        if op.name not in DOMAINS or not op.inputs or op.inputs[0] not in values:
            continue
        t = op.inputs[0]
        if graph.dtypes[t] not in ("int8", "uint8", "int16") or not graph.scales[t]:
            continue
        dom = domain_violation(graph, op, values)
        if dom is not None:
            x = dequantized(graph, t, values[t])
            negative, zeros = int((x < 0).sum()), int((x == 0).sum())
            return NanOrigin(key, op.index, op.name, graph.names[t], "integer_kernel_domain", dropped=True, why=
                             f"its {graph.dtypes[t]} input {graph.names[t]!r} dequantizes to {negative} negative "
                             f"value(s) and {zeros} zero(s) ({dom.count} outside {op.name}'s domain: "
                             f"{dom.label}), where TF's {op.name} gives {dom.result}; the integer kernel writes "
                             f"a code there (an integer has no NaN), so LiteRT is finite where TF is not",
                             fix=dom.fix)
    return None


def refusal_origin(model: bytes, feeds_by_key) -> NanOrigin | None:
    """The op whose LiteRT kernel refused to run because its actual inputs lie outside its domain, measured.

    LiteRT's integer kernels check their input's domain and fail the whole invoke ("Sqrt is only
    defined for non-negative values", "Node number 0 (SQRT) failed to invoke") where TF's float op
    gives NaN/inf. The variant was reported as "not run"; the op, the inputs it received (the ops
    before it ran: `run_per_op` keeps every tensor) and the domain rule they break are the cause.

    Args:
        model: flatbuffer bytes.
        feeds_by_key: ``[(signature key, [{input name: array}, ...]), ...]``.

    Returns:
        A `NanOrigin` (cause from `tflab.litert.domains.DOMAINS`) for the first refused op whose inputs
        break its domain rule, or None when no op failed that way.
    """
    for key, feeds in feeds_by_key:
        for feed in feeds:
            try:
                graph, values, failed = run_per_op(model, key, feed)
            except (RuntimeError, ValueError):
                return None
            if failed is None:
                continue
            at = next((op for op in graph.ops if op.index == failed[0]), None)
            dom = None if at is None else domain_violation(graph, at, values)
            if dom is None:
                continue
            t = at.inputs[0]
            x = dequantized(graph, t, values[t])
            return NanOrigin(key, at.index, at.name, graph.names[t], dom.cause, why=(
                f"LiteRT's {graph.dtypes[t]} {at.name} kernel refused to run: its input {graph.names[t]!r} "
                f"dequantizes to {int((x < 0).sum())} negative value(s) and {int((x == 0).sum())} zero(s) "
                f"({dom.count} outside {at.name}'s domain: {dom.label}), where TF's {at.name} gives {dom.result}; "
                f"LiteRT: {failed[1][:160]!r}"), fix=dom.fix)
    return None


# ------------------------------------------- which kernel: XNNPACK vs builtin

BUILTIN_CHANGE = ("Interpreter(model_content=..., experimental_op_resolver_type="
                  "OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)")


def run_builtin(model: bytes, key: str, output: str, feeds: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
    """Output ``output`` of signature ``key`` run with LiteRT's builtin kernels only (no default
    XNNPACK delegate, tensors not preserved: the kernels a user gets with
    ``experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES``), every feed,
    dequantized and flattened in feed order (as `tflab.litert.check` concatenates the checked run)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from tflab.litert.per_op import quantize_feed

    interp = Interpreter(model_content=bytes(model),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    runner = interp.get_signature_runner(key)
    ins, outs = runner.get_input_details(), runner.get_output_details()
    got = []
    for feed in feeds:
        a = np.asarray(runner(**quantize_feed(feed, ins))[output])
        scale, zp = outs[output].get("quantization", (0.0, 0))
        got.append(((a.astype(np.float64) - zp) * scale) if scale and a.dtype.kind in "iu" else a)
    return np.concatenate([g.ravel() for g in got]) if got else np.zeros(0)


@dataclasses.dataclass(frozen=True)
class KernelDifference:
    """The checked run's kernels (XNNPACK) and LiteRT's builtin kernels disagree on where the NaN/inf are.

    Attributes:
        checked: elements where the checked run (default delegate) and TF disagree on non-finiteness.
        builtin: elements where the builtin kernels and TF disagree.
        values: the checked run's values at the elements where TF has NaN/inf and it has none (≤ 4 shown).
        ops: the ops of the builtin per-op run that take a NaN/inf input, in execution order.
        fix: `tflab.fix.Fix` of kind "delegate": running without the default delegate, checked by
            running the builtin kernels on the same examples.
    """

    checked: int
    builtin: int
    values: tuple
    ops: tuple[str, ...]
    fix: object
    lost: str = "NaN/inf"
    branch: str = ""  # why a NaN gives a number: the SELECT branch taken (`tflab.litert.cause.select_branch`)
    op_type: str = ""
    op_name: str = ""

    def to_text(self) -> str:
        shown = ", ".join(f"{v:g}" for v in self.values)
        op = self.ops[0] if len(set(self.ops)) == 1 else None
        who = f"XNNPACK's {op}" if op else "the XNNPACK delegate's kernels" + (
            f" ({', '.join(dict.fromkeys(self.ops))})" if self.ops else "")
        builtin_op = f"the builtin {op} kernel" if op else "the builtin kernels"
        if self.fix.checked and not self.values:  # the other way round: XNNPACK has NaN/inf where TF has numbers
            head = (f"{who} carr{'ies' if op else 'y'} {self.lost} where TF and {builtin_op} give numbers "
                    f"(measured: the default XNNPACK delegate ran this check and differs from TF at "
                    f"{self.checked} element(s); LiteRT's builtin kernels, run without the default delegate, at "
                    f"{self.builtin})" + (f"; {self.branch}" if self.branch else ""))
        elif self.fix.checked:
            head = (f"{who} maps {self.lost} to {shown}; {builtin_op} keeps it (measured: the default XNNPACK "
                    f"delegate ran this check and differs from TF at {self.checked} element(s); LiteRT's "
                    f"builtin kernels, run without the default delegate, at {self.builtin})"
                    + (f"; {self.branch}" if self.branch else ""))
        else:
            head = (f"XNNPACK (the default delegate, which ran this check) and the builtin kernels differ: "
                    f"{self.checked} vs {self.builtin} element(s) where they disagree with TF on NaN/inf")
        return head


def delegate_fix(checked: np.ndarray, builtin: np.ndarray, want: np.ndarray):
    """The candidate "run without the default delegate", judged on measured outputs.

    Args:
        checked: the checked run's output (default op resolver, XNNPACK), flat.
        builtin: the same output from the builtin kernels (`run_builtin`), flat.
        want: TF's output, flat.

    Returns:
        A `tflab.fix.Fix` (kind "delegate"): checked when the builtin kernels have NaN/inf exactly where
        TF has them, failed (with how many elements still differ) otherwise.
    """
    from tflab.fix import attempt

    def check():
        tf_bad, b_bad = ~np.isfinite(want), nonfinite_mask(np.asarray(builtin, np.float32))
        off = int((tf_bad != b_bad).sum())
        measured = {"differ_from_tf": off, "nonfinite_tf": int(tf_bad.sum()), "nonfinite_builtin": int(b_bad.sum())}
        if off:
            return False, (f"the builtin kernels still differ from TF at {off} element(s) ({int(b_bad.sum())} "
                           f"NaN/inf vs TF's {int(tf_bad.sum())})"), measured
        return True, (f"the builtin kernels have NaN/inf at the same {int(tf_bad.sum())} element(s) as TF"
                      ), measured

    tf_bad, c_bad = ~np.isfinite(want), nonfinite_mask(np.asarray(checked, np.float32))
    why = ("if NaN must propagate" if (tf_bad & ~c_bad).any() or not (c_bad & ~tf_bad).any()
           else "to get TF's numbers where XNNPACK gives NaN/inf")
    return attempt("delegate", BUILTIN_CHANGE, f"run without the default delegate {why}", check,
                   how="ran the signature with LiteRT's builtin kernels on the same examples")


def kernel_difference(model: bytes, key: str, output: str, feeds, checked: np.ndarray,
                      want: np.ndarray) -> KernelDifference | None:
    """Reruns with the builtin kernels when the checked run and TF disagree on NaN/inf; None when
    the builtin kernels put NaN/inf exactly where the checked run does (the kernels agree)."""
    checked = np.asarray(checked)
    want = np.asarray(want)
    builtin = run_builtin(model, key, output, feeds)
    if builtin.shape != checked.shape:
        return None
    c_bad, b_bad, w_bad = nonfinite_mask(checked.astype(np.float32)), nonfinite_mask(builtin.astype(np.float32)), ~np.isfinite(want)
    if (c_bad == b_bad).all():
        return None
    lost = w_bad & ~c_bad
    values = tuple(float(v) for v in np.unique(checked[lost])[:4]) if lost.any() else ()
    feed = next((f for f in feeds if any(np.asarray(a).dtype.kind == "f" and not np.isfinite(a).all()
                                         for a in f.values())), feeds[0] if feeds else {})
    graph, vals, _ = run_per_op(model, key, feed)
    ops = tuple(op.name for op in graph.ops
                if any(t >= 0 and t in vals and count_nonfinite(vals[t]) for t in op.inputs))
    lost_kind = "NaN" if lost.any() and np.isnan(want[lost]).all() else "NaN/inf"
    from tflab.litert.cause import select_branch

    branch, op_type, op_name = select_branch(graph, vals, values)
    return KernelDifference(int((c_bad != w_bad).sum()), int((b_bad != w_bad).sum()), values, ops,
                            delegate_fix(checked, builtin, want), lost_kind, branch, op_type, op_name)


# ----------------------------------------------------------- check hook


_ORIGINS: dict = {"model": None, "found": {}}  # reruns of the last model only (no model is kept past the next)


def _origin(model: bytes, key: str, frozen: tuple, which: str) -> NanOrigin | None:
    if _ORIGINS["model"] is not model:
        _ORIGINS.update(model=model, found={})
    found = _ORIGINS["found"]
    if (key, frozen, which) not in found:
        feed = {n: np.frombuffer(b, dtype=np.dtype(dt)).reshape(shape) for n, dt, shape, b in frozen}
        found[(key, frozen, which)] = (find_nan_origin if which == "origin" else find_nan_sink)(model, key, feed)
    return found[(key, frozen, which)]


def clean_examples_fix(model: bytes, key: str, feeds):
    """The fix "clean the examples", run: the same signature on ``np.nan_to_num`` of every float
    example (NaN → 0, ±inf → 0), with the kernels the check ran (default op resolver); checked when
    every output is finite, failed (with the count) when the model makes NaN/inf from clean inputs."""
    from ai_edge_litert.interpreter import Interpreter

    from tflab.fix import attempt
    from tflab.litert.per_op import quantize_feed

    def check():
        runner = Interpreter(model_content=bytes(model)).get_signature_runner(key)
        ins = runner.get_input_details()
        bad = total = 0
        for feed in feeds:
            clean = {n: (np.nan_to_num(np.asarray(a), nan=0.0, posinf=0.0, neginf=0.0)
                         if np.asarray(a).dtype.kind == "f" else a) for n, a in feed.items()}
            for out in runner(**quantize_feed(clean, ins)).values():
                out = np.asarray(out)
                total += out.size
                bad += count_nonfinite(out)
        measured = {"nonfinite": bad, "elements": total}
        if bad:
            return False, f"LiteRT still gives {bad} NaN/inf of {total} output element(s) on the cleaned examples", \
                measured
        return True, f"LiteRT's {total} output element(s) are all finite on the cleaned examples", measured

    return attempt("data", "np.nan_to_num(x)", "clean the examples (np.nan_to_num, or drop the rows) before "
                   "feeding them", check, how="reran the signature on np.nan_to_num of your examples")


def _origin_of(model: bytes, key: str, feeds) -> NanOrigin | None:
    for feed in feeds:
        found = find_nan_origin(model, key, feed)
        if found is not None:
            return found
    return None


def nan_note(model: bytes, okey: str, key: str, feeds: Sequence[Mapping[str, np.ndarray]], lite_only: int,
             tf_only: int, both: int = 0, *, output: str | None = None, got: np.ndarray | None = None,
             want: np.ndarray | None = None) -> str:
    """The note for an output with NaN/inf, naming the first op that makes it (measured) and why.

    Replaces a generic explanation: the op and cause come from a per-op rerun
    (`find_nan_origin`, or `find_nan_sink` when only TF has them).

    Args:
        model: flatbuffer bytes.
        okey: the output's name in the report.
        key: its signature key.
        feeds: the examples, as fed to TF (float; quantized here for an int8 input).
        lite_only: elements non-finite in LiteRT's output and finite in TF's.
        tf_only: elements non-finite in TF's output and finite in LiteRT's.
        both: elements non-finite on both sides (they match).
        output, got, want: the output's name in signature ``key``, the checked run's values of it
            (default op resolver: the XNNPACK delegate) and TF's, flat in feed order. Given, and when
            LiteRT and TF disagree on NaN/inf, the builtin kernels are run too
            (`kernel_difference`): a kernel's behaviour is claimed only for the kernel that ran, and
            "run without the default delegate" is offered when it is checked to keep TF's NaN/inf.

    Returns:
        One line, or ``""`` when all three counts are 0.
    """
    return nan_findings(model, okey, key, feeds, lite_only, tf_only, both, output=output, got=got,
                        want=want)[0]


def nan_findings(model: bytes, okey: str, key: str, feeds: Sequence[Mapping[str, np.ndarray]], lite_only: int,
                 tf_only: int, both: int = 0, *, output: str | None = None, got: np.ndarray | None = None,
                 want: np.ndarray | None = None) -> tuple[str, NanOrigin | None, KernelDifference | None]:
    """`nan_note`'s line with what it measured: ``(note, origin or None, kernel difference or None)``."""
    if not (lite_only or tf_only or both):
        return "", None, None
    if lite_only or tf_only:
        head = (f"{okey}: {lite_only + tf_only} element(s) are NaN/inf on one side only (LiteRT only "
                f"{lite_only}, TF only {tf_only}; {both} on both): an infinite error")
    else:
        head = f"{okey}: {both} element(s) are NaN/inf in LiteRT and in TF alike (they match)"
    found: NanOrigin | None = None
    try:
        for feed in feeds:
            # Several outputs of one signature share the rerun of each feed (cached).
            frozen = tuple((n, np.asarray(a).dtype.str, np.asarray(a).shape, np.asarray(a).tobytes())
                           for n, a in sorted(feed.items()) if np.asarray(a).dtype.kind != "O")
            if any(np.asarray(a).dtype.kind == "O" for a in feed.values()):  # bytes objects: no cache key
                found = find_nan_origin(model, key, feed) if lite_only or both else None
                found = found or (find_nan_sink(model, key, feed) if tf_only else None)
            else:
                found = _origin(model, key, frozen, "origin") if lite_only or both else None
                if found is None and tf_only:
                    found = _origin(model, key, frozen, "sink")
            if found is not None:
                break
    except (RuntimeError, ValueError) as e:  # the builtin kernels could not even prepare it
        return f"{head}; the per-op rerun with builtin kernels failed ({str(e).strip()[:160]})", None, None
    diff = None
    if (lite_only or tf_only) and output is not None and got is not None and want is not None:
        try:
            diff = kernel_difference(model, key, output, list(feeds), got, want)
        except (RuntimeError, ValueError):
            diff = None  # the builtin kernels could not run it: only the checked run is described
    if diff is not None:
        if found is None:
            try:
                found = _origin_of(model, key, feeds)
            except (RuntimeError, ValueError):
                found = None
        plan = first_working([diff.fix] + ([found.fix_record] if found is not None and found.fix_record else []))
        cause = "" if found is None else "; per-op rerun with the builtin kernels: " + found.cause_text()
        return f"{head}; {diff.to_text()}{cause}; " + " ".join(plan.lines()), found, diff
    if found is None:
        side = ("no tensor of the per-op rerun with LiteRT's builtin kernels holds a NaN/inf, so the kernels of "
                "the checked run (XNNPACK delegate) made it" if lite_only or both else
                "no tensor of the LiteRT run holds a NaN/inf: TF's kernels made it, LiteRT's do not")
        return f"{head}; {side}", None, None
    if found.cause == "uninitialized_variable":  # its fix is in the READ_VARIABLE note already
        return f"{head}; {found.cause_text()}; fix: see the READ_VARIABLE note", found, None
    if found.cause == "nonfinite_input" and not found.dropped:
        try:
            plan = first_working([clean_examples_fix(model, key, list(feeds))])
            return f"{head}; {found.cause_text()}; " + " ".join(plan.lines()), found, None
        except (RuntimeError, ValueError):
            pass
    return f"{head}; {found.to_text()}", found, None
