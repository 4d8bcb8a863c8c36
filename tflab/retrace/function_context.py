"""The FunctionContext: which part of TF's cache key beside the FunctionType changed.

TF 2.21 keys a tf.function's trace cache on the FunctionType and on a
FunctionContext (``function_context.make_function_context``: the save
context, the device scope, the distribution strategy, ...). `context_change`
lists the parts that differ between two traces and `context_text` says it in
one line. `tflab.retrace.diff` uses them and re-exports them.
"""

from __future__ import annotations

from typing import Mapping, Sequence


# TF 2.21 function_context.EagerContext fields -> what they are (make_function_context).
_CONTEXT_PARTS = {
    "variable_policy": ("save context", "tf.saved_model.save traced it in its save context (SaveOptions."
                        "experimental_variable_policy is part of TF's cache key)"),
    "parent_graph": ("graph", "called from inside another graph (an outer tf.function or a tf.Graph) "
                     "instead of eagerly, or from another graph"),
    "device_functions": ("device scope", "called under another device scope (tf.device)"),
    "colocation_stack": ("colocation", "called under another colocation scope"),
    "in_cross_replica_context": ("distribution scope", "called in another tf.distribute context "
                                 "(cross-replica vs replica)"),
    "xla_context_id": ("XLA context", "called inside another XLA (jit_compile) context"),
}


def context_change(old: Mapping[str, str] | None, new: Mapping[str, str] | None) -> list[tuple[str, str, str, str]]:
    """(field, part, old, new) for each field of TF's FunctionContext that differs, in TF's field order."""
    if not old or not new:
        return []
    out = []
    for f in new:
        if f in old and old[f] != new[f]:
            out.append((f, _CONTEXT_PARTS.get(f, (f, ""))[0], old[f], new[f]))
    return out


def context_text(changes: Sequence[tuple[str, str, str, str]]) -> str:
    parts = []
    for f, part, old, new in changes:
        what = _CONTEXT_PARTS.get(f, (part, ""))[1]
        if f == "parent_graph":
            old = "eager" if old == "None" else "a graph"
            new = "eager" if new == "None" else ("another graph" if old == "a graph" else "a graph")
        parts.append(f"{part}: {what} ({f} {old} -> {new})")
    return "; ".join(parts)
