"""Rules that read a Python value where TF needs a tensor, or the reverse: a symbolic tensor as a
Python bool or iterable (``Tensor._disallow_*``), ``.numpy()``/NumPy on it, a static dim that is
None, operands of two dtypes (``op_def_library``), and an op that failed at run time (the node
the runtime names). Each returns a `Diagnosis` or None."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os

from tflab.diagnosis.context import (candidate, cast_value_fix, Context, fix_source, make, materialize_specs,
                                     planned, stmt_label, try_fix)
from tflab.diagnosis.frames import frame_named, is_generated, is_user_file
from tflab.diagnosis.records import UNKNOWN_DIM_SIZE
from tflab.diagnosis.rules_fixed import numpy_fix, static_range_fix
from tflab.diagnosis.source import (assignments_before, owner_from_ops, shape_reads, static_dim,
                                    walk_header)

def _why_unconverted(ctx: Context, filename: str, line: int | None, src) -> str:
    if not ctx.autograph:
        return "the tf.function has autograph=False, so AutoGraph did not convert this statement"
    fnode = src.function_at(line) if src and line else None
    if fnode is not None:
        for dec in getattr(fnode, "decorator_list", []):
            if "do_not_convert" in ast.unparse(dec):
                return f"{fnode.name} is marked do_not_convert, so AutoGraph ran it as plain Python"
    return ("AutoGraph ran this code as plain Python (it converts only if/for/while statements "
            "of functions whose source it can read; bool(), and/or in call arguments and code "
            "in unconverted helpers stay Python)")


def rule_bool_or_iter(exc, ctx, frames, filename, line, loc, src, node):
    names = {f.name for f in frames}
    if "_disallow_bool_casting" in names:
        why = _why_unconverted(ctx, filename, line, src)
        kind_word = ("if" if isinstance(node, ast.If) else "while" if isinstance(node, ast.While)
                     else "statement")
        d = make(ctx, exc, "tensor-as-python-bool", filename, line,
                 f"this {kind_word} needs a Python bool but got a symbolic tensor; {why}",
                 "use tf.cond (or tf.where for elementwise choices); or let AutoGraph convert "
                 "the if (drop autograph=False / do_not_convert)")
        return _autograph_on(d, ctx, filename, line, why)
    if "_disallow_iteration" in names:
        comp = node is not None and any(isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp,
                                                       ast.GeneratorExp)) for n in walk_header(node))
        static = static_range_fix(ctx, filename, line, node, loc) if comp else None
        if static is not None:
            it_text, values, fsrc, text = static
            bound = ", ".join(map(str, values))
            d = make(ctx, exc, "comprehension-over-tensor", filename, line,
                     f"AutoGraph converts for statements, not comprehensions: this comprehension "
                     f"iterates over the symbolic tensor {it_text} in Python; its bound is static "
                     f"here ({bound} at trace time)",
                     f"use Python range({bound if len(values) > 1 else ast.unparse(node) and ''}"
                     f"{'' if len(values) > 1 else it_text[it_text.index('(') + 1:-1]}) instead of "
                     f"{it_text}: Python unrolls the comprehension at trace time, one copy per "
                     f"index, and the index stays a Python int")
            return try_fix(d, ctx, fsrc, text)
        if comp:
            d = make(ctx, exc, "comprehension-over-tensor", filename, line,
                     "AutoGraph converts for statements, not comprehensions: this comprehension "
                     "iterates over a symbolic tensor in Python",
                     "use tf.map_fn or a vectorized op on the whole tensor (or a for over "
                     "tf.range writing a tf.TensorArray)")
            return _map_fn_fix(d, ctx, filename, line)
        if isinstance(node, ast.Assign) and any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets):
            d = make(ctx, exc, "tensor-iterated-in-python", filename, line,
                     "unpacking a tensor into Python names iterates over it in Python",
                     "use tf.unstack(x, num=N) (or index x[0], x[1])")
            return _unstack_fix(d, ctx, filename, line)
        why = _why_unconverted(ctx, filename, line, src)
        d = make(ctx, exc, "tensor-iterated-in-python", filename, line,
                 f"this line iterates over a symbolic tensor in Python; {why}",
                 "iterate with a for over tf.range (AutoGraph makes a While op) or use "
                 "tf.map_fn; drop autograph=False if it is set")
        return _autograph_on(d, ctx, filename, line, why)
    return None


def _map_fn_fix(d, ctx: Context, filename: str, line):
    """``tf.stack([E for b in T])`` -> ``tf.map_fn(lambda b: E, T, fn_output_signature=DT)``,
    one candidate per dtype (the arguments', then float32 and int32), each run."""
    import tensorflow as tf

    from tflab.diagnosis.fixes import dotted, replace_expr

    fsrc = fix_source(ctx, line, filename)
    st = fsrc.stmt_at(line) if fsrc is not None else None
    stacks = [n for n in (ast.walk(st) if st is not None else ()) if isinstance(n, ast.Call)
              and dotted(n.func) == "tf.stack" and len(n.args) == 1 and isinstance(n.args[0], ast.ListComp)
              and len(n.args[0].generators) == 1 and not n.args[0].generators[0].ifs
              and isinstance(n.args[0].generators[0].target, ast.Name)]
    if not stacks:
        return planned(d, [], "tflab rewrites only tf.stack([... for b in TENSOR]) into tf.map_fn")
    comp = stacks[0].args[0]
    gen = comp.generators[0]
    dts = [s.dtype.name for s in tf.nest.flatten((ctx.args, ctx.kwargs)) if hasattr(s, "dtype")]
    cands = []
    for dt in dict.fromkeys(dts + ["float32", "int32"]):
        new = (f"tf.map_fn(lambda {gen.target.id}: {ast.unparse(comp.elt)}, {ast.unparse(gen.iter)}, "
               f"fn_output_signature=tf.{dt})")
        text = replace_expr(fsrc, stacks[0], new)
        if text:
            cands.append(candidate(ctx, fsrc, "map over the tensor with tf.map_fn", text, change=new))
    return planned(d, cands)


def _autograph_on(d, ctx: Context, filename: str, line, why: str):
    """The fix "let AutoGraph convert it", run: the same source traced with autograph=True;
    for a helper marked do_not_convert, the helper without that decorator."""
    import ast as _ast

    fsrc = fix_source(ctx, line, filename)
    if ctx.autograph and "do_not_convert" in why:
        return planned(d, _unmarked_helper(ctx, filename, line))
    if ctx.autograph or fsrc is None:
        return planned(d, [], f"{why}: the statement is not in the traced function's own source, "
                               "so tflab cannot run it converted" if not ctx.autograph else
                        "AutoGraph is on here; which tf.cond or tf.where your code means is yours to write")
    text = _ast.unparse(fsrc.module) + "\n"
    return planned(d, [candidate(ctx, fsrc, "let AutoGraph convert it", text, change="autograph=True "
                                 "(drop autograph=False)", kind="option", autograph=True)])


def _unmarked_helper(ctx: Context, filename: str, line) -> list:
    """The helper that holds ``line`` redefined without its do_not_convert decorator, before the
    traced function, in one copy (the function finds the helper in the copy's namespace)."""
    from tflab.diagnosis.context import function_namespace
    from tflab.diagnosis.fixes import FunctionSource
    from tflab.diagnosis.source import Source

    src = Source.of(filename)
    fnode = src.function_at(line) if src is not None else None
    helper = function_namespace(ctx).get(getattr(fnode, "name", ""))
    try:
        hsrc = FunctionSource(inspect.unwrap(helper))
        fsrc = FunctionSource(ctx.python_fn)
    except (OSError, TypeError, ValueError, SyntaxError):
        return []
    text = ast.unparse(hsrc.module) + "\n\n\n" + ast.unparse(fsrc.module) + "\n"
    return [candidate(ctx, fsrc, "let AutoGraph convert the helper", text,
                      change=f"drop @tf.autograph.experimental.do_not_convert from {hsrc.name}")]


def _unstack_fix(d, ctx: Context, filename: str, line):
    from tflab.diagnosis.fixes import replace_expr

    fsrc = fix_source(ctx, line, filename)
    st = fsrc.stmt_at(line) if fsrc is not None else None
    if not isinstance(st, ast.Assign) or not isinstance(st.targets[0], (ast.Tuple, ast.List)):
        return planned(d, [])
    n = len(st.targets[0].elts)
    text = replace_expr(fsrc, st.value, f"tf.unstack({{}}, num={n})")
    return planned(d, [candidate(ctx, fsrc, d.fix, text)] if text else [])


def rule_nonscalar_cond(exc, ctx, frames, filename, line, loc, src, node):
    """An if/while whose condition is a tensor of more than one element: AutoGraph's
    ``_verify_tf_condition`` (autograph/operators/control_flow.py) needs a bool scalar.

    The candidates each run on a copy: ``tf.where`` (an elementwise choice; compared with
    the function run eagerly on each element, where it has one tensor argument of the
    condition's shape), ``tf.reduce_any`` and ``tf.reduce_all`` around the condition. Eager
    Python raises on such an ``if`` too, so the reduce_* results are shown, not compared.
    """
    fr = frame_named(frames, "_verify_tf_condition")
    if fr is None or not isinstance(exc, ValueError):
        return None
    cond = fr.locals.get("cond")
    shape = getattr(cond, "shape", None)
    tag = fr.locals.get("tag", "if statement")
    d = make(ctx, exc, "non-scalar-condition", filename, line,
             f"the condition of this {tag} is a tensor of shape {shape}, not a scalar: an If/While op "
             "takes one bool, and eager Python raises on such a condition too (NumPy's "
             "'truth value of an array … is ambiguous')",
             "say which you mean: tf.reduce_any(cond) / tf.reduce_all(cond) for one decision, or "
             "tf.where(cond, a, b) for an elementwise choice")
    fsrc = fix_source(ctx, line, filename)
    st = fsrc.stmt_at(line) if fsrc is not None else None
    if not isinstance(st, (ast.If, ast.While)):
        return planned(d, [])
    from tflab.diagnosis.fixes import if_to_where, replace_expr

    cands = []
    where = if_to_where(fsrc, st) if isinstance(st, ast.If) else None
    if where:
        cands.append(candidate(ctx, fsrc, "an elementwise choice", where, reference=_each_element(ctx, shape)))
    for red in ("tf.reduce_any", "tf.reduce_all"):
        text = replace_expr(fsrc, st.test, f"{red}({{}})")
        if text:
            cands.append(candidate(ctx, fsrc, f"one decision for the {tag}", text))
    from tflab.fix import first_working

    ran = [c() for c in cands]
    plan = first_working(ran)
    others = tuple(f for f in ran if f.checked and f is not plan.fix)
    return planned(d, ran, also=others)


def _each_element(ctx: Context, shape):
    """A reference for ``tf.where``: the user's function run eagerly on each element of its one
    tensor argument (when the condition has that argument's shape), stacked; else None."""
    import tensorflow as tf

    specs = [a for a in ctx.args if isinstance(a, tf.TensorSpec)]
    if len(specs) != 1 or len(ctx.args) != 1 or ctx.kwargs or ctx.python_fn is None or any(v is None for v in ctx.lead) \
            or shape is None or tf.TensorShape(specs[0].shape) != tf.TensorShape(shape):
        return None

    def ref():
        x = materialize_specs(specs[0])
        try:
            outs = [ctx.python_fn(e) for e in tf.unstack(tf.reshape(x, [-1]))]
            return "your function's run eagerly on each element,", ("ran", tf.reshape(tf.stack(outs), tf.shape(x)))
        except Exception as e:  # noqa: BLE001 - not an elementwise function
            return "eager's", ("raised", f"your function does not run eagerly on one element ({type(e).__name__})")

    return ref


def rule_numpy(exc, ctx, frames, filename, line, loc, src, node):
    fr = frame_named(frames, "__getattr__", "__array__", "_numpy")
    if fr is None or "tensor" not in os.path.basename(fr.filename):
        return None
    attr = fr.locals.get("name")
    if fr.name == "__getattr__" and attr != "numpy":
        return None
    expl = ("inside a tf.function tensors are symbolic (SymbolicTensor): they have no value "
            "until the graph runs, so .numpy() / np.asarray cannot read one")
    fix, np_name, cands = numpy_fix(ctx, filename, line, node, loc) if attr != "numpy" else ("", "", [])
    if not fix:
        d = make(ctx, exc, "numpy-on-symbolic-tensor", filename, line, expl,
                 "use tf.print(x) to look at the value while it runs, TF ops instead of NumPy, "
                 "or return the tensor and call .numpy() outside the tf.function")
        return planned(d, _drop_numpy(ctx, filename, line))
    d = make(ctx, exc, "numpy-on-symbolic-tensor", filename, line,
             f"np.{np_name} needs a NumPy array, and {expl.split(': ', 1)[1]}", fix)
    keep = fix.split("; or ", 1)[1] if "; or " in fix else ""
    return planned(d, cands, "" if cands else f"np.{np_name} has no TF op to rewrite it with",
                   fix_text=lambda f: f"replace {f.description.split()[1]} with `{f.change}`"
                   + (f"; or {keep}" if keep else ""))


def _drop_numpy(ctx: Context, filename: str, line) -> list:
    """Candidates for ``t.numpy()``: the tensor itself (and without a ``float()``/``int()`` around it)."""
    from tflab.diagnosis.fixes import replace_expr

    fsrc = fix_source(ctx, line, filename)
    st = fsrc.stmt_at(line) if fsrc is not None else None
    out = []
    for n in ast.walk(st) if st is not None else ():
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "numpy" and not n.args:
            inner = ast.unparse(n.func.value)
            text = replace_expr(fsrc, n, inner)
            if text:
                out.append(candidate(ctx, fsrc, "use the tensor itself, without .numpy()", text))
    for n in ast.walk(st) if st is not None else ():
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("float", "int") \
                and len(n.args) == 1 and isinstance(n.args[0], ast.Call) \
                and isinstance(n.args[0].func, ast.Attribute) and n.args[0].func.attr == "numpy":
            text = replace_expr(fsrc, n, ast.unparse(n.args[0].func.value))
            if text:
                out.append(candidate(ctx, fsrc, "use the tensor itself, without .numpy()", text))
    return out


def _param_note(ctx: Context, name: str, dim: int) -> str:
    import tensorflow as tf

    spec = ctx.params.get(name)
    if isinstance(spec, tf.TensorSpec):
        where = "the input_signature" if ctx.from_signature else "its TensorSpec"
        return f" ({name} is traced as {tf.TensorShape(spec.shape)} in {where})"
    return ""


def rule_shape_none(exc, ctx, frames, filename, line, loc, src, node):
    if node is None or not isinstance(exc, (TypeError, ValueError)):
        return None
    sites = [(line, node, "")]
    # `n = x.shape[0]` on an earlier line, `n` used here (and None in the frame).
    for used in sorted({n.id for n in walk_header(node) if isinstance(n, ast.Name) and loc.get(n.id, 0) is None}):
        at = assignments_before(src, used, line) if src is not None else None
        if at is not None and src.stmt_at(at) is not None:
            sites.append((at, src.stmt_at(at), used))
    for at, stmt, via in sites:
        for name, dim, n in shape_reads(stmt):
            known, value = static_dim(loc.get(name), dim)
            if not known or value is not None:
                continue
            if isinstance(n, ast.Call):  # len(x): AutoGraph's len gives tf.shape(x)[0]
                continue
            then = f"; '{via}' holds that None and line {line} uses it" if via else ""
            d = make(ctx, exc, "shape-dim-is-none", filename, at,
                     f"{name}.shape[{dim}] is the static shape, and dim {dim} of {name} is None "
                     f"here{_param_note(ctx, name, dim)}, so Python gets None instead of a number{then}",
                     f"use the dynamic shape tf.shape({name})[{dim}], which is a tensor at run time")
            return _shape_fix(d, ctx, filename, at, name, dim)
    return None


def _shape_fix(d, ctx: Context, filename: str, line: int, name: str, dim: int):
    """``x.shape[i]`` (or ``x.get_shape()[i]``) -> ``tf.shape(x)[i]`` in a copy, run."""
    from tflab.diagnosis.fixes import replace_expr

    fsrc = fix_source(ctx, line, filename)
    st = fsrc.stmt_at(line) if fsrc is not None else None
    reads = [n for nm, dm, n in (shape_reads(st) if st is not None else []) if (nm, dm) == (name, dim)
             and not isinstance(n, ast.Call)]
    text = replace_expr(fsrc, reads[0], f"tf.shape({name})[{dim}]") if reads else None
    return try_fix(d, ctx, fsrc if text else None, text)


def rule_dtype_mismatch(exc, ctx, frames, filename, line, loc, src, node):
    fr = frame_named(frames, "_ExtractInputsAndAttrs", "_apply_op_helper", "_truediv_python3")
    if fr is None or not isinstance(exc, TypeError):
        return None
    # _ExtractInputsAndAttrs pops each input from ``keywords`` into ``inputs`` as it
    # converts it; ``values`` is the one that failed to convert.
    op_type = fr.locals.get("op_type_name", "an")
    pool = list(fr.locals.get("inputs") or []) + [fr.locals.get("values")] \
        + list((fr.locals.get("keywords") or {}).values()) + [fr.locals.get("x"), fr.locals.get("y")]
    if fr.name == "_truediv_python3":  # math_ops: x / y checks dtypes itself
        op_type = "RealDiv"
    operands = [(i, v) for i, v in enumerate(pool) if hasattr(v, "dtype") and hasattr(v, "op")]
    user_scopes = [f.locals for f in frames if is_generated(f.filename) or is_user_file(f.filename)]
    # A loop variable whose first value fixed its dtype: its body placeholder is the operand.
    for _k, t in operands:
        owner = ctx.stmap.owner_of(t.graph) or owner_from_ops(t.graph, src)
        if t.op.type == "Placeholder" and owner is not None and owner[1] in ("for", "while"):
            names = [n for scope in user_scopes for n, v in scope.items() if v is t]
            if names and src is not None:
                init = assignments_before(src, names[0], owner[0])
                if init is not None:
                    d = make(ctx, exc, "loop-variable-dtype-changes", filename, init,
                             f"{stmt_label(owner[0], owner[1], 'While')}; loop variable "
                             f"'{names[0]}' took dtype {t.dtype.name} from its value before "
                             f"the loop, and the body's {op_type} op mixes it with another dtype",
                             f"initialize {names[0]} with the dtype the body needs (e.g. 0.0 "
                             f"for float32), or tf.cast in the body")
                    return cast_value_fix(d, ctx, filename, init, [_other_dtype(operands, t)])
    # An operand made on another line of the user's code (len(x), tf.shape(x)…).
    for _k, t in operands:
        # Only lines of the function that failed: the caller may sit in the same file.
        fn_node = src.function_at(line) if src is not None and line else None
        lo, hi = (fn_node.lineno, fn_node.end_lineno) if fn_node is not None else (0, 10 ** 9)
        origin = [fr_.lineno for fr_ in (t.op.traceback or ()) if src is not None
                  and os.path.abspath(fr_.filename) == os.path.abspath(src.filename) and lo <= fr_.lineno <= hi]
        if origin and origin[-1] != line:
            o_line = origin[-1]
            o_node = src.stmt_at(o_line)
            lens = [r for r in (shape_reads(o_node) if o_node is not None else [])
                    if isinstance(r[2], ast.Call)]
            if lens:
                nm = lens[0][0]
                known, val = static_dim(loc.get(nm), 0)
                none = " (dim 0 of {0} is None, so it is not a Python int)".format(nm) \
                    if known and val is None else ""
                expl = (f"AutoGraph turned len({nm}) at line {o_line} into an int32 tensor"
                        f" (tf.shape({nm})[0]){none}; the {op_type} op at line {line} mixes it "
                        f"with a {_other_dtype(operands, t)} tensor")
            else:
                expl = (f"the {t.dtype.name} operand of the {op_type} op at line {line} was made "
                        f"at line {o_line}; the other operand is {_other_dtype(operands, t)}")
            d = make(ctx, exc, "dtype-mismatch", filename, o_line, expl,
                     f"tf.cast the value to the other operand's dtype "
                     f"(e.g. tf.cast(..., tf.{_other_dtype(operands, t)}))")
            return cast_value_fix(d, ctx, filename, o_line, [_other_dtype(operands, t)])
    d = make(ctx, exc, "dtype-mismatch", filename, line,
             f"the {op_type} op needs all its inputs in one dtype; TF does not convert "
             f"between dtypes", "tf.cast one operand to the other's dtype")
    return _cast_operand_fix(d, ctx, filename, line, sorted({v.dtype.name for _k, v in operands}))


def _cast_operand_fix(d, ctx: Context, filename: str, line: int, dtypes: list[str]):
    """Each operand of each binary op at ``line`` cast to each operand dtype, tried in turn."""
    from tflab.diagnosis.fixes import replace_expr

    fsrc = fix_source(ctx, line, filename)
    st = fsrc.stmt_at(line) if fsrc is not None else None
    cands = []
    for b in [n for n in ast.walk(st) if isinstance(n, ast.BinOp)] if st is not None else []:
        for side in (b.right, b.left):
            for dt in dtypes:
                text = replace_expr(fsrc, side, f"tf.cast({{}}, tf.{dt})")
                if text:
                    cands.append(candidate(ctx, fsrc, d.fix, text))
    return planned(d, cands[:6])


def rule_runtime_op(exc, ctx, frames, filename, line, loc, src, node):
    """An op that failed when the ConcreteFunction ran (the trace was fine): the
    runtime names the node (``[[{{node NAME}}]]``); the op of that name in the
    FuncGraph, or in an If/While branch/body FuncGraph, records the Python stack
    it was made from (``Operation.traceback``), whose innermost user frame is the
    culprit."""
    from tflab._user.source_map import walk_ops

    if ctx.stage != "call" or ctx.concrete is None or not hasattr(exc, "error_code"):
        return None
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    failed = None
    for op in walk_ops(ctx.concrete.graph):
        if "{{node " + op.name + "}}" in text:
            failed = op
    if failed is None:
        return None
    frames_ = [f for f in (failed.traceback or ()) if is_user_file(f.filename)]
    o_file, o_line = (frames_[-1].filename, frames_[-1].lineno) if frames_ else (filename, line)
    marker = next((i for i, ln in enumerate(lines) if ln.startswith("[[")), len(lines))
    detail = lines[marker - 1] if marker > 0 else lines[0] if lines else ""
    import tensorflow as tf

    drawn = [s.name or "?" for s in tf.nest.flatten((ctx.args, ctx.kwargs)) if isinstance(s, tf.TensorSpec)]
    d = make(ctx, exc, "runtime-op-error", o_file, o_line,
             f"the trace was fine; the {failed.type} op {failed.name!r} failed when the ConcreteFunction ran "
             + (f"(diagnose runs it once on seeded random values for each TensorSpec: ints in [0, 10), "
                f"{UNKNOWN_DIM_SIZE} for a None dim; drawn for {', '.join(drawn)})" if drawn
                else "on the inputs given"),
             "the values, not the trace, are wrong: "
             + ("pass real inputs with --examples FILE.npz (Python: examples=), or " if drawn else "")
             + "check what reaches this op (tf.debugging.assert_* or tf.print inside the function)",
             why="the trace is right and the values are not; which values your code should pass "
                 "is not something a rewrite can know")
    return dataclasses.replace(d, error=f"{type(exc).__name__}: {detail}")


def _other_dtype(operands, t) -> str:
    for _k, v in operands:
        if v is not t and getattr(v, "dtype", None) is not None and v.dtype != t.dtype:
            return v.dtype.name
    return "differently typed"


