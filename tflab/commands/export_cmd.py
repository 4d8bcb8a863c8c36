"""``tflab export MODEL``: SavedModel + TFLite variants, each checked against TF, written atomically."""

from __future__ import annotations

import argparse
import os
import re

HELP = ("export a .keras file, SavedModel folder or FILE.py:OBJ as a SavedModel (checked bit-exact) and "
        "TFLite variants (checked against TF within a stated bound)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab._api.cliargs import only_with

    # A misspelt variant is `check_options`' to name (it may be the int8 the user meant).
    only_with(p, "no_keep_float", lambda a: any(q.strip() in ("int8",) or q.strip() not in QUANTIZE_NAMES
                                                for q in a.quantize.split(",") if q.strip()),
              "--no-keep-float skips a measurement of the int8 variant, and --quantize makes no int8 variant: "
              "leave --no-keep-float out, or add int8 to --quantize")

    p.add_argument("model", metavar="MODEL", help="a .keras file, a SavedModel folder, or FILE.py:OBJ")
    p.add_argument("--quantize", default="none,dynamic,float16,int8", metavar="LIST",
                   help="comma list of TFLite variants among none,dynamic,float16,int8 (default: all)")
    p.add_argument("--out", metavar="DIR", help="export folder (default: saved_models/NAME)")
    p.add_argument("--examples", metavar="FILE.npz",
                   help="one example batch, an array per input name; with several signatures each is fed "
                        "the names it takes (default: seeded random batches covering every signature)")
    p.add_argument("--force", action="store_true", help="replace --out (and --html FILE) if it exists")
    p.add_argument("--html", metavar="OUT.html", help="also write one self-contained HTML page: the variants "
                   "table with each variant's error against its bound")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    p.add_argument("--node-data", action="store_true",
                   help="also write model_<variant>.node_data.json: each op's |Δ|/bound as Model Explorer "
                        "node data (load it next to the .tflite in ai-edge-model-explorer)")
    p.add_argument("--no-keep-float", action="store_true",
                   help="int8: do not measure the fix of keeping the worst ops in float (saves one "
                        "calibration conversion)")
    p.epilog = ("writes saved_model/, model_<variant>.tflite, examples.npz and report.json under --out "
                "(and model_<variant>.node_data.json with --node-data). "
                "--force replaces only a previous export (a folder with report.json). "
                "exit status: 0 all checks passed; 1 a variant failed, crashed or exceeded its bound; "
                "2 bad input (nothing written)")


# `tflab.litert.conversion.QUANTIZATIONS`, here so the pre-TF check imports no numpy
# (tests/commands/test_cli_preflight.py keeps them equal).
QUANTIZE_NAMES = ("none", "dynamic", "float16", "int8")


def check_options(args: argparse.Namespace) -> None:
    """``--quantize``'s names, before TF loads (`tflab.cli.preflight`), in `tflab.export.parse_quantize`'s words."""
    from tflab.errors import UsageError

    text = args.quantize
    names = [q.strip() for q in text.split(",") if q.strip()]
    bad = [q for q in names if q not in QUANTIZE_NAMES]
    if bad:
        raise UsageError(f"--quantize {text!r}: unknown variant(s) {', '.join(map(repr, bad))}; use a comma "
                         f"list of {', '.join(QUANTIZE_NAMES)}")
    if not names:
        raise UsageError(f"--quantize {text!r} names no variant: use a comma list of {', '.join(QUANTIZE_NAMES)}")


def default_out(model: str) -> str:
    """``saved_models/NAME``: NAME from the file, folder or OBJ name."""
    if ".py:" in model:
        name = model.rpartition(":")[2]
    else:
        base = os.path.basename(os.path.normpath(model))
        name = base[:-len(".keras")] if base.endswith(".keras") else base
    return os.path.join("saved_models", re.sub(r"[^\w.-]", "_", name) or "model")


def run(args: argparse.Namespace) -> int:
    from tflab.report.jsonable import dumps
    from tflab._io.progress import Progress
    from tflab.export import export_model, parse_quantize

    from tflab.report.pages import export_page, html_output

    html = html_output(args.html, args.force)  # before any work
    quants = parse_quantize(args.quantize)
    out = args.out or default_out(args.model)
    # loading, SavedModel, then convert + check per variant
    progress = Progress("export", total=2 + 2 * len(quants), enabled=not args.json)
    report = export_model(args.model, out, quantize=quants, examples=args.examples, force=args.force,
                          progress=progress, model_name=args.model, keep_float=not args.no_keep_float,
                          node_data=args.node_data)
    if html is not None:
        html.write(export_page(report))
    print(dumps(report.to_dict()) if args.json else report.to_text())
    return 0 if report.ok else 1
