"""A REPL session written against tflab 0.1.0: old module paths, an old top-level name, ``.function``.

Run by tests/report/test_earlier_api_scripts.py.
"""
import tensorflow as tf

import tflab
import tflab.litert_check                       # 0.1.0 module path: now tflab.litert
from tflab.float_formats import float_info      # 0.1.0 module path: now tflab.precision.float_formats
from tflab.retrace_probe import RetraceProbe    # 0.1.0 module path: now tflab.retrace

assert RetraceProbe is tflab.RetraceProbe
assert tflab.litert_check.TFLiteCheck is tflab.TFLiteCheck
assert float_info("float16").max == 65504.0

try:
    tflab.stabilization_report(lambda x: x.no_such_method(), [tf.ones([2])])
except tflab.DiagnosedError as e:               # 0.1.0 name: now tflab.UsageError
    caught = str(e)
assert caught


def clip(x):
    if x > 0:
        return x
    return -x


diff = tflab.autograph_diff(clip, tf.constant(2.0))
assert diff.function == "clip"                   # 0.1.0: AutographDiff.function
print(diff.summary_line())
