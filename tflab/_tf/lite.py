"""The door to the TFLite converter's and LiteRT interpreter's internals.

What tflab's LiteRT lab (`tflab.litert`) needs beyond the public API of
``tf.lite`` and ``ai_edge_litert.interpreter``:

* the flatbuffer schema's generated Python classes
  (``tensorflow/lite/python/schema_py_generated.py``, generated from
  ``tensorflow/compiler/mlir/lite/schema/schema.fbs``), to read ops, tensors,
  buffers and quantization parameters of a ``.tflite`` file;
* ``TFLiteSavedModelConverterV2`` (``tensorflow/lite/python/lite.py``), the
  converter ``from_saved_model`` builds, made directly for a SavedModel without
  a ``serving_default`` key or from keys read off a SavedModel already loaded
  (with the original model type ``from_saved_model`` records), and the signature
  keys it keeps (``_saved_model_exported_names``), the model type its conversion
  metadata records (``_metadata.environment.modelType``, `conversion_model_type`),
  and the SavedModel loads it makes in Python (``lite._load``, the
  ``tensorflow.python.saved_model.load.load`` it imports; counted by
  `counting_saved_model_loads`);
* ``convert_variables_to_constants_v2``, to fetch a SavedModel signature's
  intermediate tensors by name (`frozen_function`);
* the interpreter's op list (``Interpreter._get_ops_details``), which names a
  ``DELEGATE`` node when XNNPACK took over a subgraph, and a signature
  runner's subgraph index (``SignatureRunner._subgraph_index``); neither has a
  public getter in ai_edge_litert 2.x.

Each private name is listed in `PRIVATE_NAMES` (``tests/house/test_tf_internals.py``
checks that each exists in the pinned versions).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

PRIVATE_NAMES = (
    ("tensorflow.lite.python.schema_py_generated", "ModelT.InitFromPackedBuf"),
    ("tensorflow.lite.python.schema_py_generated", "BuiltinOperator"),
    ("tensorflow.lite.python.schema_py_generated", "TensorType"),
    ("tensorflow.lite.python.lite", "TFLiteSavedModelConverterV2"),
    ("tensorflow.lite.python.lite", "TFLiteConverterBase._set_original_model_type"),
    ("tensorflow.lite.python.lite", "_load"),  # the SavedModel loader the converters call
    ("tensorflow.lite.python.conversion_metadata_schema_py_generated", "ModelType"),
    ("ai_edge_litert.interpreter", "Interpreter._get_ops_details"),
    ("ai_edge_litert.interpreter", "SignatureRunner"),  # sets _subgraph_index in __init__
    ("tensorflow.python.framework.convert_to_constants", "convert_variables_to_constants_v2"),
)


def schema():
    """The flatbuffer schema module (``ModelT``, ``BuiltinOperator``, ``TensorType``, ...)."""
    from tensorflow.lite.python import schema_py_generated

    return schema_py_generated


def unpack_model(model: bytes):
    """The whole flatbuffer as the schema's object API (``ModelT``): subgraphs, tensors, buffers, ops.

    The object API walks every table of the file in Python (~0.04 s per call
    for the tour's MobileNetV3Small), and one export reads the same bytes from
    `tflab.litert.ops.read_ops`, `tflab.litert.conversion.analyze_flatbuffer`
    and `tflab.litert.flatbuffer_notes.read_graphs`, so the last
    `UNPACKED_MODELS` distinct models are kept, keyed by their bytes (equal
    content, equal key). Callers only read the returned object; it is shared.

    Args:
        model: TFLite flatbuffer bytes (``bytes``, ``bytearray`` or ``memoryview``).

    Returns:
        ``schema_py_generated.ModelT``
        (``tensorflow/lite/python/schema_py_generated.py``, ``ModelT.InitFromPackedBuf``).
    """
    return _unpack(bytes(model))


# Distinct flatbuffers kept by `unpack_model`: an export checks one variant at a
# time against the float one, so four hold a whole export (2 MB each for the tour).
UNPACKED_MODELS = 4


@functools.lru_cache(maxsize=UNPACKED_MODELS)
def _unpack(model: bytes):
    return schema().ModelT.InitFromPackedBuf(bytearray(model), 0)


def saved_model_converter(saved_model_dir: str, tags: set, keys: list[str]):
    """``TFLiteSavedModelConverterV2`` for ``keys`` of a SavedModel (what ``from_saved_model`` builds).

    Args:
        saved_model_dir: the SavedModel folder.
        tags: MetaGraph tags, e.g. ``{tf.saved_model.SERVING}``.
        keys: the signature keys to convert.

    Returns:
        The converter (it has the public ``TFLiteConverter`` options).
    """
    from tensorflow.lite.python import lite

    return lite.TFLiteSavedModelConverterV2(saved_model_dir, tags, keys)


def saved_model_converter_as_from_saved_model(saved_model_dir: str, tags: set, keys: list[str]):
    """`saved_model_converter`, also recording the original model type as ``from_saved_model`` does.

    ``TFLiteConverter.from_saved_model`` (``tensorflow/lite/python/lite.py``) sets the
    class-level original model type to ``TF_SAVED_MODEL`` just before it builds the
    converter, whose ``__init__`` takes it into the flatbuffer's conversion metadata
    (``environment.modelType``, then reset to ``NONE``). Built without that step, the
    ``.tflite`` differs from ``from_saved_model``'s in that one field.

    Args:
        saved_model_dir: the SavedModel folder.
        tags: MetaGraph tags, e.g. ``{tf.saved_model.SERVING}``.
        keys: the signature keys to convert.

    Returns:
        The converter, as ``from_saved_model(saved_model_dir)`` returns it for ``keys``.
    """
    from tensorflow.lite.python import conversion_metadata_schema_py_generated as metadata
    from tensorflow.lite.python import lite

    lite.TFLiteConverterBase._set_original_model_type(metadata.ModelType.TF_SAVED_MODEL)  # noqa: SLF001
    return lite.TFLiteSavedModelConverterV2(saved_model_dir, tags, keys)


def saved_model_converter_class() -> type:
    """The class ``TFLiteConverter.from_saved_model`` returns (``lite.TFLiteSavedModelConverterV2``)."""
    from tensorflow.lite.python import lite

    return lite.TFLiteSavedModelConverterV2


def conversion_model_type(converter: Any) -> str:
    """The original model type a converter writes into the ``.tflite``'s conversion metadata.

    Args:
        converter: a ``tf.lite.TFLiteConverter`` (any of its classes), not yet converted.

    Returns:
        The ``ModelType`` name (``tensorflow/lite/python/conversion_metadata_schema_py_generated.py``)
        of ``converter._metadata.environment.modelType``: ``"TF_SAVED_MODEL"``, ``"KERAS_MODEL"``,
        ``"TF_CONCRETE_FUNCTIONS"``, ``"NONE"``, ...; the number as text if the schema has no name for it.
    """
    from tensorflow.lite.python import conversion_metadata_schema_py_generated as metadata

    value = converter._metadata.environment.modelType  # noqa: SLF001
    names = {v: k for k, v in vars(metadata.ModelType).items() if not k.startswith("_")}
    return names.get(value, str(value))


@contextlib.contextmanager
def counting_saved_model_loads() -> Iterator[list[tuple]]:
    """Records each SavedModel load the TFLite converter makes in Python, for the duration.

    ``tensorflow/lite/python/lite.py`` loads SavedModels through the module-level name
    ``_load`` (``from_saved_model`` to read the signature keys, ``convert`` once more);
    that name is wrapped for the block and put back after, also when the block raises.

    Yields:
        A list that gets the positional arguments (``(saved_model_dir, tags)``) of each load.
    """
    from tensorflow.lite.python import lite

    real, calls = lite._load, []  # noqa: SLF001

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    lite._load = counted  # noqa: SLF001
    try:
        yield calls
    finally:
        lite._load = real  # noqa: SLF001


@contextlib.contextmanager
def reusing_saved_model_load(saved_model_dir: str, loaded: Any) -> Iterator[None]:
    """For the block, the converter's Python load of ``saved_model_dir`` returns ``loaded`` instead.

    ``TFLiteSavedModelConverterV2.convert`` (``tensorflow/lite/python/lite.py``) calls
    ``_load(saved_model_dir, tags)``, a whole ``tf.saved_model.load`` (~1.2 s for
    MobileNetV3Small), only to read the object's ``graph_debug_info`` (source locations for
    the converter's messages), then drops it. That is read from the folder, the same in every
    load of it: ``loaded``, the load tflab keeps (`tflab.saved_model.load_saved_model`),
    answers it, and the flatbuffer's bytes are the same for every recipe
    (``tests/litert/test_export_costs.py``). A load of any other folder goes to TF.

    Args:
        saved_model_dir: the SavedModel folder being converted.
        loaded: ``tf.saved_model.load`` of that folder, as it is now.
    """
    import os

    from tensorflow.lite.python import lite

    real, mine = lite._load, os.path.realpath(saved_model_dir)  # noqa: SLF001

    def reuse(path, *args, **kwargs):
        if isinstance(path, (str, os.PathLike)) and os.path.realpath(path) == mine:
            return loaded
        return real(path, *args, **kwargs)

    lite._load = reuse  # noqa: SLF001
    try:
        yield
    finally:
        lite._load = real  # noqa: SLF001


def from_saved_model_keys(loaded: Any) -> list[str] | None:
    """The signature keys ``TFLiteConverter.from_saved_model(dir)`` converts, or None where it would fail.

    TF 2.21's rule (tensorflow/lite/python/lite.py, ``TFLiteConverterV2.from_saved_model``
    without ``signature_keys``): every key of ``loaded.signatures``, except that an artifact
    of Keras' ``model.export`` (several keys, a root attribute ``serve`` and no
    ``_default_save_signature``) converts ``serving_default`` alone. None when that
    rule raises (no key; no ``serving_default`` for such an artifact): the caller
    then asks TF, which says why.

    Args:
        loaded: the SavedModel, loaded (`tflab.saved_model.load_saved_model`); not changed.

    Returns:
        The keys, in ``loaded.signatures`` order, or None.
    """
    keys = list(loaded.signatures.keys())
    if not keys:
        return None
    if len(keys) > 1 and hasattr(loaded, "serve") and not hasattr(loaded, "_default_save_signature"):
        keys = ["serving_default"]
    return keys if all(k in loaded.signatures for k in keys) else None


def converted_signature_keys(converter: Any) -> list[str] | None:
    """The signature keys a SavedModel converter converts, or None when it does not say."""
    return getattr(converter, "_saved_model_exported_names", None) or None


def keep_tensor_lists(converter: Any) -> None:
    """Keeps tensor-list ops as Flex ops instead of lowering them (``_experimental_lower_tensor_list_ops``,
    an instance attribute TFLiteConverterBase sets in ``__init__``): the converter's own advice when
    lowering them fails, with ``SELECT_TF_OPS``."""
    converter._experimental_lower_tensor_list_ops = False


def ops_details(interpreter: Any) -> list[dict]:
    """The interpreter's ops of its primary subgraph (``op_name``, ``index``, inputs, outputs)."""
    return list(interpreter._get_ops_details())  # noqa: SLF001


def signature_subgraph(runner: Any) -> int:
    """The index of the subgraph a signature runner runs."""
    return int(runner._subgraph_index)  # noqa: SLF001


def keras_model_called(model: Any) -> bool:
    """Whether a subclassed Keras 3 model has been called once (``Layer._called``; no public flag)."""
    return bool(getattr(model, "_called", False))


def frozen_function(concrete_function: Any):
    """The function with its variables folded into constants and its calls inlined.

    ``convert_variables_to_constants_v2`` (``tensorflow/python/framework/
    convert_to_constants.py``; no public equivalent in TF 2.21): every node of the
    signature's call tree lands in one graph, named ``StatefulPartitionedCall/<scope>/<op>``,
    so intermediate tensors can be fetched by the names the TFLite converter kept.
    """
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    return convert_variables_to_constants_v2(concrete_function)


def frozen_graph(concrete_function: Any):
    """The graph `frozen_function` wraps, imported as it is: ``(graph, input names, output names)``.

    The same ``convert_variables_to_constants_v2`` steps up to the frozen GraphDef
    (``_FunctionConverterDataInEager`` and ``_replace_variables_by_constants`` in
    ``tensorflow/python/framework/convert_to_constants.py``), then one C++ ``import_graph_def``
    (``name=""``: every node keeps its name) into a plain ``tf.Graph``, for a v1 ``Session`` to run.
    `frozen_function` wraps that GraphDef again and prunes it to its inputs and outputs, which
    copies every op in Python (``lift_to_graph``): most of a minute on a ResNet50. The inputs are
    the signature's placeholders (``"x:0"``; the variables became constants), the outputs its flat
    outputs (``"Identity:0"``), in the order of ``concrete_function.inputs``/``.outputs``.
    """
    import tensorflow as tf
    from tensorflow.python.framework import convert_to_constants as c2c

    data = c2c._FunctionConverterDataInEager(func=concrete_function, lower_control_flow=True,  # noqa: SLF001
                                             aggressive_inlining=False)
    graph_def, converted = c2c._replace_variables_by_constants(converter_data=data)  # noqa: SLF001
    captured = concrete_function.graph.internal_captures
    folded = {id(captured[i]) for i in converted}
    inputs = [t.name for t in concrete_function.inputs if id(t) not in folded]
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return graph, inputs, [t.name for t in concrete_function.outputs]
