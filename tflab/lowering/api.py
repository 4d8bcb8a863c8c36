"""`lower`: one function's lowering under XLA, every level from Python to machine code."""

from __future__ import annotations

from typing import Any, Callable

from tflab._user.usercode import user_entry
from tflab.lowering.records import Lowering

__all__ = ["lower"]


@user_entry("while lowering")
def lower(fn: Callable, *args: Any, **kwargs: Any) -> Lowering:
    """Lowers ``fn`` under ``tf.function(jit_compile=True)`` and keeps every level, tied back to the user's lines.

    The levels (`tflab.lowering.STAGES`): ``python`` (the source), ``autograph``
    (``tf.autograph.to_code``), ``funcgraph`` (the traced ConcreteFunction),
    ``tf_mlir`` (``tf.mlir.experimental.convert_function``), ``stablehlo``,
    ``hlo`` (``experimental_get_compiler_ir``), then ``optimized_hlo``,
    ``llvm_ir`` and ``asm`` from XLA's own dump of one compile.

    **A child process.** XLA reads ``XLA_FLAGS`` once per process, so its dump
    (``--xla_dump_to``) cannot be turned on in this one once TF ran (the
    ``tflab lower`` verb turns it on before TF loads and dumps its own compile
    instead, `tflab.lowering.dump.arm_own_dump`). The
    program is saved as a SavedModel in a private temporary folder and
    compiled once in a fresh Python process with the dump on (nothing is
    run); the optimized HLO, each kernel's LLVM IR and object code and the
    buffer assignment are read from there, and the folder is removed. The
    machine code is disassembled with ``objdump`` or ``llvm-objdump`` from
    PATH (without either the ``asm`` stage is empty and says why). When the
    child cannot compile it (a capture SavedModel cannot hold), the optimized
    HLO comes from this process (``experimental_get_compiler_ir``) and
    ``llvm_ir``/``asm``/``memory`` say why they are empty.

    Where lowering stops (an op without an XLA kernel such as a custom op or
    ``tf.py_function``, an unsupported dtype) nothing is raised: the levels
    up to there are kept, ``stopped_at`` names the first level that failed and
    ``why`` names the op type and quotes TF.

    Args:
        fn: a Python function, a `tf.function` (its Python function is lowered;
            its own options are not used) or a Keras model.
        *args: tensors or fully defined `tf.TensorSpec`s (XLA compiles for static
            shapes), e.g. ``tf.TensorSpec([2, 8], tf.float32)``; Python values are
            traced as constants.
        **kwargs: the same, by keyword.

    Returns:
        A `Lowering`: ``.stages`` (name, text, ops, bytes, seconds), ``.stage(name)``,
        ``.fusions``, ``.provenance(key)``, ``.memory``, ``.stopped_at``, ``.why``.

    Raises:
        UsageError: ``fn`` is not callable, a bad ``XLA_FLAGS`` (tried in a child first, as
            `compare_modes` does), a TensorSpec with an unknown dimension, arguments that do not fit ``fn``, or
            inputs whose zeros would not fit in the memory available (checked before any is made).
        tflab.tracing.TraceError: ``fn`` raised while tracing.

    Example:

    >>> w = tf.Variable(tf.ones([8, 4]))
    >>> def f(x):
    ...     return tf.reduce_sum(tf.nn.relu(x @ w) * 3.0)
    >>> low = tflab.lower(f, tf.TensorSpec([2, 8]))
    >>> [s.name for s in low.stages][:4], low.stage("funcgraph").ops["MatMul"]
    (['python', 'autograph', 'funcgraph', 'tf_mlir'], 1)
    >>> low.fusions[0].tf_op_types      # ('Sum', 'Relu', 'Mul')
    """
    from tflab._api.argcheck import check_binds, check_callable, check_xla_flags
    from tflab.lowering.build import build_lowering

    check_callable(fn, "fn", "tflab.lower", allow_none=False)
    if args or kwargs:  # an unknown keyword is named (TF's error pointed at tflab's own frame)
        check_binds(getattr(fn, "python_function", fn), args, kwargs, "tflab.lower",
                    getattr(fn, "__name__", type(fn).__name__))
    check_xla_flags()  # a bad XLA_FLAGS is a UsageError here, not the end of the caller's process
    return build_lowering(fn, args, kwargs)
