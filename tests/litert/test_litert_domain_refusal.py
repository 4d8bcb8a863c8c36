"""An int8 kernel that refuses inputs outside its op's domain gives the domain cause, not "not run".

LiteRT's integer SQRT and RSQRT kernels check their input and fail the whole invoke ("Sqrt is only
defined for non-negative values ... Node number 0 (SQRT) failed to invoke") where TF's float op gives
NaN. The int8 variant was reported "not run: ..." with no verdict; it now fails, and its cause names
the op, the inputs it received and the domain rule they break (`tflab.litert.domains.DOMAINS`).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tflab
from tflab.litert.check import check_tflite

X = np.linspace(-2, 2, 8, dtype=np.float32)[None]  # 4 negative values


def _saved(tmp, name, fn):
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32)])
        def serve(self, x):
            return fn(x) * 2.0

    m = M()
    path = str(tmp / name)
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    return path


@pytest.fixture(scope="module")
def sqrt_case(tmp_path_factory):
    sm = _saved(tmp_path_factory.mktemp("refusal"), "sqrt", tf.sqrt)
    return sm, tflab.tflite_roundtrip(sm, {"x": X}, "int8")


def test_int8_sqrt_of_negative_inputs_is_a_domain_failure(sqrt_case):
    """The handed case: SQRT of a model input with negative values."""
    _, r = sqrt_case
    assert not r.runtime.startswith("not run")
    assert r.ok is False and r.cause is not None and r.cause.kind == "domain"
    assert r.cause.line_text.startswith("cause: domain at SQRT")
    assert "4 negative value(s)" in r.cause.detail and "x < 0 → NaN" in r.cause.detail


def test_int8_rsqrt_of_an_intermediate_with_negative_values_is_a_domain_failure(tmp_path):
    """A sibling: another refusing kernel (RSQRT), on values an earlier op (SUB) made negative, so the
    inputs judged are the ones the op actually received, not the model's."""
    sm = _saved(tmp_path, "rsqrt", lambda x: tf.math.rsqrt(x - 1.0))
    r = tflab.tflite_roundtrip(sm, {"x": X}, "int8")
    assert r.ok is False and r.cause is not None and r.cause.kind == "domain", r.to_text()
    assert r.cause.op_type == "RSQRT"
    assert r.cause.evidence["op_index"] > 0  # not the first op: it read the SUB's output


def test_healthy_twin_non_negative_inputs_run_and_name_no_domain_cause(sqrt_case):
    """The same int8 flatbuffer on non-negative examples runs: no refusal, no domain cause."""
    sm, refused = sqrt_case
    r = check_tflite(refused.model, sm, {"x": np.abs(X)}, "int8")
    assert not r.runtime.startswith(("not run", "refused"))
    assert r.cause is None or r.cause.kind != "domain"
