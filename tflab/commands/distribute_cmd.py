"""``tflab distribute``: tracing under MirroredStrategy (2 logical CPUs) and on 2 workers on 127.0.0.1.

The work is `tflab.distribute`: `run_lab_subprocess` (one fresh process with 2
logical CPUs) and `run_workers` (MultiWorkerMirroredStrategy worker processes
with TF_CONFIG on free loopback ports); this verb parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys

from tflab._cliargs import int_at_least, positive_float

HELP = ("trace a strategy.run training step under MirroredStrategy (2 logical CPUs) and under "
        "MultiWorkerMirroredStrategy on 2 local worker processes; report traces, replica bodies and "
        "reasons per worker")


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    p.epilog = ("network: only 127.0.0.1, on ports picked free. Ctrl-C stops every worker. exit status: 0; "
                "2 on bad input, a worker crash or a timeout (one line naming the worker)")


def run(args: argparse.Namespace) -> int:
    from tflab import distribute
    from tflab._progress import Progress
    from tflab.errors import UsageError

    if args.crash_worker is not None and args.mode == "mirrored":
        raise UsageError("--crash-worker needs --mode workers or all: the mirrored lab has no workers")
    parts = ["mirrored"] if args.mode == "mirrored" else ["workers"] if args.mode == "workers" \
        else ["mirrored", "workers"]
    progress = Progress("distribute", total=len(parts), enabled=not args.json)
    result: dict = {}
    for part in parts:
        if part == "mirrored":
            progress("MirroredStrategy lab in a fresh process (2 logical CPUs)")
            result["mirrored"] = distribute.run_lab_subprocess(export=not args.no_export,
                                                               timeout=args.timeout)
            if not args.json:
                print(distribute.lab_text(result["mirrored"]))
        else:
            progress("2 MultiWorkerMirroredStrategy workers on 127.0.0.1")
            report = distribute.run_workers(2, timeout=args.timeout,
                                            crash_worker=args.crash_worker, progress=progress.note)
            result["workers"] = report.to_dict()
            if not args.json:
                if "mirrored" in result:
                    print()
                print(report.to_text())
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0
