"""``tflab inspect FILE.py:FUNC --arg …``: lab step 1 on a user's function."""

from __future__ import annotations

import argparse
import os

HELP = "trace FILE.py:FUNC once and print its FuncGraph: ops, captures, signature, control flow"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:FUNC", help="the function (or tf.function) to trace")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] is a TensorSpec (None for an unknown dim), "
                        "NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--dot", metavar="OUT.dot", help="write the FuncGraph as Graphviz DOT "
                   "(OUT.svg renders it, which needs the Graphviz `dot` program)")
    p.add_argument("--max-ops", type=int, default=60, help="ops listed in text output (default: %(default)s; 0 for all)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from tflab import _jsonutil
    from tflab._target import load_call
    from tflab.tracing import trace_and_inspect

    if args.dot:
        _check_output_path(args.dot)
    fn, call_args, call_kwargs = load_call(args.target, args.arg)
    report = trace_and_inspect(fn, *call_args, **call_kwargs)
    if args.dot:
        _write_dot(report, args.dot)
    if args.json:
        print(_jsonutil.dumps(report))
    else:
        print(report.to_text(max_ops=None if args.max_ops == 0 else args.max_ops))
        if args.dot:
            print(f"wrote {args.dot}")
    return 0


def _check_output_path(path: str, flag: str = "--dot", example: str = "graph.dot") -> None:
    """Fails before any work when the file for ``flag`` cannot be written."""
    from tflab.errors import UsageError

    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory; give a file path such as {os.path.join(path, example)}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: folder {parent} does not exist; create it or pick another path")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{flag} {path}: folder {parent} is not writable")


def _write_dot(report, path: str) -> None:
    import shutil

    from tflab.errors import UsageError

    source = report.to_dot()
    tmp = path + ".tmp"
    if path.endswith(".svg"):
        if shutil.which("dot") is None:
            raise UsageError("rendering SVG needs the Graphviz `dot` program (apt-get install graphviz); "
                             "or write DOT with --dot OUT.dot")
        import graphviz

        svg = graphviz.Source(source).pipe(format="svg")
        with open(tmp, "wb") as f:
            f.write(svg)
    else:
        with open(tmp, "w") as f:
            f.write(source)
    os.replace(tmp, path)
