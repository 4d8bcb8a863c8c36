"""Issue 35: the parts of `tflab.lower` that read XLA's text, on fixed inputs (no lowering, no child process)."""

from __future__ import annotations

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
    comps = hlo.parse_module(MODULE)
    assert [c.name for c in comps] == ["fused_computation", "main"] and comps[1].entry
    fusion = comps[1].instructions[-1]
    assert (fusion.opcode, fusion.kind, fusion.calls, fusion.operands, fusion.root) == (
        "fusion", "kLoop", ("fused_computation",), ("matmul.2",), True)
    assert comps[0].instructions[1].op_names == ("Relu",)  # the child's two call levels dropped
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
    dump._read_dump(tmp_path, out)
    assert out.asm == "" and "neither objdump nor llvm-objdump is on PATH" in out.asm_why
    assert out.kernel_ir_bytes == {"multiply_reduce_fusion": len(  # define … { … } (the closing brace included)
        "define void @multiply_reduce_fusion(ptr %0) {\n  %2 = load float, ptr %0\n  ret void\n}")}
    assert out.optimized_hlo == MODULE
