"""A over the CLI and the Python API: many small tries, one process.

Each try is a call that must end in one of the documented ways: the CLI
(`tflab.cli.main`, in-process) returns a code from the README table with one
``tflab VERB: error:`` line and no traceback for bad input; the API raises
`tflab.errors.UsageError` (or returns a non-vacuous result). Anything else
(another exception type, a traceback, exit 0 for a mistake, a file left
behind) is a *break*, printed with its try id.

Usage: python tests/_hostile_pass.py [--only PREFIX]   (prints the counts; exit 1 if a break was found)
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

USER = '''
import tensorflow as tf

def f(x):
    return tf.sin(x) * 2.0

class Tiny(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x * 2.0}

def tiny():
    return Tiny()
'''

TRIES: list[tuple[str, str, object]] = []  # (id, kind "cli2"/"api", payload)


def cli(tid: str, *argv: str, expect: int = 2, one_line: bool = True):
    TRIES.append((tid, "cli", (argv, expect, one_line)))


def api(tid: str, fn, expect: str = "usage"):
    """expect "usage": must raise UsageError; "arity": Python's own TypeError for a wrong argument count."""
    TRIES.append((tid, "api", (fn, expect)))


def build(w: Path):
    import numpy as np
    import tensorflow as tf

    import tflab

    F = f"{w}/u.py:f"
    T = f"{w}/u.py:tiny"
    X = ["--arg", "x=float32[4]"]
    # ---- option values (argparse types and the verbs' own checks)
    for verb, opts in {
        "inspect": [["--max-ops", "x"], ["--max-ops", "-1"], ["--max-ops", "1e3"], ["--dot", ""]],
        "compare": [["--repeats", "0"], ["--repeats", "-3"], ["--seed", "-1"], ["--seed", "2**64"],
                    ["--ulp-bound", "-1"], ["--atol", "nan"], ["--atol", "-1"], ["--atol", "inf"], ["--hlo", ""]],
        "precision": [["--policies", ""], ["--policies", "bogus"], ["--loss-scale", "-1"], ["--loss-scale", "nan"],
                      ["--loss-scale", "inf"], ["--loss-scale", "0"], ["--seed", "x"]],
        "autograph": [["--strict", "x"], ["--bogus"]],
        "diagnose": [["--json", "x"], ["--arg", "x"]],
    }.items():
        for i, o in enumerate(opts):
            cli(f"opt-{verb}-{i}", verb, F, *X, *o)
    for i, o in enumerate([["--quantize", ""], ["--quantize", ",,"], ["--quantize", "int4"], ["--quantize", "NONE"],
                           ["--examples", "/nonexistent.npz"], ["--examples", "/dev/null"], ["--out", ""]]):
        cli(f"opt-export-{i}", "export", T, *o)
    for i, o in enumerate([["--timeout", "0"], ["--timeout", "-1"], ["--timeout", "nan"], ["--crash-worker", "5"],
                           ["--crash-worker", "-1"], ["--mode", "bogus"], ["--crash-worker", "0", "--mode", "mirrored"]]):
        cli(f"opt-distribute-{i}", "distribute", *o)
    for i, o in enumerate([["--model", "/nonexistent.keras"], ["--model", ""], ["--out", ""], ["--bogus"]]):
        cli(f"opt-tour-{i}", "tour", *o)
    for i, o in enumerate([["--bogus"], ["x"], ["--json", "--json", "x"]]):
        cli(f"opt-env-{i}", "env", *o)
    cli("opt-none", expect=2, one_line=False)  # no verb: the help text, exit 2
    cli("opt-unknown-verb", "bogus")
    # ---- --arg grammar
    for i, a in enumerate(["x=float32[", "x=float32[-2]", "x=float33[4]", "=float32[4]", "x", "x=float32[4]]",
                           "x=float32[1e3]", "x=float32[0x10]", "x=int32[None]x", "x=[1,2", "x=__import__('os')",
                           "x=lambda: 1", "x=float32[4,None,]", "x=bfloat16[99999999999999999999]", "y=float32[4]",
                           "x=string[4]", "x=resource[1]", "x=float32[４]"]):
        cli(f"arg-compare-{i}", "compare", F, "--arg", a)
    # ---- targets
    for i, t in enumerate([f"{w}/u.py", f"{w}/u.py:", f"{w}/u.py:nope", f"{w}/missing.py:f", f"{w}:f",
                           f"{w}/u.py:f:g", f"{w}/u.py:Tiny", f"{w}/u.py:tf", "/dev/null:f", f"{w}/u.py:np"]):
        cli(f"target-inspect-{i}", "inspect", t, *X)
    cli("retrace-missing", "retrace", f"{w}/missing.py")
    cli("retrace-folder", "retrace", str(w))
    cli("retrace-devnull", "retrace", "/dev/null")  # "is not a .py file"
    # ---- output paths
    (w / "afile").write_text("x")
    (w / "adir").mkdir(exist_ok=True)
    with contextlib.suppress(FileExistsError):
        (w / "loopA").symlink_to(w / "loopB")
        (w / "loopB").symlink_to(w / "loopA")
    with contextlib.suppress(FileExistsError):
        os.mkfifo(w / "fifo")
    with contextlib.suppress(FileExistsError):
        (w / "dangling").symlink_to(w / "nowhere" / "x")
    paths = [str(w / "afile" / "g"), str(w / "adir"), str(w / "loopA"), str(w / "nodir" / "g"), "/proc/x",
             "/sys/x", str(w / ("n" * 300)), str(w / "dangling"), "/", str(w / "a\nb")]
    ok = {paths[9]: 0}  # a newline is a legal byte in a file name: written
    for i, p in enumerate(paths):
        cli(f"path-dot-{i}", "inspect", F, *X, "--dot", p, expect=ok.get(p, 2))
        # the --dot try above wrote "a\nb": compare refuses it without --force, export as "already exists"
        cli(f"path-hlo-{i}", "compare", F, *X, "--hlo", p, "--no-grad", "--repeats", "1")
        # export --out creates missing parents (removed again on failure): nodir/g is fine
        cli(f"path-exportout-{i}", "export", T, "--quantize", "none", "--out", p, expect=0 if i == 3 else 2)
        cli(f"path-tourout-{i}", "tour", "--model", "/nonexistent.keras", "--out", p)
    cli("path-hlo-exists", "compare", F, *X, "--hlo", str(w / "afile"), "--no-grad", "--repeats", "1")
    cli("path-export-fifo", "export", T, "--quantize", "none", "--out", str(w / "fifo"))
    cli("path-export-fifo-force", "export", T, "--quantize", "none", "--out", str(w / "fifo"), "--force")
    cli("path-export-file-force", "export", T, "--quantize", "none", "--out", str(w / "afile"), "--force")
    cli("path-export-cwd-force", "export", T, "--quantize", "none", "--out", ".", "--force")
    cli("path-export-devnull", "export", T, "--quantize", "none", "--out", "/dev/null", "--force")
    cli("path-tour-nonempty", "tour", "--out", str(w))
    # ---- memory
    cli("mem-compare", "compare", F, "--arg", "x=float32[1099511627776,1048576]")
    cli("mem-precision", "precision", F, "--arg", "x=float32[1099511627776,1048576]")
    cli("mem-diagnose", "diagnose", F, "--arg", "x=float32[1099511627776,1048576]")
    cli("mem-inspect-ok", "inspect", F, "--arg", "x=float32[1099511627776,1048576]", expect=0)  # a spec: no data

    # ---- the Python API
    def spec(*s):
        return tf.TensorSpec(list(s), tf.float32)

    fn = lambda x: x * 2.0  # noqa: E731
    big = spec(2**40, 2**20)
    calls = {
        "trace-noncallable": lambda: tflab.trace_and_inspect(5, spec(4)),
        "trace-class": lambda: tflab.trace_and_inspect(tflab.RetraceProbe, spec(4)),
        "trace-nospec": lambda: tflab.trace_and_inspect(fn),
        "trace-bad-kw": lambda: tflab.trace_and_inspect(fn, spec(4), bogus=1),
        "totext-str": lambda: tflab.trace_and_inspect(fn, spec(4)).to_text(max_ops="3"),
        "totext-neg": lambda: tflab.trace_and_inspect(fn, spec(4)).to_text(max_ops=-5),
        "todot-str": lambda: tflab.trace_and_inspect(fn, spec(4)).to_dot(max_ops="x"),
        "probe-none": lambda: tflab.RetraceProbe(None),
        "probe-bogus-kw": lambda: tflab.RetraceProbe(fn, jit=True),
        "probe-watch-str": lambda: tflab.RetraceProbe(fn, watch_stale="yes"),
        "probe-tf-function-opts": lambda: tflab.RetraceProbe(tf.function(fn), reduce_retracing=True),
        "expect-neg": lambda: tflab.expect_traces(tflab.RetraceProbe(fn), -1),
        "expect-str": lambda: tflab.expect_traces(tflab.RetraceProbe(fn), "2"),
        "expect-noncallable": lambda: tflab.expect_traces(5, 1),
        "modes-repeats0": lambda: tflab.compare_modes(fn, spec(4), repeats=0),
        "modes-repeats-str": lambda: tflab.compare_modes(fn, spec(4), repeats="3"),
        "modes-seed-neg": lambda: tflab.compare_modes(fn, spec(4), seed=-1),
        "modes-ulp-neg": lambda: tflab.compare_modes(fn, spec(4), ulp_bound=-1),
        "modes-atol-nan": lambda: tflab.compare_modes(fn, spec(4), atol=float("nan")),
        "modes-bogus-mode": lambda: tflab.compare_modes(fn, spec(4), modes=("bogus",)),
        "modes-empty": lambda: tflab.compare_modes(fn, spec(4), modes=()),
        "modes-str-modes": lambda: tflab.compare_modes(fn, spec(4), modes="eager"),
        "modes-big": lambda: tflab.compare_modes(fn, big),
        "modes-unknown-dim": lambda: tflab.compare_modes(fn, tf.TensorSpec([None], tf.float32)),
        "diag-5": lambda: tflab.diagnose(5),
        "diag-big": lambda: tflab.diagnose(fn, big),
        "diag-class": lambda: tflab.diagnose(tflab.RetraceProbe),
        "autograph-5": lambda: tflab.autograph_diff(5),
        "autograph-strict-str": lambda: tflab.autograph_diff(fn, spec(4), strict="yes"),
        "stabilize-5": lambda: tflab.stabilize(5),
        "stabilize-noex": lambda: tflab.stabilize(fn, examples=[]),
        "infer-empty": lambda: tflab.infer_input_signature([]),
        "infer-5": lambda: tflab.infer_input_signature(5),
        "float-info-bogus": lambda: tflab.float_info("bogus"),
        "float-info-5": lambda: tflab.float_info(5),
        "precision-empty": lambda: tflab.compare_precisions(fn, spec(4), policies=[]),
        "precision-bogus": lambda: tflab.compare_precisions(fn, spec(4), policies=["bogus"]),
        "precision-big": lambda: tflab.compare_precisions(fn, big),
        "precision-ls-neg": lambda: tflab.compare_precisions(fn, spec(4), loss_scale=-1),
        "workers-3": lambda: tflab.run_workers(3),
        "workers-str": lambda: tflab.run_workers("2"),
        "workers-timeout-neg": lambda: tflab.run_workers(2, timeout=-1),
        "examples-5": lambda: tflab.Examples.of(5),
        "examples-str": lambda: tflab.Examples.of("nope.npz"),
        "examples-empty": lambda: tflab.Examples.of([]),
        "examples-obj": lambda: tflab.Examples.of({"x": np.array([object()])}),
        "sar-obj5": lambda: tflab.save_and_reload(5, w / "sar1", None),
        "sar-path-none": lambda: tflab.save_and_reload(tf.Module(), None, None),
        "sar-path-file": lambda: tflab.save_and_reload(tf.Module(), w / "afile", None),
        "sar-examples-str": lambda: tflab.save_and_reload(tf.Module(), w / "sar2", "x"),
        "sar-0rows": lambda: tflab.save_and_reload(tf.Module(), w / "sar3", {"x": np.ones((0, 4), np.float32)}),
        "tflite-missing": lambda: tflab.tflite_roundtrip(w / "nope", {"x": np.ones((2, 4), np.float32)}),
        "tflite-file": lambda: tflab.tflite_roundtrip(w / "afile", {"x": np.ones((2, 4), np.float32)}),
        "tflite-5": lambda: tflab.tflite_roundtrip(5, {"x": np.ones((2, 4), np.float32)}),
        "tflite-loop": lambda: tflab.tflite_roundtrip(w / "loopA", {"x": np.ones((2, 4), np.float32)}),
        "export-out5": lambda: tflab.export_model(tf.Module(), 5),
        "export-q-none": lambda: tflab.export_model(tf.Module(), w / "e1", quantize=None),
        "export-q-int": lambda: tflab.export_model(tf.Module(), w / "e2", quantize=3),
        "export-q-empty": lambda: tflab.export_model(tf.Module(), w / "e3", quantize=""),
        "export-q-set": lambda: tflab.export_model(tf.Module(), w / "e4", quantize={"none"}),
        "export-force-str": lambda: tflab.export_model(tf.Module(), w / "e5", force="yes"),
        "export-progress-int": lambda: tflab.export_model(tf.Module(), w / "e6", progress=1),
        "export-examples-5": lambda: tflab.export_model(T, w / "e7", quantize="none", examples=5),
        "export-examples-0rows": lambda: tflab.export_model(T, w / "e8", quantize="none",
                                                             examples={"x": np.ones((0, 4), np.float32)}),
        "export-fifo": lambda: tflab.export_model(T, w / "fifo", quantize="none"),
        "export-loop": lambda: tflab.export_model(T, w / "loopA", quantize="none", force=True),
        "export-model-5": lambda: tflab.export_model(5, w / "e9", quantize="none"),
        "export-model-missing": lambda: tflab.export_model("/nope.keras", w / "e10", quantize="none"),
    }
    for k, c in calls.items():
        api(f"api-{k}", c)
    api("api-runtime-arg", lambda: tflab.runtime_config(5), expect="arity")
    api("api-demo-arg", lambda: tflab.demonstrate_retracing("bogus"), expect="arity")


def main() -> int:
    import argparse

    global UsageError
    from tflab.cli import main as cli_main
    from tflab.errors import UsageError

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    w = Path(tempfile.mkdtemp(prefix="hostile_pass_"))
    (w / "u.py").write_text(USER)
    os.chdir(w)
    build(w)
    breaks = []
    before = set(os.listdir(w))
    n = 0
    for tid, kind, payload in TRIES:
        if not tid.startswith(args.only):
            continue
        n += 1
        out, err = io.StringIO(), io.StringIO()
        if kind == "cli":
            argv, expect, need_one_line = payload
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = cli_main(list(argv))
            except SystemExit as e:
                code = e.code
            except BaseException as e:
                breaks.append((tid, f"raised {type(e).__name__}: {e}"[:300]))
                continue
            e = err.getvalue()
            lines = [ln for ln in e.splitlines() if ln.startswith("tflab")]
            if code != expect:
                breaks.append((tid, f"exit {code}, expected {expect}: {e.strip()[-300:]}"))
            elif expect == 2 and ("Traceback" in e or (need_one_line and len(lines) != 1)):
                breaks.append((tid, f"not one line: {e.strip()[-300:]}"))
        else:
            fn, expect = payload
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    result = fn()
                breaks.append((tid, f"no error; returned {repr(result)[:200]}"))
            except UsageError as e:
                if "\n" in str(e).strip():
                    breaks.append((tid, f"UsageError of several lines: {str(e)[:200]}"))
            except TypeError as e:
                if not (expect == "arity" and "positional argument" in str(e)):
                    breaks.append((tid, f"TypeError: {str(e)[:200]}"))
            except BaseException as e:
                breaks.append((tid, f"{type(e).__name__}: {str(e)[:200]} @ "
                                    f"{traceback.extract_tb(e.__traceback__)[-1].filename.split('/')[-1]}"))
    left = {p for p in set(os.listdir(w)) - before if ".tmp-" in p or ".tflab-probe-" in p}
    if left:
        breaks.append(("leftovers", f"temporary entries left: {sorted(left)}"))
    print(f"tries: {n}; breaks: {len(breaks)}")
    for tid, what in breaks:
        print(f"  BREAK {tid}: {what}")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main())
