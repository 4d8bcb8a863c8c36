"""The tour benchmark's phase timers reach TF only through `tflab._tf.phases`.

`benchmarks/_tour_phases.py` wraps TF's tracing, AutoGraph, gradient, XLA and
first-run entry points to split the tour's seconds into phases. The wrapping
lives in the adapter; these tests prove each timer books what it names, that
leaving the block puts TF's own functions back, and that the benchmark file
itself no longer imports a TF internal.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_each_entry_point_books_its_phase_and_is_restored():
    import tensorflow as tf

    from tflab._tf import phases

    booked: list[str] = []

    def timed(phase, fn):
        def wrapper(*args, **kwargs):
            booked.append(phase)
            return fn(*args, **kwargs)
        return wrapper

    originals = {}
    for module, owner, attr, _, _ in phases.ENTRY_POINTS:
        import importlib

        obj = importlib.import_module(module)
        for part in owner.split(".") if owner else ():
            obj = getattr(obj, part)
        originals[(module, owner, attr)] = (obj, getattr(obj, attr))

    with phases.timed_entry_points(timed) as names:
        assert len(names) == len(phases.ENTRY_POINTS)

        @tf.function
        def f(x):
            return x * 2.0

        cf = f.get_concrete_function(tf.constant(1.0))
        cf(tf.constant(1.0))
        cf(tf.constant(2.0))  # the same ConcreteFunction: its first run only
        f(tf.constant(3.0))  # no new trace
        assert booked.count("tracing") == 1
        assert booked.count("graph_first_run") == 1
        v = tf.Variable(1.0)
        with tf.GradientTape() as tape:
            y = v * v
        tape.gradient(y, v)
        assert "gradients" in booked
        g = tf.function(lambda x: x + 1.0, jit_compile=True)
        g(tf.constant(1.0))
        g(tf.constant(1.0))
        assert booked.count("xla_compile") == 1  # the first call only
    # Every TF function is its own again: nothing more is booked.
    for (module, owner, attr), (obj, fn) in originals.items():
        assert getattr(obj, attr) is fn, (module, owner, attr)
    n = len(booked)
    tf.function(lambda x: x - 1.0)(tf.constant(1.0))
    assert len(booked) == n


def test_the_benchmark_imports_no_tf_internal():
    """The planted check: the old file's ``from tensorflow.python…`` imports would be found here."""
    # tests/house/test_tf_internals.py's list (that test scans these files too, with the rest of tests/).
    INTERNAL_MODULES = ("tensorflow.python", "tensorflow.core", "tensorflow.lite.python",
                        "tensorflow.compiler", "tensorflow.tsl", "tensorflow.dtensor")

    def internal_imports(source: str) -> list[str]:
        found = []
        for node in ast.walk(ast.parse(source)):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [m for m in mods if m.startswith(INTERNAL_MODULES)]
        return found

    assert internal_imports("from tensorflow.python.eager import context") == ["tensorflow.python.eager"]
    for rel in ("benchmarks/_tour_phases.py", "benchmarks/bench_tour.py", "benchmarks/_phases_site/sitecustomize.py"):
        assert internal_imports((ROOT / rel).read_text()) == [], rel
