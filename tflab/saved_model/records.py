"""The records of a SavedModel round trip: each tensor of a SignatureDef, each output's bitwise verdict, the check.

`SavedModelCheck` follows tflab's record convention (`tflab.report.base.Report`): data
are fields and properties, ``to_text()``/``to_dict()`` take no argument, ``config``
is `tflab.runtime_config()`'s dict filled once, and ``repr()`` is one line.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tflab._api.deprecations import deprecated_fields
from tflab.report.base import Report, config_field
from tflab.report.text import table

__all__ = ["TensorInfo", "OutputBits", "SignatureCheck", "SavedModelCheck"]


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature.

    Attributes:
        name: the signature's key for it.
        dtype: dtype name, e.g. ``"float32"``.
        shape: dims, ``None`` for unknown ones (e.g. ``(None, 8)``).
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...] | None

    def __str__(self) -> str:
        dims = "?" if self.shape is None else ",".join("None" if d is None else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


@deprecated_fields  # its old field names: tflab/_api/deprecations.py
@dataclasses.dataclass(frozen=True)
class OutputBits:
    """Bitwise comparison of one signature output, reloaded vs in-process.

    Attributes:
        name: output key. dtype/shape: from the reloaded SignatureDef.
        bit_exact: every example's bytes are identical.
        mismatched: number of elements whose bytes differ (over all examples).
        max_abs_error: largest ``|a - b|`` over numeric elements (0.0 when exact;
            NaN vs NaN with different payloads counts as a mismatch, not a difference).
        max_ulp: largest distance in units in the last place (floats only, else 0).
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...] | None
    bit_exact: bool
    mismatched: int = 0
    max_abs_error: float = 0.0
    max_ulp: int = 0


@dataclasses.dataclass(frozen=True)
class SignatureCheck:
    """One SignatureDef after reload: its inputs, outputs and per-output verdict."""

    name: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, OutputBits]

    @property
    def bit_exact(self) -> bool:
        return all(o.bit_exact for o in self.outputs.values())


@dataclasses.dataclass(frozen=True, repr=False)
class SavedModelCheck(Report):
    """Result of `save_and_reload`.

    Attributes:
        path: the SavedModel folder.
        kind: ``"tf.Module"``, ``"keras"`` (Keras 3), ``"tf_keras"`` or ``"SavedModel"``
            (a loaded SavedModel saved again).
        bit_exact: every output of every signature matched byte for byte.
        signatures: signature key → `SignatureCheck`.
        batch_count: number of example batches run through each signature.
        notes: what the SavedModel did not keep, one sentence each.
        example_batches: the batches run (the given ones, or the seeded
            random ones when ``examples=None``), as a `tflab.examples.Examples`
            checked against the signatures: pass it on as is (not in ``to_dict()``).
        config: `tflab.runtime_config()`'s dict, filled when the check is made.

    A SavedModelCheck is about a saved object (its folder), not one function, so it
    has no ``function_name``; ``repr()`` names the kind and the folder.
    """

    path: str
    kind: str
    bit_exact: bool
    signatures: dict[str, SignatureCheck]
    batch_count: int
    notes: tuple[str, ...] = ()
    example_batches: Any = dataclasses.field(default=(), compare=False, metadata={"dict": False})
    config: dict = config_field()

    def summary_line(self) -> str:
        sigs = ", ".join(f"{k}({'exact' if s.bit_exact else 'DIFFERS'})" for k, s in self.signatures.items())
        return (f"{'bit-exact' if self.bit_exact else 'NOT bit-exact'}; signatures [{sigs}]; "
                f"{len(self.notes)} note(s)")

    def __repr__(self) -> str:
        return f"<SavedModelCheck {self.kind} {self.path}: {self.summary_line()}>"

    def to_text(self) -> str:
        lines = [f"SavedModel {self.path} ({self.kind}): "
                 f"{'bit-exact' if self.bit_exact else 'NOT bit-exact'} over {self.batch_count} example batch(es)"]
        for key, sig in self.signatures.items():
            lines.append(f"  signature {key}")
            rows = [("in", str(t), "") for t in sig.inputs.values()]
            for o in sig.outputs.values():
                verdict = ("bit-exact" if o.bit_exact else
                           f"{o.mismatched} element(s) differ, max |Δ| {o.max_abs_error:.3g}, "
                           f"max ULP {o.max_ulp} (each its own worst element)")
                rows.append(("out", str(TensorInfo(o.name, o.dtype, o.shape)), verdict))
            lines.append(table(rows, indent="    ", align="<<<"))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The fields as JSON data; each signature also carries its ``bit_exact``.

        ``"examples"`` repeats ``batch_count`` under the key export's report.json has
        always had for it.
        """
        out = super().to_dict()
        out["examples"] = self.batch_count
        out["notes"] = list(self.notes)
        out["signatures"] = {k: {"bit_exact": s.bit_exact,
                                 "inputs": {n: dataclasses.asdict(t) for n, t in s.inputs.items()},
                                 "outputs": {n: dataclasses.asdict(o) for n, o in s.outputs.items()}}
                             for k, s in self.signatures.items()}
        return out
