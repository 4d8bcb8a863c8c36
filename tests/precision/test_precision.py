"""Lab step 10: float32 vs mixed_bfloat16 vs mixed_float16, underflow, overflow, loss scaling.

Every number is measured on tensorflow 2.21.0 (CPU) and holds with
TF_ENABLE_ONEDNN_OPTS=0 and =1 (the ``onednn`` marker: ``make test`` runs those
tests under both): the exact values below are powers of two, which every kernel
computes exactly, and the other assertions are orderings that follow from the
formats (stated at each one). The functions live in tests/data/precision/fns.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

# compare_precisions runs mixed_bfloat16 here: skipped where bfloat16 kernels cannot run (make test's
# capped pass on an AVX-512 CPU, where a bfloat16 MatMul is a SIGSEGV; tests/conftest.py).
pytestmark = pytest.mark.bfloat16
import tensorflow as tf

from tflab import compare_precisions, demonstrate_loss_scaling, float_info
from tflab._user.target import load_module
from tflab.errors import UsageError
from tflab.precision import INITIAL_LOSS_SCALE, PrecisionComparison

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "precision")
FNS = os.path.join(DATA, "fns.py")
fns = load_module(FNS)

X = tf.ones([8, 64])
W = tf.fill([64, 4], 2.0 ** -8)


# ---------------------------------------------------------------- float_info


@pytest.mark.parametrize("dtype, nmant, nexp", [
    ("float16", 10, 5), (tf.bfloat16, 7, 8), (np.float32, 23, 8), (ml_dtypes.bfloat16, 7, 8),
], ids=["float16-str", "bfloat16-tf", "float32-np", "bfloat16-ml_dtypes"])
def test_float_info_follows_ieee_formulas_from_the_bit_counts(dtype, nmant, nexp):
    fi = float_info(dtype)
    assert (fi.nmant, fi.nexp, fi.significand_bits) == (nmant, nexp, nmant + 1)
    # IEEE 754 with bias 2^(nexp-1) - 1: eps = 2^-nmant, smallest normal 2^(1-bias),
    # smallest subnormal one eps below it, max = (2 - eps) * 2^bias.
    bias = 2 ** (nexp - 1) - 1
    assert fi.eps == 2.0 ** -nmant
    assert fi.smallest_normal == 2.0 ** (1 - bias)
    assert fi.smallest_subnormal == 2.0 ** (1 - bias - nmant)
    assert fi.max == (2 - 2.0 ** -nmant) * 2.0 ** bias


def test_float_info_issue_values_and_ulp():
    f16, bf16 = float_info("float16"), float_info("bfloat16")
    assert (f16.eps, f16.max, f16.smallest_normal, f16.smallest_subnormal) == \
        (2.0 ** -10, 65504.0, 2.0 ** -14, 2.0 ** -24)
    assert (bf16.eps, bf16.smallest_normal) == (2.0 ** -7, 2.0 ** -126)
    assert float_info(tf.float16) == float_info(np.float16) == f16
    # ulp(x): the gap above |x| (eps at 1), the gap below at max (nothing finite above).
    assert f16.ulp(1.0) == 2.0 ** -10 and bf16.ulp(1.0) == 2.0 ** -7
    assert f16.ulp(-1024.0) == 1.0
    assert f16.ulp(65504.0) == 32.0
    assert np.isnan(f16.ulp(np.inf))
    np.testing.assert_array_equal(f16.ulp([0.0, 2.0 ** -14]), [2.0 ** -24, 2.0 ** -24])
    text = f16.to_text()
    assert [ln.split()[0] for ln in text.splitlines()[1:4]] == ["float32", "bfloat16", ">float16"]
    assert "2^-24" in text and "65504" in text
    assert repr(f16).startswith("FloatInfo(float16: 16 bits, 11 significand bits, 5 exponent bits, eps=2^-10")
    assert f16.to_dict()["significand_bits"] == 11


@pytest.mark.parametrize("dtype, message", [("int32", "not a floating-point dtype"),
                                            ("fp8", "not a dtype")])
def test_float_info_bad_dtype(dtype, message):
    with pytest.raises(UsageError, match=message):
        float_info(dtype)


# ---------------------------------------------------------------- the issue's measured facts


@pytest.fixture(scope="module")
def unscaled() -> PrecisionComparison:
    return compare_precisions(fns.issue_loss, X, W)


@pytest.mark.onednn
def test_tiny_gradient_underflows_in_float16_only(unscaled):
    ref = unscaled.policies["float32"].gradients["arg:x"]
    # dL/dx = 2^-20 * sum_j w = 4 * 2^-28 = 2^-26 (powers of two: exact in float32).
    np.testing.assert_array_equal(ref, np.full([8, 64], 2.0 ** -26, np.float32))
    f16 = unscaled.policies["mixed_float16"]
    # 2^-26 < half of float16's smallest subnormal 2^-24: every element rounds to 0.
    assert f16.underflow == {"arg:x": 512}
    assert not f16.gradients["arg:x"].any()
    assert "float16 underflows 512/512 gradient elements of x" in f16.verdict
    bf16 = unscaled.policies["mixed_bfloat16"]
    # bfloat16 has float32's exponent range (smallest normal 2^-126): 2^-26 is exact.
    assert bf16.underflow == {}
    np.testing.assert_array_equal(bf16.gradients["arg:x"], ref)
    assert unscaled.flagged == ("mixed_float16",)


@pytest.mark.onednn
@pytest.mark.parametrize("loss_scale", [INITIAL_LOSS_SCALE, "dynamic"], ids=["2^15", "dynamic"])
def test_loss_scale_rescues_float16(loss_scale):
    cmp = compare_precisions(fns.issue_loss, X, W, loss_scale=loss_scale)
    f16 = cmp.policies["mixed_float16"]
    # Scaled by 2^15 the gradient is 2^-11, a float16 normal; divided by 2^15 in float32: exact.
    np.testing.assert_array_equal(f16.gradients["arg:x"], np.full([8, 64], 2.0 ** -26, np.float32))
    assert f16.underflow == {} and f16.unscaled.underflow == {"arg:x": 512}
    # No inf/NaN at 2^15 (the largest scaled gradient, dL/dw = 8 * 2^-5, is far below 65504):
    # the dynamic rule keeps its initial scale.
    assert f16.loss_scale == 2.0 ** 15 and f16.loss_scale_history == (2.0 ** 15,)
    assert f16.verdict.startswith("float16 underflows 512/512 gradient elements of x; "
                                  "loss scale 2^15 rescues them")
    assert cmp.policies["mixed_bfloat16"].loss_scale is None  # Keras scales only float16
    assert cmp.flagged == ()


@pytest.mark.onednn
def test_overflow_in_float16_not_bfloat16_and_dynamic_halving():
    cmp = compare_precisions(fns.mul, tf.constant(100.0), tf.constant(1000.0), loss_scale="dynamic")
    f16, bf16 = cmp.policies["mixed_float16"], cmp.policies["mixed_bfloat16"]
    # 1e5 > 65504 = float16's max; bfloat16 (max ~3.4e38) rounds it to 8 significand bits.
    assert f16.outputs["output"] == np.inf and f16.overflow == {"output": 1}
    assert bf16.overflow == {} and bf16.outputs["output"] == float(ml_dtypes.bfloat16(1e5)) == 99840.0
    assert bf16.output_error == pytest.approx(160 / 1e5)
    # d(ab)/da = b: scaled, 1000 * S overflows float16 until S <= 65504 / 1000, so
    # Keras' rule halves 2^15 nine times, to 2^6.
    assert f16.loss_scale_history == tuple(2.0 ** k for k in range(15, 5, -1))
    assert np.isfinite(f16.gradients["arg:a"]).all() and f16.gradients["arg:a"] == 1000.0
    assert "float16 overflows 1 output element(s)" in f16.verdict
    assert cmp.flagged == ("mixed_float16",)


@pytest.mark.onednn
def test_float16_output_error_below_bfloat16_on_a_well_scaled_mlp():
    import keras

    x = tf.TensorSpec([64, 32], tf.float32)
    cmp = compare_precisions(fns.mlp, x, seed=3)
    f16, bf16 = cmp.policies["mixed_float16"], cmp.policies["mixed_bfloat16"]
    assert cmp.kind == "keras model factory"
    # Nothing leaves either range on unit-scale values, so only rounding differs:
    # float16 keeps 11 significand bits, bfloat16 8, so its errors are ~2^3 times smaller.
    assert f16.overflow == bf16.overflow == {}
    assert 0 < f16.output_error < bf16.output_error
    assert 0 < f16.gradient_error_median < bf16.gradient_error_median
    # Trainable variables are gradient sources; the policy is back to what it was.
    assert sum(n.startswith("var:") for n in cmp.gradient_names) == 6
    assert keras.mixed_precision.dtype_policy().name == "float32"


@pytest.mark.onednn
def test_tf_keras_factory_gets_its_global_policy():
    cmp = compare_precisions(fns.tf_keras_mlp, tf.TensorSpec([64, 32], tf.float32), seed=3)
    f16, bf16 = cmp.policies["mixed_float16"], cmp.policies["mixed_bfloat16"]
    # Non-zero errors: the layers really computed in 16 bits (set_global_policy took
    # effect although the factory imported tf_keras itself); float16 < bfloat16 as above.
    assert 0 < f16.output_error < bf16.output_error
    import tf_keras

    assert tf_keras.mixed_precision.global_policy().name == "float32"


def test_policy_restored_when_the_factory_fails():
    import keras

    with pytest.raises(UsageError, match="failed under mixed_bfloat16: RuntimeError: no mixed precision"):
        compare_precisions(fns.factory_that_fails, tf.TensorSpec([2, 32], tf.float32))
    assert keras.mixed_precision.dtype_policy().name == "float32"


def test_bad_input_is_one_clear_error():
    import keras

    with pytest.raises(UsageError, match="unknown policy 'fp8'; choose from float32"):
        compare_precisions(fns.mul, 1.0, 2.0, policies=("float32", "fp8"))
    with pytest.raises(UsageError, match="loss_scale must be"):
        compare_precisions(fns.mul, 1.0, 2.0, loss_scale=-1)
    with pytest.raises(UsageError, match="already-built Keras model.*factory"):
        compare_precisions(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]), tf.ones([1, 2]))
    with pytest.raises(UsageError, match="failed under mixed_b?float16.*cast them"):
        compare_precisions(fns.plain_variable_fn, tf.ones([3, 4]))


def test_report_text_dict_repr(unscaled):
    text = unscaled.to_text()
    assert [ln.split()[0] for ln in text.splitlines()[2:5]] == ["float32", "mixed_bfloat16", "mixed_float16"]
    d = json.loads(json.dumps(unscaled.to_dict()))
    assert d["policies"]["mixed_float16"]["underflow"] == {"arg:x": 512}
    assert d["policies"]["mixed_float16"]["gradients"]["arg:x"] == [8, 64]  # shapes unless arrays=True
    assert repr(unscaled).startswith("<PrecisionComparison issue_loss: mixed_bfloat16:")
    assert unscaled.function_name == d["function_name"] == d["function"] == "issue_loss"  # "function": report.json's key
    assert unscaled.config["tf_version"] == tf.__version__ and d["config"]["one_line"] == unscaled.config["one_line"]


# ---------------------------------------------------------------- MobileNetV3Small training step


@pytest.fixture(scope="module")
def demo():
    # MobileNetV3Small's smallest input; the rows only: the per-op causes are the tour's and
    # tests/precision/test_causes.py's to check.
    return demonstrate_loss_scaling(input_shape=(32, 32, 3), batch=4, attribute=False)


@pytest.mark.parametrize("kwargs, named", [
    ({"attribute": "no"}, "attribute must be True or False, got 'no'"),
    ({"attribute": None}, "attribute must be True or False, got None"),
    ({"batch": "2"}, "batch must be an int >= 2"),
    ({"batch": 2.5}, "batch must be an int >= 2"),
    ({"batch": 1}, "batch must be an int >= 2"),
    ({"input_shape": None}, "input_shape must be (H, W, 3)"),
    ({"input_shape": (32.5, 32, 3)}, "input_shape must be (H, W, 3)"),
    ({"input_shape": (32, 32)}, "input_shape must be (H, W, 3)"),
], ids=["attribute-str", "attribute-none", "batch-str", "batch-float", "batch-1", "shape-none", "shape-float",
        "shape-2d"])
def test_demo_arguments_of_the_wrong_kind_are_one_usage_error(kwargs, named):
    """Refused before any model is built: a truthy string must not run the judgments it asks to skip."""
    from tflab.errors import UsageError

    with pytest.raises(UsageError) as e:
        demonstrate_loss_scaling(**{"input_shape": (32, 32, 3), "batch": 2, **kwargs})
    assert named in str(e.value)


@pytest.mark.onednn
def test_demo_bfloat16_never_underflows_by_range(demo):
    assert [r.label for r in demo.rows] == ["float32", "mixed_bfloat16", "mixed_float16",
                                            "mixed_float16 + dynamic loss scale"]
    # bfloat16's smallest normal is float32's: no float32 gradient is below its range.
    # (Its zeros, if any, are sums that round to exactly 0: 8 significand bits.)
    assert demo.row("mixed_bfloat16").range_underflow_fraction == 0
    assert demo.row("mixed_bfloat16").loss_scale is None
    # attribute=False: no policy was judged op by op.
    assert all(r.cause is None and r.attribution is None for r in demo.comparison.policies.values())


@pytest.mark.onednn
def test_demo_float16_underflows_and_dynamic_scale_rescues(demo):
    ref = demo.comparison.policies["float32"].gradients.values()
    below_f16 = sum(int(((g != 0) & (np.abs(g) < 2.0 ** -25)).sum()) for g in ref if g is not None)
    f16, scaled = demo.row("mixed_float16"), demo.row("mixed_float16 + dynamic loss scale")
    # The float32 step has gradients below half float16's smallest subnormal; in
    # float16 they cannot be non-zero, so some round to 0.
    assert below_f16 > 0 and f16.range_underflow_fraction > 0
    # Dynamic rule: start at 2^15, halve while any gradient is inf/NaN; the last is finite.
    hist = scaled.loss_scale_history
    assert hist[0] == 2.0 ** 15 and all(b == a / 2 for a, b in zip(hist, hist[1:]))
    assert scaled.loss_scale == hist[-1] >= 1 and scaled.overflow == 0
    # Scaling by S >= 2 lifts every backward intermediate by S, so fewer fall below 2^-24.
    assert scaled.loss_scale >= 2 and scaled.range_underflow_fraction < f16.range_underflow_fraction
    from tflab.runtime import runtime_config

    assert demo.config["tf_version"] == tf.__version__
    assert demo.config["onednn_enabled"] == runtime_config().onednn_enabled
    assert demo.input == "4×32×32×3" and demo.function_name == "MobileNetV3Small train step"
    d = demo.to_dict()  # "configuration": the key report.json has always had (config + Keras + input)
    assert d["configuration"]["input"] == "4×32×32×3" and d["configuration"]["tf_version"] == tf.__version__
    assert "comparison" not in d and d["rows"][0]["label"] == "float32"
    assert repr(demo).startswith("<LossScalingDemo MobileNetV3Small train step: float32: underflow 0.00%")
    assert f"ran on: {runtime_config().one_line()}" in demo.to_text()


# ---------------------------------------------------------------- CLI


def test_cli_exit_codes(run_cli):
    code, out, _ = run_cli("precision", f"{FNS}:tiny", "--arg", "x=float32[4,8]")
    assert code == 1 and "float16 underflows 32/32 gradient elements of x" in out
    code, out, _ = run_cli("precision", f"{FNS}:tiny", "--arg", "x=float32[4,8]", "--loss-scale", "dynamic")
    assert code == 0 and "loss scale 2^15 rescues them" in out
    code, out, _ = run_cli("precision", f"{FNS}:overflows", "--arg", "x=float32[3]", "--json",
                           "--policies", "mixed_bfloat16,mixed_float16")
    report = json.loads(out)
    assert code == 1 and report["flagged"] == ["mixed_float16"]
    assert report["policies"]["mixed_float16"]["overflow"] == {"output": 3}


@pytest.mark.parametrize("argv, message", [
    (["--policies", "float32,fp8"], "unknown policy 'fp8'"),
    (["--loss-scale", "lots"], "--loss-scale lots: give a positive number"),
    (["--arg", "y=float32[2]"], "takes no parameter 'y'"),
], ids=["policy", "loss-scale", "arg"])
def test_cli_bad_input_one_line_exit_2(run_cli, argv, message):
    code, out, err = run_cli("precision", f"{FNS}:tiny", *argv)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_cli_from_a_fresh_process_with_a_keras_factory():
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    proc = subprocess.run([sys.executable, "-m", "tflab", "precision", f"{FNS}:mlp",
                           "--arg", "x=float32[16,32]", "--loss-scale", "dynamic", "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["kind"] == "keras model factory" and report["flagged"] == []


def test_tour_section_on_a_user_model_runs_the_small_example_only(small_keras_file, tmp_path):
    from tflab.tour import run_tour

    report = run_tour(model_path=str(small_keras_file), out_dir=str(tmp_path / "tour"), quiet=True,
                      only=["s10_precision"])
    section = report["precision"]
    assert section["float_info"]["float16"]["smallest_subnormal"] == 2.0 ** -24
    f16 = section["tiny_loss"]["policies"]["mixed_float16"]
    assert f16["unscaled"]["underflow"] == {"arg:x": 512} and f16["underflow"] == {}
    # The loss-scaling demo rebuilds MobileNetV3Small per policy: not a loaded user model.
    assert "loss_scaling" not in section


def test_a_function_closing_over_a_built_keras_model_is_refused_not_measured_in_float32():
    """The model's layers keep the float32 policy they were built with and cast the float16/bfloat16
    arguments back: the MatMul runs in float32, so 'mixed_float16: out err 0' would be false."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((16,))
    model = keras.Model(inp, keras.layers.Dense(4)(inp))
    x = np.random.RandomState(1).randn(8, 16).astype(np.float32)
    with pytest.raises(UsageError, match=r"none of its 1 MatMul/Conv op\(s\) ran in (bfloat16|float16) "
                                         r"\(MatMul in float32\).*zero-argument factory"):
        compare_precisions(lambda x: tf.reduce_sum(model(x)), x)

    def build():
        i = keras.Input((16,))
        return keras.Model(i, keras.layers.Dense(4)(i))

    built = compare_precisions(build, x)  # the factory form measures each policy's own arithmetic
    assert built.policies["mixed_float16"].output_error > 0
    assert built.policies["mixed_bfloat16"].output_error > 0


def test_an_error_measured_over_no_element_reads_n_a_not_0():
    """x * 1e-6 in float16 is subnormal everywhere (|y| < 2^-14): relative errors of percents,
    which the table printed as 'out err 0, grad err 0' because it measured no element."""
    x = np.random.RandomState(0).randn(64).astype(np.float32)
    cmp = compare_precisions(lambda x: x * 1e-6, x)
    half = cmp.policies["mixed_float16"]
    assert (half.output_error_elements, half.gradient_error_elements) == (0, 0)
    assert cmp.policies["mixed_bfloat16"].output_error_elements == 64  # bfloat16's range holds 1e-6
    row = next(line for line in cmp.to_text().splitlines() if line.startswith("mixed_float16"))
    assert row.split()[2:4] == ["n/a", "n/a"]
    assert "mixed_float16: out n/a, grad n/a" in repr(cmp)
    # What 'n/a' hides, measured with numpy: float16 is far from exact there.
    y16 = (x.astype(np.float16) * np.float16(1e-6)).astype(np.float64)
    rel = np.abs(y16 - x.astype(np.float64) * 1e-6) / np.abs(x.astype(np.float64) * 1e-6)
    assert rel.max() > 2.0 ** -11  # worse than float16's normal rounding
    # No float value at all (an integer function): refused, not judged over nothing.
    with pytest.raises(UsageError, match="there is no floating-point value to judge"):
        compare_precisions(lambda ids: tf.reduce_sum(ids * 2), tf.constant([1, 2, 3]))


@pytest.mark.parametrize("bad", [123, 1.5, True])
def test_float_info_of_a_number_says_it_is_no_dtype(bad):
    """``float_info(123)`` said "uint64_ref is not a floating-point dtype": TF read the int as a DataType
    enum value, a name the user never wrote."""
    import tflab
    from tflab.errors import UsageError

    with pytest.raises(UsageError, match=rf"^{bad!r} is not a dtype; give a float dtype"):
        tflab.float_info(bad)


def test_every_run_starts_from_the_first_models_weights():
    """A training-mode call changes a model's state (BatchNormalization's moving statistics, a seed
    generator). Each policy's model was given the float32 model's weights as they were after its
    run, so a layer whose output reads that state gave a policy an error no rounding made (here 2×
    against 3×: 0.33). Every run now starts from the weights the first build had."""
    import keras

    class Counted(keras.layers.Layer):
        def build(self, shape):
            self.calls = self.add_weight(shape=(), initializer="zeros", trainable=False, dtype="float32")

        def call(self, x):
            self.calls.assign_add(1.0)
            return x * tf.cast(1.0 + self.calls, x.dtype)

    def factory():
        inp = keras.Input((8,))
        return keras.Model(inp, Counted()(keras.layers.Dense(8)(inp)))

    cmp = compare_precisions(factory, tf.TensorSpec([4, 8], tf.float32), seed=1)
    for policy in ("mixed_bfloat16", "mixed_float16"):
        # only rounding is left: bfloat16 keeps 8 significand bits (2^-8 per op), float16 11; and
        # it is there (the policy did compute in 16 bits)
        assert 0 < cmp.policies[policy].output_error < 2.0 ** -5, (policy, cmp.policies[policy].output_error)


def test_the_demos_runs_read_the_same_state_so_no_variable_read_is_a_cause(monkeypatch):
    """The demo's factory returns its loss function, so the runs' weights are its own to keep: each
    policy's model was given the float32 model's weights as its training-mode run had left them
    (BatchNormalization's moving statistics moved), and the per-op judgment blamed "rounding at
    ReadVariableOp …/Cast_1/ReadVariableOp": a read of a moving mean that differed by state, not by
    rounding. Every run now starts from the first build's weights; the cause is an op that computes.
    A two-block Conv+BN network stands in for MobileNetV3Small (same layers, a tenth of the time)."""
    import keras

    from tflab.attribution.judge import SOURCES

    def small(weights=None, input_shape=(32, 32, 3), classes=10):
        inp = keras.Input(input_shape)
        h = keras.layers.Conv2D(8, 3, strides=2)(inp)
        h = keras.layers.ReLU()(keras.layers.BatchNormalization()(h))
        h = keras.layers.Conv2D(16, 3)(h)
        h = keras.layers.ReLU()(keras.layers.BatchNormalization()(h))
        return keras.Model(inp, keras.layers.Dense(classes, activation="softmax")(
            keras.layers.GlobalAveragePooling2D()(h)))

    monkeypatch.setattr(keras.applications, "MobileNetV3Small", small)
    demo = demonstrate_loss_scaling(input_shape=(32, 32, 3), batch=4)
    causes = {p: r.cause for p, r in demo.comparison.policies.items() if r.cause is not None}
    assert causes, "float16 underflows gradient elements here: a cause is expected"
    for policy, cause in causes.items():
        assert cause.op_type not in SOURCES, (policy, cause.line_text)


def test_a_closure_factorys_float64_reference_has_the_first_builds_weights():
    """A factory returning a loss closure over its model: the float64 run that gives float32's own noise
    floor was built with float64 initializer draws (other weights, off by up to 0.46), so 5500 of 6474
    gradient elements were "below float32's own noise floor" and left out, float16's gradient error
    read 0.02 for 0.88. The closure's Keras layers now get the first build's weights too: only the conv
    bias, whose gradient BatchNormalization cancels (8 elements), is noise."""
    import keras

    def make_train_loss():
        inp = keras.Input((16, 16, 3))
        h = keras.layers.ReLU()(keras.layers.BatchNormalization()(keras.layers.Conv2D(8, 3, padding="same")(inp)))
        model = keras.Model(inp, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(h)))

        def train_loss(x, y):
            logits = model(x, training=True)
            return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        return train_loss

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(8, 16, 16, 3)).astype(np.float32))
    y = tf.constant(rng.integers(0, 10, size=8).astype(np.int32))
    cmp = compare_precisions(make_train_loss, x, y, seed=0)
    for policy in ("mixed_bfloat16", "mixed_float16"):
        r = cmp.policies[policy]
        assert (r.reference_noise_elements or 0) <= 8, (policy, r.reference_noise_elements)
    assert cmp.policies["mixed_float16"].gradient_error > 0.1  # the conv kernel's error, measured, not hidden


@pytest.mark.parametrize("rate", [0.5, 0.0], ids=["dropout", "healthy-twin"])
def test_random_draws_in_a_training_mode_run_are_named_not_read_as_rounding(rate):
    """Keras draws a Dropout's mask in the layer's compute dtype, so float32 and each policy drop other
    elements from one seed: a 1.2 % "precision error" that was mostly other masks, and the per-op
    judgment called the mask's StatelessRandomUniformV2 "rounding". The comparison now lists the random
    ops the float32 run drew and says what they do to its numbers; a cause at one is "random"."""
    import keras

    def make_train_loss():
        inp = keras.Input((8,))
        h = keras.layers.Dropout(rate)(keras.layers.Dense(16, activation="relu")(inp))
        model = keras.Model(inp, keras.layers.Dense(4)(h))

        def train_loss(x):
            return tf.reduce_sum(model(x, training=True) ** 2)
        return train_loss

    cmp = compare_precisions(make_train_loss, tf.TensorSpec([16, 8], tf.float32), seed=2)
    if rate:
        assert cmp.random_ops and all("Random" in t for t in cmp.random_ops), cmp.random_ops
        assert "random: the float32 run drew random numbers" in cmp.to_text()
        assert cmp.to_dict()["random_ops"] == list(cmp.random_ops)
        at_random = [r.cause for r in cmp.policies.values() if r.cause is not None and "Random" in r.cause.op_type]
        assert at_random, "float16's run differs from float32's by its mask: its cause is the random op"
        assert all(c.kind == "random" and "drew other numbers" in c.detail for c in at_random), \
            [c.line_text for c in at_random]
    else:
        assert cmp.random_ops == () and "random:" not in cmp.to_text()


def test_a_factory_that_sets_its_own_dtype_is_refused_not_measured():
    """A factory calling set_global_policy("float64") built every policy's model in float64: "mixed_bfloat16:
    error 0, no underflow" where bfloat16's error is 6e-3. Now refused, naming the dtype its ops ran in.
    The healthy twin keeps one layer in float32 on purpose (a float32 head, Keras' advice) and is measured."""
    import keras

    def sets_policy():
        keras.mixed_precision.set_global_policy("float64")
        return keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(3)])

    def float32_head():
        inp = keras.Input((4,))
        return keras.Model(inp, keras.layers.Dense(3, dtype="float32")(keras.layers.Dense(8)(inp)))

    x = tf.TensorSpec([2, 4], tf.float32)
    with pytest.raises(UsageError, match=r"none of its 1 MatMul/Conv op\(s\) ran in float32 \(MatMul in float64\): "
                                         r"the factory's model sets its own dtype"):
        compare_precisions(sets_policy, x, policies=("float32", "mixed_bfloat16"))
    assert keras.mixed_precision.dtype_policy().name == "float32"
    cmp = compare_precisions(float32_head, x, policies=("float32", "mixed_bfloat16"))
    assert cmp.policies["mixed_bfloat16"].output_error > 0


def test_a_factory_building_another_shape_is_told_which_variable_differs():
    """Same count, other shapes: the message said "2 trainable variable(s) under mixed_bfloat16 but 2 under
    float32"; it now names the variable and both shapes."""
    import keras

    widths = iter([4, 5, 5, 5])

    def grows():
        return keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(next(widths))])

    with pytest.raises(UsageError, match=r"trainable variable #1 of shape \(4, 5\) under mixed_bfloat16 but "
                                         r"\(4, 4\) under float32; the factory must build the same model"):
        compare_precisions(grows, tf.TensorSpec([2, 4], tf.float32), policies=("float32", "mixed_bfloat16"))


def test_a_float32_reference_that_is_all_nan_is_refused_not_passed():
    """All kernel weights NaN: every policy was "no underflow or overflow" with out err "-", measured over nothing.
    Refused now; the healthy twin has one NaN weight row among finite ones and is measured."""
    import keras

    def make(nan_rows):
        def factory():
            m = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(3)])
            w, b = m.layers[-1].get_weights()
            w[:nan_rows] = np.nan
            m.layers[-1].set_weights([w, b])
            return m
        return factory

    x = tf.TensorSpec([2, 4], tf.float32)
    with pytest.raises(UsageError, match="under float32 every float output element is NaN or inf"):
        compare_precisions(make(4), x, policies=("float32", "mixed_bfloat16"))
    cmp = compare_precisions(make(0), x, policies=("float32", "mixed_bfloat16"))
    assert cmp.policies["mixed_bfloat16"].output_error > 0
