"""Lab step 1: trace a function once and read its FuncGraph.

`tf.function` turns a Python function into a polymorphic callable; each call
with a new FunctionType traces the Python body into a `FuncGraph` and wraps it
in a `ConcreteFunction` (``tensorflow/python/eager/polymorphic_function/``:
``polymorphic_function.py`` and ``concrete_function.py``). This module asks for
that ConcreteFunction with `get_concrete_function` and reports what the graph
holds: every op, the captures (tf.Variables enter as resource handles; eager
tensors enter by value: up to 128 elements they are folded into a ``Const`` op,
larger ones become a ``Placeholder`` fed at call time, per ``_EAGER_CONST_THRESHOLD``
in ``tensorflow/core/function/capture/capture_container.py``), the structured
input signature, the output spec, and the control-flow ops AutoGraph emitted
(``If``/``While`` and their ``Stateless`` forms, from ``cond_v2.py`` and
``while_v2.py``). The op and capture records are `tflab.trace_records`
(importable from here too).
"""

from __future__ import annotations

import collections
import re
import dataclasses
from typing import Any, Callable

from tflab.report.base import Report, config_field
from tflab.report.html.dispatch import renders
from tflab.report.html.funcgraph import trace_notebook_fragment
from tflab._tf import function as _tf
from tflab._user.usercode import user_entry
from tflab.errors import UsageError
from tflab.trace_records import (  # noqa: F401 (re-exported)
    CONTROL_FLOW_OP_TYPES, CaptureInfo, OpInfo, TraceError, BRANCH_ATTRS, fmt_shape, outputs_as_specs,
    shape_list, spec_str)


@dataclasses.dataclass(frozen=True, repr=False)
class TraceReport(Report):
    """What one trace produced: the ConcreteFunction, its FuncGraph and their contents.

    Attributes:
        function_name: the Python function's ``__name__``.
        concrete_function: the `ConcreteFunction` traced.
        func_graph: its `FuncGraph` (``concrete_function.graph``).
        function_type: the `FunctionType` TF keyed the trace by, as text.
        structured_input_signature: ``concrete_function.structured_input_signature``:
            ``(args, kwargs)`` with `tf.TensorSpec` for tensors and the Python
            values as traced (TF's name for this pair).
        input_signature: (property) the positional part, a tuple of specs and
            traced Python values: the convention of ``tf.function(input_signature=…)``
            and `tflab.StabilizeReport.input_signature`.
        output_spec: the structured outputs with `tf.TensorSpec` in place of tensors.
        ops: every op in graph order.
        op_counts: op type → count, most common first.
        captures: `CaptureInfo` for every capture (variables and tensors).
        control_flow: the If/While/Case ops (stateful and stateless forms).
        const_bytes: bytes held by every Const op's ``value`` (branch and body FuncGraphs too).
        constants: the Const ops of 64 KiB or more (`tflab.diagnosis.baked.ConstInfo`):
            NumPy data converted while tracing, baked into the GraphDef (limit 2 GB).
        constants_fix: for those, the `tflab.fix.Fix` run by `trace_and_inspect`: the array
            passed as an argument to a re-traced copy, with the bytes left; None otherwise.
        config: `tflab.runtime_config()` as a dict, filled when the report is made.
    """

    function_name: str
    concrete_function: Any = dataclasses.field(repr=False)
    func_graph: Any = dataclasses.field(repr=False)
    function_type: str
    structured_input_signature: Any
    output_spec: Any
    ops: tuple[OpInfo, ...]
    op_counts: dict
    captures: tuple[CaptureInfo, ...]
    control_flow: tuple[OpInfo, ...]
    const_bytes: int = 0
    constants: tuple = ()
    constants_fix: Any = None
    config: dict = config_field()

    @property
    def variables(self) -> tuple[CaptureInfo, ...]:
        """Captured `tf.Variable`s."""
        return tuple(c for c in self.captures if c.kind == "variable")

    @property
    def captured_tensors(self) -> tuple[CaptureInfo, ...]:
        """Eager tensors captured by value."""
        return tuple(c for c in self.captures if c.kind == "tensor")

    @property
    def input_signature(self) -> tuple:
        """The positional specs, as ``tf.function(input_signature=…)`` takes them: ``(TensorSpec, …)``.

        The same convention as `tflab.StabilizeReport.input_signature`; the
        ``(args, kwargs)`` pair TF keeps is `structured_input_signature`.
        """
        return tuple(self.structured_input_signature[0])

    @property
    def baked_bytes(self) -> int:
        """Total bytes of captured eager tensors baked into the GraphDef as Const ops."""
        return sum(c.baked_bytes for c in self.captures)

    @property
    def fed_bytes(self) -> int:
        """Total bytes of captured eager tensors fed at call time (a Placeholder, not a Const)."""
        return sum(c.bytes for c in self.captured_tensors if c.internal_op_type != "Const")

    @property
    def capture_summary(self) -> str:
        """The captured eager tensors, split by how they reach the graph.

        E.g. ``"1 baked (40 B), 1 fed at call time (1200 B)"``: TF 2.21
        bakes a captured eager tensor of up to 128 elements into the
        GraphDef as a ``Const`` and feeds a larger one through a
        ``Placeholder`` at call time (``capture_container.py``); bytes are
        elements × itemsize. ``"none"`` when no tensor is captured.
        """
        tensors = self.captured_tensors
        if not tensors:
            return "none"
        baked = sum(c.internal_op_type == "Const" for c in tensors)
        return (f"{baked} baked ({self.baked_bytes} B), "
                f"{len(tensors) - baked} fed at call time ({self.fed_bytes} B)")

    def summary_line(self) -> str:
        top = ", ".join(f"{t}×{n}" for t, n in list(self.op_counts.items())[:4])
        if len(self.op_counts) > 4:
            top += ", …"
        var_bytes = sum(c.bytes for c in self.variables)
        cf = ", ".join(o.type for o in self.control_flow) or "none"
        from tflab.diagnosis.baked import summary_text

        baked = f"; {summary_text(self.constants)}" if self.constants else ""
        return (f"{self._signature_str()} -> {self._outputs_str()}; {len(self.ops)} ops [{top}]; "
                f"captures: {len(self.variables)} variables ({var_bytes:,} bytes), "
                f"eager tensors: {self.capture_summary}{baked}; control flow: {cf}")

    def __repr__(self) -> str:
        # ``<TraceReport dense(x: float32[None,8]) -> …>``: the signature follows the name directly
        return f"<TraceReport {self.function_name}{self.summary_line()}>"

    def _signature_str(self) -> str:
        args, kwargs = self.structured_input_signature
        try:  # parameter names come from the FunctionType; cosmetic, never fail the repr
            names = list(self.concrete_function.function_type.parameters)
        except Exception:
            names = []
        parts = []
        for i, a in enumerate(args):
            label = names[i] if i < len(names) else f"arg{i}"
            parts.append(f"{label}: {nested_str(a)}" if not _is_python(a) else f"{label}={a!r}")
        for k, v in kwargs.items():
            parts.append(f"{k}: {nested_str(v)}" if not _is_python(v) else f"{k}={v!r}")
        return "(" + ", ".join(parts) + ")"

    def _outputs_str(self) -> str:
        return nested_str(self.output_spec)

    @property
    def distributed_variables(self) -> dict[str, tuple[CaptureInfo, ...]]:
        """``"MirroredVariable w:0"`` -> its captured components (one per replica)."""
        out: dict[str, list[CaptureInfo]] = {}
        for c in self.variables:
            if c.distributed:
                out.setdefault(c.distributed, []).append(c)
        return {k: tuple(v) for k, v in out.items()}

    def _distributed_lines(self) -> list[str]:
        groups = self.distributed_variables
        if not groups:
            return []
        n = sum(len(v) for v in groups.values())
        lines = [f"    {n} of these handles are components of {len(groups)} distributed variable(s) "
                 f"(made in strategy.scope(); one component per replica, each on its device):"]
        for label, comps in groups.items():
            devs = ", ".join(c.device.rsplit("/", 1)[-1] or "?" for c in comps)
            lines.append(f"    {label}: {comps[0].dtype}{fmt_shape(comps[0].shape)}, "
                         f"{len(comps)} components ({', '.join(c.name for c in comps)}) on {devs}")
        per_device = collections.Counter(op.device for op in self.func_graph.get_operations())
        placed = ", ".join(f"{d.rsplit('/', 1)[-1]}: {k}" for d, k in sorted(per_device.items()) if d)
        if placed:
            lines.append(f"    ops per device: {placed}"
                         + (f"; unplaced inputs/outputs: {per_device['']}" if per_device.get("") else ""))
        return lines

    def to_text(self, max_ops: int | None = 60) -> str:
        """A readable multi-line report.

        Args:
            max_ops: list at most this many ops (None for all; an int >= 0).

        Raises:
            UsageError: ``max_ops`` is not None or an int >= 0.
        """
        from tflab._api.argcheck import check_int

        max_ops = check_int(max_ops, "max_ops", "TraceReport.to_text", minimum=0, allow_none=True)
        lines = [f"FuncGraph of {self.function_name}: {len(self.ops)} ops",
                 f"  FunctionType: {self.function_type}",
                 f"  inputs:  {self._signature_str()}",
                 f"  outputs: {self._outputs_str()}",
                 "  op types: " + ", ".join(f"{t}×{n}" for t, n in self.op_counts.items())]
        var_bytes = sum(c.bytes for c in self.variables)
        lines.append(f"  captures: {len(self.variables)} variables ({var_bytes:,} bytes, fed as "
                     f"resource handles); eager tensors: {self.capture_summary}")
        plain = [c for c in self.variables if not c.distributed]
        for c in plain[:8]:
            lines.append(f"    variable {c.name}: {c.dtype}{fmt_shape(c.shape)}")
        if len(plain) > 8:
            lines.append(f"    … {len(plain) - 8} more variables")
        lines += self._distributed_lines()
        for c in self.captured_tensors:
            how = "baked as Const" if c.internal_op_type == "Const" else "fed at call time"
            lines.append(f"    tensor {c.internal}: {c.dtype}{fmt_shape(c.shape)}, {c.bytes:,} bytes, {how}")
        from tflab.diagnosis.baked import text_lines

        lines += text_lines(self.constants, self.constants_fix)
        if self.control_flow:
            lines.append("  control flow:")
            for op in self.control_flow:
                lines.append(f"    {op.type} {op.name!r} -> functions {', '.join(op.functions)}")
        else:
            lines.append("  control flow: none")
        lines.append("  ops:")
        shown = self.ops if max_ops is None else self.ops[:max_ops]
        for op in shown:
            outs = ", ".join(f"{d}{fmt_shape(s)}" for _, d, s in op.outputs)
            lines.append(f"    {op.name} = {op.type}({', '.join(op.inputs)}) -> {outs or '()'}")
        if len(shown) < len(self.ops):
            lines.append(f"    … {len(self.ops) - len(shown)} more ops (to_text(max_ops=None) lists all)")
        return "\n".join(lines)

    def to_dot(self, max_ops: int | None = 400) -> str:
        """The FuncGraph as Graphviz DOT source (render with ``dot -Tsvg``).

        Ops are nodes labelled ``name\\ntype``; edges are tensors labelled with
        dtype and shape. Placeholders (inputs and captures) are drawn as
        ellipses, control-flow ops as diamonds, Const ops grey.

        Args:
            max_ops: draw at most this many ops (None for all; an int >= 0); big
                models make unreadable pictures.

        Raises:
            UsageError: ``max_ops`` is not None or an int >= 0.
        """
        from tflab._api.argcheck import check_int

        max_ops = check_int(max_ops, "max_ops", "TraceReport.to_dot", minimum=0, allow_none=True)
        import graphviz

        # A name like "<lambda>" would read as an HTML-like ID in DOT.
        dot = graphviz.Digraph(name=re.sub(r"\W", "_", self.function_name), graph_attr={"rankdir": "TB"},
                               node_attr={"shape": "box", "fontname": "Helvetica", "fontsize": "10"},
                               edge_attr={"fontname": "Helvetica", "fontsize": "8"})
        shown = self.ops if max_ops is None else self.ops[:max_ops]
        names = {op.name for op in shown}
        producers: dict[str, tuple[str, str]] = {}
        for op in shown:
            for tname, dt, shape in op.outputs:
                producers[tname] = (op.name, f"{dt}{fmt_shape(shape)}")
            attrs = {}
            if op.type == "Placeholder":
                attrs = {"shape": "ellipse", "style": "filled", "fillcolor": "lightblue"}
            elif op.type in CONTROL_FLOW_OP_TYPES:
                attrs = {"shape": "diamond", "style": "filled", "fillcolor": "gold"}
            elif op.type == "Const":
                attrs = {"style": "filled", "fillcolor": "lightgrey"}
            dot.node(op.name, f"{op.name}\n{op.type}", **attrs)
        for op in shown:
            for inp in op.inputs:
                src = inp.lstrip("^").rsplit(":", 1)[0]
                if src in names:
                    label = producers.get(inp, (src, ""))[1]
                    dot.edge(src, op.name, label=label, style="dashed" if inp.startswith("^") else "solid")
        if len(shown) < len(self.ops):
            dot.node("__truncated__", f"… {len(self.ops) - len(shown)} more ops", shape="plaintext")
        return dot.source

    def to_dict(self) -> dict:
        """JSON-ready dict (no TF objects)."""
        from tflab.report.jsonable import to_jsonable

        args, kwargs = self.structured_input_signature
        return {
            "function": self.function_name,
            "function_name": self.function_name,
            "config": self.config,
            "function_type": self.function_type,
            "input_signature": {"args": to_jsonable(list(args)), "kwargs": to_jsonable(kwargs)},
            "output_spec": to_jsonable(self.output_spec),
            "op_count": len(self.ops),
            "op_counts": dict(self.op_counts),
            "captures": [dataclasses.asdict(c) for c in self.captures],
            "baked_bytes": self.baked_bytes,
            "fed_bytes": self.fed_bytes,
            "const_bytes": self.const_bytes,
            "constants": [dataclasses.asdict(c) for c in self.constants],
            "constants_fix": self.constants_fix.to_dict() if self.constants_fix is not None else None,
            "control_flow": [dataclasses.asdict(o) for o in self.control_flow],
            "ops": [dataclasses.asdict(o) for o in self.ops],
        }


def _is_python(x: Any) -> bool:
    """True for a traced Python value (no TypeSpec anywhere inside it)."""
    import tensorflow as tf

    return not any(isinstance(v, tf.TypeSpec) for v in tf.nest.flatten(x, expand_composites=False))


def nested_str(x: Any) -> str:
    import tensorflow as tf

    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {nested_str(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(nested_str(v) for v in x)
        return f"({inner})" if isinstance(x, tuple) else f"[{inner}]"
    if isinstance(x, tf.TypeSpec):
        return spec_str(x)
    return repr(x)


def as_tf_function(fn: Any) -> Any:
    """Returns ``fn`` if it is a `tf.function`, ``fn.__call__`` if that is one, else ``tf.function(fn)``.

    Raises:
        UsageError: ``fn`` is not callable.
    """
    import tensorflow as tf

    if hasattr(fn, "get_concrete_function") and hasattr(fn, "python_function"):
        return fn
    if not callable(fn):
        raise UsageError(f"expected a function or tf.function, got {type(fn).__name__} "
                         f"({fn!r:.60}); pass the callable itself, e.g. trace_and_inspect(f, x)")
    if isinstance(fn, type):  # tracing M(x) built an instance: "expected string…, got 'SymbolicTensor'"
        raise UsageError(f"expected a function or tf.function, got the class {fn.__name__}; pass an "
                         f"instance's method or a function, e.g. trace_and_inspect({fn.__name__}(...).call, x)")
    bound = getattr(fn, "__call__", None)
    if not isinstance(fn, type) and hasattr(bound, "get_concrete_function") and hasattr(bound, "python_function"):
        # An object whose __call__ is a tf.function (a tf.Module with @tf.function __call__):
        # that bound tf.function is what TF traces; wrapping the object again would give an
        # outer FuncGraph holding one StatefulPartitionedCall instead of the ops.
        return bound
    return tf.function(fn)


def function_name(fn: Any) -> str:
    """A readable name for a tf.function, function, bound method or Keras model."""
    target = getattr(fn, "python_function", fn)
    return (getattr(target, "__name__", None)
            or getattr(target, "name", None) or type(target).__name__)


def get_concrete_function(fn: Any, *args, **kwargs):
    """`tf_fn.get_concrete_function(*args, **kwargs)`, with expected failures as one line.

    Raises:
        UsageError: the arguments do not match the function's ``input_signature``
            (TF's ``TypeError: Binding inputs …``) or its parameters.
        TraceError: the Python body raised while tracing; the message names the
            user's frame. The original exception is ``__cause__``.
    """
    from tflab._user.target import error_summary, user_frame
    from tflab.diagnosis import with_diagnosis

    tf_fn = as_tf_function(fn)
    try:
        return tf_fn.get_concrete_function(*args, **kwargs)
    except TypeError as e:
        from tflab._user.target import binding_error

        mismatch = binding_error(function_name(fn), tf_fn, e)
        if mismatch is not None:
            raise mismatch from e
        where = user_frame(e)
        raise with_diagnosis(TraceError(f"{function_name(fn)} raised while tracing: {error_summary(e)}"
                                        + (f" (at {where})" if where else "")), e, fn) from e
    except Exception as e:  # the user's Python body failed at trace time
        where = user_frame(e)
        raise with_diagnosis(TraceError(f"{function_name(fn)} raised while tracing: {error_summary(e)}"
                                        + (f" (at {where})" if where else "")), e, fn) from e


def inspect_concrete_function(concrete_function: Any, name: str | None = None) -> TraceReport:
    """Builds a `TraceReport` from an existing `ConcreteFunction`.

    Args:
        concrete_function: e.g. ``f.get_concrete_function(tf.TensorSpec([None, 8]))``
            or one loaded from a SavedModel signature.
        name: label for reports (default: the ConcreteFunction's name).

    Returns:
        A `TraceReport`.
    """
    import tensorflow as tf

    graph = concrete_function.graph
    ops = []
    for op in graph.get_operations():
        funcs = []
        for attr in BRANCH_ATTRS:
            try:
                val = op.get_attr(attr)
            except (ValueError, TypeError):
                continue
            vals = val if isinstance(val, list) else [val]
            funcs.extend(getattr(v, "name", str(v)) if not isinstance(v, bytes) else v.decode() for v in vals)
        ops.append(OpInfo(
            name=op.name, type=op.type,
            inputs=tuple(t.name for t in op.inputs) + tuple("^" + c.name for c in op.control_inputs),
            outputs=tuple((o.name, o.dtype.name, shape_list(o.shape)) for o in op.outputs),
            functions=tuple(funcs)))
    counts = collections.Counter(op.type for op in ops)
    by_handle = {id(v.handle): v for v in concrete_function.variables}
    captures = []
    for external, internal in graph.captures:
        var = by_handle.get(id(external))
        if var is not None:
            dtype = var.dtype.base_dtype
            shape = shape_list(var.shape)
            nelem = int(tf.TensorShape(var.shape).num_elements() or 0)
            owner = _tf.distributed_container(var)
            captures.append(CaptureInfo("variable", var.name, dtype.name, shape,
                                        nelem * dtype.size, internal.name, internal.op.type,
                                        distributed=(f"{type(owner).__name__} {owner.name}"
                                                     if owner is not None else ""),
                                        device=var.device if owner is not None else ""))
        elif external.dtype == tf.resource:
            # A resource that is not a tracked variable (a lookup table, an iterator).
            captures.append(CaptureInfo("resource", internal.name, "resource", [], 0,
                                        internal.name, internal.op.type))
        else:
            shape = shape_list(external.shape)
            nelem = int(tf.TensorShape(external.shape).num_elements() or 0)
            size = nelem * (external.dtype.size if external.dtype != tf.string else 0)
            if external.dtype == tf.string and hasattr(external, "numpy"):
                size = int(sum(len(b) for b in tf.nest.flatten(external.numpy().tolist())))
            captures.append(CaptureInfo("tensor", internal.name, external.dtype.name, shape, size,
                                        internal.name, internal.op.type))
    from tflab.diagnosis.baked import baked_constants

    const_bytes, constants = baked_constants(graph)
    try:
        ftype = str(concrete_function.function_type)
    except Exception:  # some loaded ConcreteFunctions carry no FunctionType
        ftype = repr(concrete_function.structured_input_signature)
    return TraceReport(
        function_name=name or (concrete_function.name.decode() if isinstance(concrete_function.name, bytes)
                      else concrete_function.name),
        concrete_function=concrete_function,
        func_graph=graph,
        function_type=ftype,
        structured_input_signature=concrete_function.structured_input_signature,
        output_spec=outputs_as_specs(concrete_function.structured_outputs),
        ops=tuple(ops),
        op_counts=dict(counts.most_common()),
        captures=tuple(captures),
        control_flow=tuple(o for o in ops if o.type in CONTROL_FLOW_OP_TYPES),
        const_bytes=const_bytes, constants=constants,
    )


@user_entry("while tracing")
def trace_and_inspect(fn: Callable, *args: Any, examples: Any = None, **kwargs: Any) -> TraceReport:
    """Traces ``fn`` once and reports its ConcreteFunction's FuncGraph.

    Tracing goes through `tf.function.get_concrete_function`, so a plain
    callable is wrapped in `tf.function` first and a `tf.function` keeps its
    own options (``input_signature``, ``jit_compile``, ``reduce_retracing``).

    Args:
        fn: a `tf.function`, a Python function, a bound method or a Keras model.
        *args: example values and/or `tf.TensorSpec`s, e.g.
            ``tf.TensorSpec([None, 8], tf.float32)``; Python values are traced
            as constants (a ``Literal`` in the FunctionType).
        **kwargs: the same, by keyword.
        examples: real inputs instead of ``*args``: a path to an ``.npz`` with one array per
            parameter name (``np.savez(path, ids=ids)``) or a dict ``{parameter name: array}``, bound
            by name as ``--examples`` binds them (`tflab.examples.example_inputs`); ``**kwargs`` then
            give the other parameters. Default None.

    Returns:
        A `TraceReport` with the ConcreteFunction, FuncGraph, ops, op-type
        counts, captures (variables and captured eager tensors with their
        bytes), the structured input signature, the output spec and the
        control-flow ops.

    Raises:
        UsageError: ``fn`` is not callable, or the arguments do not match its
            signature or ``input_signature``.
        TraceError: the body raised while tracing (the message names the
            user's line; the original exception is ``__cause__``).

    Example:

    >>> import tensorflow as tf
    >>> from tflab import trace_and_inspect
    >>> w = tf.Variable(tf.ones([8, 4]))
    >>> r = trace_and_inspect(lambda x: tf.nn.relu(x @ w), tf.TensorSpec([None, 8]))
    >>> r.op_counts["MatMul"], len(r.variables), r.output_spec
    (1, 1, TensorSpec(shape=(None, 4), dtype=tf.float32, name=None))
    """
    from tflab.examples import with_examples

    args, kwargs = with_examples(fn, examples, args, kwargs)
    if _is_concrete_function(fn):
        if args or kwargs:
            raise UsageError("a ConcreteFunction is already traced: pass no arguments, "
                             "or pass the tf.function itself to trace it with new ones")
        return inspect_concrete_function(fn)
    concrete = get_concrete_function(fn, *args, **kwargs)
    report = inspect_concrete_function(concrete, name=function_name(fn))
    if report.constants:  # NumPy data baked in: the fix (the array as an argument), re-traced
        from tflab.diagnosis.baked import baked_fix

        report = dataclasses.replace(report, constants_fix=baked_fix(fn, args, kwargs, concrete, report.constants))
    return report


def _is_concrete_function(fn: Any) -> bool:
    return (hasattr(fn, "graph") and hasattr(fn, "structured_input_signature")
            and not hasattr(fn, "python_function"))


# Its HTML fragment (notebook and --html pages): tflab.report.html.dispatch's registry.
renders(TraceReport)(trace_notebook_fragment)
