"""Custom-op loading: register the project's op library before TF reads a graph that uses it.

`tf.saved_model.load` and the TFLite converter fail with "Op type not
registered 'WarpSoftmax'" unless the library that defines the op
(``custom_ops.load_library()``, which calls ``tf.load_op_library``) was loaded
in this process first. `load_custom_ops_for` loads it when a SavedModel's
``saved_model.pb`` names one of `PROJECT_CUSTOM_OPS`, and `unregistered_op`
reads the op name out of TF's error.

It sits below `tflab.saved_model`, `tflab.litert.conversion` and `tflab.export`, which
all import it (and it imports none of them).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# The project's own custom op (custom_ops/): its library is loaded on demand,
# because tf.saved_model.load and the TFLite converter must find it registered.
PROJECT_CUSTOM_OPS = {"WarpSoftmax": "custom_ops (custom_ops.load_library())"}


def unregistered_op(text: str) -> str | None:
    """The op named by TF's "Op type not registered 'X'" error, else None."""
    m = re.search(r"Op type not registered '(\w+)'", text)
    return m.group(1) if m else None


def load_custom_ops_for(saved_model_dir: str | os.PathLike) -> list[str]:
    """Loads the project's custom op library when the SavedModel's graph uses one of its ops.

    Args:
        saved_model_dir: a SavedModel folder; its ``saved_model.pb`` is searched
            for the op names (bytes), a missing file finds none.

    Returns:
        The project custom ops found in ``saved_model.pb`` (loaded now or before).
    """
    pb = os.path.join(os.fspath(saved_model_dir), "saved_model.pb")
    import stat

    try:  # opened without blocking, and read only when a regular file: a FIFO would block for ever
        fd = os.open(pb, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return []
            data = f.read()
    except OSError:
        return []
    found = [op for op in PROJECT_CUSTOM_OPS if op.encode() in data]
    if found:
        from custom_ops import load_library

        load_library()
    return found
