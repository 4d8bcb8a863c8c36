"""The parts of `tflab.lower` that read XLA's text, on fixed inputs, and its temp folders and child (no TF)."""

from __future__ import annotations

import pytest

from tflab.lowering import dump, hlo

BUFFERS = """BufferAssignment:
allocation 0: size 128, parameter 1, shape |f32[8,4]| at ShapeIndex {}:
 value: <12 arg1.1 @0> (size=128,offset=0): f32[8,4]{1,0}
allocation 2: size 4, output shape is |f32[]|, maybe-live-out:
 value: <14 multiply_reduce_fusion @0> (size=4,offset=0): f32[]
allocation 3: size 4, thread-local:
 value: <2 add.1 @0> (size=4,offset=0): f32[]
allocation 6: size 32, preallocated-temp:
 value: <13 matmul.2 @0> (size=32,offset=0): f32[2,4]{1,0}

Total bytes used: 168 (168B)

Used values:
<0 x.1 @0>
"""

MODULE = """HloModule m, entry_computation_layout={(f32[2,8]{1,0})->f32[]}

%fused_computation (param_0.2: f32[2,4]) -> f32[] {
  %param_0.2 = f32[2,4]{1,0} parameter(0)
  %c = f32[] constant(0), metadata={op_type="Relu" op_name="StatefulPartitionedCall/StatefulPartitionedCall/Relu"}
  ROOT %Sum.0 = f32[] reduce(%param_0.2, %c), dimensions={0,1}, to_apply=%add, metadata={op_type="Sum" op_name="Sum"}
}

ENTRY %main (arg0.1: f32[2,8], arg1.1: f32[8,4]) -> f32[] {
  %arg0.1 = f32[2,8]{1,0} parameter(0), metadata={op_name="XLA_Args"}
  %arg1.1 = f32[8,4]{1,0} parameter(1), metadata={op_name="XLA_Args"}
  %matmul.2 = f32[2,4]{1,0} dot(%arg0.1, %arg1.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="MatMul" op_name="matmul"}
  ROOT %multiply_reduce_fusion = f32[] fusion(%matmul.2), kind=kLoop, calls=%fused_computation, metadata={op_type="Sum" op_name="Sum"}
}
"""


def test_buffer_assignment_totals_temp_and_largest_with_shapes():
    m = dump.parse_buffer_assignment(BUFFERS)
    assert m["total_bytes"] == 168 and m["temp_bytes"] == 32 and m["allocations"] == 4
    assert [(a["bytes"], a["kind"], a["shape"]) for a in m["largest"]] == [
        (128, "parameter", "f32[8,4]"), (32, "temp", "f32[2,4]{1,0}"), (4, "output", "f32[]"), (4, "thread-local", "f32[]")]


def test_hlo_text_instructions_metadata_and_bytes_from_shapes():
    comps = hlo.parse_module(MODULE, call_levels=2)
    assert [c.name for c in comps] == ["fused_computation", "main"] and comps[1].entry
    fusion = comps[1].instructions[-1]
    assert (fusion.opcode, fusion.kind, fusion.calls, fusion.operands, fusion.root) == (
        "fusion", "kLoop", ("fused_computation",), ("matmul.2",), True)
    assert comps[0].instructions[1].op_names == ("Relu",)  # the child's two call levels dropped
    assert hlo.parse_module(MODULE)[0].instructions[1].op_names == ("StatefulPartitionedCall/"
                                                                   "StatefulPartitionedCall/Relu",)  # in-process: kept
    # A program without variables is called through PartitionedCall (stateless): dropped the same way.
    assert hlo.clean_op_name("PartitionedCall/PartitionedCall/sub", 2) == "sub"
    assert hlo.clean_op_name("PartitionedCall/inner/mul", 2) == "inner/mul"  # only call levels go
    assert hlo.clean_op_name("PartitionedCall/mul", 0) == "PartitionedCall/mul"
    assert hlo.shape_bytes("f32[2,4]{1,0}") == 32 and hlo.shape_bytes("(f32[2], s8[3], pred[])") == 12
    assert hlo.shape_bytes("bf16[10]") == 20 and hlo.shape_bytes("s4[3]") == 2
    assert hlo.opcode_counts(comps)["parameter"] == 3


def test_asm_stage_says_why_it_is_empty_without_objdump_or_llvm_objdump(tmp_path, monkeypatch):
    prefix = "module_0000.m."
    (tmp_path / f"{prefix}before_optimizations.txt").write_text(MODULE)
    (tmp_path / f"{prefix}cpu_after_optimizations.txt").write_text(MODULE)
    (tmp_path / f"{prefix}multiply_reduce_fusion_kernel_module.ir-with-opt.ll").write_text(
        "define void @multiply_reduce_fusion(ptr %0) {\n  %2 = load float, ptr %0\n  ret void\n}\n")
    (tmp_path / f"{prefix}obj-file.multiply_reduce_fusion_kernel_module.o").write_bytes(b"\x7fELF")
    monkeypatch.setattr(dump.shutil, "which", lambda name: None)
    out = dump.DumpResult()
    dump.read_dump(tmp_path, out)
    assert out.asm == "" and "neither objdump nor llvm-objdump is on PATH" in out.asm_why
    assert out.kernel_ir_bytes == {"multiply_reduce_fusion": len(  # define … { … } (the closing brace included)
        "define void @multiply_reduce_fusion(ptr %0) {\n  %2 = load float, ptr %0\n  ret void\n}")}
    assert out.optimized_hlo == MODULE


def _stages(fg):
    from tflab.lowering.records import STAGES, Stage

    return tuple(fg if name == "funcgraph" else Stage(name, why="not produced") for name in STAGES)


def test_a_control_flow_type_key_names_its_family_while_and_statelesswhile():
    """TF writes ``StatelessWhile`` for a loop whose body is stateless; ``provenance("While")`` finds it too."""
    from tflab.errors import UsageError
    from tflab.lowering import provenance as prov
    from tflab.lowering.records import Lowering, Piece, Stage
    from tflab.lowering.stages import OpRecord

    index = [OpRecord("while", "StatelessWhile", "/u/f.py", 5, "while i < 3:", 0),
             OpRecord("cond", "If", "/u/f.py", 9, "if x > 0:", 0),
             OpRecord("mul", "Mul", "/u/f.py", 6, "x = x * 2", 1)]
    fg = Stage("funcgraph", "…", {"StatelessWhile": 1}, pieces=tuple(
        Piece(f"{r.name} = {r.type}", names=(r.name,), lines=(r.source,), key=r.name) for r in index))
    low = Lowering(function_name="f", stages=_stages(fg), _index=index)
    assert low.provenance("While") == {"funcgraph": ["while = StatelessWhile"], "source": ["f.py:5"]}
    assert low.provenance("StatelessWhile")["source"] == ["f.py:5"]
    assert low.provenance("StatelessIf")["source"] == ["f.py:9"]  # the other way round: If found
    assert prov.op_types("Mul") == ("Mul",)
    with pytest.raises(UsageError):
        low.provenance("Case")  # a family with no member here is still an unknown key


def test_a_planted_exact_type_match_misses_statelesswhile(monkeypatch):
    from tflab.errors import UsageError
    from tflab.lowering import provenance as prov
    from tflab.lowering.records import Lowering, Stage
    from tflab.lowering.stages import OpRecord

    low = Lowering(function_name="f", stages=_stages(Stage("funcgraph")),
                   _index=[OpRecord("while", "StatelessWhile", "/u/f.py", 5, "", 0)])
    monkeypatch.setattr(prov, "op_types", lambda key: (key,))  # planted: the pre-fix exact match
    with pytest.raises(UsageError):
        low.provenance("While")


def test_a_lowering_folder_left_by_a_dead_owner_is_swept_by_the_next_one(tmp_path, monkeypatch):
    """The child's folder is an owned temp dir; a later lowering's `owned_temp_dir` removes a dead one."""
    import subprocess
    import sys

    from tflab._io import paths as _paths

    monkeypatch.setattr(_paths.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{dump.TEMP_PREFIX}killed"
    (left / "xla_dump").mkdir(parents=True)
    (left / _paths.OWNER).write_text(f"{int(dead.stdout)} 1\n")  # its owner is gone
    alive = tmp_path / f"{dump.TEMP_PREFIX}running"
    alive.mkdir()
    _paths.mark_owner(alive)  # this process: kept
    new = _paths.owned_temp_dir(dump.TEMP_PREFIX)
    assert not left.exists() and alive.exists() and new.exists() and (new / _paths.OWNER).exists()


def test_the_dump_child_dies_with_a_sigkilled_parent_and_its_folder_is_swept(tmp_path):
    """``kill -9`` of the lowering's process leaves no ``_child.py`` running and no folder for long."""
    import os
    import subprocess
    import sys
    import time

    from tflab._io import paths as _paths

    code = ("import os, signal, sys; from tflab.lowering.dump import DumpChild; c = DumpChild().__enter__(); "
            "print(c.proc.pid, c.tmp, flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=os.getcwd())
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    pid_text, folder = run.stdout.split()
    pid = int(pid_text)

    def running() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    deadline = time.monotonic() + 5.0  # the child's TF import alone takes longer than this
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(), f"_child.py {pid} still runs after its parent's SIGKILL"
    assert os.path.isdir(folder) and os.path.basename(folder).startswith(dump.TEMP_PREFIX)
    assert _paths.owner_gone(_paths.Path(folder)) is not None
    assert _paths.Path(folder) in _paths.sweep_stale(tmp_path, "tflab_", say=lambda line: None)  # the CLI's sweep
    assert not os.path.exists(folder)


def test_lower_refuses_a_bad_xla_flags_and_a_non_callable_before_tf_can_stop_the_process(monkeypatch):
    """A bad XLA_FLAGS ended the caller's process (TF's F line at the first
    compile); `lower` now asks the same cached child probe as `compare_modes` first. `lower(None)` says
    it needs a callable, as every other API call does."""
    import tensorflow as tf

    import tflab
    from tflab.errors import UsageError
    from tflab.process import xla_probe

    with pytest.raises(UsageError, match=r"^tflab\.lower: fn must be a callable, got None"):
        tflab.lower(None, tf.TensorSpec([2]))
    monkeypatch.setenv("XLA_FLAGS", "--xla_hostile_bogus_flag=1")
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    fatal = "F0000 00:00:1 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: --xla_hostile_bogus_flag=1"
    monkeypatch.setattr(xla_probe, "_XLA_PROBED", {("--xla_hostile_bogus_flag=1", ""): fatal})
    with pytest.raises(UsageError, match=r"bad XLA_FLAGS: 'F0000 .*Unknown flag in XLA_FLAGS"):
        tflab.lower(lambda x: x + 1.0, tf.TensorSpec([2]))


def test_the_fusion_table_says_how_many_tf_op_types_it_leaves_out():
    """The table showed 4 TF op types and dropped a fifth (Tanh) without a word."""
    from tflab.lowering.records import Fusion, Lowering, Stage
    from tflab.lowering.text import lowering_text

    types = ("Sum", "Mul", "Neg", "Erfc", "Tanh")
    f = Fusion(name="fusion.1", kind="kLoop", computation="main", instructions=("fusion.1 = fusion",),
               tf_op_names=tuple(t.lower() for t in types), tf_op_types=types, source_lines=("f.py:3",),
               layers=(), llvm_ir_bytes=10, asm_bytes=10, bytes_read=64, bytes_written=32)
    low = Lowering(function_name="f", stages=_stages(Stage("funcgraph")), fusions=(f,))
    row = next(line for line in lowering_text(low).splitlines() if line.startswith("  fusion.1 |"))
    assert row.endswith("Sum, Mul, Neg, Erfc … +1 more"), row


# ------------------------------------------------------------------ the memory line never cuts a shape

def _memory_lowering(shapes):
    from tflab.lowering.records import Lowering, Stage

    largest = [{"index": i, "bytes": 4096 >> i, "kind": "temp", "shape": s, "values": []} for i, s in enumerate(shapes)]
    return Lowering(function_name="f", stages=_stages(Stage("funcgraph")),
                    memory={"total_bytes": 8192, "temp_bytes": 4096, "allocations": 3, "largest": largest})


def _memory_line(shapes):
    from tflab.lowering.text import lowering_text

    return next(ln for ln in lowering_text(_memory_lowering(shapes)).splitlines() if ln.startswith("memory"))


def _shape_pieces_whole(line, shapes):
    """Every bracket the line opens is closed, and each shape shown is one of the real ones, whole."""
    from tflab.lowering.text import split_shapes

    assert line.count("[") == line.count("]") and line.count("{") == line.count("}"), line
    real = {s for text in shapes for s in split_shapes(text)}
    items = line.split("largest: ", 1)[1].split("; ")
    shown = [s for item in items for s in split_shapes(item.split(" ", 3)[3]) if not s.startswith("…")]
    assert shown and all(s in real for s in shown), (shown, real)


def test_the_memory_line_keeps_a_long_tuple_shape_whole():
    """A tuple allocation's shape was cut at 60 characters, mid-shape ("f32[64,1"): whole shapes, the
    rest counted."""
    tup = "(" + ", ".join(f"f32[64,128,{i}]{{2,1,0}}" for i in range(1, 9)) + ")"
    line = _memory_line([tup])
    _shape_pieces_whole(line, [tup])
    assert "more shapes)" in line, line


def test_the_memory_line_keeps_shapes_joined_from_values_and_one_long_shape_whole():
    """Siblings: an allocation named by its values' shapes (joined with ", ", as `parse_buffer_assignment`
    does, which also cut at 200 characters), and a single array shape longer than the limit."""
    joined = ", ".join(f"s32[{i},1024,1024]{{2,1,0}}" for i in range(10, 16))
    rank = "f32[" + ",".join(["3"] * 40) + "]{" + ",".join(map(str, range(39, -1, -1))) + "}"
    from tflab.lowering.text import split_shapes

    line = _memory_line([joined, rank])
    _shape_pieces_whole(line, [joined, rank])
    assert rank in line, line  # one shape is never elided, however long
    values = [f"f32[{i},123456,7]{{2,1,0}}" for i in range(1, 12)]
    text = "BufferAssignment:\nallocation 0: size 64, preallocated-temp:\n" + "".join(
        f" value: <{i} v.{i} @0> (size=4,offset=0): {v}\n" for i, v in enumerate(values)) + "\nTotal bytes used: 64\n"
    (alloc,) = dump.parse_buffer_assignment(text)["largest"]
    assert sorted(split_shapes(alloc["shape"])) == sorted(values)  # the record keeps every shape whole


def test_a_short_memory_shape_is_printed_as_it_is():
    """Healthy twin: shapes that fit are printed unchanged."""
    line = _memory_line(["f32[2,4]{1,0}", "(f32[2], s8[3])"])
    assert line.endswith("4.0 KiB temp f32[2,4]{1,0}; 2.0 KiB temp (f32[2], s8[3])"), line


# ------------------------------------------------------------------ one count of rewritten nodes

def _graph_lowering(nodes):
    from tflab.lowering.records import Lowering, Stage

    return Lowering(function_name="f", stages=_stages(Stage("funcgraph")), path="graph", nodes=tuple(nodes))


def _node(name, op, replaced_types, grappler_op=None):
    from tflab.lowering.records import GraphNode

    return GraphNode(name=name, grappler_op=grappler_op or op, op=op, kernel="TF (Eigen)", device="CPU:0",
                     replaced=tuple(t.lower() for t in replaced_types), replaced_types=tuple(replaced_types))


def _counts(low):
    import re

    header = int(re.search(r"(\d+) fused/rewritten", low.summary_line()).group(1))
    m = re.search(r"^rewritten nodes \((\d+)\)", low.to_text(), re.M)
    rows = [ln for ln in low.to_text().splitlines() if ln.startswith("  ") and " | " in ln]
    return header, int(m.group(1)) if m else 0, len(rows)


def test_the_header_and_the_table_count_the_same_rewritten_nodes():
    """The header counted only fusions (several ops in one node); the table also listed a node run as
    another op type (oneDNN's ``_MklMatMul`` for one ``MatMul``): one rule, `GraphNode.rewritten`."""
    fused = _node("Relu", "_FusedMatMul", ("MatMul", "BiasAdd", "Relu"))
    renamed = _node("MatMul_1", "_MklMatMul", ("MatMul",))
    assert _counts(_graph_lowering([fused, renamed])) == (2, 2, 2)
    # sibling: Grappler rewrote the op type, the partition graph holds no other (grappler_op differs)
    layout = _node("conv", "Conv2D", ("DepthwiseConv2dNative",), grappler_op="Conv2D")
    assert _counts(_graph_lowering([layout])) == (1, 1, 1)


def test_a_node_grappler_kept_is_counted_by_neither():
    """Healthy twin: nodes that stand for themselves, and one with nothing replaced (``_Arg``)."""
    kept = [_node("add", "AddV2", ("AddV2",)), _node("mul", "Mul", ("Mul",)), _node("x", "_Arg", ())]
    assert _counts(_graph_lowering(kept)) == (0, 0, 0)


def test_a_pass_diff_line_is_cut_outside_its_shapes():
    """Sibling: the per-pass diff lines were cut at 160 characters, inside a shape or operand list; they
    are cut at a space or comma outside any bracket. Healthy twin: a short line is whole."""
    from tflab.lowering.text import cut_outside_shapes

    line = ("%fusion.7 = (f32[64,128,256]{2,1,0}, f32[64,128,256]{2,1,0}, s32[64,128]{1,0}) fusion(%p0, %p1, "
            "%p2), kind=kLoop, calls=%fused_computation.7, metadata={op_type=\"AddV2\" op_name=\"add\"}")
    for limit in range(20, len(line), 7):
        cut = cut_outside_shapes(line, limit)
        head = cut[:-2] if cut.endswith(" …") else cut
        assert line.startswith(head) and head.count("[") == head.count("]") and head.count("(") == head.count(")")
        assert head.count("{") == head.count("}"), (limit, cut)
    assert cut_outside_shapes("%a = f32[2]{0} add(%x, %y)") == "%a = f32[2]{0} add(%x, %y)"
