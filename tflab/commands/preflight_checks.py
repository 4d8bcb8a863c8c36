"""The verbs' shared pre-TF checks of what `tflab.cli.preflight` cannot judge from a table alone.

`tflab.cli.preflight` runs them in the supervising process before the child (and TensorFlow)
starts; each answers in one `tflab.errors.UsageError` line, in the child's own words, so a typo
costs a fraction of a second instead of TensorFlow's import.
"""

from __future__ import annotations

import os
from pathlib import Path

from tflab._io.path_checks import check_outputs_apart  # noqa: F401 (the CLI calls it from here)
from tflab.errors import UsageError


def check_target(value: str, grammar: str = "FILE.py:FUNC", example: str = "examples/model.py:step") -> str:
    """The file part of ``FILE.py:FUNC`` (``tflab._user.target.load_target``'s grammar), or one line.

    Raises:
        UsageError: no ``:``, no FILE, or no FUNC.
    """
    path, sep, name = value.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"{value!r}: expected {grammar}, e.g. {example}")
    if not all(part.isidentifier() for part in name.split(".")):  # `load_target` looks up each dotted part
        what = grammar.rpartition(":")[2]
        raise UsageError(f"{value!r}: {what} {name[:60]!r} is not a Python name (a dotted path of identifiers "
                         f"defined in {path}); expected {grammar}, e.g. {example}")
    return path


#: a source larger than this is not parsed before TF loads (the child reports its syntax errors)
_PARSE_LIMIT_BYTES = 4 << 20


def check_py(path: str, flag: str) -> None:
    """Refuses a file that is not ``.py`` (`tflab._user.target.load_module`'s rule), or that Python cannot parse.

    A syntax error was reported only after TF's import (10-20 s), though compiling the source needs
    none: it is compiled here (no code runs), after `tflab._io.paths.input_path` found a regular file.

    Raises:
        UsageError: not ``.py``; a name that is not valid UTF-8; a syntax error, with its line (the
            child's words: "raised SyntaxError").
    """
    if not path.endswith(".py"):
        raise UsageError(f"{flag} {path!r} is not a .py file")
    from tflab._io.path_checks import check_tf_path_text, open_regular

    # A traced function's source file name goes to TF's C++ as UTF-8 text (its stack traces): from a
    # file whose name is not UTF-8, TF raised "Unable to cast Python instance of type str", blamed on
    # the function.
    check_tf_path_text(path, flag, "TensorFlow passes the source file name of the code it traces to "
                                   "its C++ as UTF-8 text")

    try:
        fd = open_regular(path)
        with os.fdopen(fd, "rb") as f:
            source = f.read(_PARSE_LIMIT_BYTES + 1)
    except (OSError, UsageError):
        return  # the child's own open says what is wrong
    if len(source) > _PARSE_LIMIT_BYTES:
        return
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:  # IndentationError and TabError too
        where = f" (at {path}:{e.lineno})" if e.lineno else ""
        raise UsageError(f"{path} raised {type(e).__name__}: {e.msg}{where}; fix it and run again") from None
    except (ValueError, MemoryError, RecursionError):  # a NUL byte, a nesting the parser refuses
        return


def check_tflite_identifier(path: str, flag: str) -> None:
    """Refuses a file without the ``TFL3`` flatbuffer identifier at byte 4 (`tflab.litert.ops`'s words).

    Only after `tflab._io.paths.input_path` found a regular file: 8 bytes are read, without blocking.
    """
    from tflab._io.path_checks import open_regular

    try:
        fd = open_regular(path)
        try:
            head = os.read(fd, 8)
        finally:
            os.close(fd)
    except (OSError, UsageError):
        return
    if head[4:8] != b"TFL3":
        raise UsageError(f"{path!r} is not a TFLite flatbuffer (no 'TFL3' file identifier at byte 4): pass a "
                         f".tflite file written by tf.lite.TFLiteConverter")


def check_contents(verb: str, args) -> None:
    """What the input files hold, once `tflab._io.paths.input_path` judged every input path (a FIFO in a
    SavedModel folder is named first): a script's syntax (`check_py`), check-tflite's flatbuffer
    identifier (`check_tflite_identifier`), an ``--examples`` that is no zip archive (`tflab.examples`'
    words), a tour ``--model`` file that is not ``.keras``."""
    def given(dest: str) -> str | None:
        value = getattr(args, dest, None)
        return value if isinstance(value, str) and os.path.isfile(value) else None

    if verb == "retrace" and given("script"):
        check_py(args.script, "script")
    if verb == "build-op":
        check_build_cache()
    if verb == "check-tflite" and given("model"):
        check_tflite_identifier(args.model, "MODEL.tflite")
    if verb == "tour" and given("model") and not args.model.endswith(".keras"):
        raise UsageError(f"--model {args.model!r} is not a .keras file or a SavedModel folder")
    if verb in ("export", "check-tflite") and given("examples"):
        import zipfile

        if not zipfile.is_zipfile(args.examples):
            raise UsageError(f"--examples {args.examples!r} is not an .npz archive (np.savez writes one, an array "
                             f"per input name)")


def check_build_cache() -> None:
    """Refuses a build-cache folder whose ``.lock`` or a manifest (``*.json``) is no regular file.

    The build opens both (`custom_ops.build.build`) only after TF loads, to hash TF's flags into the
    cache key; what stands at those names is known before, and a FIFO there would block ``open``.

    Raises:
        UsageError: the first such entry, what it is, and what to do.
    """
    from pathlib import Path

    from tflab._io.path_checks import describe_existing
    from tflab.process.settings import build_cache_dir

    folder = build_cache_dir()
    if not folder.is_dir():
        return
    names = [Path(folder, ".lock")] + sorted(Path(folder).glob("*.json"))
    for entry in names:
        what = describe_existing(entry)
        if what not in (None, "a regular file"):
            raise UsageError(f"{entry.name} in the build cache {folder} is {what}, not a regular file: tflab "
                             f"never opens one (it could block for ever); remove it, or set "
                             f"TFLAB_CUSTOM_OPS_BUILD_DIR to another folder")


def check_file_not_in_folder(file: str, file_flag: str, folder: str, folder_flag: str) -> None:
    """Refuses a file output equal to, or inside, a folder output of the same run.

    The folder is published whole by a rename: a page written at the folder's own path is refused
    by that rename after the folder's work is done (exit 2 with half the outputs written), and a page
    inside it is not in the folder's `tflab._io.output_marker.MARKER`, so the next ``--force`` refuses
    tflab's own page. Both paths are resolved first (``x/..``, symlinks).

    Raises:
        UsageError: "--html D is the --out folder itself" / "… is inside --out D".
    """
    from tflab._io.path_checks import check_path_text

    check_path_text(file, file_flag)  # a NUL byte, a too-long name: their own line first
    check_path_text(folder, folder_flag)
    f, d = Path(os.path.realpath(file)), Path(os.path.realpath(folder))
    if f == d:
        raise UsageError(f"{file_flag} {file} and {folder_flag} {folder} name the same path; give the page a "
                         f"path of its own beside the folder, e.g. {file_flag} {d}.html")
    if d in f.parents:
        raise UsageError(f"{file_flag} {file} is inside {folder_flag} {folder}, which tflab publishes whole (and "
                         f"--force replaces whole); write the page beside it, e.g. {file_flag} {d}.html")


def check_saved_model_folder(value: str, flag: str) -> None:
    """A SavedModel folder's files TF will open, judged with ``stat`` (`check_saved_model_files`), and
    a folder with no ``saved_model.pb`` (or ``.pbtxt``) refused before TF loads, naming the SavedModel
    inside it where there is one (a tflab export's ``saved_model/``)."""
    from tflab._io.path_checks import check_saved_model_files

    if not os.path.isdir(value):
        return
    check_saved_model_files(value, flag)
    if not any(os.path.lexists(os.path.join(value, n)) for n in ("saved_model.pb", "saved_model.pbtxt")):
        inner = os.path.join(value, "saved_model")
        hint = (f"; {inner!r} is one (a tflab export's SavedModel): give that folder"
                if os.path.isfile(os.path.join(inner, "saved_model.pb")) else "; give the folder model.export() or "
                "tf.saved_model.save() wrote")
        raise UsageError(f"{flag} {value!r} is a folder without saved_model.pb, so not a SavedModel{hint}")


# `tflab.examples.EXAMPLES_HELP`, here so --help imports no numpy (a test keeps them equal).
EXAMPLES_HELP = ("real inputs: an .npz with one array per parameter name (np.savez(path, ids=array)); they "
                 "replace the random values drawn for those --arg specs (ints in [0, 10) would break e.g. an "
                 "Embedding of fewer rows)")


def check_not_stdout(value: str, flag: str) -> None:
    """With ``--json``, refuses a file output that is this process's stdout (``/dev/stdout``,
    ``/dev/fd/1``, the file stdout is redirected to): both would be written there and the JSON would
    no longer parse. ``/dev/null`` is not refused (nothing is written)."""
    try:
        target, out = os.stat(value), os.fstat(1)
    except OSError:
        return  # a path to create, or no stdout: not the same place
    if (target.st_dev, target.st_ino) == (out.st_dev, out.st_ino) and os.path.realpath(value) != os.devnull:
        raise UsageError(f"{flag} {value}: that is stdout, where --json writes its document, and the two would "
                         f"mix (the JSON would no longer parse); write {flag} to a file, or leave --json out")


def paths_of(args, file_outputs, folder_out, inputs) -> tuple[list, list]:
    """A verb's output and input paths for `check_outputs_apart`, from the CLI's tables.

    Args:
        args: the parsed arguments.
        file_outputs: ``[(dest, flag, example)]``, the verb's file outputs.
        folder_out: its folder output (``--out``), or None.
        inputs: ``{dest: (kind, words)}``, its input paths (``kind`` ``"target"``: ``FILE.py:FUNC``).

    Returns:
        ``(outputs, inputs)``: ``[(path, flag, is_folder)]`` and ``[(path, flag)]``.
    """
    outs = [(v, flag, False) for dest, flag, _ in file_outputs if isinstance(v := getattr(args, dest, None), str) and v]
    if isinstance(folder_out, str) and folder_out:
        outs.append((folder_out, "--out", True))
    ins = []
    for dest, (kind, _) in inputs.items():
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value:
            continue
        path, sep, _ = value.rpartition(":")
        if sep and (kind == "target" or (kind == "model" and path.endswith(".py"))):
            value = path
        ins.append((value, {"model": "MODEL", "saved_model": "SAVED_MODEL", "target": "FILE",
                            "examples": "--examples", "script": "script"}.get(dest, dest)))
    return outs, ins
