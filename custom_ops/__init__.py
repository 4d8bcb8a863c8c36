"""WarpSoftmax: a TensorFlow custom op with CPU and CUDA kernels (see README.md).

Public names (imported lazily, since importing TensorFlow takes seconds):

* `warp_softmax(logits, axis=-1, name=None)`: the op's wrapper (custom_ops/python/ops/warp_softmax_ops.py)
* `opcheck(op, *args, **kwargs)` → `OpcheckReport`: TF's counterpart of torch.library.opcheck (custom_ops/opcheck.py)
* `load_library()`: build if needed and load the ``.so`` (do this before loading a SavedModel that uses the op)
* `build()` → `BuildResult` (custom_ops/build.py; also ``python -m custom_ops.build``)
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "warp_softmax": "custom_ops.python.ops.warp_softmax_ops",
    "load_library": "custom_ops.python.ops.warp_softmax_ops",
    "opcheck": "custom_ops.opcheck",
    "OpcheckReport": "custom_ops.opcheck",
    "OpcheckError": "custom_ops.opcheck",
    "build": "custom_ops.build",
    "BuildResult": "custom_ops.build",
    "BuildError": "custom_ops.build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'custom_ops' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
