"""The pytest plugin's files: ``--tflab-traces-json`` (checked first, written atomically) and the baseline.

The output follows the CLI's rules for what tflab writes:

* `check_json_path` runs at session start (``pytest_configure``): an empty
  path, a missing folder, a folder, a named FIFO, a folder where no file can be
  created (probed by creating one: ``os.access`` says yes to root on
  ``/proc``), and an existing file that tflab did not write are refused in
  one line before any test runs. A file tflab wrote carries ``"tool":
  "tflab.pytest_plugin"`` (`TOOL`); any other file is replaced only with
  ``--tflab-traces-force``, as the CLI's ``--force`` replaces only what
  tflab wrote unless told.
* `write_json_atomically` writes a regular file through a temporary file in
  the same folder and ``os.replace``; a device or an open pipe
  (``/dev/stdout``) is written in place with blocking writes, so a reader that
  drains slowly still gets the whole document.
* `load_baseline` / `compare_with_baseline`: ``--tflab-traces-baseline
  OLD.json`` (pytest-benchmark's ``--benchmark-compare`` for trace counts):
  per test and function (module-qualified name), the functions that traced
  more than in the baseline, with the new traces' reasons and call sites.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile

TOOL = "tflab.pytest_plugin"


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
    that drains slowly gets the whole document.
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
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tflab-traces-", suffix=".json.tmp", dir=folder)
    try:
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

    Raises:
        OutputError: the file is missing, not JSON, or not a trace record.
    """
    flag = "--tflab-traces-baseline"
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise OutputError(f"{flag} {path}: no such file; write one with --tflab-traces-json") from None
    except (OSError, ValueError) as e:
        raise OutputError(f"{flag} {path}: not a readable JSON trace record ({e})") from None
    if not isinstance(doc, dict) or doc.get("tool") != TOOL or not isinstance(doc.get("tests"), list):
        raise OutputError(f"{flag} {path}: not a trace record of tflab's pytest plugin "
                          f"(written by --tflab-traces-json)")
    return {rec["nodeid"]: counts_of(rec) for rec in doc["tests"] if isinstance(rec, dict) and "nodeid" in rec}


def counts_of(rec: dict) -> dict[str, int]:
    """{module-qualified function name: traces} of one test's record (tf.data's under their own names)."""
    from tflab._pytest_summary import name_of

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
    from tflab._pytest_summary import name_of

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
