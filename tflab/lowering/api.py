"""`lower`: one function's lowering under XLA, every level from Python to machine code."""

from __future__ import annotations

from typing import Any, Callable

from tflab._user.usercode import user_entry
from tflab.lowering.records import Lowering

__all__ = ["lower"]


@user_entry("while lowering")
def lower(fn: Callable, *args: Any, examples: Any = None, path: str = "xla", runs: int = 20,
          passes: bool = False, **kwargs: Any) -> Lowering:
    """Lowers ``fn`` under ``tf.function(jit_compile=True)`` and keeps every level, tied back to the user's lines.

    With ``path="graph"`` it shows instead what a plain ``tf.function`` (no XLA) ran
    (`tflab.lowering.GRAPH_STAGES`): ``python``, ``autograph``, ``funcgraph``, then
    ``grappler`` (the post-optimization graph from TF's RunMetadata, with what each
    Grappler optimizer changed, measured by instantiating the function again with
    that one optimizer off), ``partition`` (each node's device and kernel library:
    ``_MklNativeFusedMatMul`` is oneDNN's, ``_FusedMatMul``/``MatMul`` TF's Eigen
    kernels) and ``profile`` (each node's time over ``runs`` runs from TF's
    profiler, its bytes and FLOPs, and its share of this machine's measured copy
    bandwidth, `custom_ops.bench.copy_roofline`). ``.nodes`` holds one `GraphNode`
    per node, naming the FuncGraph ops (and so the user's lines) it replaced;
    ``.provenance("app.py:12")`` follows a line through every level to its time.
    The function runs ``runs + 14`` times on the given inputs (zeros for a TensorSpec).

    The levels (`tflab.lowering.STAGES`): ``python`` (the source), ``autograph``
    (``tf.autograph.to_code``), ``funcgraph`` (the traced ConcreteFunction),
    ``tf_mlir`` (``tf.mlir.experimental.convert_function``), ``stablehlo``,
    ``hlo`` (``experimental_get_compiler_ir``), then ``optimized_hlo``,
    ``llvm_ir`` and ``asm`` from XLA's own dump of one compile.

    **Where XLA's dump is made.** XLA parses ``XLA_FLAGS`` once per process, at
    its first compile, into one process-wide ``DebugOptions``; TF exports
    ``xla::ParseDebugOptionFlagsFromEnv``, which has XLA read them again. The
    dump (``--xla_dump_to``, for `lower`'s own module only:
    ``--xla_dump_hlo_module_re``) is turned on for this lowering's compile and
    off right after (`tflab.lowering.dump_flags`), whether or not XLA compiled
    in this process before: no second process, and the same report as a fresh
    process's. The ``tflab lower`` verb turns the dump on before TF loads
    instead (`tflab.lowering.dump.arm_own_dump`). Where neither can be done
    (the user's ``XLA_FLAGS`` dump already, or a TF that does not export the
    function) the program is saved as a SavedModel in a private temporary
    folder and compiled once in a fresh Python process with the dump on
    (nothing is run). Either way the optimized HLO, each
    kernel's LLVM IR and object code and the buffer assignment are read from
    the dump, and the folder is emptied. The
    machine code is disassembled with ``objdump`` or ``llvm-objdump`` from
    PATH (without either the ``asm`` stage is empty and says why). When the
    child cannot compile it (a capture SavedModel cannot hold), the optimized
    HLO comes from this process (``experimental_get_compiler_ir``) and
    ``llvm_ir``/``asm``/``memory`` say why they are empty.

    **Layers.** A fusion is credited to the Keras layers whose input-dependent
    instructions it computes (`tflab.lowering.fusions.fusion_credit`): XLA
    merges equal constants across layers and keeps one layer's op name on the
    merged one, so a layer that only a constant in the fusion names is listed
    apart (``Fusion.constant_layers``), not credited.

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
        examples: real inputs instead of ``*args``: a path to an ``.npz`` with one array per
            parameter name (``np.savez(path, ids=ids)``) or a dict ``{parameter name: array}``, bound
            by name as ``--examples`` binds them (`tflab.examples.example_inputs`); ``**kwargs`` then
            give the other parameters. Default None.
        path: ``"xla"`` (the default: XLA's ladder) or ``"graph"`` (Grappler, partition, profile).
        runs: graph path: runs the profile level times (>= 1).
        passes: XLA path: also dump the module after each HLO pass (``--xla_dump_hlo_pass_re=.*``) and
            keep what each pass changed, with the user's lines, in ``.passes`` (`PassChange`).
        **kwargs: the same, by keyword (``examples``, ``path``, ``runs`` and ``passes`` are this function's own).

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
    >>> g = tflab.lower(f, tf.ones([2, 8]), path="graph")
    >>> [s.name for s in g.stages][3:]
    ['grappler', 'partition', 'profile']
    """
    from tflab._api.argcheck import check_binds, check_callable, check_xla_flags
    from tflab.lowering.build import build_lowering

    check_callable(fn, "fn", "tflab.lower", allow_none=False)
    from tflab.examples import with_examples

    args, kwargs = with_examples(fn, examples, args, kwargs)
    if args or kwargs:  # an unknown keyword is named (TF's error pointed at tflab's own frame)
        check_binds(getattr(fn, "python_function", fn), args, kwargs, "tflab.lower",
                    getattr(fn, "__name__", type(fn).__name__))
    _check_options(path, runs, passes)
    if path == "graph":
        from tflab.lowering.graph_build import build_graph_lowering

        return build_graph_lowering(fn, args, kwargs, runs=int(runs))
    check_xla_flags()  # a bad XLA_FLAGS is a UsageError here, not the end of the caller's process
    return build_lowering(fn, args, kwargs, passes=passes)


#: profiled runs of the graph path, at most (as `tflab.compare_modes` caps its repeats)
MAX_RUNS = 100_000


def _check_options(path: Any, runs: Any, passes: Any) -> None:
    """`lower`'s own options, checked whatever the path (the CLI refuses the same before TF loads).

    Raises:
        UsageError: an unknown ``path``; ``runs`` not a whole number (a numpy integer counts, a
            bool does not) in [1, `MAX_RUNS`]; ``passes`` not a bool, or True with ``path="graph"``.
    """
    import numbers

    from tflab.errors import UsageError

    if path not in ("xla", "graph"):
        raise UsageError(f"tflab.lower: path={path!r} is not a path; use path='xla' (XLA's ladder, the default) "
                         "or path='graph' (what a plain tf.function ran: Grappler, partition, profile)")
    if isinstance(runs, bool) or not isinstance(runs, numbers.Integral) or not 1 <= runs <= MAX_RUNS:
        raise UsageError(f"tflab.lower: runs={runs!r} must be a whole number from 1 to {MAX_RUNS} "
                         "(profiled runs of path='graph'), e.g. runs=20")
    if not isinstance(passes, bool):
        raise UsageError(f"tflab.lower: passes={passes!r} must be True or False (a {type(passes).__name__} is "
                         "neither: any non-empty string would count as True)")
    if passes and path == "graph":
        raise UsageError("tflab.lower: passes=True shows XLA's HLO passes: use it with path='xla' (the default); "
                         "path='graph' shows Grappler's optimizers instead")
