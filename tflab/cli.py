"""The ``tflab`` command line: one verb per lab concern, after ``saved_model_cli``.

Each verb lives in ``tflab/commands/<verb>.py`` and defines ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Expected mistakes raise
`tflab.errors.TflabError`; this module prints them as one line and exits 2.
A verb writes user paths through `tflab._io.paths.output_path`, calls user code
inside `tflab._user.usercode.user_code`, runs signatures with
`tflab._user.usercode.run_signature`, and types numeric options with
`tflab._api.cliargs` (see those modules).

Rules for verb modules:

* **No TensorFlow (or Keras) import at module import time or in
  ``add_arguments``.** The ``tflab`` console script (`supervise`) builds
  the parser of every verb before it starts the child that runs one, so
  ``tflab --help`` and ``tflab VERB --bogus`` stay well under 0.5 s
  (``tests/commands/test_cli_hostile.py::test_parsing_imports_no_tensorflow``). Import
  TF inside ``run``.
* Print the report to ``sys.stdout`` from ``run`` (under the supervisor that
  is the report pipe); progress and notes go to stderr.

Entry points: `supervise` (the console script and ``python -m tflab``) runs
the verb in one child process through `tflab.process.supervisor.run_child`; `main`
runs it in this process (tests, ``TFLAB_IN_PROCESS=1``).

Exit codes: 0 success; 1 the work ran but a check failed (``export``: a
variant failed or exceeded its bound); 2 bad input, one ``tflab VERB: error:``
line (argparse errors too; the user's ``os._exit``; a bad ``XLA_FLAGS``);
70 the child crashed (`tflab.process.supervisor.CRASH_EXIT`); 130 interrupted
(Ctrl-C); 141 stdout closed or broken; 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from pathlib import Path

# One-line argparse errors, empty values and `only_with` rules: `tflab._api.cliargs.OneLineParser`.
from tflab._api.cliargs import OneLineParser as _OneLineParser
from tflab.errors import error_line as _error_line

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


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """The ``tflab`` parser and the verb modules.

    Args:
        only: the verb the command line names; the other verbs get their sub-parser (``--help``
            lists them) without their options, whose ``add_arguments`` may import more (retrace's
            epilog: 0.2 s of the pre-TF budget). None: every verb's options.
    """
    from tflab._api.version import package_version
    parser = _OneLineParser(prog="tflab", description="TensorFlow tracing and export lab: FuncGraphs, "
                            "retracing, AutoGraph, XLA, SavedModel and LiteRT round trips.")
    parser.add_argument("--version", action="version", version=f"tflab {package_version()}")
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
        if only is None or verb == only:
            mod.add_arguments(p)
        modules[verb] = mod
    return parser, modules


def _named_verb(argv: list[str] | None) -> str | None:
    """The verb a command line names (its first word, the only place the top-level parser takes one)."""
    argv = sys.argv[1:] if argv is None else argv
    return argv[0] if argv and argv[0] in VERBS else None


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
    if not args.verb:  # a usage error: one line on stderr, as argparse's own (the verbs: tflab --help)
        verbs = ", ".join(parser._subparsers._group_actions[0].choices)
        print(f"tflab: error: give a verb ({verbs}); tflab --help says what each does", file=sys.stderr)
        return None, 2
    return args, None


_NPZ = ("file", "an .npz with one array per input name")  # every verb's --examples
# verb -> dests naming an input path: ("file" | "folder" | "any", words); FILE.py:FUNC targets name their file.
_INPUTS = {
    "inspect": {"target": ("target", "a .py file"), "examples": _NPZ},
    "autograph": {"target": ("target", "a .py file")},
    "compare": {"target": ("target", "a .py file"), "examples": _NPZ},
    "diagnose": {"target": ("target", "a .py file"), "examples": _NPZ},
    "precision": {"target": ("target", "a .py file"), "examples": _NPZ},
    "distribute": {"target": ("target", "a .py file")},
    "retrace": {"script": ("file", "a path to a .py file")},
    "export": {"model": ("model", "a .keras file, a SavedModel folder or FILE.py:OBJ"), "examples": _NPZ},
    "check-tflite": {"model": ("file", "a .tflite file"),
                     "saved_model": ("folder", "the SavedModel folder it was converted from"), "examples": _NPZ},
    "tour": {"model": ("any", "a .keras file or a SavedModel folder")},
    "lower": {"target": ("target", "a .py file"), "examples": _NPZ},
}
# verb -> file outputs (dest, flag, example name); folder outputs are checked by their own rule.
_FILE_OUTPUTS = {"inspect": [("dot", "--dot", "graph.dot")], "compare": [("hlo", "--hlo", "hlo.txt")],
                 "export": [("html", "--html", "report.html")], "retrace": [("html", "--html", "report.html")],
                 "tour": [("html", "--html", "report.html")],
                 "check-tflite": [("node_data", "--node-data", "nodes.json")],
                 "lower": [("html", "--html", "lowering.html")]}
_ARG_GRAMMAR = ("inspect", "autograph", "compare", "diagnose", "precision", "lower", "distribute")
# Verbs that draw numpy random inputs from the specs (at most `_cliargs.NUMPY_MAX_DIMS` dims each; the first
# two draw them for every spec as given, so a None dim, a string dtype or over 4 GiB is refused too).
_DRAWS_INPUTS = ("compare", "precision", "diagnose")
# verb -> its folder output, published whole by a rename (`check_folder_out`'s rules), and the noun.
_FOLDER_OUTPUTS = {"export": "export", "tour": "tour", "lower": "lowering"}


def preflight(verb: str, args: argparse.Namespace) -> None:
    """Checks every argument that needs no TensorFlow, before the TF child starts (under 0.5 s).

    In the verbs' own order: option values (the verb module's ``check_options(args)``: word lists,
    ``--loss-scale``), output paths (`tflab._io.paths.output_path`, `tflab._io.paths.check_folder_out`,
    which also remove the ``.*.tmp-*`` folders of killed runs there; ``--html`` equal to or inside
    ``--out`` is refused: publishing one would replace or foul the other), then input paths, probed
    without opening them (`tflab._io.paths.input_path`: a FIFO, a device, a socket, a symlink loop, a
    folder each named), the ``FILE.py:FUNC`` grammar, then the ``--arg`` grammar
    (`tflab._api.cliargs.check_arg_grammar`: dtype names, dims, static dims for ``lower``, numpy's 64 dims
    where random inputs are drawn). The child checks them again: this is the quick answer, not the
    only one.

    Raises:
        UsageError: the first bad argument, in one line.
    """
    from tflab._io import paths as _paths
    from tflab._api.cliargs import NUMPY_MAX_DIMS, check_arg_grammar
    from tflab.commands import preflight_checks as _preflight

    module = importlib.import_module(f"tflab.commands.{VERBS[verb]}")
    check_options = getattr(module, "check_options", None)
    if check_options is not None:
        check_options(args)
    force = bool(getattr(args, "force", False))
    folder_out = getattr(args, "out", None) if verb in _FOLDER_OUTPUTS else None
    _preflight.check_outputs_apart(*_preflight.paths_of(args, _FILE_OUTPUTS.get(verb, []), folder_out,
                                                         _INPUTS.get(verb, {})))
    if isinstance(folder_out, str) and folder_out:
        _paths.check_not_parent_ref(folder_out, "--out")
    for dest, flag, example in _FILE_OUTPUTS.get(verb, []):
        value = getattr(args, dest, None)
        if isinstance(value, str) and value:
            _paths.check_not_parent_ref(value, flag)
            if getattr(args, "json", False):
                _preflight.check_not_stdout(value, flag)
            if isinstance(folder_out, str) and folder_out:
                _preflight.check_file_not_in_folder(value, flag, folder_out, "--out")
            _paths.output_path(value, flag, overwrite=force, example=example)
    if isinstance(folder_out, str) and folder_out:
        _paths.check_folder_out(folder_out, "--out", force, noun=_FOLDER_OUTPUTS[verb], empty_ok=verb == "tour")
        _paths.output_path(folder_out, "--out", folder=True, exclusive=not force, noun=_FOLDER_OUTPUTS[verb])
    if getattr(args, "tensorboard", None):
        _paths.output_path(args.tensorboard, "--tensorboard", folder=True)
    for dest, (kind, words) in _INPUTS.get(verb, {}).items():
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value:
            continue
        if kind == "target":  # FILE.py:FUNC
            path = _preflight.check_target(value, *(("FILE.py:STEP", "examples/model.py:step") if verb == "distribute" else ()))
            _paths.input_path(path, "file", want="file", what="a path to a .py file")
            _preflight.check_py(path, "file")
        elif kind == "model":  # export's MODEL: FILE.py:OBJ, a .keras file or a SavedModel folder
            path, sep, name = value.rpartition(":")
            if value.endswith(".py"):  # a .py file without :OBJ: what is there first, then the grammar
                _paths.input_path(value, "MODEL", want="any", what=words)
                _preflight.check_target(value, "FILE.py:OBJ", "examples/model.py:build")
            elif sep and path.endswith(".py"):
                path = _preflight.check_target(value, "FILE.py:OBJ", "examples/model.py:build")
                _paths.input_path(path, "file", want="file", what="a .py file")
            else:
                _paths.input_path(value, "MODEL", want="any", what=words)
                _preflight.check_saved_model_folder(value, "MODEL")
        else:
            flag = {"model": "MODEL.tflite" if verb == "check-tflite" else "--model", "saved_model": "SAVED_MODEL",
                    "examples": "--examples", "script": "script"}.get(dest, dest)
            _paths.input_path(value, flag, want=kind, what=words)
            if dest == "examples":  # a readable zip archive; its names are matched once TF loads
                _paths.check_npz(value, flag)
            elif kind in ("folder", "any"):
                _preflight.check_saved_model_folder(value, flag)
    _preflight.check_contents(verb, args)  # once every input path is judged: a script's syntax, a .tflite's id
    if verb in _ARG_GRAMMAR:
        # With --examples the arrays replace the random values: a spec for a parameter they feed may
        # have None dims (it is matched against the array's shape in `tflab.examples.example_inputs`);
        # a spec the arrays leave unfed is still refused by `materialize` in the same words.
        fed = bool(getattr(args, "examples", None))
        check_arg_grammar(getattr(args, "arg", None), static=verb == "lower" and not fed,
                          draws=verb in _DRAWS_INPUTS[:2] and not fed,
                          max_rank=NUMPY_MAX_DIMS if verb in _DRAWS_INPUTS else None, batch=verb == "distribute")


def main(argv: list[str] | None = None, *, _channel=None) -> int:
    """Runs one verb in THIS process and returns its exit code (tests, ``TFLAB_IN_PROCESS=1``).

    The ``tflab`` console script is `supervise`, which runs this in a child
    process. In-process, what user code does to the process itself
    (``os._exit``, closing fd 1) cannot be caught.
    """
    from tflab._user.usercode import cli_verb, describe
    from tflab.errors import Terminated, TflabError

    parser, modules = build_parser(_named_verb(argv))
    args, code = _parse(parser, argv)
    if args is None:
        return code
    if _channel is None:  # under the supervisor, it ran the pre-flight before starting this child
        refusal = _environment_refusal()
        if refusal is not None:
            print(_error_line(args.verb, refusal), file=sys.stderr)
            return 2
        try:
            from tflab.isa_caps import read_isa_caps

            read_isa_caps()  # a bad environment first, as the supervisor does: it concerns every verb
            preflight(args.verb, args)
        except TflabError as e:
            print(_error_line(args.verb, e), file=sys.stderr)
            return 2
    from tflab.errors import install_sigint_handler

    previous_int = install_sigint_handler()
    # SIGTERM unwinds like Ctrl-C in every verb (its default action killed tflab at once: a tour's
    # half-written --out folder, no "terminated" line); export installs the same handler itself.
    from tflab.errors import install_sigterm_handler, raise_if_terminated

    previous_term = install_sigterm_handler()
    previous_ending = _end_like_sigterm()
    real_stdout = sys.stdout
    try:
        if _channel is not None:
            _channel.ready()  # from here a forwarded Ctrl-C/SIGTERM is handled below
        # A verb's set-up that must precede TF's import (lower: XLA_FLAGS, which XLA reads once).
        before_tf = getattr(modules[args.verb], "before_tf", None)
        if before_tf is not None:
            before_tf(args)
        # Inside the try: Ctrl-C or SIGTERM during TF's seconds-long import is "interrupted".
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
        print(_error_line(args.verb, e), file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        from tflab.commands.endings import user_keyboard_interrupt

        own = user_keyboard_interrupt(args.verb, args, e)
        if own is not None:
            return own
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
            sys.stdout.repointed()  # the report's guard: this /dev/null is tflab's, not the user's code's
        return 141
    except Exception:
        raise  # a tflab bug: the traceback is what a bug report needs
    except BaseException as e:
        # Last resort for user code a verb called outside tflab._user.usercode.user_code:
        # its sys.exit(5) or BaseException is one line, exit 2, not tflab exiting 5.
        # Name what the user gave (FILE.py:FUNC, MODEL, SCRIPT.py), not "user code".
        name = next((v for v in (getattr(args, k, None) for k in ("target", "model", "script"))
                     if isinstance(v, str) and v), "user code")
        print(_error_line(args.verb, describe(e, name, f'while tflab {args.verb} ran')), file=sys.stderr)
        return 2
    finally:
        if isinstance(sys.stdout, _ReportOnlyStdout):
            sys.stdout = real_stdout
        from tflab._io.fifo_out import release_fifos

        release_fifos()  # a FIFO output the verb did not write (it failed): its reader sees the end
        import signal

        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        for s, h in previous_ending.items():
            signal.signal(s, h)
        if previous_int is not None and _channel is None:
            signal.signal(signal.SIGINT, previous_int)


def _end_like_sigterm() -> dict:
    """SIGHUP, SIGQUIT and SIGUSR1 get SIGTERM's handler (cleanup, one "terminated" line) in this process.

    Their default action ended the process at once: no line, ``.OUT.tmp-*`` and ``$TMPDIR/tflab_*``
    left. A signal the caller ignores (``nohup``) stays ignored.

    Returns:
        The previous handlers, to restore.
    """
    import signal
    import threading

    previous: dict = {}
    term = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or not callable(term):
        return previous
    for s in (signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
        if signal.getsignal(s) is signal.SIG_DFL:
            previous[s] = signal.signal(s, term)
    return previous


def _allocator_env(environ) -> dict[str, str]:
    """TF's BFC CPU allocator for the verb's processes, unless the user chose one (``TF_CPU_ALLOCATOR_USE_BFC``).

    TF's default CPU allocator without oneDNN is malloc, which maps fresh pages for every tensor past
    its mmap threshold and returns them when it is freed: each backward pass of the end-to-end bound
    faulted its gradients' pages in again (ConvNeXtTiny at 32×32, 2 cores: 40 M page faults, more
    system than user time). BFC keeps the freed memory for the next pass; values are the same (the
    allocator places tensors, it computes nothing). `tflab.runtime` names the allocator and says tflab
    chose it.
    """
    from tflab.runtime import BFC_ENV

    if BFC_ENV in environ:
        return {}
    return {BFC_ENV: "true", "TFLAB_CPU_ALLOCATOR_SET": "1"}


def supervise(argv: list[str] | None = None) -> int:
    """Entry point of the ``tflab`` console script: parse here, run the verb in one child process.

    Parsing needs no TensorFlow (verb modules' ``add_arguments`` import none),
    so ``--help`` and usage errors are quick. The verb then runs in a child
    Python process (`tflab.process.supervisor.run_child`) whose report comes back
    through its own pipe; this process owns stdout and names every abnormal
    end of the child in one ``tflab VERB: error: …`` line
    (`tflab.process.supervisor.describe_end`). ``TFLAB_IN_PROCESS=1`` runs the verb
    in this process instead (`main`).

    Returns:
        The exit code (README table): 0, 1, 2, 70 (crash), 130, 141, 143.
    """
    try:
        os.fstat(1)
    except OSError:  # `tflab env >&-`: no stdout to write the report to
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing else may take fd 1
        return 141
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser, _ = build_parser(_named_verb(argv))
        from tflab._api.cliargs import parse_watched

        args, code = parse_watched(lambda: _parse(parser, argv))  # a lost --help/--version: 141 or 2, not 0
        if args is None:
            return code
        refusal = _environment_refusal()  # junk TFLAB_* values, no usable temporary folder: one line
        if refusal is not None:
            print(_error_line(args.verb, refusal), file=sys.stderr)
            return 2
        from tflab.process.settings import get as setting

        if setting("TFLAB_IN_PROCESS") == "1":
            return main(argv)
        # ISA caps oneDNN and XLA would ignore silently: one line before a child (and TF) starts.
        from tflab.errors import TflabError
        from tflab.isa_caps import read_isa_caps

        import shutil
        import tempfile

        from tflab._io import paths as _paths
        from tflab.process import supervisor as _subprocess

        _paths.sweep_stale(Path(tempfile.gettempdir()), "tflab_")  # folders of killed runs: one line
        try:
            read_isa_caps()
            preflight(args.verb, args)  # paths, kinds, --arg grammar, output paths: before TF loads
        except TflabError as e:
            print(_error_line(args.verb, e), file=sys.stderr)
            return 2
        limit = _memory_refusal()
        if limit is not None:
            print(_error_line(args.verb, limit), file=sys.stderr)
            return 2
        cmd = [sys.executable, "-c", "import sys; from tflab.cli import _child_main; sys.exit(_child_main())",
               *argv]
        # The verb's processes get a private TMPDIR: what TF leaves in TMPDIR when one of them is
        # killed (AutoGraph's generated files) goes with it (`_paths.private_temp_dir`).
        private, env = _paths.private_temp_dir()
        env.update(_allocator_env(os.environ))
        try:
            end = _subprocess.run_child(cmd, env={**os.environ, **env}, reap_orphans=True)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        with contextlib.suppress(OSError):  # what the child's own children left there (quietly: ours)
            _paths.sweep_stale(Path(tempfile.gettempdir()), "tflab_", say=lambda line: None)
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


def _environment_refusal() -> str | None:
    """One line for a ``TFLAB_*`` value tflab cannot use or no usable temporary folder, else None.

    Before anything else of the verb: the sweep of stale temporary folders and the verb's private
    ``TMPDIR`` need the temporary folder, and ``TFLAB_IN_PROCESS`` decides how the verb runs.
    """
    from tflab._io.paths import check_temp_dir
    from tflab.errors import UsageError
    from tflab.process.settings import check_environment

    try:
        check_environment()
        check_temp_dir()
    except UsageError as e:
        return str(e)
    return None


def _memory_refusal() -> str | None:
    """One line when RLIMIT_AS is too small for TensorFlow to load at all, else None."""
    from tflab.process.memory import tf_load_refusal

    with contextlib.suppress(Exception):
        return tf_load_refusal()
    return None


def _memory_limit_text() -> str | None:
    from tflab.process.memory import limit_text

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
    from tflab.process.supervisor import ChildChannel

    channel = ChildChannel.open()
    argv = sys.argv[1:]
    code = main(argv, _channel=channel)
    if channel is None:
        return code
    verb = next((a for a in argv if a in VERBS), "")
    code = channel.finish(code, verb)
    if verb != "retrace":
        # The report is out: what the user's function left behind (a non-daemon thread, a blocking
        # atexit handler) must not keep tflab from ending; the user ran no program of their own.
        # `retrace` runs the user's script as __main__: its threads and atexit handlers are the
        # script's, and run as under plain python.
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
    return code


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
