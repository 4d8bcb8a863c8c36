"""``tflab tour``: every lab step on the embedded MobileNetV3Small, or on ``--model``."""

from __future__ import annotations

import argparse
import json

HELP = "run every lab step on MobileNetV3Small (random weights) or on --model PATH"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="PATH", help="a .keras file or SavedModel folder instead of the default model")
    p.add_argument("--out", metavar="DIR", default="saved_models/tour", help="output folder (default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="replace a non-empty --out folder (the tour commits its folder whole at the end)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of text")


def run(args: argparse.Namespace) -> int:
    from tflab._jsonutil import to_jsonable
    from tflab.tour import run_tour

    report = run_tour(model_path=args.model, out_dir=args.out, quiet=args.json, force=args.force)
    if args.json:
        print(json.dumps(to_jsonable(report), indent=2))
    return 0
