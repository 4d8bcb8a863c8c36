"""Every ``TFLAB_*`` environment variable, declared once: name, meaning, default, who reads it.

tflab reads these names through `get` (or `get_float`, `get_int`), which
knows no other name: a misspelt or undeclared ``TFLAB_*`` name is a
``KeyError`` at the first read, never a silently unset value. ``tflab env``
prints the table (``tflab env --json`` carries it as ``"settings"``), and
``tests/process/test_process_settings.py`` fails when a tracked file uses a
``TFLAB_*`` name that is not declared here, or reads one from
``os.environ`` without this module.

Two readers cannot come through `get` and are listed as such: the C++
kernel (``std::getenv``, `tflab` is not there) and the benchmark's
``sitecustomize`` (it runs at every Python start-up and must not import
tflab, whose import time the benchmark measures).

Kinds:

* ``user``: a user or CI may set it (documented in the README or
  ``custom_ops/README.md``).
* ``child``: tflab sets it for a process it starts; a user has no reason to.
* ``test``: fault injection for tests and demonstrations (a worker that
  crashes on purpose).

Example:
    >>> from tflab.process.settings import get
    >>> get("TFLAB_TOUR_LANE", {})
    '1'
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class Setting:
    """One ``TFLAB_*`` environment variable.

    Attributes:
        name: the variable, ``TFLAB_…``.
        meaning: what it does, one sentence.
        default: the value when it is unset, as a string; None: unset means
            "not given" (the reader has no default).
        kind: ``"user"``, ``"child"`` (tflab sets it for its own children) or
            ``"test"`` (fault injection).
        readers: the modules (or files) that read it.
        setters: the modules that set it for a child, for ``child``/``test`` kinds.
    """

    name: str
    meaning: str
    default: str | None
    kind: str
    readers: tuple[str, ...]
    setters: tuple[str, ...] = ()
    values: tuple[str, ...] = ()  # a switch's accepted values ("1", "0"); empty: any text
    folder: bool = False  # names a folder tflab writes in: probed by `check_environment`
    file: bool = False  # names a file tflab reads: `check_environment` wants a regular file (stat(2) only)
    seconds: tuple[float, float] = ()  # a time in seconds: the (lowest, highest) accepted; empty: not a time

    def to_dict(self) -> dict:
        """The fields as JSON data (lists for the tuples)."""
        return {"name": self.name, "meaning": self.meaning, "default": self.default, "kind": self.kind,
                "readers": list(self.readers), "setters": list(self.setters)}


_TABLE = (
    # ------------------------------------------------------------------ user
    Setting("TFLAB_IN_PROCESS", "1 runs the verb in the tflab process itself, without the supervised child "
            "(tests, debugging with pdb)", "0", "user", ("tflab.cli",), values=("0", "1")),
    Setting("TFLAB_FIX_TIMEOUT_S", "seconds each candidate fix's check may run in its child (a re-trace or run "
            "of your code that tflab makes before printing a fix) before it is stopped and shown as not checked",
            "60", "user", ("tflab.process.apart",), seconds=(0.1, 86400.0)),
    Setting("TFLAB_FORK_WORKERS", "0 starts each of the export's converter workers, distribute's worker "
            "processes and compare's XLA bisection children as a fresh Python (each imports TensorFlow, ~5 s of "
            "CPU) instead of forking them from one helper that imported it once", "1", "user",
            ("tflab.litert.workers", "tflab.distribute.processes", "tflab.modes.bisection"), values=("0", "1")),
    Setting("TFLAB_TOUR_LANE", "0 keeps every tour section in the tour's own process (no second process "
            "for steps 6 and 7-8)", "1", "user", ("tflab._tour.lane",), values=("0", "1")),
    Setting("TFLAB_WARP_SOFTMAX_ISA", "forces WarpSoftmax's CPU path: scalar, avx2 or avx512 (read when the "
            "library loads); a path this CPU lacks is an error", None, "user",
            ("custom_ops/cc/kernels/warp_softmax_cpu.cc (std::getenv)", "custom_ops.python.ops.warp_softmax_ops",
             "tflab.isa_caps", "tflab.report.base", "benchmarks/bench_softmax.py")),
    Setting("TFLAB_WARP_SOFTMAX_SCALAR", "set: the older spelling of TFLAB_WARP_SOFTMAX_ISA=scalar", None, "user",
            ("custom_ops/cc/kernels/warp_softmax_cpu.cc (std::getenv)", "custom_ops.python.ops.warp_softmax_ops")),
    Setting("TFLAB_WARP_SOFTMAX_SO", "a prebuilt _warp_softmax_ops*.so to load instead of building one "
            "(e.g. from Bazel)", None, "user", ("custom_ops.python.ops.warp_softmax_ops", "tflab.commands.build_op_cmd"),
            file=True),
    Setting("TFLAB_CUSTOM_OPS_BUILD_DIR", "the folder of the custom-op build cache (default custom_ops/_build, "
            "or a user cache folder when the package is read-only)", None, "user", ("custom_ops.build",), folder=True),
    Setting("TFLAB_CUSTOM_OPS_CUDA", "0 builds the CPU kernels only, even with nvcc installed", "1", "user",
            ("custom_ops.build",), values=("0", "1")),
    Setting("TFLAB_BENCH_PHASES_DIR", "benchmarks/bench_tour.py: the folder where the tour's second process "
            "writes its phase timings", None, "user",
            ("benchmarks/_phases_site/sitecustomize.py (os.environ: must not import tflab)",),
            ("benchmarks/bench_tour.py",)),
    # ------------------------------------------------------------------ child
    Setting("TFLAB_CHILD_FDS", "the verb's child: its report, status and quiet fds and the parent's ttys "
            "(report,status,quiet,out_tty,err_tty)", None, "child", ("tflab.process.supervisor",),
            ("tflab.process.supervisor",)),
    Setting("TFLAB_RUN", "every process of a supervised verb: the run's mark; the supervisor (or its guard, "
            "when the supervisor is killed) ends each process that carries it, also one that left its session "
            "(setsid)", None, "child", ("tflab.process.group",), ("tflab.process.supervisor",)),
    Setting("TFLAB_SUPERVISOR_PID", "the verb's child: the supervisor's pid (the child dies with it)", None,
            "child", ("tflab.process.supervisor",), ("tflab.process.supervisor",)),
    Setting("TFLAB_DEADLINE_S", "a helper child: seconds after which it ends itself (its parent's timeout, "
            "plus a margin)", None, "child",
            ("tflab.process.watch", "tflab._tour.lane", "tflab.distribute.workers", "tflab.distribute.user"),
            ("tflab._tour.lane", "tflab._tour.background", "tflab.distribute.processes")),
    Setting("TFLAB_PARENT_PID", "a helper child: the pid of the process that started it; it ends itself when "
            "that process is gone, also one that died before the child's first line", None, "child",
            ("tflab.process.watch",), ("tflab.process.group",)),
    Setting("TFLAB_SYSTEM_TMPDIR", "a verb's processes: the temporary folder tflab's own folders go in (the one "
            "the user's TMPDIR names); TMPDIR itself points them at the verb's private folder, removed when the "
            "verb ends and swept after a SIGKILL, so what TF leaves there (AutoGraph's generated files) goes too",
            None, "child", ("tflab._io.output_marker",), ("tflab.cli",), folder=True),
    Setting("TFLAB_CPU_ALLOCATOR_SET", "a verb's processes: 1 when tflab set TF_CPU_ALLOCATOR_USE_BFC=true for "
            "them because the user had not set it (TF's default CPU allocator, malloc, maps fresh pages for each "
            "large tensor: the end-to-end bound's backward passes spent half their time in page faults)", None,
            "child", ("tflab.runtime",), ("tflab.cli",), values=("1",)),
    Setting("TFLAB_TOUR_XLA_DUMP", "the tour's second process: the folder XLA dumps step 6's compile into "
            "(its XLA_FLAGS carry --xla_dump_to), read for step 6's lowering lines", None, "child",
            ("tflab.lowering.tour", "tflab.process.xla_probe"), ("tflab.lowering.tour", "tflab._tour.lane")),
    Setting("TFLAB_REPORT", "distribute's child: the path of its result (tflab.process.channel)", None, "child",
            ("tflab.distribute.child",), ("tflab.distribute.processes",)),
    Setting("TFLAB_LAB_EXPORT", "distribute's lab child: 1 also exports the trained model", "0", "child",
            ("tflab.distribute.child",), ("tflab.distribute.lab",), values=("0", "1")),
    Setting("TFLAB_USER_STEP", "distribute's user-step child: the user's step as FILE.py:NAME", None, "child",
            ("tflab.distribute.user",), ("tflab.distribute.user",)),
    Setting("TFLAB_USER_ARGS", "distribute's user-step child: the --arg items, as a JSON list", None, "child",
            ("tflab.distribute.user",), ("tflab.distribute.user",)),
    Setting("TFLAB_REPLICAS", "distribute's user-step child: the number of logical CPUs (replicas)", "2",
            "child", ("tflab.distribute.user",), ("tflab.distribute.user",)),
    Setting("TFLAB_WORKER_INDEX", "a MultiWorkerMirroredStrategy worker of run_workers: its task index, for "
            "code in the worker (tflab reads TF_CONFIG)", None, "child", (), ("tflab.distribute.workers",)),
    # ------------------------------------------------------------------ test
    Setting("TFLAB_WORKER_CRASH_AFTER", "run_workers(crash_worker=i): worker i SIGKILLs itself after this many "
            "steps", "0", "test", ("tflab.distribute.workers",), ("tflab.distribute.workers",)),
    Setting("TFLAB_EXPORT_WORKER_CRASH", "the TFLite converter worker aborts (like an LLVM fatal error) when it "
            "starts this variant", None, "test", ("tflab.litert.workers",), ("tests",)),
    Setting("TFLAB_ZOO_TESTS", "1 also runs the zoo tests that take minutes on 2 cores (ResNet50's quantized "
            "simulation with planted defects)", None, "test", ("tests/litert/test_litert_simulate_zoo.py",),
            ("tests",), values=("0", "1")),
)

#: Every declared variable, by name, in the table's order.
SETTINGS: dict[str, Setting] = {s.name: s for s in _TABLE}


def declared(name: str) -> Setting:
    """The `Setting` of ``name``.

    Raises:
        KeyError: ``name`` is not declared in `SETTINGS` (declare it there, with its meaning).
    """
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name} is not a declared tflab setting: declare it in tflab/process/settings.py "
                       f"(name, meaning, default, readers)") from None


def get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of ``name`` in ``environ`` (default ``os.environ``), else its declared default.

    Args:
        name: a declared ``TFLAB_*`` name.
        environ: the mapping to read (a child's environment, a test's dict).

    Returns:
        The string set, or `Setting.default` when it is unset (None: no default).

    Raises:
        KeyError: ``name`` is not declared.
    """
    setting = declared(name)
    env = os.environ if environ is None else environ
    value = env.get(name)
    if value is not None and setting.values and value not in setting.values:
        raise _refusal(setting, value)
    return setting.default if value is None else value


def _refusal(setting: Setting, value: str):
    from tflab.errors import UsageError

    shown = value if len(value) <= 40 else value[:40] + "…"
    accepted = " or ".join(setting.values)
    return UsageError(f"{setting.name}={shown!r} is not a value it takes: give {accepted} (unset: "
                      f"{setting.default}; {setting.meaning})")


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuses junk in the ``TFLAB_*`` variables before a verb starts (every verb: the supervisor calls it).

    A switch takes only its `Setting.values` (``TFLAB_IN_PROCESS=yes`` was read as 0, ``=banana`` as
    the default); a folder setting must be a folder where a file can be created, probed by creating
    one (``os.access`` says yes to root on ``/proc`` and ``/sys``); a missing one must be creatable;
    a file setting must name a regular file (``TFLAB_WARP_SOFTMAX_SO=/missing.so`` let ``build-op``
    report a library the op would not load).

    Raises:
        UsageError: one line naming the variable, its value and what it accepts.
    """
    import tempfile

    from tflab.errors import UsageError

    env = os.environ if environ is None else environ
    for setting in _TABLE:
        value = env.get(setting.name)
        if value is None:
            continue
        if setting.values and value not in setting.values:
            raise _refusal(setting, value)
        if setting.seconds and value:
            seconds_value(setting.name, value)
        if setting.folder and value:
            probe = os.path.abspath(value)
            while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
                probe = os.path.dirname(probe)
            try:
                if not os.path.isdir(probe):
                    raise NotADirectoryError(20, f"{probe} is not a folder")
                from tflab.errors import held_interrupts

                with held_interrupts():  # never a probe folder left by a signal between mkdir and rmdir
                    os.rmdir(tempfile.mkdtemp(prefix=".tflab-probe-", dir=probe))
            except OSError as e:
                raise UsageError(f"cannot use {value} as {setting.name}: cannot create a folder in {probe} "
                                 f"({e.strerror or e}); set {setting.name} to a writable folder, or unset it") from None
        if setting.file and value:
            import stat

            try:
                mode = os.stat(value).st_mode  # never opened: a FIFO cannot block the check
                why = None if stat.S_ISREG(mode) else "not a regular file"
            except OSError as e:
                why = "no such file" if e.errno == 2 else (e.strerror or str(e))
            if why:
                raise UsageError(f"cannot use {value} as {setting.name}: {why}; set {setting.name} to an "
                                 f"existing file, or unset it")
    for line in unknown_names(env):
        print(f"tflab: warning: {line}", file=sys.stderr)


def unknown_names(environ: Mapping[str, str]) -> list[str]:
    """One line per ``TFLAB_*`` variable that no `Setting` declares: a misspelt name changes nothing.

    ``TFLAB_IN_PROCESS`` one S short, or ``TFLAB_FIX_TIMEOUT_S`` without its ``_S``, was read by no one,
    without a word, while the user believed it in force. Not refused (a value tflab cannot read harms nothing), but said.
    """
    import difflib

    known = [s.name for s in _TABLE]
    lines = []
    for name in sorted(k for k in environ if k.startswith("TFLAB_") and k not in known):
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        lines.append(f"{name} is not a tflab setting, so it changes nothing"
                     + (f"; did you mean {near[0]}?" if near else "") + " (tflab env lists them)")
    return lines


def seconds_value(name: str, value: str) -> float:
    """A time setting's value in seconds, within its `Setting.seconds` range.

    Only a plain decimal number is taken (``30``, ``2.5``, ``1e3``): ``nan``, ``inf``, a number that
    overflows a float (``1e400``), hexadecimal (``0x10``) and values outside the range are refused.

    Raises:
        UsageError: one line naming the variable, its value and the accepted range.
    """
    import math
    import re

    from tflab.errors import UsageError

    setting = declared(name)
    lo, hi = setting.seconds
    text = value.strip()
    number = float(text) if re.fullmatch(r"[+]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text) else math.nan
    if not (math.isfinite(number) and lo <= number <= hi):
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise UsageError(f"{name}={shown!r} is not a time limit: give a number of seconds from {lo:g} to {hi:g} "
                         f"(unset: {setting.default}; {setting.meaning})")
    return number


def get_float(name: str, fallback: float, environ: Mapping[str, str] | None = None) -> float:
    """`get` as a float; ``fallback`` when unset (a child's own default, e.g. its timeout)."""
    value = get(name, environ)
    return fallback if value in (None, "") else float(value)


def get_int(name: str, fallback: int, environ: Mapping[str, str] | None = None) -> int:
    """`get` as an int; ``fallback`` when unset."""
    value = get(name, environ)
    return fallback if value in (None, "") else int(value)


def pop(name: str, environ: dict | None = None) -> str | None:
    """Removes ``name`` from ``environ`` (default ``os.environ``) and returns its value, or None."""
    declared(name)
    return (os.environ if environ is None else environ).pop(name, None)


def table_rows(environ: Mapping[str, str] | None = None) -> list[dict]:
    """One dict per setting (`Setting.to_dict`) with ``"value"``: what is set now, or None."""
    env = os.environ if environ is None else environ
    return [{**s.to_dict(), "value": env.get(s.name)} for s in _TABLE]


def _refused(setting: Setting, value: str | None) -> bool:
    """True when ``value`` is set and `check_environment` would refuse it (a switch or a time; folders not probed)."""
    from tflab.errors import UsageError

    if not value:
        return False
    if setting.values:
        return value not in setting.values
    if setting.seconds:
        try:
            seconds_value(setting.name, value)
        except UsageError:
            return True
    return False


def table_text(environ: Mapping[str, str] | None = None) -> str:
    """The table as text: one block per setting, its value now when set (``tflab env``)."""
    from tflab.report.text import table

    env = os.environ if environ is None else environ
    rows = [(s.name, (env.get(s.name, "") + (" (refused: not a value it takes)" if _refused(s, env.get(s.name))
                                              else "")) or ("(unset)" if s.default is None else f"(unset: {s.default})"),
             s.kind, s.meaning) for s in _TABLE]
    return "TFLAB_* settings (tflab/process/settings.py):\n" + table(
        rows, header=("variable", "value", "kind", "meaning"), indent="  ")


def build_cache_dir(package_dir=None):
    """The custom-op build cache folder (`custom_ops.build.build_dir` and the CLI's pre-flight).

    ``$TFLAB_CUSTOM_OPS_BUILD_DIR``, else ``_build`` in the ``custom_ops`` package folder when it can be
    made and written (editable installs), else ``~/.cache/tflab/custom_ops``. The package folder is found
    without importing ``custom_ops`` (its ``__init__`` imports TensorFlow).

    Args:
        package_dir: the ``custom_ops`` folder; default: where Python would import it from.

    Returns:
        A `pathlib.Path` (``_build`` is created when chosen; nothing else is).
    """
    from pathlib import Path

    env = get("TFLAB_CUSTOM_OPS_BUILD_DIR")
    if env:
        return Path(env)
    if package_dir is None:
        import importlib.util

        spec = importlib.util.find_spec("custom_ops")
        package_dir = Path(spec.origin).parent if spec is not None and spec.origin else None
    if package_dir is not None:
        local = Path(package_dir) / "_build"
        try:
            local.mkdir(exist_ok=True)
            if os.access(local, os.W_OK):
                return local
        except OSError:
            pass
    return Path.home() / ".cache" / "tflab" / "custom_ops"
