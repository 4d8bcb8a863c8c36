"""The verbs' shared pre-TF checks of what `tflab.cli.preflight` cannot judge from a table alone.

`tflab.cli.preflight` runs them in the supervising process before the child (and TensorFlow)
starts; each answers in one `tflab.errors.UsageError` line, in the child's own words, so a typo
costs a fraction of a second instead of TensorFlow's import.
"""

from __future__ import annotations

import os
from pathlib import Path

from tflab.errors import UsageError


def check_target(value: str, grammar: str = "FILE.py:FUNC", example: str = "examples/model.py:step") -> str:
    """The file part of ``FILE.py:FUNC`` (``tflab._user.target.load_target``'s grammar), or one line.

    Raises:
        UsageError: no ``:``, no FILE, or no FUNC.
    """
    path, sep, name = value.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"{value!r}: expected {grammar}, e.g. {example}")
    return path


def check_py(path: str, flag: str) -> None:
    """Refuses a file that is not ``.py`` (`tflab._user.target.load_module`'s rule), in its words."""
    if not path.endswith(".py"):
        raise UsageError(f"{flag} {path!r} is not a .py file")


def check_file_not_in_folder(file: str, file_flag: str, folder: str, folder_flag: str) -> None:
    """Refuses a file output equal to, or inside, a folder output of the same run.

    The folder is published whole by a rename: a page written at the folder's own path is refused
    by that rename after the folder's work is done (exit 2 with half the outputs written), and a page
    inside it is not in the folder's `tflab._io.output_marker.MARKER`, so the next ``--force`` refuses
    tflab's own page. Both paths are resolved first (``x/..``, symlinks).

    Raises:
        UsageError: "--html D is the --out folder itself" / "… is inside --out D".
    """
    from tflab._io.path_checks import check_path_text

    check_path_text(file, file_flag)  # a NUL byte, a too-long name: their own line first
    check_path_text(folder, folder_flag)
    f, d = Path(os.path.realpath(file)), Path(os.path.realpath(folder))
    if f == d:
        raise UsageError(f"{file_flag} {file} and {folder_flag} {folder} name the same path; give the page a "
                         f"path of its own beside the folder, e.g. {file_flag} {d}.html")
    if d in f.parents:
        raise UsageError(f"{file_flag} {file} is inside {folder_flag} {folder}, which tflab publishes whole (and "
                         f"--force replaces whole); write the page beside it, e.g. {file_flag} {d}.html")


def check_saved_model_folder(value: str, flag: str) -> None:
    """A SavedModel folder's files TF will open, judged with ``stat`` (`check_saved_model_files`)."""
    from tflab._io.path_checks import check_saved_model_files

    if os.path.isdir(value):
        check_saved_model_files(value, flag)
