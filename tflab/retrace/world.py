"""The Python state a traced body reads and writes, replayed from the user's first call.

`World` holds what `RetraceProbe` watched (names, attributes, the tf.Variables they hold) as at
the first call and as the user changed it between calls, and every other tf.Variable alive at the
first call (a model's weights reached through an object): `World.replay` runs a function over the
recorded calls from that state and puts everything back after, so a fix's check compares outputs
the user had. `tflab.retrace.values` re-exports these names.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, Iterator, Mapping, Sequence

__all__ = ["World", "Raised", "as_numpy", "is_variable", "global_slot", "cell_slot", "attr_slot", "MISSING",
           "STATE_BYTES", "reachable_variables"]

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
        self._at_start: list[tuple[Any, Any]] = []   # every tf.Variable the body reaches, and its value then
        self._body: Callable | None = None
        self.unkept = ""   # why a replay cannot start from the first call's state ("" when it can)

    def add(self, slot: _Slot) -> None:
        self.slots.setdefault(slot.label, slot)

    def start(self, body: Callable | None = None) -> None:
        """Takes the state at the first call (before it runs).

        Args:
            body: the user's Python function: the tf.Variables it can reach (`reachable_variables`:
                through its closure, the globals it names, a bound method's object) are copied too,
                so a replay starts from their values at the first call.
        """
        import tensorflow as tf

        self.started = True
        self._body = body
        with tf.init_scope():
            for label, s in self.slots.items():
                v = s.get()
                self.initial[label] = v
                if is_variable(v):
                    try:
                        self.variables[label] = (v, v.numpy().copy())
                    except Exception:  # noqa: BLE001 - an uninitialized variable: replay keeps it as is
                        pass
            mine = {id(v) for v, _ in self.variables.values()}
            total = 0
            for v in reachable_variables(body):
                if id(v) in mine:
                    continue
                try:
                    value = v.numpy()
                except Exception:  # noqa: BLE001 - uninitialized: created by the first call, see `protect`
                    continue
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
                at_start = {id(v) for v, _ in self._at_start} | {id(v) for v, _ in self.variables.values()}
                made = [v for v in reachable_variables(self._body) if id(v) not in at_start]
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


def reachable_variables(body: Callable | None) -> list[Any]:
    """The tf.Variables a function can reach: through its closure, the globals its code names, the
    object of a bound method, their ``variables`` (a tf.Module, a Keras model, layer or optimizer),
    a list, tuple or dict of them, and a plain object's attributes, one level deep.

    Bounded by what the code names (no walk of the process's heap, which in a long session holds
    every model ever built), so it is cheap enough for every probe's first call.
    """
    import types

    if body is None:
        return []
    roots: list = []
    fn = body
    if inspect.ismethod(fn):
        roots.append(fn.__self__)
        fn = fn.__func__
    fn = getattr(fn, "python_function", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    globs = getattr(fn, "__globals__", {})
    for n in names:
        if n in globs:
            roots.append(globs[n])
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            roots.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    out: dict[int, Any] = {}

    def tf_variable(v: Any) -> Any:  # a Keras 3 variable wraps the tf.Variable TF's graphs capture
        inner = getattr(v, "value", None) if type(v).__module__.startswith("keras") else None
        return inner if inner is not None and is_variable(inner) else v

    def take(o: Any, depth: int) -> None:
        if is_variable(o):
            o = tf_variable(o)
            out.setdefault(id(o), o)
            return
        if isinstance(o, types.ModuleType):  # a module's attributes the code names (mymod.v)
            for n in names:
                v = getattr(o, n, None) if not n.startswith("__") else None
                if v is not None and not isinstance(v, types.ModuleType) and depth > 0:
                    take(v, 0)
            return
        if depth < 0 or isinstance(o, (str, bytes, int, float, bool, type, types.FunctionType)):
            return
        held = None
        if type(o).__module__.split(".")[0] in ("keras", "tf_keras", "tensorflow") or hasattr(o, "trainable_variables"):
            try:
                held = list(getattr(o, "variables", None) or ())
            except Exception:  # noqa: BLE001 - a property that raises before build
                held = None
        if held is not None:
            for v in held:
                v = tf_variable(v)
                if is_variable(v):
                    out.setdefault(id(v), v)
            return
        if isinstance(o, dict):
            items = list(o.values())
        elif isinstance(o, (list, tuple, set)):
            items = list(o)
        else:
            items = list(getattr(o, "__dict__", {}).values())
        for v in items[:1000]:
            take(v, depth - 1)

    for r in roots:
        take(r, 2)
    return list(out.values())


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

