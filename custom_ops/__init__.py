"""WarpSoftmax: a TensorFlow custom op with CPU and CUDA kernels (see README.md).

Public names:

* `warp_softmax(logits, axis=-1, name=None)`: the op's wrapper (custom_ops/python/ops/warp_softmax_ops.py)
* `opcheck(op, *args, **kwargs)` → `OpcheckReport`, `OpcheckError`: TF's counterpart of
  torch.library.opcheck (custom_ops/opcheck.py)
* `load_library()`: build if needed and load the ``.so`` (do this before loading a SavedModel
  that uses the op)
* `BuildResult`, `BuildError` from ``custom_ops.build`` (``build()``; also ``python -m custom_ops.build``)

`opcheck` and `warp_softmax` are imported eagerly (this imports TensorFlow): the
function `opcheck` shares its name with the module ``custom_ops.opcheck``, and
only an import here, after the submodule's, keeps ``from custom_ops import
opcheck`` the function whatever was imported first.
"""

from __future__ import annotations

from custom_ops.opcheck import OpcheckError, OpcheckReport, opcheck
from custom_ops.python.ops.warp_softmax_ops import load_library, warp_softmax

__all__ = ["BuildError", "BuildResult", "OpcheckError", "OpcheckReport", "load_library", "opcheck",
           "warp_softmax"]


def __getattr__(name: str):
    # The build module is imported only on demand, so that
    # `python -m custom_ops.build` runs it once, as __main__.
    if name in ("BuildError", "BuildResult"):
        from custom_ops import build as _build

        return getattr(_build, name)
    raise AttributeError(f"module 'custom_ops' has no attribute {name!r}")
