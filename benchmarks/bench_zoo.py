"""tflab against the plain TF work it wraps, on real architectures: export, check-tflite and lower ratios.

Models (random weights, seed 0, built from their classes, no download): MobileNetV2 (alpha 0.35),
ResNet50 and ConvNeXtTiny from ``keras.applications`` at 32×32×3 (BatchNormalization's moving
statistics set by one training-mode pass, as training would), and keras-hub's BertBackbone from a
tiny config (2 layers, hidden 64, sequence 16) when keras-hub is installed.

For each model, in one process and side by side:

* **export**: `tflab.export_model` (all four variants, every check) against the plain work it
  wraps: ``model.export`` + the same four ``tf.lite.TFLiteConverter`` conversions (tflab's
  recipes, `tflab.litert.conversion.make_converter`) + one LiteRT run of each flatbuffer on the
  same examples;
* **check-tflite**: `tflab.litert.check.check_tflite` on a plain float conversion (caches
  cleared: what ``tflab check-tflite`` does in a fresh process) against one conversion + one run,
  twice: on export's SavedModel (which carries the bound's gradients and export's float conversion,
  `tflab.litert.bound_store`: the usual export-then-check) and on a copy without them (``cold``: a
  SavedModel tflab never exported, every backward pass and the float reference made again);
* **lower**: ``lower_ratio(model)`` from ``benchmarks/bench_lower.py`` when it defines one.

The process runs TF's BFC CPU allocator, as tflab's CLI runs its verbs (`tflab.cli._allocator_env`),
unless ``TF_CPU_ALLOCATOR_USE_BFC`` is set: both sides of each ratio run under it.

The target is ≤ 2× for each. Absolute seconds depend on the machine and its load; the ratios
compare work done minutes apart in the same process.

Usage: ``python benchmarks/bench_zoo.py [--models mobilenetv2,resnet50,convnexttiny,bert]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "TF_CPU_ALLOCATOR_USE_BFC" not in os.environ:  # what `tflab VERB` runs with (before TF loads)
    os.environ.update({"TF_CPU_ALLOCATOR_USE_BFC": "true", "TFLAB_CPU_ALLOCATOR_SET": "1"})
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODELS = ("mobilenetv2", "resnet50", "convnexttiny", "bert")
APPLICATIONS = {"mobilenetv2": "MobileNetV2", "resnet50": "ResNet50", "convnexttiny": "ConvNeXtTiny"}
SHAPE = (32, 32, 3)


def build(name: str):
    """The model and its examples ``{input name: array}`` (None: tflab's seeded defaults)."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    if name == "bert":
        import keras_hub

        m = keras_hub.models.BertBackbone(vocabulary_size=1000, num_layers=2, num_heads=2, hidden_dim=64,
                                          intermediate_dim=128, max_sequence_length=32)
        rng = np.random.default_rng(0)
        ex = {"token_ids": rng.integers(0, 1000, (4, 16), dtype=np.int32),
              "segment_ids": rng.integers(0, 2, (4, 16), dtype=np.int32),
              "padding_mask": np.ones((4, 16), np.int32)}
        return m, ex
    cls = APPLICATIONS[name]
    kw = {"alpha": 0.35} if name == "mobilenetv2" else {}
    m = getattr(keras.applications, cls)(weights=None, input_shape=SHAPE, **kw)
    bns = [l for l in m.layers if isinstance(l, keras.layers.BatchNormalization)]
    for l in bns:
        l.momentum = 0.0
    if bns:
        m(np.random.default_rng(123).standard_normal((8, *SHAPE)).astype("float32"), training=True)
    return m, None


def _run_once(model: bytes, batches) -> None:
    from ai_edge_litert.interpreter import Interpreter

    from tflab.litert.per_op import quantize_feed

    interp = Interpreter(model_content=model)
    for key in interp.get_signature_list():
        runner = interp.get_signature_runner(key)
        details = runner.get_input_details()
        for feed in batches.feeds(key) if key in batches.signatures else ():
            runner(**quantize_feed({k: v for k, v in feed.items() if k in details}, details))


def plain_export(model, batches, workdir: str) -> float:
    """Seconds for model.export + the four conversions + one LiteRT run each."""
    from tflab.litert.conversion import QUANTIZATIONS, make_converter

    t0 = time.perf_counter()
    sm = os.path.join(workdir, "plain_sm")
    model.export(sm, verbose=False)
    for q in QUANTIZATIONS:
        _run_once(make_converter(sm, q, batches if q == "int8" else None).convert(), batches)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma list (default: %(default)s)")
    args = parser.parse_args()

    from tflab._io.progress import Progress
    from tflab.export import export_model
    from tflab.litert import bounds
    from tflab.litert import check as check_mod
    from tflab.litert.conversion import make_converter
    from tflab.runtime import runtime_config

    print(f"configuration: {runtime_config().one_line()}")
    try:
        from bench_lower import lower_ratio  # another benchmark's measure, when it defines one
    except (ImportError, AttributeError):
        lower_ratio = None
    names = [n for n in args.models.split(",") if n]
    progress = Progress("bench_zoo", total=len(names))
    rows = []
    for name in names:
        if name == "bert":
            try:
                import keras_hub  # noqa: F401
            except ImportError:
                print("bert: skipped (keras-hub is not installed: pip install keras-hub)")
                continue
        progress(f"{name}: building")
        model, ex = build(name)
        work = tempfile.mkdtemp(prefix=f"bench_zoo_{name}_")
        try:
            progress.note(f"{name}: tflab export (four variants, every check)")
            t0 = time.perf_counter()
            report = export_model(model, os.path.join(work, "export"), examples=ex,
                                  progress=lambda m, n=name: progress.note(f"{n}: export: {m}"))
            t_export = time.perf_counter() - t0
            batches = report.saved_model.example_batches
            progress.note(f"{name}: plain model.export + 4 conversions + one LiteRT run each")
            t_plain = plain_export(model, batches, work)
            sm = os.path.join(work, "export", "saved_model")
            progress.note(f"{name}: plain float conversion + one run")
            t0 = time.perf_counter()
            flt = make_converter(sm, "none").convert()
            _run_once(flt, batches)
            t_conv = time.perf_counter() - t0
            bounds._SENSITIVITY_CACHE.clear()  # what a fresh `tflab check-tflite` process starts with
            check_mod._FLOAT_MODELS.clear()
            progress.note(f"{name}: tflab check-tflite on that flatbuffer")
            t0 = time.perf_counter()
            check_mod.check_tflite(flt, sm, batches)
            t_check = time.perf_counter() - t0
            cold = os.path.join(work, "cold", "saved_model")  # the same SavedModel without what export stored
            shutil.copytree(sm, cold, ignore=shutil.ignore_patterns("assets.extra"))
            bounds._SENSITIVITY_CACHE.clear()
            check_mod._FLOAT_MODELS.clear()
            progress.note(f"{name}: tflab check-tflite on a copy of the SavedModel without export's store")
            t0 = time.perf_counter()
            check_mod.check_tflite(flt, cold, batches)
            t_cold = time.perf_counter() - t0
            lower = None
            if lower_ratio is not None and name in APPLICATIONS:
                progress.note(f"{name}: lower")
                lower = lower_ratio(APPLICATIONS[name])  # takes the class name: it builds the model in its own processes
            statuses = ",".join(f"{q}:{v.status}" for q, v in report.variants.items())
            rows.append((name, t_export, t_plain, t_check, t_cold, t_conv, lower, statuses))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'model':<14}{'export s':>10}{'plain s':>9}{'ratio':>7}{'check s':>9}{'conv+run s':>11}{'ratio':>7}"
          f"{'cold s':>8}{'ratio':>7}{'lower':>12}  variants")
    for name, te, tp, tc, tcold, tv, lower, statuses in rows:
        # lower: tflab.lower() / one plain compile, CPU seconds, as a process's first XLA compile and
        # after another compile of the same process (`bench_lower.lower_ratio`'s api/warm CPU ratios)
        low = "-" if lower is None else f"{lower['api_cpu_ratio']:.2f}/{lower['warm_cpu_ratio']:.2f}"
        print(f"{name:<14}{te:>10.1f}{tp:>9.1f}{te / tp:>7.2f}{tc:>9.1f}{tv:>11.1f}{tc / tv:>7.2f}"
              f"{tcold:>8.1f}{tcold / tv:>7.2f}{low:>12}  {statuses}")
    if lower_ratio is None:
        print("lower: no lower_ratio(model) in benchmarks/bench_lower.py yet; its column is empty")
    print("check: on export's SavedModel (its stored gradients and float conversion); cold: on a copy without them")
    print("lower: first/after another compile, CPU seconds; target: each ratio ≤ 2")


if __name__ == "__main__":
    main()
