"""`RULES`: every way tflab recognizes a failed trace or call, in the order they are tried.

Each `Rule` pairs a classifier (reads the raising frame's locals, the culprit
statement's AST and the statement map; returns a `Diagnosis` or None) with its
fix: the kinds it can give, and for the rules whose fix tflab writes, the
`tflab.diagnosis.fixes` rewrite it applies to a copy of the function and traces.
The first rule that returns a `Diagnosis` wins; none gives ``unrecognized``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from tflab.diagnosis import fixes
from tflab.diagnosis.context import Context, make
from tflab.diagnosis.frames import traceback_frames, user_site
from tflab.diagnosis.records import Diagnosis
from tflab.diagnosis.rules_fixed import rule_created_in_function, rule_unhashable_tensor
from tflab.diagnosis.rules_graph import (rule_cond_vars, rule_escaped_tensor, rule_foreign_capture,
                                         rule_loop_init, rule_loop_vars)
from tflab.diagnosis.rules_python import (rule_bool_or_iter, rule_dtype_mismatch, rule_nonscalar_cond,
                                          rule_numpy, rule_runtime_op, rule_shape_none)
from tflab.diagnosis.source import Source


@dataclasses.dataclass(frozen=True)
class Rule:
    """One mistake tflab recognizes: how, what it is called, and how it is fixed.

    Attributes:
        name: a short id (``"escaped-tensor"``).
        reads: the TF mechanism the classifier reads (a frame name, a structure).
        kinds: the `Diagnosis.kind` values it can give.
        classify: ``(exc, ctx, frames, filename, line, locals, source, node) -> Diagnosis | None``.
        rewrite: the `tflab.diagnosis.fixes` function that writes the fix into a copy of
            the function (then traced, run and compared with eager: ``Diagnosis.fix_plan``),
            or None when the fix is advice only (its `tflab.fix.Fix` says "not checked: why").
    """

    name: str
    reads: str
    kinds: tuple[str, ...]
    classify: Callable[..., Diagnosis | None]
    rewrite: Callable | None = None


RULES: tuple[Rule, ...] = (
    Rule("created-in-function", "invalid_creator_scope (polymorphic_function.py)",
         ("variable-created-in-function", "layer-created-in-function"), rule_created_in_function,
         fixes.hoist_created),
    Rule("unhashable-tensor", "Tensor.__hash__ (framework/tensor.py)",
         ("tensor-as-dict-key", "tensor-in-set"), rule_unhashable_tensor, fixes.ref_keys),
    Rule("escaped-tensor", "capture_by_value (capture_container.py) and the statement map",
         ("tensor-out-of-scope", "python-state-in-tensor-if", "python-list-in-tensor-loop",
          "tensor-from-another-funcgraph"), rule_escaped_tensor, fixes.list_to_tensor_array),
    Rule("foreign-capture", "the ConcreteFunction's captures",
         ("tensor-from-another-funcgraph",), rule_foreign_capture),
    Rule("bool-or-iteration", "Tensor._disallow_bool_casting / _disallow_iteration",
         ("tensor-as-python-bool", "comprehension-over-tensor", "tensor-iterated-in-python"),
         rule_bool_or_iter, fixes.replace_call_func),
    Rule("non-scalar-condition", "_verify_tf_condition (autograph/operators/control_flow.py)",
         ("non-scalar-condition",), rule_nonscalar_cond, fixes.if_to_where),
    Rule("numpy", "Tensor.__getattr__ / __array__",
         ("numpy-on-symbolic-tensor",), rule_numpy, fixes.replace_expr),
    Rule("cond-vars", "verify_single_cond_var (autograph/operators/control_flow.py)",
         ("branch-variable-undefined", "branch-dtype-mismatch"), rule_cond_vars, fixes.replace_expr),
    Rule("loop-vars", "_verify_single_loop_var (autograph/operators/control_flow.py)",
         ("loop-variable-undefined", "loop-variable-dtype-changes", "loop-variable-shape-changes"),
         rule_loop_vars, fixes.insert_first_in_body),
    Rule("loop-init", "verify_loop_init_vars (autograph/operators/control_flow.py)",
         ("return-in-tensor-loop", "loop-variable-undefined"), rule_loop_init),
    Rule("shape-none", "the culprit statement's x.shape[i] (or a local assigned from it) against the frame's locals",
         ("shape-dim-is-none",), rule_shape_none, fixes.replace_expr),
    Rule("dtype-mismatch", "_ExtractInputsAndAttrs (op_def_library.py)",
         ("dtype-mismatch", "loop-variable-dtype-changes"), rule_dtype_mismatch, fixes.replace_expr),
    Rule("runtime-op", "the node the runtime names, and its Operation.traceback",
         ("runtime-op-error",), rule_runtime_op),
)


def classify_error(exc: BaseException, ctx: Context) -> Diagnosis:
    """The first rule's `Diagnosis` for ``exc``, else ``unrecognized`` naming the user's line."""
    frames = traceback_frames(exc)
    filename, line, loc = user_site(exc, frames)
    if not filename and ctx.filename:  # raised after the body returned (its outputs)
        filename = ctx.filename
    src = Source.of(filename)
    node = src.stmt_at(line) if src and line else None
    for rule in RULES:
        try:
            d = rule.classify(exc, ctx, frames, filename, line, loc, src, node)
        except Exception as bug:  # noqa: BLE001 - a fix tflab could not write must not hide the diagnosis
            if ctx.rewrite_error:
                raise
            ctx.rewrite_error = f"{type(bug).__name__}: {bug}"[:160]
            d = rule.classify(exc, ctx, frames, filename, line, loc, src, node)  # now without rewrites
        if d is not None:
            return d
    return make(ctx, exc, "unrecognized", filename, line,
                "no tflab rule matches this failure; the culprit is the innermost line of "
                "your code in the traceback", "read TF's error above at the culprit line",
                why="no rule matched, so tflab has no change to run")
