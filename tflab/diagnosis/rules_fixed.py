"""Rules whose fix tflab writes and checks: a tf.Variable or Keras layer created on every trace
(``invalid_creator_scope``), a tensor as a dict key or set element (``Tensor.__hash__``), a NumPy
call on a symbolic tensor, a comprehension over ``tf.range`` of a static bound. The rewrite is
done by `tflab.diagnosis.fixes` on a copy of the function, which is traced and run once."""

from __future__ import annotations

import ast
import dataclasses
import os
import re

from tflab.diagnosis.context import candidate, Context, fix_source, make, function_namespace, planned, try_fix
from tflab.diagnosis.frames import frame_named
from tflab.diagnosis.source import Source, walk_header

def _created_call(node, namespace: dict):
    """(call, "variable" | "layer", class name) of the first ``tf.Variable(...)`` or
    Keras layer / tf.Module constructor in a statement's own line(s)."""
    import tensorflow as tf

    from tflab.diagnosis.fixes import resolve

    if node is None:
        return None
    for n in walk_header(node):
        if not isinstance(n, ast.Call):
            continue
        obj = resolve(n.func, namespace)
        if not isinstance(obj, type):
            continue
        if issubclass(obj, tf.Variable):
            return n, "variable", obj.__name__
        try:
            import keras

            if issubclass(obj, keras.layers.Layer):
                return n, "layer", obj.__name__
        except ImportError:  # pragma: no cover - keras ships with TF 2.21
            pass
        if issubclass(obj, tf.Module):
            return n, "layer", obj.__name__
    return None


def rule_created_in_function(exc, ctx, frames, filename, line, loc, src, node):
    """A tf.Variable, or a Keras layer (whose build makes variables), created inside
    the function: TF traces a variable-creating function twice on its first call
    and lets only the first trace create variables (``polymorphic_function.py``,
    ``Function._initialize``: the second trace runs under ``invalid_creator_scope``),
    so a creation that runs on every trace raises there (tensorflow/tensorflow#26812)."""
    if frame_named(frames, "invalid_creator_scope") is None:
        return None
    fsrc = fix_source(ctx, line, filename)
    found = _created_call(node, fsrc.namespace if fsrc else function_namespace(ctx))
    if found is None and src is not None:  # `d = Dense(3)` on one line, `d(x)` on the next
        line, node = _created_before(src, node, line, fsrc.namespace if fsrc else function_namespace(ctx))
        found = _created_call(node, fsrc.namespace if fsrc else function_namespace(ctx))
    is_method = fsrc is not None and (fsrc.instance is not None or (
        bool(fsrc.fdef.args.args) and fsrc.fdef.args.args[0].arg == "self"))
    stmt_text = Source.of(filename).text(line) if Source.of(filename) else ""
    common = ("TF traces a function that creates tf.Variables twice on its first call and lets only "
              "the first trace create them (the second runs under invalid_creator_scope, "
              "polymorphic_function.py); this line creates a new one on every trace")
    applied = next((c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                    and c.func.attr == "apply_gradients"), None) if node is not None else None
    if found is None and applied is not None:  # a Keras optimizer's slots, made in its first apply_gradients
        opt = ast.unparse(applied.func.value)
        src_vars = next((ast.unparse(n.value) for n in ast.walk(applied) if isinstance(n, ast.Attribute)
                         and n.attr == "trainable_variables"), "model")
        return make(ctx, exc, "variable-created-in-function", filename, line,
                    f"`{opt}` is a Keras optimizer: it creates its slot variables in its first apply_gradients, "
                    "inside the tf.function, so a new optimizer (or model) after the first trace creates "
                    "tf.Variables on a later trace", f"call `{opt}.build({src_vars}.trainable_variables)` before "
                    "the training loop, or make a new tf.function per model and optimizer (both are run on "
                    "your calls by tflab.RetraceProbe)")
    if found is None:
        return make(ctx, exc, "variable-created-in-function", filename, line,
                    common, "create the tf.Variable once outside the tf.function, or guard it: "
                            "`if self.v is None: self.v = tf.Variable(...)`")
    call, what, cls = found
    code = ast.unparse(call)
    uses_local = fsrc is not None and bool({n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
                                           & fsrc.local_names())
    if what == "variable":
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        vname = ast.unparse(target) if target is not None else "v"
        attr = vname.split(".")[-1]
        guard = f"`if self.{attr} is None: self.{attr} = {code}`"
        if is_method or vname.startswith("self."):
            fix = (f"create it on the first trace only: {guard} (with self.{attr} = None in "
                   f"__init__)" if uses_local else
                   f"create it once: `self.{attr} = {code}` in __init__, or guard it: {guard}")
        elif uses_local:
            fix = (f"create it on the first trace only (its value depends on the arguments): keep it "
                   f"on an object and guard it, {guard}, or a module-level `{vname} = None` with "
                   f"`global {vname}; if {vname} is None: {vname} = {code}`")
        else:
            fix = (f"create it once outside the tf.function (module level `{vname} = {code}`), or "
                   f"keep it on an object and guard it: {guard}")
        d = make(ctx, exc, "variable-created-in-function", filename, line, common, fix)
        stem = attr if attr.isidentifier() else "v"
    else:
        # `d = Dense(3)` keeps the user's own name `d`; `x = Dense(4)(x)` does not bind the layer to a
        # name, and `x` is the function's input: the layer is named from its class (`dense`).
        simple = isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and node.value is call
        stem = node.targets[0].id if simple else re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()
        if not simple and fsrc is not None:
            stem = fsrc.fresh_name(stem)
        fix = (f"build the {cls} once outside the function and call it inside: "
               + (f"`self.{stem} = {code}` in __init__, then `self.{stem}(...)`" if is_method
                  else f"`{stem} = {code}` at module level (or as a model attribute), then `{stem}(...)`"))
        d = make(ctx, exc, "layer-created-in-function", filename, line,
                 f"`{code}` builds a new {cls}, and with it new tf.Variables, on every trace; "
                 + common.split("; ")[0], fix)
    if fsrc is None:
        return d
    from tflab.diagnosis.fixes import hoist_created

    fstmt = fsrc.stmt_at(line)
    fcall = _created_call(fstmt, fsrc.namespace) if fstmt is not None else None
    if fcall and stmt_text:
        from tflab.diagnosis.per_iteration import describe, is_in_loop, per_iteration

        if is_in_loop(fsrc, fcall[0]):
            # One object per iteration: hoisting the one call would share it across iterations.
            got = per_iteration(fsrc, fcall[0], cls, what)
            if got is None:
                return planned(d, [], "the loop's iterable or the constructor's arguments read values local to "
                                      "the function, so tflab cannot build one object per iteration outside it")
            text, made, inner = got
            d = dataclasses.replace(d, fix=describe(cls, what, made, inner))
            return planned(d, [candidate(ctx, fsrc, "build one {} per loop iteration outside the function".format(
                "tf.Variable" if what == "variable" else cls),
                                         text, change=f"{made}; {inner}", kind="move",
                                         note="built in eager's order under the same seed, so each holds the "
                                              "weights eager's got")])
    return try_fix(d, ctx, fsrc, hoist_created(fsrc, fcall[0], stem) if fcall and stmt_text else None,
                   kind="move")


def _created_before(src, node, line, namespace):
    """(line, statement) of the assignment, earlier in the same function, of a name the failing
    statement calls (``d(x)``) whose value is a tf.Variable or layer constructor; else the
    failing line and statement unchanged."""
    if node is None or not line:
        return line, node
    called = {n.func.id for n in walk_header(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    called |= {n.id for n in walk_header(node) if isinstance(n, ast.Name)}
    fn = src.function_at(line)
    best = None
    for st in ast.walk(fn) if fn is not None else ():
        if isinstance(st, ast.Assign) and st.lineno < line and len(st.targets) == 1 \
                and isinstance(st.targets[0], ast.Name) and st.targets[0].id in called \
                and _created_call(st, namespace) is not None and (best is None or st.lineno > best.lineno):
            best = st
    return (best.lineno, best) if best is not None else (line, node)


def rule_unhashable_tensor(exc, ctx, frames, filename, line, loc, src, node):
    """A symbolic tensor used as a dict key or a set element: ``Tensor.__hash__``
    raises inside a FuncGraph (``framework/tensor.py``; a tensor's ``==`` is
    elementwise there), ``out[x] = …``."""
    fr = frame_named(frames, "__hash__")
    if fr is None or not isinstance(exc, TypeError) or "tensor" not in os.path.basename(fr.filename):
        return None
    tensor = fr.locals.get("self")
    names = {n for n, v in (loc or {}).items() if v is tensor} or \
        {n for n, v in (loc or {}).items() if hasattr(v, "graph") and hasattr(v, "ref")}
    in_set = node is not None and any(isinstance(n, (ast.Set, ast.SetComp)) or (
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("add", "discard"))
        for n in walk_header(node))
    name = sorted(names)[0] if names else "x"
    kind = "tensor-in-set" if in_set else "tensor-as-dict-key"
    where = "a set element" if in_set else "a dict key"
    d = make(ctx, exc, kind, filename, line,
             f"a symbolic tensor cannot be {where}: inside a tf.function Tensor.__hash__ raises "
             f"(tensor == is elementwise there, so hashing by value is undefined)",
             f"key by {name}.ref() (a hashable reference; .deref() gives the tensor back), or by a "
             f"Python value such as the loop index; for a value-keyed table use tf.lookup")
    fsrc = fix_source(ctx, line, filename)
    if fsrc is None or not names:
        return d
    from tflab.diagnosis.fixes import ref_keys

    return try_fix(d, ctx, fsrc, ref_keys(fsrc, names))


def numpy_fix(ctx: Context, filename: str, line: int | None, node, loc: dict):
    """(advice, the NumPy name, candidates) for the NumPy call at the culprit line.

    The candidates, tried in order on a copy (`planned`): the core TF op of *that* call
    (`NUMPY_TO_TF`), ``tf.experimental.numpy``'s function where TF has one, then the TF op
    cast to the dtype NumPy gives for these arguments (NumPy run on stand-ins of the
    symbolic tensors: ones of their dtype and shape, a Python int for an int scalar, as
    ``__index__`` gives eagerly), then to the dtype of each tensor the function holds there
    (``tf.cast(..., x.dtype)``, the surrounding use).
    """
    from tflab.diagnosis.fixes import numpy_calls, numpy_equivalent, replace_expr

    fsrc = fix_source(ctx, line, filename)
    ns = fsrc.namespace if fsrc else function_namespace(ctx)
    calls = numpy_calls(node, ns) if node is not None else []
    if not calls:
        return "", "", []
    call, name = calls[0]
    op, tnp = numpy_equivalent(name)
    shown = ast.unparse(call.func)
    keep = f"tf.numpy_function({shown}, [x], Tout) if it must stay NumPy (it then runs as Python, " \
           f"outside the graph: not in a SavedModel's serving or TFLite)"
    if op is None and tnp is None:
        return f"{shown} has no TF equivalent: wrap it with {keep}", name, []
    alts = " or ".join(x for x in (f"`{op}`" if op else None, f"`{tnp}`" if tnp else None) if x)
    advice = f"replace {shown} with {alts}; or {keep}"
    fstmt = fsrc.stmt_at(line) if fsrc is not None else None
    fcalls = [c for c, n in numpy_calls(fstmt, fsrc.namespace) if n == name] if fstmt is not None else []
    if not fcalls:
        return advice, name, []
    fcall = fcalls[0]
    args_text = ", ".join(ast.unparse(a) for a in fcall.args) + "".join(
        f", {k.arg}={ast.unparse(k.value)}" for k in fcall.keywords)
    texts: list[str] = []
    if op and "(" not in op:
        texts.append(f"{op}({args_text})")
    if tnp:
        texts.append(f"{tnp}({args_text})")
    if op and "(" not in op:
        for dtype_text in _cast_dtypes(fcall, ns, loc):
            texts.append(f"tf.cast({op}({args_text}), {dtype_text})")
    cands = []
    for t in dict.fromkeys(texts):
        text = replace_expr(fsrc, fcall, t)
        if text is not None:
            cands.append(candidate(ctx, fsrc, f"replace {shown} with a TF op", text, change=t))
    return advice, name, cands


def _cast_dtypes(call, namespace: dict, loc: dict) -> list[str]:
    """``tf.DTYPE`` of what NumPy gives for ``call`` on stand-ins of the frame's tensors,
    then ``NAME.dtype`` for each tensor in the frame (parameters first), one per dtype."""
    import numpy as np
    import tensorflow as tf

    out: list[str] = []
    seen: set = set()
    stand = dict(namespace)
    for k, v in (loc or {}).items():
        if isinstance(v, tf.Tensor) and v.shape.rank is not None:
            shape = [2 if d is None else d for d in v.shape.as_list()]
            arr = np.ones(shape, v.dtype.as_numpy_dtype) if v.dtype != tf.string else None
            stand[k] = arr.item() if arr is not None and arr.ndim == 0 and v.dtype.is_integer else arr
    try:
        got = np.asarray(eval(compile(ast.Expression(call), "<numpy>", "eval"), stand))
        d = tf.as_dtype(got.dtype)
        out.append(f"tf.{d.name}")
        seen.add(d)
    except Exception:  # noqa: BLE001 - NumPy on stand-ins may refuse: no NumPy dtype then
        pass
    for k, v in (loc or {}).items():
        if isinstance(v, tf.Tensor) and k.isidentifier() and v.dtype not in seen and v.dtype != tf.string:
            seen.add(v.dtype)
            out.append(f"{k}.dtype")
    return out


def static_range_fix(ctx: Context, filename: str, line: int | None, node, loc: dict):
    """For a comprehension over ``tf.range(E)`` whose bound E is static here
    (``bands.shape[1]`` is 3 at trace time: tensorflow/tensorflow#33308): the
    bound values, and the function with ``range(E)``, which Python unrolls."""
    from tflab.diagnosis.fixes import replace_call_func, resolve

    if node is None:
        return None
    import tensorflow as tf

    ns = dict(function_namespace(ctx))
    ns.update(loc or {})
    for comp in walk_header(node):
        if not isinstance(comp, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        for gen in comp.generators:
            it = gen.iter
            if not (isinstance(it, ast.Call) and resolve(it.func, ns) is tf.range and it.args):
                continue
            try:
                values = [eval(compile(ast.Expression(a), "<bound>", "eval"), ns) for a in it.args]
            except Exception:  # a bound that reads something not in the frame
                return None
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return None
            fsrc = fix_source(ctx, line, filename)
            text = None
            if fsrc is not None:
                fstmt = fsrc.stmt_at(line)
                fcalls = [c for c in ast.walk(fstmt) if isinstance(c, ast.Call)
                          and ast.unparse(c) == ast.unparse(it)] if fstmt is not None else []
                text = replace_call_func(fsrc, fcalls, "range") if fcalls else None
            return ast.unparse(it), values, fsrc, text
    return None
