"""AutoGraph's and tf.function's internals that `tflab.autograph`, `tflab._user.source_map` and `tflab.diagnosis` read.

What is private here, and why tflab needs it:

* the ``ag__`` operator module that ``api.PyToTF.get_extra_locals`` builds once
  (``autograph/impl/api.py``, ``_TRANSPILER``) and the Python paths of the
  control-flow operators (``autograph/operators/control_flow.py``:
  ``_py_for_stmt``, ``_py_while_stmt``, ``_py_if_stmt``): wrapped for one trace
  by `counting_operators` to count what each ``if``/``for``/``while`` did
  (`operator_slots` reads what those six slots hold now);
* AutoGraph's cache of functions it fell back on (``conversion._ALLOWLIST_CACHE``):
  emptied for one trace by `fresh_allowlist` (`allowlist_cache` reads the one in place);
* ``tf_stack.extract_stack``: the Python stack as AutoGraph's ``StackTraceMapper``
  maps it back to the user's lines (the same frames an op's traceback holds);
* per-op and per-graph attributes: the branch/body FuncGraphs ``cond_v2`` and
  ``while_v2`` put on an If/While op (`branch_graphs`), a graph's function
  library (`library_function_graph`);
* a `tf.function`'s options and cache: ``Function._clone`` (a fresh copy with
  the same options), ``Function._autograph`` and the cache's ordered map of
  traces (``FunctionCache._primary``, one entry per successful trace).

Public TF is used where it exists: ``tf.compat.v1.get_default_graph`` for the
graph being traced and ``tf.__internal__.FuncGraph`` for the class.
Every patch is a context manager that restores what it changed, also when the
body raises.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, NamedTuple

# (module, attribute path) of every private TF name used below; tests/house/test_tf_internals.py
# imports each, so a TF upgrade that drops one fails there, naming it.
PRIVATE_NAMES = (
    ("tensorflow.python.autograph.impl.api", "_TRANSPILER"),
    ("tensorflow.python.autograph.impl.api", "PyToTF.get_extra_locals"),
    ("tensorflow.python.autograph.operators.control_flow", "_py_for_stmt"),
    ("tensorflow.python.autograph.operators.control_flow", "_py_while_stmt"),
    ("tensorflow.python.autograph.operators.control_flow", "_py_if_stmt"),
    ("tensorflow.python.autograph.impl.conversion", "_ALLOWLIST_CACHE"),
    ("tensorflow.python.util.tf_stack", "extract_stack"),
    ("tensorflow.python.framework.ops", "Graph._get_function"),
    ("tensorflow.python.eager.polymorphic_function.polymorphic_function", "Function._clone"),
    ("tensorflow.core.function.polymorphism.function_cache", "FunctionCache._primary"),
)

# Attributes TF sets on instances (not listable as module attributes above); the tests of
# tflab.autograph and tflab.diagnosis read each through the functions below on the pinned TF.
INSTANCE_ATTRIBUTES = (
    ("Operation (If/While)", "_true_graph", "_false_graph", "_cond_graph", "_body_graph"),
    ("polymorphic_function.Function", "_autograph", "_function_cache"),
)

# Attributes cond_v2/while_v2 set on the op object for the branch/body FuncGraphs.
_SUBGRAPH_ATTRS = ("_true_graph", "_false_graph", "_cond_graph", "_body_graph")

# Positional index of the body callable in each ag__ operator's arguments
# (``for_stmt(iter_, extra_test, body, …)``, ``while_stmt(test, body, …)``, ``if_stmt(cond, body, …)``).
_BODY_INDEX = {"for": 2, "while": 1, "if": 1}


def extract_stack() -> Any:
    """The current Python stack as TF records it for an op (``tf_stack.extract_stack``).

    Returns:
        A sequence of frames with ``.filename`` and ``.lineno``; inside converted
        code AutoGraph maps generated lines back to the user's file.
    """
    from tensorflow.python.util import tf_stack

    return tf_stack.extract_stack()


def traced_graph() -> Any:
    """The outermost FuncGraph being traced, or None inside AutoGraph's ``FuncGraph('tmp')``.

    AutoGraph stages one loop iteration in a throw-away graph named ``tmp`` to
    type undefined loop variables; callers that count what a trace did skip it.
    """
    import tensorflow as tf

    g = tf.compat.v1.get_default_graph()
    while isinstance(getattr(g, "outer_graph", None), tf.__internal__.FuncGraph):
        if g.name == "tmp":
            return None
        g = g.outer_graph
    return g


def current_graph() -> Any:
    """The graph ops are being added to now (``tf.compat.v1.get_default_graph``)."""
    import tensorflow as tf

    return tf.compat.v1.get_default_graph()


class OperatorSlots(NamedTuple):
    """What AutoGraph's six control-flow operator slots hold now (`operator_slots`).

    Attributes:
        for_stmt, while_stmt, if_stmt: ``ag__.for_stmt``/``while_stmt``/``if_stmt`` of the
            operator module converted code calls (``api._TRANSPILER.get_extra_locals()["ag__"]``).
        py_for_stmt, py_while_stmt, py_if_stmt: ``control_flow._py_for_stmt``/``_py_while_stmt``/
            ``_py_if_stmt``, the paths a statement takes when it runs as Python at trace time.
    """

    for_stmt: Any
    while_stmt: Any
    if_stmt: Any
    py_for_stmt: Any
    py_while_stmt: Any
    py_if_stmt: Any


def operator_slots() -> OperatorSlots:
    """The callables AutoGraph's control-flow operator slots hold now (the ones `counting_operators` wraps).

    Returns:
        An `OperatorSlots`; compare two by identity (``is``) or equality to tell whether a
        slot was patched and whether it was put back.

    Raises:
        ImportError, AttributeError, KeyError: TF's AutoGraph layout changed.
    """
    from tensorflow.python.autograph.impl import api
    from tensorflow.python.autograph.operators import control_flow

    ag = api._TRANSPILER.get_extra_locals()["ag__"]
    return OperatorSlots(ag.for_stmt, ag.while_stmt, ag.if_stmt, control_flow._py_for_stmt,
                         control_flow._py_while_stmt, control_flow._py_if_stmt)


def allowlist_cache() -> Any:
    """The cache of functions AutoGraph fell back on, as it is now (``conversion._ALLOWLIST_CACHE``).

    Returns:
        TF's cache object (the one `fresh_allowlist` swaps for an empty one and puts back).

    Raises:
        ImportError, AttributeError: TF's AutoGraph layout changed.
    """
    from tensorflow.python.autograph.impl import conversion

    return conversion._ALLOWLIST_CACHE


@contextlib.contextmanager
def counting_operators(wrap_stmt: Callable[[Callable, int, str], Callable],
                       wrap_py: Callable[[Callable, str], Callable]) -> Iterator[bool]:
    """Wraps AutoGraph's control-flow operators for the duration, then restores them.

    Args:
        wrap_stmt: ``(operator, body argument index, "for"|"while"|"if") -> wrapper`` for
            ``ag__.for_stmt``/``while_stmt``/``if_stmt``, the calls converted code makes.
        wrap_py: ``(python path, kind) -> wrapper`` for ``control_flow._py_for_stmt``/
            ``_py_while_stmt``/``_py_if_stmt``, the paths taken when the statement runs
            as Python at trace time.

    Yields:
        True when the operators were wrapped; False when TF's layout changed (nothing
        patched: callers fall back to reading op tracebacks).
    """
    try:
        from tensorflow.python.autograph.impl import api
        from tensorflow.python.autograph.operators import control_flow

        ag = api._TRANSPILER.get_extra_locals()["ag__"]
        patches = [(ag, f"{kind}_stmt", wrap_stmt(getattr(ag, f"{kind}_stmt"), _BODY_INDEX[kind], kind))
                   for kind in ("for", "while", "if")]
        patches += [(control_flow, f"_py_{kind}_stmt", wrap_py(getattr(control_flow, f"_py_{kind}_stmt"), kind))
                    for kind in ("for", "while", "if")]
    except (ImportError, AttributeError, KeyError):
        yield False
        return
    olds = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
    try:
        for obj, attr, new in patches:
            setattr(obj, attr, new)
        yield True
    finally:
        for obj, attr, old in olds:
            setattr(obj, attr, old)


@contextlib.contextmanager
def fresh_allowlist() -> Iterator[None]:
    """Makes AutoGraph forget which functions it already fell back on, for the duration.

    After a failed conversion AutoGraph caches the function as "allowlisted"
    (``conversion.cache_allowlisted``) and later calls skip conversion silently:
    no warning again, and no error even in strict mode. The old cache is put back
    after, also when the body raises.
    """
    try:
        from tensorflow.python.autograph.impl import conversion
    except ImportError:  # layout changed; fall back to TF's own caching
        yield
        return
    old = getattr(conversion, "_ALLOWLIST_CACHE", None)
    if old is None:
        yield
        return
    conversion._ALLOWLIST_CACHE = type(old)()
    try:
        yield
    finally:
        conversion._ALLOWLIST_CACHE = old


@contextlib.contextmanager
def full_tracebacks() -> Iterator[None]:
    """Keeps TF's internal frames in tracebacks for the duration (public
    ``tf.debugging.disable_traceback_filtering``); restores the user's setting after."""
    import tensorflow as tf

    was = tf.debugging.is_traceback_filtering_enabled()
    if was:
        tf.debugging.disable_traceback_filtering()
    try:
        yield
    finally:
        if was:
            tf.debugging.enable_traceback_filtering()


def branch_graphs(op: Any) -> list:
    """The branch/body FuncGraphs ``cond_v2``/``while_v2`` attached to an If/While op (else [])."""
    return [g for g in (getattr(op, a, None) for a in _SUBGRAPH_ATTRS) if g is not None]


def library_function_graph(graph: Any, name: str) -> Any:
    """The FuncGraph of function ``name`` in ``graph``'s function library, or None."""
    try:
        fn = graph._get_function(name)  # pylint: disable=protected-access
    except (ValueError, TypeError, AttributeError):
        return None
    return getattr(fn, "graph", None)


def clone_function(fn: Any) -> Any:
    """A fresh `tf.function` with ``fn``'s options (input_signature, autograph,
    jit_compile, reduce_retracing…) and an empty trace cache (``Function._clone``),
    or None when ``fn`` is not a `tf.function`."""
    clone = getattr(fn, "_clone", None)
    if clone is None or not hasattr(fn, "python_function"):
        return None
    return clone(None)


def autograph_enabled(fn: Any) -> bool:
    """False for a `tf.function` made with ``autograph=False``; True otherwise."""
    return bool(getattr(fn, "_autograph", True))


def cached_traces(fn: Any) -> list[tuple[Any, Any]]:
    """``[(cache key, ConcreteFunction), …]`` of a `tf.function`'s trace cache, oldest
    first (one entry per successful trace); [] when ``fn`` has no such cache."""
    try:
        return list(fn._function_cache._primary.items())
    except (AttributeError, TypeError):
        return []
