"""``tflab distribute``: tracing under MirroredStrategy (2 logical CPUs) and on 2 workers on 127.0.0.1.

The work is `tflab.distribute`: `lab.run_lab_subprocess` (one fresh process with 2
logical CPUs), `workers.run_workers` (MultiWorkerMirroredStrategy worker processes
with TF_CONFIG on free loopback ports) and `user.run_user_step` (FILE.py:STEP);
this verb parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys

from tflab._api.cliargs import int_at_least, positive_float

HELP = ("trace a strategy.run training step under MirroredStrategy (2 logical CPUs) and under "
        "MultiWorkerMirroredStrategy on 2 local worker processes; report traces, replica bodies and "
        "reasons per worker")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab.distribute.user import MAX_REPLICAS, MAX_WORKERS, ONE_REPLICA

    from tflab._api.cliargs import only_with

    for dest in ("arg", "replicas", "workers"):
        only_with(p, dest, lambda a: a.target is not None, _NEEDS_STEP)
    for dest in ("crash_worker", "no_export"):
        only_with(p, dest, lambda a: a.target is None,
                  "--crash-worker and --no-export belong to the built-in demo, not to FILE.py:STEP")
    only_with(p, "crash_worker", lambda a: a.mode != "mirrored",
              "--crash-worker needs --mode workers or all: the mirrored lab has no workers")
    only_with(p, "replicas", lambda a: a.mode != "workers",
              "--replicas sets the mirrored part's logical CPUs, and --mode workers runs no mirrored part: use "
              "--workers N, or --mode mirrored or all")
    only_with(p, "workers", lambda a: a.mode != "mirrored",
              "--workers sets the workers part's processes, and --mode mirrored runs no workers: use "
              "--replicas N, or --mode workers or all")
    only_with(p, "no_export", lambda a: a.mode != "workers",
              "--no-export skips the export after the mirrored lab's training, and --mode workers runs no "
              "export: leave --no-export out")

    p.add_argument("target", nargs="?", metavar="FILE.py:STEP",
                   help="your replica step (what strategy.run runs on each replica); the file is "
                        "imported inside strategy.scope(), so its tf.Variables are MirroredVariables. "
                        "Without it: the built-in demo")
    p.add_argument("--arg", action="append", metavar="NAME=SPEC",
                   help="one global batch per step for STEP's parameter NAME, e.g. x=float32[8,4] "
                        "(dim 0: rows per step); repeat for each parameter")
    p.add_argument("--replicas", type=int_at_least(2, MAX_REPLICAS, ONE_REPLICA), default=None, metavar="N",
                   help=f"with STEP: MirroredStrategy over N logical CPUs (2..{MAX_REPLICAS}; default 2)")
    p.add_argument("--workers", type=int_at_least(2, MAX_WORKERS, ONE_REPLICA), default=None, metavar="N",
                   help=f"with STEP: N MultiWorkerMirroredStrategy worker processes on 127.0.0.1 "
                        f"(2..{MAX_WORKERS}; default 2)")
    p.add_argument("--mode", choices=("all", "mirrored", "workers"), default="all",
                   help="mirrored: one process, 2 logical CPUs; workers: 2 worker processes on "
                        "127.0.0.1; all: both (default)")
    p.add_argument("--timeout", type=positive_float, default=90.0, metavar="S",
                   help="seconds allowed per part; processes still running then are stopped (default 90)")
    p.add_argument("--no-export", action="store_true",
                   help="skip the export after distributed training (SavedModel + TFLite) in mirrored mode")
    p.add_argument("--crash-worker", type=int_at_least(0, 1), default=None, metavar="I",
                   help="demonstration: worker I kills itself after its first step; the run stops the "
                        "others and names it (exit status 2)")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.epilog = ("FILE.py:STEP --arg x=float32[8,4]: 2 full global batches and a smaller last one "
                "(rows 2B+B//2), so the report shows the split and the retrace; a replica with 0 rows "
                "is named. network: only 127.0.0.1, on ports picked free. Ctrl-C stops every worker. exit status: 0; "
                "2 on bad input, a worker crash or a timeout (one line naming the worker)")


# The options that mean something only with (or only without) FILE.py:STEP, or with one --mode, are the
# parser's `tflab._api.cliargs.only_with` rules (`add_arguments`), refused while parsing, before TF loads.

_NEEDS_STEP = ("--arg, --replicas and --workers need FILE.py:STEP (your step); the built-in demo runs 2 replicas "
               "and 2 workers")


def run(args: argparse.Namespace) -> int:
    from tflab._io.progress import Progress
    from tflab.distribute import lab, workers

    if args.target is not None:
        return _run_user(args)
    parts = ["mirrored"] if args.mode == "mirrored" else ["workers"] if args.mode == "workers" \
        else ["mirrored", "workers"]
    progress = Progress("distribute", total=len(parts), enabled=not args.json)
    result: dict = {}
    for part in parts:
        if part == "mirrored":
            progress("MirroredStrategy lab in a fresh process (2 logical CPUs)")
            result["mirrored"] = lab.run_lab_subprocess(export=not args.no_export, timeout=args.timeout)
            if not args.json:
                print(lab.lab_text(result["mirrored"]))
        else:
            progress("2 MultiWorkerMirroredStrategy workers on 127.0.0.1")
            report = workers.run_workers(2, timeout=args.timeout, crash_worker=args.crash_worker,
                                         progress=progress.note)
            result["workers"] = report.to_dict()
            if not args.json:
                if "mirrored" in result:
                    print()
                print(report.to_text())
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0


def _run_user(args: argparse.Namespace) -> int:
    from tflab._io.progress import Progress
    from tflab.distribute import user as distribute_user

    parts = ["mirrored"] if args.mode == "mirrored" else ["workers"] if args.mode == "workers" \
        else ["mirrored", "workers"]
    left_out = ""
    if args.mode == "all" and (args.replicas is None) != (args.workers is None):
        parts = ["mirrored"] if args.replicas is not None else ["workers"]
        left_out = ("; the worker part is not run: give --workers N too" if args.replicas is not None
                    else "; the MirroredStrategy part is not run: give --replicas N too")
    step = distribute_user.check_user_step(args.target, args.arg)
    replicas = (args.replicas or 2) if "mirrored" in parts else None
    workers = (args.workers or 2) if "workers" in parts else None
    distribute_user.check_counts(step, replicas, workers)
    progress = Progress("distribute", total=1, enabled=not args.json)
    name = step.target.rpartition(":")[2]
    progress(f"{name}: " + " and ".join(([f"MirroredStrategy on {replicas} logical CPUs"] if replicas else [])
                                        + ([f"{workers} MultiWorkerMirroredStrategy workers"] if workers
                                           else []))
             + " (processes run together)" + left_out)
    result: dict = {"step": args.target}
    result.update(distribute_user.run_user_step(step, replicas, workers, timeout=args.timeout,
                                                progress=progress.note))
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(distribute_user.user_text(result))
    return 0
