"""The facts a tour report states, for comparing two tours (faster, same claims).

A tour made faster must still show what it showed: every key of
``report.json`` and every verdict (trace counts and kinds, retrace reasons,
bit-exact and within-bound verdicts, statuses) the same. `report_facts`
reduces a report to those two parts and `compare_facts` lists how a report
differs from a stored expectation (``tests/data/tour/expected_facts.json``,
written from a tour of main at 176dbcb, before the speed work).

Only facts that follow from TF's behaviour, not from this CPU, are verdicts:
ULP distances, absolute errors, seconds, sizes and fusion counts vary with the
ISA, oneDNN and load, so they are compared as keys (present), not values.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

# Dicts whose keys are data (op types, tensor and device names), not facts:
# their keys collapse to "*" so an op count or a variable name does not make
# a different report.
OPEN_MAPS = frozenset({"op_counts", "fusion_kinds", "ulp_by_tensor", "hlo", "ops_per_device",
                       "cross_replica_ops", "replica_runs_per_trace", "outputs", "gradients_by_tensor"})

# Values compared exactly: fnmatch patterns over paths with list indices ("traces[1].kind").
VERDICTS = (
    "trace.function_type", "trace.variables", "trace.captured_tensors", "trace.control_flow",
    "retrace.batch_sizes", "retrace.trace_count", "retrace.tf_tracing_count", "retrace.calls",
    "retrace.traces[[]*[]].kind", "retrace.traces[[]*[]].reasons", "retrace.traces[[]*[]].scope",
    "retrace.traces[[]*[]].inputs.*", "retrace.traces[[]*[]].compared_with", "retrace.traces[[]*[]].fixes",
    "demonstrate_retracing.counts.*",
    "stabilize.inference.variants.*.traces", "stabilize.inference.variants.*.traced_specs",
    "stabilize.train_step.*",
    "diagnosis.kind", "diagnosis.ok", "diagnosis.stage",
    "autograph.statements[[]*[]].kind", "autograph.statements[[]*[]].outcome",
    "autograph.statements[[]*[]].op_type", "autograph.statements[[]*[]].unrolled",
    "modes.batch", "modes.*.modes.*.error",
    "export.saved_model_bit_exact", "export.variants.*.status", "export.variants.*.within_bound",
    "export.variants.*.error", "export.variants.*.vacuous_outputs",
    "custom_op.opcheck_failed", "custom_op.opcheck.checks[[]*[]].name",
    "precision.tiny_loss.policies.*.verdict", "precision.loss_scaling.rows[[]*[]].label",
    "distribute.replicas_in_sync", "distribute.per_replica_shapes", "distribute.plain.trace_count",
    "distribute.plain.replica_runs", "distribute.plain.reasons", "distribute.element_spec.trace_count",
    "distribute.element_spec.replica_runs", "distribute.stabilize.*", "distribute.drop_remainder.*",
)


# Fields renamed by the one field vocabulary (tflab/report/base.py): (pattern of the
# old path, old segment, new segment). A path is compared under its current name, so a stored
# expectation written before the rename still compares with a new report, key for key.
RENAMED = (
    ("modes.*.modes.*.max_abs_diff.*", "max_abs_diff", "abs_error"),
    ("modes.*.modes.*.max_ulp_above_atol.*", "max_ulp_above_atol", "ulp_above_atol"),
    ("modes.*.modes.*.max_ulp.*", "max_ulp", "ulp"),
    ("stabilize.*.max_abs_diff", "max_abs_diff", "max_abs_error"),
)


# How far a checked fix's outputs are from eager's varies with the kernels (a graph may round one ULP
# away from eager on one CPU and not on another); that it equals eager's within its printed bound is
# the verdict: "(bit for bit)" and "(within N ULP, bound M: why)" compare alike.
_VALUES_DETAIL = re.compile(r"(outputs equal eager's on your \d+ calls?) \((?:bit for bit|within [^()]*(?:\([^()]*\)[^()]*)*)\)")


def _verdict_value(value: Any) -> Any:
    """A verdict with its CPU-dependent detail folded (`_VALUES_DETAIL`); other values unchanged."""
    if isinstance(value, str):
        return _VALUES_DETAIL.sub(r"\1 (within its bound)", value)
    if isinstance(value, list):
        return [_verdict_value(v) for v in value]
    return value


def current_path(path: str) -> str:
    """``path`` with the segment a `RENAMED` entry renamed given its current name (else unchanged)."""
    for pattern, old, new in RENAMED:
        if fnmatch.fnmatchcase(path, pattern):
            parts = path.split(".")
            i = max(j for j, p in enumerate(parts) if p == old)
            return ".".join(parts[:i] + [new] + parts[i + 1:])
    return path


def _is_open(name: str, value: dict) -> bool:
    return name in OPEN_MAPS or any(":" in str(k) or "/" in str(k) for k in value)


def _walk(value: Any, path: str, out: dict, indexed: bool) -> None:
    name = path.rsplit(".", 1)[-1]
    if isinstance(value, dict) and value and not _is_open(name, value):
        for k, v in value.items():
            _walk(v, f"{path}.{k}" if path else str(k), out, indexed)
    elif isinstance(value, dict) and value:
        out[f"{path}.*"] = None
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _walk(v, f"{path}[{i if indexed else ''}]", out, indexed)
    else:
        out[path] = value


def report_facts(report: dict) -> dict:
    """The keys and verdicts of a tour report.

    Args:
        report: ``run_tour``'s dict or ``report.json`` loaded.

    Returns:
        ``{"keys": [path, …], "verdicts": {path: value}}``: every leaf's path
        (lists of records as ``name[]``, data-keyed maps as ``name.*``), sorted,
        and the value at each path that matches `VERDICTS`.
    """
    import json

    from tflab.report.jsonable import to_jsonable

    report = json.loads(json.dumps(to_jsonable(report)))  # as report.json holds it
    keys: dict = {}
    _walk(report, "", keys, indexed=False)
    leaves: dict = {}
    _walk(report, "", leaves, indexed=True)
    verdicts = {p: _verdict_value(v) for p, v in leaves.items()
                if any(fnmatch.fnmatchcase(p, pat) for pat in VERDICTS)}
    return {"keys": sorted(keys), "verdicts": dict(sorted(verdicts.items()))}


def compare_facts(report: dict, expected: dict, ignore: tuple[str, ...] = (),
                  new_keys: bool = False) -> list[str]:
    """How ``report``'s facts differ from ``expected`` (a `report_facts` result); [] when the same.

    Args:
        report: a tour report.
        expected: the stored facts.
        ignore: fnmatch patterns of paths not compared (e.g. sections not run).
        new_keys: also list keys and verdicts the expectation lacks (by
            default a report may add facts; it may not drop or change one).

    Returns:
        One line per difference: a key or verdict missing, a verdict changed
        (and with ``new_keys``, one that is new).
    """
    got = report_facts(report)
    got = {"keys": [current_path(k) for k in got["keys"]],
           "verdicts": {current_path(p): v for p, v in got["verdicts"].items()}}
    expected = {"keys": [current_path(k) for k in expected["keys"]],
                "verdicts": {current_path(p): v for p, v in expected["verdicts"].items()}}

    def kept(p: str) -> bool:
        return not any(fnmatch.fnmatchcase(p, pat) for pat in ignore)

    lines = [f"missing key {k}" for k in expected["keys"] if k not in set(got["keys"]) and kept(k)]
    if new_keys:
        lines += [f"new key {k}" for k in got["keys"] if k not in set(expected["keys"]) and kept(k)]
    for p, v in expected["verdicts"].items():
        if not kept(p):
            continue
        if p not in got["verdicts"]:
            lines.append(f"missing verdict {p} (expected {v!r})")
        elif got["verdicts"][p] != v:
            lines.append(f"verdict {p}: {got['verdicts'][p]!r}, expected {v!r}")
    if new_keys:
        lines += [f"new verdict {p} = {v!r}" for p, v in got["verdicts"].items()
                  if p not in expected["verdicts"] and kept(p)]
    return lines
