"""Checks that need no TensorFlow but were answered after its import (8-20 s): now before it, in one line.

Each kind has the handed case, a sibling it does not name, and a healthy twin that must pass the
pre-flight. The refusals run ``python -m tflab`` through an entry point that reports whether
``tensorflow`` was imported; the twins run `tflab.cli.preflight` in this process (cheap).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_ENTRY = ("import sys; from tflab.cli import supervise; rc = supervise(sys.argv[1:]); "
          "sys.stderr.write('TF-IMPORTED\\n' if 'tensorflow' in sys.modules else ''); sys.exit(rc)")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("preflight_late")
    (w / "m.py").write_text("class C:\n    def meth(self, x):\n        return x\n\ndef f(x):\n    return x * 2.0\n")
    (w / "broken.py").write_text("import tensorflow as tf\nx = (\n")
    (w / "indent.py").write_text("def f(x):\nreturn x\n")
    (w / "notflite.tflite").write_bytes(b"# a text file\n" * 4)
    (w / "short.tflite").write_bytes(b"TFL")
    (w / "ok.tflite").write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(32))
    import zipfile

    import numpy as np

    np.savez(w / "ok.npz", x=np.ones((2, 3), np.float32), s=np.array(["a", "b"]))  # strings are <U1, no objects
    np.savez(w / "empty.npz")  # a zip without members
    np.savez(w / "objects.npz", x=np.array([{"a": 1}, None], dtype=object))  # pickled by np.savez
    np.savez(w / "dates.npz", t=np.array(["2020-01-01"], dtype="datetime64[D]"))
    with zipfile.ZipFile(w / "notnpy.npz", "w") as z:
        z.writestr("x.txt", b"1 2 3")
    import io
    import warnings

    from numpy.lib import format as npy

    def npy_header(shape):
        b = io.BytesIO()
        npy.write_array_header_1_0(b, {"descr": "<f4", "fortran_order": False, "shape": shape})
        return b.getvalue()

    import ml_dtypes

    np.savez(w / "bf16.npz", x=np.ones(4, ml_dtypes.bfloat16))  # np.save keeps it as raw |V2 records
    (w / "prefixed.npz").write_bytes(b"#!/bin/sh\n" + (w / "ok.npz").read_bytes())
    with zipfile.ZipFile(w / "bomb.npz", "w") as z:  # a header declaring 3.6 TiB: np.load would allocate it
        z.writestr("x.npy", npy_header((10**12,)))
    with zipfile.ZipFile(w / "negative.npz", "w") as z:
        z.writestr("x.npy", npy_header((-3, 2)))
    with warnings.catch_warnings(), zipfile.ZipFile(w / "twice.npz", "w") as z:
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name"
        for v in (0.0, 1.0):
            z.writestr("x.npy", npy_header((2,)) + np.full(2, v, np.float32).tobytes())
    (w / "sm").mkdir()
    (w / "sm" / "saved_model.pb").write_bytes(b"")
    (w / "o").mkdir()
    return w


def tflab(work, *argv, env=None):
    e = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    e.pop("TFLAB_IN_PROCESS", None)
    p = subprocess.run([sys.executable, "-c", _ENTRY, *argv], cwd=work, env=e, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    lines = [ln for ln in p.stderr.splitlines() if ln != "TF-IMPORTED"]
    return p.returncode, lines, "TF-IMPORTED" in p.stderr


REFUSED = [
    # FUNC that is no Python name (handed: '1f', 'f g'; sibling: export's OBJ, distribute's STEP)
    (["inspect", "m.py:1f", "--arg", "x=float32[2]"], "FUNC '1f' is not a Python name"),
    (["inspect", "m.py:f g", "--arg", "x=float32[2]"], "FUNC 'f g' is not a Python name"),
    (["export", "m.py:build-model", "--out", "o/e"], "OBJ 'build-model' is not a Python name"),
    (["distribute", "m.py:C..meth"], "STEP 'C..meth' is not a Python name"),
    # a file Python cannot parse (handed: retrace's script, inspect's FILE; sibling: an IndentationError in compare)
    (["retrace", "broken.py"], "broken.py raised SyntaxError: '(' was never closed (at broken.py:2)"),
    (["inspect", "broken.py:f", "--arg", "x=float32[2]"], "raised SyntaxError"),
    (["compare", "indent.py:f", "--arg", "x=float32[2]"], "indent.py raised IndentationError"),
    # random inputs that cannot be drawn (handed: None in precision, string and 3.7 TB in compare;
    # sibling: '?' in compare, qint8 in precision, 5 GiB of int64)
    (["precision", "m.py:f", "--arg", "x=float32[None]"], "has unknown dims; give every dim to run it"),
    (["compare", "m.py:f", "--arg", "x=float32[4,?]"], "has unknown dims; give every dim to run it"),
    (["compare", "m.py:f", "--arg", "x=string[2]"], "cannot make random values of dtype string"),
    (["precision", "m.py:f", "--arg", "x=qint8[2]"], "cannot make random values of dtype qint8"),
    (["compare", "m.py:f", "--arg", "x=float32[100000,100000,100]"], "needs 3,725.3 GiB of random data"),
    (["compare", "m.py:f", "--arg", "x=int64[25000,25000]"], "needs 4.7 GiB of random data (limit 4 GiB)"),
    # a shape TF cannot count in int64, in a verb that draws nothing (handed: inspect, where TF's own
    # "Shape ... is too large" warning came before tflab's line; sibling: a None dim beside, lower)
    (["inspect", "m.py:f", "--arg", "x=float32[99999999999,99999999999]"], "has 1e+22 elements, more than TF"),
    (["lower", "m.py:f", "--arg", "x=float32[4,99999999999,99999999999]"], "more than TF can count"),
    (["inspect", "m.py:f", "--arg", "x=float32[None,99999999999,99999999999]"], "more than TF can count"),
    # --seed beyond numpy's range (handed: precision; sibling: compare at 2**63)
    (["precision", "m.py:f", "--arg", "x=float32[4]", "--seed", "99999999999999999999"], "must be an integer <="),
    (["compare", "m.py:f", "--arg", "x=float32[4]", "--seed", str(2**63)], "must be an integer <="),
    # check-tflite's MODEL without the flatbuffer identifier (handed: a text file; sibling: 3 bytes)
    (["check-tflite", "m.py", "sm"], "'m.py' is not a TFLite flatbuffer (no 'TFL3'"),
    (["check-tflite", "short.tflite", "sm"], "is not a TFLite flatbuffer"),
    # distribute (handed: None batch dim, --arg without STEP; sibling: a Python literal, a scalar spec,
    # --crash-worker with --mode mirrored)
    (["distribute", "m.py:f", "--arg", "x=float32[None,4]"], "dim 0 is the global batch"),
    (["distribute", "--arg", "x=float32[8,4]"], "need FILE.py:STEP"),
    (["distribute", "m.py:f", "--arg", "n=3"], "dim 0 is the global batch"),
    (["distribute", "m.py:f", "--arg", "x=float32[]"], "dim 0 is the global batch"),
    (["distribute", "--crash-worker", "0", "--mode", "mirrored"], "the mirrored lab has no workers"),
    # an --examples that is no .npz (handed: export; sibling: check-tflite), a tour --model that is not .keras
    (["export", "ok.tflite", "--out", "o/e", "--examples", "m.py"], "is not an .npz archive"),
    (["check-tflite", "ok.tflite", "sm", "--examples", "short.tflite"], "is not an .npz archive"),
    # an .npz numpy reads but TF cannot take, judged from its members' headers (handed: no arrays, an
    # object array; siblings: a datetime64 array, a member that is no .npy; in other verbs)
    (["export", "ok.tflite", "--out", "o/e", "--examples", "empty.npz"], "'empty.npz' holds no arrays"),
    (["check-tflite", "ok.tflite", "sm", "--examples", "objects.npz"], "'x' is an object array of Python objects"),
    (["compare", "m.py:f", "--examples", "dates.npz"], "'t' is a datetime64[D] array: TF has no tensor"),
    (["inspect", "m.py:f", "--examples", "notnpy.npz"], "member 'x.txt' is not a .npy"),
    # ... and what its headers declare (handed: a zip bomb, a member twice; sibling: a negative dim)
    (["inspect", "m.py:f", "--examples", "bomb.npz"], "declares 3,725.3 GiB of arrays in its .npy headers, more "
                                                      "than half this machine's memory"),
    (["export", "ok.tflite", "--out", "o/e", "--examples", "twice.npz"], "holds member 'x.npy' twice"),
    (["diagnose", "m.py:f", "--examples", "negative.npz"], "declares the shape (-3, 2) in its .npy header"),
    # an ml_dtypes array np.save stored without its type (was "a void16 array"), bytes before the zip
    # (np.load read it as a pickle and advised allow_pickle)
    (["compare", "m.py:f", "--examples", "bf16.npz"], "'x' is a raw 2-byte record array (|V2): TF has no tensor"),
    (["check-tflite", "ok.tflite", "sm", "--examples", "prefixed.npz"], "has other bytes before its zip archive"),
    (["tour", "--model", "m.py", "--out", "o/t"], "--model 'm.py' is not a .keras file or a SavedModel folder"),
    # --force onto a user's file: the noun takes its article ("a lowering", not "an lowering")
    (["lower", "m.py:f", "--arg", "x=float32[2]", "--out", "ok.tflite", "--force"], "not a lowering folder"),
    # an output that is the verb's own input, --force or not
    (["lower", "m.py:f", "--arg", "x=float32[2]", "--out", "m.py", "--force"], "is the input FILE 'm.py'"),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=[f"{a[0]}-{i}" for i, (a, _) in enumerate(REFUSED)])
def test_refused_before_tensorflow_loads(work, argv, words):
    """each was refused only after TF's import (8-20 s), with the same words."""
    code, lines, tf = tflab(work, *argv)
    assert code == 2 and len(lines) == 1 and words in lines[0], (code, lines)
    assert lines[0].startswith(f"tflab {argv[0]}: error: ")
    assert not tf, "TensorFlow was imported for a check that needs none"
    assert os.listdir(work / "o") == []


HEALTHY = [
    ["inspect", "m.py:C.meth", "--arg", "x=float32[None]"],  # a dotted FUNC; None where nothing is drawn
    ["diagnose", "m.py:f", "--arg", "x=float32[None,3]"],  # diagnose picks its own sizes for None
    ["compare", "m.py:f", "--arg", "x=complex64[2,3]", "--arg", "y=int64[20000,20000]", "--arg", "b=bool[]",
     "--seed", str(2**63 - 1)],  # 3.0 GiB: under the limit
    ["precision", "m.py:f", "--arg", "x=bfloat16[8]", "--seed", "0"],
    ["inspect", "m.py:f", "--arg", "x=float32[3037000499,3037000499]"],  # 2^63 - 1.4e10 elements: TF counts them
    ["check-tflite", "ok.tflite", "sm", "--examples", "ok.npz"],
    ["tour", "--model", "sm", "--out", "o/t"],
    ["distribute", "m.py:f", "--arg", "x=float32[8,None]", "--replicas", "2"],
    ["retrace", "m.py"],
]


@pytest.mark.parametrize("argv", HEALTHY, ids=[a[0] for a in HEALTHY])
def test_healthy_twin_passes_the_preflight(work, argv, monkeypatch):
    """The same checks let these through: they reach the child (or its later checks)."""
    from tflab.cli import _parse, build_parser, preflight

    monkeypatch.chdir(work)
    parser, _ = build_parser(argv[0])
    args, code = _parse(parser, argv)
    assert code is None
    preflight(argv[0], args)


def test_the_preflight_limits_are_the_childs():
    """The byte sizes, the dtypes without random values and the 4 GiB cap are `materialize`'s own:
    each refused dtype is refused by it, each size is TF's ``DType.size``."""
    import tensorflow as tf

    from tflab._api import cliargs as _cliargs
    from tflab._user.target import MAX_RANDOM_BYTES, materialize
    from tflab.errors import UsageError

    assert _cliargs.MAX_RANDOM_GIB << 30 == MAX_RANDOM_BYTES
    for name in _cliargs._NO_RANDOM:
        with pytest.raises(UsageError, match="cannot make random values"):
            materialize(tf.TensorSpec([2], tf.dtypes.as_dtype(name)))
    for name in ("float32", "int8", "bool", "complex64", "bfloat16", "uint16"):
        materialize(tf.TensorSpec([2], tf.dtypes.as_dtype(name)))
    for name in _cliargs._BASE_DTYPES:
        if name not in ("resource", "variant", "string"):
            assert _cliargs._DTYPE_BYTES.get(name, 1) == max(tf.dtypes.as_dtype(name).size, 1), name


def test_a_misspelt_tflab_variable_is_named_once(work):
    """A misspelt TFLAB_IN_PROCESS (one S short) changed nothing without a word; now one warning line
    names the nearest setting. The names are built here: a tracked file names only declared settings."""
    typo, junk = "TFLAB_" + "IN_PROCES", "TFLAB_" + "NOT_A_THING"
    code, lines, _ = tflab(work, "inspect", "m.py", env={typo: "1", junk: "x", "TFLAB_TOUR_LANE": "0"})
    assert code == 2
    assert lines[:2] == [
        f"tflab: warning: {typo} is not a tflab setting, so it changes nothing; did you mean "
        "TFLAB_IN_PROCESS? (tflab env lists them)",
        f"tflab: warning: {junk} is not a tflab setting, so it changes nothing (tflab env lists them)"]
    assert len(lines) == 3 and "expected FILE.py:FUNC" in lines[2]  # the declared TFLAB_TOUR_LANE: no line


@pytest.mark.parametrize("argv, words", [
    (["inspect", "nl\nx.py:nope", "--arg", "x=float32[2]"], "nl\\nx.py has no 'nope'"),
    (["inspect", "s\nyn.py:f", "--arg", "x=float32[2]"], "s\\nyn.py raised SyntaxError"),
    (["inspect", "m.py:f", "--bogus", "a\nb"], "unrecognized arguments: --bogus a\\nb"),
], ids=["missing-name", "syntax-error", "argparse"])
def test_a_line_break_in_what_was_typed_stays_one_error_line(work, argv, words):
    """A file name holding a line break split the error over two lines where the message printed
    the name as it is (a missing name, a SyntaxError); every error line now writes it as ``\\n``."""
    (work / "nl\nx.py").write_text("def f(x):\n    return x\n")
    (work / "s\nyn.py").write_text("x = (\n")
    code, lines, tf = tflab(work, *argv)
    assert code == 2 and len(lines) == 1 and words in lines[0] and not tf, lines


def test_error_line_escapes_line_breaks_and_leaves_one_line_messages_alone():
    from tflab.errors import error_line

    assert error_line("export", "a\r\nb\rc\nd") == "tflab export: error: a\\nb\\rc\\nd"
    assert error_line("export", "plain 'x.py'") == "tflab export: error: plain 'x.py'"
