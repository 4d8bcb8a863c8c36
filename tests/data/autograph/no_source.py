"""A function built with exec(): it has no source file, so AutoGraph cannot convert it."""

import tensorflow as tf

_ns: dict = {}
exec("def made_by_exec(x):\n    return x * 2.0\n", {"tf": tf}, _ns)
made_by_exec = _ns["made_by_exec"]

# A helper with a tensor `if`, defined with exec: AutoGraph cannot convert it,
# runs it as plain Python, and `if tensor:` fails inside the trace.
exec("def sign_flip(x):\n    if tf.reduce_sum(x) > 0:\n        x = -x\n    return x\n", {"tf": tf}, _ns)
sign_flip = _ns["sign_flip"]


def calls_exec_helper(x):
    return sign_flip(x) + 1.0
