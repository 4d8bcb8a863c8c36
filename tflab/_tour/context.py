"""What each tour section gets (`TourContext`) and how ``tour --model`` loads a user's model.

Here, not in `tflab.tour`, so the tour's second process (`tflab._tour.lane`)
builds the same context without importing the tour.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tflab._io.progress import Progress


@dataclasses.dataclass
class TourContext:
    """What each tour section gets.

    Attributes:
        model: the Keras model under study (default: `build_default_model()`).
        model_source: "default" or the user's ``--model`` path.
        out_dir: where sections write files: a temporary folder beside
            ``--out`` that is renamed into place whole when the tour ends.
        final_dir: the ``--out`` folder itself (``saved_models/tour``); paths
            shown to the user go through `final_path`.
        report: JSON report; each section stores its numbers under its own key.
        progress_line: the tour's `Progress` (one step per section); call
            ``ctx.progress(msg)`` for a line within a section.
        quiet: True under ``--json``: sections print nothing to stdout.
        in_second_process: the section runs in the tour's second process
            (`tflab._tour.lane`), which is itself the isolation a crash needs: if
            it dies, the tour runs the section again in its own process.
    """

    model: Any
    model_source: str
    out_dir: Path
    report: dict
    progress_line: Progress
    quiet: bool = False
    shared: dict = dataclasses.field(default_factory=dict)
    final_dir: Path | None = None
    in_second_process: bool = False

    def __post_init__(self) -> None:
        if self.final_dir is not None:  # reports written under out_dir name the published folder
            from tflab._io.paths import register_publication

            register_publication(self.out_dir, self.final_dir)

    def final_path(self, path: str | os.PathLike) -> Path:
        """Where ``path`` (under `out_dir`) will be once the tour commits its folder."""
        p = Path(path)
        if self.final_dir is None:
            return p
        try:
            return self.final_dir / p.relative_to(self.out_dir)
        except ValueError:
            return p

    def progress(self, message: str) -> None:
        """A progress line on stderr within the current section."""
        self.progress_line.note(message)

    def section(self, title: str) -> None:
        if not self.quiet:
            print(f"\n== {title}")

    def line(self, text: str = "") -> None:
        if not self.quiet:
            print(f"   {text}" if text else "")


def load_user_model(path: str):
    """Loads a ``.keras`` file or a SavedModel folder for ``tflab tour --model``.

    Raises:
        UsageError: the path does not exist or is not a model.
    """
    from tflab.errors import UsageError

    from tflab._io.paths import input_path

    # A FIFO, a device, a symlink loop: named, without opening it (the one input place).
    input_path(path, "--model", want="any", what="a .keras file or a SavedModel folder")
    import keras

    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "saved_model.pb")):
            raise UsageError(f"--model {path!r} is a folder without saved_model.pb, so not a SavedModel")
        try:
            # trainable=True exposes the SavedModel's variables to the tour's training step.
            return keras.layers.TFSMLayer(path, call_endpoint="serving_default", trainable=True)
        except Exception as e:
            raise UsageError(f"--model {path!r}: could not load the SavedModel ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from e
    if not path.endswith(".keras"):
        raise UsageError(f"--model {path!r} is not a .keras file or a SavedModel folder")
    import zipfile

    if not zipfile.is_zipfile(path):
        # Keras says "File not found" for these, although the file exists.
        raise UsageError(f"--model {path!r} is not a valid .keras file: a .keras file is a zip archive and "
                         f"this one is not (truncated or corrupt); save the model again")
    try:
        return keras.models.load_model(path)
    except Exception as e:
        raise UsageError(f"--model {path!r}: not a loadable .keras file ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from e
