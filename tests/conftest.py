"""Shared fixtures: TF is imported once, the tour model is built once per run."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tour_model():
    """The tour's MobileNetV3Small(weights=None, 96×96×3, 10 classes), built once."""
    from tflab.tour import build_default_model

    return build_default_model()


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
