"""The Python state a traced body reads and writes, replayed from the user's first call.

`World` holds what `RetraceProbe` watched (names, attributes, the tf.Variables they hold) as at
the first call and as the user changed it between calls, and every other tf.Variable alive at the
first call (a model's weights reached through an object): `World.replay` runs a function over the
recorded calls from that state and puts everything back after, so a fix's check compares outputs
the user had. `tflab.retrace.values` re-exports these names.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping, Sequence

__all__ = ["World", "Raised", "as_numpy", "is_variable", "global_slot", "cell_slot", "attr_slot", "MISSING",
           "STATE_BYTES"]

MISSING = object()
# What the probe copies of every other tf.Variable at the first call (a model's weights), at most.
STATE_BYTES = 256 << 20


def is_variable(v: Any) -> bool:
    return type(v).__name__ in ("ResourceVariable", "UninitializedVariable", "Variable") or any(
        c.__name__ == "Variable" and (c.__module__ or "").startswith("tensorflow") for c in type(v).__mro__)


class _Slot:
    __slots__ = ("label", "get", "set", "written")

    def __init__(self, label: str, get: Callable[[], Any], set_: Callable[[Any], None], written: bool):
        self.label, self.get, self.set, self.written = label, get, set_, written


def global_slot(globs: dict, name: str, written: bool) -> _Slot:
    def put(v: Any) -> None:
        if v is MISSING:
            globs.pop(name, None)
        else:
            globs[name] = v
    return _Slot(name, lambda: globs.get(name, MISSING), put, written)


def cell_slot(name: str, cell: Any, written: bool) -> _Slot:
    def get() -> Any:
        try:
            return cell.cell_contents
        except ValueError:
            return MISSING

    def put(v: Any) -> None:
        if v is not MISSING:
            cell.cell_contents = v
    return _Slot(name, get, put, written)


def attr_slot(label: str, obj: Any, attr: str, written: bool) -> _Slot:
    def put(v: Any) -> None:
        if v is MISSING:
            if hasattr(obj, attr):
                delattr(obj, attr)
        else:
            setattr(obj, attr, v)
    return _Slot(label, lambda: getattr(obj, attr, MISSING), put, written)


class World:
    """The Python state a traced body reads or writes, as at the first call and as it changed since.

    Attributes:
        slots: label (``v``, ``self.weights``, ``self.cfg.scale``) -> how to read and set it.
        initial: label -> its value at the first call.
        variables: label -> (the tf.Variable, its value at the first call as NumPy).
        changes: ``(call number, label, value)`` for each change the user made between calls
            (names the body writes itself are not changed by the user: they are replayed).
    """

    def __init__(self) -> None:
        self.slots: dict[str, _Slot] = {}
        self.initial: dict[str, Any] = {}
        self.variables: dict[str, tuple[Any, Any]] = {}
        self.changes: list[tuple[int, str, Any]] = []
        self.started = False
        self._protected: list | None = None
        self._at_start: list[tuple[Any, Any]] = []   # every other tf.Variable and its value at the first call
        self.unkept = ""   # why a replay cannot start from the first call's state ("" when it can)

    def add(self, slot: _Slot) -> None:
        self.slots.setdefault(slot.label, slot)

    def start(self) -> None:
        """Takes the state at the first call (before it runs)."""
        import tensorflow as tf

        self.started = True
        with tf.init_scope():
            for label, s in self.slots.items():
                v = s.get()
                self.initial[label] = v
                if is_variable(v):
                    try:
                        self.variables[label] = (v, v.numpy().copy())
                    except Exception:  # noqa: BLE001 - an uninitialized variable: replay keeps it as is
                        pass
            # Every other tf.Variable alive now (a model's weights reached through an object, a
            # tf.Module's): a replay starts from these values, as the user's first call did.
            mine = {id(v) for v, _ in self.variables.values()}
            total = 0
            for v in _live_variables(exclude=mine):
                value = v.numpy()
                total += value.nbytes
                if total > STATE_BYTES:
                    self._at_start = []
                    self.unkept = (f"your tf.Variables hold more than {STATE_BYTES >> 20} MiB at the first call: "
                                   "tflab keeps no copy to replay your calls from")
                    break
                self._at_start.append((v, value.copy()))

    def changed(self, call: int, label: str, value: Any) -> None:
        if label in self.slots and not self.slots[label].written:
            self.changes.append((call, label, value))

    @contextlib.contextmanager
    def as_at_first_call(self) -> Iterator[None]:
        """The block runs with every name and variable as at the first call; all put back after."""
        saved = {label: s.get() for label, s in self.slots.items()}
        try:
            for label, s in self.slots.items():
                if label in self.initial:
                    s.set(self.initial[label])
            yield
        finally:
            for label, s in self.slots.items():
                s.set(saved[label])

    def protect(self) -> None:
        """Finds, once, every other live tf.Variable a replay must put back (a model's weights, slots).

        One that did not exist at the first call was made by the user's calls (an optimizer's
        slots and step counter, a variable the body creates on its first trace): its value before
        the first call is not known, so no replay starts from the first call's state (`unkept`).
        """
        if self._protected is None:  # the variables alive when tflab first replays
            self._protected = _live_variables(exclude={id(v) for v, _ in self.variables.values()})
            if self.started and not self.unkept:
                at_start = {id(v) for v, _ in self._at_start}
                made = [v for v in self._protected if id(v) not in at_start]
                if made:
                    names = ", ".join(sorted({str(getattr(v, "name", "?")).split(":")[0] for v in made})[:3])
                    self.unkept = (f"tf.Variables were created after your first call began ({names}{', …' if len(made) > 3 else ''}) "
                                   "whose values before your first call tflab cannot know, so a replay cannot "
                                   "start where your first call did; create them before the first call to "
                                   "have fixes checked on your values")

    def replay(self, fn: Callable, calls: Sequence[tuple[tuple, dict]], *,
               overrides: Mapping[str, Callable[[Any], Any]] | None = None,
               on_change: Callable[[Any, Any], Any] | None = None) -> list:
        """``fn`` over ``calls`` from the first call's state; every name and variable put back after.

        Args:
            fn: what to call (the original Python function, or a candidate tf.function).
            calls: ``(args, kwargs)`` per call.
            overrides: label -> ``make(initial value)``: the value to start with instead
                (a candidate that keeps a name in a tf.Variable).
            on_change: ``(current value, user's new value) -> value to set`` for a user's
                change between calls to an overridden name (``var.assign(new)``).

        Returns:
            Per call: its outputs as NumPy (nested as returned), or a `Raised`.
        """
        import tensorflow as tf

        overrides = dict(overrides or {})
        saved = {label: s.get() for label, s in self.slots.items()}
        saved_vars = {}
        with tf.init_scope():
            for label, (var, _) in self.variables.items():
                try:
                    saved_vars[label] = var.numpy().copy()
                except Exception:  # noqa: BLE001
                    pass
            # Every other tf.Variable alive now (a model's weights, an optimizer's slots and step): a
            # training step replayed moves them; the user's process gets them back as they were.
            self.protect()
            others = [(v, v.numpy().copy()) for v in self._protected]
        by_call: dict[int, list[tuple[str, Any]]] = {}
        for call, label, value in self.changes:
            by_call.setdefault(call, []).append((label, value))
        outs: list = []
        try:
            current: dict[str, Any] = {}
            for label, s in self.slots.items():
                v = self.initial.get(label, MISSING)
                if label in overrides:
                    v = overrides[label](v)
                current[label] = v
                s.set(v)
            for label, (var, value) in self.variables.items():
                var.assign(value)
            with tf.init_scope():
                for var, value in self._at_start:
                    var.assign(value)
            for i, (a, k) in enumerate(calls, 1):
                for label, value in by_call.get(i, ()):
                    if label in overrides and on_change is not None:
                        value = on_change(current[label], value)
                    current[label] = value
                    self.slots[label].set(value)
                try:
                    outs.append(as_numpy(fn(*a, **k)))
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception as e:  # noqa: BLE001 - the user's code may raise anything
                    outs.append(Raised(i, e))
        finally:
            for label, s in self.slots.items():
                s.set(saved[label])
            for label, value in saved_vars.items():
                self.variables[label][0].assign(value)
            for var, value in others:
                var.assign(value)
        return outs


def _variable_classes() -> set:
    import tensorflow as tf

    out, todo = set(), [tf.Variable]
    while todo:
        c = todo.pop()
        if c not in out:
            out.add(c)
            todo.extend(c.__subclasses__())
    return out


def _live_variables(exclude: set[int]) -> list[Any]:
    """Every initialized eager tf.Variable alive in this process (a type lookup per object: no isinstance)."""
    import gc

    classes = _variable_classes()
    out = []
    if gc.get_freeze_count():  # in a check's forked child the inherited heap is frozen: invisible to get_objects
        gc.unfreeze()
    for o in gc.get_objects():
        if type(o) in classes and id(o) not in exclude:
            try:
                o.numpy()
            except Exception:  # noqa: BLE001 - uninitialized, or a variable of a graph: not the user's state
                continue
            out.append(o)
    return out


class Raised:
    """A call that raised during a replay."""

    def __init__(self, call: int, error: BaseException):
        from tflab.retrace.bench import error_text

        self.call, self.text = call, error_text(error)


def as_numpy(out: Any) -> Any:
    """Outputs with every tensor or variable read as a NumPy copy (a variable's value can change later)."""
    import tensorflow as tf

    def one(x: Any) -> Any:
        return x.numpy().copy() if hasattr(x, "numpy") else x

    return tf.nest.map_structure(one, out)

