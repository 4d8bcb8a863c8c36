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


def _version_of_copy(tmp_path, pyproject: str | None) -> subprocess.CompletedProcess:
    """``python -m tflab --version`` from a copy of the package (warnings as errors), beside ``pyproject``."""
    import shutil

    shutil.copytree(os.path.join(REPO, "tflab"), tmp_path / "tflab", ignore=shutil.ignore_patterns("__pycache__"))
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONWARNINGS="error")
    return subprocess.run([sys.executable, "-m", "tflab", "--version"], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


def test_a_copy_no_distribution_holds_does_not_borrow_an_installed_version(tmp_path):
    """Planted: a copy of the package with no pyproject.toml (an installed tflab elsewhere must not answer)."""
    p = _version_of_copy(tmp_path, None)
    assert (p.returncode, p.stdout, p.stderr) == (0, f"tflab {version.UNKNOWN}\n", ""), p.stderr


def test_a_copy_beside_another_projects_pyproject_says_unknown(tmp_path):
    p = _version_of_copy(tmp_path, '[project]\nname = "notflab"\nversion = "5.5.5"\n')
    assert (p.returncode, p.stdout, p.stderr) == (0, f"tflab {version.UNKNOWN}\n", ""), p.stderr


def test_the_tree_answers_with_warnings_as_errors():
    """Healthy twin: this tree's own version, no unclosed-file warning (``-W error`` made it an ignored exception)."""
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONWARNINGS="error")
    p = subprocess.run([sys.executable, "-m", "tflab", "--version"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (0, f"tflab {_pyproject_version()}\n", ""), p.stderr


class _Dist:
    def __init__(self, located: str, direct_url: str | None):
        self.located, self.direct_url = located, direct_url

    def locate_file(self, name):
        return os.path.join(self.located, name)

    def read_text(self, name):
        return self.direct_url if name == "direct_url.json" else None


def test_a_distribution_answers_only_for_the_folder_it_holds(tmp_path):
    """Planted: an editable install of another checkout, a wheel in another site-packages; twins: its own."""
    here = os.path.join(REPO, "tflab")
    assert version._ownership(_Dist(REPO, None), here) == "installed"
    assert version._ownership(_Dist(str(tmp_path), None), here) is None
    mine = '{"dir_info": {"editable": true}, "url": "file://%s"}'
    assert version._ownership(_Dist(str(tmp_path), mine % REPO), here) == "editable"
    assert version._ownership(_Dist(str(tmp_path), mine % tmp_path), here) is None
    assert version._ownership(_Dist(str(tmp_path), '{"url": "file://%s"}' % REPO), here) is None  # not editable
