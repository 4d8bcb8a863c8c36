"""The child process of `tflab.lower`: one XLA compile of a saved signature, with XLA's dump on.

XLA reads ``XLA_FLAGS`` once per process (``xla/debug_options_flags.cc``
parses them the first time a compile asks for its debug options), so the
dump flags cannot be turned on in a process where TF already ran: the parent
(`tflab.lowering.dump`) sets ``XLA_FLAGS=… --xla_dump_to=DIR
--xla_dump_hlo_as_text`` in this process's environment and runs this file as
a script. It imports TensorFlow only (no tflab), loads the SavedModel the
parent wrote, wraps its ``lower`` signature in ``tf.function(jit_compile=True)``
and asks ``experimental_get_compiler_ir(...)(stage="optimized_hlo")``, which
builds a whole XLA executable (``get_compiler_ir.cc``: ``BuildExecutable``):
HLO passes, LLVM IR, object code, each written to DIR. Nothing is executed.

Usage: ``python _child.py SAVED_MODEL_DIR SPECS.json RESULT.json``; SPECS is a
list of ``[name, dtype, shape]``; RESULT gets ``{"seconds": …, "load_seconds":
…}`` or ``{"error": type, "message": …}``. The parent starts this process
before the program is saved, so TF's import here overlaps the parent's work:
it imports TF, then waits for SPECS (written last, atomically) to appear; it
ends at once when its parent is gone.
"""

import json
import os
import sys
import threading
import time


def _watch_parent(parent: int) -> None:
    """Ends this process once its parent is gone (a SIGKILLed lowering): no compile left running."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(3)


def main(argv: list) -> int:
    saved, specs_path, result_path = argv
    parent = os.getppid()
    # The parent asked the kernel for SIGKILL when it dies (PR_SET_PDEATHSIG); this thread covers a
    # parent that started it from another thread, and the TF import and compile below.
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    import tensorflow as tf

    deadline = time.monotonic() + 3600
    while not os.path.exists(specs_path):
        if os.getppid() != parent or time.monotonic() > deadline:
            return 3  # the parent is gone (or never saved the program): nothing to compile
        time.sleep(0.05)
    with open(specs_path, encoding="utf-8") as f:
        specs = json.load(f)
    result = {}
    try:
        t0 = time.perf_counter()
        loaded = tf.saved_model.load(saved)
        signature = loaded.signatures["lower"]
        result["load_seconds"] = time.perf_counter() - t0
        names = [name for name, _, _ in specs]

        def call(*xs):
            return signature(**dict(zip(names, xs)))

        jit = tf.function(call, jit_compile=True)
        args = [tf.zeros(shape, dtype) for _, dtype, shape in specs]
        t0 = time.perf_counter()
        jit.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
        result["seconds"] = time.perf_counter() - t0
    except Exception as e:  # reported to the parent, which keeps the stages it has
        result["error"] = type(e).__name__
        result["message"] = str(getattr(e, "message", None) or e)[:4000]
    tmp = result_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
