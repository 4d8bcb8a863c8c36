"""tflab's version, read from the installed package's metadata (`importlib.metadata`).

``pyproject.toml`` holds the one version number. An installed tflab (``pip install``,
``pip install -e .``) reports its metadata; a source tree run without installing
(``PYTHONPATH=. python -m tflab``) has no metadata for tflab, and reads the number
from the ``pyproject.toml`` beside the package, else says ``0+unknown``.
"""

from __future__ import annotations

import os
import re
from importlib import metadata

__all__ = ["package_version", "UNKNOWN"]

UNKNOWN = "0+unknown"
_PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "pyproject.toml")


def _source_tree_version(pyproject: str = _PYPROJECT) -> str | None:
    try:
        text = open(pyproject, encoding="utf-8").read()
    except OSError:
        return None
    project = text.split("[project]", 1)[1] if "[project]" in text else ""
    m = re.search(r'^version\s*=\s*"([^"]+)"', project.split("\n[", 1)[0], re.M)
    return m.group(1) if m and re.search(r'^name\s*=\s*"tflab"', project, re.M) else None


def package_version(distribution: str = "tflab") -> str:
    """The version of the installed ``distribution``, else the source tree's, else `UNKNOWN`.

    Returns:
        A version string such as ``"0.2.0"``.

    Example:

    >>> package_version("no-such-distribution-here")  # doctest: +SKIP
    '0+unknown'
    """
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tflab")
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        dist = None
    tree = _source_tree_version()
    # A source checkout answers for itself (an editable install's metadata keeps the version it was
    # installed with); an installed wheel has no pyproject.toml beside the package.
    if dist is not None and (tree is None or os.path.realpath(str(dist.locate_file("tflab"))) == os.path.realpath(package)):
        return dist.version
    return tree or (dist.version if dist is not None else UNKNOWN)
