"""``tflab autograph FILE.py:FUNC --arg …``: lab step 5 on a user's function."""

from __future__ import annotations

import argparse
import sys

HELP = ("show AutoGraph's rewrite of FILE.py:FUNC (a unified diff) and what each "
        "if/for/while became for these arguments: an If/While op or Python at trace time")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:FUNC",
                   help="the function (or tf.function) to convert and trace")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] is a TensorSpec (None for an unknown dim), "
                        "NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--strict", action="store_true",
                   help="fail instead of warning when AutoGraph cannot transform a function "
                        "(sets AUTOGRAPH_STRICT_CONVERSION=1 while tracing)")
    p.add_argument("--no-diff", action="store_true", help="print only the statement table")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from tflab import _jsonutil
    from tflab._target import bind_args, load_target, parse_args
    from tflab.autograph import autograph_diff
    from tflab.errors import UsageError

    named = parse_args(args.arg)
    fn = load_target(args.target)
    if not callable(fn):
        raise UsageError(f"{args.target} is a {type(fn).__name__}, not a function; "
                         f"name a function or tf.function")
    from tflab.modes import _check_target

    _check_target(fn, args.target.rpartition(":")[2])  # a class or unbound method: say so first
    if not named and getattr(fn, "input_signature", None) is not None:
        call_args, call_kwargs = (), {}  # autograph_diff traces with the input_signature
    else:
        call_args, call_kwargs = bind_args(fn, named)
    report = autograph_diff(fn, *call_args, strict=True if args.strict else None, **call_kwargs)
    if args.json:
        print(_jsonutil.dumps(report))
        return 0
    print(report.to_text(color=sys.stdout.isatty(), diff_lines=0 if args.no_diff else None))
    return 0
