"""The one guarded path for calling user code, and the one for running a signature on examples.

Two policies every verb shares, so the next verb inherits them:

**Calling user code** (importing ``FILE.py``, calling a factory, tracing,
running): wrap the call in `user_code`. What the user's code raises is
turned into one `UsageError` line (the CLI prints it and exits 2):

* ``SystemExit`` (``sys.exit(5)`` in the user's function) becomes
  "f called sys.exit(5) while tracing": without this, ``sys.exit`` would end
  tflab with the user's status and print nothing.
* Any other ``BaseException`` that is not an ``Exception`` (a user's
  ``raise BaseException("x")``) becomes "f raised BaseException: x while …".
* A ``fork()`` ed child leaving the block is ended (``os._exit``) instead
  of running on as a second tflab, and an ``os.chdir`` is undone
  (`process_guard`).
* ``KeyboardInterrupt`` passes through (the CLI prints "interrupted" and
  exits 130), and so does `tflab.errors.Terminated` (SIGTERM, exit 143).
* Ordinary ``Exception`` s pass through unchanged by default: each lab
  function already explains those in its own terms (and a tflab bug must not
  be blamed on the user). ``exceptions=True`` converts them too, naming the
  user's line, for calls with no such handler (importing, factories).

**Running a signature on examples** (SavedModel, reloaded SavedModel, LiteRT):
call `run_signature`. A kernel error (``InvalidArgumentError: Matrix
size-incompatible``, a failing ``tf.debugging.assert_all_finite``) becomes one
line naming the signature, the failing node and the shapes fed, instead of
TF's 50-line "Graph execution error" with its node stack.

Use from a verb::

    from tflab._user.usercode import run_signature, user_code

    with user_code("f", "while tracing"):
        report = trace_and_inspect(fn, *args)
    outputs = run_signature(loaded.signatures["serving_default"], "serving_default", feed)
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import os
import re
import sys
import traceback
from typing import Any, Callable, Iterator, Mapping

from tflab.errors import Terminated, TflabError, UsageError

# Echoes of user-supplied text and values are cut to this many characters.
MAX_ECHO = 80


def shorten(text: Any, limit: int = MAX_ECHO) -> str:
    """``str(text)`` cut to ``limit`` characters with "…(N chars)" (a 5000-digit literal stays one line)."""
    s = str(text)
    if len(s) <= limit:
        return s
    return f"{s[:limit]}…({len(s)} chars)"


# The libraries whose frames are never the user's line, by their installed package folders (found
# without importing them). A user's own file is judged by where it lives, not by its path's words:
# code under a folder that happens to be named ``tflab``, ``keras`` or ``tensorflow`` is the user's.
_LIBRARIES = ("tensorflow", "keras", "tf_keras", "absl", "numpy", "ml_dtypes", "tensorboard", "google",
              "ai_edge_litert", "custom_ops")


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[tuple[str, str], ...]:
    import importlib.util
    import sysconfig

    roots: list[tuple[str, str]] = []

    def add(name: str, folder: str) -> None:
        for f in {os.path.abspath(folder), os.path.realpath(folder)}:
            roots.append((name, f.rstrip(os.sep) + os.sep))

    add("tflab", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the package, above _user/
    for name in _LIBRARIES:
        with contextlib.suppress(Exception):
            spec = importlib.util.find_spec(name)
            for folder in (spec.submodule_search_locations or []) if spec is not None else []:
                add(name, folder)
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            add("python", paths[key])
    return tuple(sorted(set(roots), key=lambda r: -len(r[1])))  # the deepest folder first


def library_of(filename: str) -> str | None:
    """The library a source file belongs to (``"tensorflow"``, ``"tflab"``, ``"python"`` for the
    standard library and installed packages, ...), or None for the user's own code.

    Judged by the file's folder against each library's installed package folder (and Python's
    ``stdlib``/``site-packages`` folders), never by words in the path: a user's project under
    ``~/src/tflab/`` is the user's. ``<frozen …>`` modules are Python's.

    Args:
        filename: a source path as a traceback or a code object names it (``co_filename``).

    Returns:
        The library's name, or None when the file is the user's (or ``filename`` is empty).

    Example:
        >>> library_of(tf.__file__), library_of("/home/me/src/tflab/model.py")
        ('tensorflow', None)
    """
    if not filename:
        return None
    if filename.startswith("<frozen"):
        return "python"
    # A relative name is resolved against the current folder, which is part of the answer.
    return _library_of_path(filename, "" if os.path.isabs(filename) else os.getcwd())


@functools.lru_cache(maxsize=8192)
def _library_of_path(filename: str, cwd: str) -> str | None:
    # Cached: the lowering ladder and the culprit-line searches ask for the same few hundred
    # files tens of thousands of times (38,314 calls, 2.3 s of the tour's step 6), and each
    # realpath is a system call per path component.
    for f in {os.path.abspath(filename), os.path.realpath(filename)}:
        for name, root in _library_roots():
            if f.startswith(root):
                return name
    return None


def is_library_file(filename: str) -> bool:
    """True for a frame of TF, Keras, tflab, the standard library or an installed package (`library_of`)."""
    return library_of(filename) is not None


def user_frame(exc: BaseException) -> str:
    """The innermost traceback frame outside TF, tflab and the stdlib, as ``file:line in fn``.

    Used to point at the user's own line when their function raises while tracing.
    Returns "" when no such frame exists.
    """
    best = ""
    for fs in traceback.extract_tb(exc.__traceback__):
        if not is_library_file(fs.filename) and "__autograph_generated" not in fs.filename:
            best = f"{fs.filename}:{fs.lineno} in {fs.name}"
    if not best:
        # AutoGraph re-raises with the user's frames only in the message text:
        # 'in user code:\n\n    File "/path/f.py", line 23, in broken\n ...'
        for m in re.finditer(r'File "([^"]+)", line (\d+), in (\w+)', str(exc)):
            if not is_library_file(m.group(1)) and "__autograph_generated" not in m.group(1):
                best = f"{m.group(1)}:{m.group(2)} in {m.group(3)}"
    return best


# An error line quotes at most this much of the exception's message (a user's
# 5000-character message stays one readable line).
SUMMARY_CHARS = 300


def error_summary(exc: BaseException) -> str:
    """One line for an exception: ``Type: message`` without AutoGraph's 'in user code:' preamble.

    Cut to `SUMMARY_CHARS` characters with "…(N chars)" (`shorten`).
    """
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].startswith("in user code"):
        # The real error is the last 'SomethingError: …' line of the message.
        for ln in reversed(lines):
            if re.match(r"^[A-Z]\w*(Error|Exception|Warning)\b", ln):
                return shorten(ln, SUMMARY_CHARS)
        return shorten(lines[-1], SUMMARY_CHARS)
    return shorten(f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": "), SUMMARY_CHARS)


def _exit_code_text(code: Any) -> str:
    return "" if code is None else shorten(repr(code), 40)


def describe(exc: BaseException, name: str, during: str, hint: str | None = None) -> str:
    """One line for a ``SystemExit`` or other ``BaseException`` out of the user's code.

    Args:
        exc: what the user's code raised.
        name: the user's callable or file, e.g. ``"f"`` or ``"exit.py"``.
        during: where, e.g. ``"while tracing"``, ``"at import"``.
        hint: what to do instead of exiting (default: return or raise).

    Returns:
        E.g. ``"f called sys.exit(5) while tracing"`` or
        ``"f raised BaseException: base while tracing (at f.py:3 in f)"``.
    """
    if isinstance(exc, SystemExit):
        return (f"{name} called sys.exit({_exit_code_text(exc.code)}) {during}; "
                + (hint or "tflab runs it in its own process, so it must return or raise instead of exiting"))
    where = user_frame(exc)
    first = (str(exc).strip().splitlines() or [""])[0]
    return (f"{name} raised {type(exc).__name__}" + (f": {shorten(first)}" if first else "")
            + f" {during}" + (f" (at {where})" if where else ""))


@contextlib.contextmanager
def process_guard() -> Iterator[None]:
    """Undoes what user code does to tflab's own process: a ``fork()``, an ``os.chdir``.

    * A child that the user's code ``fork()`` ed and that returns (or raises)
      out of the block would go on running tflab: a second report, a second
      export racing the first. It is ended here with ``os._exit`` (its
      ``sys.exit`` status, 0 when it returned, 1 when it raised), after
      flushing stdio, as ``os.fork``'s docs advise for children.
    * A working directory changed by the user's code is restored, so a
      relative ``--out``/``--dot`` probed before the work is written where it
      was probed, not in the folder the factory ``chdir`` ed to.

    Used by `user_code` (so every verb has it) and around ``tflab retrace``'s
    ``runpy.run_path``.
    """
    pid = os.getpid()
    try:
        cwd = os.getcwd()
    except OSError:  # the folder was removed under us: nothing to restore
        cwd = None
    status = 0
    try:
        yield
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        raise
    except BaseException:
        status = 1
        raise
    finally:
        if os.getpid() != pid:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(status)
        if cwd is not None:
            with contextlib.suppress(OSError):
                if os.getcwd() != cwd:
                    os.chdir(cwd)


@contextlib.contextmanager
def user_code(name: str, during: str, *, exceptions: bool = False, hint: str | None = None) -> Iterator[None]:
    """Runs the block as a call into user code: its ``sys.exit`` and ``BaseException`` become one line.

    Args:
        name: the user's callable or file, for the message (``"f"``, ``"m.py:model"``).
        during: what tflab was doing (``"while tracing"``, ``"when called as OBJ()"``).
        exceptions: also turn an ordinary ``Exception`` (not a `TflabError`)
            into a `UsageError` naming the user's line.

    Raises:
        UsageError: the block raised ``SystemExit`` (not SIGTERM's
            `Terminated`), a ``BaseException`` that is not an ``Exception``
            or ``KeyboardInterrupt``, or with ``exceptions=True`` any
            ``Exception`` but a `TflabError`.
        KeyboardInterrupt: passed through (the CLI exits 130).

    Example:

    >>> def f(x):
    ...     sys.exit(5)
    >>> with user_code("f", "while tracing"):
    ...     f(1)
    Traceback (most recent call last):
    tflab.errors.UsageError: f called sys.exit(5) while tracing; tflab runs it in its own process, ...
    """
    token = _INSIDE.set(True)
    try:
        with process_guard():
            yield
    except (KeyboardInterrupt, GeneratorExit, Terminated):
        raise
    except TflabError:
        raise
    except Exception as e:
        if not exceptions:
            raise
        raise UsageError(describe(e, name, during, hint)) from e
    except BaseException as e:  # SystemExit, or a user's BaseException subclass
        raise UsageError(describe(e, name, during, hint)) from None
    finally:
        _INSIDE.reset(token)


# True while a `user_code` block or a `user_entry` function runs: an inner one
# then lets the outer one word the message (the CLI's own, with its FILE.py:FUNC).
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("tflab_user_code", default=False)



# In the Python API the user's function runs in the caller's own interpreter.
_API_HINT = "it runs in your Python process, which sys.exit would end: return or raise instead"


@contextlib.contextmanager
def cli_verb() -> Iterator[None]:
    """Marks a CLI verb's run: the verb's `user_code` blocks, or ``tflab.cli.main``'s last
    resort, word a user's ``sys.exit`` (naming FILE.py:FUNC), so `user_entry` passes it on."""
    from tflab.errors import CLI_VERB

    token, cli = _INSIDE.set(True), CLI_VERB.set(True)
    try:
        yield
    except OSError as e:
        if e.errno not in _STORAGE_ERRNOS:
            raise
        # A full disk or quota while tflab writes (outputs, TF's dumps): the folder tflab writes in is
        # removed on the way out, so this is a path that cannot be written (exit 2), not a crash.
        where = f" writing {e.filename}" if e.filename else ""
        raise UsageError(f"cannot write{where}: {e.strerror or e}; free space there (or in TMPDIR, where tflab's "
                         f"temporary files go) or choose another output path; nothing was published") from None
    finally:
        _INSIDE.reset(token)
        CLI_VERB.reset(cli)


# Storage errors of the machine, not of the verb's arguments: ENOSPC, EDQUOT, EFBIG (ulimit -f).
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _callable_name(fn: Any) -> str:
    fn = getattr(fn, "python_function", fn)  # a tf.function: its Python function's name
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def user_entry(during: str, name: Callable[..., str] | None = None) -> Callable[[Callable], Callable]:
    """Decorates a public API function that calls user code: the `user_code` policy for Python callers.

    A ``sys.exit(3)`` (or another non-``Exception`` ``BaseException``) in the
    user's function becomes one `UsageError` ("f called sys.exit(3) while
    tracing") instead of ending the interpreter; ``KeyboardInterrupt``,
    `tflab.errors.Terminated` and every ``Exception`` pass through unchanged.
    Inside an outer `user_code` block or a CLI verb (`cli_verb`) the outer
    handler words the message, so the CLI's lines are unchanged. Unlike `user_code` there is no `process_guard`: this wraps
    per-call paths such as ``RetraceProbe.__call__`` (whose overhead goal is
    < 5% of a cached tf.function call), so it is one ``try`` and one
    ``ContextVar`` set.

    Args:
        during: what tflab was doing, e.g. ``"while tracing"``.
        name: ``name(*args, **kwargs)`` gives the user callable's name for
            the message; default: the name of the first positional argument
            (or of ``fn=``).

    Returns:
        The decorator.

    Raises:
        UsageError: (from the decorated function) as above.

    Example:

    >>> trace_and_inspect(lambda x: sys.exit(3), 1.0)
    Traceback (most recent call last):
    tflab.errors.UsageError: <lambda> called sys.exit(3) while tracing; it runs in your Python process, ...
    """
    def decorate(api: Callable) -> Callable:
        @functools.wraps(api)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _INSIDE.get():
                return api(*args, **kwargs)
            token = _INSIDE.set(True)
            try:
                return api(*args, **kwargs)
            except (Exception, KeyboardInterrupt, GeneratorExit, Terminated):
                raise
            except BaseException as e:  # SystemExit, or a user's BaseException subclass
                if name is not None:
                    who = name(*args, **kwargs)
                else:
                    who = _callable_name(args[0] if args else kwargs.get("fn"))
                raise UsageError(describe(e, who, during, _API_HINT)) from None
            finally:
                _INSIDE.reset(token)
        return wrapper
    return decorate


def call_user(fn: Callable, *args: Any, name: str, during: str, exceptions: bool = False, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` under `user_code` (same policy, for a single call)."""
    with user_code(name, during, exceptions=exceptions):
        return fn(*args, **kwargs)


# ------------------------------------------------------------------ signature runs


_NOISE = re.compile(r"^(Graph execution error:|Detected at node|<stack traces unavailable>|File \"|"
                    r"\[\[\{\{node|Traceback|in user code:)")


def _node_and_reason(exc: BaseException) -> tuple[str, str]:
    """The failing node's name and the kernel's own one-line reason from a TF error."""
    text = getattr(exc, "message", None) or str(exc)
    nodes = re.findall(r"\{\{node ([^}]+)\}\}", text) or re.findall(r"Detected at node '?([\w/.-]+)", text)
    node = nodes[-1] if nodes else ""
    reason = ""
    for line in text.splitlines():
        line = line.strip()
        if line and not _NOISE.match(line) and not line.startswith(("defined at", "[[")):
            reason = re.sub(r"\s*\[Op:[^\]]*\]\s*$", "", line)
            break
    return node, reason or type(exc).__name__


def uncaught_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions under it that are part of the error, outermost first.

    Python links two kinds of exception (PEP 3134): ``raise X from Y`` sets ``X.__cause__``, Y is
    the direct cause and is followed; ``raise X`` inside ``except Y`` sets only ``X.__context__``,
    Y was *handled* and X is the error, so Y is not followed. ``tf.gather`` on a Keras variable
    is the case: it tries ``params.sparse_read``, catches the ``AttributeError`` and runs
    ``GatherV2``, whose ``InvalidArgumentError`` carries the ``AttributeError`` as context only
    (``tensorflow/python/ops/array_ops.py``: ``gather``). A suppressed context (``raise X from
    None``) is followed only where X restates it: Keras' "Exception encountered when calling …"
    copy (``keras/src/utils/traceback_utils.py``, ``_keras_call_info_injected``) or an exception
    of the same class.
    """
    from tflab._tf.runtime import keras_restated

    out: list[BaseException] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        out.append(e)
        seen.add(id(e))
        ctx = e.__context__
        if e.__cause__ is not None:
            e = e.__cause__
        elif ctx is not None and e.__suppress_context__ and (
                keras_restated(e) or type(ctx) is type(e)
                or type(ctx).__name__.startswith("_")):
            e = ctx
        else:
            e = None
    return out


def _keras_layer_of(exc: BaseException) -> str:
    """``name (Class)`` of the innermost Keras layer whose ``__call__`` the error went through, or ""."""
    best = ""
    for e in uncaught_chain(exc):
        for frame, _ in traceback.walk_tb(e.__traceback__):
            owner = frame.f_locals.get("self")
            if frame.f_code.co_name in ("__call__", "call") and "keras" in frame.f_code.co_filename \
                    and isinstance(getattr(owner, "name", None), str) and hasattr(owner, "built"):
                best = f"{owner.name} ({type(owner).__name__})"
    return best


def input_error(exc: BaseException, drawn: "list[str] | tuple[str, ...]" = (), *,
                hint: str = "pass real inputs with --examples FILE.npz (Python: examples=)") -> str:
    """One line for a function that failed on its inputs: TF's own uncaught error, its op and node
    (or Keras layer), and, when tflab drew the inputs, which ones and what to pass instead.

    Args:
        exc: what the call raised.
        drawn: labels of the inputs tflab drew at random (``"--arg ids int32[2,3] (ints in [0, 10))"``).
        hint: what to do, said only when ``drawn`` is not empty and a TF kernel refused the values
            (a ``tf.errors.OpError``; a Python error in the function is not about the values).

    Returns:
        E.g. ``InvalidArgumentError: indices[0,0] = 6 is not in [0, 2) in op GatherV2 (layer
        embedding (Embedding)); the inputs --arg ids int32[2,3] were drawn at random (ints in [0, 10)):
        pass real inputs with --examples FILE.npz (Python: examples=)``.
    """
    chain = [e for e in uncaught_chain(exc) if not type(e).__name__.startswith("_")] or [exc]
    inner = chain[-1]
    node, reason = _node_and_reason(inner)
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(getattr(inner, "message", None) or inner))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].startswith("Exception encountered when calling") and len(lines) > 1:
        _, reason = _node_and_reason(type(inner)("\n".join(lines[1:])))
    reason = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", reason)
    reason = re.sub(r",?\s*node name: \S+$", "", reason).strip()
    ops = [o for o in re.findall(r"\[Op:(\w+)\]", text) if not o.startswith("__")]  # not a function's name
    op = ops[-1] if ops else ""
    layer = _keras_layer_of(exc) if op or node else ""
    parts = [f"node {node}"] if node and node != op else []
    parts += [f"layer {layer}"] if layer else []
    where = (f" in op {op}" if op else f" at node {parts.pop(0)[5:]}" if node else "") \
        + (f" ({', '.join(parts)})" if parts else "")
    line = f"{type(inner).__name__}: {shorten(reason, 240)}{where}"
    if drawn and hasattr(inner, "error_code"):  # a TF kernel refused the values (tf.errors.OpError)
        line += f"; tflab drew these inputs at random: {', '.join(drawn)}: {hint}"
    return line


def _shapes(feed: Mapping[str, Any]) -> str:
    parts = []
    for n, a in feed.items():
        dtype = getattr(getattr(a, "dtype", None), "name", None) or type(a).__name__
        shape = list(getattr(a, "shape", ()))
        parts.append(f"{n}: {dtype}[{','.join(str(int(d)) for d in shape)}]")
    if len(parts) > 6:
        parts = parts[:6] + [f"… {len(parts) - 6} more"]
    return ", ".join(parts)


def signature_error(key: str, feed: Mapping[str, Any], exc: BaseException, side: str = "SavedModel") -> UsageError:
    """The one-line `UsageError` for signature ``key`` failing on ``feed`` (see `run_signature`)."""
    node, reason = _node_and_reason(exc)
    op = node.rsplit("/", 1)[-1] if node else ""
    at = f" in op {op} (node {node})" if node and op != node else (f" in op {op}" if op else "")
    return UsageError(f"signature {key!r} of the {side} failed on the examples fed ({_shapes(feed)})"
                      f"{at}: {type(exc).__name__}: {shorten(reason, 200)}; fix the model, or pass "
                      f"--examples that it accepts")


def run_signature(fn: Callable[..., Any], key: str, feed: Mapping[str, Any], *,
                  side: str = "SavedModel") -> Any:
    """Runs signature ``key`` on one example batch; a failure is one line, not TF's traceback.

    Args:
        fn: the signature's callable: ``loaded.signatures[key]`` (keyword
            inputs), an in-process reference, or a LiteRT signature runner.
        key: the signature key, e.g. ``"serving_default"``, for the message.
        feed: ``{input name: array}`` passed as keyword arguments; numpy
            arrays are passed as they are (TF converts them, LiteRT takes them).
        side: which runtime, for the message: ``"SavedModel"``, ``"reloaded
            SavedModel"``, ``"TFLite model"``.

    Returns:
        Whatever ``fn`` returns (a dict of output tensors/arrays).

    Raises:
        UsageError: ``fn`` raised an ``Exception`` that is not a `TflabError`
            (``tf.errors.OpError`` from a kernel, ``ValueError``/``TypeError``
            from argument conversion); the message names the signature, the
            op (from the ``{{node …}}`` marker TF puts in kernel errors,
            ``tensorflow/core/common_runtime/...``: ``[[{{node NAME}}]]``) and
            the shapes fed. ``sys.exit`` or a ``BaseException`` in a
            ``tf.py_function``, as in `user_code`.

    Example:

    >>> run_signature(loaded.signatures["serving_default"], "serving_default", {"x": np.ones([1, 3], np.float32)})
    Traceback (most recent call last):
    tflab.errors.UsageError: signature 'serving_default' of the SavedModel failed on the examples fed
    (x: float32[1,3]) in op MatMul (node PartitionedCall/MatMul): InvalidArgumentError: Matrix
    size-incompatible: In[0]: [1,3], In[1]: [1,3]; fix the model, or pass --examples that it accepts
    """
    with user_code(f"signature {key!r}", "while running on the examples"):
        try:
            return fn(**feed)
        except TflabError:
            raise
        except Exception as e:
            raise signature_error(key, feed, e, side) from e
