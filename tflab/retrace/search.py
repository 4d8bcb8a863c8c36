"""Fixes found by search when one retrace has several causes: each alone with the others held fixed, then together.

When one call changes several arguments (a shape and a Python number; two
Python numbers that change together), a candidate for one cause cannot be
judged while the other causes still retrace. For each trace with two or more
causes (or a cause plus a line that rebinds a tf.Variable's name):

1. each cause's candidates are run with every OTHER varying parameter held
   at the first call's value (signature and value): a candidate that then
   gives one trace and eager's outputs is "checked with the others held fixed";
2. sets of changes, one candidate per cause, are run on the user's real calls,
   smallest set first: the first whose trace count is the fewest any set
   reaches AND whose outputs equal eager's on every recorded call is the
   combined fix, printed as checked.

A cause whose own fix failed then prints the combined fix (its own candidate
named as tried first, and the held-fixed result as "also").
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping, Sequence

from tflab import fix as fx
from tflab.retrace.bench import LITERAL_DTYPES, Bench, Recorded, SignatureError, history_signature, spec_text
from tflab.retrace.diff import node_at, replace_at
from tflab.retrace.nodes import Node

__all__ = ["Change", "search_trace"]

_MAX_SETS = 64   # sets of changes run at most per trace (each costs one trace per call signature)


@dataclasses.dataclass(frozen=True)
class Change:
    """One candidate change for one cause.

    Attributes:
        cause: the parameter (or ``rebind``) it fixes.
        key: its memo key.
        text: as the user writes it.
        nodes: the change on a recorded call's TraceType trees (None: none).
        convert: ``{path: ("tensor"|"cast", dtype)}`` on the call's values.
        body: a rewritten function to run instead (a rebinding line made an assign).
    """

    cause: str
    key: str
    text: str
    nodes: Callable[[Mapping[str, Node]], Mapping[str, Node]] | None = None
    convert: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    body: Any = None


def _changes_for(r: Any, t: Any, calls: Sequence[Recorded]) -> list[Change]:
    p = r.parameter
    if r.kind in ("value", "flag", "string"):
        node = node_at(t.nodes or {}, p)
        kind_of = type(node.value) if node is not None and node.kind == "literal" else None
        out = []
        for dt in LITERAL_DTYPES.get(kind_of, ()):
            def nodes(n: Mapping[str, Node], dt: str = dt) -> Mapping[str, Node]:
                return replace_at(n, p, lambda m: Node("tensor", name="TensorSpec", shape=(), dtype=dt,
                                                       label=f"{dt}()") if m.kind == "literal" else m)
            out.append(Change(p, f"tensor:{p}:{dt}", f"{p} = tf.constant({p}, tf.{dt})", nodes, {p: ("tensor", dt)}))
        return out
    if r.kind in ("shape", "ragged_shape", "sparse_shape"):
        shapes = [node_at(c.nodes, p) for c in calls]
        shapes = [s.shape for s in shapes if s is not None and s.shape is not None]
        if not shapes or len({len(s) for s in shapes}) != 1:
            return []
        dims = tuple(d if all(s[i] == d for s in shapes) else None for i, d in enumerate(shapes[0]))

        def relax(n: Mapping[str, Node]) -> Mapping[str, Node]:
            return replace_at(n, p, lambda m: m._replace(shape=dims) if m.shape is not None and len(m.shape) == len(dims)
                              else m)
        shown = "[" + ", ".join("None" if d is None else str(d) for d in dims) + "]"
        return [Change(p, f"relax:{p}:{dims}", f"{p} traced as shape {shown}", relax)]
    return []


def _held(calls: Sequence[Recorded], keep: str, params: Sequence[str]) -> list[Recorded]:
    """The calls with every parameter in ``params`` but ``keep`` set to the first call's TraceType."""
    first = calls[0].nodes
    out = []
    for c in calls:
        nodes = dict(c.nodes)
        for q in params:
            if q != keep and q in nodes and q in first:
                nodes[q] = first[q]
        out.append(c._replace(nodes=nodes))
    return out


def _held_values(values: Any, keep: str, params: Sequence[str]) -> Any:
    """A copy of the case whose calls pass the first call's value for every parameter in ``params`` but ``keep``."""
    import inspect

    from tflab.retrace.values import CaseValues, ValueLog

    log = ValueLog()
    try:
        sig = inspect.signature(values.body)
        first = sig.bind(*values.log.calls[0][0], **values.log.calls[0][1]).arguments
        for a, k in values.log.calls:
            b = sig.bind(*a, **k)
            for q in params:
                if q != keep and q in b.arguments and q in first:
                    b.arguments[q] = first[q]
            log.calls.append((tuple(b.args), dict(b.kwargs)))
    except (TypeError, ValueError, IndexError):
        return None
    return CaseValues(values.body, log, values.world)


def _combine(changes: Sequence[Change]) -> tuple[Callable, dict, Any]:
    def nodes(c: Recorded) -> Mapping[str, Node]:
        n = c.nodes
        for ch in changes:
            if ch.nodes is not None:
                n = ch.nodes(n)
        return n
    convert: dict = {}
    body = None
    for ch in changes:
        convert.update(ch.convert)
        body = ch.body or body
    return nodes, convert, body


def _signature_text(changes: Sequence[Change], calls: Sequence[Recorded], transform: Callable) -> str:
    texts = [c.text for c in changes if not c.key.startswith("relax:")]
    if any(c.key.startswith("relax:") for c in changes):
        try:
            texts.insert(0, "input_signature=" + spec_text(history_signature([transform(c) for c in calls])))
        except SignatureError:
            texts.insert(0, "reduce_retracing=True (" + "; ".join(c.text for c in changes
                                                                   if c.key.startswith("relax:")) + ")")
    return "; ".join(texts)


def search_trace(t: Any, bench: Bench, calls: Sequence[Recorded], plans: Sequence[fx.FixPlan]) -> list[fx.FixPlan]:
    """``plans`` (one per reason of ``t``) with the causes searched together where one alone did not work.

    Args:
        t: the `Trace` with two or more reasons (or a reason and a rebinding line).
        bench: its bench (values included when kept).
        calls: the recorded call signatures the fixes run on.
        plans: each reason's own `FixPlan`, same order as ``t.details``.

    Returns:
        New plans: a reason whose own plan has no checked fix gets the combined
        fix as its fix when one was found (its own candidates kept as tried,
        the held-fixed result added); other plans are returned as they are.
    """
    details = list(t.details)
    causes: dict[str, list[Change]] = {}
    for r in details:
        for ch in _changes_for(r, t, calls):
            causes.setdefault(ch.cause, []).append(ch)
    for rb in getattr(bench, "rebinds", ()) or ():
        if rb.body is not None:
            causes.setdefault("rebind", [Change("rebind", f"rebind:{rb.line}", f"{rb.change} (line {rb.line})",
                                                body=rb.body)])
    need = [i for i, (r, p) in enumerate(zip(details, plans)) if not (p.fix is not None and p.fix.checked)
            and r.parameter in causes]
    if len(causes) < 2 or not (need or "rebind" in causes and any(not (p.fix and p.fix.checked) for p in plans)):
        return list(plans)
    params = [c for c in causes if c != "rebind"]
    held: dict[str, fx.Fix] = {}
    picked: dict[str, list[Change]] = {}
    for cause in params:
        if len(params) < 2:
            break
        hcalls = _held(calls, cause, params)
        hvals = _held_values(bench.values, cause, params) if bench.values is not None else None
        hb = dataclasses.replace(bench, calls=hcalls, values=hvals, memo={})
        for ch in causes[cause]:
            f = _run(hb, [ch], hcalls, f"held:{ch.key}",
                     how=f"re-traced a fresh tf.function of your function on your calls with "
                         f"{', '.join(q for q in params if q != cause)} held at call 1's value",
                     desc=f"{ch.text}, checked with {', '.join(q for q in params if q != cause)} held fixed "
                          f"(needed together with the fix for {', '.join(q for q in params if q != cause)})")
            # Held calls are made up (one parameter from call 1, another from call N): they count only
            # where eager ran them, so its outputs were compared (coupled parameters, e.g. x and y of
            # one batch, give calls eager rejects: no evidence either way).
            if f.checked and f.measured.get("values_kept", False):
                held[cause] = f
                picked[cause] = [ch]  # the combinations try this cause's working candidate only
                break
    combined = None
    tried_sets = 0
    names = list(causes)
    for size in range(1, len(names) + 1):
        for subset in itertools.combinations(names, size):
            for pick in itertools.product(*(picked.get(c, causes[c]) for c in subset)):
                tried_sets += 1
                if tried_sets > _MAX_SETS:
                    break
                f = _run(bench, list(pick), calls, "set:" + "+".join(ch.key for ch in pick),
                         how=f"ran a fresh tf.function of your function with these {size} change(s) together on "
                             f"{bench.your_calls()}", desc=f"change {size} thing(s) together", goal_one=True)
                if f.checked:
                    combined = f
                    break
            if combined is not None:
                break
        if combined is not None:
            break
    out = []
    for r, p in zip(details, plans):
        if p.fix is not None and p.fix.checked:
            out.append(p)
            continue
        extra = tuple(f for f in (held.get(r.parameter),) if f is not None)
        if combined is not None and len(combined.measured.get("set", ())) > 1:
            out.append(fx.FixPlan(combined, tuple(p.tried) + extra + (combined,)))
        elif extra:
            out.append(fx.FixPlan(extra[0], tuple(p.tried) + extra))
        else:
            out.append(p)
    return out


def _run(bench: Bench, changes: Sequence[Change], calls: Sequence[Recorded], key: str, *, how: str, desc: str,
         goal_one: bool = False) -> fx.Fix:
    from tflab.retrace.bench import traces_text

    transform, convert, body = _combine(changes)
    text = _signature_text(changes, calls, transform) if goal_one else changes[0].text

    def check() -> tuple[bool, str, dict]:
        o = bench.run(key, calls, transform=transform, body=body)
        if o.rejected or o.error:
            return False, o.rejected or o.error, {"traces": o.traces}
        measured = {"traces": o.traces, "set": [c.cause for c in changes]}
        if o.traces != 1:
            return False, traces_text(o, bench), measured
        vc = bench.values_check(key, calls, convert=convert, transform=transform, body=body)
        measured.update(vc.measured)
        return vc.ok, f"{traces_text(o, bench)}; {vc.text}" if vc.ok else f"{traces_text(o, bench)}, but {vc.text}", \
            measured

    return fx.attempt("code", text, desc, check, how=how)
