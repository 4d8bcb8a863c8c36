"""`tflab lower --cause` / `link_cause`: a mode comparison's cause marked at the lowering's fusion.

The lowering compiles the forward pass alone, so its fusions may be named unlike
those of the comparison's forward+backward compile: the fusion is found by the
TF op names of the HLO instructions the cause came from.
"""

from tflab.attribution import Cause
from tflab.lowering.cause import link_cause
from tflab.lowering.records import Fusion, Lowering, Stage
from tflab.report.html.lowering import lowering_fragment


def _fusion(name, ops, lines=()):
    return Fusion(name, "kLoop", "main", ("add.0 = add",), ops, ("Mul",) * len(ops), lines, (), 10, 10, 12, 12)


def _cause(tf_ops, op_name="broadcast_add_fusion.7", line="bn.py:7"):
    return Cause("normalize", "eager vs xla", "compiler", op_name, "fusion", line,
                 detail="XLA contracted a multiply and an add into one fused multiply-add",
                 evidence={"tf_ops": list(tf_ops), "instruction": "vfmadd213ss %xmm1,%xmm0,%xmm2"})


def _lowering():
    return Lowering("normalize", (Stage("asm", "x", {"vfmadd213ss": 1}),),
                    fusions=(_fusion("add_rsqrt_fusion", ("batchnorm/Rsqrt",)),
                             _fusion("broadcast_add_fusion", ("batchnorm/mul", "batchnorm/add_1"), ("bn.py:7",))))


def test_the_cause_is_marked_at_the_fusion_holding_its_tf_ops_in_text_html_and_json():
    low = _lowering()
    assert link_cause(low, _cause(["batchnorm/mul", "batchnorm/add_1"])) == "broadcast_add_fusion"
    text = low.to_text()
    assert "  broadcast_add_fusion <- cause | kLoop" in text
    assert ("eager vs xla at fusion 'broadcast_add_fusion': cause: compiler at fusion 'broadcast_add_fusion.7' "
            "(bn.py:7): XLA contracted") in text
    assert "&#9664; cause" in lowering_fragment(low) and "cause: compiler at fusion" in lowering_fragment(low)
    assert low.to_dict()["cause_fusion"] == "broadcast_add_fusion"
    assert low.to_dict()["cause"]["kind"] == "compiler"


def test_a_cause_whose_ops_are_in_no_fusion_marks_none_and_says_so():
    low = _lowering()
    assert link_cause(low, _cause(["other/mul"], op_name="fusion.9", line="other.py:3")) == ""
    assert "<- cause" not in low.to_text() and "at no fusion of this lowering" in low.to_text()


def test_healthy_twin_no_cause_leaves_the_lowering_unmarked():
    low = _lowering()
    assert link_cause(low, None) == "" and low.cause is None
    assert "cause" not in low.to_text() and "&#9664;" not in lowering_fragment(low)



def test_the_cli_says_why_it_marks_no_fusion(tmp_path):
    """``lower --cause`` printed nothing about the cause when eager and XLA agree; it now says so, with
    the comparison's bound. The other case (they differ, no cause named) says that instead."""
    from types import SimpleNamespace

    from tests.lowering.test_lower_cli import _main
    from tflab.commands.lower_cmd import _no_cause_note

    (tmp_path / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    code, out, err = _main("lower", f"{tmp_path / 'm.py'}:f", "--arg", "x=float32[4,8]", "--cause")
    assert code == 0, err
    assert "cause: none to mark: XLA's outputs and gradients are within" in out and "<- cause" not in out, out
    differs = SimpleNamespace(findings=("xla: output 12 ULP from eager",), ulp_bound=2, atol=1e-6)
    assert _no_cause_note(differs).startswith("cause: none found: XLA differs from eager (xla: output 12 ULP")
    agrees = SimpleNamespace(findings=(), ulp_bound=2, atol=1e-6)
    assert _no_cause_note(agrees) == ("cause: none to mark: XLA's outputs and gradients are within 2 ULP or 1e-06 "
                                      "of eager's on these arguments")


def test_the_no_cause_line_names_random_streams_and_non_finite_outputs(tmp_path):
    """A function drawing random numbers got "XLA's outputs … are within 4096 ULP of eager's" while XLA
    drew other numbers (off by up to 0.8); all-NaN outputs got the same sentence. The line now says
    which: the random streams left out of the comparison, or outputs not finite in eager too."""
    from types import SimpleNamespace

    from tests.lowering.test_lower_cli import _main
    from tflab.commands.lower_cmd import _no_cause_note

    (tmp_path / "r.py").write_text("import tensorflow as tf\n\ndef rnd(x):\n    return x + tf.random.uniform(tf.shape(x))\n")
    code, out, err = _main("lower", f"{tmp_path / 'r.py'}:rnd", "--arg", "x=float32[8]", "--cause")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("cause:"))
    assert "random streams that XLA draws otherwise than eager" in line and "within" not in line, line
    nan = SimpleNamespace(findings=(), notes=(), ulp_bound=2, atol=1e-6,
                          nonfinite=SimpleNamespace(found=True, cause_text="first non-finite op: Const 'mul/y'"))
    assert _no_cause_note(nan).startswith("cause: none to mark: the outputs are not finite, in eager as well")
