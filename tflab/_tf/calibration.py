"""The int8 converter's calibration, kept from the variant's conversion for QuantizationDebugger.

``tf.lite.experimental.QuantizationDebugger(converter=...)`` starts with one whole
conversion of its own: the converter with ``_experimental_calibrate_only = True``
(``tensorflow/lite/tools/optimize/debugging/python/debugger.py``, ``__init__``),
which runs the MLIR conversion and the calibration over the representative
dataset again, exactly as the int8 variant's conversion did, and stops before
quantizing. Both steps are the same calls with the same arguments as in the
variant's conversion (``TFLiteConverterBase._quantize`` in
``tensorflow/lite/python/lite.py``: ``_experimental_calibrate_only`` only decides
whether ``mlir_quantize`` follows the calibration). So the variant's conversion
records the two results (`recording_calibration`), and `calibrate_only_model`
runs the calibrate-only ``convert()`` with those two steps answered from the
record: every other step of ``convert()`` (I/O types, buffer deduplication, the
conversion metadata) runs as TF wrote it, so the bytes are what the debugger's
own conversion returns. `quantize_calibrated` then makes the debugger's models
from them with the debugger's own ``mlir_quantize`` call, and the debugger runs
the instrumented one (``quant_debug_model_content``) without a converter.

Each private name is listed in `PRIVATE_NAMES` (``tests/house/test_tf_internals.py``
checks that each exists in the pinned versions).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence

PRIVATE_NAMES = (
    ("tensorflow.lite.python.lite", "_convert_saved_model"),  # the MLIR conversion of a SavedModel
    ("tensorflow.lite.python.lite", "_calibrator"),
    ("tensorflow.lite.python.optimize.calibrator", "Calibrator.calibrate"),
    ("tensorflow.lite.python.convert", "mlir_quantize"),  # QuantizationDebugger's quantization of the calibration
)

_LOCK = threading.Lock()  # one patch of lite's module globals at a time


@contextlib.contextmanager
def _patched(convert_saved_model, calibrate) -> Iterator[None]:
    from tensorflow.lite.python import lite

    cls = lite._calibrator.Calibrator  # noqa: SLF001
    with _LOCK:
        real_convert, real_calibrate = lite._convert_saved_model, cls.calibrate  # noqa: SLF001
        lite._convert_saved_model = convert_saved_model(real_convert)  # noqa: SLF001
        cls.calibrate = calibrate(real_calibrate)
        try:
            yield
        finally:
            lite._convert_saved_model = real_convert  # noqa: SLF001
            cls.calibrate = real_calibrate


@contextlib.contextmanager
def recording_calibration() -> Iterator[dict]:
    """For the block, records what this thread's conversions return from the MLIR conversion and the calibration.

    Yields:
        ``{"converted": [bytes, ...], "calibrated": [bytes, ...]}``, filled as the block converts
        (other threads' conversions are not recorded).
    """
    box: dict = {"converted": [], "calibrated": []}
    me = threading.get_ident()

    def convert_saved_model(real):
        def record(*args, **kwargs):
            out = real(*args, **kwargs)
            if threading.get_ident() == me:
                box["converted"].append(out)
            return out
        return record

    def calibrate(real):
        def record(self, *args, **kwargs):
            out = real(self, *args, **kwargs)
            if threading.get_ident() == me:
                box["calibrated"].append(out)
            return out
        return record

    with _patched(convert_saved_model, calibrate):
        yield box


def calibrate_only_model(converter: Any, recorded: dict) -> bytes | None:
    """What ``converter.convert()`` returns as QuantizationDebugger sets it up, from a recorded conversion.

    Args:
        converter: a fresh int8 converter set up as the recorded one was (same SavedModel, recipe
            and representative dataset); it is changed as the debugger changes it.
        recorded: `recording_calibration`'s record of one int8 conversion.

    Returns:
        The calibrated (not yet quantized) flatbuffer, or None when the record does not hold exactly
        one MLIR conversion and one calibration, or the replay did not use each exactly once.
    """
    if len(recorded["converted"]) != 1 or len(recorded["calibrated"]) != 1:
        return None
    used = {"converted": 0, "calibrated": 0}

    def convert_saved_model(real):
        def replay(*args, **kwargs):
            used["converted"] += 1
            return recorded["converted"][0]
        return replay

    def calibrate(real):
        def replay(self, *args, **kwargs):
            used["calibrated"] += 1
            return recorded["calibrated"][0]
        return replay

    # As QuantizationDebugger._set_converter_options_for_calibration does.
    converter.experimental_mlir_quantizer = True
    converter._experimental_calibrate_only = True  # noqa: SLF001
    with _patched(convert_saved_model, calibrate):
        out = converter.convert()
    return bytes(out) if used == {"converted": 1, "calibrated": 1} else None


def calibrate_only(converter: Any) -> bytes:
    """The calibrated (not yet quantized) flatbuffer, converted as QuantizationDebugger converts it.

    The options ``QuantizationDebugger._set_converter_options_for_calibration`` sets, then one
    ``convert()``: the MLIR conversion and the calibration, no quantization. Used when no int8
    conversion of this SavedModel and these examples was recorded.
    """
    converter.experimental_mlir_quantizer = True
    converter._experimental_calibrate_only = True  # noqa: SLF001
    return bytes(converter.convert())


def quantize_calibrated(calibrated: bytes, *, verify: bool = False, denylisted_nodes: Sequence[str] = ()) -> bytes:
    """A full-integer model quantized from ``calibrated``, as QuantizationDebugger quantizes it.

    The same ``mlir_quantize`` call as the debugger's ``_get_quantized_model`` and
    ``_init_from_converter`` (debugger.py) with ``fully_quantize=True`` and per-channel weights
    (`tflab.litert.conversion.make_converter` leaves ``_experimental_disable_per_channel`` at its
    default): float inputs and outputs around an int8 body. One call takes seconds on a CNN
    (2.3 s on ConvNeXtTiny at 32×32), so the int8 conversion's worker process makes the two
    that do not depend on the per-op check (`debugger_models`) while the others are checked.

    Args:
        calibrated: `calibrate_only`'s flatbuffer (or the one a recorded conversion made).
        verify: the instrumented model, a ``NumericVerify`` op after each quantized op (what
            ``QuantizationDebugger(quant_debug_model_content=...)`` runs for its layer statistics).
        denylisted_nodes: output tensor names of the ops kept in float.

    Returns:
        The flatbuffer's bytes.
    """
    from tensorflow.lite.python import convert

    return bytes(convert.mlir_quantize(calibrated, disable_per_channel=False, fully_quantize=True,
                                       enable_numeric_verify=verify, denylisted_ops=None,
                                       denylisted_nodes=list(denylisted_nodes) or None))


def debugger_models(calibrated: bytes) -> dict[str, bytes]:
    """The instrumented (``"debug"``) and plain (``"nondebug"``) models QuantizationDebugger makes first."""
    return {"debug": quantize_calibrated(calibrated, verify=True), "nondebug": quantize_calibrated(calibrated)}
