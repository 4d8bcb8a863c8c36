"""``tflab lower FILE.py:FUNC --arg …``: the lowering ladder, Python to machine code, on a user's function."""

from __future__ import annotations

import argparse

from tflab._api.cliargs import int_at_least

HELP = ("lower FILE.py:FUNC under XLA and show every level (python, autograph, funcgraph, tf_mlir, "
        "stablehlo, hlo, optimized_hlo, llvm_ir, asm) with its fusions tied to your source lines")

# Stage -> file suffix under --out (kept here: argparse needs no TF).
STAGE_FILES = {"python": "py", "autograph": "py", "funcgraph": "txt", "tf_mlir": "mlir", "stablehlo": "mlir",
               "hlo": "hlo.txt", "optimized_hlo": "hlo.txt", "llvm_ir": "ll", "asm": "s",
               "grappler": "txt", "partition": "txt", "profile": "txt"}

# Each path's levels (`tflab.lowering.STAGES` / `GRAPH_STAGES`, equal by a test): kept here so a
# --stage the chosen path never makes is refused before TF loads.
PATH_STAGES = {"xla": ("python", "autograph", "funcgraph", "tf_mlir", "stablehlo", "hlo", "optimized_hlo",
                       "llvm_ir", "asm"),
               "graph": ("python", "autograph", "funcgraph", "grappler", "partition", "profile")}

MAX_RUNS = 100_000  # profiled runs, at most (`tflab.lower`'s own cap: 10**9 runs would never end)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab.commands.preflight_checks import EXAMPLES_HELP as _EXAMPLES_HELP  # no numpy: --help stays fast

    from tflab._api.cliargs import only_with

    only_with(p, "runs", lambda a: a.path == "graph",
              "--runs needs --path graph: it sets how many times the graph path's profile runs, and --path xla "
              "(the default) profiles nothing; add --path graph, or leave --runs out")
    only_with(p, "cause", lambda a: a.path == "xla",
              "--cause compares eager with XLA and marks the fusion where they part: use it with --path xla "
              "(the default), not --path graph")
    only_with(p, "passes", lambda a: a.path == "xla",
              "--passes shows XLA's HLO passes: use it with --path xla (the default); --path graph shows "
              "Grappler's optimizers instead")
    only_with(p, "force", lambda a: bool(a.out or a.html),
              "--force replaces an existing --out folder or --html file: give --out or --html, or leave --force out")

    p.add_argument("target", metavar="FILE.py:FUNC", help="the function, tf.function or Keras model to lower")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="an argument: NAME=dtype[dims] is a TensorSpec (every dim given: XLA compiles for "
                        "static shapes), NAME=<python literal> a Python value; repeat per parameter")
    p.add_argument("--examples", metavar="FILE.npz", help=_EXAMPLES_HELP)
    p.add_argument("--stage", action="append", default=[], choices=list(STAGE_FILES), metavar="S",
                   help="also print this stage's whole text (repeatable; one of: %(choices)s)")
    p.add_argument("--out", metavar="DIR", help="write every stage in full, one file per stage, and "
                   "lowering.json, into the new folder DIR")
    p.add_argument("--html", metavar="OUT.html", help="write one self-contained page: click a source line, "
                   "TF op or fusion to highlight what came from it at every level")
    p.add_argument("--cause", action="store_true", help="also compare eager with XLA on the same arguments "
                   "(tflab compare); when they disagree, find the transformation that made it (flags and HLO "
                   "passes one at a time, each in a child process) and mark the fusion where it acted")
    p.add_argument("--path", choices=("xla", "graph"), default="xla",
                   help="xla (default): XLA's ladder down to machine code; graph: what a plain tf.function ran, "
                        "from TF's RunMetadata: Grappler's graph (what each optimizer changed), the partition "
                        "graph with each node's kernel (oneDNN or Eigen), and each node's time over --runs runs")
    p.add_argument("--runs", type=int_at_least(1, MAX_RUNS), default=20, metavar="N",
                   help="--path graph: runs the profile level times (default 20)")
    p.add_argument("--passes", action="store_true",
                   help="--path xla: also show what each HLO pass changed (a diff per pass with your lines, "
                        "from one compile's --xla_dump_hlo_pass_re=.* dump); passes that changed nothing are listed")
    p.add_argument("--force", action="store_true", help="replace an existing --out folder or --html file")
    p.add_argument("--json", action="store_true", help="print every stage's op counts and the fusion records "
                   "as JSON (with --stage, those stages' text too)")


def check_options(args: argparse.Namespace) -> None:
    """Option combinations refused before TF loads (`tflab.cli.preflight` calls it; `run` checks again).

    Raises:
        UsageError: a ``--stage`` the chosen path does not make, ``--runs`` outside [1, `MAX_RUNS`].
            (``--runs``, ``--cause``, ``--passes`` and ``--force`` given where they mean nothing are
            refused by the parser: the `tflab._api.cliargs.only_with` rules of `add_arguments`.)
    """
    from tflab.errors import UsageError

    path = getattr(args, "path", "xla")
    stages = PATH_STAGES.get(path, ())
    for name in getattr(args, "stage", None) or []:
        if name not in stages:
            other = next((p for p, names in PATH_STAGES.items() if p != path and name in names), None)
            raise UsageError(f"--stage {name}: --path {path} has no such level; its levels are "
                             f"{', '.join(stages)}" + (f" ({name} is --path {other}'s)" if other else ""))
    runs = getattr(args, "runs", 20)
    if not 1 <= runs <= MAX_RUNS:
        raise UsageError(f"--runs {runs}: give a whole number from 1 to {MAX_RUNS} (profiled runs), e.g. --runs 20")


def before_tf(args: argparse.Namespace) -> None:
    """Called by the CLI before TF loads: turns XLA's dump on for this process (`arm_own_dump`).

    The verb runs in a fresh supervised process, so the lowering's own compile
    can write XLA's dump (XLA reads ``XLA_FLAGS`` once per process): no second
    process, TF import or SavedModel is needed. In-process runs (TF already
    loaded) turn it on for the lowering's compile alone (`tflab.lowering.dump_flags`).
    """
    if getattr(args, "path", "xla") == "graph":
        return  # no XLA compile: nothing to dump
    from tflab.lowering.dump import arm_own_dump

    arm_own_dump(passes=getattr(args, "passes", False))


def _dump_flags_refused() -> str:
    """Why this process cannot turn XLA's dump on for one compile ("" when it can: no child process)."""
    from tflab.lowering.dump_flags import available

    return available()


def run(args: argparse.Namespace) -> int:
    from tflab.report import jsonable as _jsonutil
    from tflab._io.progress import Progress
    from tflab._io.paths import output_path
    from tflab.report.pages import html_output
    from tflab.examples import load_call_with_examples
    from tflab._user.usercode import user_code
    from tflab.lowering import lower

    # Every output checked before any work: a bad path must not cost a lowering.
    out = None
    if args.out:
        from tflab._io.paths import check_folder_out
        from tflab.commands.preflight_checks import check_file_not_in_folder

        if args.html:  # the page inside the folder, or at its path: refused before any work
            check_file_not_in_folder(args.html, "--html", args.out, "--out")
        from tflab._io.path_checks import check_tf_path_text

        check_tf_path_text(args.out, "--out")  # XLA dumps into it through a UTF-8 path
        out = output_path(args.out, "--out", folder=True, exclusive=not args.force, noun="lowering")  # odd path text refused here
        check_folder_out(args.out, "--out", args.force, noun="lowering", empty_ok=False)
    html = html_output(args.html, args.force)
    check_options(args)  # in-process runs skip the CLI's preflight
    from tflab.lowering.dump import arm_own_dump, disarm_own_dump

    own = arm_own_dump(passes=args.passes) if args.path == "xla" else None  # armed by `before_tf`; None when TF loaded first
    try:
        fn, call_args, call_kwargs = load_call_with_examples(args.target, args.arg, args.examples)
        if "examples" in call_kwargs:  # the API's own keyword: the function's parameter is bound to it here
            import functools

            fn = functools.partial(fn, examples=call_kwargs.pop("examples"))
        Progress("lower", total=1, enabled=not args.json)(
            f"lowering {args.target}: " + (f"graph path, Grappler and partition graphs, {args.runs} profiled runs"
                                           if args.path == "graph" else "nine levels, XLA's dump " + (
                                               "of this process's compile" if own or not _dump_flags_refused()
                                               else "in a child process")))
        with user_code(args.target.rpartition(":")[2], "while lowering"):
            report = lower(fn, *call_args, path=args.path, runs=args.runs, passes=args.passes, **call_kwargs)
        if args.cause:
            from tflab.lowering.cause import link_cause
            from tflab.modes import compare_modes

            with user_code(args.target.rpartition(":")[2], "while comparing eager with XLA"):
                compared = compare_modes(fn, *call_args, modes=("xla",), repeats=1, hlo=False, **call_kwargs)
            link_cause(report, compared)
            cause_note = _no_cause_note(compared) if report.cause is None else ""
    finally:
        disarm_own_dump()
    if out is not None:
        tmp = out.temp_dir()
        try:
            for i, stage in enumerate(report.stages, 1):
                (tmp / f"{i:02d}_{stage.name}.{STAGE_FILES[stage.name]}").write_text(
                    stage.text if not stage.why else f"(empty: {stage.why})\n", encoding="utf-8")
            (tmp / "lowering.json").write_text(_jsonutil.dumps(report), encoding="utf-8")
            out.commit(tmp)
        except BaseException:
            out.discard(tmp)
            raise
    if html is not None:
        from tflab.report.html.lowering import lowering_page

        html.write(lowering_page(report))
    if args.json:
        data = report.to_dict()
        for d in data["stages"]:
            if d["name"] in args.stage:
                d["text"] = report.stage(d["name"]).text
        print(_jsonutil.dumps(data))
        return _stopped(report)
    print(report.to_text())
    if args.cause and cause_note:
        print(cause_note)
    for name in dict.fromkeys(args.stage):
        stage = report.stage(name)
        print(f"===== {name} =====")
        print(stage.text if not stage.why else f"(empty: {stage.why})")
    if args.out:
        print(f"wrote {args.out} ({len(report.stages)} stage files and lowering.json)")
    if args.html:
        print(f"wrote {args.html}")
    return _stopped(report)


def _no_cause_note(compared) -> str:
    """``--cause``'s line when no fusion is marked: XLA agrees with eager (the comparison's own
    bound), or it differs and turning its passes off one at a time named no cause."""
    nonfinite = getattr(compared, "nonfinite", None)
    if nonfinite is not None and getattr(nonfinite, "found", False):
        return (f"cause: none to mark: the outputs are not finite, in eager as well ({nonfinite.cause_text}); "
                f"no ULP distance measures them")
    if not compared.findings and getattr(compared, "notes", ()):
        return (f"cause: none to mark among the tensors compared, but {len(compared.notes)} come from random "
                f"streams that XLA draws otherwise than eager and were left out ({compared.notes[0]}); "
                f"`tflab compare` lists them")
    if not compared.findings:
        return (f"cause: none to mark: XLA's outputs and gradients are within {compared.ulp_bound} ULP or "
                f"{compared.atol:g} of eager's on these arguments")
    return (f"cause: none found: XLA differs from eager ({compared.findings[0]}), and turning its "
            f"transformations off one at a time named none (`tflab compare` prints the whole comparison)")


def _stopped(report) -> int:
    """Exit 1 when the lowering stopped before machine code (as ``compare`` when XLA cannot compile)."""
    if not report.stopped_at:
        return 0
    import sys

    print(f"tflab lower: finding: {report.function_name} stopped at {report.stopped_at}; the levels before it "
          "are above", file=sys.stderr)
    return 1
