"""``tflab inspect FILE.py:FUNC --arg …``: lab step 1 on a user's function."""

from __future__ import annotations

import argparse

from tflab._api.cliargs import int_at_least

HELP = "trace FILE.py:FUNC once and print its FuncGraph: ops, captures, signature, control flow"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab.commands.preflight_checks import EXAMPLES_HELP as _EXAMPLES_HELP  # no numpy: --help stays fast

    from tflab._api.cliargs import only_with

    only_with(p, "force", lambda a: bool(a.dot),
              "--force overwrites an existing --dot file: give --dot, or leave --force out")
    only_with(p, "max_ops", lambda a: not a.json,
              "--max-ops sets how many ops the text report lists, and --json lists every op: leave one of them out")

    p.add_argument("target", metavar="FILE.py:FUNC", help="the function (or tf.function) to trace")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] is a TensorSpec (None for an unknown dim), "
                        "NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--examples", metavar="FILE.npz", help=_EXAMPLES_HELP)
    p.add_argument("--dot", metavar="OUT.dot", help="write the FuncGraph as Graphviz DOT "
                   "(OUT.svg renders it, which needs the Graphviz `dot` program)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --dot file")
    p.add_argument("--tensorboard", metavar="DIR", help="also write the FuncGraph as a TensorBoard event file "
                   "under DIR (tensorboard --logdir DIR, Graphs dashboard); an existing folder is kept")
    p.add_argument("--max-ops", type=int_at_least(0), default=60,
                   help="ops listed in text output (default: %(default)s; 0 for all)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from tflab.report import jsonable as _jsonutil
    from tflab._io.paths import output_path
    from tflab.examples import load_call_with_examples
    from tflab._user.usercode import user_code
    from tflab.tracing import trace_and_inspect

    from tflab.report.pages import tensorboard_output, write_tensorboard

    dot = (output_path(args.dot, "--dot", example="graph.dot", overwrite=args.force)
           if args.dot else None)  # before any work; an existing file is kept unless --force
    if args.tensorboard is not None:
        from tflab._io.path_checks import check_tf_path_text

        check_tf_path_text(args.tensorboard, "--tensorboard")  # tf.summary's event writer: UTF-8 paths only
    board = tensorboard_output(args.tensorboard)
    if dot is not None and args.dot.endswith(".svg"):
        import shutil

        from tflab.errors import UsageError

        if shutil.which("dot") is None:
            raise UsageError("rendering SVG needs the Graphviz `dot` program (apt-get install graphviz); "
                             "or write DOT with --dot OUT.dot")
    fn, call_args, call_kwargs = load_call_with_examples(args.target, args.arg, args.examples)
    if "examples" in call_kwargs:  # the API's own keyword: the function's parameter is bound to it here
        import functools

        fn = functools.partial(fn, examples=call_kwargs.pop("examples"))
    with user_code(args.target.rpartition(":")[2], "while tracing"):
        report = trace_and_inspect(fn, *call_args, **call_kwargs)
    if dot is not None:
        source = report.to_dot()
        if args.dot.endswith(".svg"):
            import graphviz

            dot.write(graphviz.Source(source).pipe(format="svg"))
        else:
            dot.write(source)
    event = write_tensorboard(board, report) if board is not None else None
    if args.json:
        print(_jsonutil.dumps(report))
    else:
        print(report.to_text(max_ops=None if args.max_ops == 0 else args.max_ops))
        if args.dot:
            print(f"wrote {args.dot}")
        if event:
            print(f"wrote {event} (tensorboard --logdir {args.tensorboard})")
    return 0
