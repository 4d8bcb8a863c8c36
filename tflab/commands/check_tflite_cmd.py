"""``tflab check-tflite MODEL.tflite SAVED_MODEL``: check a flatbuffer made elsewhere, op by op.

The work is `tflab.litert.check.check_tflite` with the per-op check of
`tflab.litert.per_op` (its reference weights come from a float conversion
of SAVED_MODEL that tflab makes for the purpose); this verb reads the files,
refuses what cannot be checked before any work, and prints the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

HELP = ("check a .tflite flatbuffer against the SavedModel it was converted from: every op against a float "
        "reference on its own inputs, and the outputs end to end")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tflab._api.cliargs import only_with

    only_with(p, "force", lambda a: bool(a.node_data),
              "--force overwrites an existing --node-data file: give --node-data, or leave --force out")
    only_with(p, "keep_float", lambda a: a.quantization in (None, "int8"),
              "--keep-float measures an int8 fix (keeping ops in float), and the --quantization given is not "
              "int8: leave --keep-float out, or check an int8 model")

    p.add_argument("model", metavar="MODEL.tflite", help="the TFLite flatbuffer to check")
    p.add_argument("saved_model", metavar="SAVED_MODEL", help="the SavedModel folder it was converted from")
    p.add_argument("--examples", metavar="F.npz",
                   help="example batch(es), an array per input name (default: the examples.npz next to "
                        "MODEL.tflite when it is in a `tflab export` folder, so the numbers are export's; "
                        "else seeded random batches of sizes 1 and 4 for every signature)")
    p.add_argument("--quantization", choices=("none", "dynamic", "float16", "int8"),
                   help="the recipe that made MODEL (default: read from its tensors; int8 or uint8 activations "
                        "with no float kernel is full-integer, checked as int8); one the tensors contradict "
                        "is refused")
    p.add_argument("--node-data", metavar="OUT.json",
                   help="also write each op's |Δ|/bound as Model Explorer node data (keyed by output tensor "
                        "name) to OUT.json")
    p.add_argument("--force", action="store_true", help="overwrite an existing --node-data file")
    p.add_argument("--keep-float", action="store_true",
                   help="int8: also measure the fix of keeping the ops with the largest share of the output "
                        "error in float (QuantizationDebugger; one more calibration conversion)")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    p.epilog = ("exit status: 0 every checked op inside its bound and every output inside its end-to-end "
                "bound; 1 an op outside its bound, an output beyond its bound (an infinite error: NaN on one "
                "side only, included), or the per-op check could not run; 2 bad input (not a flatbuffer, "
                "signatures differ from the SavedModel's, a --quantization the tensors contradict, missing "
                "examples file)")


def _read_model(path: str) -> bytes:
    from tflab.errors import UsageError
    from tflab.litert.ops import read_ops

    if not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "does not exist"
        raise UsageError(f"MODEL.tflite {path!r} {what}: give the .tflite file tf.lite.TFLiteConverter wrote")
    with open(path, "rb") as f:
        data = f.read()
    try:
        read_ops(data)
    except UsageError as e:
        raise UsageError(f"{path!r} is {str(e)}") from None
    except Exception as e:  # a file with the identifier but a broken table
        why = f"{type(e).__module__}.{type(e).__name__}: {e}" if str(e) else type(e).__name__
        raise UsageError(f"{path!r} is not a readable TFLite flatbuffer: reading its tables failed ({why}) after "
                         f"its identifier, in a file of {len(data)} bytes (cut short?); give the whole .tflite "
                         f"file tf.lite.TFLiteConverter wrote") from None
    return data


def run(args: argparse.Namespace) -> int:
    from tflab.report.jsonable import dumps
    from tflab._io.progress import Progress
    from tflab.examples import Examples, random_examples, union_inputs
    from tflab.litert.check import check_tflite, require_matching_signatures
    from tflab.litert.ops import variant_of
    from tflab.saved_model import load_saved_model, require_saved_model_dir, signature_inputs

    from tflab._io.paths import output_path

    node_out = (output_path(args.node_data, "--node-data", example="nodes.json", overwrite=args.force)
                if args.node_data else None)
    from tflab.examples import load_examples

    given = Examples.of(load_examples(args.examples)).check_rows() if args.examples else None  # before any load
    data = _read_model(args.model)
    sm_dir = require_saved_model_dir(args.saved_model)
    export_examples = os.path.join(os.path.dirname(os.path.abspath(args.model)), "examples.npz")
    source = ""
    if given is not None:
        batches = given
    elif os.path.isfile(export_examples) and os.path.isfile(
            os.path.join(os.path.dirname(os.path.abspath(args.model)), "report.json")):
        # A `tflab export` folder: its own examples, so these numbers are the export's.
        batches = Examples.of(load_examples(export_examples))
        source = f" (examples: {export_examples}, the export's own)"
    else:
        batches = None
    loaded = load_saved_model(sm_dir)
    require_matching_signatures(data, loaded)  # bad input is refused before any progress line or work
    if args.quantization:
        from tflab.errors import UsageError
        from tflab.litert.recipe import recipe_mismatch

        why = recipe_mismatch(data, args.quantization)
        if why:
            raise UsageError(f"--quantization {args.quantization}: {why}")
    progress = Progress("check-tflite", total=1, enabled=not args.json)
    if batches is None:
        batches = Examples.of(random_examples(union_inputs(
            {k: signature_inputs(f) for k, f in loaded.signatures.items()})))
        source = (" (examples: drawn by tflab, seeded: floats standard normal, integers in [0, 10); "
                  "give --examples F.npz with real inputs)")
    quantization = args.quantization or variant_of(data)
    progress(f"checking the {quantization} flatbuffer op by op and end to end{source}")
    # The float reference converts in a worker process while the bound's gradients are computed
    # (the two longest steps, side by side; a converter abort costs the reference, not the run).
    check = check_tflite(data, sm_dir, batches, quantization, keep_float=args.keep_float, isolate=True,
                         progress=progress.note)
    check = dataclasses.replace(check, path=os.path.abspath(args.model))
    if node_out is not None and check.per_op is not None:
        node_out.write(dumps(check.per_op.node_data))
    print(dumps(check.to_dict()) if args.json else check.to_text())
    return 0 if check.ok else 1

