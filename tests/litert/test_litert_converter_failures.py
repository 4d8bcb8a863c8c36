"""A failed conversion in one line that says why (the converter's cause, op, Keras layer, node), and
the fixes tried by converting again: a fixed batch (checked against TF on the examples) and Select TF
ops (converts; values not checked here).

Handed case: a Keras LSTM with a None batch dim (``TensorListReserve … requires element_shape to be
static``). Siblings: a GRU (another RNN layer), and a tf.Module whose tf.while_loop writes a
TensorArray of unknown element shape (not Keras: no re-export). Healthy twin: the same LSTM with a
fixed batch converts with builtins (the fixed-batch fix's own conversion), so there is nothing to
explain. Conversions cost seconds each: the LSTM's failing conversion is its recorded text, the GRU
and the loop run the converter.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tflab import fix as fx  # noqa: E402
from tflab.examples import Examples  # noqa: E402
from tflab.litert.conversion import convert  # noqa: E402
from tflab.litert.conversion_fixes import NO_FLEX_DELEGATE, explain_failure, try_fixes  # noqa: E402
from tflab.litert.converter_errors import ConversionFailed, parse_converter_error  # noqa: E402

X = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)

# What TF 2.21's converter says for a Keras LSTM with a None batch (str(ConverterError), cut).
LSTM_TEXT = (
    '<unknown>:0: error: loc(callsite(fused["TensorListReserve:", "sequential_1/lstm_1/TensorArrayV2_1@__inference'
    '___call___709"] at callsite(fused["StatefulPartitionedCall:", "StatefulPartitionedCall@__inference_signature_'
    'wrapper___call___740"] at fused["StatefulPartitionedCall:", "StatefulPartitionedCall_1"]))): '
    "'tf.TensorListReserve' op requires element_shape to be static during TF Lite transformation pass\n"
    '<unknown>:0: note: loc(fused["StatefulPartitionedCall:", "StatefulPartitionedCall_1"]): called from\n'
    '<unknown>:0: error: loc(callsite(fused["TensorListReserve:", "sequential_1/lstm_1/TensorArrayV2_1@__inference'
    '___call___709"] at fused["StatefulPartitionedCall:", "StatefulPartitionedCall_1"])): failed to legalize '
    "operation 'tf.TensorListReserve' that was explicitly marked illegal\n"
    "<unknown>:0: error: Lowering tensor list ops is failed. Please consider using Select TF ops and disabling "
    "`_experimental_lower_tensor_list_ops` flag in the TFLite converter object.")


def test_the_cause_is_the_first_error_not_the_location_or_its_consequences():
    f = parse_converter_error(LSTM_TEXT)
    assert f.cause == "'tf.TensorListReserve' op requires element_shape to be static during TF Lite transformation pass"
    assert (f.op, f.node, f.scope) == ("TensorListReserve", "sequential_1/lstm_1/TensorArrayV2_1", "sequential_1/lstm_1")
    assert f.advice.startswith("Lowering tensor list ops is failed. Please consider using Select TF ops")
    assert "loc(" not in f.line("none") and f.line("none", "lstm").endswith(
        "(op TensorListReserve in layer lstm, node sequential_1/lstm_1/TensorArrayV2_1)")
    # A consequence alone is still quoted (nothing better was said); no error line: nothing parsed.
    only = parse_converter_error("x.py:3:1: error: failed to legalize operation 'tf.Foo' that was explicitly marked illegal")
    assert only.op == "Foo" and only.cause.startswith("failed to legalize")
    assert parse_converter_error("ValueError: no signatures") is None


def _export(model, path):
    model.export(str(path), verbose=False)
    return str(path)


def _rnn(layer, name):
    keras.utils.set_random_seed(0)
    inp = keras.Input((5, 3))
    return keras.Model(inp, keras.layers.Dense(2)(layer(4, name=name)(inp)))


def test_lstm_one_line_names_cause_op_and_layer_and_the_fixes_are_converted(tmp_path):
    model = _rnn(keras.layers.LSTM, "lstm")
    sm = _export(model, tmp_path / "sm")
    failure = parse_converter_error(LSTM_TEXT)  # what convert(sm, "none") raises (the GRU below runs it)
    # the SavedModel's input is named after the model's Input (keras_tensor, keras_tensor_208, … by session)
    line, fixes = explain_failure(model, sm, Examples.of({model.inputs[0].name: X}), "none", failure)
    assert "requires element_shape to be static" in line and "op TensorListReserve in layer lstm" in line
    static, select = fixes
    # a fixed batch: converted with builtins (the healthy twin: nothing left to explain), LiteRT within
    # the float bound of TF's outputs from the original SavedModel
    assert static.status == fx.CHECKED and static.measured["batch"] == 2 and static.measured["within_bound"], \
        static.line()
    assert static.measured["max_abs_error"] < 1e-4 and "Flex" not in " ".join(static.measured["ops"])
    # the change keeps the input's name (without it the SignatureDef says args_0 and --examples fails)
    assert f"name={model.inputs[0].name!r}" in static.change, static.change
    assert ("WHILE" in static.measured["ops"]) != static.measured["fused"]  # kept as a loop, or fused
    # Select TF ops: converts, with Flex ops the Python LiteRT cannot run
    assert select.status == fx.NOT_CHECKED and NO_FLEX_DELEGATE in select.why
    assert any(op.startswith("FlexTensorList") for op in select.measured["flex_ops"])


def test_gru_sibling_names_its_own_layer(tmp_path):
    model = _rnn(keras.layers.GRU, "gru")
    sm = _export(model, tmp_path / "sm")
    with pytest.raises(ConversionFailed) as info:
        convert(sm, "none")
    line, fixes = explain_failure(model, sm, Examples.of({model.inputs[0].name: X}), "none", info.value.failure,
                                  fixes=False)
    assert fixes == () and "in layer gru" in line and "loc(" not in line


class _Loop(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def serve(self, x):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=None)
        i = tf.constant(0)

        def body(i, ta):
            return i + 1, ta.write(i, x * tf.cast(i, tf.float32))

        _, ta = tf.while_loop(lambda i, ta: i < 3, body, [i, ta])
        return {"y": ta.stack()}


def test_while_loop_sibling_gets_no_re_export_and_converts_with_select_tf_ops(tmp_path):
    module = _Loop()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
    with pytest.raises(ConversionFailed) as info:
        convert(str(tmp_path / "sm"), "none")
    assert "TensorList" in info.value.failure.op and "loc(" not in str(info.value)
    static, select = try_fixes(module, str(tmp_path / "sm"), Examples.of({"x": np.ones((2, 3), np.float32)}),
                               "none", info.value.failure)
    assert static.status == fx.NOT_CHECKED and "Keras 3 model only" in static.why
    assert select.status == fx.NOT_CHECKED and NO_FLEX_DELEGATE in select.why


def test_the_fixed_batch_advice_names_what_was_exported(tmp_path):
    """The fixed-batch fix that tflab cannot re-trace says how to fix the batch of what the user gave:
    a tf-keras model's Input, a tf.function's input_signature (it told a tf-keras user to fix a
    tf.function's input_signature)."""
    import tf_keras

    from tflab.litert.conversion_fixes import _fixed_batch_how

    m = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2)])
    assert "tf.keras.Input(shape, batch_size=N)" in _fixed_batch_how(m)
    assert "tf.function's input_signature" in _fixed_batch_how(_Loop())
    module = _Loop()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    assert "save it again from its source" in _fixed_batch_how(loaded)
