"""Load (building on first use) the WarpSoftmax library for tests that need it.

A test skips only when this machine has no C++ compiler (`custom_ops.build.find_cxx`
raises): then the op cannot be built here at all. Any other error (a compile error in
custom_ops' own sources, a link or ABI error, a bug in custom_ops/build.py) fails the
test: it is a regression of ours, not a missing tool.
"""

from __future__ import annotations

import pytest


def load_warp_library_or_skip() -> None:
    """Build and load WarpSoftmax; `pytest.skip` only when no C++ compiler is installed."""
    from custom_ops.build import BuildError, find_cxx
    from custom_ops.python.ops import warp_softmax_ops

    try:
        find_cxx()
    except BuildError as e:
        pytest.skip(f"no C++ compiler, so WarpSoftmax cannot be built here: {e}")
    warp_softmax_ops.load_library()  # builds on first use (cached); any error fails the test
