"""``tflab diagnose FILE.py:FUNC --arg …``: why a tf.function fails, and the line to change."""

from __future__ import annotations

import argparse

HELP = ("trace FILE.py:FUNC and run it once; if it fails, print the culprit line, the kind of "
        "mistake and the fix (exit 0: traced and ran, 1: a problem was diagnosed, 2: bad input)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:FUNC", help="the function (or tf.function) to check")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] is a TensorSpec (None for an unknown dim), "
                        "NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")


def run(args: argparse.Namespace) -> int:
    from tflab.report import jsonable as _jsonutil
    from tflab._user.target import load_call
    from tflab.diagnosis import diagnose

    fn, call_args, call_kwargs = load_call(args.target, args.arg)
    d = diagnose(fn, *call_args, **call_kwargs)
    print(_jsonutil.dumps(d) if args.json else d.to_text())
    return 0 if d.ok else 1
