"""The steps of `tflab.lower`, level by level; a level that fails stops the ones after it."""

from __future__ import annotations

import re
import time
from typing import Any

from tflab.errors import UsageError
from tflab.lowering.records import STAGES, Lowering, Stage

__all__ = ["build_lowering", "flat_function", "flat_inputs", "python_levels", "check_inputs_fit"]


def _is_keras_model(fn: Any) -> bool:
    return hasattr(fn, "layers") and hasattr(fn, "get_layer") and callable(fn)


def _keras_layers(model: Any) -> list:
    out, todo = [], list(getattr(model, "layers", []))
    while todo:
        layer = todo.pop(0)
        out.append(layer)
        todo.extend(getattr(layer, "layers", []) or [])
    return out


def flat_inputs(args: tuple, kwargs: dict):
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


def flat_function(py_fn, rebuild, name: str):
    """The function the ladder traces: the user's call rebuilt from flat tensors, its outputs as a flat dict.

    Its frame (this file, ``flat``) is where `tflab.lowering.stages.user_frame` cuts an op's
    traceback: frames above it (the line that called `tflab.lower`) are never the op's user line.
    """
    import tensorflow as tf

    def flat(*xs):
        a, k = rebuild(xs)
        out = py_fn(*a, **k)
        return {f"output_{i}": t for i, t in enumerate(tf.nest.flatten(out))}

    flat.__name__ = name if name.isidentifier() else "lowered"
    return flat


def python_levels(fn: Any) -> tuple[Any, Any, list | None, list]:
    """(python function, source function or None, Keras layers or None, [python Stage, autograph Stage])."""
    from tflab.lowering import stages as st

    keras = _is_keras_model(fn)
    py_fn = getattr(fn, "python_function", fn)
    layers = _keras_layers(fn) if keras else None
    if keras:
        call = getattr(type(fn), "call", None)
        functional = type(fn).__name__ in ("Functional", "Sequential") or call is None
        py_source = None if functional else call
    else:
        py_source = py_fn
    done = []
    # python and autograph never stop the ladder: a body Python cannot show still traces.
    for stage_name, producer in (("python", lambda: st.python_stage(py_source, layers)),
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
    return py_fn, py_source, layers, done


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
    t0, c0 = time.perf_counter(), time.process_time()
    text, ops, pieces, note = make()
    return Stage(name, text, ops, time.perf_counter() - t0, "", note, tuple(pieces),
                 cpu_seconds=time.process_time() - c0)


def check_inputs_fit(specs: list) -> None:
    """One line (UsageError) when the zero inputs the compile needs cannot fit in memory, before any is made.

    ``experimental_get_compiler_ir`` takes tensors: one set of zeros of every
    input in this process and one in the child (`tflab.lowering.dump`).
    """
    from tflab.process.memory import check_fits

    sizes = [s.shape.num_elements() * max(s.dtype.size, 1) for s in specs]
    shapes = ", ".join(f"{s.dtype.name}[{','.join(map(str, s.shape.as_list()))}]" for s in specs[:3])
    check_fits(sum(sizes), 2, f"lower ({shapes})", "give a smaller static shape (XLA's HLO for a batch "
               "of 1 or 2 shows the same fusions)")


def build_lowering(fn: Any, args: tuple, kwargs: dict, passes: bool = False) -> Lowering:
    from tflab.lowering.dump import dumper

    specs, rebuild = flat_inputs(args, kwargs)
    check_inputs_fit(specs)
    # The child (when this process cannot dump: TF ran here first) starts now: its TF import and the
    # SavedModel save overlap this process's tracing and its tf_mlir/stablehlo/hlo levels (2 cores).
    with dumper(passes) as dump:
        return build_levels(fn, specs, rebuild, dump, passes)


def build_levels(fn: Any, specs: list, rebuild, child, passes: bool = False) -> Lowering:
    import tensorflow as tf

    from tflab.lowering import stages as st
    from tflab.lowering.dump import JIT_SUFFIX
    from tflab.lowering.layers import record_layer_calls
    from tflab.tracing import function_name, get_concrete_function

    name = function_name(fn)
    py_fn, py_source, layers, python_done = python_levels(fn)
    flat = flat_function(py_fn, rebuild, name)
    # XLA's module is named after it: the suffix lets an in-process dump take only this compile.
    flat.__name__ += JIT_SUFFIX
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

    done.extend(python_done)
    t0, c0 = time.perf_counter(), time.process_time()
    with record_layer_calls() as layer_calls:  # which Keras layer call created each op (not a scope guess)
        concrete = get_concrete_function(jit)  # tracing errors are the user's: raised as TraceError
    trace_seconds, trace_cpu = time.perf_counter() - t0, time.process_time() - c0
    op_layer = layer_calls.names_for(concrete.graph)
    index = st.op_index(concrete.graph)
    fg = _timed("funcgraph", lambda: st.funcgraph_stage(concrete.graph, index))
    fg.seconds += trace_seconds
    fg.cpu_seconds += trace_cpu
    done.append(fg)
    if not concrete.outputs:
        # Nothing to compute: XLA would compile an empty program and every level below would be
        # empty, which is not a lowering of the user's function.
        stopped = "tf_mlir"
        why = (f"{name} returns no tensor (None, or an empty structure): XLA has no output to compute, so "
               f"nothing of it lowers past the FuncGraph ({sum(fg.ops.values())} ops traced, none used); "
               "return the tensors you want to see lowered")
    specs_list = [(s.name, s.dtype.name, s.shape.as_list()) for s in specs]
    if not stopped:
        child.submit(concrete, specs_list, concrete.variables)  # the child compiles while we go on
    add("tf_mlir", lambda: st.tf_mlir_stage(concrete))
    generator = None
    if not stopped:
        generator = jit.experimental_get_compiler_ir(*[tf.zeros(s.shape, s.dtype) for s in specs])
    add("stablehlo", lambda: st.stablehlo_stage(generator))
    fusions, memory, pass_list = [], {}, []
    if not stopped:
        fusions, memory = _compiled_stages(add, done, generator, fg, op_layer, child, pass_list if passes else None)
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
                    stopped_at=stopped, why=why, _index=index, passes=tuple(pass_list))


def _compiled_stages(add, done, generator, funcgraph, op_layer, child, pass_list=None):
    """hlo, optimized_hlo, llvm_ir and asm from one compile's dump (without one: hlo and optimized_hlo here)."""
    from tflab.lowering import stages as st
    from tflab.lowering.dump import parse_buffer_assignment
    from tflab.lowering.fusions import asm_stage, build_fusions, llvm_stage

    t0 = time.perf_counter()
    dump = child.collect(generator)
    wall = time.perf_counter() - t0
    # A fusion's user lines: the union, over its TF ops, of the lines the funcgraph level gives each op.
    op_source: dict[str, tuple] = {}
    for piece in funcgraph.pieces:
        for n in piece.names:
            op_source[n] = tuple(dict.fromkeys(op_source.get(n, ()) + piece.lines))
    if dump.error or not dump.hlo:
        add("hlo", lambda: st.hlo_stage(generator(stage="hlo"), 'experimental_get_compiler_ir(...)(stage="hlo")'))
    else:  # the module XLA's compile began with (its before_optimizations dump): no second tf2xla lowering
        text, ops, pieces, _ = st.hlo_stage(dump.hlo, "", dump.call_levels)
        done.append(Stage("hlo", text, ops, 0.0, "", "the HLO module the compile below began with (XLA's "
                          "*.before_optimizations.txt dump); seconds: 0, made by that compile", tuple(pieces)))
    if dump.error:
        stage = add("optimized_hlo", lambda: st.hlo_stage(
            generator(stage="optimized_hlo"), 'experimental_get_compiler_ir(...)(stage="optimized_hlo") in this '
            f"process (the child compile failed: {dump.error[:200]})"))
        why = f"XLA's dump was not made: {dump.error}"
        done.extend([Stage("llvm_ir", why=why), Stage("asm", why=why)])
        if stage is None:
            return [], {}
        return build_fusions(stage.text, {}, {}, op_source, op_layer), {}
    secs = dump.seconds
    note = dump.note(wall)
    opt = st.hlo_stage(dump.optimized_hlo, note, dump.call_levels)
    done.append(Stage("optimized_hlo", opt[0], opt[1], secs.get("optimized_hlo", 0.0), "",
                      note + "; seconds: the HLO passes (dump file times)", tuple(opt[2])))
    fusions = build_fusions(dump.optimized_hlo, dump.kernel_ir_bytes, dump.kernel_asm_bytes, op_source, op_layer,
                            dump.call_levels)
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
    if pass_list is not None and dump.hlo:
        from tflab.lowering.passes import pass_changes

        pass_list.extend(pass_changes(dump.files, dump.hlo, op_source, dump.call_levels))
    return fusions, memory
