"""Rules that read graph structure: a tensor that left its If/While branch or body, or came from
another trace's FuncGraph (``capture_by_value``), and AutoGraph's branch and loop-variable checks
(``verify_single_cond_var``, ``_verify_single_loop_var``, ``verify_loop_init_vars`` in
``autograph/operators/control_flow.py``). Each returns a `Diagnosis` or None."""

from __future__ import annotations

import ast
import inspect
from typing import Any

from tflab.diagnosis.context import (LIST_FIX, candidate, cast_value_fix, Context, fix_source, make,
                                     planned, stmt_label, tensor_array_fix)
from tflab.diagnosis.frames import Frame, frame_named, is_generated, is_user_file
from tflab.diagnosis.source import assignments_before, container_stores, owner_from_ops, Source

def rule_escaped_tensor(exc, ctx, frames, filename, line, loc, src, node):
    """A tensor made inside a graph loop/branch, or in another trace, used outside it."""
    fr = frame_named(frames, "capture_by_value", "_validate_in_scope", "capture")
    tensor = fr.locals.get("tensor") if fr else None
    if tensor is None or not hasattr(tensor, "graph"):
        return None
    current = fr.locals.get("graph") or fr.locals.get("self")
    inner = tensor.graph
    lineage = []
    g = inner
    while g is not None:
        lineage.append(g)
        g = getattr(g, "outer_graph", None)
    if current is not None and not any(g is current for g in lineage[1:]):
        return _foreign(exc, ctx, tensor, filename, line, src)
    owner = ctx.stmap.owner_of(inner) or owner_from_ops(inner, src)
    holder_names = _holders_of(tensor, [loc] + [f.locals for f in frames
                                                if is_generated(f.filename) or is_user_file(f.filename)])
    if owner is None or src is None:
        return make(ctx, exc, "tensor-out-of-scope", filename, line,
                    f"{tensor.name} was made in FuncGraph {inner.name!r}, a branch or loop body "
                    f"that ended before this line used it",
                    "return the value from the tf.cond/tf.while_loop (or use tf.TensorArray) "
                    "instead of keeping it in Python state",
                    why="tflab found no if/for/while of your source that made the tensor, so it has "
                        "nothing to rewrite")
    o_line, o_kind = owner
    stmt = src.stmt_at(o_line)
    body = list(getattr(stmt, "body", [])) + list(getattr(stmt, "orelse", []))
    stores = container_stores(body, holder_names or None) or container_stores(body)
    culprit = stores[0][0] if stores else line
    holder = stores[0][1] if stores else (sorted(holder_names)[0] if holder_names else None)
    what = f"the Python {'list' if holder else 'state'} {holder!r}" if holder else "Python state"
    if o_kind == "if":
        return make(ctx, exc, "python-state-in-tensor-if", filename, culprit,
                    f"{stmt_label(o_line, 'if', 'If')}; {what} is not a branch output, so "
                    f"{tensor.name} made inside the branch cannot leave it",
                    "assign the value to a variable in both branches (the If op's outputs) "
                    "instead of storing it in a Python container",
                    why="which value the other branch should give is yours to choose, so tflab "
                        "does not write the If's outputs for you")
    d = make(ctx, exc, "python-list-in-tensor-loop", filename, culprit,
             f"{stmt_label(o_line, o_kind, 'While')}; {what} is not a loop variable, so "
             f"the tensors stored in it inside the body ({tensor.name}) cannot leave the loop",
             LIST_FIX)
    return tensor_array_fix(d, ctx, filename, culprit, holder, [tensor.dtype.name])


def _holders_of(tensor, scopes: list[dict]) -> set[str]:
    """Names in ``scopes`` whose value is a list/tuple/dict/set holding ``tensor``."""
    out = set()
    for scope in scopes:
        for name, value in (scope or {}).items():
            if isinstance(value, dict):
                vals = list(value.values())
            elif isinstance(value, (list, tuple, set)):
                vals = list(value)
            else:
                continue
            if any(v is tensor for v in vals):
                out.add(name)
    return out


def _python_state(ctx: Context) -> list[tuple[str, Any]]:
    """(label, value) of the Python state the function reads: globals named in its
    code, closure cells, and ``self``'s attributes for a bound method."""
    fn = ctx.python_fn
    out: list[tuple[str, Any]] = []
    if fn is None:
        return out
    inner = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(inner, "__code__", None)
    if code is not None:
        names = set()
        stack = [code]
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
        g = getattr(inner, "__globals__", {})
        out += [(f"global {n}", g[n]) for n in sorted(names) if n in g]
        for n, cell in zip(code.co_freevars, inner.__closure__ or ()):
            try:
                out.append((f"closure variable {n}", cell.cell_contents))
            except ValueError:
                pass
    obj = getattr(inspect.unwrap(fn), "__self__", None)
    if type(obj).__name__ == "TfMethodTarget":  # a tf.function method: the instance is .target
        obj = obj.target
    if obj is not None:
        out += [(f"self.{k}", v) for k, v in vars(obj).items()] if hasattr(obj, "__dict__") else []
    return out


def _holder_in_state(tensor, ctx: Context) -> tuple[str, str] | None:
    """(label, short name) of the Python state that holds ``tensor``."""
    for label, value in _python_state(ctx):
        short = label.split()[-1]
        if value is tensor:
            return label, short
        vals = list(value.values()) if isinstance(value, dict) else (
            list(value) if isinstance(value, (list, tuple, set)) else [])
        if any(v is tensor for v in vals):
            kind = type(value).__name__
            return f"the {kind} `{short}` ({label.split()[0]})", short
    return None


def _foreign(exc, ctx: Context, tensor, filename, line, src):
    graph = tensor.graph
    label = ctx.graph_labels.get(id(graph))
    where = f"trace {label}'s FuncGraph" if label else f"another trace's FuncGraph {graph.name!r}"
    holder = _holder_in_state(tensor, ctx)
    culprit, fname = line, filename
    if holder is not None and ctx.python_fn is not None:
        try:
            fsrc_file = inspect.getsourcefile(inspect.unwrap(getattr(ctx.python_fn, "__func__",
                                                                     ctx.python_fn)))
            lines, start = inspect.getsourcelines(ctx.python_fn)
        except (OSError, TypeError):
            fsrc_file = None
        if fsrc_file:
            fsrc = Source.of(fsrc_file)
            fnode = fsrc.function_at(start + 1) if fsrc else None
            if fnode is not None:
                stores = container_stores(list(getattr(fnode, "body", [])), {holder[1]})
                if stores:
                    culprit, fname = stores[0][0], fsrc_file
    if ctx.python_fn is not None:
        from tflab.diagnosis.rebind import find_rebinding

        from tflab.diagnosis.context import instance_of

        reb = (find_rebinding(ctx.python_fn, holder[0]) if holder is not None else None) \
            or find_rebinding(ctx.python_fn, instance=instance_of(ctx))
        if reb is not None:
            return _rebound(exc, ctx, tensor, reb, holder, where)
    via = f"; it reached this trace through Python state ({holder[0]})" if holder else \
        "; it reached this trace through Python state kept between calls"
    this = "this trace's FuncGraph"
    if ctx.graph_labels and ctx.concrete is not None:
        own = ctx.graph_labels.get(id(ctx.concrete.graph))
        this = f"the graph of trace {own}" if own else this
    return make(ctx, exc, "tensor-from-another-funcgraph", fname, culprit,
                f"{this} captured {tensor.name}, a tensor that belongs to {where}{via}",
                "return the value from the tf.function, or keep it in a tf.Variable "
                "(assign to it) instead of a Python list or attribute",
                why="the tensor reaches the trace through Python state kept between calls; how your "
                    "code should keep it (a return value or a tf.Variable) is a change tflab does not write")


def _rebound(exc, ctx: Context, tensor, reb, holder, where: str):
    """The function rebinds ``holder`` (a global, closure variable or ``self`` attribute) to a
    tensor at ``reb.line``: that line, with ``NAME.assign…(…)`` run and checked against eager."""
    from tflab.diagnosis.context import seeded, instance_of, materialize_specs
    from tflab.diagnosis.rebind import check_rebind_fix, starting_value
    from tflab.fix import attempt, first_working, unchecked

    what = {"global": "the global", "nonlocal": "the closure variable", "attribute": "the attribute"}[reb.scope]
    fname = inspect.getsourcefile(inspect.unwrap(getattr(ctx.python_fn, "__func__", ctx.python_fn))) or ""
    d = make(ctx, exc, "tensor-from-another-funcgraph", fname, reb.line,
             f"this line rebinds {what} `{reb.target}` to a tensor: eagerly each call makes a new value "
             f"from the last one, but traced it makes `{reb.target}` a symbolic tensor of the graph being "
             f"traced (the tf.Variable it held is gone), and the next trace captures {tensor.name}, a tensor "
             f"that belongs to {where}",
             f"keep `{reb.target}` in a tf.Variable and assign to it: `{reb.change}`")
    start, start_text = starting_value(tensor)
    fsrc = fix_source(ctx, reb.line, fname)
    try:  # a caller that passed no arguments (a hook on a failed trace) gives nothing to run the calls with
        inspect.signature(ctx.python_fn).bind(*ctx.lead, *ctx.args, **ctx.kwargs)
    except (TypeError, ValueError):
        if not (ctx.args or ctx.kwargs):
            return planned(d, [unchecked("code", reb.change, d.fix, "tflab was given no arguments of a call to run "
                                                                    "your function and the fix with")])
    if fsrc is None or start is None:
        return planned(d, [unchecked("code", reb.change, d.fix, "tflab could not rebuild the starting value or a "
                                                                "copy of the function to run the fix on")])

    def check():
        with seeded():
            return check_rebind_fix(fsrc, reb, start, start_text, ctx.args, ctx.kwargs, materialize_specs,
                                    {"autograph": ctx.autograph}, instance=instance_of(ctx))

    fix = attempt("code", reb.change, f"keep `{reb.target}` in a tf.Variable and assign to it", check,
                  how="ran your function eagerly and the fix as a tf.function, each from a fresh "
                      "tf.Variable holding the same starting value")
    return planned(d, [fix])


def rule_foreign_capture(exc, ctx, frames, filename, line, loc, src, node):
    """A call-time failure of a ConcreteFunction that captured a symbolic tensor of
    another FuncGraph (its captures hold a graph tensor, not a value)."""
    if ctx.concrete is None:
        return None
    graph = ctx.concrete.graph
    for external, _internal in getattr(graph, "captures", ()):
        g = getattr(external, "graph", None)
        if g is not None and g is not graph and type(external).__name__ != "EagerTensor" \
                and not hasattr(external, "numpy") and getattr(external, "dtype", None) is not None \
                and external.dtype.name != "resource":
            return _foreign(exc, ctx, external, filename, line, src)
    return None



def _graph_stmt(ctx: Context, frames: list[Frame], src, line: int | None, want: str):
    """(line, kind) of the graph if/loop the failing user line belongs to."""
    graph_lines = ctx.stmap.graph_lines()
    node = src.stmt_at(line) if src and line else None
    types = (ast.If,) if want == "if" else (ast.For, ast.While)
    if node is not None and isinstance(node, types):
        return node.lineno, {ast.If: "if", ast.For: "for", ast.While: "while"}[type(node)]
    for cand in reversed(src.loops_around(line) if src and line else []):
        if isinstance(cand, types) and (not graph_lines or cand.lineno in graph_lines):
            return cand.lineno, {ast.If: "if", ast.For: "for", ast.While: "while"}[type(cand)]
    return None


def _var_name(name: str) -> str:
    return "the return value" if name.startswith("retval") else f"'{name}'"


def rule_cond_vars(exc, ctx, frames, filename, line, loc, src, node):
    fr = frame_named(frames, "verify_single_cond_var", "_verify_tf_cond_branch_vars")
    if fr is None or src is None:
        return None
    stmt = _graph_stmt(ctx, frames, src, line, "if")
    if_line = stmt[0] if stmt else line
    name = fr.locals.get("name", "?")
    body_var, orelse_var = fr.locals.get("body_var"), fr.locals.get("orelse_var")
    if fr.name == "_verify_tf_cond_branch_vars" or body_var is None or orelse_var is None:
        branch = "main" if fr.name == "verify_single_cond_var" and body_var is None else "else"
        if fr.name == "_verify_tf_cond_branch_vars":
            branch = fr.locals.get("branch_name", "else")
        return make(ctx, exc, "branch-variable-undefined", filename, if_line,
                    f"{stmt_label(if_line, 'if', 'If')}; both branches of an If op must produce "
                    f"{_var_name(name)}, but the {branch} branch leaves it None or unset",
                    f"set {name} in the {branch} branch too (add an else if there is none), "
                    f"or before the if to a tensor of the same dtype and shape",
                    why=f"the value {name} should have in the {branch} branch is yours to choose")
    bd = getattr(body_var, "dtype", type(body_var).__name__)
    od = getattr(orelse_var, "dtype", type(orelse_var).__name__)
    bd = getattr(bd, "name", bd)
    od = getattr(od, "name", od)
    d = make(ctx, exc, "branch-dtype-mismatch", filename, if_line,
             f"{stmt_label(if_line, 'if', 'If')}; an If op's output has one dtype, but "
             f"{_var_name(name)} is {bd} in the main branch and {od} in the else branch",
             "give both branches the same dtype (tf.cast one of them, or return a tensor "
             "of the other branch's dtype)")
    return _branch_cast_fix(d, ctx, filename, if_line, name, str(bd), str(od))


def _branch_cast_fix(d, ctx: Context, filename: str, if_line: int, name: str, bd: str, od: str):
    """One branch's value cast to the other branch's dtype, each run and checked against eager.

    The dtype that holds both branches' values is tried first (`reference.widest_first`:
    float32 before int32, int32 before bool), so the printed fix keeps what eager gives on
    either branch; the narrowing cast is tried after it and fails on eager's values."""
    from tflab.diagnosis.fixes import replace_expr
    from tflab.diagnosis.reference import widest_first

    fsrc = fix_source(ctx, if_line, filename)
    st = fsrc.stmt_at(if_line) if fsrc is not None else None
    if not isinstance(st, ast.If):
        return planned(d, [])

    def value_in(branch):
        for b in branch:
            if isinstance(b, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in b.targets):
                return b.value
            if isinstance(b, ast.Return) and b.value is not None and name.startswith("retval"):
                return b.value
        return None

    cands = []
    for dt in widest_first([bd, od]):
        branch = st.orelse if dt == bd else st.body
        v = value_in(branch)
        text = replace_expr(fsrc, v, f"tf.cast({{}}, tf.{dt})") if v is not None and dt.isidentifier() else None
        if text:
            cands.append(candidate(ctx, fsrc, "give both branches one dtype", text))
    return planned(d, cands, "" if cands else f"tflab found no assignment of {name} in both branches to cast")


def rule_loop_vars(exc, ctx, frames, filename, line, loc, src, node):
    fr = frame_named(frames, "_verify_single_loop_var")
    if fr is None or src is None:
        return None
    stmt = _graph_stmt(ctx, frames, src, line, "loop")
    loop_line, loop_kind = stmt if stmt else (line, "loop")
    name = fr.locals.get("name", "?")
    entry, exit_ = fr.locals.get("entry"), fr.locals.get("exit_")
    init_line = assignments_before(src, name, loop_line) or loop_line
    head = stmt_label(loop_line, loop_kind, "While")
    if exit_ is None:
        return make(ctx, exc, "loop-variable-undefined", filename, loop_line,
                    f"{head}; loop variable {_var_name(name)} is None after one iteration",
                    f"give {name} a tensor value on every path of the loop body",
                    why=f"the value {name} should have on the other paths is yours to choose")
    ed, xd = getattr(entry, "dtype", None), getattr(exit_, "dtype", None)
    if ed is not None and xd is not None and ed != xd:
        d = make(ctx, exc, "loop-variable-dtype-changes", filename, init_line,
                 f"{head}; a While op's loop variables keep their dtype, but {_var_name(name)} "
                 f"is {ed.name} before the loop and {xd.name} after one iteration",
                 f"initialize {name} with the dtype the body gives it (e.g. tf.constant(0.0) "
                 f"or tf.zeros(..., dtype=...)), or tf.cast in the body")
        return cast_value_fix(d, ctx, filename, init_line, [xd.name])
    d = make(ctx, exc, "loop-variable-shape-changes", filename, loop_line,
             f"{head}; {_var_name(name)} has shape {getattr(entry, 'shape', '?')} before the "
             f"loop and {getattr(exit_, 'shape', '?')} after one iteration",
             f"declare the changing dim with tf.autograph.experimental.set_loop_options("
             f"shape_invariants=[({name}, tf.TensorShape([None]))]) at the top of the body, "
             f"or use tf.TensorArray")
    return _invariant_fix(d, ctx, filename, loop_line, name, entry, exit_)


def _invariant_fix(d, ctx: Context, filename: str, loop_line: int, name: str, entry, exit_):
    """``set_loop_options(shape_invariants=...)`` first in the loop body, the changing dims None."""
    from tflab.diagnosis.fixes import insert_first_in_body

    fsrc = fix_source(ctx, loop_line, filename)
    st = fsrc.stmt_at(loop_line) if fsrc is not None else None
    a, b = getattr(entry, "shape", None), getattr(exit_, "shape", None)
    if not isinstance(st, (ast.For, ast.While)) or a is None or b is None or a.rank != b.rank \
            or a.rank is None or not name.isidentifier():
        return planned(d, [], "the shape's rank changes (or is unknown), so no shape invariant fits")
    dims = ", ".join("None" if x != y else str(x) for x, y in zip(a.as_list(), b.as_list()))
    code = f"tf.autograph.experimental.set_loop_options(shape_invariants=[({name}, tf.TensorShape([{dims}]))])"
    text = insert_first_in_body(fsrc, st, code)
    return planned(d, [candidate(ctx, fsrc, "declare the changing dim", text, change=code)] if text else [])


def rule_loop_init(exc, ctx, frames, filename, line, loc, src, node):
    fr = frame_named(frames, "verify_loop_init_vars")
    if fr is None or src is None:
        return None
    stmt = _graph_stmt(ctx, frames, src, line, "loop")
    loop_line, loop_kind = stmt if stmt else (line, "loop")
    name = fr.locals.get("name", "?")
    head = stmt_label(loop_line, loop_kind, "While")
    if str(name).startswith("retval") or isinstance(exc, NotImplementedError):
        loop_node = src.stmt_at(loop_line)
        rets = sorted(n.lineno for n in ast.walk(loop_node) if isinstance(n, ast.Return)) \
            if loop_node is not None else []
        return make(ctx, exc, "return-in-tensor-loop", filename, rets[0] if rets else loop_line,
                    f"{head}; a While op cannot end the function early, so a return inside its "
                    f"body has no graph equivalent",
                    "store the result in a variable defined before the loop, `break`, and "
                    "return after the loop",
                    why="the result variable needs a value of the returned dtype and shape before "
                        "the loop, which tflab does not choose for you")
    return make(ctx, exc, "loop-variable-undefined", filename, loop_line,
                f"{head}; {_var_name(name)} is a loop variable (set in the body) but has no "
                f"tensor value before the loop",
                f"define {name} before the loop with a tensor of the dtype and shape the body gives it",
                why=f"the value {name} should start from is yours to choose")


