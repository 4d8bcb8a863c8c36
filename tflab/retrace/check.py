"""Retrace fixes, run on the user's own recorded calls before they are printed.

Every fix the probe, ``tflab retrace`` and the distributed probe print is a
`tflab.fix.Fix`. Where the fix can be applied, it is: a fresh ``tf.function``
of the user's Python function is built with the change (an
``input_signature`` chosen from the WHOLE call history, ``reduce_retracing=True``,
a ``tf.cast`` or a ``tf.constant`` in place of a Python value, one object in
place of a new object per call, the structure an earlier trace had) and it
is traced on every call signature recorded, rebuilt from the recorded
TraceTypes (`Node` trees): a ``tf.TensorSpec`` per tensor, the literal per
Python value, the live object per object. No argument VALUE is needed and
nothing is run: ``get_concrete_function`` traces once, then binds each
recorded call (TF's ``function_type_utils.bind_function_inputs``), and the
trace count is TF's ``experimental_get_tracing_count()`` (its cache entries).

A candidate TF rejects (``Binding inputs to tf.function failed``) or whose
trace raises is "failed", and `tflab.fix.first_working` goes on to the next.

Cost: a candidate costs one trace of the user's function per trace it makes
(an input_signature candidate: one), plus one bind per recorded signature
(well under a millisecond each); results are memoized per candidate and
call set, so re-reading a report re-traces nothing. Checking runs the
function's Python body once more per candidate tried: a Python side effect in
it (print, a counter) runs then.

It sits above `tflab.retrace.diff` (whose path, "like trace #P" and
FunctionContext helpers it uses) and below the log and the probe.
The recorded calls and the bench that traces a candidate on them are
`tflab.retrace.bench` (their names are importable from here too).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from tflab import fix as fx
from tflab.retrace.diff import like_trace, node_at, replace_at
from tflab.retrace.nodes import Node
from tflab.retrace.bench import (  # noqa: F401 (re-exported)
    Bench, DATA_CHANGING, NotRebuilt, Outcome, Recorded, SignatureError, LITERAL_DTYPES, call_args,
    error_text, first_line, live_object, enclosing_scope, fresh_optimizer, has_int_literal,
    history_signature, keras_model, keras_optimizer, measured_fix, spec_text, traces_text, value_of)

__all__ = ["Recorded", "Bench", "NotRebuilt", "spec_text", "history_signature", "enclosing_scope",
           "keras_optimizer", "plan_fixes", "recorded_calls"]

# ---------------------------------------------------------------------------
# The candidates for each kind of reason, and the planner
# ---------------------------------------------------------------------------


def _tensor_paths(node: Node, path: str) -> list[tuple[str, str]]:
    if node.kind in ("tensor", "ragged", "sparse"):
        return [(path, node.dtype)]
    out = []
    for k, c in node.children:
        if node.kind == "seq" or node.name == "Dict":
            out.extend(_tensor_paths(c, f"{path}[{k}]"))
        elif node.kind == "map":
            out.extend(_tensor_paths(c, f"{path}.{k}"))
    return out


def varying_dtypes(calls: Sequence[Recorded]) -> dict[str, str]:
    """path -> the first call's dtype, for every tensor whose dtype differs between calls."""
    first: dict[str, str] = {}
    varies: set[str] = set()
    for c in calls:
        for name, node in c.nodes.items():
            for p, dt in _tensor_paths(node, name):
                if p in first and first[p] != dt:
                    varies.add(p)
                first.setdefault(p, dt)
    return {p: first[p] for p in first if p in varies}


_WIDTH_ORDER = ("float64", "float32", "bfloat16", "float16", "int64", "uint64", "int32", "uint32", "int16",
                "uint16", "int8", "uint8", "bool")


def _kind_rank(dtype: str) -> int:
    """Floats (and complex) first, then integers, then bool and the rest."""
    if dtype.startswith(("float", "bfloat", "complex")):
        return 0
    if dtype.startswith(("int", "uint")):
        return 1
    return 2


def _widest_first(dtype: str) -> int:
    """Sort key: a dtype that holds the others' values first (floats, then integers, wider first)."""
    return _WIDTH_ORDER.index(dtype) if dtype in _WIDTH_ORDER else len(_WIDTH_ORDER)


def _cast(casts: Mapping[str, str]) -> Callable[[Recorded], dict[str, Node]]:
    def transform(c: Recorded) -> dict[str, Node]:
        nodes = dict(c.nodes)
        for p, dt in casts.items():
            nodes = replace_at(nodes, p, lambda n, dt=dt: n._replace(dtype=dt) if n.kind in ("tensor", "ragged", "sparse") else n)
        return nodes
    return transform


def _casts(casts: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """The same casts as a `tflab.retrace.values.convert_call` spec: what the user's call passes then."""
    return {p: ("cast", dt) for p, dt in casts.items()}


def _cast_text(casts: Mapping[str, str]) -> str:
    return ", ".join(f"tf.cast({p}, tf.{dt})" for p, dt in casts.items())


def _fewer(bench: Bench) -> Callable[[Outcome], bool]:
    return lambda o: o.traces < bench.traces


class _Planner:
    def __init__(self, traces: Sequence[Any], bench: Bench):
        self.traces = {t.index: t for t in traces}
        self.bench = bench
        self.cache: dict = {}

    def calls_for(self, t: Any) -> list[Recorded]:
        calls = self.bench.ok_calls
        if t.kind == "failed":
            calls = calls + [c for c in self.bench.calls if c.trace == t.index and not c.ok]
        return calls

    # -- input_signature / reduce_retracing --------------------------------
    def signature(self, t: Any, r: Any) -> fx.FixPlan:
        key = ("sig", t.index)
        if key in self.cache:
            return self.cache[key]
        b = self.bench
        calls = self.calls_for(t)
        from tflab.retrace.keras_owned import keras_owned, keras_plan

        module = keras_owned(b.body)
        if module is not None:  # Keras' own step function: fixes at the user's call, never a signature on it
            self.cache[key] = keras_plan(b, calls, module)
            return self.cache[key]
        rr_on = bool(b.options.get("reduce_retracing"))
        desc = ("reduce_retracing is already on (TF relaxed the dims that differ, see 'traced as'); to skip "
                "this trace too, give the tf.function an input_signature"
                if rr_on else "give the tf.function an input_signature")
        casts = varying_dtypes(calls)
        transform = _cast(casts) if casts else None
        cast_note = f", with {_cast_text(casts)} before the call" if casts else ""
        how = (f"re-traced a fresh tf.function of your function with this input_signature on the "
               f"{len(calls)} call signature(s) {b.your_calls()} used")
        cands: list[Callable[[], fx.Fix]] = []
        seen: set[str] = set()

        def sig_candidate(nodes_list: list, int_as: str, label: str) -> None:
            try:
                sig = history_signature(nodes_list, int_as)
            except SignatureError as e:
                cands.append(lambda e=e: fx.unchecked("input_signature", "", desc, str(e)))
                return
            text = "input_signature=" + spec_text(sig)
            if text in seen:
                return
            seen.add(text)
            cands.append(lambda sig=sig, text=text: measured_fix(
                "input_signature", text + cast_note, desc, b, f"sig:{text}:{sorted(casts.items())}", calls,
                input_signature=sig, transform=transform, how=how, convert=_casts(casts),
                goal=lambda o: o.traces == 1 or o.traces < b.traces,
                summary=lambda o: traces_text(o, b)))

        tr = [transform(c) if transform else c.nodes for c in calls]
        compared = self.traces.get(t.compared_with)
        if compared is not None and compared.nodes is not None and t.nodes is not None:
            # The spec relaxed between this trace and the one it is compared with only (the
            # obvious change): tried first, so a report shows why it is not the fix.
            pair = dict(t.nodes)
            old = compared.traced_nodes or compared.nodes
            for reason in t.details:
                if reason.kind in ("shape", "ragged_shape", "sparse_shape"):
                    a, n = node_at(old, reason.parameter), node_at(pair, reason.parameter)
                    if a is not None and n is not None and a.shape is not None and n.shape is not None \
                            and len(a.shape) == len(n.shape):
                        dims = tuple(x if x == y else None for x, y in zip(a.shape, n.shape))
                        pair = replace_at(pair, reason.parameter, lambda m, d=dims: m._replace(shape=d))
            p0 = Recorded(0, 0, pair)
            sig_candidate([transform(p0) if transform else pair], "int32", "pair")
        sig_candidate(tr, "int32", "history")
        if has_int_literal(tr):
            sig_candidate(tr, "float32", "history, ints as float32")
        rr = None
        if not rr_on and not b.options.get("input_signature"):
            rr = (lambda: measured_fix(
                "option", "reduce_retracing=True", "let TF relax the dims that vary", b, "rr", calls,
                reduce_retracing=True, how=f"re-traced a fresh tf.function(..., reduce_retracing=True) of your "
                f"function on the {len(calls)} call signature(s) {b.your_calls()} used, in order",
                goal=_fewer(b), summary=lambda o: traces_text(o, b)))
        plan = fx.first_working(cands)
        if rr is not None and not (plan.fix is not None and plan.fix.checked):
            # TF's own alternative, run only when no input_signature worked (it costs a trace per shape)
            plan = fx.first_working(list(plan.tried) + [rr])
        self.cache[key] = plan
        return plan

    # -- one dtype ------------------------------------------------------------
    def dtype(self, t: Any, r: Any) -> fx.FixPlan:
        b = self.bench
        calls = self.calls_for(t)
        desc = "cast it to one dtype before the call"
        how = f"re-traced a fresh tf.function of your function on {b.your_calls()}, cast so"
        cands = []
        options = {"reduce_retracing": True} if b.options.get("reduce_retracing") else {}
        # One target for every trace of a history: a float dtype before an integer one (casting a float64
        # 4.5 to the int32 of another trace changes the value), then the dtype most
        # recorded calls passed, then the wider; traces of one history now all name the same target.
        seen = [dt for c in b.calls for name, node in c.nodes.items() for p, dt in _tensor_paths(node, name)
                if p == r.parameter]
        counts = {dt: seen.count(dt) for dt in dict.fromkeys(seen + [r.old, r.new])}
        for dt in sorted(counts, key=lambda d: (_kind_rank(d), -counts[d], _widest_first(d))):
            casts = {r.parameter: dt}
            cands.append(lambda casts=casts: measured_fix(
                "cast", _cast_text(casts), desc, b, f"cast:{sorted(casts.items())}", calls,
                transform=_cast(casts), how=how, goal=_fewer(b), summary=lambda o: traces_text(o, b),
                convert=_casts(casts), **options))
        every = varying_dtypes(calls)
        if len(every) > 1:
            cands.append(lambda: measured_fix(
                "cast", _cast_text(every), "cast every input whose dtype varies to one dtype before the call",
                b, f"cast:{sorted(every.items())}", calls, transform=_cast(every), how=how, goal=_fewer(b),
                convert=_casts(every),
                summary=lambda o: traces_text(o, b), **options))
        return fx.first_working(cands)

    # -- a Python value -> a tensor -------------------------------------------
    def tensor(self, t: Any, r: Any) -> fx.FixPlan:
        b = self.bench
        calls = self.calls_for(t)
        node = node_at(t.nodes or {}, r.parameter)
        kind_of = type(node.value) if node is not None and node.kind == "literal" else None
        dtypes = LITERAL_DTYPES.get(kind_of, ())
        desc = {"flag": "pass tf.constant(flag) and branch with tf.cond (AutoGraph converts a Python `if` on it)",
                "string": "pass a tf.string tensor, not a Python str"}.get(
            r.kind, "pass a tensor, not a Python number: a tensor's value is not part of its TraceType")
        cands = []
        for dt in dtypes:
            def transform(c: Recorded, dt: str = dt) -> dict[str, Node]:
                return replace_at(c.nodes, r.parameter, lambda n: Node("tensor", name="TensorSpec", shape=(),
                                                                        dtype=dt, label=f"{dt}()")
                                  if n.kind == "literal" else n)
            cands.append(lambda dt=dt, transform=transform: measured_fix(
                "code", f"{r.parameter} = tf.constant({r.parameter}, tf.{dt})", desc, b,
                f"tensor:{r.parameter}:{dt}", calls, transform=transform, convert={r.parameter: ("tensor", dt)},
                how=f"re-traced a fresh tf.function of your function on {b.your_calls()} with {r.parameter} "
                    f"as a tf.{dt} tensor", goal=_fewer(b), summary=lambda o: traces_text(o, b)))
        if not cands:
            return fx.first_working([fx.unchecked("code", "", desc, f"no tensor dtype for a Python "
                                                  f"{getattr(kind_of, '__name__', 'value')}")])
        return fx.first_working(cands)

    # -- one object, built once -----------------------------------------------
    def same_object(self, t: Any, r: Any) -> fx.FixPlan:
        b = self.bench
        calls = self.calls_for(t)
        live = None
        for c in reversed(calls):
            n = node_at(c.nodes, r.parameter)
            if n is not None and n.kind == "object" and live_object(n) is not None:
                live = n
                break
        obj = live_object(live) if live is not None else None
        what = {"function": "function", "bound_method": "bound method"}.get(r.kind, "object")
        where = ""
        qual = getattr(obj, "__qualname__", "") if obj is not None else ""
        scope = enclosing_scope(qual) if qual else None
        if scope is not None:
            where = f"; it is made inside `{scope[0]}`: make it once, {scope[1]}"
        if r.kind == "bound_method":
            desc = ("bind the method once outside the loop (fn = obj.method) and pass that same object every "
                    "call: TF keeps only a weak reference to an argument object")
        elif r.kind == "function":
            from tflab.retrace.records import FIXES

            desc = FIXES["function"] + where
        else:
            from tflab.retrace.records import FIXES

            desc = FIXES[r.kind] + where
        if obj is None:
            return fx.first_working([fx.unchecked("move", "", desc, f"every {what} passed as {r.parameter} has "
                                                  "been garbage-collected, so tflab cannot pass one again")])

        def transform(c: Recorded) -> dict[str, Node]:
            return replace_at(c.nodes, r.parameter, lambda n: live if n.kind == "object" else n)

        return fx.first_working([lambda: measured_fix(
            "move", "", desc, b, f"same:{r.parameter}:{id(obj)}", calls, transform=transform, values=False,
            how=f"re-traced a fresh tf.function of your function on {b.your_calls()} with one {what} as "
                f"{r.parameter} ({live.label})", goal=_fewer(b), summary=lambda o: traces_text(o, b))])

    # -- the structure an earlier trace had ------------------------------------
    def like(self, t: Any, r: Any) -> fx.FixPlan:
        b = self.bench
        p = self.traces.get(t.compared_with)
        from tflab.retrace.records import FIXES

        desc = FIXES.get(r.kind, FIXES["kind"])
        change = {"keys": f"{r.parameter} with the keys {r.old}, as at trace #{t.compared_with}",
                  "length": f"{r.parameter} with {r.old} item(s), as at trace #{t.compared_with}",
                  "kind": f"{r.parameter} as {r.old}, as at trace #{t.compared_with}",
                  "none": f"{r.parameter} as {r.old}, as at trace #{t.compared_with}",
                  "signature": f"the arguments of trace #{t.compared_with}"}.get(r.kind, "")
        if p is None or p.nodes is None or t.nodes is None:
            return fx.first_working([fx.unchecked("code", change, desc, "the earlier trace's TraceTypes are not recorded")])
        earlier = p.traced_nodes or p.nodes
        fixed = like_trace(t.nodes, r, earlier)
        mine = Recorded(t.index, t.call, fixed)
        theirs = Recorded(p.index, p.call, p.nodes)
        name = f"call {t.call}" if t.call else f"trace #{t.index}"

        def run() -> fx.Fix:
            f = measured_fix(
                "code", change, desc, b, f"like:{t.index}:{r.parameter}:{r.kind}", [theirs, mine],
                transform=lambda c: c.nodes, values=False, how=f"traced a fresh tf.function of your function on trace "
                f"#{p.index}'s call, then on {name} changed so",
                goal=lambda o: o.traces == 1,
                summary=lambda o: (f"{name} then hits trace #{p.index}'s graph (1 trace for both)" if o.traces == 1
                                   else f"{name} still traces again ({o.traces} traces)"))
            if f.checked and r.kind in DATA_CHANGING:
                # A hit on the cache is measured, but this call's own data is not what runs: keys or
                # items dropped (or None for a value). That it still computes what the user needs is
                # not something a trace count can check ("checked" fixes that drop `b`).
                return fx.unchecked("code", change, desc, f"the trace count is measured: {f.result}; but it drops "
                                    f"{DATA_CHANGING[r.kind]} this call passes: only a fix if your function "
                                    "does not need them")
            return f

        return fx.first_working([run])

    # -- a Keras optimizer's first apply_gradients ------------------------------
    def optimizer(self, t: Any, r: Any) -> fx.FixPlan | None:
        nodes = t.nodes or {}
        opt_path = model_path = None
        opt = model = None
        for name, n in nodes.items():
            o = live_object(n) if n.kind == "object" else None
            if o is not None and opt is None and keras_optimizer(o):
                opt_path, opt = name, o
            elif o is not None and model is None and keras_model(o):
                model_path, model = name, o
        if opt is None:
            return None
        b = self.bench
        body = b.body
        m = model_path or "model"
        o_ = opt_path

        def args_with(optimizer: Any) -> tuple[list, dict]:
            return call_args(body, nodes, {o_: optimizer})

        def experiment(build_first: bool, per_experiment: bool) -> tuple[bool, str]:
            import tensorflow as tf

            f = tf.function(body)
            a, k = args_with(fresh_optimizer(opt))
            try:
                f.get_concrete_function(*a, **k)
            except (KeyboardInterrupt, SystemExit, NotRebuilt):
                raise
            except Exception as e:  # noqa: BLE001 - the user's step may raise anything
                if not (build_first or per_experiment):
                    raise
                return False, f"the first experiment raised {error_text(e)}"
            second = fresh_optimizer(opt)
            if build_first:
                if model is None:
                    raise NotRebuilt("no Keras model among the arguments to build the optimizer for")
                second.build(model.trainable_variables)
            g = tf.function(body) if per_experiment else f
            a, k = args_with(second)
            try:
                g.get_concrete_function(*a, **k)
            except (KeyboardInterrupt, SystemExit, NotRebuilt):
                raise
            except Exception as e:  # noqa: BLE001
                if not (build_first or per_experiment):
                    raise
                return False, f"the second experiment raised {error_text(e)}"
            return True, "the second experiment traces without the ValueError"

        def baseline() -> str | None:
            try:
                experiment(False, False)
            except ValueError as e:
                return None if "singleton" in str(e) else f"raised {first_line(e)}"
            except NotRebuilt as e:
                return str(e)
            return "the copy did not reproduce the ValueError"

        if body is None:
            return None
        why = baseline()
        how = (f"traced your function in a fresh tf.function as two experiments on your {m} (a new "
               f"{type(opt).__name__} each, like yours); without the change it raised the singleton-variable "
               f"ValueError")
        if why is not None:
            return fx.first_working([fx.unchecked("optimizer_build", f"{o_}.build({m}.trainable_variables)",
                                                  "build the optimizer before the loop", why)])
        return _all_of([
            lambda: fx.attempt("optimizer_build", f"{o_}.build({m}.trainable_variables)",
                               f"the {type(opt).__name__} creates its slot variables in its first apply_gradients, "
                               f"inside the tf.function: build it before the training loop",
                               lambda: experiment(True, False), how=how),
            lambda: fx.attempt("move", f"step = tf.function(train_step) per {m}",
                               "make a new tf.function per experiment (per model and optimizer)",
                               lambda: experiment(False, True), how=how),
        ])

    # -- the dispatch ---------------------------------------------------------
    def plan(self, t: Any, r: Any) -> fx.FixPlan:
        k = r.kind
        try:
            if k in ("shape", "ragged_shape", "sparse_shape", "spec"):
                return self.signature(t, r)
            if k == "dtype" and r.parameter and "per-replica" not in r.text:
                return self.dtype(t, r)
            if k in ("value", "flag", "string"):
                return self.tensor(t, r)
            if k in ("function", "bound_method", "object", "collected"):
                return self.same_object(t, r)
            if k in ("keys", "kind", "length", "signature", "none") and r.parameter:
                return self.like(t, r)
            if k == "variable_per_trace":
                plan = self.optimizer(t, r)
                if plan is not None:
                    return plan
        except NotRebuilt as e:
            return fx.first_working([fx.unchecked(k, "", r.fix, str(e))])
        return fx.first_working([fx.unchecked(_UNCHECKED_KIND.get(k, k), "", r.fix, _WHY.get(k, _WHY_DEFAULT))])


_UNCHECKED_KIND = {"variable_creation": "none", "variable_creation_unknown": "none", "error": "code",
                   "context": "none", "unexplained": "code", "object_value": "code",
                   "per_replica_shape": "input_signature", "replicas": "code", "variable_per_trace": "move"}
_WHY = {
    "variable_creation": "TF's own re-trace: there is nothing to change",
    "error": "the trace raised; its diagnosis names the line to change",
    "context": "the call's context is TF's, not an argument tflab can change",
    "unexplained": "no argument differs, so there is no change to try",
    "object_value": "it needs a change to your class (__tf_tracing_type__) or to what you pass",
    "per_replica_shape": "tflab does not rebuild a distributed dataset here",
    "replicas": "it needs another strategy",
    "variable_per_trace": "tflab cannot move your tf.Variable for you",
}
_WHY_DEFAULT = "tflab cannot apply this change to your case"


def _all_of(candidates: Sequence[Callable[[], fx.Fix]]) -> fx.FixPlan:
    """Every candidate run (alternatives the user may choose between); the first that worked is the fix."""
    tried = [c() for c in candidates]
    first = next((f for f in tried if f.checked), None)
    return fx.FixPlan(first, tuple(tried)) if first is not None else fx.first_working(tried)


def plan_fixes(traces: Sequence[Any], bench: Bench) -> list[Any]:
    """``traces`` with each reason's fix run on the bench: ``Reason.plan`` set, ``Reason.fix`` its line.

    Args:
        traces: `tflab.retrace.Trace` records of one tf.function, oldest first.
        bench: its Python function and recorded calls (`Bench`).

    Returns:
        New `Trace` records (``fixes`` = the checked lines); a trace without
        reasons is returned as it is.
    """
    planner = _Planner(traces, bench)
    out = []
    for t in traces:
        if not t.details:
            out.append(t)
            continue
        plans = [planner.plan(t, r) for r in t.details]
        if len(t.details) > 1 or bench.rebinds:  # several causes: each with the others held fixed, then together
            from tflab.retrace.search import search_trace

            plans = search_trace(t, bench, planner.calls_for(t), plans)
        details = []
        for r, plan in zip(t.details, plans):
            line = plan.lines()[0] if plan.lines() else f"fix: {r.fix}"
            details.append(dataclasses.replace(r, fix=line[len("fix: "):] if line.startswith("fix: ") else line,
                                               plan=plan))
        out.append(dataclasses.replace(t, details=tuple(details), fixes=[r.fix for r in details]))
    return out


def recorded_calls(traces: Sequence[Any]) -> list[Recorded]:
    """The call signatures a function's traces recorded (TF's own variable-creation re-trace left out)."""
    return [Recorded(t.index, t.call, t.nodes, t.kind != "failed") for t in traces
            if t.nodes is not None and t.kind != "variable_creation"]
