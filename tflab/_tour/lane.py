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

Sections in the lane see the model after the first `EXPORT_TRAINING_STEPS` (2) of
the training steps steps 2 and 4 run (on the same batches, with one
`tflab.models.tour_optimizer`, SGD with momentum as there), eagerly
(`replay_training`; ~0.6 CPU-s a step). Two, not all seven: on the export's
seeded examples the freshly built MobileNetV3Small's softmax spans only
0.044–0.208, so its dynamic-range, float16 and int8 TFLite bounds are wider
than that range (vacuous); after two steps it spans 0.010–0.408 with every
value inside (0, 1); after three or more it is saturated (every element within
1e-26 of 0 or 1 exactly, all rows the same class), and a saturated softmax
hides any error inside the model: dynamic and float16 came out bit-exact on
it, a check that could not fail. `tflab.litert.check`
now names both kinds in ``vacuous_outputs``, which the facts test compares
(``[]`` for every variant). The one-process tour (``TFLAB_TOUR_LANE=0``, or a
failed lane) exports the model steps 2 and 4 leave, and says when its outputs
are saturated. Step 6 reads only forward passes and gradients of that model.
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

# The module the lane's process runs (``python -m``).
LANE_MODULE = "tflab._tour.lane"


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
    """The lane's process, started by the constructor; `result` waits for one section.

    Args:
        sections: the section modules it runs, in the tour's order.
        out_dir: the tour's temporary output folder (the sections write there).
        final_dir: ``--out`` as the user named it (paths shown in the text).
        model_path: the user's ``--model``, or None for the default model.
        training: the sections before the lane's whose training steps it
            replays first (of `TRAINING_SECTIONS`).

    Attributes:
        sections: the section modules it runs, in order.
        started: ``time.perf_counter()`` when the process started.
    """

    def __init__(self, sections: list[str], out_dir: Path, final_dir: Path | None,
                 model_path: str | None, training: list[str] = ()) -> None:
        from tflab._io.paths import owned_temp_dir
        from tflab.lowering.tour import lane_env
        from tflab.process.group import start_tied

        self.sections = list(sections)
        self._tmp = str(owned_temp_dir("tflab_tour_lane_"))  # carries its owner: swept after a SIGKILL
        self._out = os.path.join(self._tmp, "lane.result")
        self._notes = os.path.join(self._tmp, "notes.txt")
        argv = [sys.executable, "-m", LANE_MODULE, str(os.getpid()), self._out, self._notes, str(out_dir),
                str(final_dir or ""), model_path or "", ",".join(training), *self.sections]
        self.started = time.perf_counter()
        self._summary: dict | None = None
        self._failed: str | None = None
        self._proc = None
        self._err = open(os.path.join(self._tmp, "stderr.txt"), "w+b")
        try:
            # TMPDIR is the lane's own folder: what TF leaves there when the lane is killed mid-work
            # (AutoGraph's __autograph_generated_file*.py, removed only at a normal exit) goes with
            # the folder, which `stop` removes and a later run sweeps after a SIGKILL.
            self._proc = start_tied(argv, stdout=subprocess.DEVNULL, stderr=self._err,
                                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                               "TFLAB_DEADLINE_S": str(LANE_TIMEOUT), "TMPDIR": self._tmp,
                                               **lane_env(self._tmp)})  # step 6's compile dumps
        except OSError as e:  # no process (fork refused under a memory limit): the tour runs them
            self._failed = f"could not start ({e.strerror or e})"

    def last_note(self) -> str:
        """The lane's latest progress note ("" before the first)."""
        try:
            with open(self._notes, encoding="utf-8", errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def result(self, section: str, progress=None) -> dict | None:
        """Waits until the lane has finished ``section``; its record, or None when the tour must run it.

        Each section's record is its own file, written when the section ends,
        so the tour shows step 6 while the lane is still exporting.

        Args:
            section: a module of `sections`.
            progress: called with a line whenever the lane's latest note changes.

        Returns:
            ``{"text": str, "report": dict, "seconds": float}`` for
            ``section``, or None (the lane failed, now or for an earlier
            section; `failure` says how).
        """
        if self._failed is not None:
            return None
        rec = self._load(f"{self._out}.{section}", progress)
        if rec is None:
            return None
        if rec.get("error"):
            self._failed = rec["error"]
            return None
        return rec

    def _load(self, path: str, progress) -> dict | None:
        """Waits for the result at ``path`` (`tflab.process.channel`) and returns its objects; None on failure."""
        from tflab.process.channel import receive_result, result_ready

        shown = None
        deadline = self.started + LANE_TIMEOUT
        while not result_ready(path):
            if self._proc.poll() is not None and not result_ready(path):
                self._failed = self._exit_line()
                return None
            if time.perf_counter() > deadline:
                self.stop()
                self._failed = f"still running after {LANE_TIMEOUT:.0f} s"
                return None
            note = self.last_note()
            if progress is not None and note != shown:
                shown = note
                progress(f"waiting for the second process ({note or 'starting'})")
            time.sleep(0.1)
        try:
            return receive_result(path).objects  # the one channel back (tflab.process.channel)
        except Exception as e:  # a section's objects that would not unpickle, a broken result
            self._failed = f"its result did not load ({type(e).__name__}: {e})"
            return None

    def _exit_line(self) -> str:
        self._err.seek(0)
        last = [ln for ln in self._err.read().decode(errors="replace").splitlines() if ln.strip()][-1:]
        return f"exit {self._proc.returncode}" + (f": {last[0][:200]}" if last else "")

    def _final(self) -> dict:
        """What the lane leaves when all its sections ran: shared objects and the replayed steps."""
        if self._summary is None:
            self._summary = (self._load(self._out, None) if self._failed is None else None) or {}
        return self._summary

    @property
    def shared(self) -> dict:
        """The ``ctx.shared`` entries (`SHARED_KEYS`) the lane's sections left; {} without a result."""
        return dict(self._final().get("shared", {}))

    @property
    def training_steps(self) -> list[int] | None:
        """The batch sizes of the training steps the lane replayed (`replay_training`); None without a result."""
        return self._final().get("training_steps")

    @property
    def failure(self) -> str | None:
        """Why the lane gave no result (None while it has not failed)."""
        return self._failed

    def stop(self) -> None:
        """Kills the process if it still runs and removes its files."""
        import shutil

        if self._proc is not None and self._summary:
            try:  # it has handed everything over and is exiting: let it end by itself
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._proc is not None and self._proc.poll() is None:
            # SIGTERM first: the lane unwinds (`tflab.errors.Terminated`), so an export
            # in progress stops its converter workers and removes its files.
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._err.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


# Sections whose training steps change the model before the lane's sections.
TRAINING_SECTIONS = ("s02_retrace", "s04_stabilize")

# The lane's model: after this many of those training steps, the export's outputs spread without
# saturating (measured on the tour's model: see the module docstring).
EXPORT_TRAINING_STEPS = 2


def replay_training(model, sections: list[str], progress=None, steps: int | None = EXPORT_TRAINING_STEPS) -> list[int]:
    """Runs eagerly the first ``steps`` training steps that ``sections`` (of `TRAINING_SECTIONS`) run in the tour.

    Step 2: the tour's tf.data batches (4, 4, 2); step 4: the same batches,
    then `step4_extra_batch` (3). One `tflab.models.tour_optimizer` for all, as
    step 4 reuses step 2's. `tflab.models.make_train_step` is the step.

    Args:
        model: the lane's model (built or loaded as the tour's).
        sections: the tour's section modules.
        progress: called with one line per step.
        steps: how many of those steps to run, from the first (None: all of them).

    Returns:
        The batch size of each training step run, in order (``[4, 4]`` by default;
        ``[4, 4, 2, 4, 4, 2, 3]`` with ``steps=None`` for both sections: what steps 2
        and 4 report as their ``batch_sizes``).
    """
    from tflab.models import make_train_step, model_input_spec, step4_extra_batch, tour_dataset, tour_optimizer

    spec = model_input_spec(model)
    num_classes = int(model.outputs[0].shape[-1]) if getattr(model, "outputs", None) else 1
    batches = []
    if "s02_retrace" in sections:
        batches += list(tour_dataset(spec, num_classes))
    if "s04_stabilize" in sections:
        batches += list(tour_dataset(spec, num_classes)) + [step4_extra_batch(spec, num_classes)]
    batches = batches[:steps]
    step = make_train_step(model, tour_optimizer())
    sizes = []
    for i, (x, y) in enumerate(batches):
        if progress is not None:
            progress(f"training step {i + 1}/{len(batches)} of steps 2 and 4's, eagerly (batch {int(x.shape[0])})")
        step(x, y)
        sizes.append(int(x.shape[0]))
    return sizes


def lane_sections(names: list[str]) -> list[str]:
    """The sections of ``names`` (the modules the tour runs) that go to the lane.

    ``TFLAB_TOUR_LANE=0`` keeps every section in the tour's own process.
    """
    from tflab.process.settings import get as setting

    if setting("TFLAB_TOUR_LANE") == "0":
        return []
    return [n for n in names if n in LANE_SECTIONS]


def main(argv: list[str]) -> int:
    """``python -m tflab._tour.lane PARENT_PID OUT NOTES OUT_DIR FINAL_DIR MODEL TRAINING SECTION…``."""
    parent, out, notes_path, out_dir, final_dir, model_path, training, *sections = argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tflab.process.watch import watch_parent

    # Never an orphan: a tour stopped by Ctrl-C or SIGTERM takes this process with it. The
    # tour's pid comes in argv: a tour killed before this line ran is not mistaken for init.
    if os.getppid() != int(parent):
        return 124
    from tflab.process.settings import get_float

    watch_parent(int(parent), get_float("TFLAB_DEADLINE_S", LANE_TIMEOUT) + 5)
    import importlib

    from tflab.errors import install_sigterm_handler

    install_sigterm_handler()  # `Lane.stop`'s SIGTERM unwinds the section that runs (its cleanup runs)

    from tflab._tour.context import TourContext, load_user_model
    from tflab.models import build_default_model

    notes = _Notes(notes_path)
    notes("building the model" if not model_path else f"loading {model_path}")
    model = load_user_model(model_path) if model_path else build_default_model()
    result: dict[str, Any] = {"shared": {}, "training_steps": []}
    try:
        result["training_steps"] = replay_training(model, training.split(","), notes)
    except Exception as e:  # the tour runs the sections itself
        _write(f"{out}.{sections[0]}", {"error": f"replaying steps 2 and 4's training: {type(e).__name__}: {e}"})
        sections = []
    ctx = TourContext(model=model, model_source=model_path or "default", out_dir=Path(out_dir),
                      report={}, progress_line=notes, final_dir=Path(final_dir) if final_dir else None,
                      in_second_process=True)
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
            _write(f"{out}.{name}", {"error": f"{name}: {type(e).__name__}: "
                                              f"{str(e).splitlines()[0] if str(e) else ''}"})
            break  # later sections may need what this one left; the tour runs them itself
        _write(f"{out}.{name}", {"text": buf.getvalue(), "seconds": round(time.perf_counter() - t, 2),
                                 "report": {k: v for k, v in ctx.report.items() if k not in before}})
    for key in SHARED_KEYS:
        if key in ctx.shared:
            try:
                pickle.dumps(ctx.shared[key])
            except Exception:
                continue  # the page goes without it
            result["shared"][key] = ctx.shared[key]
    _write(out, result)
    return 0


def _write(path: str, value: Any) -> None:
    """Sends ``value`` back at ``path`` through the one channel (`tflab.process.channel`: committed last)."""
    from tflab.process.channel import send_result

    send_result(path, objects=value)


if __name__ == "__main__":
    # The module's own main, not this __main__ copy's: one set of classes (what pickles
    # and what a profiler wraps is ``tflab._tour.lane``).
    from tflab._tour.lane import main as _main

    sys.exit(_main(sys.argv[1:]))
