"""XLA for `tflab.modes`: tf2xla's error messages, HLO stages, fusion counting, one HLO fetch.

* `xla_reason` turns a tf2xla error (``Detected unsupported operations …``,
  ``XLA compilation requires a fixed tensor list size``) into one line;
* `probe_hlo_stages` reads the stage names ``experimental_get_compiler_ir``
  accepts from TF's own "Valid values are" message;
* `count_fusions` counts ``fusion`` instructions of optimized HLO text;
* `fetch_hlo` gets the wanted text stages with as few compiles as TF allows.

What one stage costs (``tensorflow/compiler/jit/get_compiler_ir.cc``, TF 2.21):
every ``experimental_get_compiler_ir(...)(stage=…)`` call lowers the FuncGraph
with tf2xla again (``XlaCompiler::CompileFunction``), and each *optimized*
stage (``optimized_hlo``, ``optimized_hlo_dot``, ``optimized_hlo_serialized``)
builds a fresh XLA executable (``BuildExecutable`` → ``LocalClient::Compile``):
it never reads the ``DeviceCompiler`` cache that the ``jit_compile=True`` call
filled, and TF offers no public way to read the running executable's HLO. So the
least it can cost is one XLA compile beyond the run's own. `fetch_hlo` asks for
each wanted stage once, from one generator; `tflab.modes` asks for ``hlo`` and
``optimized_hlo`` by default, and ``optimized_hlo_dot`` (a Graphviz rendering
that costs a second compile of the same program) only when it is named. The
probe with a bogus stage name compiles nothing: TF checks the name first.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["xla_reason", "probe_hlo_stages", "count_fusions", "fetch_hlo", "HloFetch"]

_XLA_UNSUPPORTED_RE = re.compile(r"(\w+) \((.*?)\)\{\{node ([^}]+)\}\}")
_XLA_TENSOR_LIST_SIZE = "XLA compilation requires a fixed tensor list size"
_NODE_REF_RE = re.compile(r"\{\{node ([^}]+)\}\}")


def xla_reason(exc: BaseException) -> str:
    """One line naming the ops XLA could not compile and TF's reason, from a tf2xla error.

    TF's message reads ``Detected unsupported operations when trying to compile
    graph … on XLA_CPU_JIT: OpType (reason){{node name}}`` followed by where the
    op was created (``tf2xla/kernels``, ``compiler/jit/xla_compilation_cache``).
    """
    text = str(getattr(exc, "message", None) or exc)
    found = _XLA_UNSUPPORTED_RE.findall(text)
    if found:
        where = re.search(r'The op is created at:.*?((?:File "[^"]+", line \d+, in \S+\s*)+)', text, re.S)
        last = ""
        if where:
            frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', where.group(1))
            # The innermost frame with a real file: op wrappers that
            # tf.load_op_library generates run from "<string>".
            frames = [fr for fr in frames if not fr[0].startswith("<")] or frames
            if frames:
                f, ln, fn = frames[-1]
                last = f" (created at {f}:{ln} in {fn})"
        ops = "; ".join(f"{op_type} op {node!r}: " + _NODE_REF_RE.sub(r"'\1'", reason)
                        for op_type, reason, node in found)
        return f"XLA cannot compile {ops}{last}"
    if _XLA_TENSOR_LIST_SIZE in text:
        node = _NODE_REF_RE.search(text)
        name = node.group(1) if node else ""
        if "/accumulator" in name:
            # while_v2's gradient: the forward loop pushes every iteration's intermediates
            # onto a TensorList accumulator (while_v2.py _WhileBodyGradFuncGraph); XLA needs
            # its size, which only maximum_iterations gives (tf2xla tensor_list_utils).
            return ("XLA cannot compile the gradient of a while loop without maximum_iterations "
                    f"(TensorList accumulator {name!r}; TF says \"{_XLA_TENSOR_LIST_SIZE}\" and names a "
                    "TensorArray, but this list is the gradient's, not one in the code): the backward pass stores every iteration's values in a "
                    "list whose size XLA must know")
    from tflab._graph.failures import error_chain, innermost_error
    from tflab._user.target import user_frame

    # TF's own line under Keras' "Exception encountered when calling …" wrapper (tensorflow#109015)
    where = user_frame(exc) or next((user_frame(c) for c in reversed(error_chain(exc)) if user_frame(c)), "")
    return innermost_error(exc) + (f" (at {where})" if where else "")


# --------------------------------------------------------------------------- HLO


def probe_hlo_stages(ir_generator: Callable) -> tuple[str, ...]:
    """Stage names ``experimental_get_compiler_ir(...)(stage=…)`` accepts on this TF.

    An unknown stage makes TF raise ``Invalid stage selected: … Valid values
    are: 'hlo', …`` (``eager/pywrap_tfe_src.cc``); the list is read from there.
    """
    try:
        ir_generator(stage="tflab-probe-not-a-stage")
    except Exception as e:  # the message is the only place TF lists the stages
        names = re.findall(r"'([a-z_]+)'", str(e).split("Valid values are:", 1)[-1])
        if "Valid values are:" in str(e) and names:
            return tuple(names)
    return ()


def count_fusions(hlo_text: str) -> tuple[int, dict[str, int]]:
    """Number of ``fusion`` instructions in HLO text, and their kinds.

    A fusion instruction reads ``%name = f32[…] fusion(…), kind=kLoop,
    calls=%fused_computation…``; the fused computations it calls are not counted.
    """
    kinds: dict[str, int] = {}
    n = 0
    for line in hlo_text.splitlines():
        if re.search(r"=\s*\S.*?\sfusion\(", line) and "kind=" in line:
            n += 1
            m = re.search(r"kind=(k\w+)", line)
            if m:
                kinds[m.group(1)] = kinds.get(m.group(1), 0) + 1
    return n, kinds




class HloFetch:
    """What `fetch_hlo` got: stage texts, the stage names TF offers, fusions, and what it cost.

    Attributes:
        text: stage name → HLO text (or ``"<stage unavailable: …>"`` when that stage failed).
        stages: every stage name TF accepts here (serialized ones included).
        fusion_count: ``fusion`` instructions in ``optimized_hlo``; None without that stage.
        fusion_kinds: fusion kind → count.
        stage_calls: the ``experimental_get_compiler_ir`` stage calls made (each one lowers
            the FuncGraph with tf2xla once).
        compiles: how many of those built an XLA executable (the optimized stages).
    """

    def __init__(self) -> None:
        self.text: dict[str, str] = {}
        self.stages: tuple[str, ...] = ()
        self.fusion_count: int | None = None
        self.fusion_kinds: dict[str, int] = {}
        self.stage_calls = 0
        self.compiles = 0


def fetch_hlo(ir_generator: Callable, wanted: bool | tuple[str, ...]) -> HloFetch:
    """Fetches the wanted text stages of one ``experimental_get_compiler_ir`` generator, each once.

    Args:
        ir_generator: ``tf.function(..., jit_compile=True).experimental_get_compiler_ir(*args)``;
            made once by the caller (it looks the ConcreteFunction up in the tf.function's
            cache, it does not trace again).
        wanted: True for every text stage TF offers, or a tuple of stage names.

    Returns:
        An `HloFetch`. Serialized (bytes) stages are never fetched.
    """
    out = HloFetch()
    out.stages = probe_hlo_stages(ir_generator)
    for stage in out.stages:
        if "serialized" in stage:
            continue  # bytes of a proto, not text
        if not isinstance(wanted, bool) and stage not in wanted:
            continue
        out.stage_calls += 1
        out.compiles += stage.startswith("optimized")
        try:
            out.text[stage] = ir_generator(stage=stage)
        except Exception as e:  # one stage failing must not hide the others
            out.text[stage] = f"<{stage} unavailable: {type(e).__name__}: {str(e)[:200]}>"
    if "optimized_hlo" in out.text:
        out.fusion_count, out.fusion_kinds = count_fusions(out.text["optimized_hlo"])
    return out
