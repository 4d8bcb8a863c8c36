"""The pytest plugin's files: ``--tflab-traces-json`` (checked first, written atomically) and the baseline.

The output follows the CLI's rules for what tflab writes:

* `check_json_path` runs at session start (``pytest_configure``): an empty
  path, a missing folder, a folder, a named FIFO, a folder where no file can be
  created (probed by creating one: ``os.access`` says yes to root on
  ``/proc``), and an existing file that tflab did not write are refused in
  one line before any test runs. A file tflab wrote carries ``"tool":
  "tflab.pytest_plugin"`` (`TOOL`); any other file is replaced only with
  ``--tflab-traces-force``, as the CLI's ``--force`` replaces only what
  tflab wrote unless told. A symlink is refused (an atomic replace would
  put a regular file in the link's place and break it); with
  ``--tflab-traces-force`` the record is written through the link: atomically
  into the target's folder, replacing the target, and the link stays.
* `write_json_atomically` writes a regular file through a temporary file in
  the same folder and ``os.replace``; a device or an open pipe
  (``/dev/stdout``) is written in place with blocking writes, so a reader that
  drains slowly still gets the whole document. A new file gets the umask's
  mode (0644 under umask 022), as ``>`` would; a replaced file keeps its mode.
* `load_baseline` / `compare_with_baseline`: ``--tflab-traces-baseline
  OLD.json`` (pytest-benchmark's ``--benchmark-compare`` for trace counts):
  per test and function (module-qualified name), the functions that traced
  more than in the baseline, with the new traces' reasons and call sites.
  The baseline is read through `tflab._io.path_checks.read_regular` (a FIFO,
  a device or a folder is refused, never read) and its whole schema is
  checked at session start: a bad field is one line naming its path
  (``tests[2].functions[0].trace_count``), never an INTERNALERROR later.
"""

from __future__ import annotations

import json
import os
import stat
import math
import tempfile

from tflab._io.path_checks import read_regular
from tflab.errors import UsageError

TOOL = "tflab.pytest_plugin"

#: The version of the JSON record this plugin writes (and the only one it reads as a baseline).
RECORD_VERSION = 1


class OutputError(Exception):
    """A path or baseline the plugin refuses; the message says what to do."""


def _in_place(path: str) -> bool:
    """A path under /dev or /proc (``/dev/stdout``, ``/dev/fd/3``): written where it points, never replaced."""
    return os.path.abspath(path).startswith(("/dev/", "/proc/")) and os.path.exists(path)


def _is_pipe_alias(path: str) -> bool:
    # /dev/stdout or /dev/fd/N naming an anonymous pipe: realpath gives "pipe:[…]", no file on disk.
    real = os.path.realpath(path)
    return not os.path.exists(real) or os.path.basename(real).startswith("pipe:")


def check_json_path(path: str, force: bool = False) -> None:
    """Refuses, before any test runs, a ``--tflab-traces-json`` path the session could not write or should not.

    Raises:
        OutputError: with the reason and what to do.
    """
    flag = "--tflab-traces-json"
    if not path or not path.strip():
        raise OutputError(f"{flag} needs a file path, got {path!r}")
    if os.path.islink(path) and not _in_place(path):
        if not force:
            raise OutputError(f"{flag} {path} is a symlink (to {os.readlink(path)}): the record is written "
                              f"atomically, which would replace the link with a file; give the target's path, "
                              f"or add --tflab-traces-force to write through the link to its target")
        path = _through_link(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise OutputError(f"{flag} {path}: {e.strerror or e}; give another path") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{flag} {path} is a folder; give a file path (e.g. {os.path.join(path, 'traces.json')})")
    if mode is not None and stat.S_ISFIFO(mode) and not _is_pipe_alias(path):
        raise OutputError(f"{flag} {path} is a named FIFO: the record is written atomically to a file; "
                          f"give a file path, or /dev/stdout to pipe it")
    if mode is not None and (not stat.S_ISREG(mode) or _in_place(path)):
        return  # a device or an open pipe (/dev/stdout, /dev/null): written in place at the end
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OutputError(f"{flag} {path}: the folder {parent} does not exist; create it or give another path")
    try:  # can a file be created there? (the temporary file the record goes through)
        fd, probe = tempfile.mkstemp(prefix=".tflab-traces-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot create a file in {parent} ({e.strerror or e}); "
                          f"give a writable path") from None
    if mode is not None and not force and os.path.getsize(path) > 0 and not written_by_tflab(path):
        raise OutputError(f"{flag} {path} exists and tflab did not write it; give another path, or add "
                          f"--tflab-traces-force to replace it")


def _through_link(path: str) -> str:
    """The file a symlink leads to (a dangling link's target is the file to create), for ``--tflab-traces-force``."""
    return os.path.realpath(path) if os.path.islink(path) else path


def _new_file_mode(replaced: str) -> int:
    """The permission bits of the written record: the replaced file's own, or ``0o666`` less the umask."""
    try:
        st = os.stat(replaced)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def written_by_tflab(path: str) -> bool:
    """The file is a trace record this plugin wrote (its ``tool`` field), judged from its first 4 KiB."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return head.lstrip().startswith("{") and f'"tool": "{TOOL}"' in head


def write_json_atomically(path: str, data: dict) -> None:
    """Writes ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    A device, an open pipe, or a path under /dev or /proc (``/dev/stdout``
    redirected to a file) is written in place (never replaced by a regular
    file): opened without blocking so that a FIFO with no reader is an error
    (ENXIO), not a hang, then switched to blocking writes so that a reader
    that drains slowly gets the whole document. A symlink (let through by
    `check_json_path` only with ``--tflab-traces-force``) is written through:
    the target is replaced from its own folder and the link is kept. The file
    gets the replaced file's mode, or the umask's for a new one (``mkstemp``
    alone would leave it 0600).
    """
    text = json.dumps(data, indent=1, sort_keys=False, default=str) + "\n"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and (not stat.S_ISREG(mode) or _in_place(path)):
        # O_APPEND: /dev/stdout redirected to a file keeps what pytest already printed there
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_APPEND)
        try:
            os.set_blocking(fd, True)
            payload = text.encode()
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return
    path = _through_link(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tflab-traces-", suffix=".json.tmp", dir=folder)
    try:
        os.fchmod(fd, _new_file_mode(path))
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---------------------------------------------------------------------------
# The baseline
# ---------------------------------------------------------------------------


def load_baseline(path: str) -> dict:
    """The trace counts of a stored ``--tflab-traces-json`` file: {test id: {function: count}}.

    Read through `read_regular` (a FIFO would block ``open`` for ever; a
    device reads for ever) and checked whole by `check_baseline` before any
    test runs.

    Raises:
        OutputError: the file is missing, not a regular file, not JSON (or
            nested past Python's recursion limit), or not a trace record of
            version `RECORD_VERSION`; the message names the bad field's path.
    """
    flag = "--tflab-traces-baseline"
    try:
        data = read_regular(path, what=flag)
    except FileNotFoundError:
        raise OutputError(f"{flag} {path}: no such file; write one with --tflab-traces-json") from None
    except UsageError as e:
        raise OutputError(str(e)) from None
    except OSError as e:
        raise OutputError(f"{flag} {path}: {e.strerror or e}; give a trace record written by "
                          f"--tflab-traces-json") from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise OutputError(f"{flag} {path}: not a readable JSON trace record ({why}); write one with "
                          f"--tflab-traces-json") from None
    if not isinstance(doc, dict) or doc.get("tool") != TOOL or not isinstance(doc.get("tests"), list):
        raise OutputError(f"{flag} {path}: not a trace record of tflab's pytest plugin "
                          f"(written by --tflab-traces-json)")
    problem = check_baseline(doc)
    if problem:
        raise OutputError(f"{flag} {path}: {problem}; write the baseline again with --tflab-traces-json")
    return {rec["nodeid"]: counts_of(rec) for rec in doc["tests"]}


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_baseline(doc: dict) -> str | None:
    """The first field of a trace record that the comparison cannot use, as "FIELD.PATH is …", or None.

    Checks what `counts_of` and `compare_with_baseline` read: ``version`` is
    `RECORD_VERSION`; each of ``tests`` is an object with a non-empty string
    ``nodeid``; its ``functions`` / ``data_functions`` (absent = none) are
    lists of objects with a string ``qualname``, a string or null ``module``,
    ``transformation`` and ``group``, and a ``trace_count`` that is a whole
    number >= 0 (not a bool, a float, NaN or a string).
    """
    version = doc.get("version")
    if version != RECORD_VERSION or isinstance(version, bool):
        return (f"version is {_shown(version)}, and this tflab reads version {RECORD_VERSION}"
                if "version" in doc else f"version is missing (this tflab reads version {RECORD_VERSION})")
    for i, rec in enumerate(doc["tests"]):
        at = f"tests[{i}]"
        if not isinstance(rec, dict):
            return f"{at} is {_shown(rec)}, not an object"
        if not isinstance(rec.get("nodeid"), str) or not rec["nodeid"]:
            return f"{at}.nodeid is {_shown(rec.get('nodeid'))}, not a test id"
        for key in ("functions", "data_functions"):
            fns = rec.get(key, [])
            if not isinstance(fns, list):
                return f"{at}.{key} is {_shown(fns)}, not a list"
            for j, fn in enumerate(fns):
                where = f"{at}.{key}[{j}]"
                if not isinstance(fn, dict):
                    return f"{where} is {_shown(fn)}, not an object"
                if not isinstance(fn.get("qualname"), str) or not fn["qualname"]:
                    return f"{where}.qualname is {_shown(fn.get('qualname'))}, not a function name"
                for opt in ("module", "transformation", "group"):
                    if fn.get(opt) is not None and not isinstance(fn[opt], str):
                        return f"{where}.{opt} is {_shown(fn[opt])}, not a string"
                if not _is_count(fn.get("trace_count", 0)):
                    return f"{where}.trace_count is {_shown(fn.get('trace_count'))}, not a count (a whole number >= 0)"
    return None


def _shown(v: object) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    text = json.dumps(v, default=str)
    return text if len(text) <= 40 else f"{text[:40]}…"


def counts_of(rec: dict) -> dict[str, int]:
    """{module-qualified function name: traces} of one test's record (tf.data's under their own names)."""
    from tflab._pytest.summary import name_of

    out: dict[str, int] = {}
    for f in rec.get("functions", []) + rec.get("data_functions", []):
        out[name_of(f)] = out.get(name_of(f), 0) + int(f.get("trace_count", 0))
    return out


def compare_with_baseline(baseline: dict, records: list[dict]) -> list[dict]:
    """Each (test, function) that traced more than in the baseline, with the new traces' reasons and sites.

    A test the baseline does not hold is new, not an increase; a function new
    in a test the baseline holds counts from 0.

    Returns:
        Rows ``nodeid``, ``function``, ``baseline``, ``now`` and ``traces``
        (the traces past the baseline's count: ``kind``, ``reasons``, ``site``).
    """
    from tflab._pytest.summary import name_of

    rows = []
    for rec in sorted(records, key=lambda r: r["nodeid"]):
        old = baseline.get(rec["nodeid"])
        if old is None:
            continue
        for name, now in counts_of(rec).items():
            before = old.get(name, 0)
            if now <= before:
                continue
            traces = [t for f in rec.get("functions", []) + rec.get("data_functions", [])
                      if name_of(f) == name for t in f["traces"]]
            rows.append({"nodeid": rec["nodeid"], "function": name, "baseline": before, "now": now,
                         "traces": [{"kind": t["kind"], "reasons": t["reasons"], "site": t["site"]}
                                    for t in traces[before:]]})
    return rows


def increase_lines(rows: list[dict], path: str) -> list[str]:
    lines = [f"trace counts above the baseline {path}:"]
    for r in rows:
        lines.append(f"  {r['nodeid']}: {r['function']}: {r['baseline']} -> {r['now']} traces")
        for t in r["traces"]:
            why = "; ".join(t["reasons"]) if t["reasons"] else f"its {t['kind']} trace"
            lines.append(f"    {t['kind']}{' at ' + t['site'] if t['site'] else ''}: {why}")
    return lines


def increase_summary(rows: list[dict], path: str) -> str:
    extra = sum(r["now"] - r["baseline"] for r in rows)
    tests = len({r["nodeid"] for r in rows})
    return (f"{len(rows)} function{'s' * (len(rows) != 1)} in {tests} test{'s' * (tests != 1)} traced "
            f"{extra} time{'s' * (extra != 1)} more than in the baseline {path}")
