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
    # What the traced value is, in words ("a tensor", "a Python float"), for an attribute read.
    what: str = ""
    # The `tflab.fix.FixPlan` run on the user's calls (`tflab.retrace.statefix.stale_plan`), once checked.
    plan: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def text(self) -> str:
        if self.scope == "attribute":
            return (f"`{self.name}` was baked into the graph at trace #{self.trace} ({self.what}, not part "
                    f"of the cache key); at call {self.call} it is {self.current}: no retrace, the graph "
                    f"still uses {self.traced}")
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
        """The `tflab.fix.Fix` printed: the checked one when tflab ran it on your calls, else not run."""
        from tflab import fix as fx

        if self.plan is not None and self.plan.fix is not None:
            return self.plan.fix
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


def what_it_is(v: Any) -> str:
    """``a tensor`` / ``a tf.Variable`` / ``a Python float``: the kind of value a trace read."""
    name = type(v).__name__
    if name == "EagerTensor":
        return "a tensor"
    if name in _BY_IDENTITY:
        return "a tf.Variable"
    return f"a Python {name}" if isinstance(v, _SCALARS) else f"a {name}"


def attribute_stores(code: types.CodeType | None) -> set[str]:
    """Attribute names a function's code (and nested code) stores (``self.v = ...``: ``STORE_ATTR``)."""
    import dis

    out: set[str] = set()
    if code is None:
        return out
    out |= {i.argval for i in dis.get_instructions(code) if i.opname == "STORE_ATTR"}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= attribute_stores(const)
    return out


def cell_stores(code: types.CodeType | None) -> set[str]:
    """Closure names a function's code rebinds (``nonlocal c; c = ...``: ``STORE_DEREF``)."""
    import dis

    if code is None:
        return set()
    return {i.argval for i in dis.get_instructions(code) if i.opname == "STORE_DEREF"} & set(code.co_freevars)


_MAX_ATTRS = 64


def attribute_reads(obj: Any, func: Any) -> list[tuple[str, Any, str, bool]]:
    """The attributes of ``self`` (``obj``) and of plain objects it holds that the method ``func`` can read.

    The names come from the body's code and from the code of the methods of
    ``type(self)`` it names (``self.helper()`` reading ``self.weights``), three
    calls deep; an attribute is listed when the instance holds it now.

    Returns:
        ``(label, owner object, attribute, written)`` tuples, ``label`` as the
        user writes it (``self.weights``, ``self.cfg.scale``); ``written`` when
        the body stores that attribute itself (``self.v = self.v + x``).
    """
    code = getattr(func, "__code__", None)
    if obj is None or code is None or not hasattr(obj, "__dict__") or isinstance(obj, types.ModuleType):
        return []
    names, stores, todo, seen = set(), set(), [code], set()
    while todo and len(seen) < 16:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        names |= code_names(c)
        stores |= attribute_stores(c)
        for n in code_names(c):
            m = getattr(type(obj), n, None)
            mc = getattr(m, "__code__", None) or getattr(getattr(m, "python_function", None), "__code__", None)
            if mc is not None:
                todo.append(mc)
    out: list[tuple[str, Any, str, bool]] = []
    own = vars(obj)
    for n in sorted(names):
        if n not in own:
            continue
        v = own[n]
        if is_watchable(v):
            out.append((f"self.{n}", obj, n, n in stores))
        elif _plain_object(v):
            inner = vars(v)
            out.extend((f"self.{n}.{m}", v, m, False) for m in sorted(names) if m in inner and is_watchable(inner[m]))
    return out[:_MAX_ATTRS]


def _plain_object(v: Any) -> bool:
    """A user's own object (a config, a holder): not a module, function, class, container or TF/Keras object."""
    t = type(v)
    mod = t.__module__ or ""
    return (hasattr(v, "__dict__") and not isinstance(v, (types.ModuleType, types.FunctionType, type))
            and not mod.startswith(("tensorflow", "keras", "tf_keras", "numpy", "builtins")))


def closure_cells(fn: Any) -> list[tuple[str, Any]]:
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    return list(zip(code.co_freevars, cells)) if code is not None else []

def value_repr(v: Any) -> str:
    if v is MISSING:
        return "<deleted>"
    if type(v).__name__ == "EagerTensor":
        head = f"tf.Tensor {v.dtype.name}{tuple(v.shape)}"
        try:
            if v.shape.num_elements() is not None and v.shape.num_elements() <= 4:  # small: its values say which
                return f"<{head} {v.numpy().tolist()!r}>"
        except Exception:  # noqa: BLE001 - a string or resource tensor: named by identity
            pass
        return f"<{head} at {id(v):#x}>"
    if type(v).__name__ in _BY_IDENTITY:
        return f"<tf.Variable {v.name!r} {v.dtype.name}{tuple(v.shape)} at {id(v):#x}>"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
