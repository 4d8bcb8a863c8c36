"""Stale reads: a Python value read at trace time that changed later without a retrace.

On TF 2.21 a changed Python closure or global does NOT retrace: the FuncGraph
keeps the value it baked in (a number) or the tensor or variable it captured
(rebinding a name to a new one). `RetraceProbe` (``watch_stale=True``)
snapshots the values its body's code reads (`code_names`, `closure_cells`)
when it traces, and compares them on each later call (`same_value`); a change
is one `StaleRead`. `tflab.retrace.probe` re-exports `StaleRead`.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any


@dataclasses.dataclass(frozen=True)
class StaleRead:
    """A closure variable or global read at trace time that changed later, without a retrace.

    On TF 2.21 a Python number read by the traced body is baked into the
    FuncGraph as a constant and is not part of the FunctionType, so changing it
    does not retrace: the graph keeps computing with the traced value. The same
    holds when the name is rebound to a new eager tensor or tf.Variable (the
    graph captured the old one); ``.assign()`` on the same variable is seen.

    Attributes:
        name: the variable's name.
        scope: "closure" (a cell of the function) or "global".
        traced: repr of the value the FuncGraph was traced with.
        current: repr of the value it has now.
        trace: index of the trace that baked in ``traced``.
        call: 1-based number of the call that first saw the change.
    """

    name: str
    scope: str
    traced: str
    current: str
    trace: int
    call: int

    @property
    def text(self) -> str:
        return (f"{self.scope} {self.name!r} was {self.traced} at trace #{self.trace}, now "
                f"{self.current}: no retrace, the graph still uses {self.traced}")

    @property
    def change(self) -> str:
        """The change in one phrase, as the probe's repr names it: ``global SCALE 2.0 -> 3.0``."""
        return f"{self.scope} {self.name} {self.traced} -> {self.current}"

    @property
    def fix(self) -> str:
        return (f"pass {self.name} as an argument (a tensor, so changing it needs no retrace) "
                f"or keep it in a tf.Variable and .assign() new values")

    @property
    def fix_record(self) -> Any:
        """The `tflab.fix.Fix` printed: not run, since it changes the function's parameters or globals."""
        from tflab import fix as fx

        return fx.unchecked("code", "", self.fix, f"it changes how your function reads {self.name}; "
                            "tflab does not rewrite your source here")


# Values whose staleness we can judge: they are baked into the FuncGraph as
# constants when read at trace time. Containers, modules and functions are not.
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
MISSING = object()


# Rebinding a name to a new eager tensor or tf.Variable is stale too: the
# FuncGraph captured the old one (by value for a tensor, by handle for a
# variable). .assign() on the same variable is not: the handle is unchanged.
_BY_IDENTITY = ("EagerTensor", "ResourceVariable", "UninitializedVariable")


def is_watchable(value: Any) -> bool:
    if isinstance(value, _SCALARS):
        return True
    mod = type(value).__module__ or ""
    return (mod == "numpy" and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0) or \
        type(value).__name__ in _BY_IDENTITY


def same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a).__name__ in _BY_IDENTITY or type(b).__name__ in _BY_IDENTITY:
        return False
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # an odd __eq__: treat as changed
        return False
def code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:  # nested lambdas / comprehensions read globals too
        if isinstance(const, types.CodeType):
            names |= code_names(const)
    return names


def closure_cells(fn: Any) -> list[tuple[str, Any]]:
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    return list(zip(code.co_freevars, cells)) if code is not None else []

def value_repr(v: Any) -> str:
    if v is MISSING:
        return "<deleted>"
    if type(v).__name__ == "EagerTensor":
        return f"<tf.Tensor {v.dtype.name}{tuple(v.shape)} at {id(v):#x}>"
    if type(v).__name__ in _BY_IDENTITY:
        return f"<tf.Variable {v.name!r} {v.dtype.name}{tuple(v.shape)} at {id(v):#x}>"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
