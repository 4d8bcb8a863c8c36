"""Why did my tf.function fail? The culprit line, the kind of mistake, the fix.

`diagnose` traces a function the way `autograph_diff` does, runs the
ConcreteFunction once, and when either step raises it classifies the failure by
the mechanism that raised it, not by the message text:

* **the frame that raised**: TF raises each of these mistakes from one place,
  and that frame's locals hold the objects involved. AutoGraph's checks in
  ``autograph/operators/control_flow.py`` (``verify_single_cond_var``: a
  variable None or of another dtype in one branch of an ``If``;
  ``_verify_single_loop_var``: a loop variable whose dtype/shape changes;
  ``verify_loop_init_vars``: a ``return`` in a ``While``), ``Tensor._disallow_*``
  (``framework/tensor.py``: a symbolic tensor used as a Python bool or
  iterated), ``Tensor.__getattr__`` (``.numpy()``), ``op_def_library``'s
  ``_ExtractInputsAndAttrs`` (an op's inputs of two dtypes; the frame holds the
  operands) and ``CaptureContainer.capture_by_value``
  (``core/function/capture/capture_container.py``: the tensor that cannot be
  captured, whose ``.graph`` says where it was made);
* **the culprit statement's AST**, read from the user's file at the line
  AutoGraph maps the error to (``ag_error_metadata.translated_stack``,
  ``autograph/pyct/error_utils.py``), evaluated against the failing frame's
  locals where a static shape matters (``x.shape[0]`` is None);
* **AutoGraph's statement map** (`tflab.autograph`'s trace-time counter): which
  ``if``/``for``/``while`` became an ``If``/``While`` op, and which branch or
  body FuncGraph a tensor belongs to.

Traceback filtering (``tf.debugging.disable_traceback_filtering``) is turned
off for the trace so the raising frame is kept. A failure no rule explains is
``unrecognized`` and still names the user's line and TF's first line.

Every fix is a `tflab.fix.Fix` (``Diagnosis.fix_plan``): where the rule can write
it mechanically (a NumPy call -> the core TF op with its dtype cast, ``x.shape[i]`` ->
``tf.shape(x)[i]``, a layer or tf.Variable hoisted, a list -> a tf.TensorArray, a cast,
a shape invariant, ``tf.where`` / ``tf.reduce_any`` for a vector ``if`` ...), each
candidate is applied to a copy of the function, traced, run once on the same arguments
and compared with the function run eagerly (ULP, `tflab._graph.numeric`); the first that works
is printed (``checked: ...``), one that failed never is, and an advice-only fix says
``not checked: why``.

The hooks are `diagnose_exception` and `with_diagnosis`: other modules that caught
a tracing error (`trace_and_inspect`, `autograph_diff`, `compare_modes`,
`RetraceProbe`, `stabilize`) call them to turn TF's wall of text into one `Diagnosis`.

The package, one module per concern (each imports only those listed before it):

* ``fixes``: AST rewrites of a copy of the function, traced and run (`run_fixed`, `trace_fixed`);
* ``per_iteration``: a layer or tf.Variable built in a Python loop, built once per iteration outside;
* ``record``: the `Diagnosis` record;
* ``frames``: the traceback frames with their locals, the user's own site;
* ``source``: the user's file parsed once, shape reads, the statement map;
* ``reference``: the original function's eager outputs on tflab's input (and on draws that
  take the other branch), the ULP bound of a fix that changes a dtype on purpose;
* ``rebind``: a global, closure variable or ``self`` attribute rebound to a tensor inside the
  function, and its ``NAME.assign…`` fix checked on calls in a row;
* ``context``: what a rule knows about the function, `make`, running each candidate fix
  on a copy and comparing it with eager (`tflab.fix.first_working`, `tflab.fix.values_match`);
* ``baked``: the Const ops a NumPy array became while tracing, in bytes, and their fix
  (`trace_and_inspect`);
* ``rules_fixed``, ``rules_python``, ``rules_graph``: the classifiers;
* ``rules``: `RULES`, one `Rule` per mistake (classifier + fix), tried in order;
* ``hooks``: `diagnose_exception`, `with_diagnosis`, `diagnosed_error`,
  `diagnosis_note`, `probe_diagnosis`;
* ``engine``: `diagnose`.

TF internals (traceback filtering, ``Function._clone``, the trace cache,
AutoGraph's operators) are reached through `tflab._tf.autograph`. Importing the
package imports none of its parts: names load on first use.
"""

from __future__ import annotations

import importlib

from tflab._api.lazy import lazy_exports

_EXPORTS = {
    "diagnose": "engine",
    **dict.fromkeys(("NUMPY_TO_TF", "FunctionSource", "numpy_equivalent", "trace_fixed"), "fixes"),
    **dict.fromkeys(("diagnose_exception", "diagnosed_error", "diagnosis_note", "probe_diagnosis",
                     "with_diagnosis"), "hooks"),
    **dict.fromkeys(("SILENT_STAGE", "UNKNOWN_DIM_SIZE", "Diagnosis", "diagnosis_suffix"), "records"),
    **dict.fromkeys(("RULES", "Rule"), "rules"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS,
                                      lambda part: importlib.import_module(f"tflab.diagnosis.{part}"))
