"""A REPL session written against tflab 0.1.0: stabilize a function, save it, check the bits by old names.

Run by tests/report/test_earlier_api_scripts.py (``SAVE_DIR`` is set by the test to a fresh folder).
"""
import os

import numpy as np
import tensorflow as tf

import tflab


def affine(x):
    return x * 2.0 - 1.0


batches = [np.ones((2, 3), np.float32), np.full((5, 3), 0.5, np.float32)]
report = tflab.stabilization_report(affine, batches, variants=("plain", "input_signature"))
assert report.max_abs_diff == report.max_abs_error          # 0.1.0: StabilizeReport.max_abs_diff

module = tf.Module()
module.f = tf.function(affine, input_signature=[tf.TensorSpec([None, 3], tf.float32)])
check = tflab.save_and_reload(module, os.path.join(os.environ["SAVE_DIR"], "affine"),
                              {"x": np.ones((2, 3), np.float32)},
                              signatures={"serving_default": module.f})
assert check.examples is check.example_batches              # 0.1.0: SavedModelCheck.examples
for sig in check.signatures.values():
    for out in sig.outputs.values():
        assert out.max_abs_diff == 0.0                      # 0.1.0: OutputBits.max_abs_diff
print(check.summary_line())
