"""Which Keras layer built each FuncGraph op: recorded from the layer calls while the function is traced.

A name-scope guess cannot answer this: Keras 3 opens ``tf.name_scope`` with the
layer's name and TF uniquifies it within the graph, so layer ``dense`` of a
second model traces under ``sequential_1/dense_1/`` (measured on TF 2.21 and
Keras 3: the scope of one layer is the name of another). Instead, while the
lowered function is traced, `record_layer_calls` wraps ``Layer.__call__`` of
Keras (and of tf_keras when it is loaded): each call notes how many ops the
graph being traced had when it began and when it ended, and every op created
in between belongs to the innermost layer call that was running (a model's
call is the scope around its layers; its own ops, if any, are its own).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Iterator

__all__ = ["LayerCalls", "record_layer_calls"]


class LayerCalls:
    """Op name → the Keras layer whose call created it, for one traced graph.

    Attributes:
        by_graph: id(graph) → {op name: layer}.
    """

    def __init__(self) -> None:
        self.by_graph: dict[int, dict[str, object]] = {}
        self._stack: list[tuple[object, object, int]] = []
        self._thread = threading.get_ident()

    def names_for(self, graph) -> dict[str, str]:
        """FuncGraph op name → its layer's ``name`` for ``graph`` (ops no layer created are absent)."""
        return {op: getattr(layer, "name", "") for op, layer in self.by_graph.get(id(graph), {}).items()}

    def _enter(self, layer) -> None:
        import tensorflow as tf

        graph = tf.compat.v1.get_default_graph()
        self._stack.append((layer, graph, len(graph.get_operations())))

    def _exit(self) -> None:
        layer, graph, start = self._stack.pop()
        owned = self.by_graph.setdefault(id(graph), {})
        for op in graph.get_operations()[start:]:
            owned.setdefault(op.name, layer)  # an inner layer's call ended first: its ops are its own


def _layer_classes() -> list[type]:
    out = []
    for module, attr in (("keras", "layers"), ("tf_keras", "layers")):
        if module in sys.modules:
            with contextlib.suppress(Exception):
                out.append(getattr(getattr(sys.modules[module], attr), "Layer"))
    return list(dict.fromkeys(out))


@contextlib.contextmanager
def record_layer_calls() -> Iterator[LayerCalls]:
    """Records, for the duration, which layer call created each op of each graph traced in this thread.

    Only calls made in graph mode (while a tf.function is traced) in the thread
    that opened the block are recorded; ``Layer.__call__`` is restored on exit.

    Yields:
        A `LayerCalls`; read it after the trace with ``names_for(concrete.graph)``.
    """
    calls = LayerCalls()
    patched = []
    for cls in _layer_classes():
        original = cls.__dict__.get("__call__")
        if original is None:
            continue

        def wrapper(self, *args, __original=original, **kwargs):
            import tensorflow as tf

            if threading.get_ident() != calls._thread or tf.executing_eagerly():
                return __original(self, *args, **kwargs)
            calls._enter(self)
            try:
                return __original(self, *args, **kwargs)
            finally:
                calls._exit()

        wrapper.__wrapped__ = original
        cls.__call__ = wrapper
        patched.append((cls, original))
    try:
        yield calls
    finally:
        for cls, original in patched:
            cls.__call__ = original
