"""Three scripts written against tflab 0.1.0 run on today's API with only DeprecationWarnings.

Each is a REPL session a user would have had (tests/data/earlier_api/): the mode
comparison's distances, the stabilize/SavedModel check's fields, old module paths
and top-level names. Each must run to its end, and every warning it gets is a
DeprecationWarning carrying the sentence of tflab/_api/deprecations.py's table for the
old name on that line.
"""

from __future__ import annotations

import os
import runpy
import sys
import warnings

import pytest

from tflab._api import deprecations as dep

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "earlier_api")

SCRIPTS = {
    "modes_session.py": {"ModeComparison.function", "ModeResult.max_abs_diff", "ModeResult.max_ulp_above_atol"},
    "export_session.py": {"StabilizeReport.max_abs_diff", "SavedModelCheck.examples", "OutputBits.max_abs_diff"},
    "imports_session.py": {"tflab.litert_check", "tflab.float_formats", "tflab.retrace_probe",
                           "tflab.DiagnosedError", "AutographDiff.function"},
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_script_against_the_earlier_api_runs_with_only_deprecation_warnings(script, tmp_path, monkeypatch,
                                                                                capsys):
    monkeypatch.setenv("SAVE_DIR", str(tmp_path))
    for d in dep.MODULES:
        monkeypatch.delitem(sys.modules, d.old, raising=False)
    dep.reset_warned()
    path = os.path.join(DATA, script)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runpy.run_path(path, run_name="__main__")
    dep.reset_warned()
    ours = [w for w in caught if w.filename == path]
    assert all(w.category is DeprecationWarning for w in ours), [str(w.message) for w in ours]
    by_old = {d.old: d.message for d in dep.TABLE}
    assert sorted(str(w.message) for w in ours) == sorted(by_old[o] for o in SCRIPTS[script])
    assert capsys.readouterr().out.strip()  # it got to its last line and printed
