"""Every check that needs no TensorFlow answers before TF loads, in one line, exit 2.

Each case runs ``python -m tflab`` through an entry point that reports whether ``tensorflow`` was
imported: the answer must come from the supervising process (about 0.3 s), not after TF's import
(10-20 s). Each kind has the handed case, a sibling it does not name, and a healthy twin that the
check must let through (it reaches the child, or a later check).
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
    w = tmp_path_factory.mktemp("preflight")
    (w / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    (w / "m.txt").write_text("not python")
    (w / "o").mkdir()
    (w / "o" / "exists").mkdir()
    (w / "o" / "exists" / "mine.txt").write_text("mine")
    return w


def tflab(work, *argv, env=None):
    e = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    e.pop("TFLAB_IN_PROCESS", None)
    p = subprocess.run([sys.executable, "-c", _ENTRY, *argv], cwd=work, env=e, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    lines = [ln for ln in p.stderr.splitlines() if ln != "TF-IMPORTED"]
    return p.returncode, lines, "TF-IMPORTED" in p.stderr


DIMS65 = "x=float32[" + ",".join(["1"] * 65) + "]"

REFUSED = [
    # FILE.py:FUNC grammar (handed: no FUNC, no FILE, not .py; sibling: export's FILE.py:OBJ, retrace's script)
    (["inspect", "m.py", "--arg", "x=float32[2]"], "expected FILE.py:FUNC"),
    (["compare", ":f"], "expected FILE.py:FUNC"),
    (["inspect", "m.txt:f"], "'m.txt' is not a .py file"),
    (["export", "m.py", "--out", "o/p"], "expected FILE.py:OBJ"),
    (["retrace", "m.txt"], "script 'm.txt' is not a .py file"),
    # option values (handed: --loss-scale -1 / 1e-320, --policies, --quantize, dtype typo, None dims for lower;
    # sibling: 1e39, an empty --quantize item, '?' dims for lower, 65 dims in precision)
    (["precision", "m.py:f", "--arg", "x=float32[4]", "--loss-scale", "1e-320"], "becomes 0 or a subnormal"),
    (["precision", "m.py:f", "--arg", "x=float32[4]", "--loss-scale", "1e39"], "becomes inf in float32"),
    (["precision", "m.py:f", "--arg", "x=float32[4]", "--policies", "float32,bogus"], "unknown policy 'bogus'"),
    (["export", "m.py:f", "--quantize", "none,int9", "--out", "o/q"], "unknown variant(s) 'int9'"),
    (["inspect", "m.py:f", "--arg", "x=flaot32[2]"], "did you mean float32?"),
    (["lower", "m.py:f", "--arg", "x=float32[None,8]"], "XLA lowers for static shapes"),
    (["lower", "m.py:f", "--arg", "x=int32[2,?]"], "XLA lowers for static shapes"),
    (["compare", "m.py:f", "--arg", DIMS65], "65 dims; numpy arrays"),
    (["precision", "m.py:f", "--arg", DIMS65], "65 dims; numpy arrays"),
    # --arg values that are no spec and no Python literal (handed: an unclosed spec; sibling: an empty value,
    # a Python keyword used as a dtype)
    (["inspect", "m.py:f", "--arg", "x=float32[2"], "nor a Python literal"),
    (["compare", "m.py:f", "--arg", "x=float32[2]", "--arg", "n="], "--arg n=: not a TensorSpec"),
    (["diagnose", "m.py:f", "--arg", "x=True[2]"], "unknown dtype 'True'"),
    # output paths (handed: lower --out existing, x/.., --html = --out, --html inside --out;
    # sibling: export's --html inside --out, a tour --html at --out)
    (["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "o/exists"], "already exists"),
    (["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "o/p18/.."], "(it ends in ..)"),
    (["export", "m.py:f", "--out", "o/new/.."], "(it ends in ..)"),
    (["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "o/same", "--html", "o/same"], "name the same path"),
    (["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "o/lo", "--html", "o/lo/page.html", "--force"],
     "is inside --out"),
    (["export", "m.py:f", "--out", "o/e", "--html", "o/e/sub/../page.html"], "is inside --out"),
    (["tour", "--out", "o/t", "--html", "o/t"], "name the same path"),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=[f"{a[0]}-{i}" for i, (a, _) in enumerate(REFUSED)])
def test_refused_before_tensorflow_loads(work, argv, words):
    """each was refused only after TF's import (8-20 s), or after the work was written."""
    code, lines, tf = tflab(work, *argv)
    assert code == 2 and len(lines) == 1 and words in lines[0], (code, lines)
    assert lines[0].startswith(f"tflab {argv[0]}: error: ")
    assert not tf, "TensorFlow was imported for a check that needs none"
    assert sorted(os.listdir(work / "o")) == ["exists"] and not any(Path(work).glob("o/.*"))


HEALTHY = [
    ["precision", "m.py:f", "--arg", "x=float32[4]", "--loss-scale", "1.5e-38", "--policies", "mixed_float16"],
    ["lower", "m.py:f", "--arg", "x=float32[2,8]", "--out", "o/fresh", "--html", "o/fresh.html"],
    ["export", "m.py:f", "--quantize", "none,int8", "--out", "o/exists/../fresh2", "--html", "o/e.html"],
    ["compare", "m.py:f", "--arg", "x=float32[" + ",".join(["1"] * 64) + "]", "--arg", "n=3"],
    ["inspect", "m.py:f", "--arg", "x=float8_e4m3fn[2]", "--arg", "y=bool[]", "--arg", "z=float32",
     "--arg", "s='abc'", "--arg", "t=3,", "--arg", "u=[1, 2.5]", "--arg", "v=None"],
]


@pytest.mark.parametrize("argv", HEALTHY, ids=["precision", "lower", "export", "compare-64-dims", "inspect"])
def test_healthy_twin_passes_the_preflight(work, argv, monkeypatch):
    """The checks above can pass: a float32-normal loss scale, --html beside --out, a path with .. inside
    it, 64 dims, every TF dtype name. Run in this process (`preflight` itself): a subprocess would
    spend TF's import on proving it."""
    from tflab.cli import _parse, build_parser, preflight

    monkeypatch.chdir(work)
    parser, _ = build_parser(argv[0])
    args, code = _parse(parser, argv)
    assert code is None
    preflight(argv[0], args)
    assert sorted(os.listdir(work / "o")) == ["exists"]


def test_dtype_list_is_every_name_tf_takes():
    """The pre-TF dtype names: each is one tf.dtypes.as_dtype takes (so a refusal is certain), and every
    public TF dtype and its _ref form is among them (so no valid dtype is refused)."""
    import tensorflow as tf

    from tflab._api.cliargs import _DTYPES

    for name in _DTYPES:
        tf.dtypes.as_dtype(name)
    public = {getattr(tf.dtypes, n).name for n in dir(tf.dtypes) if isinstance(getattr(tf.dtypes, n), tf.dtypes.DType)}
    assert public and public | {f"{n}_ref" for n in public} <= _DTYPES


def test_word_lists_match_the_library():
    from tflab.commands.export_cmd import QUANTIZE_NAMES
    from tflab.commands.precision_cmd import POLICY_NAMES
    from tflab.litert.conversion import QUANTIZATIONS
    from tflab.precision.policy import POLICIES

    assert QUANTIZE_NAMES == tuple(QUANTIZATIONS) and POLICY_NAMES == tuple(POLICIES)


def test_api_loss_scale_outside_float32_is_refused():
    """compare_precisions(loss_scale=1e-320) ran with a scale that is 0 in float32."""
    from tflab.errors import UsageError
    from tflab.precision.policy import parse_loss_scale as _parse_loss_scale

    for bad in (1e-320, 1e39):
        with pytest.raises(UsageError, match="normal float32"):
            _parse_loss_scale(bad)
    assert _parse_loss_scale(32768) == 32768.0 and _parse_loss_scale(2.0 ** -126) == 2.0 ** -126
