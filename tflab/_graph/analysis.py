"""Graph and argument analysis for `tflab.modes` (and `tflab.precision`).

* arguments: the float tensor leaves of ``(args, kwargs)`` as gradient sources with
  their names, and a function that rebuilds the arguments from new leaves;
  TensorSpecs made into seeded tensors; outputs named by their `tf.nest` path;
* state: the variables a trace captures (``ConcreteFunction.variables``), saved
  once and put back (`VariableSnapshot`);
* random ops: which random op types (by type, from TF's op registry files) each
  output or gradient of a FuncGraph depends on (`random_dependencies`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tflab._user.target import parameter_names

__all__ = ["STATEFUL_RANDOM_OPS", "STATELESS_RANDOM_OPS", "RANDOM_OPS", "random_dependencies", "nothing_to_compare",
           "random_ops_by_tensor", "flatten_sources", "prepare_args", "output_names_of", "as_tensor",
           "to_numpy", "VariableSnapshot"]

# Random-number ops by type (tensorflow/core/ops/random_ops.cc, stateless_random_ops.cc,
# stateless_random_ops_v2.cc, stateful_random_ops.cc; tf2xla's XlaRngBitGenerator).
# Stateful ones draw from a per-kernel (or per-variable) stream: eager and graph
# kernels are seeded apart, so their numbers differ even between eager and graph.
# Stateless ones are a pure function of (seed, counter, algorithm) on one kernel:
# graph mode reproduces eager's numbers, but XLA lowers every random op with its
# own RNG code (tf2xla/kernels/random_ops.cc, stateless_random_ops*.cc), so its
# numbers differ. Keras Dropout (keras.random.dropout) draws its mask with
# StatelessRandomUniformV2 from a SeedGenerator variable; tf.nn.dropout with RandomUniform.
STATEFUL_RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "ParameterizedTruncatedNormal", "RandomGamma", "RandomPoisson", "RandomPoissonV2",
    "RandomShuffle", "RandomCrop", "Multinomial", "SampleDistortedBoundingBox",
    "SampleDistortedBoundingBoxV2", "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt",
    "StatefulStandardNormal", "StatefulStandardNormalV2", "StatefulTruncatedNormal",
    "StatefulRandomBinomial", "RandomIndexShuffle"})
STATELESS_RANDOM_OPS = frozenset({
    "StatelessRandomUniform", "StatelessRandomUniformInt", "StatelessRandomUniformFullInt",
    "StatelessRandomNormal", "StatelessTruncatedNormal", "StatelessRandomUniformV2",
    "StatelessRandomUniformIntV2", "StatelessRandomUniformFullIntV2", "StatelessRandomNormalV2",
    "StatelessTruncatedNormalV2", "StatelessMultinomial", "StatelessParameterizedTruncatedNormal",
    "StatelessRandomBinomial", "StatelessRandomPoisson", "StatelessRandomGammaV2",
    "StatelessRandomGammaV3", "StatelessShuffle", "StatelessSampleDistortedBoundingBox",
    "RngBitGenerator", "XlaRngBitGenerator"})
RANDOM_OPS = STATEFUL_RANDOM_OPS | STATELESS_RANDOM_OPS
# Ops whose output depends on their input's shape only, not its values: a
# gradient that reads the shape of a random tensor does not depend on its numbers.
_SHAPE_ONLY_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike",
                             "BroadcastGradientArgs"})



def _called_functions(attrs) -> list[str]:
    """Names of the functions a node's attrs call (``f`` of a call op, ``body``/``cond``
    of a While, ``then_branch``/``else_branch`` of an If, ``branches`` of a Case)."""
    names = []
    for attr in attrs.values():
        if attr.HasField("func"):
            names.append(attr.func.name)
        if attr.HasField("list"):
            names += [f.name for f in attr.list.func]
    return names


def random_dependencies(graph, tensors) -> list[tuple[str, ...]]:
    """For each tensor of a FuncGraph, the random op types its values depend on.

    Walks the data flow from the tensor back to the graph's inputs in the
    graph's creation order (a topological order: an op is made after its
    inputs). An op is random when its type is in `RANDOM_OPS` or a function
    it calls (a ``While`` body, an ``If`` branch, a ``PartitionedCall``) holds
    one. Shape-only ops (``Shape``, ``ZerosLike``, ``BroadcastGradientArgs`` …)
    do not carry the dependency: a gradient that reads the shape of a random
    tensor does not depend on its numbers.

    Args:
        graph: a `FuncGraph` (``ConcreteFunction.graph``).
        tensors: tensors of that graph (None entries allowed).

    Returns:
        One sorted tuple of op types per tensor (empty: no random op upstream).
    """
    gdef = graph.as_graph_def()
    library = {f.signature.name: f for f in gdef.library.function}
    inner: dict[str, frozenset] = {}

    def in_function(fname: str) -> frozenset:
        if fname in inner:
            return inner[fname]
        inner[fname] = frozenset()  # a function calling itself adds nothing new
        found: set[str] = set()
        fdef = library.get(fname)
        for node in (fdef.node_def if fdef is not None else ()):
            if node.op in RANDOM_OPS:
                found.add(node.op)
            for callee in _called_functions(node.attr) + ([node.op] if node.op in library else []):
                found |= in_function(callee)
        inner[fname] = frozenset(found)
        return inner[fname]

    deps: dict[str, frozenset] = {}
    empty: frozenset = frozenset()
    for op in graph.get_operations():
        own = {op.type} if op.type in RANDOM_OPS else set()
        # A call op names its function in an attr; a node may also use a
        # library function's name as its op type.
        for callee in _called_functions(op.node_def.attr) + ([op.type] if op.type in library else []):
            own |= in_function(callee)
        if op.type not in _SHAPE_ONLY_OPS:
            for t in op.inputs:
                own |= deps.get(t.op.name, empty)
        deps[op.name] = frozenset(own)
    return [tuple(sorted(deps.get(t.op.name, empty))) if t is not None else () for t in tensors]


def random_ops_by_tensor(concrete, output_names, grad_names) -> dict[str, tuple]:
    """Output/gradient name → random op types it depends on, read from a ConcreteFunction of
    the modes' forward+backward step (its ``structured_outputs`` are ``(outputs, gradients)``);
    {} when the outputs cannot be read."""
    import tensorflow as tf

    try:
        outs, grads = concrete.structured_outputs
    except Exception:  # the comparison stands without the labels
        return {}

    def components(value):  # an IndexedSlices gradient: its values and indices
        return [t for t in tf.nest.flatten(value, expand_composites=True) if isinstance(t, tf.Tensor)]

    names, tensors = [], []
    for name, value in list(zip(output_names, tf.nest.flatten(outs))) + list(zip(grad_names, grads)):
        for t in components(value) if value is not None else ():
            names.append(name)
            tensors.append(t)
    found: dict[str, set] = {}
    for name, ops in zip(names, random_dependencies(concrete.graph, tensors)):
        if ops:
            found.setdefault(name, set()).update(ops)
    return {n: tuple(sorted(ops)) for n, ops in found.items()}



def as_tensor(value):
    import tensorflow as tf

    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic)):
        return tf.convert_to_tensor(value)
    return value


def nothing_to_compare(outputs) -> str:
    """Why a run's outputs give two runs nothing to compare, or "".

    A structure with no tensor in it (``{'a': 1}``, ``None``) is the same Python value in every
    run, and outputs whose tensors hold 0 elements (an input with a 0 dim) give no value at
    all: a comparison of either would report agreement measured over nothing.
    """
    import tensorflow as tf

    flat = tf.nest.flatten(outputs)
    tensors = [t for t in flat if tf.is_tensor(t) or isinstance(t, tf.Variable)]
    if not tensors:
        kinds = ", ".join(sorted({type(v).__name__ for v in flat})) or "nothing"
        return (f"it returns no tensor ({kinds}): a Python value is the same in every run; return the "
                f"tensors it computes")
    if not sum(int(np.prod(t.shape)) for t in tensors if t.shape.is_fully_defined()) and \
            all(t.shape.is_fully_defined() for t in tensors):
        shapes = ", ".join(str(t.shape.as_list()) for t in tensors[:4])
        from tflab.errors import in_cli

        example = "--arg x=float32[2,3]" if in_cli() else "np.zeros((2, 3), np.float32)"
        return (f"its outputs hold 0 elements (shapes {shapes}{', ...' if len(tensors) > 4 else ''}); give "
                f"inputs whose dims are all >= 1, e.g. {example}")
    return ""


def touched_variables(python_fn: Callable, runner, sources: list) -> list:
    """Every variable a trace of the step captures (`ConcreteFunction.variables`: trainable
    and not), or [] when it cannot be traced (e.g. it creates variables).

    Args:
        python_fn: the user's function; a Keras layer or model gives its own ``variables``.
        runner: the `tf.function` a mode runs; its trace here is the one that mode then
            calls (kept in the tf.function's cache), so no trace is made only to look.
        sources: the arguments the mode is called with.
    """
    own = getattr(python_fn, "variables", None)
    if own is not None and hasattr(python_fn, "trainable_variables"):  # a Keras layer/model
        return list(own)
    try:
        return list(runner.get_concrete_function(sources).variables)
    except Exception:  # the mode's own run reports real errors; this is only a look
        return []


class VariableSnapshot:
    """Values of some variables, saved once and put back on `restore`."""

    def __init__(self, variables: list) -> None:
        self._saved: dict[int, tuple] = {}
        self.add_missing(variables)

    def add_missing(self, variables) -> None:
        import tensorflow as tf

        for v in variables:
            # A Keras 3 Variable wraps a tf.Variable (its ``value``); the tape
            # and the FuncGraph see the inner one: save each underlying variable once.
            inner = getattr(v, "value", None)
            v = inner if isinstance(inner, tf.Variable) else v
            if id(v) not in self._saved:
                self._saved[id(v)] = (v, tf.identity(v))

    def restore(self) -> None:
        for v, value in self._saved.values():
            v.assign(value)

    def names(self) -> tuple[str, ...]:
        return tuple(getattr(v, "path", None) or v.name for v, _ in self._saved.values())


def flatten_sources(fn: Callable, args: tuple, kwargs: dict):
    """Float tensor leaves of the arguments (gradient sources) with names, and a
    function that rebuilds (args, kwargs) from replacement leaves."""
    import tensorflow as tf

    names = parameter_names(fn)
    structure = (list(args), dict(kwargs))
    leaves = tf.nest.flatten(structure, expand_composites=False)
    # Leaf names follow the argument they came from.
    labels = []
    for i, a in enumerate(args):
        base = names[i] if i < len(names) else f"arg{i}"
        sub = tf.nest.flatten(a)
        labels += [base if len(sub) == 1 else f"{base}[{j}]" for j in range(len(sub))]
    for k in sorted(kwargs):  # tf.nest sorts dict keys
        sub = tf.nest.flatten(kwargs[k])
        labels += [k if len(sub) == 1 else f"{k}[{j}]" for j in range(len(sub))]
    idx = [i for i, v in enumerate(leaves)
           if isinstance(v, tf.Tensor) and v.dtype.is_floating]

    def rebuild(new: list) -> tuple[tuple, dict]:
        flat = list(leaves)
        for i, v in zip(idx, new):
            flat[i] = v
        a, k = tf.nest.pack_sequence_as(structure, flat)
        return tuple(a), k

    return [leaves[i] for i in idx], [f"arg:{labels[i]}" for i in idx], rebuild


def prepare_args(args: tuple, kwargs: dict, seed: int):
    import tensorflow as tf

    from tflab._user.target import materialize

    rng = np.random.default_rng(seed)  # one stream for all arguments: x and y differ

    def conv(v):
        if isinstance(v, tf.TensorSpec):
            return materialize(v, rng)
        if isinstance(v, np.ndarray):
            return tf.constant(v)
        return v

    return tf.nest.map_structure(conv, args), tf.nest.map_structure(conv, kwargs)


def to_numpy(x):
    return None if x is None else np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def output_names_of(out) -> list[str]:
    """``output`` for one tensor, else ``output[KEY]`` by `tf.nest` path (dict keys
    sorted as tf.nest flattens them, tuple/list indices)."""
    import tensorflow as tf

    from tflab._tf.runtime import joined_paths

    # public tf.nest has no path API; TF's own nest module has had it since 1.x
    paths = joined_paths(out) or [str(i) for i in range(len(tf.nest.flatten(out)))]
    if len(paths) == 1 and not isinstance(out, (dict, list, tuple)):
        return ["output"]
    return [f"output[{p}]" for p in paths]


