"""One version number (pyproject.toml), read back by `tflab.__version__` and `tflab --version`."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import tflab
from tflab._api import version

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pyproject_version() -> str:
    text = open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8").read()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def test_the_version_is_pyprojects_and_the_changelog_has_its_section():
    assert tflab.__version__ == _pyproject_version() == "0.2.0"
    changelog = open(os.path.join(REPO, "CHANGELOG.md"), encoding="utf-8").read()
    assert f"## [{tflab.__version__}]" in changelog


def test_the_cli_prints_the_version_without_loading_tensorflow():
    env = dict(os.environ, PYTHONPATH=REPO)
    code = "import sys; from tflab.cli import supervise; rc = supervise(['--version']); " \
           "print('tensorflow' in sys.modules); sys.exit(rc)"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [f"tflab {_pyproject_version()}", "False"]


def test_the_source_tree_version_is_read_from_a_tflab_pyproject_only(tmp_path):
    """Planted: another project's pyproject.toml, or none, gives no version; tflab's gives its own."""
    mine = tmp_path / "pyproject.toml"
    mine.write_text('[project]\nname = "tflab"\nversion = "9.8.7"\n\n[tool.x]\nversion = "1"\n')
    assert version._source_tree_version(str(mine)) == "9.8.7"
    other = tmp_path / "other.toml"
    other.write_text('[project]\nname = "notflab"\nversion = "1.0"\n')
    assert version._source_tree_version(str(other)) is None
    assert version._source_tree_version(str(tmp_path / "missing.toml")) is None
    assert version.package_version("no-such-distribution-anywhere") == _pyproject_version()  # the tree's
