"""Export benchmark on the tour model (MobileNetV3Small, 96×96×3, 10 classes, random weights).

Prints, from one run on this machine:

* TFLite conversion seconds per variant, and each as a ratio to the float conversion;
* latency per call (batch 1) of each LiteRT variant vs TF's ``tf.function``
  (the in-process Keras serving function), as a ratio LiteRT / TF;
* the per-op check's cost (`tflab.litert.per_op.check_ops`: builtin kernels,
  every tensor kept, a float64 reference per op) as a ratio to the rest of
  the variant's check (conversion + `check_tflite` end to end, without the
  per-op pass), measured variant by variant in the same run;
* the cost of what check_tflite adds after the per-op pass, as the same ratio:
  the attribution of a quantized variant's output error
  (`tflab.litert.attribution.attribute_error`, without the fix), the int8
  kept-float fix (QuantizationDebugger: one calibration conversion, two
  quantize passes), and the float variant's tensors against TF's
  (`tflab.litert.float_tensors.compare_float_tensors`).

Timings are medians over repeated calls after warm-up. The variants run side
by side in the same process, so the ratios compare like with like even on a
busy machine; the absolute seconds do not travel.

Usage: ``python benchmarks/bench_export.py [--calls N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _median_seconds(fn, calls: int) -> float:
    fn()  # warm-up: first call allocates / traces
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="timed calls per runtime (default: %(default)s)")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from tflab.litert import QUANTIZATIONS, convert
    from tflab.runtime import runtime_config
    from tflab.tour import build_default_model

    print(f"configuration: {runtime_config().one_line()}")  # what the numbers below ran on
    model = build_default_model()
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (1, 96, 96, 3)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sm")
        t0 = time.perf_counter()
        model.export(path, verbose=False)
        export_s = time.perf_counter() - t0
        name = next(iter(tf.saved_model.load(path).signatures["serving_default"].structured_input_signature[1]))
        examples = [{name: rng.uniform(0, 255, (1, 96, 96, 3)).astype(np.float32)} for _ in range(4)]
        models, conv_s = {}, {}
        for q in QUANTIZATIONS:
            t0 = time.perf_counter()
            models[q] = convert(path, q, examples)
            conv_s[q] = time.perf_counter() - t0
        e2e_s, per_op_s, extra = _per_op_overhead(path, examples, models)

    serve = tf.function(lambda t: model(t, training=False))
    xt = tf.constant(x)
    tf_s = _median_seconds(lambda: serve(xt).numpy(), args.calls)
    lite_s = {}
    for q, flat in models.items():
        runner = Interpreter(model_content=flat).get_signature_runner("serving_default")
        detail = runner.get_input_details()[name]
        feed = x
        if np.dtype(detail["dtype"]) == np.int8:
            scale, zp = detail["quantization"]
            feed = np.clip(np.round(x / scale + zp), -128, 127).astype(np.int8)
        lite_s[q] = _median_seconds(lambda r=runner, f=feed: r(**{name: f}), args.calls)

    print(f"tour model export (model.export): {export_s:.2f} s")
    print(f"{'variant':<8} {'convert s':>9} {'÷ float':>8} {'bytes':>9} {'LiteRT ms':>9} {'TF ms':>7} "
          f"{'LiteRT/TF':>9}")
    for q in QUANTIZATIONS:
        print(f"{q:<8} {conv_s[q]:>9.2f} {conv_s[q] / conv_s['none']:>8.2f} {len(models[q]):>9} "
              f"{lite_s[q] * 1e3:>9.2f} {tf_s * 1e3:>7.2f} {lite_s[q] / tf_s:>9.2f}")
    print(f"(median of {args.calls} calls, batch 1, after one warm-up call; {os.cpu_count()} CPUs visible)")
    print(f"{'variant':<8} {'convert s':>9} {'check s':>8} {'per-op s':>8} {'per-op ÷ (convert+check)':>25}")
    for q in QUANTIZATIONS:
        rest = conv_s[q] + e2e_s[q]
        print(f"{q:<8} {conv_s[q]:>9.2f} {e2e_s[q]:>8.2f} {per_op_s[q]:>8.2f} {per_op_s[q] / rest:>25.2f}")
    print("(check s: check_tflite without the per-op pass, the first variant also computing the shared "
          "gradients of the end-to-end bound; per-op s: check_ops on the same examples)")
    print(f"{'variant':<8} {'added':<28} {'s':>7} {'÷ (convert+check)':>18}")
    for q in QUANTIZATIONS:
        for what, sec in extra[q].items():
            print(f"{q:<8} {what:<28} {sec:>7.2f} {sec / (conv_s[q] + e2e_s[q]):>18.2f}")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f}")


def _per_op_overhead(path, examples, models):
    """Seconds of the end-to-end check and of the per-op check, per variant, run one after the other."""
    from tflab.examples import Examples
    from tflab.litert.check import check_tflite
    from tflab.litert.per_op import check_ops
    from tflab.saved_model import load_saved_model, signature_inputs

    loaded = load_saved_model(path)
    batches = Examples.of(examples).check({k: signature_inputs(f) for k, f in loaded.signatures.items()})
    feeds = {"serving_default": batches.feeds("serving_default")}
    from tflab.litert.attribution import attribute_error
    from tflab.litert.float_tensors import compare_float_tensors

    e2e, per_op, extra = {}, {}, {}
    for q, flat in models.items():
        t0 = time.perf_counter()
        check_tflite(flat, path, batches, q, per_op=False)
        e2e[q] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ops = check_ops(flat, models["none"], feeds, q)
        per_op[q] = time.perf_counter() - t0
        extra[q] = {}
        t0 = time.perf_counter()
        if q == "none":
            compare_float_tensors(flat, path, batches)
            extra[q]["float tensors vs TF"] = time.perf_counter() - t0
            continue
        attribute_error(flat, models["none"], path, ops, batches, q, fix=False)
        extra[q]["attribution"] = time.perf_counter() - t0
        if q == "int8":
            t0 = time.perf_counter()
            attribute_error(flat, models["none"], path, ops, batches, q, fix=True)
            extra[q]["attribution + kept-float fix"] = time.perf_counter() - t0
    return e2e, per_op, extra


if __name__ == "__main__":
    main()
