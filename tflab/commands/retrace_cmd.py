"""``tflab retrace [--json] [--internal] SCRIPT.py [ARGS…]``: run a script, explain every tf.function trace.

The work is `tflab.retrace.log.trace_script`; this verb parses arguments and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from typing import Any, Iterator

from tflab.errors import error_line

HELP = ("run a Python script and print, per tf.function object (each instance's method apart), "
        "its traces, why each one happened, and the body's Python side effects that ran only while tracing")

EPILOG = ("Options such as --json go BEFORE SCRIPT.py: everything after SCRIPT.py is passed to the "
          "script as its sys.argv[1:]. Exit status: 0, or 2 when the script raised or exited "
          "non-zero (the traces made until then are still printed). Note: ")


# FuncGraphs drawn on a retrace page (one per tf.function object, newest trace).
MAX_RETRACE_GRAPHS = 4


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab.retrace.log import STALE_READ_NOTE

    from tflab._api.cliargs import only_with

    only_with(p, "force", lambda a: bool(a.html),
              "--force replaces an existing --html file: give --html, or leave --force out")

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
    from tflab.report.pages import html_output, retrace_page
    from tflab.retrace.log import trace_script

    # argparse hands everything after SCRIPT.py to the script: one of tflab's own options there is the
    # script's now (`tflab retrace s.py --json` prints text), which the user rarely means. Said, not refused:
    # a script may take a --json of its own.
    own = [a for a in args.script_args if a.split("=", 1)[0] in ("--json", "--internal", "--html", "--force")]
    if own:
        print(f"tflab retrace: note: {' '.join(own)} after {args.script} is passed to the script (its sys.argv); "
              f"tflab's own options go before it: tflab retrace {' '.join(own)} {args.script}", file=sys.stderr)
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
        print(error_line("retrace", result.error), file=sys.stderr)
        return 2
    return 0


# --------------------------------------------------------------------------- the page's FuncGraphs

class _PinnedLevelHandler(logging.Handler):
    """Keeps the traced `tf.function` objects while ``tflab retrace`` runs a script.

    ``tflab.retrace.log.capture_trace_events`` raises every existing handler of
    the ``tensorflow`` logger to the old threshold so nothing extra is
    printed; this handler prints nothing and must see TF's level-1 "Creating
    new FuncGraph" records, so its level stays 1.
    """

    def __init__(self) -> None:
        super().__init__(level=1)
        self.functions: list[Any] = []  # distinct Function objects, first-trace order

    def setLevel(self, level: Any) -> None:  # noqa: N802 (logging's name)
        pass

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if not (isinstance(record.msg, str) and record.msg.startswith("Creating new FuncGraph")):
                return
            fn = _traced_function()
            if fn is not None and not any(f is fn for f in self.functions):
                self.functions.append(fn)
        except Exception:  # a log handler must never break the user's program
            return


def _traced_function() -> Any:
    """The `tf.function` (a `tf.types.experimental.PolymorphicFunction`) being traced: ``self`` of its nearest frame."""
    import tensorflow as tf

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith("polymorphic_function.py"):
            obj = frame.f_locals.get("self")
            if isinstance(obj, tf.types.experimental.PolymorphicFunction):
                return obj
        frame = frame.f_back
    return None


@contextlib.contextmanager
def keep_traced_functions() -> Iterator[list]:
    """Yields a list that fills with the tf.function objects traced inside the block (kept alive)."""
    logger = logging.getLogger("tensorflow")
    handler = _PinnedLevelHandler()
    logger.addHandler(handler)
    try:
        yield handler.functions
    finally:
        logger.removeHandler(handler)


def _newest_concrete(fn: Any) -> Any:
    from tflab._tf.saved_model import traced_concrete_functions

    try:
        cfs = traced_concrete_functions(fn)  # TF 2.21: the trace cache's values, oldest first
    except Exception:
        return None
    return cfs[-1] if cfs else None


def retrace_graphs(result: Any, functions: list) -> list:
    """The newest FuncGraph (`TraceReport`) of each tf.function in ``result``, up to `MAX_RETRACE_GRAPHS`.

    ``functions`` are the objects `keep_traced_functions` kept; the i-th
    group of a qualified name in ``result`` is the i-th object with that name
    (both are in first-trace order).
    """
    from tflab.tracing import inspect_concrete_function

    by_name: dict[str, list] = {}
    for fn in functions:
        name = getattr(getattr(fn, "python_function", None), "__qualname__", None) or getattr(fn, "__name__", "")
        by_name.setdefault(name, []).append(fn)
    used: dict[str, int] = {}
    reports = []
    for group in result.functions:
        i = used.get(group.function_name, 0)
        used[group.function_name] = i + 1
        candidates = by_name.get(group.function_name) or [fn for n, fns in by_name.items()
                                                     if n.endswith(group.function_name) for fn in fns]
        if i >= len(candidates):
            continue
        cf = _newest_concrete(candidates[i])
        if cf is not None:
            reports.append(inspect_concrete_function(cf, name=group.label or group.function_name))
        if len(reports) >= MAX_RETRACE_GRAPHS:
            break
    return reports
