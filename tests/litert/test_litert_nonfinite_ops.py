"""Per-op checks on ops whose reference is NaN or ±inf (this round).

A correct model with log(0) = -inf and sqrt(-1) = NaN, where LiteRT equals TF bit for bit, was
judged "2 outside their bound" and "ill-conditioned": the transcendental bound took a max over a
NaN output (NaN bound everywhere), LiteRT's builtin ADD clamps -inf to -FLT_MAX (XNNPACK, which
the user runs, keeps -inf), and an inf term made the conditioning estimate inf.
"""

import numpy as np
import pytest
import tensorflow as tf

from tflab.litert.per_op import _Acc

FMAX = float(np.finfo(np.float32).max)


def _ratio(got, ref, bound):
    acc = _Acc()
    acc.add(np.array(got, np.float64), np.array(ref, np.float64), np.array(bound, np.float64))
    return acc.ratio


def test_matching_non_finite_elements_are_within_and_a_mismatch_is_not():
    ref, bound = [-np.inf, np.nan, 1.0], [np.inf, np.nan, 1e-7]
    assert _ratio([-np.inf, np.nan, 1.0], ref, bound) == 0
    assert _ratio([-FMAX, np.nan, 1.0], ref, bound) == 0      # the builtin kernel's clamp
    # Planted mismatches at the non-finite places: each is outside (ratio inf), never NaN.
    assert _ratio([-1.0, np.nan, 1.0], ref, bound) == np.inf   # a finite value where TF has -inf
    assert _ratio([FMAX, np.nan, 1.0], ref, bound) == np.inf   # the clamp of the wrong sign
    assert _ratio([-np.inf, 0.0, 1.0], ref, bound) == np.inf   # a number where TF has NaN
    assert _ratio([-np.inf, np.nan, 1.0 + 1e-6], ref, bound) == pytest.approx(10.0)  # a finite error


class LogSqrt(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.math.log(x) + tf.sqrt(x)}


def test_a_correct_model_with_nan_and_inf_outputs_passes_per_op(tmp_path):
    from tflab import tflite_roundtrip

    sm = str(tmp_path / "sm")
    tf.saved_model.save(LogSqrt(), sm)
    x = np.array([[1, 2, -1, 0], [3, .5, 4, 1]], np.float32)
    r = tflite_roundtrip(sm, {"x": x}, "none")
    want = np.log(x.astype(np.float64)) + np.sqrt(x.astype(np.float64))
    assert np.isnan(want).sum() == 1 and np.isneginf(want).sum() == 1   # the case is what it says
    text = r.to_text()
    assert r.ok, text
    assert r.per_op is not None and "0 outside their bound" in r.per_op.summary_line(), text
    assert "ill-conditioned" not in text, text
    assert "NaN/inf in LiteRT and in TF alike" in text
