"""Where the tour's time goes: exclusive seconds per phase, per section.

`benchmarks/bench_tour.py` runs the tour through this file (``python
benchmarks/_tour_phases.py OUT.json -- tour ARGS…``): it wraps a few TF and
LiteRT entry points, then runs the CLI. It reads nothing of the tour but its
progress line (`tflab._io.progress.Progress` with label ``"tour"``: one
``__call__`` per section, in `tflab.tour.SECTIONS` order), so it measures an
old checkout of tflab as well as the current one.

Phases, timed on the tour's main thread only (worker threads mostly wait on
child processes), exclusive: a phase nested in another is subtracted from
the outer one, so they add up to at most the section's wall time. The TF
entry points (``tracing``, ``autograph``, ``gradients``, ``xla_compile``,
``graph_first_run``) are wrapped by `tflab._tf.phases.timed_entry_points`,
which lists them (no TF internal outside ``tflab/_tf/``); it is
loaded by file path from this checkout, so an old checkout is timed the same
way. The others:

* ``litert_runs``: ``ai_edge_litert`` ``Interpreter.invoke`` and signature runners;
* ``tflite_convert``: an in-process `tflab.litert.conversion.convert`; conversions
  in worker processes are taken from ``report.json`` instead (their own clocks);
* ``child_wait``: the main thread waiting on a child process (``Popen.wait``/
  ``communicate``: the distribute lab, the custom-op compiler);
* ``worker_wait``: the main thread joining a worker thread (the TFLite
  converter's, or the background custom-op build's).
"""

from __future__ import annotations

import atexit
import functools
import json
import sys
import threading
import time

_SECONDS: dict[str, dict[str, float]] = {}
_SECTION = ["setup"]
_STACK: list[list] = []  # main thread only: [phase, start, child_seconds]


# The wrappers run inside the user's (the tour's) call stacks; compiled under a
# "<…>" file name, their frames are not user code to `tflab.diagnosis`, which
# names the innermost user frame as a failure's culprit line.
_WRAPPERS = """
def _timed(phase, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kwargs)
        frame = [phase, time.perf_counter(), 0.0]
        _STACK.append(frame)
        try:
            return fn(*args, **kwargs)
        finally:
            _STACK.pop()
            total = time.perf_counter() - frame[1]
            own = total - frame[2]
            if _STACK:
                _STACK[-1][2] += total
            section = _SECONDS.setdefault(_SECTION[0], {})
            section[phase] = section.get(phase, 0.0) + own
    return wrapper


def _first_call(fn, timed, key):
    seen = set()

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if id(self) not in seen and key(self):
            seen.add(id(self))
            return timed(self, *args, **kwargs)
        return fn(self, *args, **kwargs)
    return wrapper
"""
exec(compile(_WRAPPERS, "<bench_tour phases>", "exec"), globals())


def _patch(owner, name: str, phase: str) -> None:
    original = getattr(owner, name, None)
    if original is not None:
        setattr(owner, name, _timed(phase, original))


_ENTERED: list = []


def _adapter():
    """``tflab/_tf/phases.py`` of this benchmark's checkout, loaded by path (an old tflab has none)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tflab" / "_tf" / "phases.py"
    spec = importlib.util.spec_from_file_location("_tflab_bench_tf_phases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(progress: bool = True) -> None:
    """Wraps the entry points above; call before the tour starts.

    ``progress``: also take the sections from the tour's progress line (its main process).
    """
    import subprocess

    adapter = _adapter()
    _ENTERED.append(adapter.timed_entry_points(_timed, _first_call))  # noqa: F821 (the exec above)
    _ENTERED[-1].__enter__()  # for the process's lifetime
    _patch(subprocess.Popen, "wait", "child_wait")
    _patch(subprocess.Popen, "communicate", "child_wait")
    _patch(threading.Thread, "join", "worker_wait")
    try:
        from ai_edge_litert import interpreter as litert

        _patch(litert.Interpreter, "invoke", "litert_runs")
        _patch(litert.SignatureRunner, "__call__", "litert_runs")
    except ImportError:
        pass
    try:
        from tflab.litert import conversion as litert_convert

        _patch(litert_convert, "convert", "tflite_convert")
    except ImportError:
        pass

    if not progress:
        return
    from tflab._io import progress as _progress
    from tflab.tour import SECTIONS

    by_title = {title: mod for mod, title in SECTIONS}
    progress_call = _progress.Progress.__call__

    def section_start(self, message: str) -> None:
        if self.label == "tour" and message in by_title:
            _SECTION[0] = by_title[message]
        return progress_call(self, message)

    _progress.Progress.__call__ = section_start


def _dump(out: str) -> None:
    import tflab

    with open(out, "w") as f:
        json.dump({"tflab_file": tflab.__file__,
                   "sections": {s: {p: round(v, 3) for p, v in ph.items()} for s, ph in _SECONDS.items()}}, f)


def install_lane(out: str) -> None:
    """In the tour's second process (`tflab._tour.lane`): the same wrappers, sections from its notes.

    The lane names each section it starts in a note (``"<section>: started"``);
    the phases are written to ``out`` when the process exits.
    """
    _SECTION[0] = "lane setup"
    atexit.register(_dump, out)
    install(progress=False)
    from tflab._tour import lane

    note = lane._Notes.note

    def section_start(self, message: str) -> None:
        if message == "started" and self.prefix:
            _SECTION[0] = self.prefix.rstrip(": ")
        return note(self, message)

    lane._Notes.note = section_start


def main(argv: list[str]) -> int:
    out, sep, *cli_args = argv
    assert sep == "--", "usage: _tour_phases.py OUT.json -- tour ARGS…"

    atexit.register(_dump, out)
    install()
    from tflab.cli import main as cli_main

    return cli_main(cli_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
