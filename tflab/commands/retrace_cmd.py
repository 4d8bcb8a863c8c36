"""``tflab retrace [--json] [--internal] SCRIPT.py [ARGS…]``: run a script, explain every tf.function trace.

The work is `tflab.retrace.log.trace_script`; this verb parses arguments and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

HELP = ("run a Python script and print, per tf.function object (each instance's method apart), "
        "its traces, why each one happened, and the body's Python side effects that ran only while tracing")

EPILOG = ("Options such as --json go BEFORE SCRIPT.py: everything after SCRIPT.py is passed to the "
          "script as its sys.argv[1:]. Exit status: 0, or 2 when the script raised or exited "
          "non-zero (the traces made until then are still printed). Note: ")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab.retrace.log import STALE_READ_NOTE

    p.epilog = EPILOG + STALE_READ_NOTE + "."
    p.add_argument("--json", action="store_true",
                   help="print a JSON report (the script's own stdout goes to stderr)")
    p.add_argument("--internal", action="store_true", help="also list TF's own helper functions")
    p.add_argument("--html", metavar="OUT.html", help="also write one self-contained HTML page: the trace "
                   "timeline of each tf.function and its newest FuncGraph as SVG")
    p.add_argument("--force", action="store_true", help="replace --html FILE if it exists")
    p.add_argument("script", metavar="SCRIPT.py", help="the script to run as __main__")
    args = p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                          help="arguments passed to the script (its sys.argv[1:]); optional")
    # argparse marks a REMAINDER positional required, so a bare `tflab retrace`
    # would name ARGS as missing too; it may be empty.
    args.required = False


def run(args: argparse.Namespace) -> int:
    from tflab.report.jsonable import to_jsonable
    from tflab.report.pages import html_output, keep_traced_functions, retrace_graphs, retrace_page
    from tflab.retrace.log import trace_script

    html = html_output(args.html, args.force)  # before the script runs
    keep = keep_traced_functions() if html is not None else contextlib.nullcontext([])
    # Under --json the script's prints would corrupt the JSON on stdout.
    redirect = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with redirect, keep as functions:
        result = trace_script(args.script, args.script_args, include_internal=args.internal)
    if html is not None:
        html.write(retrace_page(result, retrace_graphs(result, functions)))
    if args.json:
        print(json.dumps(to_jsonable(result.to_dict()), indent=2))
    else:
        print(result.to_text())
        if html is not None:
            print(f"wrote {args.html}")
    if result.error:
        # The script itself failed: the traces so far are printed above; exit 2
        # like every other bad input (tflab ran fine, the input did not).
        print(f"tflab retrace: error: {result.error}", file=sys.stderr)
        return 2
    return 0
