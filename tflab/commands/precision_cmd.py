"""``tflab precision FILE.py:FUNC --arg …``: lab step 10 on a user's function.

Exit status: 0 when no policy underflows or overflows, 1 when one does, or
when the measured cause of a disagreement is a range problem with finite
outputs (a constant the dtype cannot hold, an overflow inside a layer: the
report prints ``cause: …`` with the op, the line and the class, and what a
loss scale changes), 2 on bad input. Gradient elements below float32's own
noise floor (a float64 run) are not counted: a plain softmax exits 0.
"""

from __future__ import annotations

import argparse
import functools

from tflab._api.cliargs import seed_type

HELP = ("run FILE.py:FUNC forward and backward under float32, mixed_bfloat16 and mixed_float16; "
        "print errors against float32, gradient underflow, overflow and what loss scaling changes")


# `tflab.precision.policy.POLICIES`' names, here so the pre-TF check imports no numpy
# (tests/commands/test_cli_preflight.py keeps them equal).
POLICY_NAMES = ("float32", "mixed_bfloat16", "mixed_float16", "bfloat16", "float16")
#: the policies that compute in float16, the only ones a loss scale applies to (`tflab.precision.api`'s
#: ``scaled = compute == "float16" and loss_scale is not None``)
FLOAT16_POLICIES = ("mixed_float16", "float16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab.commands.preflight_checks import EXAMPLES_HELP as _EXAMPLES_HELP  # no numpy: --help stays fast

    from tflab._api.cliargs import only_with

    # A misspelt policy is `check_options`' to name (it may be the float16 one the user meant).
    only_with(p, "loss_scale", lambda a: any(q.strip() in FLOAT16_POLICIES or q.strip() not in POLICY_NAMES
                                             for q in a.policies.split(",")),
              "--loss-scale scales the loss of the float16 policies, and --policies names none "
              f"({' or '.join(FLOAT16_POLICIES)}): add one, or leave --loss-scale out")

    p.add_argument("target", metavar="FILE.py:FUNC",
                   help="a function of tensors, a tf.function, or a zero-argument factory that "
                        "builds a Keras model (its --arg values are the model's inputs, in order)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] (every dim given) becomes a seeded random "
                        "tensor, NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--examples", metavar="FILE.npz", help=_EXAMPLES_HELP)
    p.add_argument("--seed", type=seed_type, default=0,
                   help="seed for the random tensors and Keras initializers (default: %(default)s)")
    p.add_argument("--policies", default="float32,mixed_bfloat16,mixed_float16", metavar="LIST",
                   help="comma-separated Keras dtype policies; float32 always runs as the reference "
                        "(default: %(default)s)")
    p.add_argument("--loss-scale", default=None, metavar="N|dynamic",
                   help="loss scale for the float16 policies: a positive number, or 'dynamic' "
                        "(Keras' LossScaleOptimizer rule: 2^15, halved on inf/NaN gradients)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _loss_scale(text: str | None):
    from tflab._api.cliargs import loss_scale_problem
    from tflab.errors import UsageError

    if text is None or text == "dynamic":
        return text
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        raise UsageError(f"--loss-scale {text}: give a positive number (e.g. 32768) or 'dynamic'")
    problem = loss_scale_problem(value)
    if problem:
        raise UsageError(f"--loss-scale {text}: {problem}; give e.g. 32768 or 'dynamic'")
    return value


def check_options(args: argparse.Namespace) -> None:
    """The option values, before TF loads (`tflab.cli.preflight`): the policy names and the loss scale."""
    from tflab.errors import UsageError

    names = [p.strip() for p in args.policies.split(",")]
    unknown = [p for p in names if p not in POLICY_NAMES]
    if unknown or not names:
        raise UsageError(f"unknown policy {', '.join(map(repr, unknown)) or '(none given)'}; "
                         f"choose from {', '.join(POLICY_NAMES)}")
    _loss_scale(args.loss_scale)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from tflab.report import jsonable as _jsonutil
    from tflab._user.target import bind_args, check_target, load_target, materialize, parse_args, python_signature
    from tflab.precision import compare_precisions, parse_policies

    # Options first: a typo in --policies must not cost an import of the user's file.
    policies = parse_policies(args.policies)
    loss_scale = _loss_scale(args.loss_scale)
    # load_call's steps, except that a zero-parameter factory takes the --arg
    # values positionally (they are its model's inputs).
    named = parse_args(args.arg)
    fn = load_target(args.target)
    check_target(fn, args.target.rpartition(":")[2])
    sig = python_signature(fn)
    if args.examples is not None:
        from tflab.examples import example_inputs

        call_args, call_kwargs = example_inputs(fn, args.examples, named,
                                                by_position=sig is not None and not sig.parameters)
    elif named and sig is not None and not sig.parameters:
        call_args, call_kwargs = tuple(named.values()), {}
    elif not named and getattr(fn, "input_signature", None) is not None:
        call_args, call_kwargs = (), {}
    else:
        call_args, call_kwargs = bind_args(fn, named)
    # Refuse before allocating what cannot fit (the OOM killer ends the process: exit 137, no
    # line). Peak copies: the numpy draw and the float32 tensor, then per policy (float32
    # included) the outputs (as large as the inputs for an elementwise function) and one
    # gradient per input; the bfloat16/float16 casts are half-size and not counted.
    import tensorflow as tf

    from tflab.process.memory import check_fits
    from tflab._user.target import MAX_RANDOM_BYTES

    specs = [v for v in (*call_args, *call_kwargs.values())
             if isinstance(v, tf.TensorSpec) and v.shape.is_fully_defined()]
    sizes = [int(np.prod(s.shape.as_list(), dtype=np.float64)) * max(s.dtype.size, 1) for s in specs]
    if all(n <= MAX_RANDOM_BYTES for n in sizes):  # else materialize names the argument over its cap
        check_fits(sum(sizes), 2 + 2 * len(policies), "precision",
                   "use a smaller shape or fewer --policies")
    rng = np.random.default_rng(args.seed)  # one stream for all arguments: x and y differ
    from tflab._user.target import recording_draws

    with recording_draws():  # which inputs were drawn at random, for the error line's --examples hint
        call_args = tuple(materialize(a, rng) for a in call_args)
        call_kwargs = {k: materialize(v, rng) for k, v in call_kwargs.items()}
        own = {"policies", "loss_scale", "seed", "examples"} & set(call_kwargs)
        if own:  # names compare_precisions takes itself: bind them to the function instead
            fn = functools.partial(fn, **{k: call_kwargs.pop(k) for k in own})
        report = compare_precisions(fn, *call_args, policies=policies, loss_scale=loss_scale,
                                    seed=args.seed, **call_kwargs)
    print(_jsonutil.dumps(report) if args.json else report.to_text())
    return 1 if report.flagged else 0
