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

import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tflab.lowering import fusions as fusions_mod  # noqa: E402
from tflab.lowering.fusions import build_fusions  # noqa: E402
from tflab.lowering.layers import record_layer_calls  # noqa: E402

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


@pytest.fixture(scope="module")
def mobilenet():
    keras.utils.set_random_seed(4)
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None)
    return _compile(model, [1, 32, 32, 3])


def test_mobilenetv2_every_credited_layer_owns_work_in_its_fusion(mobilenet, monkeypatch):
    text, op_layer = mobilenet
    fusions = build_fusions(text, {}, {}, {}, op_layer)
    fused = [f for f in fusions if f.kind.startswith("k")]
    assert len(fused) > 50
    assert _miscredited(text, fusions) == []
    owners = _owners_of_work(text)
    # Every fusion whose work names a layer is credited to one.
    layer_names = set(op_layer.values())
    assert [f.name for f in fused if not f.layers and owners.get(f.name, set()) & layer_names] == []
    planted = _credit_with_constants(text, op_layer, monkeypatch)
    assert len(_miscredited(text, planted)) > len(fused) // 4  # most BN fusions read another BN's epsilon


def test_the_lowering_report_shows_the_same_credit(tmp_path):
    """`tflab.lower` on the two-block model: the fusion table, the page's highlighting and the JSON agree."""
    from tflab import lower
    from tflab.report.html.lowering import lowering_fragment

    keras.utils.set_random_seed(5)
    model = _two_conv_bn_blocks()
    low = lower(model, np.zeros((1, 8, 8, 4), np.float32))
    assert low.stopped_at == "", low.why
    text = low.stage("optimized_hlo").text
    assert _miscredited(text, low.fusions) == []
    rsqrt = [f for f in low.fusions if "Rsqrt" in f.tf_op_types]
    assert sorted(f.layers for f in rsqrt) == [("bn1",), ("bn2",)]
    # A click on bn1's fusion highlights nothing of bn2's: the page reads the same tf_op_names.
    bn1 = next(f for f in rsqrt if f.layers == ("bn1",))
    ops, _, hlo = low._resolve_key(bn1.name)
    assert all("bn2" not in n for n in ops) and all(
        "bn2" not in next(g for g in low.fusions if g.name == h).layers for h in hlo if h in
        {g.name for g in low.fusions}), (ops, hlo)
    table = low.to_text()
    for f in rsqrt:
        row = next(line for line in table.splitlines() if line.startswith(f"  {f.name} |"))
        assert f" | {', '.join(f.layers)}" in row
    assert "bn1" in lowering_fragment(low)
