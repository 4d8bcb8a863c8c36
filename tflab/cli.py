"""The ``tflab`` command line: one verb per lab concern, after ``saved_model_cli``.

Each verb lives in ``tflab/commands/<verb>.py`` and defines ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Expected mistakes raise
`tflab.errors.TflabError`; this module prints them as one line and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# verb -> module under tflab.commands (imported lazily: TF import is slow).
VERBS = {
    "tour": "tour",
    "inspect": "inspect_cmd",
    "retrace": "retrace_cmd",
    "autograph": "autograph_cmd",
    "compare": "compare_cmd",
    "export": "export_cmd",
    "build-op": "build_op_cmd",
    "env": "env_cmd",
}


def _quiet_tf() -> None:
    """Imports TF with its C++ start-up lines silenced.

    The wheel prints "Could not find cuda drivers" and "failed call to cuInit"
    through absl before logging is initialised, ignoring TF_CPP_MIN_LOG_LEVEL,
    so stderr's file descriptor is pointed at /dev/null while TF loads and
    enumerates devices. Python-level errors are still raised normally.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf

        tf.config.list_physical_devices()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is ONE line (``tflab VERB: error: ...``), exit 2.

    argparse's default prints the whole usage block before the error.
    """

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = _OneLineParser(
        prog="tflab",
        description="TensorFlow tracing and export lab: FuncGraphs, retracing, AutoGraph, "
                    "XLA, SavedModel and LiteRT round trips.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    modules = {}
    for verb, modname in VERBS.items():
        try:
            mod = importlib.import_module(f"tflab.commands.{modname}")
        except ModuleNotFoundError as e:
            if e.name == f"tflab.commands.{modname}":
                continue  # verb not built yet
            raise
        p = sub.add_parser(verb, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        modules[verb] = mod
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tflab`` console script. Returns the exit code."""
    _quiet_tf()
    from tflab.errors import TflabError

    parser, modules = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.verb:
        # Name the verb in the error: "tflab env: error: unrecognized arguments: --bogus".
        sub = parser._subparsers._group_actions[0].choices[args.verb]
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not args.verb:
        parser.print_help()
        return 2
    try:
        return int(modules[args.verb].run(args) or 0)
    except TflabError as e:
        print(f"tflab {args.verb}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tflab {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
