"""The steps of `tflab.lower`, level by level; a level that fails stops the ones after it."""

from __future__ import annotations

import re
import time
from typing import Any

from tflab.errors import UsageError
from tflab.lowering.records import STAGES, Lowering, Stage

__all__ = ["build_lowering"]


def _is_keras_model(fn: Any) -> bool:
    return hasattr(fn, "layers") and hasattr(fn, "get_layer") and callable(fn)


def _keras_layers(model: Any) -> list:
    out, todo = [], list(getattr(model, "layers", []))
    while todo:
        layer = todo.pop(0)
        out.append(layer)
        todo.extend(getattr(layer, "layers", []) or [])
    return out


def _referenced_layers(fn: Any) -> list | None:
    """The Keras layers (nested ones included) of the models and layers ``fn`` reads from its closure or globals."""
    import inspect
    import sys

    if "keras" not in sys.modules or not callable(fn):
        return None
    import keras

    try:
        refs = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return None
    found = [v for v in (*refs.nonlocals.values(), *refs.globals.values()) if isinstance(v, keras.layers.Layer)]
    out = []
    for v in found:
        if not getattr(v, "layers", None):  # a model is the scope around its layers, not one of them
            out.append(v)
        out.extend(_keras_layers(v))
    return out or None


def _flat_inputs(args: tuple, kwargs: dict):
    """The tensor leaves of the call as named static TensorSpecs, and a rebuild of the call from them."""
    import numpy as np
    import tensorflow as tf

    structure = (args, kwargs)
    leaves = tf.nest.flatten(structure)
    specs, where = [], []
    for i, v in enumerate(leaves):
        if isinstance(v, tf.TensorSpec):
            spec = v
        elif isinstance(v, (tf.Tensor, tf.Variable, np.ndarray)):
            spec = tf.TensorSpec(v.shape, tf.as_dtype(v.dtype))
        else:
            continue
        name = f"a{len(specs)}"
        if not spec.shape.is_fully_defined():
            label = f"argument {spec.name!r}" if spec.name else f"tensor argument {len(specs)}"
            dims = ",".join("None" if d is None else str(d) for d in spec.shape.as_list())
            raise UsageError(f"{label} is {spec.dtype.name}[{dims}]: XLA lowers for static shapes; give every "
                             "dimension (a tensor, or a TensorSpec without None)")
        specs.append(tf.TensorSpec(spec.shape, spec.dtype, name=name))
        where.append(i)

    def rebuild(xs):
        new = list(leaves)
        for i, x in zip(where, xs):
            new[i] = x
        return tf.nest.pack_sequence_as(structure, new)

    return specs, rebuild


class _Stop(Exception):
    """A level could not be produced: ``why`` names the op type and quotes TF."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


_UNSUPPORTED_RE = re.compile(r"on XLA_\w+: (\w+) \((.*?)\)\{\{node ([^}]+)\}\}", re.S)


def _why(exc: BaseException) -> str:
    from tflab.modes.xla import xla_reason

    text = str(getattr(exc, "message", None) or exc).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    reason = xla_reason(exc)
    if "XLA cannot compile" not in reason:
        # tf2xla's reason can span lines (a kernel whose dtype does not match: "OpKernel was found, but
        # attributes didn't match) Requested Attributes: T=DT_UINT8 …"), which xla_reason reads on one line.
        m = _UNSUPPORTED_RE.search(text)
        if m:
            detail = " ".join(m.group(2).replace("{{node ", "'").replace("}}", "'").split())
            reason = f"XLA cannot compile {m.group(1)} op '{m.group(3)}': {detail[:500]}" + (
                f" ({reason.rsplit('(at ', 1)[1]}" if "(at " in reason else "")
    quote = first if len(first) <= 300 else first[:299] + "…"
    return reason if quote in reason else f'{reason}; TF said: "{quote}"'


def _timed(name: str, make) -> Stage:
    t0 = time.perf_counter()
    text, ops, pieces, note = make()
    return Stage(name, text, ops, time.perf_counter() - t0, "", note, tuple(pieces))


def build_lowering(fn: Any, args: tuple, kwargs: dict) -> Lowering:
    from tflab.lowering.dump import DumpChild

    # The child starts first: its TF import runs beside this process's tracing (2 cores).
    with DumpChild() as child:
        return _build(fn, args, kwargs, child)


def _build(fn: Any, args: tuple, kwargs: dict, child) -> Lowering:
    import tensorflow as tf

    from tflab.lowering import stages as st
    from tflab.tracing import function_name, get_concrete_function

    name = function_name(fn)
    keras = _is_keras_model(fn)
    py_fn = getattr(fn, "python_function", fn)
    layers = _keras_layers(fn) if keras else _referenced_layers(py_fn)
    if keras:
        call = getattr(type(fn), "call", None)
        functional = type(fn).__name__ in ("Functional", "Sequential") or call is None
        py_source = None if functional else call
    else:
        py_source = py_fn
    specs, rebuild = _flat_inputs(args, kwargs)

    def flat(*xs):
        a, k = rebuild(xs)
        out = py_fn(*a, **k)
        return {f"output_{i}": t for i, t in enumerate(tf.nest.flatten(out))}

    flat.__name__ = name if name.isidentifier() else "lowered"
    jit = tf.function(flat, jit_compile=True, input_signature=specs)
    done: list[Stage] = []
    stopped, why = "", ""

    def add(stage_name: str, make) -> Stage | None:
        nonlocal stopped, why
        if stopped:
            return None
        try:
            stage = _timed(stage_name, make)
        except _Stop as e:
            stopped, why = stage_name, e.why
            return None
        except Exception as e:  # TF could not produce this level: kept as the stop, with TF's words
            stopped, why = stage_name, f"{stage_name} failed: {_why(e)}"
            return None
        done.append(stage)
        return stage

    # python and autograph never stop the ladder: a body Python cannot show still traces.
    for stage_name, producer in (("python", lambda: st.python_stage(py_source, layers if keras else None)),
                                 ("autograph", lambda: st.autograph_stage(py_source))):
        try:
            if py_source is None and stage_name == "autograph":
                raise ValueError("a Functional Keras model has no Python body of its own to convert")
            stage = _timed(stage_name, producer)
            if not stage.text:
                stage.why = "Python cannot show the source of this function (no file)"
        except Exception as e:
            stage = Stage(stage_name, why=f"{type(e).__name__}: {str(e)[:200]}")
        done.append(stage)
    t0 = time.perf_counter()
    concrete = get_concrete_function(jit)  # tracing errors are the user's: raised as TraceError
    trace_seconds = time.perf_counter() - t0
    index = st.op_index(concrete.graph)
    fg = _timed("funcgraph", lambda: st.funcgraph_stage(concrete.graph, index))
    fg.seconds += trace_seconds
    done.append(fg)
    add("tf_mlir", lambda: st.tf_mlir_stage(concrete))
    generator = None
    if not stopped:
        generator = jit.experimental_get_compiler_ir(*[tf.zeros(s.shape, s.dtype) for s in specs])
    add("stablehlo", lambda: st.stablehlo_stage(generator))
    add("hlo", lambda: st.hlo_stage(generator(stage="hlo"), 'experimental_get_compiler_ir(...)(stage="hlo")'))
    fusions, memory = [], {}
    if not stopped:
        fusions, memory = _compiled_stages(add, done, concrete, specs, generator, index, layers, child)
    by_name = {s.name: s for s in done}
    all_stages = []
    for stage_name in STAGES:
        if stage_name in by_name:
            all_stages.append(by_name[stage_name])
        elif stopped:
            all_stages.append(Stage(stage_name, why=(why if stage_name == stopped
                                                     else f"not reached: lowering stopped at {stopped}")))
        else:
            all_stages.append(Stage(stage_name, why="not produced"))
    return Lowering(function_name=name, stages=tuple(all_stages), fusions=tuple(fusions), memory=memory,
                    stopped_at=stopped, why=why, _index=index)


def _compiled_stages(add, done, concrete, specs, generator, index, layers, child):
    """optimized_hlo, llvm_ir and asm from the child's dump (or optimized_hlo here when it failed)."""
    from tflab.lowering import stages as st
    from tflab.lowering.dump import parse_buffer_assignment
    from tflab.lowering.fusions import asm_stage, build_fusions, llvm_stage

    t0 = time.perf_counter()
    dump = child.finish(concrete, [(s.name, s.dtype.name, s.shape.as_list()) for s in specs], concrete.variables)
    wall = time.perf_counter() - t0
    op_source = {r.name: r.source for r in index}
    layer_names = {layer.name for layer in layers or []}
    if dump.error:
        stage = add("optimized_hlo", lambda: st.hlo_stage(
            generator(stage="optimized_hlo"), 'experimental_get_compiler_ir(...)(stage="optimized_hlo") in this '
            f"process (the child compile failed: {dump.error[:200]})"))
        why = f"XLA's dump was not made: {dump.error}"
        done.extend([Stage("llvm_ir", why=why), Stage("asm", why=why)])
        if stage is None:
            return [], {}
        return build_fusions(stage.text, {}, {}, op_source, layer_names), {}
    secs = dump.seconds
    note = (f"XLA's dump of one compile in a child process ({dump.compile_seconds:.2f} s compile, "
            f"{wall:.2f} s waited here for the SavedModel save and the child, whose TF import began with the "
            f"lowering)")
    opt = st.hlo_stage(dump.optimized_hlo, note)
    done.append(Stage("optimized_hlo", opt[0], opt[1], secs.get("optimized_hlo", 0.0), "",
                      note + "; seconds: the HLO passes (dump file times)", tuple(opt[2])))
    fusions = build_fusions(dump.optimized_hlo, dump.kernel_ir_bytes, dump.kernel_asm_bytes, op_source, layer_names)
    ops, pieces = llvm_stage(dump.llvm_ir, dump.kernel_ir_text, fusions)
    done.append(Stage("llvm_ir", dump.llvm_ir, ops, secs.get("llvm_ir", 0.0),
                      "" if dump.llvm_ir else "XLA wrote no LLVM IR (every op ran as a library call)",
                      "each kernel's *.ir-with-opt.ll; seconds: codegen and LLVM's passes (dump file times)",
                      tuple(pieces)))
    ops, pieces = asm_stage(dump.asm, dump.kernel_asm_text, fusions)
    done.append(Stage("asm", dump.asm, ops, secs.get("asm", 0.0), dump.asm_why,
                      "each kernel's object file disassembled; seconds: object emission and disassembly",
                      tuple(pieces)))
    memory = parse_buffer_assignment(dump.buffer_assignment) if dump.buffer_assignment else {}
    return fusions, memory
