"""Shared fixtures: TF is imported once, the tour model is built once per run, the full tour runs
once per session beside the other tests."""

from __future__ import annotations

import os
import signal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# A suite started in the background of a non-interactive shell (`make test &`, a CI step
# wrapper) inherits SIGINT ignored, and so would every process the tests start: the tests that
# send SIGINT (Ctrl-C) to tflab would then see it ignored. The tests run with Python's own
# Ctrl-C handler, so their children start with SIGINT at its default, as in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest  # noqa: E402


def pytest_sessionstart(session):
    """Print the configuration the run measures on (TF, CPU ISA, oneDNN on/off and why).

    ``make test`` runs the ``onednn``-marked tests under TF_ENABLE_ONEDNN_OPTS=0
    and =1; this line says which pass is which. Printed even under ``-q``.
    """
    from tflab.cli import _quiet_tf
    from tflab.runtime import runtime_config

    _quiet_tf()  # TF's start-up lines (cuInit, ...) would precede ours
    line = f"tflab runtime: {runtime_config().one_line()}"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


_COLLECTED: dict[str, set] = {"files": set(), "onednn": set()}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the main pass sees every test
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        _COLLECTED["files"].add(name)
        if item.get_closest_marker("onednn") is not None:
            _COLLECTED["onednn"].add(name)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up (they run bfloat16 too)
def pytest_runtest_setup(item):
    """A ``bfloat16``-marked test is skipped where bfloat16 kernels cannot run in this configuration.

    `tflab.process.bfloat16_probe` measures it in a child, and only when oneDNN is on and
    ``ONEDNN_MAX_CPU_ISA`` is set: ``make test``'s third pass on an AVX-512 CPU, where a bfloat16
    MatMul ends the process with SIGSEGV. Elsewhere no child is started and nothing is skipped.
    """
    if item.get_closest_marker("bfloat16") is not None:
        from tflab.process.bfloat16_probe import bfloat16_failure

        failure = bfloat16_failure()
        if failure is not None:
            pytest.skip(f"this configuration cannot run bfloat16 (tflab refuses it with a UsageError): {failure}")


# The one full tour of a session (`make tour` in a fresh process: 2-3 min on 2 quiet cores).
# It starts when collection ends, in its own process, and runs while the other tests run (they
# are mostly Python tracing on one core); the tests that read it are moved to the session's end.
FULL_TOUR_TESTS = ("test_the_full_tour_states_the_same_facts_as_before",)
FULL_TOUR_TIMEOUT = 2400  # a loaded 2-core machine: 1179 s seen
_FULL_TOUR: dict = {}


def _start_full_tour() -> dict:
    import subprocess
    import sys
    import tempfile
    import time

    if not _FULL_TOUR:
        from tflab.process.group import start_tied

        root = tempfile.mkdtemp(prefix="tflab-test-full-tour-")
        stdout, stderr = open(os.path.join(root, "stdout"), "w"), open(os.path.join(root, "stderr"), "w")
        # Tied to this process (PR_SET_PDEATHSIG, as tflab starts its own helpers): pytest killed
        # leaves no tour running under init; its own children die with it in turn.
        proc = start_tied([sys.executable, "-m", "tflab", "tour", "--out", os.path.join(root, "tour")],
                          stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        stdout.close(), stderr.close()
        _FULL_TOUR.update(proc=proc, root=root, started=time.monotonic())
        _stop_tour_on_sigterm()
    return _FULL_TOUR


def _stop_full_tour() -> None:
    """Stops the tour (SIGTERM: its supervisor forwards it, the tour cleans up) and removes its folder."""
    import shutil

    proc = _FULL_TOUR.get("proc")
    if proc is not None and proc.poll() is None:
        proc.terminate()  # the tflab supervisor forwards it to its child
        try:
            proc.wait(30)
        except Exception:
            proc.kill()
            proc.wait()
    if _FULL_TOUR.get("root"):
        shutil.rmtree(_FULL_TOUR["root"], ignore_errors=True)


def _stop_tour_on_sigterm() -> None:
    """``kill <pytest pid>``: pytest's default SIGTERM ends it at once, without `pytest_sessionfinish`;
    the tour and its ``tflab-test-full-tour-*`` folder went on. Stop both, then end as SIGTERM does."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        _stop_full_tour()
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    if previous in (signal.SIG_DFL, None) or callable(previous):
        signal.signal(signal.SIGTERM, on_term)


def _xdist_worker(config) -> bool:
    """True in a pytest-xdist worker (``make test`` runs the main pass with ``-n``)."""
    return hasattr(config, "workerinput")


def pytest_collection_finish(session):
    """Starts the full tour when a test that reads it is selected, and moves those tests last.

    Under pytest-xdist each worker collects every test but runs only its share, and the order
    must stay the same in every worker: there the tour starts when its test asks for it (the
    `full_tour` fixture), in the one worker that runs that file (``--dist loadfile``), while the
    other worker runs the rest.
    """
    if session.config.option.collectonly or _xdist_worker(session.config):
        return
    late = [item for item in session.items if item.name in FULL_TOUR_TESTS]
    if late:
        session.items[:] = [item for item in session.items if item.name not in FULL_TOUR_TESTS] + late
        _start_full_tour()


def pytest_sessionfinish(session):
    """A session stopped early (``-x``, Ctrl-C) stops its tour; its folder goes (at the end as well)."""
    _stop_full_tour()


@pytest.fixture(scope="session")
def full_tour():
    """The session's full tour: ``(returncode, stdout, stderr, out folder)``, waited for.

    ``python -m tflab tour --out DIR`` on the default MobileNetV3Small in a fresh process, as
    ``make tour`` runs it; started at the end of collection (`pytest_collection_finish`).
    """
    from pathlib import Path

    tour = _start_full_tour()
    proc = tour["proc"]
    proc.wait(timeout=FULL_TOUR_TIMEOUT)
    root = Path(tour["root"])
    return proc.returncode, (root / "stdout").read_text(), (root / "stderr").read_text(), root / "tour"


@pytest.fixture(scope="session")
def collected_test_files():
    """(every test file collected, the files with an ``onednn``-marked test), before ``-m`` deselection."""
    return set(_COLLECTED["files"]), set(_COLLECTED["onednn"])


@pytest.fixture(scope="session")
def tour_model():
    """The tour's MobileNetV3Small(weights=None, 96×96×3, 10 classes), built once."""
    from tflab.tour import build_default_model

    return build_default_model()


@pytest.fixture(scope="session")
def small_keras_file(tmp_path_factory):
    """A user's model as a .keras file: Conv2D(4) → GAP → Dense(5, softmax) on 16×16×3."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(5, activation="softmax")(x)
    path = tmp_path_factory.mktemp("user_model") / "small.keras"
    keras.Model(inputs, outputs).save(path)
    import tensorflow as tf

    tf.random.set_seed(None)  # set_random_seed set TF's global seed; do not leak it
    return path


@pytest.fixture
def run_cli(capsys):
    """Runs ``tflab ARGS…`` in-process; returns (exit code, stdout, stderr)."""
    from tflab.cli import main

    def _run(*argv: str):
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture(autouse=True)
def _unseed_tf_after_test():
    """Undo a global seed a test set (keras.utils.set_random_seed), so tests stay order-independent."""
    yield
    import tensorflow as tf

    tf.random.set_seed(None)
