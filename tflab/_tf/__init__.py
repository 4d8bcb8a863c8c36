"""The one door to TensorFlow's internals.

Everything tflab needs from TF that is not public API (``tensorflow.python.*``,
``_pywrap_*`` modules, private attributes such as a tf.function's cache) is
reached through a module of this package, one per concern:

* ``_tf.function``: tf.function, FunctionType, the trace-time hooks;
* ``_tf.autograph``: AutoGraph's transpiler and control-flow operators;
* ``_tf.saved_model``: signature selection as ``tf.saved_model.save`` does it, the
  ConcreteFunctions a tf.function holds, the SavedModel protobuf;
* ``_tf.distribute``: Strategy internals (replica context, ``StrategyBase.run``);
* ``_tf.runtime``: build facts (oneDNN on or off), eager context, op callbacks;
* ``_tf.phases``: the entry points ``benchmarks/bench_tour.py`` times (tracing,
  AutoGraph, gradients, XLA compiles, first runs), wrapped and restored.

Each module lists the private names it uses in ``PRIVATE_NAMES`` as
``(module path, attribute path)`` pairs; ``tests/house/test_tf_internals.py`` imports
each and fails naming the one a TF upgrade removed. A patch of TF state is a
context manager that restores what it changed, also when the body raises.
Where a public equivalent exists it is used instead (``tf.__internal__.decorator``
for ``tf_decorator``, ``f.function_type`` for ``_function_type``,
``tf.debugging.disable_traceback_filtering`` for ``traceback_utils``).
"""
