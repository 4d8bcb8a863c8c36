"""`tflab tour`: every lab step on one real model, end to end.

The default model is Keras ``MobileNetV3Small(weights=None,
input_shape=(96, 96, 3), classes=10)``: random weights, nothing downloaded.
Each step's section lives in ``tflab/_tour/<step>.py``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from tflab._progress import Progress

# (module under tflab._tour, title). Missing modules are skipped.
SECTIONS = [
    ("s01_trace", "Step 1 · trace_and_inspect: the inference FuncGraph"),
    ("s02_retrace", "Step 2 · RetraceProbe: why the training step retraced"),
    ("s03_demo", "Step 3 · demonstrate_retracing: measured triggers"),
    ("s04_stabilize", "Step 4 · stabilize: one trace for every batch size"),
    ("s05_autograph", "Step 5 · autograph_diff: Python control flow → graph"),
    ("s06_modes", "Step 6 · compare_modes: eager vs graph vs XLA"),
    ("s07_export", "Steps 7–8 · SavedModel and TFLite round trips"),
    ("s09_custom_op", "Custom op · WarpSoftmax"),
]

IMAGE_SHAPE = (96, 96, 3)
NUM_CLASSES = 10


class _DropRetracingWarning(logging.Filter):
    """Drops TF's "N out of the last M calls … triggered tf.function retracing" warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


def build_default_model(seed: int = 0):
    """Keras 3 ``MobileNetV3Small`` with random weights, 96×96×3 → 10 classes.

    Args:
        seed: seeds Keras' weight initializers, so two tours build the same weights.

    Returns:
        An uncompiled `keras.Model` taking float32 ``(batch, 96, 96, 3)`` in [0, 255]
        and returning ``(batch, 10)`` softmax probabilities.
    """
    import keras

    keras.utils.set_random_seed(seed)
    return keras.applications.MobileNetV3Small(
        weights=None, input_shape=IMAGE_SHAPE, classes=NUM_CLASSES)


def model_input_spec(model) -> Any:
    """The model's input as a `tf.TensorSpec` with batch dim None.

    Works for Keras models (``model.inputs``) and `keras.layers.TFSMLayer`
    (the SavedModel signature's input). Multi-input models return a list.
    """
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if inputs:
        specs = [tf.TensorSpec([None] + list(t.shape[1:]), t.dtype, name=getattr(t, "name", None))
                 for t in inputs]
        return specs[0] if len(specs) == 1 else specs
    sig = getattr(model, "_endpoint_signature", None) or getattr(model, "call_endpoint_fn", None)
    if sig is not None and hasattr(sig, "structured_input_signature"):
        _, kwargs = sig.structured_input_signature
        specs = [tf.TensorSpec([None] + s.shape.as_list()[1:], s.dtype, name=n) for n, s in kwargs.items()]
        return specs[0] if len(specs) == 1 else specs
    raise ValueError("cannot tell the model's input shape")


def example_batch(spec, batch: int, seed: int = 0):
    """A seeded random batch for ``spec`` (floats uniform in [0, 255], like images)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    shape = [batch] + spec.shape.as_list()[1:]
    if spec.dtype.is_floating:
        return tf.constant(rng.uniform(0, 255, shape).astype(spec.dtype.as_numpy_dtype))
    return tf.constant(rng.integers(0, 10, shape), dtype=spec.dtype)


def tour_dataset(spec, num_classes: int, n: int = 10, batch: int = 4, seed: int = 0):
    """``n`` seeded (image, label) pairs batched by ``batch``: sizes 4, 4, 2 by default.

    The smaller last batch is the classic retrace trigger studied in steps 2 and 4.
    """
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = example_batch(spec, n, seed)
    y = rng.integers(0, max(num_classes, 1), n)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def make_train_step(model, optimizer=None):
    """A real training step for ``model``: forward, loss, GradientTape, optimizer update.

    The loss is sparse categorical cross-entropy on the model's probabilities
    when its output is ``(batch, classes)`` and the default model's softmax
    head; for other models, the mean squared output (any differentiable scalar
    exercises the same tape and optimizer machinery).

    Args:
        model: a Keras model.
        optimizer: default ``keras.optimizers.Adam()``, whose slot variables are
            created on the first call: inside a tf.function that makes TF trace
            the first call twice. A reloaded SavedModel (`keras.layers.TFSMLayer`)
            is updated by plain SGD instead.

    Returns:
        The plain Python function ``train_step(x, y) -> loss`` (float32 scalar),
        not yet wrapped in `tf.function`.
    """
    import keras
    import tensorflow as tf

    optimizer = optimizer or keras.optimizers.Adam()
    # A reloaded SavedModel (TFSMLayer) holds tf.Variables named "…:0", which
    # Keras 3 optimizers reject as slot-variable scope names: update those by
    # plain SGD (no slot variables, so no variable-creation re-trace).
    plain_sgd = isinstance(model, keras.layers.TFSMLayer)
    xent = keras.losses.SparseCategoricalCrossentropy()
    classifier = len(getattr(model, "outputs", []) or []) == 1 and len(model.outputs[0].shape) == 2

    def train_step(x, y):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            if classifier:
                loss = xent(y, out)
            else:  # a SavedModel's TFSMLayer returns a dict of outputs
                loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32)))
                                 for t in tf.nest.flatten(out)])
        variables = model.trainable_variables
        if variables:
            grads = tape.gradient(loss, variables)
            if plain_sgd:
                for v, g in zip(variables, grads):
                    if g is not None:
                        v.assign_sub(1e-3 * g)
            else:
                optimizer.apply_gradients(zip(grads, variables))
        return loss

    return train_step


@dataclasses.dataclass
class TourContext:
    """What each tour section gets.

    Attributes:
        model: the Keras model under study (default: `build_default_model()`).
        model_source: "default" or the user's ``--model`` path.
        out_dir: where sections write files (``saved_models/tour``).
        report: JSON report; each section stores its numbers under its own key.
        progress_line: the tour's `Progress` (one step per section); call
            ``ctx.progress(msg)`` for a line within a section.
        quiet: True under ``--json``: sections print nothing to stdout.
    """

    model: Any
    model_source: str
    out_dir: Path
    report: dict
    progress_line: Progress
    quiet: bool = False
    shared: dict = dataclasses.field(default_factory=dict)

    def progress(self, message: str) -> None:
        """A progress line on stderr within the current section."""
        self.progress_line.note(message)

    def section(self, title: str) -> None:
        if not self.quiet:
            print(f"\n== {title}")

    def line(self, text: str = "") -> None:
        if not self.quiet:
            print(f"   {text}" if text else "")


def load_user_model(path: str):
    """Loads a ``.keras`` file or a SavedModel folder for ``tflab tour --model``.

    Raises:
        UsageError: the path does not exist or is not a model.
    """
    from tflab.errors import UsageError

    if not os.path.exists(path):
        raise UsageError(f"--model {path!r} does not exist; give a .keras file or a SavedModel folder")
    import keras

    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "saved_model.pb")):
            raise UsageError(f"--model {path!r} is a folder without saved_model.pb, so not a SavedModel")
        try:
            # trainable=True exposes the SavedModel's variables to the tour's training step.
            return keras.layers.TFSMLayer(path, call_endpoint="serving_default", trainable=True)
        except Exception as e:
            raise UsageError(f"--model {path!r}: could not load the SavedModel ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from e
    if not path.endswith(".keras"):
        raise UsageError(f"--model {path!r} is not a .keras file or a SavedModel folder")
    try:
        return keras.models.load_model(path)
    except Exception as e:
        raise UsageError(f"--model {path!r}: not a loadable .keras file ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from e


def run_tour(model_path: str | None = None, out_dir: str = "saved_models/tour",
             quiet: bool = False, only: list[str] | None = None) -> dict:
    """Runs every available tour section and writes ``report.json`` under ``out_dir``.

    Args:
        model_path: a ``.keras`` file or SavedModel folder; None for the default model.
        out_dir: output folder (created; files inside are replaced).
        quiet: print nothing to stdout (the progress line still goes to stderr).
        only: section module names to run (default: all).

    Returns:
        The JSON report as a dict (also written to ``out_dir/report.json``).

    Raises:
        UsageError: ``model_path`` is missing or not a model.
    """
    from tflab._jsonutil import to_jsonable

    sections = [(m, t) for m, t in SECTIONS if only is None or m in only]
    available = []
    for modname, title in sections:
        try:
            available.append((importlib.import_module(f"tflab._tour.{modname}"), title))
        except ModuleNotFoundError as e:
            if e.name != f"tflab._tour.{modname}":
                raise
    # A bad --model or --out path fails before any progress line is printed.
    from tflab.errors import UsageError

    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError(f"--out {out_dir}: exists and is not a folder; give a folder path")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(out_dir) and os.path.exists(parent) and not os.access(parent, os.W_OK):
        raise UsageError(f"--out {out_dir}: cannot create it in {parent} (not writable)")
    model = None if model_path is None else load_user_model(model_path)
    progress = Progress("tour", total=len(available) + 1)
    progress("building MobileNetV3Small" if model_path is None else f"loaded {model_path}")
    if model is None:
        model = build_default_model()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"model": model_path or "MobileNetV3Small(weights=None, input_shape=(96, 96, 3), classes=10)"}
    from tflab.runtime import runtime_config

    config = runtime_config()  # what every number below was measured on (issue 8)
    report["config"] = config.to_dict()
    if not quiet:
        print(f"configuration: {config.one_line()}")
    ctx = TourContext(model=model, model_source=model_path or "default", out_dir=out,
                      report=report, progress_line=progress, quiet=quiet)
    t0 = time.perf_counter()
    timings = {}
    tf_logger = logging.getLogger("tensorflow")
    quiet_retracing = _DropRetracingWarning()
    tf_logger.addFilter(quiet_retracing)  # the tour retraces on purpose; the probe explains it
    try:
        for mod, title in available:
            progress(title)
            ctx.section(title)
            t = time.perf_counter()
            mod.run(ctx)
            timings[mod.__name__.rsplit(".", 1)[-1]] = round(time.perf_counter() - t, 2)
    finally:
        tf_logger.removeFilter(quiet_retracing)
    report["section_seconds"] = timings
    report["seconds"] = round(time.perf_counter() - t0, 2)
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(to_jsonable(report), indent=2))
    os.replace(tmp, out / "report.json")
    if not quiet:
        print(f"\nreport: {out / 'report.json'}  ({report['seconds']:.1f} s)")
    return report
