"""The text of the pytest plugin's trace records (`tflab.pytest_plugin`).

`format_function` is one tf.function's lines in one test (its trace count,
the seconds split into graph building and instantiation/compile/first run,
each retrace's reasons), `summarize` the ``tflab traces`` section of the
terminal summary (per test, then per function across the session, tf.data's
functions in a group of their own, then the session's totals from
`session_totals`). Seconds are counted once: a trace nested in another
(a tf.function called while another traces) is part of its caller's seconds
in a test's total, and only its own seconds go to its function in the
session's list. The JSON file is `tflab._pytest.output`. Importing it
imports neither TensorFlow nor the retrace package; `tflab.pytest_plugin`
re-exports these names.
"""

from __future__ import annotations

from collections import Counter

from tflab.report.text import seconds_text

# The caveat `tflab.retrace.diff` appends to a variable-creation re-trace read from TF's log: the
# plugin records each trace's outcome ("built", "raised", "unknown") instead, and says it once.
CAVEAT_UNKNOWN_OUTCOME = "; TF's log does not say whether this trace succeeded"


def short_parts(qualname: str) -> list[str]:
    """The dotted parts of a qualified name without ``<locals>``: ``['test_x', 'f']``."""
    return [p for p in qualname.split(".") if p and p != "<locals>"]


def name_of(fn_record: dict) -> str:
    module = fn_record.get("module") or ""
    name = f"{module}.{fn_record['qualname']}" if module else fn_record["qualname"]
    return f"{fn_record.get('transformation') or 'tf.data'} {name}" if fn_record.get("group") == "tf.data" else name


def _secs(s: float | None) -> str:
    return seconds_text(s, 3)


def _split(r: dict) -> str:
    if not r.get("build_seconds") and not r.get("compile_seconds"):
        return ""
    return f" (building {_secs(r['build_seconds'])}, compile and first run {_secs(r['compile_seconds'])})"


def format_function(r: dict, indent: str = "") -> str:
    """``step (mod.step): 3 traces, 0.084 s (building …, compile and first run …)`` then one line per trace."""
    untimed = f" ({r['untimed']} untimed)" if r.get("untimed") else ""
    name = r["label"] if r["qualname"] in (r["function"], r["label"]) else f"{r['label']} ({r['qualname']})"
    lines = [f"{indent}{name}: {r['trace_count']} trace{'s' * (r['trace_count'] != 1)}, "
             f"{_secs(r['seconds'])}{_split(r)}{untimed}"]
    for t in r["traces"]:
        where = f" [{t['phase']}]" if t["phase"] != "call" else ""
        nested = " (inside another trace)" if t.get("nested") else ""
        raised = " (raised)" if t.get("outcome") == "raised" else ""
        reasons = "; ".join(t["reasons"]) if t["kind"] not in ("first", "cached") else ""
        lines.append(f"{indent}  #{t['index']} {t['kind']}{where}, {_secs(t['seconds'])}{nested}{raised}"
                     + (f": {reasons}" if reasons else ""))
    return "\n".join(lines)


def _top_level(rec: dict, key: str) -> float:
    return sum(t[key] or 0.0 for f in rec["functions"] for t in f["traces"] if not t.get("nested"))


def seconds_of_test(rec: dict) -> float:
    """A test's trace seconds: its top-level traces (a nested trace is part of its caller's)."""
    return _top_level(rec, "seconds")


def test_split(rec: dict) -> tuple[float, float]:
    """(graph building, instantiation/compile/first run) seconds of a test's top-level traces."""
    return _top_level(rec, "build_seconds"), _top_level(rec, "compile_seconds")


def summarize(records: list[dict], top: int = 10, wall: float | None = None) -> list[str]:
    """The lines of the ``tflab traces`` section for the per-test records (see `TraceRecorder._finish`)."""
    traced = [r for r in records if r["trace_count"] or r.get("data_functions") or r.get("note")]
    lines: list[str] = []
    for rec in traced:
        build, rest = test_split(rec)
        split = f" (building {_secs(build)}, compile and first run {_secs(rest)})" if build or rest else ""
        data = rec.get("data_trace_count") or 0
        data_text = f", and {data} tf.data function trace{'s' * (data != 1)}" if data else ""
        lines.append(f"{rec['nodeid']}: {rec['trace_count']} trace{'s' * (rec['trace_count'] != 1)}, "
                     f"{_secs(rec['trace_seconds'])}{split}{data_text}")
        lines.extend(format_function(f, "  ") for f in rec["functions"])
        lines.extend(format_function(f, "  ") for f in rec.get("data_functions", []))
        if rec.get("note"):
            lines.append(f"  note: {rec['note']}")
    totals = session_totals(records)
    if top:
        for title, rows in (("per tf.function across the session", totals["functions"]),
                            ("tf.data functions (map, filter, ...) across the session", totals["data_functions"])):
            if not rows:
                continue
            lines.append("")
            lines.append(f"{title} (top {min(top, len(rows))} by own seconds; a nested trace counts "
                         f"once, in its own function):")
            for f in rows[:top]:
                lines.extend(_function_lines(f))
    unknown = sum(1 for r in records for f in r["functions"] for t in f["traces"] if t.get("outcome") == "unknown")
    if unknown:
        lines.append(f"note: {unknown} trace{'s were' if unknown != 1 else ' was'} read from TF's log (TensorFlow "
                     f"was imported during the test), which does not say whether a trace succeeded")
    share = ""
    if wall:
        share = f" of the tests' {_secs(wall)} ({100 * totals['seconds'] / wall:.0f}%)" if wall > 0 else ""
    data = sum(f["trace_count"] for f in totals["data_functions"])
    data_text = f"; {data} tf.data function trace{'s' * (data != 1)}" if data else ""
    lines.append(f"session: {totals['trace_count']} trace{'s' * (totals['trace_count'] != 1)} of "
                 f"{len(totals['functions'])} tf.function{'s' * (len(totals['functions']) != 1)} in "
                 f"{sum(1 for r in records if r['trace_count'])} of {len(records)} recorded "
                 f"test{'s' * (len(records) != 1)}, {_secs(totals['seconds'])} (building "
                 f"{_secs(totals['build_seconds'])}, compile and first run {_secs(totals['compile_seconds'])})"
                 f"{share}{data_text}")
    return lines


def _function_lines(f: dict) -> list[str]:
    n = f["trace_count"]
    out = [f"  {_secs(f['own_seconds']):>9}  {f['function']}: {n} trace{'s' * (n != 1)} in {f['tests']} "
           f"test{'s' * (f['tests'] != 1)}, first in {f['first_test']}; building {_secs(f['build_seconds'])}, "
           f"compile and first run {_secs(f['compile_seconds'])}"]
    if f.get("top_reason"):
        example = f" (latest: {f['top_reason_example']})" if f.get("top_reason_example") not in (None, f["top_reason"]) else ""
        out.append(f"             most common retrace reason ({f['top_reason_count']} of {f['retraces']} "
                   f"retraces): {f['top_reason']}{example}")
    return out


def _aggregate(records: list[dict], key: str) -> list[dict]:
    by_name: dict[str, dict] = {}
    for rec in sorted(records, key=lambda r: r.get("order", 0)):
        for f in rec.get(key, []):
            name = name_of(f) if key == "functions" else f"{f['label']} ({f['module']}.{f['qualname']})"
            agg = by_name.setdefault(name, {"function": name, "trace_count": 0, "own_seconds": 0.0,
                                            "build_seconds": 0.0, "compile_seconds": 0.0, "tests": 0,
                                            "first_test": rec["nodeid"], "_tests": set(), "_reasons": Counter(), "_examples": {},
                                            "retraces": 0})
            agg["trace_count"] += f["trace_count"]
            agg["own_seconds"] += f.get("own_seconds", f["seconds"])
            agg["build_seconds"] += f.get("build_seconds") or 0.0
            agg["compile_seconds"] += f.get("compile_seconds") or 0.0
            agg["_tests"].add(rec["nodeid"])
            for t in f["traces"]:
                if t["kind"] == "retrace":
                    agg["retraces"] += 1
                    cause = "; ".join(t.get("causes") or t["reasons"])
                    if cause:
                        agg["_reasons"][cause] += 1
                        agg["_examples"][cause] = "; ".join(t["reasons"])
    out = []
    for agg in by_name.values():
        agg["tests"] = len(agg.pop("_tests"))
        agg["seconds"] = agg["own_seconds"]
        common = agg.pop("_reasons").most_common(1)
        examples = agg.pop("_examples")
        agg["top_reason"], agg["top_reason_count"] = common[0] if common else (None, 0)
        agg["top_reason_example"] = examples.get(agg["top_reason"]) if common else None
        out.append(agg)
    out.sort(key=lambda a: (-a["own_seconds"], -a["trace_count"], a["function"]))
    return out


def session_totals(records: list[dict]) -> dict:
    """``trace_count``, seconds (total, building, compile and first run), ``functions`` and ``data_functions``.

    Each function's row: ``function`` (module-qualified name), ``trace_count``,
    ``tests`` (how many tests traced it), ``first_test`` (the first one to, in
    run order), ``own_seconds`` (also ``seconds``), ``build_seconds``,
    ``compile_seconds``, ``retraces`` and the most common retrace reason
    (``top_reason``: its parameter and kind, ``x: shape``; ``top_reason_count``;
    ``top_reason_example``: the latest such reason's text); most own seconds first.
    """
    return {"trace_count": sum(r["trace_count"] for r in records),
            "seconds": sum(r["trace_seconds"] for r in records),
            "build_seconds": sum(test_split(r)[0] for r in records),
            "compile_seconds": sum(test_split(r)[1] for r in records),
            "functions": _aggregate(records, "functions"),
            "data_functions": _aggregate(records, "data_functions")}
