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
        with open(pyproject, encoding="utf-8") as f:  # closed at once: no ResourceWarning under -W error
            text = f.read()
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
    owner = _ownership(dist, package) if dist is not None else None
    tree = _source_tree_version()
    # An installed wheel answers for itself; a source checkout answers for itself (an editable
    # install's metadata keeps the version it was installed with); a copy of the package that no
    # installed distribution holds says UNKNOWN, never the version of another tflab on the path.
    if owner == "installed":
        return dist.version
    return tree or (dist.version if owner == "editable" else UNKNOWN)


def _ownership(dist: metadata.Distribution, package: str) -> str | None:
    """``"installed"`` when ``dist`` holds ``package`` (this folder), ``"editable"`` when it is an editable
    install of the source tree this folder sits in, else None (another copy of tflab is installed)."""
    import json
    from urllib.parse import unquote, urlparse

    real = os.path.realpath(package)
    try:
        if os.path.realpath(str(dist.locate_file("tflab"))) == real:
            return "installed"
        info = json.loads(dist.read_text("direct_url.json") or "null")  # PEP 610
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(info, dict) or not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(info.get("url", "")))
    if url.scheme != "file":
        return None
    root = unquote(url.path)
    return "editable" if any(os.path.realpath(os.path.join(root, sub)) == real for sub in ("tflab", "src/tflab")) \
        else None
