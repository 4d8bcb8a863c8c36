"""The API rough edges, one test each (one convention across the result objects)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tflab  # noqa: E402
from tflab.retrace import reasons_between  # noqa: E402

SCALE = 2.0


def test_capture_summary_counts_baked_and_fed_tensors_with_their_bytes():
    """TF 2.21 bakes a captured eager tensor of <= 128 elements as a Const, feeds a larger one."""
    small = tf.constant(np.ones(10, np.float32))    # 10 × 4 B, baked
    large = tf.constant(np.ones(300, np.float32))   # 300 × 4 B, fed at call time

    r = tflab.trace_and_inspect(lambda x: x + tf.reduce_sum(small) + tf.reduce_sum(large),
                                tf.TensorSpec([2]))
    assert (r.baked_bytes, r.fed_bytes) == (40, 1200)
    assert r.capture_summary == "1 baked (40 B), 1 fed at call time (1200 B)"  # a property
    assert "eager tensors: 1 baked (40 B), 1 fed at call time (1200 B)" in r.to_text()
    assert "eager tensors: 1 baked (40 B), 1 fed at call time (1200 B)" in repr(r)
    assert r.to_dict()["fed_bytes"] == 1200
    none = tflab.trace_and_inspect(lambda x: x * 2.0, tf.TensorSpec([2]))
    assert none.capture_summary == "none" and "eager tensors: none" in repr(none)


def test_input_signature_is_one_convention_a_tuple_of_specs():
    """TraceReport and StabilizeReport: ``input_signature`` is what tf.function(input_signature=…) takes."""
    spec = tf.TensorSpec([None, 8], tf.float32)

    def f(x):
        return tf.reduce_sum(x)

    traced = tflab.trace_and_inspect(f, spec)
    stable = tflab.stabilize(f, input_signature=[spec])
    assert isinstance(traced.input_signature, tuple) and isinstance(stable.input_signature, tuple)
    assert [s.shape.as_list() for s in traced.input_signature] == [[None, 8]]
    assert [s.shape.as_list() for s in stable.input_signature] == [[None, 8]]
    # TF's (args, kwargs) pair keeps TF's name.
    args, kwargs = traced.structured_input_signature
    assert args == traced.input_signature and kwargs == {}
    # what it says is what tf.function accepts
    assert tf.function(f, input_signature=traced.input_signature).get_concrete_function() is not None


def test_probe_repr_names_the_stale_read():
    global SCALE
    SCALE = 2.0

    def f(x):
        return x * SCALE

    probe = tflab.RetraceProbe(f)
    try:
        probe(tf.ones([2]))
        SCALE = 3.0
        probe(tf.ones([2]))
    finally:
        SCALE = 2.0
    assert repr(probe) == "<RetraceProbe f: 1 trace(s) in 2 call(s), 1 stale: global SCALE 2.0 -> 3.0>"
    assert probe.stale[0].change == "global SCALE 2.0 -> 3.0"
    assert "global 'SCALE' was 2.0 at trace #1, now 3.0" in probe.to_text()


def test_reasons_between_takes_tf_function_types():
    """The explain engine, reusable: two ConcreteFunctions' FunctionTypes -> one Reason per change."""
    f = tf.function(lambda x, n: x * n)
    a = f.get_concrete_function(tf.TensorSpec([3], tf.float32), 2).function_type
    b = f.get_concrete_function(tf.TensorSpec([4], tf.int32), 3).function_type
    got = [(r.parameter, r.kind, r.old, r.new) for r in reasons_between(a, b)]
    assert got == [("x", "dtype", "float32", "int32"), ("x", "shape", "(3,)", "(4,)"), ("n", "value", "2", "3")]
    assert reasons_between(a, a) == []


def _comparison(**kwargs):
    from tflab.modes import compare_modes

    def f(x):
        return tf.tanh(x) * 3.0

    return compare_modes(f, tf.TensorSpec([64], tf.float32), repeats=2, hlo=False,
                         modes=("eager", "graph"), **kwargs)


def test_distance_compares_sorts_formats_and_floats_as_its_overall_maximum():
    from tflab.modes import Distance

    d, e = Distance(outputs=3, gradients=120), Distance(outputs=7, gradients=0)
    assert d <= 128 and not d < 120 and d > 64 and d >= 120.0 and d == 120
    assert float(d) == 120.0 and max(d) == 120 and max(e) == 7
    assert sorted([d, e]) == [e, d] and max([d, e]) is d
    assert f"{d:.1f}" == "120.0" and repr(d) == "(outputs=3, gradients=120)"
    assert d != Distance(outputs=120, gradients=3) and d == Distance(outputs=3, gradients=120)
    assert (d.outputs, d.gradients) == (3, 120)
    with pytest.raises(TypeError):
        d < "8"
    c = _comparison()
    g = c.modes["graph"]
    assert g.ulp <= 8 and g.max_abs_error < 1e-5 and max(g.ulp) == g.ulp.overall == g.max_ulp
    # the repr says which ULP number it shows
    assert "graph: " in repr(c) and " ULP above atol, " in repr(c)
    assert "ULP>atol out" in c.to_text()


def test_speed_ratio_one_convention_in_code_and_text():
    c = _comparison()
    eager, graph = c.modes["eager"].median_seconds, c.modes["graph"].median_seconds
    r = c.speed_ratio("graph", "eager")
    assert r == pytest.approx(eager / graph)
    assert c.speed_ratio("eager", "graph") == pytest.approx(1 / r)
    assert c.speedups == {"graph vs eager": r, "xla vs graph": None}
    word = "faster" if r >= 1 else ", slower"
    assert f"graph vs eager: {r:.2f}×{' ' if r >= 1 else ''}{word} per call" in c.to_text()
    assert c.to_dict()["speed"]["graph_vs_eager"] == r
    from tflab.modes import speed_text

    assert (speed_text(1.75), speed_text(0.97)) == ("1.75× faster", "0.97×, slower")


def test_grappler_setting_is_recorded_in_text_and_dict():
    on, off = _comparison(), _comparison(grappler=False)
    opts = _comparison(grappler={"arithmetic_optimization": False})
    assert (on.grappler, off.grappler) == (True, False)
    assert "graph mode: Grappler on" in on.to_text()
    assert "graph mode: Grappler off (meta optimizer disabled)" in off.to_text()
    assert "Grappler off" in repr(off) and "Grappler" not in repr(on)
    assert (on.to_dict()["grappler"], off.to_dict()["grappler"]) == (True, False)
    assert opts.to_dict()["grappler"] == {"arithmetic_optimization": False}
    assert "graph mode: Grappler options arithmetic_optimization=False" in opts.to_text()


def test_names_and_kinds_one_convention():
    """function_name is the function's name everywhere (a str); data are properties, not methods."""
    from tflab.autograph import AutographDiff
    from tflab.litert.check import TFLiteCheck
    from tflab.retrace.demo import RetracingDemo, TriggerResult

    c = _comparison()
    name = "_comparison.<locals>.f"  # compare_modes names a function by its qualified name
    assert c.function_name == name and c.to_dict()["function_name"] == name
    probe = tflab.RetraceProbe(lambda x: x)
    assert probe.function_name == "<lambda>" and callable(probe.function) and not hasattr(probe, "name")
    d = AutographDiff(function_name="step", filename="f.py", original="", converted="", unified_diff="",
                      statements=())
    assert d.function_name == "step" and d.to_dict()["function_name"] == "step"
    assert d.table == "step has no if, for or while statements"  # a property: the text itself
    r = TriggerResult("new Python value", "f(1); f(2)", 2, 2, ("n: 1 -> 2",), "", "tf.constant", 1)
    demo = RetracingDemo("2.21.0", (r,))
    assert demo.counts == {"new Python value": (2, 1)} and not callable(demo.counts)
    # TFLite text: the lab's shape notation, not LiteRT's [-1, 64]
    t = TFLiteCheck(quantization="none", bit_exact=None, max_abs_error=None, bound=None, within_bound=None,
                    outputs={}, op_counts={}, flex_ops=(), custom_ops=(), tensor_dtypes={}, weights={},
                    size_bytes=0, size_ratio=None, runtime="not run: test", explanation="",
                    signatures={"serve": {"inputs": {"x": {"dtype": "float32", "shape_signature": (-1, 64),
                                                           "quantization": None}}, "outputs": {}}})
    assert "serve input x: float32[None,64]" in t.to_text() and "[-1" not in t.to_text()


def test_user_sys_exit_is_one_usage_error_from_the_python_api():
    """A user's ``sys.exit(3)`` would end the interpreter; the API raises the CLI's one line instead."""
    import sys

    def f(x):
        sys.exit(3)

    with pytest.raises(tflab.UsageError, match=r"^f called sys\.exit\(3\) while tracing;"):
        tflab.trace_and_inspect(f, tf.TensorSpec([2]))
    probe = tflab.RetraceProbe(f)
    with pytest.raises(tflab.UsageError, match=r"^f called sys\.exit\(3\) when called through RetraceProbe;"):
        probe(tf.constant([1.0]))

    def interrupted(x):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):   # Ctrl-C must still stop the caller
        tflab.trace_and_inspect(interrupted, tf.TensorSpec([2]))


def test_retrace_probe_rejects_a_class():
    """A class is callable, but calling it builds an instance: there is no function to trace."""
    class Scaler:
        def __call__(self, x):
            return x * SCALE

    with pytest.raises(tflab.UsageError, match=r"got the class Scaler; pass an instance \(RetraceProbe\(Scaler"):
        tflab.RetraceProbe(Scaler)
    assert tflab.RetraceProbe(Scaler())(tf.constant([1.0])).numpy().tolist() == [SCALE]


@pytest.mark.parametrize("strict", ["yes", 1, "no"], ids=["yes", "one", "no"])
def test_autograph_diff_strict_must_be_a_bool(strict):
    """``bool("no")`` is True, so a non-bool ``strict`` is refused rather than guessed."""
    with pytest.raises(tflab.UsageError, match=r"^autograph_diff: strict must be True, False or None .*got "):
        tflab.autograph_diff(lambda x: x, tf.TensorSpec([2]), strict=strict)


@pytest.mark.parametrize("size", [3, 4, 2.5, True, "936"], ids=["three", "f32-width", "float", "bool", "str"])
def test_tflite_roundtrip_float_size_must_be_a_byte_count(size, tmp_path):
    """A .tflite file holds at least its 4-byte root offset and 4-byte "TFL3" identifier: 8 bytes."""
    with pytest.raises(tflab.UsageError, match=r"^tflite_roundtrip: float_size is the float \.tflite model's "
                                               r"size in bytes \(an int >= 8"):
        tflab.tflite_roundtrip(tmp_path, {"x": np.ones(3, np.float32)}, "dynamic", float_size=size)


def _module_that_warns(name: str):
    import types

    mod = types.ModuleType(name)
    exec("import warnings\ndef old():\n    warnings.warn('old() is deprecated: use new()', DeprecationWarning)\n"
         "    return 1\n", mod.__dict__)
    return mod


def test_tflab_deprecation_warnings_are_errors_and_third_party_ones_are_not():
    """pyproject's filterwarnings: a DeprecationWarning raised from a tflab module fails the test that
    triggers it (a 0.1.0 package keeps no deprecated alias); TF's and Keras' own stay quiet."""
    import warnings

    with pytest.raises(DeprecationWarning, match=r"old\(\) is deprecated"):
        _module_that_warns("tflab._planted_deprecation").old()
    for third_party in ("tensorflow.python.util.planted", "keras.src.planted"):
        with warnings.catch_warnings(record=True) as seen:  # the configured filters, recorded not shown
            assert _module_that_warns(third_party).old() == 1
        assert seen == [], third_party  # ignored: nothing a tflab user can do about it


def test_dir_of_tflab_is_its_public_names():
    """``dir(tflab)`` listed ``annotations`` and ``importlib`` (the package file's own imports): it
    lists the public names (each one importable) and the dunders, not the file's helpers."""
    import tflab

    names = dir(tflab)
    assert "annotations" not in names and "importlib" not in names
    assert not [n for n in names if n.startswith("_") and not n.startswith("__")]
    assert set(tflab.__all__) <= set(names) and "__name__" in names
