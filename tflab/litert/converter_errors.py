"""A failed TFLite conversion in one line that says why: the converter's own cause, the op, its node.

The converter (MLIR, ``tensorflow/compiler/mlir/lite``) reports a failure as several ``error:``
diagnostics, each prefixed with its location, ``<unknown>:0: error: loc(callsite(fused["OP:",
"NODE@FUNCTION"] at …)): MESSAGE``, followed by ``note: … called from`` lines. The first message
is the cause (``'tf.TensorListReserve' op requires element_shape to be static during TF Lite
transformation pass``); the next ones are its consequences (``failed to legalize operation …``)
and the failing pass's summary, which may carry the converter's advice (``Please consider using
Select TF ops …``). Quoting the first line cut inside the location said none of it.

`parse_converter_error` splits that text into a `ConverterFailure`: the cause line, the op and
node from the location (``fused["TensorListReserve:", "sequential_1/lstm_1/TensorArrayV2_1@…"]``),
the name scope (the Keras layer's, ``sequential_1/lstm_1``) and the advice. No TF is imported.
"""

from __future__ import annotations

import dataclasses
import re

from tflab.errors import TflabError

__all__ = ["ConverterFailure", "ConversionFailed", "parse_converter_error"]

# Messages that follow from the cause rather than state it (MLIR's legalization and translation
# summaries: tensorflow/compiler/mlir/lite/transforms/*.cc, flatbuffer_export.cc).
_CONSEQUENCES = re.compile(r"^(failed to legalize operation|Lowering .* is failed|Could not translate MLIR|"
                           r"failed while converting|illegal op|loc\()", re.I)
_ERROR = re.compile(r"(?:^|\s)error:\s*(.*)$")
_FUSED = re.compile(r'fused\["(\w+):",\s*"([^"@]+)(?:@[^"]*)?"\]')
_OP_IN_MESSAGE = re.compile(r"'tf\.(\w+)'")


@dataclasses.dataclass(frozen=True)
class ConverterFailure:
    """What a failed conversion said, split into its parts.

    Attributes:
        cause: the converter's first (innermost) error message, without its location, e.g.
            ``'tf.TensorListReserve' op requires element_shape to be static during TF Lite
            transformation pass``.
        op: the TF op type it names (``TensorListReserve``), or "".
        node: the op's node name in the converted graph (``sequential_1/lstm_1/TensorArrayV2_1``), or "".
        scope: the node's name scope, the Keras layers' names it was made under
            (``sequential_1/lstm_1``), or "".
        advice: the converter's own suggestion, one line (``Please consider using Select TF ops …``), or "".
    """

    cause: str
    op: str = ""
    node: str = ""
    scope: str = ""
    advice: str = ""

    def line(self, quantization: str, layer: str = "") -> str:
        """``TFLite Q conversion failed: CAUSE (op OP in layer L, node N)``: the one line of the failure."""
        where = [f"op {self.op}" + (f" in layer {layer}" if layer else "")] if self.op else []
        where += [f"node {self.node}"] if self.node else []
        return (f"TFLite {quantization} conversion failed: {self.cause}"
                + (f" ({', '.join(where)})" if where else ""))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _message(rest: str) -> str:
    """The message after an optional ``loc(…)`` location (parentheses matched)."""
    rest = rest.strip()
    if not rest.startswith("loc("):
        return rest
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == ")":
            return rest[i + 1:].lstrip(" :").strip()
    return rest


def parse_converter_error(text: str) -> ConverterFailure | None:
    """Splits a converter error's text into cause, op, node, scope and advice.

    Args:
        text: ``str(ConverterError)`` (or the converter's captured stderr).

    Returns:
        A `ConverterFailure`, or None when the text holds no ``error:`` diagnostic.

    Example:

    >>> f = parse_converter_error('<unknown>:0: error: loc(callsite(fused["TensorListReserve:", '
    ...     '"seq/lstm_1/TensorArrayV2_1@__inference_call_7"] at fused["X:", "Y"])): '
    ...     "'tf.TensorListReserve' op requires element_shape to be static during TF Lite transformation pass")
    >>> f.op, f.node, f.scope
    ('TensorListReserve', 'seq/lstm_1/TensorArrayV2_1', 'seq/lstm_1')
    """
    errors = []  # (message, location text)
    for ln in str(text).splitlines():
        m = _ERROR.search(ln)
        if m:
            errors.append((_message(m.group(1)).replace("\\n", " ").strip(), m.group(1)))
    if not errors:
        return None
    causes = [e for e in errors if e[0] and not _CONSEQUENCES.match(e[0])]
    cause, loc = (causes or errors)[0]
    advice = next((msg for msg, _ in errors if re.search(r"\bconsider\b", msg, re.I)), "")
    advice = re.sub(r"\s+", " ", advice)
    fused = _FUSED.search(loc) if loc.startswith("loc(") else None
    op, node = (fused.group(1), fused.group(2)) if fused else ("", "")
    if not op:
        m = _OP_IN_MESSAGE.search(cause)
        op = m.group(1) if m else ""
    scope = node.rpartition("/")[0] if "/" in node else ""
    return ConverterFailure(cause=cause[:400], op=op, node=node, scope=scope, advice=advice[:400])


class ConversionFailed(TflabError):
    """A conversion failed for a reason tflab does not classify further; ``failure`` holds its parts
    (`ConverterFailure`, None when the converter's text held no ``error:`` line)."""

    def __init__(self, message: str, failure: ConverterFailure | None = None):
        super().__init__(message)
        self.failure = failure
