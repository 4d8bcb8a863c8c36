"""What a rule knows about the failing function: its name, options, arguments and statement
map (`Context`), and the helpers every rule shares: `make` (a `Diagnosis` for a kind and a
culprit line), materialized arguments, the function's own source for a fix, and trying a fix."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from typing import Any, Callable

from tflab.diagnosis.records import UNKNOWN_DIM_SIZE, Diagnosis
from tflab.diagnosis.source import Source, StatementMap

@dataclasses.dataclass
class Context:
    name: str
    python_fn: Callable | None = None
    autograph: bool = True
    stmap: StatementMap = dataclasses.field(default_factory=StatementMap)
    params: dict = dataclasses.field(default_factory=dict)   # parameter -> spec/value traced with
    from_signature: bool = False
    concrete: Any = None
    graph_labels: dict = dataclasses.field(default_factory=dict)  # id(FuncGraph) -> "trace #1"
    stage: str = "trace"
    filename: str = ""
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    lead: tuple = ()  # (None,) for a bound method whose instance was freed: TF passes self=None
    eager: Any = None  # (status, value): the function run eagerly once (`_eager_reference`)
    rewrite_error: str = ""  # set when writing a fix raised (a tflab bug): rules then write none
    target: Any = None  # the callable as the user gave it (a bound tf.function method keeps its instance)


def python_target(fn: Callable) -> Callable:
    from tflab._user.target import bound_user_method

    # A bound tf.function method: the user's method on its instance (held strongly),
    # not TF's bound_method_wrapper, whose code is TF's own.
    python_fn = bound_user_method(fn)[0]
    if not (inspect.isfunction(python_fn) or inspect.ismethod(python_fn)):
        call = getattr(python_fn, "call", None)
        python_fn = call if inspect.ismethod(call) else getattr(python_fn, "__call__", python_fn)
    return python_fn


def make_context(fn: Callable | None, args: tuple, kwargs: dict, from_signature: bool) -> Context:
    if fn is None:
        return Context(name="<function>")
    python_fn = python_target(fn)
    name = getattr(python_fn, "__qualname__", None) or type(fn).__name__
    params: dict = {}
    try:
        bound = inspect.signature(python_fn).bind_partial(*args, **kwargs)
        params = dict(bound.arguments)
    except (TypeError, ValueError):
        pass
    code = getattr(inspect.unwrap(getattr(python_fn, "__func__", python_fn)), "__code__", None)
    from tflab._user.target import bound_user_method
    from tflab._tf.autograph import autograph_enabled

    return Context(name=name, python_fn=python_fn, filename=code.co_filename if code else "",
                   autograph=autograph_enabled(fn),
                   params=params, from_signature=from_signature, args=tuple(args),
                   kwargs=dict(kwargs), lead=bound_user_method(fn)[1], target=fn)


def instance_of(ctx: Context) -> Any:
    """The instance a method diagnosed runs on (a bound method's ``__self__``, or the object behind
    a tf.function method's ``TfMethodTarget``), or None."""
    obj = getattr(ctx.python_fn, "__self__", None)
    if obj is None and ctx.target is not None:
        obj = getattr(inspect.unwrap(getattr(ctx.target, "python_function", ctx.target)), "__self__", None)
    if type(obj).__name__ == "TfMethodTarget":
        obj = obj.target
    return obj


def make(ctx: Context, exc: BaseException, kind: str, filename: str, line: int | None,
         explanation: str, fix: str, why: str = "") -> Diagnosis:
    """The `Diagnosis` of ``kind`` at ``line``; its plan holds ``fix`` as "not checked: WHY"
    until a rule runs a rewrite (`planned`)."""
    from tflab._user.source_map import error_line, strip_comment
    from tflab.fix import first_working, unchecked

    src = Source.of(filename)
    why = why or (f"writing the fix into a copy raised ({ctx.rewrite_error}), so tflab ran none"
                  if ctx.rewrite_error else _NO_REWRITE)
    plan = first_working([unchecked("code", "", fix, why)]) if fix else None
    return Diagnosis(function_name=ctx.name, ok=False, kind=kind, line=line,
                     statement=strip_comment(src.text(line)) if src else "", filename=filename,
                     error=error_line(exc), explanation=explanation, fix=fix, stage=ctx.stage,
                     fix_plan=plan)


_NO_REWRITE = "tflab has no mechanical rewrite for this kind of mistake, so it did not run one"



def stmt_label(line: int, kind: str, op: str) -> str:
    return f"the {kind} at line {line} became a{'n' if op[0] in 'AEIOU' else ''} {op} op"


def _op_for(kind: str) -> str:
    return "If" if kind == "if" else "While"



LIST_FIX = ("use a tf.TensorArray (ta = ta.write(i, value) in the loop, ta.stack() after it), "
            "which is a loop variable")


def materialize_specs(value: Any) -> Any:
    import tensorflow as tf

    from tflab._user.target import materialize

    def conv(v):
        if isinstance(v, tf.TensorSpec):
            return materialize(sized(v), 0)
        return v

    return tf.nest.map_structure(conv, value)


def sized(v):
    """The spec with each None dim (or an unknown rank) given `UNKNOWN_DIM_SIZE`."""
    import tensorflow as tf

    if v.shape.rank is None:
        return tf.TensorSpec([UNKNOWN_DIM_SIZE], v.dtype, v.name)
    if not v.shape.is_fully_defined():
        return tf.TensorSpec([UNKNOWN_DIM_SIZE if d is None else d for d in v.shape.as_list()], v.dtype, v.name)
    return v


def fix_source(ctx: Context, line: int | None, filename: str):
    """`tflab.diagnosis.fixes.FunctionSource` of the traced function when the
    culprit line is in it (a fix is tried on that function only), else None."""
    from tflab.diagnosis.fixes import FunctionSource

    if ctx.python_fn is None or not line or ctx.rewrite_error:
        return None
    try:
        fsrc = FunctionSource(ctx.python_fn)
        fname = inspect.getsourcefile(inspect.unwrap(getattr(ctx.python_fn, "__func__", ctx.python_fn)))
    except (OSError, TypeError, ValueError, SyntaxError):
        return None
    if not fname or os.path.abspath(fname) != os.path.abspath(filename or ""):
        return None
    last = fsrc.start + (fsrc.fdef.end_lineno or 1) - 1
    return fsrc if fsrc.start <= line <= last else None


def try_fix(d: Diagnosis, ctx: Context, fsrc, module_source: str | None, *, kind: str = "code",
            why: str = "") -> Diagnosis:
    """``d`` with its fix applied to a copy of the function, traced, run and compared with eager."""
    if fsrc is None or not module_source:
        return planned(d, [], why or ("" if ctx.rewrite_error else _why_no_copy(fsrc)))
    return planned(d, [candidate(ctx, fsrc, d.fix, module_source, kind=kind)], why)


def _why_no_copy(fsrc) -> str:
    return ("the culprit is outside the traced function's own source, so tflab cannot rewrite a copy"
            if fsrc is None else "tflab could not write this fix into a copy of the function")


def planned(d: Diagnosis, candidates: list, why: str = "", fix_text: Callable | None = None,
            also: tuple = ()) -> Diagnosis:
    """``d`` with a `FixPlan`: ``candidates`` (each a `candidate`) tried in order by
    `tflab.fix.first_working`, then ``d.fix`` as "not checked: WHY". ``fix_text(fix)`` gives
    the Diagnosis' ``fix`` sentence for a checked fix (default: ``d.fix``)."""
    from tflab.fix import first_working, unchecked

    if candidates:
        # Every rewrite of this advice was run; when each failed, the advice itself is not printed
        # as the fix (labelled "not checked"): the plan says that none worked and what each gave.
        plan = first_working(list(candidates))
    else:
        if not why and d.fix_plan is not None and d.fix_plan.fix is not None:
            why = d.fix_plan.fix.why  # the rule's own reason (`make`)
        plan = first_working([unchecked("code", "", d.fix, why or _NO_REWRITE)])
    text = d.fix
    if plan.fix is not None and plan.fix.checked and fix_text is not None:
        text = fix_text(plan.fix)
    return dataclasses.replace(d, fix=text, fix_plan=plan, also=tuple(also))


def _change_text(fsrc, module_source: str) -> str:
    """The lines the rewrite adds to the function (its module-level lines included), ``; ``-joined."""
    import ast
    import difflib

    old = ast.unparse(fsrc.module).splitlines()
    new = module_source.rstrip("\n").splitlines()
    return "; ".join(ln[2:].strip() for ln in difflib.ndiff(old, new) if ln.startswith("+ ") and ln[2:].strip())


def candidate(ctx: Context, fsrc, description: str, module_source: str, *, change: str | None = None,
              kind: str = "code", reference: Any = "eager", autograph: bool | None = None,
              note: str = "") -> Callable:
    """A zero-argument callable that applies one rewrite and returns its `tflab.fix.Fix`.

    The copy (`tflab.diagnosis.fixes.run_fixed`) is traced once on the diagnosed arguments and
    run on each input of the eager reference (`tflab.diagnosis.reference.eager_reference`: the
    user's ORIGINAL function run eagerly on the same inputs before any change). It is checked
    only when `tflab.fix.values_match` finds its outputs equal to eager's on every input: the
    reference is never cast, so an int32 ``0`` against eager's float32 ``0.5`` fails. Where the
    fix changes an output's dtype on purpose, the ULP bound it is held to
    (`reference.dtype_bound`) is printed. ``reference`` is "eager", None (no comparison) or a
    callable giving ``(label, (status, outputs))`` for tflab's one input. ``note`` is added to a
    checked result (how the reference was made fair).
    """
    from tflab.fix import VALUES_NOT_KEPT, attempt

    change = _change_text(fsrc, module_source) if change is None else change

    def check():
        from tflab.diagnosis.fixes import run_fixed

        from tflab._user.source_map import error_line, walk_ops

        lead = ctx.lead if fsrc.instance is None else ()

        def run(inputs=None):
            with seeded():
                return run_fixed(fsrc, module_source, tuple(lead) + tuple(ctx.args), ctx.kwargs, materialize_specs,
                                 autograph=ctx.autograph if autograph is None else autograph,
                                 inputs=[(tuple(lead) + tuple(a), k) for a, k in inputs] if inputs else None)

        try:
            out, concrete = run()
        except Exception as e:  # noqa: BLE001 - the copy may raise anything; TF's own line, not "in user code:"
            return False, f"raised {error_line(e)}", {}
        outs = [out]
        ran = f"traced and ran: {_summary(out)}"
        if reference is None:
            return True, ran, {}
        types = {op.type for op in walk_ops(concrete.graph)}
        if any(t.startswith("Random") for t in types):
            return True, f"{VALUES_NOT_KEPT}: {ran} (not compared with eager: it draws stateful random numbers)", {}
        if any(t.startswith(_STATE_OPS) for t in types):
            return True, (f"{VALUES_NOT_KEPT}: {ran} (not compared with eager: it assigns to tf.Variables, so tflab does not "
                          "run your function a second time)"), {}
        ref = _eager_reference(ctx) if reference == "eager" else None
        if ref is not None and ref.status == "ran" and len(ref.inputs) > 1:
            # the extra draws eager ran on (the other branch): the copy runs on each of them too
            try:
                outs, _ = run(ref.inputs)
            except Exception as e:  # noqa: BLE001 - as above
                return False, f"raised {error_line(e)} on {ref.labels[-1]}", {}
        if callable(reference):
            label, (status, value) = reference()
            if status != "ran":
                return True, f"{VALUES_NOT_KEPT}: {ran}; {value}", {}
            return judge([value], outs[:1], label=label)
        if ref.status != "ran":
            return True, f"{VALUES_NOT_KEPT}: {ran}; {ref.why}", {}
        return judge(ref.outputs, outs, ref, note=note)

    return lambda: attempt(kind, change, description, check, how="ran a copy of your function",
                           source=module_source)


def judge(reference_outputs: list, fixed_outputs: list, ref=None, label: str = "", note: str = "") -> tuple[bool, str, dict]:
    """`tflab.fix.values_match` of a fix's outputs against eager's, input by input, with the ULP
    bound of each output whose dtype the fix changed (`reference.dtype_bound`), the bound stated,
    and the inputs and uncovered branches said."""
    from tflab.diagnosis.reference import dtype_bound, snapshot
    from tflab.fix import values_match

    bound, whys = 0.0, []
    fixed = [snapshot(o) for o in fixed_outputs]
    for r, g in zip(reference_outputs, fixed):
        for a, b in zip(_arrays(r), _arrays(g)):
            if a.dtype != b.dtype:
                bd, why = dtype_bound(a.dtype, b.dtype)
                bound = max(bound, bd)
                if why and why not in whys:
                    whys.append(why)
    vm = values_match(reference_outputs, fixed, ulp_bound=bound, why_bound="the fix changes a dtype on purpose")
    notes = []
    if whys:
        notes.append(f"dtype changed on purpose, ULP bound {bound:g}: " + "; ".join(whys))
    if label and label != "eager's":
        notes.append(f"the reference is {label.rstrip(',')}")
    if ref is not None and ref.inputs_text:
        notes.append(ref.inputs_text + (f" ({', '.join(ref.covered)})" if ref.covered and vm.ok else ""))
    if ref is not None and vm.ok:
        notes.extend(ref.uncovered)
    if note and vm.ok:
        notes.append(note)
    text = vm.text + (f" ({'; '.join(notes)})" if notes else "")
    return vm.ok, text, vm.measured


# Ops that change a tf.Variable: a function with one is not run eagerly for a reference (an
# optimizer step would move the user's weights, and the copy would see the moved ones).
_STATE_OPS = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceApply",
              "ResourceScatter", "ResourceSparseApply")


@contextlib.contextmanager
def seeded():
    """Python's and NumPy's global random state seeded with 0 and restored after: a Keras
    initializer without a seed draws its seed from Python's `random` (Keras 3
    ``random.make_default_seed``), so the eager run and the copy build the same weights."""
    import random

    import numpy as np

    state, np_state = random.getstate(), np.random.get_state()
    random.seed(0)
    np.random.seed(0)
    try:
        yield
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _eager_reference(ctx: Context):
    """The `tflab.diagnosis.reference.EagerReference` of the user's function: run eagerly, before
    any fix, on tflab's input(s); cached on ``ctx``."""
    from tflab.diagnosis.reference import EagerReference, eager_reference

    if ctx.eager is not None:
        return ctx.eager
    if ctx.python_fn is None or any(v is None for v in ctx.lead):
        ctx.eager = EagerReference("not run", "not compared with eager: the method's instance was freed")
        return ctx.eager
    ctx.eager = eager_reference(ctx.python_fn, (), ctx.args, ctx.kwargs, materialize_specs, seeded)
    return ctx.eager


def _arrays(value: Any) -> list:
    import numpy as np
    import tensorflow as tf

    return [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in tf.nest.flatten(value)]


def _summary(value: Any) -> str:
    import numpy as np

    parts = []
    for a in _arrays(value)[:3]:
        vals = np.array2string(a.ravel()[:6], precision=4, separator=", ", max_line_width=10 ** 6) if a.dtype.kind != "O" else "…"
        parts.append(f"{a.dtype.name}{list(a.shape)} {vals}")
    return ", ".join(parts) or "no output"


def function_namespace(ctx: Context) -> dict:
    fn = ctx.python_fn
    inner = inspect.unwrap(getattr(fn, "__func__", fn)) if fn is not None else None
    ns = dict(getattr(inner, "__globals__", {}) or {})
    code = getattr(inner, "__code__", None)
    for n, cell in zip(getattr(code, "co_freevars", ()), getattr(inner, "__closure__", None) or ()):
        with contextlib.suppress(ValueError):
            ns[n] = cell.cell_contents
    return ns


def cast_value_fix(d, ctx: Context, filename: str, line: int, dtypes: list[str]):
    """``name = VALUE`` -> ``name = tf.cast(VALUE, tf.DTYPE)`` at ``line`` in a copy, run, the
    dtype that keeps the most values first (`tflab.diagnosis.reference.widest_first`)."""
    import ast

    from tflab.diagnosis.reference import widest_first

    from tflab.diagnosis.fixes import replace_expr

    fsrc = fix_source(ctx, line, filename)
    st = fsrc.stmt_at(line) if fsrc is not None else None
    if not isinstance(st, (ast.Assign, ast.AnnAssign)) or st.value is None:
        return planned(d, [])
    cands = []
    for dt in widest_first(list(dtypes)):
        text = replace_expr(fsrc, st.value, f"tf.cast({{}}, tf.{dt})") if dt.isidentifier() else None
        if text:
            cands.append(candidate(ctx, fsrc, d.fix, text))
    return planned(d, cands)


def tensor_array_fix(d, ctx: Context, filename: str, line, holder: str | None, dtypes: list[str]):
    """The Python list ``holder`` rewritten as a tf.TensorArray of each dtype in turn, run."""
    import tensorflow as tf

    from tflab.diagnosis.fixes import list_to_tensor_array

    fsrc = fix_source(ctx, line, filename)
    if fsrc is None or not holder or not holder.isidentifier():
        return planned(d, [], "the list is not a plain name in the traced function's own source, so "
                               "tflab cannot rewrite a copy")
    extra = [s.dtype.name for s in tf.nest.flatten((ctx.args, ctx.kwargs)) if hasattr(s, "dtype")]
    cands = []
    for dt in dict.fromkeys(list(dtypes) + extra + ["float32", "int32"]):
        text = list_to_tensor_array(fsrc, holder, f"tf.{dt}")
        if text:
            cands.append(candidate(ctx, fsrc, "use a tf.TensorArray, a loop variable", text))
    return planned(d, cands, "" if cands else f"'{holder}' is used in a way tflab's rewrite to a "
                                               "tf.TensorArray does not cover (only append, tf.stack, tf.add_n)")
