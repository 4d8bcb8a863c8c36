"""``tflab autograph FILE.py:FUNC --arg …``: lab step 5 on a user's function."""

from __future__ import annotations

import argparse
import sys

HELP = ("show AutoGraph's rewrite of FILE.py:FUNC (a unified diff) and what each "
        "if/for/while became for these arguments: an If/While op or Python at trace time")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab._api.cliargs import only_with

    only_with(p, "no_diff", lambda a: not a.json,
              "--no-diff shortens the text report, and --json prints no diff text: leave one of them out")

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
    from tflab.report import jsonable as _jsonutil
    from tflab._user.target import load_call
    from tflab.autograph import autograph_diff

    fn, call_args, call_kwargs = load_call(args.target, args.arg)
    from tflab._user.usercode import user_code

    with user_code(args.target.rpartition(":")[2], "while AutoGraph converted and traced it"):
        report = autograph_diff(fn, *call_args, strict=True if args.strict else None, **call_kwargs)
    if args.json:
        print(_jsonutil.dumps(report))
        return 0
    print(report.to_text(color=sys.stdout.isatty(), diff_lines=0 if args.no_diff else None))
    return 0
