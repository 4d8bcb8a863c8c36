"""A REPL session written against tflab 0.1.0: compare eager and graph, read the distances by their old names.

Run by tests/report/test_earlier_api_scripts.py: it must run to the end with only
DeprecationWarnings, each naming the field that serves the old one now.
"""
import tensorflow as tf

import tflab


@tf.function
def scale(x):
    return tf.nn.relu(x) * 3.0 + 1.0


r = tflab.compare_modes(scale, tf.constant([[1.0, -2.0, 3.0]]), modes=("eager", "graph"), hlo=False,
                        attribute=False, repeats=1)
graph = r.modes["graph"]
assert r.function == "scale"                                   # 0.1.0: ModeComparison.function
assert graph.max_abs_diff <= 1e-6                              # 0.1.0: a Distance named max_abs_diff
assert graph.max_abs_diff.outputs == graph.abs_error.outputs   # the same Distance, outputs and gradients
assert float(graph.max_ulp_above_atol) == float(graph.ulp_above_atol)
print(f"graph vs eager: {graph.max_abs_diff:.3g} abs, {graph.max_ulp_above_atol:.0f} ULP above atol")
