"""A mode comparison's cause linked to the fusion of a lowering where it acted (``tflab lower --cause``).

`tflab.compare_modes` names a compiler cause at the fusion of the comparison's
own compile (its forward+backward step) and the TF ops of the HLO
instructions it came from (``Cause.evidence["tf_ops"]``). A lowering compiles
the forward pass alone, so its fusions may be named otherwise: the fusion is
found by those TF op names (XLA's ``op_name`` metadata), then by name, then by
the user's line.
"""

from __future__ import annotations

from typing import Any

__all__ = ["link_cause"]


def link_cause(lowering, found: Any) -> str:
    """Links a cause to the fusion of ``lowering`` where it acted; marks it in the text and HTML.

    Args:
        lowering: a `tflab.lowering.Lowering` of the same function and arguments.
        found: a `tflab.attribution.Cause`, or a `tflab.modes.ModeComparison` (its
            ``cause``); None links nothing.

    Returns:
        The fusion's name ("" when the cause names none of this lowering's fusions,
        or there is no cause). ``lowering.cause`` and ``lowering.cause_fusion`` are set.

    Example:
        >>> low = tflab.lower(normalize, x, m, v)
        >>> link_cause(low, tflab.compare_modes(normalize, x, m, v, modes=("xla",)))
        'broadcast_add_fusion'
    """
    cause = getattr(found, "cause", found) if found is not None and not hasattr(found, "line_text") else found
    lowering.cause, lowering.cause_fusion = cause, ""
    if cause is None:
        return ""
    ops = set((cause.evidence or {}).get("tf_ops") or ())
    fusions = list(lowering.fusions)
    pick = next((f for f in fusions if ops and ops & set(f.tf_op_names)), None)
    pick = pick or next((f for f in fusions if cause.op_name and f.name == cause.op_name), None)
    if pick is None and cause.line:
        pick = next((f for f in fusions if any(s.endswith(cause.line) or cause.line.endswith(s)
                                               for s in f.source_lines)), None)
    lowering.cause_fusion = pick.name if pick is not None else ""
    return lowering.cause_fusion
