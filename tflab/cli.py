"""The ``tflab`` command line: one verb per lab concern, after ``saved_model_cli``.

Each verb lives in ``tflab/commands/<verb>.py`` and defines ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Expected mistakes raise
`tflab.errors.TflabError`; this module prints them as one line and exits 2.
A verb writes user paths through `tflab._paths.output_path`, calls user code
inside `tflab._usercode.user_code`, runs signatures with
`tflab._usercode.run_signature`, and types numeric options with
`tflab._cliargs` (see those modules).

Rules for verb modules:

* **No TensorFlow (or Keras) import at module import time or in
  ``add_arguments``.** The ``tflab`` console script (`supervise`) builds
  the parser of every verb before it starts the child that runs one, so
  ``tflab --help`` and ``tflab VERB --bogus`` stay well under 0.5 s
  (``tests/test_hostile.py::test_parsing_imports_no_tensorflow``). Import
  TF inside ``run``.
* Print the report to ``sys.stdout`` from ``run`` (under the supervisor that
  is the report pipe); progress and notes go to stderr.

Entry points: `supervise` (the console script and ``python -m tflab``) runs
the verb in one child process through `tflab._subprocess.run_child`; `main`
runs it in this process (tests, ``TFLAB_IN_PROCESS=1``).

Exit codes: 0 success; 1 the work ran but a check failed (``export``: a
variant failed or exceeded its bound); 2 bad input, one ``tflab VERB: error:``
line (argparse errors too; the user's ``os._exit``; a bad ``XLA_FLAGS``);
70 the child crashed (`tflab._subprocess.CRASH_EXIT`); 130 interrupted
(Ctrl-C); 141 stdout closed or broken; 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
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
    "lower": "lower_cmd",
    "diagnose": "diagnose_cmd",
    "export": "export_cmd",
    "build-op": "build_op_cmd",
    "precision": "precision_cmd",
    "distribute": "distribute_cmd",
    "env": "env_cmd",
    "check-tflite": "check_tflite_cmd",
}


def _quiet_tf(sink_fd: int | None = None) -> None:
    """Imports TF with its C++ start-up lines silenced.

    The wheel prints "Could not find cuda drivers" and "failed call to cuInit"
    through absl before logging is initialised, ignoring TF_CPP_MIN_LOG_LEVEL,
    so stderr's file descriptor is pointed at /dev/null while TF loads and
    enumerates devices. Python-level errors are still raised normally.

    Args:
        sink_fd: where those lines go instead (the supervisor's quiet file, so
            a fatal ``F…`` line during the import can still be quoted);
            default /dev/null.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY) if sink_fd is None else os.dup(sink_fd)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf

        tf.config.list_physical_devices()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class _OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``tflab VERB: error: …``), exit 2.

    argparse's default prints the whole usage block before the error; the lab's
    contract for an expected mistake is one line that says what was wrong and
    where to look (``--help``).
    """

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        # An option given an empty value (``--out ""``, ``--dot ""``) is a mistake:
        # the verbs' ``if args.dot:`` would silently ignore it (no file written)
        # or fall back to the default folder. argparse accepts "" for any str option.
        ns, extras = super().parse_known_args(args, namespace)
        for a in self._actions:
            if not a.option_strings or a.nargs == 0 or a.type not in (None, str):
                continue
            value = getattr(ns, a.dest, None)
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, str) and not v.strip() for v in values):
                self.error(f"argument {a.option_strings[-1]}: empty value; give a value or leave "
                           f"the option out")
        return ns, extras


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


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None):
    """``(args, None)``, or ``(None, code)`` for ``--help`` (0), a one-line usage error (2) or no verb (2)."""
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.verb:
            # Name the verb in the error: "tflab env: error: unrecognized arguments: --bogus".
            sub = parser._subparsers._group_actions[0].choices[args.verb]
            sub.error(f"unrecognized arguments: {' '.join(extra)}")
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as e:  # --help (0) or a one-line argparse error (2): return, don't exit
        return None, int(e.code or 0)
    if not args.verb:
        parser.print_help()
        return None, 2
    return args, None


def main(argv: list[str] | None = None, *, _channel=None) -> int:
    """Runs one verb in THIS process and returns its exit code (tests, ``TFLAB_IN_PROCESS=1``).

    The ``tflab`` console script is `supervise`, which runs this in a child
    process. In-process, what user code does to the process itself
    (``os._exit``, closing fd 1) cannot be caught.
    """
    from tflab._usercode import cli_verb, describe
    from tflab.errors import Terminated, TflabError

    parser, modules = build_parser()
    args, code = _parse(parser, argv)
    if args is None:
        return code
    # SIGTERM unwinds like Ctrl-C in every verb (its default action killed tflab at once: a tour's
    # half-written --out folder, no "terminated" line); export installs the same handler itself.
    from tflab.errors import install_sigterm_handler, raise_if_terminated

    previous_term = install_sigterm_handler()
    real_stdout = sys.stdout
    try:
        if _channel is not None:
            _channel.ready()  # from here a forwarded Ctrl-C/SIGTERM is handled below
        # Inside the try: Ctrl-C or SIGTERM during TF's seconds-long import is "interrupted" (B9).
        _quiet_tf(_channel.quiet_fd if _channel is not None else None)
        if getattr(args, "json", False):
            sys.stdout = _ReportOnlyStdout(real_stdout, sys.stderr)
        with cli_verb():
            # ISA caps oneDNN and XLA would ignore silently: refused before any verb runs.
            from tflab.isa_caps import read_isa_caps

            read_isa_caps()
            code = int(modules[args.verb].run(args) or 0)
        raise_if_terminated()  # SIGTERM whose exception was lost in a finalizer: still 143
        return code
    except TflabError as e:
        print(f"tflab {args.verb}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tflab {args.verb}: interrupted", file=sys.stderr)
        return 130
    except Terminated:  # SIGTERM during work that installs the handler (export): cleaned up
        print(f"tflab {args.verb}: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        # `tflab VERB | head`: the reader closed stdout. Not a bug and not bad input; exit like a
        # process killed by SIGPIPE (128 + 13), quietly. stdout is pointed at /dev/null so the
        # interpreter's final flush does not print "Exception ignored … BrokenPipeError"
        # (the recipe in Python's signal docs, "Note on SIGPIPE").
        if not _stdout_is_broken():
            raise  # a pipe of the user's code or of tflab itself: a real error
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception:
        raise  # a tflab bug: the traceback is what a bug report needs
    except BaseException as e:
        # Last resort for user code a verb called outside tflab._usercode.user_code:
        # its sys.exit(5) or BaseException is one line, exit 2, not tflab exiting 5.
        # Name what the user gave (FILE.py:FUNC, MODEL, SCRIPT.py), not "user code".
        name = next((v for v in (getattr(args, k, None) for k in ("target", "model", "script"))
                     if isinstance(v, str) and v), "user code")
        print(f"tflab {args.verb}: error: {describe(e, name, f'while tflab {args.verb} ran')}", file=sys.stderr)
        return 2
    finally:
        if isinstance(sys.stdout, _ReportOnlyStdout):
            sys.stdout = real_stdout
        if previous_term is not None:
            import signal

            signal.signal(signal.SIGTERM, previous_term)


def supervise(argv: list[str] | None = None) -> int:
    """Entry point of the ``tflab`` console script: parse here, run the verb in one child process.

    Parsing needs no TensorFlow (verb modules' ``add_arguments`` import none),
    so ``--help`` and usage errors are quick. The verb then runs in a child
    Python process (`tflab._subprocess.run_child`) whose report comes back
    through its own pipe; this process owns stdout and names every abnormal
    end of the child in one ``tflab VERB: error: …`` line
    (`tflab._subprocess.describe_end`). ``TFLAB_IN_PROCESS=1`` runs the verb
    in this process instead (`main`).

    Returns:
        The exit code (README table): 0, 1, 2, 70 (crash), 130, 141, 143.
    """
    try:
        os.fstat(1)
    except OSError:  # `tflab env >&-`: no stdout to write the report to (B15)
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing else may take fd 1
        return 141
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser, _ = build_parser()
        args, code = _parse(parser, argv)
        if args is None:
            sys.stdout.flush()  # `tflab --help | head -1`: EPIPE here, not in the interpreter's final flush
            return code
        if os.environ.get("TFLAB_IN_PROCESS") == "1":
            return main(argv)
        # ISA caps oneDNN and XLA would ignore silently: one line before a child (and TF) starts.
        from tflab.errors import TflabError
        from tflab.isa_caps import read_isa_caps

        try:
            read_isa_caps()
        except TflabError as e:
            print(f"tflab {args.verb}: error: {e}", file=sys.stderr)
            return 2
        from tflab import _subprocess

        cmd = [sys.executable, "-c", "import sys; from tflab.cli import _child_main; sys.exit(_child_main())",
               *argv]
        end = _subprocess.run_child(cmd)
    except KeyboardInterrupt:  # before the child started
        print("tflab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _quiet_141()
    code, line = _subprocess.describe_end(end, _memory_limit_text())
    if line is not None:
        print(f"tflab {args.verb}: {line}", file=sys.stderr)
    if code == 141:
        return _quiet_141()
    return code


def _memory_limit_text() -> str | None:
    from tflab._memory import limit_text

    with contextlib.suppress(Exception):
        return limit_text()
    return None


def _quiet_141() -> int:
    """141 for a stdout whose reader is gone; stdout pointed at /dev/null so the final flush is quiet."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141


def _child_main() -> int:
    """The child's side of `supervise`: the report goes to the fd the parent passed, status on another."""
    from tflab._subprocess import ChildChannel

    channel = ChildChannel.open()
    argv = sys.argv[1:]
    code = main(argv, _channel=channel)
    if channel is None:
        return code
    verb = next((a for a in argv if a in VERBS), "")
    return channel.finish(code, verb)


class _ReportOnlyStdout:
    """``sys.stdout`` under ``--json``: only the verb's own writes reach stdout, the rest goes to stderr.

    A user's ``print`` while tflab traces or runs their function (and any
    library chatter) landed before the JSON document and made stdout invalid
    JSON for ``jq`` or ``json.load``. A write counts as the verb's when the
    first caller outside the standard library (``print``, ``json.dump``) is
    a module under ``tflab/commands/``, where every verb prints its report.
    """

    _VERBS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "commands") + os.sep
    _STDLIB = os.path.dirname(os.path.abspath(argparse.__file__)) + os.sep

    def __init__(self, out, err):
        self._out, self._err = out, err

    def write(self, text: str) -> int:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(self._STDLIB):
            frame = frame.f_back
        verb = frame is not None and frame.f_code.co_filename.startswith(self._VERBS_DIR)
        return (self._out if verb else self._err).write(text)

    def flush(self) -> None:
        self._out.flush()
        self._err.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding, …: the real stdout's
        return getattr(self._out, name)


def _stdout_is_broken() -> bool:
    """True when stdout is a pipe whose reader is gone (poll(2) reports POLLERR on its write end)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(supervise())
