"""``tflab compare FILE.py:FUNC --arg …``: lab step 6 on a user's function."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os

HELP = ("run FILE.py:FUNC forward and backward eagerly, as a graph and under XLA; "
        "print ULP distances from eager, timings, fusion count and findings")


def _at_least(low: int):
    """argparse type: an int >= low (argparse turns the ValueError into one line, exit 2)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:FUNC", help="the function (or tf.function) to run")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] (every dim given) becomes a seeded random "
                        "tensor, NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--seed", type=int, default=0, help="seed for the random tensors (default: %(default)s)")
    p.add_argument("--repeats", type=_at_least(1), default=10,
                   help="warm calls timed per mode; the median is printed (default: %(default)s)")
    from tflab.modes import DEFAULT_ATOL, DEFAULT_ULP_BOUND  # numpy only: cheap to import

    p.add_argument("--ulp-bound", type=_at_least(0), default=DEFAULT_ULP_BOUND, metavar="N",
                   help="report elements more than N ULP and more than --atol from eager "
                        "as findings (default: %(default)s)")
    p.add_argument("--atol", type=_non_negative_float, default=DEFAULT_ATOL,
                   help="absolute tolerance for findings (default: %(default)s)")
    p.add_argument("--no-grad", action="store_true", help="forward pass only (cheaper XLA compile)")
    p.add_argument("--hlo", metavar="OUT.txt",
                   help="write XLA's HLO text stages to OUT.txt (refuses to overwrite without --force)")
    p.add_argument("--force", action="store_true", help="overwrite the --hlo file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from tflab import _jsonutil
    import numpy as np

    from tflab._target import load_call, materialize
    from tflab.errors import UsageError
    from tflab.modes import compare_modes

    if args.hlo:
        # Checked before anything runs: a bad path must not cost a whole comparison.
        from tflab.commands.inspect_cmd import _check_output_path

        _check_output_path(args.hlo, "--hlo", "hlo.txt")
        if os.path.exists(args.hlo) and not args.force:
            raise UsageError(f"--hlo {args.hlo} exists; pass --force to overwrite it")
    fn, call_args, call_kwargs = load_call(args.target, args.arg)
    # Materialize here (not in compare_modes) so an unknown dim is reported
    # against the --arg that has it, before anything runs.
    rng = np.random.default_rng(args.seed)  # one stream for all arguments: x and y differ
    call_args = tuple(materialize(a, rng) for a in call_args)
    call_kwargs = {k: materialize(v, rng) for k, v in call_kwargs.items()}
    own = {"seed", "repeats", "ulp_bound", "atol", "hlo", "gradients", "modes",
           "grappler", "state_variables"} & set(call_kwargs)
    if own:  # names compare_modes takes itself: bind them to the function instead
        fn = functools.partial(fn, **{k: call_kwargs.pop(k) for k in own})
    report = compare_modes(
        fn, *call_args, seed=args.seed, repeats=args.repeats,
        ulp_bound=args.ulp_bound, atol=args.atol,
        gradients=not args.no_grad, **call_kwargs)
    xla = report.modes["xla"]
    if args.hlo and xla.error is None:
        _write_hlo(report.hlo, args.hlo)
    print(_jsonutil.dumps(report) if args.json else report.to_text())
    if args.hlo and xla.error is None and not args.json:
        print(f"wrote {args.hlo} ({', '.join(report.hlo)})")
    failed = [m for m, r in report.modes.items() if r.error is not None]
    if failed:
        # The report above still compares the modes that ran; the exit code says
        # some could not.
        ok = [m for m, r in report.modes.items() if r.error is None]
        raise UsageError(f"{report.function}: "
                         + "; ".join(f"{m} failed: {report.modes[m].error}" for m in failed)
                         + (f"; {' and '.join(ok)} still compared" if len(ok) > 1
                            else "; only eager ran"))
    return 0


def _write_hlo(hlo: dict, path: str) -> None:
    """Writes to ``path + ".tmp"`` then renames; on any OSError removes the
    temp file and raises one UsageError line."""
    from tflab.errors import UsageError

    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            for stage, text in hlo.items():
                f.write(f"// ===== stage: {stage} =====\n{text}\n")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise UsageError(f"--hlo {path}: cannot write it: {e.strerror or e}") from None
