"""The text and the file of the pytest plugin's trace records (`tflab.pytest_plugin`).

`format_function` is one tf.function's line (its trace count, the reasons of
each retrace, the seconds), `summarize` the ``tflab traces`` section of the
terminal summary (per test, the most expensive functions, the session's
totals from `session_totals`), and `write_json_atomically` the
``--tflab-traces-json`` file (written in place for a device or FIFO, else
through a temporary file and ``os.replace``). Importing it imports neither
TensorFlow nor the retrace package; `tflab.pytest_plugin` re-exports these
names.
"""

from __future__ import annotations

import json
import os
import tempfile

from tflab.report.text import seconds_text


def name_of(fn_record: dict) -> str:
    module = fn_record.get("module") or ""
    return f"{module}.{fn_record['qualname']}" if module else fn_record["qualname"]


def _secs(s: float | None) -> str:
    return seconds_text(s, 3)


def format_function(r: dict, indent: str = "") -> str:
    """``step (mod.step): 3 traces, 0.084 s`` then one line per trace with its kind, seconds and reasons."""
    untimed = f" ({r['untimed']} untimed)" if r.get("untimed") else ""
    name = r["label"] if r["qualname"] in (r["function"], r["label"]) else f"{r['label']} ({r['qualname']})"
    lines = [f"{indent}{name}: {r['trace_count']} trace{'s' * (r['trace_count'] != 1)}, "
             f"{_secs(r['seconds'])}{untimed}"]
    for t in r["traces"]:
        where = f" [{t['phase']}]" if t["phase"] != "call" else ""
        nested = " (inside another trace)" if t.get("nested") else ""
        reasons = "; ".join(t["reasons"]) if t["kind"] not in ("first", "cached") else ""
        lines.append(f"{indent}  #{t['index']} {t['kind']}{where}, {_secs(t['seconds'])}{nested}"
                     + (f": {reasons}" if reasons else ""))
    return "\n".join(lines)


def seconds_of_test(rec: dict) -> float:
    """A test's trace seconds: its top-level traces (a nested trace is part of its caller's)."""
    return sum(t["seconds"] or 0.0 for f in rec["functions"] for t in f["traces"] if not t.get("nested"))


def summarize(records: list[dict], top: int = 10, wall: float | None = None) -> list[str]:
    """The lines of the ``tflab traces`` section for the per-test records (see `TraceRecorder.record`)."""
    traced = [r for r in records if r["trace_count"]]
    lines: list[str] = []
    for rec in traced:
        lines.append(f"{rec['nodeid']}: {rec['trace_count']} trace{'s' * (rec['trace_count'] != 1)}, "
                     f"{_secs(rec['trace_seconds'])}")
        lines.extend(format_function(f, "  ") for f in rec["functions"])
        if rec.get("note"):
            lines.append(f"  note: {rec['note']}")
    totals = session_totals(records)
    if traced and top:
        lines.append("")
        lines.append(f"most expensive tf.functions (top {min(top, len(totals['functions']))} by seconds tracing):")
        for f in totals["functions"][:top]:
            lines.append(f"  {_secs(f['seconds']):>9}  {f['function']}: {f['trace_count']} "
                         f"trace{'s' * (f['trace_count'] != 1)} in {f['tests']} "
                         f"test{'s' * (f['tests'] != 1)}")
    share = ""
    if wall:
        share = f" of the tests' {_secs(wall)} ({100 * totals['seconds'] / wall:.0f}%)" if wall > 0 else ""
    lines.append(f"session: {totals['trace_count']} trace{'s' * (totals['trace_count'] != 1)} of "
                 f"{len(totals['functions'])} tf.function{'s' * (len(totals['functions']) != 1)} in "
                 f"{len(traced)} of {len(records)} recorded test{'s' * (len(records) != 1)}, "
                 f"{_secs(totals['seconds'])} tracing{share}")
    return lines


def session_totals(records: list[dict]) -> dict:
    """``trace_count``, ``seconds`` and ``functions`` (per qualified name, most seconds first)."""
    by_name: dict[str, dict] = {}
    for rec in records:
        for f in rec["functions"]:
            name = name_of(f)
            agg = by_name.setdefault(name, {"function": name, "trace_count": 0, "seconds": 0.0,
                                            "tests": 0, "_tests": set()})
            agg["trace_count"] += f["trace_count"]
            agg["seconds"] += f["seconds"]
            agg["_tests"].add(rec["nodeid"])
    functions = []
    for agg in by_name.values():
        agg["tests"] = len(agg.pop("_tests"))
        functions.append(agg)
    functions.sort(key=lambda a: (-a["seconds"], -a["trace_count"], a["function"]))
    return {"trace_count": sum(r["trace_count"] for r in records),
            "seconds": sum(r["trace_seconds"] for r in records), "functions": functions}

def write_json_atomically(path: str, data: dict) -> None:
    """Writes ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # A device or a FIFO (/dev/stdout, /dev/full, a pipe): written in place, never replaced by a
        # regular file (os.replace over /dev/full would replace the machine's device). O_NONBLOCK: a
        # FIFO with no reader is an error (ENXIO), not a hang.
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=False, default=str)
            fh.write("\n")
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tflab-traces-", suffix=".json.tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=False, default=str)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
