"""The tour's second lane: sections that run in a second process from the tour's start.

Tracing is Python under the GIL, so one tour process keeps one core busy. The
sections in `LANE_SECTIONS` need nothing the sections before them make: only
the model, which a fresh process builds the same way (`build_default_model`,
seed 0: the same weights) or loads from the same ``--model`` path. The tour
starts ``python -m tflab._tour.lane`` before its first section; that process
runs these sections one after another on the other core while the tour's own
process runs the rest, and pickles what each section printed, stored in the
report and left in ``ctx.shared``. When the tour reaches such a section it
waits for it (the progress line names what the lane is doing), then prints
its text and takes its report entries as if it had run the section itself.

A lane that fails (the process dies, a section raises, the result does not
unpickle) is not a failed tour: the tour runs the section itself, as before.

Sections in the lane see the model as built. In one process they ran after
steps 2 and 4 had trained it for seven Adam steps; their facts (verdicts,
statuses, trace counts) do not depend on which of the two it is
(``tests/test_00_tour_speed.py`` compares them with the stored ones).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Steps 6 and 7–8 read only the model. (Step 4 stays: it trains with step 2's
# optimizer, whose slot variables spare it TF's variable-creation re-trace.)
LANE_SECTIONS = ("s06_modes", "s07_export")

# Seconds the tour waits for the lane before it kills it and runs the
# sections itself (on 2 loaded cores a whole tour has taken 25 min).
LANE_TIMEOUT = 1800.0

# ctx.shared entries a lane section leaves that the tour's page reads.
SHARED_KEYS = ("export_report",)


class _Notes:
    """The child's `Progress`: each note is one line appended to a file the tour reads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.prefix = ""

    def note(self, message: str) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{self.prefix}{message}".replace("\n", " ") + "\n")

    def __call__(self, message: str) -> None:
        self.note(message)


class Lane:
    """The lane's process, started by `start`; `result` waits for one section.

    Attributes:
        sections: the section modules it runs, in order.
        started: ``time.perf_counter()`` when the process started.
    """

    def __init__(self, sections: list[str], out_dir: Path, final_dir: Path | None,
                 model_path: str | None) -> None:
        import tempfile

        self.sections = list(sections)
        self._tmp = tempfile.mkdtemp(prefix="tflab_tour_lane_")
        self._out = os.path.join(self._tmp, "lane.pickle")
        self._notes = os.path.join(self._tmp, "notes.txt")
        argv = [sys.executable, "-m", "tflab._tour.lane", self._out, self._notes, str(out_dir),
                str(final_dir or ""), model_path or "", *self.sections]
        self.started = time.perf_counter()
        self._err = open(os.path.join(self._tmp, "stderr.txt"), "w+b")
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._err,
                                      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                           "TFLAB_DEADLINE_S": str(LANE_TIMEOUT)})
        self._result: dict | None = None
        self._failed: str | None = None

    def last_note(self) -> str:
        """The lane's latest progress note ("" before the first)."""
        try:
            with open(self._notes, encoding="utf-8", errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def result(self, section: str, progress=None) -> dict | None:
        """Waits for the lane to finish ``section``; its record, or None when the tour must run it.

        Args:
            section: a module of `sections`.
            progress: called with a line whenever the lane's latest note changes.

        Returns:
            ``{"text", "report", "shared", "seconds"}`` for ``section``, or None
            (the lane failed; `failure` says how).
        """
        if self._result is None and self._failed is None:
            self._wait(section, progress)
        if self._failed is not None:
            return None
        rec = self._result["sections"].get(section)
        if rec is None or rec.get("error"):
            self._failed = self._failed or (rec or {}).get("error") or f"{section} did not run"
            return None
        return rec

    @property
    def shared(self) -> dict:
        """The ``ctx.shared`` entries (`SHARED_KEYS`) the lane's sections left; {} without a result."""
        return dict(self._result["shared"]) if self._result is not None else {}

    @property
    def failure(self) -> str | None:
        """Why the lane gave no result (None while it has not failed)."""
        return self._failed

    def _wait(self, section: str, progress) -> None:
        shown = None
        deadline = self.started + LANE_TIMEOUT
        while self._proc.poll() is None and time.perf_counter() < deadline:
            note = self.last_note()
            if progress is not None and note != shown:
                shown = note
                progress(f"waiting for the second process ({note or 'starting'})")
            time.sleep(0.2)
        if self._proc.poll() is None:
            self.stop()
            self._failed = f"still running after {LANE_TIMEOUT:.0f} s"
            return
        try:
            with open(self._out, "rb") as f:
                self._result = pickle.load(f)
        except Exception as e:  # died before writing, or a section's objects would not unpickle
            self._err.seek(0)
            last = [ln for ln in self._err.read().decode(errors="replace").splitlines() if ln.strip()][-1:]
            self._failed = (f"exit {self._proc.returncode}: {last[0][:200]}" if last
                            else f"exit {self._proc.returncode} ({type(e).__name__})")

    def stop(self) -> None:
        """Kills the process if it still runs and removes its files."""
        import shutil

        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._err.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def lane_sections(names: list[str]) -> list[str]:
    """The sections of ``names`` (the modules the tour runs) that go to the lane.

    ``TFLAB_TOUR_LANE=0`` keeps every section in the tour's own process.
    """
    if os.environ.get("TFLAB_TOUR_LANE", "1") == "0":
        return []
    return [n for n in names if n in LANE_SECTIONS]


def main(argv: list[str]) -> int:
    """``python -m tflab._tour.lane OUT NOTES OUT_DIR FINAL_DIR MODEL SECTION…``."""
    out, notes_path, out_dir, final_dir, model_path, *sections = argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tflab.distribute.processes import watch_parent

    # Never an orphan: a tour stopped by Ctrl-C or SIGTERM takes this process with it.
    watch_parent(os.getppid(), float(os.environ.get("TFLAB_DEADLINE_S", str(LANE_TIMEOUT))) + 5)
    import importlib

    from tflab.tour import TourContext, build_default_model, load_user_model

    notes = _Notes(notes_path)
    notes("building the model" if not model_path else f"loading {model_path}")
    model = load_user_model(model_path) if model_path else build_default_model()
    result: dict[str, Any] = {"sections": {}, "shared": {}}
    ctx = TourContext(model=model, model_source=model_path or "default", out_dir=Path(out_dir),
                      report={}, progress_line=notes, final_dir=Path(final_dir) if final_dir else None)
    for name in sections:
        notes.prefix = f"{name}: "
        notes("started")
        before = set(ctx.report)
        buf = io.StringIO()
        t = time.perf_counter()
        try:
            with contextlib.redirect_stdout(buf):
                importlib.import_module(f"tflab._tour.{name}").run(ctx)
        except Exception as e:
            result["sections"][name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            break  # later sections may need what this one left; the tour runs them itself
        result["sections"][name] = {
            "text": buf.getvalue(), "seconds": round(time.perf_counter() - t, 2),
            "report": {k: v for k, v in ctx.report.items() if k not in before}}
    for key in SHARED_KEYS:
        if key in ctx.shared:
            try:
                pickle.dumps(ctx.shared[key])
            except Exception:
                continue  # the page goes without it
            result["shared"][key] = ctx.shared[key]
    with open(out + ".tmp", "wb") as f:
        pickle.dump(result, f)
    os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
