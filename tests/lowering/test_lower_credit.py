"""A fusion is credited to the layers whose work it computes, never to a layer that only a shared constant names.

XLA's common-subexpression elimination merges equal constants across layers
(every BatchNormalization's and LayerNormalization's epsilon) and keeps one
layer's ``op_name`` on the merged constant. A credit read from every
instruction's metadata then names layers that do no work in the fusion.
These tests judge `tflab.lowering.fusions.fusion_credit` against an
independent reading of the optimized HLO text: a credited layer must own at
least one instruction of the fusion that is neither a constant nor computed
from constants alone.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tflab.lowering import fusions as fusions_mod  # noqa: E402
from tflab.lowering.fusions import build_fusions  # noqa: E402
from tflab.lowering.layers import record_layer_calls  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

_FUSION_RE = re.compile(r"%(\S+) = [^\n]*? fusion\([^\n]*calls=%([\w.\-]+)")
_COMP_RE = re.compile(r"^%?([\w.\-]+) \([^\n]*\{\n(.*?)\n\}", re.M | re.S)
_LINE_RE = re.compile(r"^\s*(?:ROOT )?%(\S+) = .*? ([a-z][\w\-]*)\((.*?)\)(?:, |$)")


def _owners_of_work(text: str) -> dict[str, set[str]]:
    """Fusion name → the path components of the op names of its instructions that do work.

    Read from the HLO text alone: an instruction does no work when it is a
    ``constant`` or all its operands inside the fused computation are such
    (a broadcast of a constant, a reshape of one, …). Parameters do work, and
    so do the computations its reductions apply (``to_apply=``: a softmax's max).
    A Keras layer ``L`` owns an op name with a component ``L`` or ``L_N``.
    """
    bodies = {m.group(1): m.group(2) for m in _COMP_RE.finditer(text)}

    def lines(comp, seen):
        if comp in seen:
            return []
        seen.add(comp)
        out = bodies.get(comp, "").splitlines()
        for applied in re.findall(r"to_apply=%([\w.\-]+)", bodies.get(comp, "")):
            out += lines(applied, seen)
        return out

    out = {}
    for m in _FUSION_RE.finditer(text):
        constant, parts = set(), set()
        for line in lines(m.group(2), set()):
            lm = _LINE_RE.match(line)
            if not lm:
                continue
            name, opcode, args = lm.groups()
            operands = re.findall(r"%([\w.\-]+)", args)
            if opcode == "constant" or (operands and all(o in constant for o in operands)):
                constant.add(name)
                continue
            for op_name in re.findall(r'op_name="([^"]+)"', line):
                for p in op_name.split("/"):
                    parts |= {p, re.sub(r"_\d+$", "", p)}
        out[m.group(1)] = parts
    return out


def _miscredited(text: str, fusions) -> list[tuple[str, tuple, list]]:
    """(fusion, its layers, the layers among them that own no work in it), for each fusion with such a layer."""
    owners = _owners_of_work(text)
    bad = []
    for f in fusions:
        if f.name in owners:
            extra = [layer for layer in f.layers if layer not in owners[f.name]]
            if extra:
                bad.append((f.name, f.layers, extra))
    return bad


def _compile(model, shape):
    """The optimized HLO of ``model`` for a zero input of ``shape`` and which layer call made each op."""
    jit = tf.function(lambda v: model(v, training=False), jit_compile=True)
    spec = tf.TensorSpec(shape, tf.float32)
    with record_layer_calls() as calls:
        concrete = jit.get_concrete_function(spec)
    text = jit.experimental_get_compiler_ir(tf.zeros(shape))(stage="optimized_hlo")
    return text, calls.names_for(concrete.graph)


def _credit_with_constants(text, op_layer, monkeypatch):
    """The planted defect: a credit that counts every instruction (constants too) as the fusion's work."""
    with monkeypatch.context() as m:
        m.setattr(fusions_mod, "input_free", lambda *a, **k: set())
        return build_fusions(text, {}, {}, {}, op_layer)


def _two_conv_bn_blocks():
    inp = keras.Input((8, 8, 4))
    x = keras.layers.Conv2D(4, 3, padding="same", name="c1")(inp)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU(name="r1")(x)
    x = keras.layers.Conv2D(4, 3, padding="same", name="c2")(x)
    x = keras.layers.BatchNormalization(name="bn2")(x)
    return keras.Model(inp, x)


def _two_layernorm_blocks():
    inp = keras.Input((6,))
    x = keras.layers.Dense(8, name="d1")(inp)
    x = keras.layers.LayerNormalization(name="ln1")(x)
    x = keras.layers.Dense(8, name="d2")(x)
    x = keras.layers.LayerNormalization(name="ln2")(x)
    return keras.Model(inp, x)


def _one_conv_bn_block():
    inp = keras.Input((8, 8, 4))
    x = keras.layers.Conv2D(4, 3, padding="same", name="c1")(inp)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    return keras.Model(inp, keras.layers.ReLU(name="r1")(x))


@pytest.fixture(scope="module")
def compiled():
    """Optimized HLO of the three small models (in this process: no dump is needed for the credit)."""
    keras.utils.set_random_seed(3)
    return {"conv_bn": _compile(_two_conv_bn_blocks(), [1, 8, 8, 4]),
            "layernorm": _compile(_two_layernorm_blocks(), [2, 6]),
            "single": _compile(_one_conv_bn_block(), [1, 8, 8, 4])}


@pytest.mark.parametrize("case", ["conv_bn", "layernorm"])
def test_each_fusion_is_credited_to_its_own_block_only(compiled, case, monkeypatch):
    text, op_layer = compiled[case]
    fusions = build_fusions(text, {}, {}, {}, op_layer)
    fused = [f for f in fusions if f.kind.startswith("k")]
    assert fused and all(f.layers for f in fused), [(f.name, f.layers) for f in fused]
    assert _miscredited(text, fusions) == [], _miscredited(text, fusions)
    # The shared constant's layer is listed apart, not lost: some fusion reads the other block's constant.
    shared = [(f.name, f.layers, f.constant_layers) for f in fused if f.constant_layers]
    assert shared, [(f.name, f.layers, f.constant_layers) for f in fused]
    assert all(not set(layers) & set(const) for _, layers, const in shared), shared
    # The planted defect (constants credited) is caught by the same check on the same HLO.
    planted = _credit_with_constants(text, op_layer, monkeypatch)
    assert _miscredited(text, planted), [(f.name, f.layers) for f in planted]


def test_a_single_block_keeps_its_credit(compiled, monkeypatch):
    """No constant is shared with another layer: the credit equals every instruction's layers."""
    text, op_layer = compiled["single"]
    fusions = build_fusions(text, {}, {}, {}, op_layer)
    planted = _credit_with_constants(text, op_layer, monkeypatch)
    assert [(f.name, f.layers) for f in fusions] == [(f.name, f.layers) for f in planted]
    assert any(set(f.layers) == {"c1", "bn1", "r1"} or "bn1" in f.layers for f in fusions)
    assert all(not f.constant_layers for f in fusions)


_HLO = """HloModule m

%fused_computation (param_0: f32[4], param_1: f32[]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  %param_1 = f32[] parameter(1)
  %broadcast.1 = f32[4]{0} broadcast(f32[] %param_1), dimensions={}, metadata={op_type="AddV2" op_name="a/add"}
  %constant.2 = f32[] constant(2), metadata={op_type="Mul" op_name="a/mul"}
  %constant.3 = f32[] constant(3), metadata={op_type="Mul" op_name="a/mul"}
  %multiply.4 = f32[] multiply(f32[] %constant.2, f32[] %constant.3), metadata={op_type="Mul" op_name="a/mul"}
  %broadcast.5 = f32[4]{0} broadcast(f32[] %multiply.4), dimensions={}, metadata={op_type="Mul" op_name="a/mul"}
  %add.6 = f32[4]{0} add(f32[4]{0} %param_0, f32[4]{0} %broadcast.1), metadata={op_type="AddV2" op_name="b/add"}
  ROOT %multiply.7 = f32[4]{0} multiply(f32[4]{0} %add.6, f32[4]{0} %broadcast.5), metadata={op_type="Mul" op_name="b/mul"}
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %constant.9 = f32[] constant(0.001), metadata={op_type="AddV2" op_name="a/add"}
  ROOT %fusion = f32[4]{0} fusion(f32[4]{0} %x, f32[] %constant.9), kind=kLoop, calls=%fused_computation
}
"""


def test_constants_outside_the_fusion_and_arithmetic_on_constants_are_not_work():
    """A constant XLA left outside the fusion (a parameter inside), and constant arithmetic, credit no layer."""
    (f,) = build_fusions(_HLO, {}, {}, {}, {"a/add": "a", "a/mul": "a", "b/add": "b", "b/mul": "b"})
    assert f.layers == ("b",) and f.tf_op_names == ("b/add", "b/mul")
    assert f.constant_layers == ("a",) and set(f.constant_op_names) == {"a/add", "a/mul"}


_MOBILENET = textwrap.dedent("""\
    import os, pickle, sys
    import numpy as np, keras, tensorflow as tf
    from tflab import lower
    from tflab.lowering import dump, fusions

    keras.utils.set_random_seed(4)
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None)
    seen, real = [], fusions.build_fusions
    fusions.build_fusions = lambda *a, **k: seen.append((a, k)) or real(*a, **k)
    before = os.environ.get("XLA_FLAGS")
    made, init = [], dump.WindowDump.__init__
    dump.WindowDump.__init__ = lambda self, *a, **k: init(self, *a, **k) or made.append(self.tmp)
    low = lower(model, np.zeros((1, 32, 32, 3), np.float32))  # the process's first XLA compile
    fusions.build_fusions = real
    info = {"flags_kept": os.environ.get("XLA_FLAGS") == before, "folders": len(made)}
    tf.function(lambda x: x * 5.0, jit_compile=True)(tf.ones([3]))  # the user's own compile
    info["left"] = [p.name for p in made if p.exists()]
    again = lower(lambda x: tf.nn.relu(x) * 2.0, tf.TensorSpec([2, 4], tf.float32))
    info["again"] = (again.stage("optimized_hlo").note, bool(again.stage("llvm_ir").text), len(again.fusions))
    with open(sys.argv[1], "wb") as f:
        pickle.dump((low, seen[0], info), f)
    """)


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    """`tflab.lower` of a small MobileNetV2 as a fresh process's first XLA compile (one process, no child).

    Returns the `Lowering`, the arguments its fusion records were built from, and what the
    process saw of XLA's dump.
    """
    out = tmp_path_factory.mktemp("mobilenet") / "low.pkl"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, "-c", _MOBILENET, str(out)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(out, "rb") as f:
        low, built_from, info = pickle.load(f)
    assert low.stopped_at == "", low.why
    return low, built_from, info


def test_the_first_lowering_of_a_process_dumps_there_and_only_its_own_compiles(mobilenet):
    """A process's first lowering dumps there: no child process, no TF import.

    Only `lower`'s compiles are dumped (``--xla_dump_hlo_module_re``), each lowering's folder is
    removed after it, and ``XLA_FLAGS`` in ``os.environ`` is the user's again (children inherit theirs only).
    """
    low, _, info = mobilenet
    assert low.stage("optimized_hlo").note.startswith("XLA's dump of one compile in this process"), \
        low.stage("optimized_hlo").note
    assert low.stage("llvm_ir").text and (low.stage("asm").text or low.stage("asm").why)
    assert info["flags_kept"] and info["folders"] >= 1 and info["left"] == [], info
    note, llvm, n = info["again"]
    assert "in this process" in note and llvm and n >= 1, info["again"]


def test_after_another_compile_the_dump_is_still_made_in_this_process(monkeypatch):
    """XLA already read its flags in this process: it reads the dump flags again for the lowering's compile.

    Without that (a TF that does not export the function), the probe finds no dump: a child.
    """
    from tflab.lowering import dump, dump_flags

    tf.function(lambda x: x + 2.0, jit_compile=True)(tf.ones([2]))  # XLA has compiled in this process
    monkeypatch.setattr(dump, "_in_process", None)
    monkeypatch.setattr(dump, "_own_dump", None)
    window = dump.dumper()
    window.__exit__(None, None, None)
    assert isinstance(window, dump.WindowDump) and not window.tmp.exists()
    monkeypatch.setattr(dump_flags, "_parse", False)  # planted: no exported function in this TF
    assert isinstance(dump.dumper(), dump.DumpChild) and dump._in_process is False


def test_mobilenetv2_every_credited_layer_owns_work_in_its_fusion(mobilenet, monkeypatch):
    low, (args, kwargs), _ = mobilenet
    text = low.stage("optimized_hlo").text
    fused = [f for f in low.fusions if f.kind.startswith("k")]
    assert len(fused) > 50
    assert _miscredited(text, low.fusions) == []
    # Every fusion whose work names a layer is credited to one.
    owners = _owners_of_work(text)
    layer_names = {f for g in low.fusions for f in g.layers + g.constant_layers}
    assert [f.name for f in fused if not f.layers and owners.get(f.name, set()) & layer_names] == []
    assert any(f.constant_layers for f in fused)  # BatchNorm's epsilon, shared and listed apart
    # The planted defect on the same HLO: most BN fusions read another BN's epsilon.
    with monkeypatch.context() as m:
        m.setattr(fusions_mod, "input_free", lambda *a, **k: set())
        planted = build_fusions(*args, **kwargs)
    assert len(_miscredited(text, planted)) > len(fused) // 4


def test_the_table_the_page_and_the_largest_fusion_line_read_the_same_credit(mobilenet):
    """The fusion table, the page's click map (`Lowering._resolve_key`) and the tour's largest-fusion line."""
    from tflab.lowering.text import layer_credit, lowering_text

    low, _, _ = mobilenet
    shared = [f for f in low.fusions if f.constant_layers]
    table = lowering_text(low, max_fusions=len(low.fusions))
    assert shared
    for f in shared:
        ops, _, hlo = low._resolve_key(f.name)
        assert ops == set(f.tf_op_names), f.name
        # A click on the fusion marks no fusion of a layer that only shares a constant with it.
        others = [g for g in low.fusions if g.name in hlo and g.name != f.name]
        assert not [g.name for g in others if g.layers and set(g.layers) <= set(f.constant_layers)], f.name
        assert "shared constants from: " + ", ".join(f.constant_layers) in layer_credit(f)
    rows = [line for line in table.splitlines() if "shared constants from:" in line]
    listed = [f for f in low.fusions if f.name in {r.split(" | ")[0].strip() for r in rows}]
    assert len(listed) == len(shared)
    for f in listed:
        assert f" | {layer_credit(f)} | " in next(r for r in rows if r.startswith(f"  {f.name} |"))
