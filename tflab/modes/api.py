"""Lab step 6: one function run eagerly, as a graph, and compiled by XLA, compared.

The same Python function can run three ways:

* eager: each op dispatches its kernel at once (``eager/execute.py``);
* graph: `tf.function` traces it into a FuncGraph, Grappler rewrites the graph
  (``grappler/optimizers/meta_optimizer.cc``: constant folding, arithmetic and
  layout passes, the remapper's fused kernels), and the executor runs it;
* XLA: ``tf.function(jit_compile=True)`` lowers the whole FuncGraph to HLO
  (``tf2xla``), XLA optimizes it (fusion among others) and runs the compiled
  program.

`compare_modes` runs one forward pass plus a `tf.GradientTape` backward pass
in each mode, and measures how far graph and XLA outputs and gradients are
from eager ones, in absolute terms and in ULP (units in the last place: how
many representable floats lie between two values), and how long each mode
takes. For XLA it also returns the HLO text of the stages that
``experimental_get_compiler_ir`` offers, and counts the fusions XLA made.

The work is done once: the function is traced once per mode (graph and XLA
each trace the forward+backward step once; the graph trace also names the
variables to save), the ULP and absolute-difference arrays of each mode and
tensor are computed once and shared by the maxima, the findings and the
condition note, and the HLO is fetched with one XLA compile beyond the run's
own (`tflab.modes.xla.fetch_hlo`: TF 2.21's ``experimental_get_compiler_ir`` builds
a fresh executable per optimized stage and never reads the compile cache the
``jit_compile=True`` call filled, ``tensorflow/compiler/jit/get_compiler_ir.cc``).

The pieces live by concern: `tflab.modes.xla` (error parsing, HLO stages, fusion
counting), `tflab._graph.analysis` (arguments, variables, random ops) and
`tflab.modes.records` (the records); this module runs the modes.

A stateful function (``v.assign_add``, BatchNorm's moving statistics with
``training=True``) would give each mode a different starting state: every
variable the function touches is saved first and put back before each mode's
first call and at the end, so the modes are compared on equal terms and the
user's variables are left as they were.

What tests/modes/test_compare_modes.py measures on TF 2.21 (CPU): graph mode gives
eager's bits unless a Grappler pass rewrites the arithmetic (the arithmetic
optimizer regrouping an add tree, constant folding turning ``/ 6`` into a
multiply); with that pass off the bits match again. XLA differs by a few ULP
where it emits its own code for transcendental functions (tanh, exp, softmax).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import statistics
import time
from typing import Any, Callable


from tflab._api.labels import variable_labels
from tflab._graph.failures import error_chain, innermost_error
from tflab._graph.analysis import (RANDOM_OPS, STATELESS_RANDOM_OPS, STATEFUL_RANDOM_OPS,  # noqa: F401
                                   VariableSnapshot, as_tensor, flatten_sources, nothing_to_compare, output_names_of,
                                   prepare_args, random_dependencies, random_ops_by_tensor, to_numpy,
                                   touched_variables)
# MODES, and the default disagreement bound: an element is a finding when it is more than
# DEFAULT_ULP_BOUND ULP *and* more than DEFAULT_ATOL away from eager (see tflab/modes/defaults.py).
from tflab.modes.defaults import DEFAULT_ATOL, DEFAULT_ULP_BOUND, GRAPPLER_OPTIONS, MODES
from tflab.modes.findings import distances, mode_findings, PairDistances, separate_random_streams, with_conditioning
from tflab.modes.records import Distance, ModeComparison, ModeResult, speed_text  # noqa: F401
from tflab._graph.numeric import ulp_distance  # noqa: F401  (tflab.modes.ulp_distance)
from tflab._user.target import check_target, callable_name, recording_draws, signature_args
from tflab._user.usercode import input_error, user_entry
from tflab.modes.xla import count_fusions, fetch_hlo, probe_hlo_stages, xla_reason  # noqa: F401

# The stages of tf.function.experimental_get_compiler_ir on TF 2.21 (eager/pywrap_tfe_src.cc's
# "Valid values are" list, read by tflab.modes.xla.probe_hlo_stages at run time).
HLO_STAGES = ("stablehlo", "stablehlo_serialized", "hlo", "hlo_serialized", "optimized_hlo",
              "optimized_hlo_serialized", "optimized_hlo_proto_serialized", "optimized_hlo_dot")
from tflab.errors import UsageError

__all__ = ["compare_modes", "ModeComparison", "ModeResult", "Distance", "speed_text", "ulp_distance",
           "MODES", "DEFAULT_ATOL", "DEFAULT_ULP_BOUND", "MAX_REPEATS", "RANDOM_OPS", "STATEFUL_RANDOM_OPS",
           "STATELESS_RANDOM_OPS", "random_dependencies", "count_fusions", "probe_hlo_stages", "xla_reason"]


@contextlib.contextmanager
def _grappler_options(grappler: bool | dict):
    """Sets Grappler options while a graph-mode function is first instantiated
    and run (False: the whole meta optimizer off); restores them exactly afterwards
    (an option the caller never set is unset again, not set to its default)."""
    from tflab._tf.run_metadata import grappler_options

    with grappler_options({"disable_meta_optimizer": True} if grappler is False else dict(grappler)):
        yield


class _RetracingNote(logging.Filter):
    """Drops TF's "N out of the last M calls … triggered tf.function retracing"
    warning: each comparison builds fresh tf.functions on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()




def _fetch(result) -> tuple[list, list]:
    """Copies outputs and gradients to numpy, which also waits for the device."""
    import tensorflow as tf

    outputs, grads = result
    return [to_numpy(o) for o in tf.nest.flatten(outputs)], [to_numpy(g) for g in grads]

@dataclasses.dataclass
class _ModeRun:
    """One comparison's state: what `compare_modes` runs, and what each mode left.

    ``step`` is the forward+backward step every mode runs; graph and XLA run it under
    their own `tf.function` (traced once each). Each mode's step takes gradients with
    respect to the float arguments and the trainable variables its own tape watched
    (the names it used are kept per mode in ``var_names``), so a trace needs nothing
    from an earlier eager run.
    """

    python_fn: Callable
    name: str
    sources: list
    source_names: list
    rebuild: Callable
    run_modes: list
    repeats: int
    grappler: Any
    hlo: Any
    atol: float
    want_grads: bool
    snapshot: VariableSnapshot | None = None
    runners: dict = dataclasses.field(default_factory=dict)
    results: dict = dataclasses.field(default_factory=dict)
    var_names: dict = dataclasses.field(default_factory=dict)  # mode -> names of its variables
    output_names: list = dataclasses.field(default_factory=list)
    pairs: PairDistances = dataclasses.field(default_factory=PairDistances)
    hlo_fetch: Any = None
    errors: dict = dataclasses.field(default_factory=dict)  # mode -> the exception it raised

    def step_for(self, mode: str) -> Callable:
        """The forward+backward step as ``mode`` runs it (records its variable names)."""
        import tensorflow as tf

        python_fn, rebuild, want_grads = self.python_fn, self.rebuild, self.want_grads

        def step(srcs):
            a, k = rebuild(list(srcs))
            if not want_grads:
                self.var_names[mode] = []
                return tf.nest.map_structure(as_tensor, python_fn(*a, **k)), []
            with tf.GradientTape() as tape:
                tape.watch(srcs)
                # A Python number returned eagerly would be float64 in numpy but a
                # float32 tensor from tf.function: convert the same way in all modes.
                outputs = tf.nest.map_structure(as_tensor, python_fn(*a, **k))
                targets = [tf.reduce_sum(o) for o in tf.nest.flatten(outputs)
                           if isinstance(o, tf.Tensor) and o.dtype.is_floating]
            variables = [v for v in tape.watched_variables() if v.trainable]
            self.var_names[mode] = variable_labels(variables)
            grads = tape.gradient(targets, list(srcs) + variables) if targets else \
                [None] * (len(srcs) + len(variables))
            # A gather's (an Embedding's) gradient is IndexedSlices: compared dense, as the optimizer
            # applies it (its rows summed per index), in every mode alike.
            return outputs, [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]

        step.user_function = python_fn  # what tflab.diagnosis reads when a traced mode fails
        return step

    def build_runners(self) -> None:
        import tensorflow as tf

        self.runners = {"eager": self.step_for("eager"), "graph": tf.function(self.step_for("graph")),
                        "xla": tf.function(self.step_for("xla"), jit_compile=True)}

    def grad_names(self, mode: str) -> list[str]:
        return list(self.source_names) + list(self.var_names.get(mode, ())) if self.want_grads else []

    def run(self) -> None:
        """Runs each mode (eager first: the reference), fills ``results``, then fetches HLO.
        The snapshot puts the function's variables back before each mode's first call."""
        from tflab.diagnosis import diagnosis_note

        from tflab._user.target import error_summary, user_frame

        reference = None
        for mode in self.run_modes:
            run = self.runners[mode]
            options = (_grappler_options(self.grappler) if mode == "graph" and self.grappler is not True
                       else contextlib.nullcontext())
            try:
                with options:
                    self.snapshot.restore()
                    t0 = time.perf_counter()
                    outputs, grads = _fetch(run(self.sources))
                    first = time.perf_counter() - t0
                    times = []
                    for _ in range(self.repeats):
                        t0 = time.perf_counter()
                        _fetch(run(self.sources))
                        times.append(time.perf_counter() - t0)
            except Exception as e:  # a mode that cannot run is a result, not a crash
                self.errors[mode] = e
                if mode == "xla":
                    reason = xla_reason(e)
                    if reason.startswith("XLA cannot compile the gradient of a while loop"):
                        reason += "; " + self.while_loop_fixes(outputs_ref=reference)
                else:
                    # TF's own line, not Keras' "Exception encountered when calling X.call()" wrapper
                    where = user_frame(e) or next((user_frame(c) for c in reversed(error_chain(e))
                                                   if user_frame(c)), "")
                    reason = innermost_error(e) + (f" (at {where})" if where else "")
                    if mode != "eager":  # a failed trace: kind, culprit line and fix (tflab.diagnosis)
                        reason += diagnosis_note(e, self.python_fn)
                if mode == "eager":
                    raise UsageError(f"{self.name}'s eager forward+backward step raised {reason}") from e
                self.results[mode] = ModeResult(mode, None, None, None, None, None, None, error=reason)
                continue
            grad_map = dict(zip(self.grad_names(mode), grads))
            if mode == "eager" and not list(outputs):
                # Measured, not read from the source (a lambda, an implicit None, {} or []): the
                # eager run gave no tensor, so every mode would "agree" on nothing (a function that returns None, or only Python values).
                raise UsageError(f"compare_modes: {self.name} returned no tensor (its eager run's outputs "
                                 "flatten to nothing: None, {} or []), so there is nothing to compare; "
                                 "return the tensors to check")
            if reference is None:
                reference = (outputs, grad_map)
            abs_d, ulp_d, per, ulp_sig = distances(reference, outputs, grad_map, self.output_names,
                                                   self.atol, pairs=self.pairs, mode=mode)
            self.results[mode] = ModeResult(mode, tuple(outputs), grad_map, abs_d, ulp_d, first,
                                            statistics.median(times), ulp_by_tensor=per,
                                            ulp_above_atol=ulp_sig)
        xla = self.results.get("xla")
        if self.hlo and xla is not None and xla.error is None:
            # One generator: experimental_get_compiler_ir looks the XLA ConcreteFunction up
            # in its cache (no trace); each optimized stage is one more XLA compile.
            self.hlo_fetch = fetch_hlo(self.runners["xla"].experimental_get_compiler_ir(self.sources), self.hlo)

    def while_loop_fixes(self, outputs_ref) -> str:
        """The fixes for XLA's while-loop gradient error, as `tflab.fix.Fix` lines: the loop bound
        (not checked: only the user's code knows n) and ``gradients=False``, run here: the forward
        pass alone under XLA, compared with eager's outputs."""
        import numpy as np
        import tensorflow as tf

        from tflab import fix as fx
        from tflab._graph.numeric import ulp_distance

        bound = fx.unchecked("code", "for _ in tf.range(n), or tf.while_loop(..., maximum_iterations=n)",
                             "give the loop a bound XLA can read (AutoGraph sets maximum_iterations for tf.range)",
                             "the number of iterations n is your code's to give")
        python_fn, rebuild = self.python_fn, self.rebuild

        def forward(srcs):
            a, k = rebuild(list(srcs))
            return tf.nest.map_structure(as_tensor, python_fn(*a, **k))

        def check():
            self.snapshot.restore()
            got = [to_numpy(o) for o in tf.nest.flatten(tf.function(forward, jit_compile=True)(self.sources))]
            if outputs_ref is None:
                return True, "XLA compiles and runs the forward pass"
            worst = max((float(np.max(ulp_distance(a, b), initial=0)) for a, b in zip(outputs_ref[0], got)
                         if a is not None and b is not None and a.shape == b.shape and a.dtype.kind == "f"),
                        default=0.0)
            return True, f"XLA compiles and runs the forward pass: outputs within {worst:g} ULP of eager"

        # apart=False: XLA has compiled in this process already, and its compiler hangs or aborts in a fork
        forward_only = fx.attempt("option", "gradients=False", "compare the forward pass only", check,
                                  how="the forward pass compiled with jit_compile=True and run on your inputs",
                                  apart=False)
        return "; ".join([bound.line(), *fx.first_working([forward_only]).lines("or")])

    def random_ops(self) -> dict[str, tuple]:
        """Output/gradient name → random op types, from the trace graph or XLA already made."""
        mode = next((m for m in ("xla", "graph") if m in self.results and self.results[m].error is None), None)
        if mode is None:
            return {}
        try:
            concrete = self.runners[mode].get_concrete_function(self.sources)  # cached: no trace
        except Exception:  # the comparison stands without the labels
            return {}
        return random_ops_by_tensor(concrete, self.output_names, self.grad_names(mode))


MAX_REPEATS = 100_000  # warm calls timed per mode, at most


@user_entry("while running eagerly, as a graph or under XLA")
def compare_modes(fn: Callable, *args: Any, seed: int = 0, repeats: int = 10,
                  ulp_bound: int = DEFAULT_ULP_BOUND, atol: float = DEFAULT_ATOL,
                  hlo: bool | tuple[str, ...] = True, gradients: bool = True,
                  modes: tuple[str, ...] = MODES, grappler: bool | dict = True,
                  state_variables: Any = None, attribute: bool = True, attribute_seconds: float = 120.0,
                  examples: Any = None, **kwargs: Any) -> ModeComparison:
    """Runs ``fn`` forward and backward eagerly, as a graph and under XLA, and compares.

    Each mode computes the outputs and, with a `tf.GradientTape`, the gradients
    of the sum of every float output with respect to the float tensor arguments
    (watched with ``tape.watch``) and the trainable variables the eager run
    touched (``tape.watched_variables()``). Graph and XLA run the same
    forward+backward step under ``tf.function`` and ``tf.function(jit_compile=True)``.

    Args:
        fn: a Python function, `tf.function` (its ``python_function`` is used so
            eager really is eager) or Keras model.
        *args: arguments; fully defined `tf.TensorSpec`s become seeded random
            tensors (`tflab._user.target.materialize`), numpy arrays become tensors.
        seed: seed for TensorSpec arguments.
        repeats: warm calls timed per mode (the median is reported).
        ulp_bound: an element is a finding when it is more than ``ulp_bound`` ULP
            and more than ``atol`` away from eager.
        atol: absolute tolerance for findings (same units as the values).
        hlo: True fetches the text stages the probe finds that need at most
            one XLA compile beyond the run's (``hlo``, ``optimized_hlo``); a
            tuple of stage names only those (``"optimized_hlo_dot"``, a Graphviz
            rendering, is a second compile and must be named); False none.
            TF compiles the program again for the optimized stage (seconds for
            a CNN; `tflab.modes.xla`), so pass False when the fusion count is not needed.
        gradients: False runs the forward pass only (no tape; ``gradients`` stay
            empty), which makes XLA's compile much cheaper for big models.
        modes: which modes to run; ``"eager"`` (the reference) always runs.
        grappler: False runs graph mode with Grappler's meta optimizer disabled;
            a dict sets those `tf.config.optimizer.set_experimental_options`
            instead (e.g. ``{"arithmetic_optimization": False}``) for graph mode
            only. Shows whether a graph-vs-eager difference comes from a
            Grappler rewrite.
        state_variables: the variables to save before the comparison and put
            back before each mode's first call and at the end (e.g. a Keras
            model's ``variables``). None (default) finds them by tracing ``fn``
            from graph mode's own trace (`ConcreteFunction.variables`: every
            captured variable, trainable or not; no extra trace); a variable
            that trace misses but the eager run's tape watches is saved after
            that first eager run.
        attribute: when graph or XLA disagrees with eager beyond the bound, find
            the transformation that made it (`tflab.modes.causes`: Grappler
            optimizers off one at a time; XLA flags and HLO passes one at a
            time, each in a child process of about one TF import) and put it in
            ``causes``. Costs nothing when the modes agree.
        attribute_seconds: the time limit of each mode's bisection (seconds);
            past it the cause says "not bisected: out of time".
        examples: real inputs instead of ``*args``: a path to an ``.npz`` with one array per
            parameter name (``np.savez(path, ids=ids)``) or a dict ``{parameter name: array}``, bound
            by name as ``--examples`` binds them (`tflab.examples.example_inputs`). Default None.
        **kwargs: keyword arguments for ``fn``. ``seed``, ``repeats``,
            ``ulp_bound``, ``atol``, ``hlo``, ``gradients``, ``modes``, ``grappler``, ``state_variables``,
            ``attribute``, ``attribute_seconds``, ``examples`` are taken by compare_modes; wrap
            ``fn`` in `functools.partial` to pass such names to it.

    Returns:
        A `ModeComparison`. A mode that cannot run (XLA on a ``tf.py_function``
        or string op) has ``error`` set and is a finding; the others still run.
        An output or gradient that depends on a random op (found by op type in
        the traced FuncGraph: `RANDOM_OPS`, e.g. ``tf.random.*``, Keras
        Dropout's mask) and differs from eager is labelled a different random
        stream (``ModeResult.random_streams``, ``.notes``), not a finding: XLA
        lowers every random op with its own RNG, and stateful random ops in a
        graph are seeded apart from eager's. To compare such a function's
        arithmetic, pass the noise in as an argument.

    Raises:
        UsageError: ``fn`` is not callable, a class or an unbound method; a
            TensorSpec has unknown dims (also an ``input_signature`` used
            because no arguments were given); the arguments do not match the
            ``input_signature``; ``repeats`` < 1 or a negative bound; or the
            eager run itself raised (the message names the user's line).

    Example:

    >>> def attention(x):
    ...     return tf.nn.softmax(x @ tf.transpose(x))
    >>> cmp = tflab.compare_modes(attention, tf.TensorSpec([64, 128]))
    >>> cmp.modes["graph"].ulp.outputs, cmp.modes["xla"].ulp.outputs, cmp.fusion_count
    (0, 2, 10)
    """
    from tflab._api.argcheck import check_returns_tensors, check_xla_flags, refuse_probe

    refuse_probe(fn, "fn", "compare_modes")
    check_returns_tensors(fn, args, kwargs, "compare_modes", "fn")
    if "xla" in modes:
        check_xla_flags()
    import tensorflow as tf

    if any("bfloat16" in str(getattr(a, "dtype", "")) for a in tf.nest.flatten((args, kwargs))):
        # With oneDNN's ISA capped, a bfloat16 MatMul can end this process (SIGSEGV): a child tries first.
        from tflab.process.bfloat16_probe import check_bfloat16_kernels

        check_bfloat16_kernels(instead="or compare float32 inputs")

    from tflab._user.target import error_summary, user_frame

    if not callable(fn):
        raise UsageError(f"compare_modes needs a callable, got {type(fn).__name__}")
    if isinstance(modes, str):  # modes="xla": one mode, not the letters x, l, a
        modes = (modes,)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        # numpy's default_rng said only "ValueError: expected non-negative integer", 10 frames down
        raise UsageError(f"seed must be an int in [0, 2**63), got {seed!r}")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise UsageError(f"unknown mode(s) {unknown}; choose from {list(MODES)}")
    from tflab._api.argcheck import check_float, check_int

    repeats = check_int(repeats, "repeats", "compare_modes", minimum=1)
    if repeats > MAX_REPEATS:  # 10**30 warm calls would run for ever: a mistake, said at once
        raise UsageError(f"compare_modes: repeats must be at most {MAX_REPEATS} (timed warm calls per mode; "
                         f"the median needs a few), got {repeats}")
    ulp_bound = check_int(ulp_bound, "ulp_bound", "compare_modes", minimum=0)
    if isinstance(atol, bool) or not isinstance(atol, (int, float)):
        raise UsageError(f"compare_modes: atol must be a float >= 0, got {atol!r} ({type(atol).__name__})")
    if not [m for m in modes if m != "eager"]:  # eager against itself: nothing would be compared
        raise UsageError(f"compare_modes: modes={modes!r} names no mode to compare with eager (the reference "
                         f"always runs); give one or more of 'graph', 'xla'")
    if ulp_bound < 0 or not atol >= 0:
        raise UsageError(f"ulp_bound and atol must be >= 0, got {ulp_bound} and {atol}")
    for flag, value in (("gradients", gradients), ("attribute", attribute)):
        if not isinstance(value, bool):  # gradients="no" is truthy: the gradients ran that the caller declined
            raise UsageError(f"compare_modes: {flag} must be True or False, got {value!r} ({type(value).__name__})")
    check_float(attribute_seconds, "attribute_seconds", "compare_modes", minimum=0)
    if isinstance(grappler, dict) and set(grappler) - GRAPPLER_OPTIONS:  # TF drops an unknown key without a word
        raise UsageError(f"compare_modes: grappler has no option {sorted(set(grappler) - GRAPPLER_OPTIONS)}; the "
                         f"options (tf.config.optimizer.set_experimental_options): {', '.join(sorted(GRAPPLER_OPTIONS))}")
    if not isinstance(hlo, bool):
        stages = (hlo,) if isinstance(hlo, str) else tuple(hlo) if isinstance(hlo, (list, tuple)) else None
        if stages is None or not stages or any(s not in HLO_STAGES for s in stages):
            raise UsageError(f"compare_modes: hlo={hlo!r}: give True, False or a tuple of stage names from "
                             f"{', '.join(HLO_STAGES)} (tf.function.experimental_get_compiler_ir's stages)")
        hlo = stages
    run_modes = [m for m in MODES if m == "eager" or m in modes]
    python_fn = getattr(fn, "python_function", fn)
    name = callable_name(fn)
    check_target(fn, name)
    from tflab.examples import with_examples

    args, kwargs = signature_args(fn, *with_examples(fn, examples, args, kwargs))
    if any(isinstance(v, tf.TensorSpec) and not v.shape.is_fully_defined()
           for v in tf.nest.flatten((args, kwargs))) and getattr(fn, "input_signature", None):
        raise UsageError(f"{name}'s input_signature has unknown (None) dims: "
                         f"{', '.join(str(s) for s in fn.input_signature)}; "
                         f"pass arguments with every dim given to run it")
    with recording_draws() as drawn:  # the inputs drawn at random, named in an eager failure's line
        args, kwargs = prepare_args(args, kwargs, seed)
    sources, source_names, rebuild = flatten_sources(fn, args, kwargs)
    run = _ModeRun(python_fn=python_fn, name=name, sources=sources, source_names=source_names,
                   rebuild=rebuild, run_modes=run_modes, repeats=repeats, grappler=grappler,
                   hlo=("hlo", "optimized_hlo") if hlo is True else hlo, atol=atol, want_grads=gradients)
    run.build_runners()

    # Save every variable the function touches, trainable or not, BEFORE any
    # run: a stateful function (v.assign_add, BatchNorm moving statistics)
    # would otherwise start each mode from a different state, and the user's
    # variables would be left changed. The traced FuncGraph captures them all:
    # the first traced mode's own trace (kept in its tf.function's cache) names them.
    if state_variables is not None:
        touched = list(state_variables)
    else:
        traced = next(m for m in run_modes if m != "eager")
        touched = touched_variables(python_fn, run.runners[traced], sources)
    run.snapshot = saved = VariableSnapshot(touched)

    # Eager run once: the outputs' names and device, and the variables its tape watches.
    try:
        with tf.GradientTape() as probe:
            probe.watch(sources)
            out = python_fn(*args, **kwargs)
    except Exception as e:
        saved.restore()
        where = user_frame(e)
        raise UsageError(f"{name} failed when run eagerly: {input_error(e, list(drawn))}"
                         + (f" (at {where})" if where else "")) from e
    saved.add_missing(probe.watched_variables())  # missed by the trace: saved after one run
    saved.restore()
    empty = nothing_to_compare(out)
    if empty:
        raise UsageError(f"{name}: nothing to compare across modes: {empty}")
    out = tf.nest.map_structure(as_tensor, out)
    device = next((t.device for t in tf.nest.flatten(out) if getattr(t, "device", "")), "") or \
        next((t.device for t in sources), "")
    run.output_names = output_names_of(out)
    quiet = _RetracingNote()
    logging.getLogger("tensorflow").addFilter(quiet)
    try:
        run.run()
    finally:
        logging.getLogger("tensorflow").removeFilter(quiet)
        saved.restore()
    results, output_names = run.results, run.output_names
    reference = (results["eager"].outputs, results["eager"].gradients)
    random_ops = run.random_ops()
    notes = separate_random_streams(results, reference, random_ops, output_names, atol, run.pairs)
    findings = mode_findings(results, reference, ulp_bound, atol, output_names, run.pairs)
    findings = _cond_branch_findings(findings, run, args, kwargs, saved.restore)
    nonfinite = _nonfinite_note(run, results, python_fn, sources, rebuild, saved.restore)

    if findings and any(not r.error for m, r in results.items() if m != "eager"):
        findings = with_conditioning(findings, python_fn, sources, rebuild, results, reference,
                                     output_names, ulp_bound, atol, saved.restore, run.pairs)
    causes = ()
    if attribute and findings:
        from tflab.modes.causes import attribute_modes

        logging.getLogger("tensorflow").addFilter(quiet)  # each optimizer off is one more trace, on purpose
        try:
            causes = attribute_modes(run, findings, ulp_bound, _grappler_options, float(attribute_seconds))
        finally:
            logging.getLogger("tensorflow").removeFilter(quiet)
            saved.restore()
    h = run.hlo_fetch
    return ModeComparison(function_name=name, device=device, modes=results,
                          gradient_names=tuple(run.grad_names("eager")), hlo=h.text if h else {},
                          hlo_stages=h.stages if h else (), fusion_count=h.fusion_count if h else None,
                          fusion_kinds=h.fusion_kinds if h else {}, ulp_bound=ulp_bound,
                          atol=atol, findings=tuple(findings), output_names=tuple(output_names),
                          variables_restored=saved.names(), random_ops=random_ops, notes=tuple(notes),
                          nonfinite=nonfinite, causes=causes,
                          grappler=grappler if isinstance(grappler, bool) else dict(grappler))


def _cond_branch_findings(findings: list[str], run: _ModeRun, args, kwargs, restore) -> list[str]:
    """Says when eager passes only because eager tf.cond runs one branch (tensorflow/tensorflow#109015).

    For each traced mode that failed: the failing user line (the innermost frame outside TF and
    Keras) is looked up in the file's AST; when it lies in a function passed to ``tf.cond`` as a
    branch, one more eager forward pass is run with ``sys.setprofile`` counting the calls of that
    function. 0 calls: eager never ran the code that failed, while tracing built both branches.
    """
    from tflab import fix as fx
    from tflab._graph.failures import cond_branch_at, eager_calls, user_line

    out = list(findings)
    counted: dict = {}
    for mode, exc in run.errors.items():
        loc = user_line(exc)
        branch = cond_branch_at(*loc) if loc else None
        if branch is None:
            continue
        if branch not in counted:
            try:
                counted[branch] = eager_calls(lambda: run.python_fn(*args, **kwargs), branch)
            except Exception:  # the eager run was fine before: no claim without the measurement
                counted[branch] = None
            finally:
                restore()
        calls = counted[branch]
        if calls != 0:
            continue
        base = branch.filename.rsplit("/", 1)[-1]
        fix = fx.unchecked("code", "", f"make the {branch.which} branch valid TF code (tracing builds it even when "
                           f"your inputs never take it)",
                           "the branch's code is wrong, and what it should compute is yours to say; tflab "
                           "can only show that the traced modes fail there")
        text = (f"{mode}: eager passes only because eager tf.cond runs one branch: the error is in the "
                f"{branch.which} branch ({branch.name} at {base}:{branch.lineno}) of the tf.cond at "
                f"{base}:{branch.cond_line}, which the eager run never called (measured: 0 calls in one eager "
                f"pass); tracing (graph, XLA) builds both branches, so the error shows only there; {fix.line()}")
        for i, line in enumerate(out):
            if line.startswith(f"{mode} did not run:"):
                out.insert(i + 1, text)
                break
        else:
            out.append(text)
    return out


def _nonfinite_note(run: _ModeRun, results: dict, python_fn, sources, rebuild, restore):
    """The first non-finite op of the traced graph when any mode's outputs hold inf/NaN (tflab.nonfinite)."""
    import numpy as np

    bad = any(r.outputs is not None and any(
        o is not None and getattr(o, "dtype", None) is not None and o.dtype.kind in "fc" and not np.isfinite(o).all()
        for o in r.outputs) for r in results.values())
    if not bad:
        return None
    from tflab.nonfinite import FirstNonFinite, analyse, trace_op_values

    def call(srcs):
        a, k = rebuild(list(srcs))
        return python_fn(*a, **k)

    try:
        ops, outs = trace_op_values(call, sources)
        return analyse(ops, outs, run.name)
    except Exception as e:  # noqa: BLE001 - the comparison stands without it
        return FirstNonFinite(run.name, 0, None, None, False, error=f"{type(e).__name__}: {str(e)[:200]}")
    finally:
        restore()
