"""`tflab.lower` on a function with a while loop: every level, provenance, fusions, memory, stops.

One lowering (one child-process XLA dump) for the module; the stop cases stop
before the child runs. Functions live in this file so their lines can be named.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os

import pytest

tf = pytest.importorskip("tensorflow")

from tflab import lower  # noqa: E402
from tflab.errors import UsageError  # noqa: E402
from tflab.lowering import STAGES  # noqa: E402

THIS = os.path.basename(__file__)
_w = tf.Variable(tf.reshape(tf.range(32, dtype=tf.float32), [8, 4]) / 32.0)


def looped(x):
    y = tf.nn.relu(x @ _w)  # LINE:matmul
    i = tf.constant(0)
    while i < 3:  # LINE:while
        y = y * _w[0, 1]  # LINE:body
        i += 1
    return tf.reduce_sum(y)  # LINE:sum


def with_py_function(x):
    y = tf.py_function(lambda t: t * 2.0, [x], tf.float32)  # LINE:py_function
    return y + 1.0


def with_strings(x):
    return tf.strings.length(tf.strings.as_string(x))  # LINE:strings


def with_uint8_cumsum(x):
    return tf.cumsum(tf.cast(x, tf.uint8))  # LINE:uint8


def _line(tag: str) -> str:
    with open(__file__, encoding="utf-8") as f:
        for no, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# LINE:{tag}"):
                return f"{THIS}:{no}"
    raise AssertionError(tag)


def _code(key: str) -> str:
    no = int(key.rsplit(":", 1)[1])
    with open(__file__, encoding="utf-8") as f:
        return f.read().splitlines()[no - 1].strip()


@pytest.fixture(scope="module")
def low():
    # passes=True: the same compile also dumps the module after each HLO pass (tested below).
    return lower(looped, tf.TensorSpec([2, 8], tf.float32), passes=True)


@pytest.fixture(scope="module")
def concrete():
    return tf.function(looped).get_concrete_function(tf.TensorSpec([2, 8], tf.float32))


def test_stages_are_the_nine_levels_in_order_each_with_text_ops_bytes_seconds(low):
    assert [s.name for s in low.stages] == list(STAGES)
    for s in low.stages:
        assert s.why == "" and s.text and s.ops and s.bytes == len(s.text.encode()) and s.seconds >= 0, s
        assert low.stage(s.name) is s
    assert low.stopped_at == "" and low.why == ""
    with pytest.raises(KeyError, match="the stages are python"):
        low.stage("mhlo")
    # Each level counts ops in its own names.
    assert low.stage("python").ops["tf.nn.relu"] == 1 and low.stage("python").ops["while"] == 1
    assert low.stage("autograph").ops["ag__.while_stmt"] == 1
    assert low.stage("tf_mlir").ops["tf.While"] == 1 and low.stage("tf_mlir").ops["tf.MatMul"] == 1
    assert low.stage("stablehlo").ops["stablehlo.while"] == 1
    assert "while" in low.stage("hlo").ops and "fusion" in low.stage("optimized_hlo").ops
    assert "define" not in low.stage("llvm_ir").ops and low.stage("llvm_ir").ops.get("load", 0) > 0
    assert sum(low.stage("asm").ops.values()) > 10


def _funcgraph_counts_equal(stage_ops: dict, graph) -> bool:
    return stage_ops == dict(collections.Counter(op.type for op in graph.get_operations()))


def test_funcgraph_op_counts_equal_tfs_own_graph(low, concrete):
    """The funcgraph level counts the ops of TF's own FuncGraph of the same function (a plain tf.function)."""
    assert _funcgraph_counts_equal(low.stage("funcgraph").ops, concrete.graph)
    assert low.stage("funcgraph").ops["While"] == 1 and low.stage("funcgraph").ops["MatMul"] == 1
    planted = dict(low.stage("funcgraph").ops, MatMul=2)  # planted: a miscounted op
    assert not _funcgraph_counts_equal(planted, concrete.graph)


def _check_chain(p: dict) -> None:
    """The while loop at every level: ag__.while_stmt, While, stablehlo.while, HLO while, the Python while line."""
    assert any("ag__.while_stmt(" in t for t in p["autograph"]), p.get("autograph")
    assert any(t.startswith("while = While") for t in p["funcgraph"]), p["funcgraph"]
    assert any('"tf.While"' in t for t in p["tf_mlir"])
    assert any("stablehlo.while" in t for t in p["stablehlo"]), p["stablehlo"]
    assert any(" while(" in t for t in p["hlo"]) and any(" while(" in t for t in p["optimized_hlo"])
    assert p["source"] == [_line("while")] and _code(p["source"][0]).startswith("while i < 3")
    assert p["python"] == [f"{_line('while')}:     while i < 3:  # LINE:while"], p["python"]


def test_a_while_loop_runs_through_the_whole_chain(low):
    _check_chain(low.provenance("While"))
    by_line = low.provenance(_line("while"))
    assert any("stablehlo.while" in t for t in by_line["stablehlo"])
    assert any("ag__.while_stmt(" in t for t in by_line["autograph"])
    body = low.provenance(_line("body"))
    assert body["source"] == [_line("body")] and any("= Mul" in t for t in body["funcgraph"])


def test_a_provenance_planted_off_by_one_line_fails(low):
    """Planted: every op's user line moved one down; the chain check names the wrong Python line."""
    moved = [type(r)(r.name, r.type, r.path, r.line + 1 if r.line else 0, r.code, r.depth) for r in low._index]
    planted = dataclasses.replace(low, _index=moved)
    with pytest.raises(AssertionError):
        _check_chain(planted.provenance("While"))
    assert planted.provenance("While")["source"] == [f"{THIS}:{int(_line('while').split(':')[1]) + 1}"]
    assert "funcgraph" not in planted.provenance(_line("while")) or not any(
        t.startswith("while = While") for t in planted.provenance(_line("while"))["funcgraph"])


def test_fusions_name_the_users_lines_never_xlas_ops_py(low):
    fusions = {f.name: f for f in low.fusions}
    assert fusions, "no fusion records"
    for f in low.fusions:
        assert all(s.startswith(f"{THIS}:") for s in f.source_lines), f  # never framework/ops.py
        assert f.bytes_written > 0 and f.instructions
    relu = [f for f in low.fusions if "Relu" in f.tf_op_types]
    assert relu and relu[0].source_lines == (_line("matmul"),) and relu[0].kind.startswith("k")
    assert relu[0].bytes_read == relu[0].bytes_written == 2 * 4 * 4  # f32[2,4] in, f32[2,4] out
    assert relu[0].llvm_ir_bytes > 0 and relu[0].asm_bytes > 0
    dot = [f for f in low.fusions if "MatMul" in f.tf_op_types]
    assert dot and dot[0].bytes_read == (2 * 8 + 8 * 4) * 4 and dot[0].bytes_written == 2 * 4 * 4
    p = low.provenance(relu[0].name)
    assert p["source"] == [_line("matmul")] and any(relu[0].name in t for t in p["llvm_ir"])
    assert any(relu[0].name in t for t in p["asm"]) and any('"tf.Relu"' in t for t in p["tf_mlir"])


def test_memory_is_xlas_buffer_assignment(low):
    m = low.memory
    assert m["total_bytes"] >= (2 * 8 + 8 * 4) * 4  # at least the two parameters
    params = sorted(a["bytes"] for a in m["largest"] if a["kind"] == "parameter")
    assert params == [2 * 8 * 4, 8 * 4 * 4]
    assert 0 <= m["temp_bytes"] < m["total_bytes"]
    assert any("f32[8,4]" in a["shape"] for a in m["largest"])


def test_unknown_provenance_key_is_one_clear_error(low):
    with pytest.raises(UsageError, match="no TF op type or name"):
        low.provenance("NoSuchThing")
    assert low.provenance(f"{THIS}:1") == {}  # a line that made no op


def test_report_convention_repr_text_and_json(low):
    assert repr(low) == f"<Lowering looped: 9/9 stages; {len(low.fusions)} fusions/kernels>"
    text = low.to_text()
    assert text.splitlines()[0].startswith("lower looped: 9/9 stages")
    assert _line("matmul") in text
    d = json.loads(json.dumps(low.to_dict()))
    assert [s["name"] for s in d["stages"]] == list(STAGES)
    assert d["stages"][2]["ops"] == low.stage("funcgraph").ops and len(d["fusions"]) == len(low.fusions)


@pytest.mark.parametrize("fn, op_type, tag, words", [
    (with_py_function, "EagerPyFunc", "py_function", "No registered 'EagerPyFunc' OpKernel for XLA_CPU_JIT"),
    (with_strings, "AsString", "strings", "No registered 'AsString' OpKernel"),
    # An unsupported dtype: XLA has a Cumsum kernel, not for uint8 (TF: "attributes didn't match").
    (with_uint8_cumsum, "Cumsum", "uint8", "T=DT_UINT8")])
def test_where_lowering_stops_no_exception_the_levels_before_are_kept(fn, op_type, tag, words):
    low = lower(fn, tf.TensorSpec([3], tf.float32))
    assert low.stopped_at == "stablehlo", low.why
    assert op_type in low.why and "XLA cannot compile" in low.why and words in low.why, low.why
    kept = [s.name for s in low.stages if not s.why]
    assert kept == ["python", "autograph", "funcgraph", "tf_mlir"]
    assert low.stage("funcgraph").ops[op_type] == 1
    assert low.stage("stablehlo").why == low.why
    assert all(s.why.startswith("not reached") for s in low.stages[5:])
    assert low.fusions == () and low.memory == {}
    assert low.provenance(op_type)["source"] == [_line(tag)]


def test_a_spec_with_an_unknown_dim_is_refused():
    with pytest.raises(UsageError, match="static shapes"):
        lower(looped, tf.TensorSpec([None, 8], tf.float32))


def test_the_childs_private_folder_is_removed_and_the_child_reaped_also_when_lowering_stops(monkeypatch):
    import tflab.lowering.dump as dump

    children = []
    real_enter = dump.DumpChild.__enter__
    monkeypatch.setattr(dump, "_in_process", False)  # the child route, even as the process's first compile

    def enter(self):
        children.append(real_enter(self))
        return children[-1]

    monkeypatch.setattr(dump.DumpChild, "__enter__", enter)
    low = lower(with_py_function, tf.TensorSpec([3], tf.float32))
    assert low.stopped_at == "stablehlo" and len(children) == 1
    assert children[0].tmp.name.startswith(dump.TEMP_PREFIX) and not children[0].tmp.exists()
    assert children[0].proc.poll() is not None  # stopped and reaped, not left importing TF


def returns_none(x):
    y = x * 2.0  # LINE:none
    del y


def test_a_function_returning_none_stops_after_the_funcgraph_saying_why():
    """Nothing to lower is not '9/9 stages': the levels below the FuncGraph would be an empty program."""
    low = lower(returns_none, tf.TensorSpec([3], tf.float32))
    assert low.stopped_at == "tf_mlir" and "returns no tensor" in low.why and "returns_none" in low.why, low.why
    assert [s.name for s in low.stages if not s.why] == ["python", "autograph", "funcgraph"]
    assert low.stage("funcgraph").ops["Mul"] == 1 and low.summary_line() == "3/9 stages; stopped at tf_mlir"
    assert low.fusions == () and low.provenance("Mul")["source"] == [_line("none")]


def test_a_huge_static_input_is_refused_in_one_line_before_anything_is_allocated(monkeypatch):
    """The inputs' zeros are checked against the memory available (`check_fits`) before any is made."""
    import tflab.lowering.dump as dump
    from tflab.process import memory

    started = []
    monkeypatch.setattr(dump, "_in_process", False)
    monkeypatch.setattr(dump.DumpChild, "__enter__", lambda self: started.append(self) or self)
    monkeypatch.setattr(memory, "available_memory", lambda: (1 << 30, "test: 1 GiB"))
    with pytest.raises(UsageError, match=r"lower \(float32\[1024,1024,1024\]\) would need about 8\.0 GiB.*"
                                         r"1\.0 GiB is available.*smaller static shape"):
        lower(returns_none, tf.TensorSpec([1024, 1024, 1024], tf.float32))
    assert started == []  # refused before the child started
    # The healthy case beside it: 2 copies of a 256 MiB input fit in 1 GiB (no refusal from the check).
    from tflab.lowering.build import check_inputs_fit

    check_inputs_fit([tf.TensorSpec([64, 1024, 1024], tf.float32)])
    with pytest.raises(UsageError):  # planted: one float more than fits
        check_inputs_fit([tf.TensorSpec([64 * 1024 * 1024 * 2 + 1], tf.float32)])


def chained(x):
    y = x * 2.0  # LINE:c1
    y = y + 1.0  # LINE:c2
    y = tf.tanh(y)  # LINE:c3
    return y - 0.5  # LINE:c4


def test_a_fusions_user_lines_hold_every_line_the_funcgraph_gives_its_ops():
    """The fusion table's lines are the union over its TF ops of the funcgraph level's lines for them."""
    low = lower(chained, tf.TensorSpec([2, 8], tf.float32))
    by_op = {}
    for piece in low.stage("funcgraph").pieces:
        for n in piece.names:
            by_op.setdefault(n, set()).update(piece.lines)

    def missing(fusions):
        out = {}
        for f in fusions:
            want = set().union(*(by_op.get(n, set()) for n in f.tf_op_names))
            if want - set(f.source_lines):
                out[f.name] = want - set(f.source_lines)
        return out

    assert missing(low.fusions) == {}
    lines = [_line(f"c{i}") for i in range(1, 5)]
    big = [f for f in low.fusions if set(f.source_lines) == set(lines)]
    assert big, [(f.name, f.tf_op_names, f.source_lines) for f in low.fusions]  # one loop fusion of 4 lines
    text = low.to_text()
    row = next(r for r in text.splitlines() if r.strip().startswith(big[0].name + " |"))
    assert all(line in row for line in lines), row  # the table prints every one (not the first 3)
    planted = [dataclasses.replace(big[0], source_lines=big[0].source_lines[:1])]  # planted: lines cut to one
    assert set(missing(planted)) == {big[0].name}


def _instruction_lines(text: str) -> set:
    from tflab.lowering.hlo import parse_module

    return {ins.line for c in parse_module(text, 2) for ins in c.instructions}


def test_passes_replayed_from_the_unoptimized_module_give_the_optimized_one_and_a_dropped_pass_does_not(low):
    """Each pass's diff, applied in order to the HLO the compile began with, rebuilds the module XLA ran."""
    changed = [p for p in low.passes if p.changed]
    assert changed and all(p.removed or p.added or p.name for p in changed)

    def replay(passes):
        lines = _instruction_lines(low.stage("hlo").text)
        for p in passes:
            lines = (lines - set(p.removed)) | set(p.added)
        return lines

    final = _instruction_lines(low.stage("optimized_hlo").text)
    assert replay(changed) == final
    fusion = next(p for p in changed if p.name == "fusion")
    assert replay([p for p in changed if p is not fusion]) != final  # a planted gap: one pass left out
    assert any(" fusion(" in ln for ln in fusion.added) and _line("matmul") in fusion.source_lines


def test_a_pass_that_changed_nothing_is_listed_as_such(low):
    same = [p for p in low.passes if not p.changed]
    assert same and all(not p.removed and not p.added for p in same)
    changed_names = {(p.pipeline, p.name) for p in low.passes if p.changed}
    assert not changed_names & {(p.pipeline, p.name) for p in same}  # never both in one pipeline
    text = low.to_text()
    assert "changed nothing (" in text and f"{same[0].pipeline}/{same[0].name}" in text
