"""The child process of a mode bisection: the user's saved step run once under one compiler setting.

XLA reads ``XLA_FLAGS`` once per process (``xla/debug_options_flags.cc``), and
TF reads ``TF_ENABLE_ONEDNN_OPTS`` when it loads: a compiler setting can only be
changed in a fresh process. The parent (`tflab.modes.bisection`) saves the
comparison's forward+backward step as a SavedModel signature ``step`` and the
inputs as ``inputs.npz``, and starts this file as a script with the setting in
its environment, or, where the setting is ``XLA_FLAGS`` alone, forks it from a
server that imported TensorFlow once (`tflab.process.forks`) and calls `main`. It imports TensorFlow only (no tflab), runs the step once
(``xla``: wrapped in ``tf.function(jit_compile=True)``, as the comparison's XLA
mode; ``graph``: in ``tf.function``, Grappler on) and writes every output as
``RESULT.npz``, then ``RESULT.json`` (``{"seconds": …}`` or ``{"error": …}``),
each under a temporary name first, renamed into place.

Usage: ``python _bisect_child.py SAVED_MODEL_DIR INPUTS.npz RESULT_PREFIX MODE``.
"""

import json
import os
import sys
import threading
import time


def _watch_parent(parent: int) -> None:
    """Ends this process once its parent is gone: no compile left running after a killed comparison."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(3)


def main(argv: list) -> int:
    saved, inputs_path, prefix, mode = argv
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    import numpy as np
    import tensorflow as tf

    result = {}
    try:
        t0 = time.perf_counter()
        with np.load(inputs_path, allow_pickle=False) as z:
            names = sorted(z.files, key=lambda n: int(n[1:]))
            inputs = [tf.constant(z[n]) for n in names]
        loaded = tf.saved_model.load(saved)  # kept: its variables die with it
        signature = loaded.signatures["step"]
        keys = [f"s{i}" for i in range(len(inputs))]

        def call(*xs):
            return signature(**dict(zip(keys, xs)))

        run = tf.function(call, jit_compile=(mode == "xla"))
        out = run(*inputs)
        arrays = {k: v.numpy() for k, v in out.items()}
        result["seconds"] = time.perf_counter() - t0
        tmp = prefix + ".npz.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, prefix + ".npz")
    except Exception as e:  # reported to the parent: this setting could not run
        result = {"error": type(e).__name__, "message": str(getattr(e, "message", None) or e)[:2000]}
    tmp = prefix + ".json.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, prefix + ".json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
