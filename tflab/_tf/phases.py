"""The TF entry points `benchmarks/bench_tour.py` times, wrapped and restored here.

The tour's phase timers (``benchmarks/_tour_phases.py``) split each section's
seconds into tracing, AutoGraph conversion, gradients, XLA compiles and the
first run of each ConcreteFunction. Those are TF internals, so the wrapping
happens here, in the one door to them; the benchmark passes in its own timer.

This module imports nothing of tflab: the benchmark loads it by file path, so
that it also times an old checkout of tflab that has no such module.

Entry points (TF 2.21):

* ``tracing``: ``tracing_compilation._create_concrete_function``
  (``tensorflow/python/eager/polymorphic_function/tracing_compilation.py``):
  TF building a new FuncGraph;
* ``autograph``: ``autograph.impl.api._convert_actual``: AutoGraph's source
  transformation, not the converted code's run;
* ``gradients``: ``GradientTape.gradient``;
* ``xla_compile``: ``Context.get_compiler_ir`` (HLO fetched: XLA compiles),
  and the first call of each ``tf.function(jit_compile=True)``
  (``polymorphic_function.Function.__call__``, its ``_jit_compile`` set);
* ``graph_first_run``: the first call of each ConcreteFunction
  (``ConcreteFunction._call_flat``): instantiation, Grappler, one run.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable, Iterator

__all__ = ["PRIVATE_NAMES", "ENTRY_POINTS", "timed_entry_points"]

_TRACING = "tensorflow.python.eager.polymorphic_function.tracing_compilation"
_AUTOGRAPH = "tensorflow.python.autograph.impl.api"
_BACKPROP = "tensorflow.python.eager.backprop"
_CONTEXT = "tensorflow.python.eager.context"
_FUNCTION = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
_CONCRETE = "tensorflow.python.eager.polymorphic_function.concrete_function"

PRIVATE_NAMES = (
    (_TRACING, "_create_concrete_function"),
    (_AUTOGRAPH, "_convert_actual"),
    (_BACKPROP, "GradientTape.gradient"),
    (_CONTEXT, "Context.get_compiler_ir"),
    (_FUNCTION, "Function.__call__"),
    (_CONCRETE, "ConcreteFunction._call_flat"),
)


def _is_jit(function: Any) -> bool:
    return bool(getattr(function, "_jit_compile", False))


def _always(_: Any) -> bool:
    return True


# (module, owner attribute path or "", attribute, phase, first call only: a predicate on ``self``, or None)
ENTRY_POINTS = (
    (_TRACING, "", "_create_concrete_function", "tracing", None),
    (_AUTOGRAPH, "", "_convert_actual", "autograph", None),
    (_BACKPROP, "GradientTape", "gradient", "gradients", None),
    (_CONTEXT, "Context", "get_compiler_ir", "xla_compile", None),
    (_FUNCTION, "Function", "__call__", "xla_compile", _is_jit),
    (_CONCRETE, "ConcreteFunction", "_call_flat", "graph_first_run", _always),
)


@contextlib.contextmanager
def timed_entry_points(timed: Callable[[str, Callable], Callable],
                       first_call: Callable[[Callable, Callable, Callable[[Any], bool]], Callable] | None = None,
                       ) -> Iterator[list[str]]:
    """Wraps each of `ENTRY_POINTS` with ``timed(phase, fn)`` while the block runs; restores them after.

    Args:
        timed: returns the wrapper of ``fn`` that books its seconds under ``phase``.
            For a first-call entry point it wraps the first call of each object
            (``self``) the predicate accepts; later calls go to ``fn`` unwrapped.
        first_call: ``first_call(fn, timed_fn, accept)`` builds that first-call
            wrapper (default `_first_call`); the benchmark passes its own, compiled
            under a ``<…>`` file name so `tflab.diagnosis` never names its frame.

    Yields:
        The ``module.attribute`` names wrapped (an entry point this TF lacks is skipped).
    """
    done: list[tuple[Any, str, Any]] = []
    names = []
    try:
        for module, owner_path, attr, phase, first_only in ENTRY_POINTS:
            owner: Any = importlib.import_module(module)
            try:
                for part in owner_path.split(".") if owner_path else ():
                    owner = getattr(owner, part)
                original = getattr(owner, attr)
            except AttributeError:
                continue
            wrapper = timed(phase, original) if first_only is None else (first_call or _first_call)(
                original, timed(phase, original), first_only)
            setattr(owner, attr, wrapper)
            done.append((owner, attr, original))
            names.append(f"{module}.{owner_path + '.' if owner_path else ''}{attr}")
        yield names
    finally:
        for owner, attr, original in reversed(done):
            setattr(owner, attr, original)


def _first_call(fn: Callable, timed_fn: Callable, accept: Callable[[Any], bool]) -> Callable:
    """``fn`` whose first call on each accepted ``self`` goes through ``timed_fn``."""
    import functools

    seen: set[int] = set()

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if id(self) not in seen and accept(self):
            seen.add(id(self))
            return timed_fn(self, *args, **kwargs)
        return fn(self, *args, **kwargs)

    return wrapper
