"""Why a tf.function traced again: a structured diff of TraceType trees.

A `tf.function` keeps a cache of ConcreteFunctions keyed by FunctionType: one
TraceType per parameter (``TensorSpec`` for a tensor, ``RaggedTensorSpec`` /
``SparseTensorSpec`` / any ``TypeSpec`` for a composite tensor or
ExtensionType, ``Literal`` for a Python number/str/bool/None, ``Weakref`` for
any other hashable Python object, ``List``/``Tuple``/``Dict``/``NamedTuple``/
``Attrs`` for containers, ``PerReplicaSpec`` for a tf.distribute value) and a
FunctionContext. A call whose FunctionType is not a subtype of a cached one
traces a new FuncGraph (TF 2.21 ``tensorflow/core/function/trace_type/
default_types.py``, ``tensorflow/core/function/polymorphism/type_dispatch.py``,
``tensorflow/python/eager/polymorphic_function/tracing_compilation.py``).

`tflab.retrace.nodes.node_of` walks the TraceType OBJECTS into a `Node` tree
once per trace (no repr is parsed); `reasons_between` / `make_trace` diff the new trace's tree
with the earlier traces' trees the way JAX's cache-miss explainer diffs its
structured cache key: context first, then tree structure, then leaf types,
ranking the candidates by how many differences they have. Each `Reason`
names the parameter path (``batch['boxes']``, ``args[1][0]``), the old and
new value, whether TF traced the new value exactly or relaxed it (and the
relaxed spec), and a fix that fits the kind of change and the options
already on (a fix never suggests an option that is set).

An earlier trace is compared by the FunctionType TF CACHED for it (its
``traced_as``, relaxed by ``reduce_retracing``), since that is what TF's
dispatch compared with: a dim already relaxed to None is never blamed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple, Sequence

from tflab.retrace.nodes import Node, collected, fmt_shape, function_type_inputs, node_of, nodes_of
from tflab.retrace.records import (FIXES, FIXES_WITH_REDUCE_RETRACING, NO_VARIABLE_CREATION,
                                   VARIABLE_CREATION, SINGLETON_VARIABLE, Reason, Trace)
from tflab.retrace.function_context import context_change, context_text  # noqa: F401 (re-exported)
from tflab.retrace.paths import like_trace, node_at, replace_at, same_types  # noqa: F401 (re-exported)


# ---------------------------------------------------------------------------
# The diff
# ---------------------------------------------------------------------------


def _child_path(path: str, node: Node, key: str) -> str:
    """``xs[0]`` / ``d['a']`` for List, Tuple and Dict; ``cfg.scale`` for NamedTuple/attrs/specs."""
    if node.kind in ("spec", "map") and node.name != "Dict":
        return f"{path}.{key.strip(chr(39))}"
    return f"{path}[{key}]"


def _kind_label(node: Node) -> str:
    if node.kind == "tensor":
        return f"tensor {node.label}"
    if node.kind == "literal":
        return f"Python value {node.label}"
    if node.kind == "seq":
        return f"{node.name.lower()} of {len(node.children)}"
    if node.kind == "map":
        return "dict" if node.name == "Dict" else node.name
    return node.label


def _shape_change(a: Any, b: Any) -> tuple[bool, str]:
    """Does shape ``b`` fall outside the traced shape ``a`` (None dims match any), and which dims."""
    if a is None:
        return False, ""
    if b is None:
        return True, ""
    if len(a) != len(b):
        return True, f" (rank {len(a)} -> {len(b)})"
    changed = [f"dim {i}: {x} -> {y}" for i, (x, y) in enumerate(zip(a, b)) if x is not None and x != y]
    if not changed:
        return False, ""
    return True, f" ({', '.join(changed)})" if len(a) > 1 else ""


class _Ctx(NamedTuple):
    reduce_retracing: bool = False
    has_signature: bool = False


def _fix(kind: str, ctx: _Ctx, relaxed: str = "") -> str:
    if ctx.reduce_retracing and kind in FIXES_WITH_REDUCE_RETRACING:
        return FIXES_WITH_REDUCE_RETRACING[kind]
    return FIXES[kind]


def _relaxed_spec(a: Node, b: Node) -> str:
    """``tf.TensorSpec([None, 3], tf.float32)``: ``b``'s spec with None where it differs from ``a``."""
    dims = b.shape
    if dims is not None and a.shape is not None and len(a.shape) == len(dims):
        dims = [y if x == y else None for x, y in zip(a.shape, dims)]
    shape = "None" if dims is None else "[" + ", ".join("None" if d is None else str(d) for d in dims) + "]"
    if b.kind == "ragged":
        extra = dict(b.children)
        rr, rsd = extra.get("ragged_rank"), extra.get("row_splits_dtype")
        return (f"tf.RaggedTensorSpec({shape}, tf.{b.dtype}, {rr.label if rr else 1}, "
                f"tf.{rsd.value if rsd else 'int64'})")
    if b.kind == "sparse":
        return f"tf.SparseTensorSpec({shape}, tf.{b.dtype})"
    return f"tf.TensorSpec({shape}, tf.{b.dtype})"


def _reason(path: str, kind: str, old: str, new: str, text: str, ctx: _Ctx = _Ctx(),
            t: Node | None = None, b: Node | None = None, fix: str | None = None) -> Reason:
    traced = relaxed = ""
    if t is not None and b is not None:
        if t == b:
            traced = "exact"
        else:
            traced, relaxed = "relaxed", t.label
            text += f"; TF traced it relaxed, as {t.label}"
    return Reason(parameter=path, kind=kind, old=old, new=new, text=text,
                  fix=fix if fix is not None else _fix(kind, ctx), traced=traced, relaxed=relaxed)


def _literal_kind(a: Any, b: Any) -> str:
    if isinstance(a, bool) and isinstance(b, bool):
        return "flag"
    if a is None or b is None:
        return "none"
    if isinstance(a, str) or isinstance(b, str):
        return "string" if isinstance(a, str) and isinstance(b, str) else "kind"
    if isinstance(a, (int, float, complex)) and isinstance(b, (int, float, complex)):
        return "value"
    return "kind" if type(a) is not type(b) else "value"


def _diff(path: str, a: Node, b: Node, out: list[Reason], ctx: _Ctx = _Ctx(),
          t: Node | None = None) -> None:
    """Appends one Reason per leaf where tree ``b`` (new) does not fit ``a`` (earlier, as cached).

    ``t`` is the new trace's TRACED node at the same path (relaxed by
    reduce_retracing), so each reason says how TF traced the new value.
    """
    if a == b:
        return
    same_class = a.kind == b.kind and (a.kind not in ("seq", "map", "spec") or a.name == b.name)
    if not same_class:
        if a.kind == "literal" and b.kind == "literal":
            pass
        else:
            k = "none" if (a.kind == "literal" and a.value is None) or (
                b.kind == "literal" and b.value is None) else "kind"
            out.append(_reason(path, k, _kind_label(a), _kind_label(b),
                               f"{path}: {_kind_label(a)} -> {_kind_label(b)}", ctx, t, b))
            return
    tkids = dict(t.children) if t is not None and t.kind == b.kind else {}
    if b.kind in ("tensor", "ragged", "sparse"):
        shape_kind = {"tensor": "shape", "ragged": "ragged_shape", "sparse": "sparse_shape"}[b.kind]
        what = {"tensor": "", "ragged": "ragged ", "sparse": "sparse "}[b.kind]
        if a.dtype != b.dtype:
            out.append(_reason(path, "dtype", a.dtype, b.dtype,
                               f"{path}: {what}dtype {a.dtype} -> {b.dtype}", ctx, t, b))
        changed, note = _shape_change(a.shape, b.shape)
        if changed:
            if not ctx.reduce_retracing:
                fix = (f"give the tf.function an input_signature with None for the dims that vary "
                       f"({path}: {_relaxed_spec(a, b)}), or use reduce_retracing=True")
            else:
                spec = _relaxed_spec(a, t if t is not None and t.kind == b.kind else b)
                fix = f"{FIXES_WITH_REDUCE_RETRACING[shape_kind].rsplit(' (', 1)[0]} ({path}: {spec})"
            out.append(_reason(path, shape_kind, fmt_shape(a.shape), fmt_shape(b.shape),
                               f"{path}: {what}shape {fmt_shape(a.shape)} -> {fmt_shape(b.shape)}{note}",
                               ctx, t, b, fix=fix))
        for (k, ca), (_, cb) in zip(a.children, b.children):
            if ca != cb:
                out.append(_reason(_child_path(path, Node("spec"), k), "spec", ca.label, cb.label,
                                   f"{path}: {k} {ca.label} -> {cb.label}", ctx, t, b))
    elif b.kind == "literal":
        kind = _literal_kind(a.value, b.value)
        out.append(_reason(path, kind, a.label, b.label, f"{path}: {a.label} -> {b.label}", ctx, t, b))
    elif b.kind == "object":
        if b.what in ("function", "lambda"):
            kind = "function"
            gone = "; the earlier one was garbage-collected" if collected(a) else ""
            text = (f"{path}: a new {'lambda' if b.what == 'lambda' else 'function object'} each call "
                    f"({b.label}); TF matches a function argument by identity{gone}")
        elif "bound_method" in (a.what, b.what):
            kind, text = "bound_method", (f"{path}: new object each call ({b.label}; "
                                          f"TF matches it by weak reference)")
        elif (collected(a) and isinstance(b.value, tuple) and b.value and b.value[0] == "eq"
              and a.name == b.name and a.label and a.label != b.label):
            # The earlier object is gone, but its value was recorded when TF traced it: a changed
            # value (TF matches such objects by ==) is the cause, not the garbage collection.
            kind, text = "object_value", (f"{path}: {a.label} -> {b.label} (TF matches it by ==; the "
                                          f"earlier object has since been garbage-collected)")
        elif collected(a):
            kind, text = "collected", (f"{path}: the object trace #N was made for was garbage-collected "
                                       f"(TF keeps a weak reference); now {b.label}")
        elif a.value[0] == "eq" and b.value[0] == "eq" and a.name == b.name:
            kind, text = "object_value", f"{path}: {a.label} -> {b.label} (TF matches it by ==)"
        else:
            kind, text = "object", (f"{path}: new object each call ({b.label}; TF matches it "
                                    f"by weak reference)")
        out.append(_reason(path, kind, a.label, b.label, text, ctx, t, b))
    elif b.kind == "per_replica":
        out.extend(_diff_per_replica_nodes(path, a, b))
    elif b.kind == "seq":
        if len(a.children) != len(b.children):
            what = "list" if b.name == "List" else "tuple"
            out.append(_reason(path, "length", str(len(a.children)), str(len(b.children)),
                               f"{path}: {what} length {len(a.children)} -> {len(b.children)}", ctx))
            return
        for (k, ca), (_, cb) in zip(a.children, b.children):
            _diff(_child_path(path, a, k), ca, cb, out, ctx, tkids.get(k))
    elif b.kind in ("map", "spec"):
        ka = [k for k, _ in a.children]
        kb = [k for k, _ in b.children]
        if sorted(ka) != sorted(kb):
            out.append(_reason(path, "keys", f"[{', '.join(ka)}]", f"[{', '.join(kb)}]",
                               f"{path}: {'dict ' if a.name == 'Dict' else a.name + ' '}keys "
                               f"[{', '.join(ka)}] -> [{', '.join(kb)}]", ctx))
            return
        cb_map = dict(b.children)
        for k, ca in a.children:
            cb = cb_map[k]
            if b.kind == "spec" and cb.kind in ("literal", "tensor") and ca != cb:
                if cb.kind == "tensor" and ca.kind == "tensor":
                    changed, note = _shape_change(ca.shape, cb.shape)
                    if not changed:
                        continue
                out.append(_reason(_child_path(path, a, k), "spec", ca.label, cb.label,
                                   f"{_child_path(path, a, k)}: {ca.label} -> {cb.label} "
                                   f"(a field of {b.name})", ctx, tkids.get(k), cb))
                continue
            _diff(_child_path(path, a, k), ca, cb, out, ctx, tkids.get(k))
    else:
        out.append(_reason(path, "kind", a.label, b.label, f"{path}: {a.label} -> {b.label}", ctx, t, b))


def _param_reasons(old: Mapping[str, Node], new: Mapping[str, Node], ctx: _Ctx = _Ctx(),
                   traced: Mapping[str, Node] | None = None) -> list[Reason]:
    """One Reason per change between two FunctionTypes' parameter trees (old as TF cached it)."""
    reasons: list[Reason] = []
    traced = traced or {}
    for name, node in new.items():
        if name not in old:
            reasons.append(_reason(name, "signature", "absent", node.label,
                                   f"{name}: new argument ({node.label})", ctx))
            continue
        if old[name] != node:
            _diff(name, old[name], node, reasons, ctx, traced.get(name))
    for name, node in old.items():
        if name not in new:
            reasons.append(_reason(name, "signature", node.label, "absent", f"{name}: no longer passed", ctx))
    return reasons


def reasons_between(old: Any, new: Any) -> list[Reason]:
    """The reasons a call with FunctionType ``new`` does not reuse the trace of ``old``.

    Args:
        old: the earlier FunctionType, as TF cached it: a TF ``FunctionType``
            (e.g. ``concrete_fn.function_type``), a ``{parameter: TraceType}``
            mapping, or (parameter, TraceType) pairs; TraceType text is parsed.
        new: the later one, in any of those forms.

    Returns:
        One `Reason` per change of a parameter's TraceType tree (a tensor's
        dtype and shape count separately), in parameter order; [] when ``new``
        fits ``old``.

    Example:

    >>> [r.text for r in reasons_between({"x": tf.TensorSpec([3])}, {"x": tf.TensorSpec([4])})]
    ['x: shape (3,) -> (4,)']
    """
    from tflab._api.argcheck import check_function_type

    check_function_type(old, "old", "reasons_between")
    check_function_type(new, "new", "reasons_between")
    return _param_reasons(nodes_of(old), nodes_of(new))


# Changes inside one structure (a dtype, shape or value) rank before changes of
# the structure itself (keys, length, kind, a parameter), as JAX ranks its
# cache-miss candidates: on a tie, the nearest trace has the smaller changes.
_STRUCTURE_KINDS = frozenset({"length", "keys", "kind", "signature", "none"})

# How many earlier traces a new trace is diffed with: the latest ones and the
# first, plus any with the same tree hash. Explaining a trace costs
# O(parameters × _WINDOW), not O(traces × parameters).
_WINDOW = 8


class _Candidate(NamedTuple):
    trace: Trace
    reasons: list[Reason]

    @property
    def rank(self) -> tuple[int, int, int]:
        return (len(self.reasons), sum(r.kind in _STRUCTURE_KINDS for r in self.reasons),
                -self.trace.index)


def _cached_nodes(p: Trace) -> dict[str, Node]:
    if p.traced_nodes is not None:
        return p.traced_nodes
    if p.nodes is not None:
        return p.nodes
    return nodes_of(p.traced_as or p.inputs)


def _window(previous: Sequence[Trace]) -> list[Trace]:
    if len(previous) <= _WINDOW + 1:
        return list(previous)
    return [previous[0], *previous[-_WINDOW:]]


def _ranked_candidates(new: Mapping[str, Node], candidates: Sequence[Trace], ctx: _Ctx = _Ctx(),
                       traced: Mapping[str, Node] | None = None) -> list[_Candidate]:
    return sorted((_Candidate(p, _param_reasons(_cached_nodes(p), new, ctx, traced))
                   for p in candidates), key=lambda c: c.rank)


def _explain(new: Mapping[str, Node], previous: Sequence[Trace], *, scope: str | None,
             context: str | None, previous_contexts: Sequence[str | None] | None,
             reduce_retracing: bool, outcome_known: bool,
             traced: Mapping[str, Node] | None = None
             ) -> tuple[str, int | None, list[Reason], _Candidate | None]:
    if not previous:
        return "first", None, [], None
    ctx = _Ctx(reduce_retracing=reduce_retracing)
    # TF's own re-trace: the first call traced with variable creation allowed,
    # created variables, then traced the same inputs with creation disabled
    # (polymorphic_function.Function._initialize / _call).
    if scope == NO_VARIABLE_CREATION and not any(p.scope == NO_VARIABLE_CREATION for p in _window(previous)):
        for p in reversed(previous):
            if p.scope == VARIABLE_CREATION and (p.nodes if p.nodes is not None else
                                                 nodes_of(p.inputs)) == dict(new):
                text = ("TF's own re-trace: the first call created tf.Variables, so TF traced "
                        "again with variable creation disabled (not caused by the inputs)")
                fix = FIXES["variable_creation"]
                if not outcome_known:
                    text += "; TF's log does not say whether this trace succeeded"
                    fix = FIXES["variable_creation_unknown"]
                r = Reason("", "variable_creation", VARIABLE_CREATION, NO_VARIABLE_CREATION, text, fix)
                return "variable_creation", p.index, [r], None
    window = _window(previous)
    same_scope = [p for p in window if scope is None or p.scope in (None, scope)] or window
    ranked = _ranked_candidates(new, same_scope, ctx, traced)
    nearest, reasons = ranked[0]
    reasons = [dataclasses.replace(r, text=r.text.replace("trace #N", f"trace #{nearest.index}"))
               for r in reasons]
    runner_up = None
    if len(ranked) > 1 and reasons and len(ranked[1].reasons) == len(reasons):
        runner_up = ranked[1]
        # A tie: headline the trace this call would hit once its reasons' changes are made
        # (measured on the TraceType trees: the call changed so equals that trace's).
        if not _hits(new, ranked[0]) and _hits(new, runner_up):
            runner_up, (nearest, reasons) = ranked[0], runner_up
            reasons = [dataclasses.replace(r, text=r.text.replace("trace #N", f"trace #{nearest.index}"))
                       for r in reasons]
    if not reasons:
        ctxs = previous_contexts or ()
        pos = nearest.index - previous[0].index  # traces are numbered in order…
        if not (0 <= pos < len(previous) and previous[pos] is nearest):  # …but failed ones are left out
            pos = next(i for i, p in enumerate(previous) if p is nearest)
        if context is not None and pos < len(ctxs) and ctxs[pos] is not None and ctxs[pos] != context:
            reasons = [_context_reason(ctxs[pos], context, nearest.index)]
        else:
            maybe_failed = "" if outcome_known else f", or trace #{nearest.index} raised"
            reasons = [Reason("", "unexplained", "", "",
                              f"same input TraceTypes as trace #{nearest.index}: TF could not reuse it "
                              f"(an argument object was garbage-collected, the cache was cleared"
                              f"{maybe_failed})", FIXES["unexplained"])]
    return "retrace", nearest.index, reasons, runner_up


def _hits(new: Mapping[str, Node], cand: "_Candidate") -> bool:
    earlier = _cached_nodes(cand.trace)
    fixed = dict(new)
    for r in cand.reasons:
        fixed = like_trace(fixed, r, earlier)
    return same_types(fixed, earlier)


def _context_reason(old: Any, new: Any, index: int) -> Reason:
    """The part of TF's FunctionContext (its cache key beside the FunctionType) that differs."""
    changes = context_change(old, new) if isinstance(old, Mapping) and isinstance(new, Mapping) else []
    if not changes:
        return Reason("", "context", str(old), str(new), "same inputs, but called from a different "
                      "FunctionContext (device scope, outer graph or strategy)", FIXES["context"])
    parts = [c[1] for c in changes]
    text = (f"same input TraceTypes as trace #{index}, but TF's cache key differs in its FunctionContext: "
            + context_text(changes))
    if parts == ["save context"]:
        fix = ("nothing to fix in your calls: tf.saved_model.save traces each tf.function again inside its "
               "save context, once per saved signature")
    else:
        fix = FIXES["context"]
    return Reason("", "context", "; ".join(f"{c[0]}={c[2]}" for c in changes),
                  "; ".join(f"{c[0]}={c[3]}" for c in changes), text, fix)


def explain(inputs: Any, previous: Sequence[Trace], *, scope: str | None = None,
            context: str | None = None, previous_contexts: Sequence[str | None] | None = None,
            reduce_retracing: bool = False, outcome_known: bool = True,
            traced_as: Any = None) -> tuple[str, int | None, list[Reason]]:
    """Explains a new trace against the earlier ones of the same function.

    Diffs the new FunctionType's tree with each candidate earlier trace's
    CACHED tree and keeps the nearest: the fewest changes (a tensor's dtype
    and shape count separately); on a tie, the fewest changes of structure;
    then the latest trace. The candidates are the first trace and the
    `_WINDOW` latest ones, so the cost does not grow with the number of traces.

    Args:
        inputs: the new trace's lookup FunctionType (a TF FunctionType, or
            (parameter, TraceType) pairs).
        previous: earlier `Trace` records of the same function, oldest first.
        scope: the new trace's FunctionContext scope_type name, if known.
        context: the new trace's FunctionContext ``context`` text, if known.
        previous_contexts: the ``context`` text of each earlier trace.
        reduce_retracing: the tf.function has ``reduce_retracing=True``: a
            shape change's fix does not suggest turning it on.
        outcome_known: False when the caller cannot tell whether the trace
            succeeded (TF's log).
        traced_as: the FunctionType TF traced for this call (relaxed), if known.

    Returns:
        (kind, index of the trace compared with or None, reasons).
    """
    traced = nodes_of(traced_as) if traced_as is not None else None
    return _explain(nodes_of(inputs), previous, scope=scope, context=context,
                    previous_contexts=previous_contexts, reduce_retracing=reduce_retracing,
                    outcome_known=outcome_known, traced=traced)[:3]


def _failure_reasons(auto_kind: str, reasons: list[Reason], error: str) -> list[Reason]:
    """The reasons of a trace that raised ``error`` (one line, ``Type: message``)."""
    kept = [r for r in reasons if r.kind not in ("variable_creation", "unexplained")]
    if SINGLETON_VARIABLE in error:
        if auto_kind == "variable_creation":
            text = ("raised ValueError because the function creates a tf.Variable on every trace: "
                    "after the first trace created one, TF traced again with variable creation "
                    f"disabled (TF: \"{SINGLETON_VARIABLE}\")")
        else:
            text = ("raised ValueError because the function created a tf.Variable on a trace "
                    f"after the first call (TF: \"{SINGLETON_VARIABLE}\")")
        return kept + [Reason("", "variable_per_trace", "", "ValueError", text,
                              FIXES["variable_per_trace"])]
    short = error if len(error) <= 200 else error[:197] + "..."
    return kept + [Reason("", "error", "", short.split(":", 1)[0], f"raised {short}", FIXES["error"])]


def _pairs_text(function_type: Any) -> tuple[tuple[str, str], ...]:
    if function_type is None:
        return ()
    if isinstance(function_type, Mapping) and all(isinstance(v, Node) for v in function_type.values()):
        return tuple((str(n), v.label) for n, v in function_type.items())
    if hasattr(function_type, "parameters"):
        return function_type_inputs(function_type)
    items = function_type.items() if isinstance(function_type, Mapping) else function_type
    return tuple((str(n), str(t) if isinstance(t, str) else repr(t)) for n, t in items)


def make_trace(index: int, inputs: Any, previous: Sequence[Trace], *,
               scope: str | None = None, traced_as: Any = None,
               call: int = 0, kind: str | None = None, context: str | None = None,
               previous_contexts: Sequence[str | None] | None = None,
               reduce_retracing: bool = False, outcome_known: bool = True,
               error: str | None = None, options: Mapping[str, Any] | None = None,
               site: str = "", inputs_text: Any = None, traced_text: Any = None) -> Trace:
    """Builds a `Trace` with its reasons from a trace's FunctionTypes.

    Args:
        index: the trace's 1-based number.
        inputs: the FunctionType TF looked up: a TF ``FunctionType`` or
            (parameter, TraceType) pairs (TraceType text is parsed).
        previous: the function's earlier traces, oldest first.
        traced_as: the FunctionType TF traced (relaxed by reduce_retracing), if known.
        error: for a trace that raised, the error as one line; the kind is "failed".
        options: the tf.function options in force (from the `TraceEvent`).
        site: the user's call site, ``file:line``.
        inputs_text, traced_text: (parameter, TraceType repr) pairs for JSON,
            when ``inputs`` / ``traced_as`` are already `Node` trees.
        The others: as for `explain` and `Trace`.

    Returns:
        The `Trace`.
    """
    new = nodes_of(inputs)
    traced = nodes_of(traced_as) if traced_as is not None else None
    auto_kind, compared, reasons, runner_up = _explain(
        new, previous, scope=scope, context=context, previous_contexts=previous_contexts,
        reduce_retracing=reduce_retracing, outcome_known=outcome_known, traced=traced)
    if error is not None:
        kind = "failed"
        reasons = _failure_reasons(auto_kind, reasons, error)
    elif kind == "concrete" and auto_kind != "variable_creation":
        reasons = [] if auto_kind == "first" else reasons
    else:
        kind = kind or auto_kind
    in_text = tuple(inputs_text) if inputs_text is not None else _pairs_text(inputs)
    tr_text = (tuple(traced_text) if traced_text is not None else
               _pairs_text(traced_as) if traced_as is not None else None)
    relaxed = traced is not None and traced != new
    return Trace(index=index, kind=kind, reasons=[r.text for r in reasons],
                 fixes=[r.fix for r in reasons], inputs=in_text, compared_with=compared,
                 scope=scope, traced_as=tr_text if relaxed else None,
                 call=call, details=tuple(reasons),
                 runner_up=runner_up.trace.index if runner_up else None,
                 runner_up_reasons=tuple(r.text.replace("trace #N", f"trace #{runner_up.trace.index}")
                                         for r in runner_up.reasons) if runner_up else (),
                 labels=tuple((n, c.label) for n, c in new.items()),
                 traced_labels=tuple((n, c.label) for n, c in traced.items()) if relaxed else (),
                 nodes=new, traced_nodes=traced if traced is not None else new,
                 options=dict(options) if options else None, site=site)


# ---------------------------------------------------------------------------
# PerReplicaSpec: the TraceType of a tf.distribute dataset element
# ---------------------------------------------------------------------------

PER_REPLICA_FIX = ("give the tf.function input_signature=dist_dataset.element_spec (a PerReplicaSpec "
                   "with None batch dims: one trace for every batch), or batch the dataset with "
                   "drop_remainder=True so every step has the same per-replica shape")


def describe_per_replica(spec: Any) -> str:
    """A short label for a ``PerReplicaSpec`` (object or repr): ``per-replica float32(2, 4) ×2``."""
    node = node_of(spec)
    return node.label if node.kind == "per_replica" else str(spec)


def _diff_per_replica_nodes(path: str, a: Node, b: Node) -> list[Reason]:
    ka, kb = [c for _, c in a.children], [c for _, c in b.children]
    if len(ka) != len(kb):
        return [Reason(path, "replicas", str(len(ka)), str(len(kb)),
                       f"{path}: {len(ka)} replicas -> {len(kb)}",
                       "call it under the same strategy (same number of replicas) every time")]
    out = []
    da, db = sorted({c.dtype for c in ka}), sorted({c.dtype for c in kb})
    if da != db:
        out.append(Reason(path, "dtype", "/".join(da), "/".join(db),
                          f"{path}: per-replica dtype {'/'.join(da)} -> {'/'.join(db)}",
                          "cast the dataset to one dtype (dataset.map(lambda x: tf.cast(x, ...)))"))
    sa, sb = [fmt_shape(c.shape) for c in ka], [fmt_shape(c.shape) for c in kb]
    changed = [(i, x, y) for i, (ca, cb, x, y) in enumerate(zip(ka, kb, sa, sb))
               if _shape_change(ca.shape, cb.shape)[0]]
    if changed:
        one_a, one_b = len(set(sa)) == 1, len(set(sb)) == 1
        if one_a and one_b:
            text = f"{path}: per-replica shape {sa[0]} -> {sb[0]}"
        else:
            what = "; ".join(f"replica {i} {x} -> {y}" for i, x, y in changed)
            text = f"{path}: per-replica shape {what} (of {len(ka)} replicas)"
        out.append(Reason(path, "per_replica_shape", sa[0] if one_a else "[" + ", ".join(sa) + "]",
                          sb[0] if one_b else "[" + ", ".join(sb) + "]", text, PER_REPLICA_FIX))
    if not out:
        out.append(Reason(path, "kind", a.label, b.label, f"{path}: {a.label} -> {b.label}", PER_REPLICA_FIX))
    return out


def diff_per_replica(path: str, old: Any, new: Any) -> list[Reason]:
    """Reasons for a change between two ``PerReplicaSpec``s (objects or reprs) of parameter ``path``.

    Returns:
        `Reason`s: ``x: per-replica shape (2, 4) -> (1, 4)`` (kind
        ``per_replica_shape``), a per-replica dtype change, or a change in the
        number of replicas; each fix names ``dist_dataset.element_spec`` or
        ``drop_remainder=True``.
    """
    a, b = node_of(old), node_of(new)
    if a.kind != "per_replica" or b.kind != "per_replica":
        return [Reason(path, "kind", a.label, b.label, f"{path}: {a.label} -> {b.label}", PER_REPLICA_FIX)]
    return _diff_per_replica_nodes(path, a, b)

