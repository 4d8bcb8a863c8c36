"""``tflab compare FILE.py:FUNC --arg …``: lab step 6 on a user's function."""

from __future__ import annotations

import argparse
import functools

from tflab._api.cliargs import int_at_least as _at_least  # argparse only: cheap to import
from tflab._api.cliargs import non_negative_float as _non_negative_float
from tflab._api.cliargs import seed_type

HELP = ("run FILE.py:FUNC forward and backward eagerly, as a graph and under XLA (the tape inside one "
        "tf.function(jit_compile=True): forward and backward are one XLA cluster, so its ULP can differ from "
        "jit_compile on FUNC alone with the tape outside); print ULP distances from eager, timings, fusion "
        "count and findings")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab.commands.preflight_checks import EXAMPLES_HELP as _EXAMPLES_HELP  # no numpy: --help stays fast

    from tflab._api.cliargs import only_with

    only_with(p, "force", lambda a: bool(a.hlo),
              "--force overwrites an existing --hlo file: give --hlo, or leave --force out")

    p.add_argument("target", metavar="FILE.py:FUNC", help="the function (or tf.function) to run")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] (every dim given) becomes a seeded random "
                        "tensor, NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--examples", metavar="FILE.npz", help=_EXAMPLES_HELP)
    p.add_argument("--seed", type=seed_type, default=0, help="seed for the random tensors (default: %(default)s)")
    p.add_argument("--repeats", type=_at_least(1, 100_000), default=10,  # modes.MAX_REPEATS
                   help="warm calls timed per mode; the median is printed (default: %(default)s)")
    from tflab.modes.defaults import DEFAULT_ATOL, DEFAULT_ULP_BOUND  # no numpy: --help stays fast

    p.add_argument("--ulp-bound", type=_at_least(0), default=DEFAULT_ULP_BOUND, metavar="N",
                   help="report elements more than N ULP and more than --atol from eager "
                        "as findings (default: %(default)s)")
    p.add_argument("--atol", type=_non_negative_float, default=DEFAULT_ATOL,
                   help="absolute tolerance for findings (default: %(default)s)")
    p.add_argument("--no-grad", action="store_true", help="forward pass only (cheaper XLA compile)")
    p.add_argument("--no-cause", action="store_true",
                   help="when a mode disagrees, do not look for the transformation that made it (the "
                        "bisection: Grappler optimizers, XLA flags and HLO passes one at a time, each XLA "
                        "setting in a child process of a few seconds)")
    p.add_argument("--hlo", metavar="OUT.txt",
                   help="write XLA's HLO text stages to OUT.txt (refuses to overwrite without --force)")
    p.add_argument("--force", action="store_true", help="overwrite the --hlo file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from tflab.report import jsonable as _jsonutil
    import numpy as np

    from tflab._user.target import MAX_RANDOM_BYTES, materialize, recording_draws
    from tflab.examples import load_call_with_examples
    from tflab.errors import UsageError
    from tflab.modes import compare_modes

    from tflab.process.memory import check_fits
    from tflab._io.paths import output_path
    from tflab._user.usercode import user_code
    from tflab.modes import MODES

    # Checked before anything runs: a bad path must not cost a whole comparison.
    hlo = output_path(args.hlo, "--hlo", overwrite=args.force, example="hlo.txt") if args.hlo else None
    fn, call_args, call_kwargs = load_call_with_examples(args.target, args.arg, args.examples)
    import tensorflow as tf

    specs = [v for v in (*call_args, *call_kwargs.values())
             if isinstance(v, tf.TensorSpec) and v.shape.is_fully_defined()]
    sizes = [int(np.prod(s.shape.as_list(), dtype=np.float64)) * max(s.dtype.size, 1) for s in specs]
    # Peak copies: the numpy draw and the tensor, then per mode the outputs (as large as the
    # inputs for an elementwise function) and, with gradients, one gradient per input.
    copies = 2 + len(MODES) * (1 if args.no_grad else 2)
    from tflab.process.memory import ulp_step_copies  # and the ULP step's int64/float64 copies

    copies += max((ulp_step_copies(s.dtype.size) for s in specs if s.dtype.is_floating), default=0)
    if all(n <= MAX_RANDOM_BYTES for n in sizes):  # else materialize names the argument over its cap
        check_fits(sum(sizes), copies, "compare",
                   "use a smaller shape" + ("" if args.no_grad else " or --no-grad"))
    # Materialize here (not in compare_modes) so an unknown dim is reported
    # against the --arg that has it, before anything runs.
    rng = np.random.default_rng(args.seed)  # one stream for all arguments: x and y differ
    name = args.target.rpartition(":")[2]
    with recording_draws():  # which inputs were drawn at random, for the error line's --examples hint
        call_args = tuple(materialize(a, rng) for a in call_args)
        call_kwargs = {k: materialize(v, rng) for k, v in call_kwargs.items()}
        own = {"seed", "repeats", "ulp_bound", "atol", "hlo", "gradients", "modes",
               "grappler", "state_variables", "attribute", "attribute_seconds", "examples"} & set(call_kwargs)
        if own:  # names compare_modes takes itself: bind them to the function instead
            fn = functools.partial(fn, **{k: call_kwargs.pop(k) for k in own})
        with user_code(name, "while running eagerly, as a graph or under XLA"):
            report = compare_modes(
                fn, *call_args, seed=args.seed, repeats=args.repeats,
                ulp_bound=args.ulp_bound, atol=args.atol,
                gradients=not args.no_grad, attribute=not args.no_cause, **call_kwargs)
    xla = report.modes["xla"]
    if hlo is not None and xla.error is None:
        _write_hlo(report.hlo, hlo)
    print(_jsonutil.dumps(report) if args.json else report.to_text())
    if args.hlo and xla.error is None and not args.json:
        print(f"wrote {args.hlo} ({', '.join(report.hlo)})")
    failed = [m for m, r in report.modes.items() if r.error is not None]
    if failed:
        # The report above still compares the modes that ran; the exit code says
        # some could not.
        ok = [m for m, r in report.modes.items() if r.error is None]
        line = (f"{report.function_name}: " + "; ".join(f"{m} failed: {report.modes[m].error}" for m in failed)
                + (f"; {' and '.join(ok)} still compared" if len(ok) > 1 else "; only eager ran"))
        if failed != ["xla"]:  # eager or graph cannot run the function on these arguments
            raise UsageError(line)
        # Eager and graph ran and were compared, so the input was valid: XLA not compiling
        # an op (a string op, a py_function) is a finding, exit 1 like a failed check.
        import sys

        print(f"tflab compare: finding: {line}", file=sys.stderr)
        return 1
    return 0


def _write_hlo(hlo: dict, out) -> None:
    """Writes the HLO stages through the `tflab._io.paths.OutputPath` that `output_path` probed.

    That object knows a device or FIFO is written in place and a symlink's
    target is written (a second, unprobed ``OutputPath`` renamed a temp file
    over ``/dev/null`` or the link).

    Raises:
        UsageError: one line when the write fails; no temporary file is left.
    """
    out.write("".join(f"// ===== stage: {stage} =====\n{text}\n" for stage, text in hlo.items()))
