"""``tflab tour``: every lab step on the embedded MobileNetV3Small, or on ``--model``."""

from __future__ import annotations

import argparse
import json

HELP = "run every lab step on MobileNetV3Small (random weights) or on --model PATH"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="PATH", help="a .keras file or SavedModel folder instead of the default model")
    p.add_argument("--out", metavar="DIR", default="saved_models/tour", help="output folder (default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="replace a non-empty --out folder (the tour commits its folder whole at the end) "
                        "and an existing --html FILE")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of text")
    p.add_argument("--html", metavar="OUT.html", help="also write one self-contained HTML page: trace timeline, "
                   "FuncGraph as SVG with a search box, export variants, modes, precision, distribute")
    p.add_argument("--tensorboard", metavar="DIR", help="also write the inference FuncGraph as a TensorBoard "
                   "event file under DIR (tensorboard --logdir DIR, Graphs dashboard)")


def run(args: argparse.Namespace) -> int:
    from tflab.report.jsonable import to_jsonable
    from tflab.tour import run_tour

    report = run_tour(model_path=args.model, out_dir=args.out, quiet=args.json, html=args.html,
                      force=args.force, tensorboard=args.tensorboard)
    if args.json:
        print(json.dumps(to_jsonable(report), indent=2))
    return 0
