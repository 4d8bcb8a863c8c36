"""``tflab env [--json]``: print the runtime configuration measurements depend on, and tflab's settings.

The work is `tflab.runtime.runtime_config`; this verb prints it, then the
table of every ``TFLAB_*`` environment variable
(`tflab.process.settings.SETTINGS`: name, value now, kind, meaning;
``--json`` carries it as ``"settings"``, with the default and the readers).
"""

from __future__ import annotations

import argparse
import json

HELP = ("print the configuration TF runs on here: TF build, Python, CPU ISA, whether oneDNN "
        "is on and why, XLA_FLAGS, CPU allocator, threads, GPUs; and every TFLAB_* setting")

EPILOG = ("oneDNN: TF 2.21 turns its oneDNN CPU kernels on by default on Linux CPUs with "
          "AVX-512 VNNI/BF16, AVX-VNNI or AMX; TF_ENABLE_ONEDNN_OPTS=0/1 forces the choice "
          "(read once, when TF loads).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("--json", action="store_true", help="print the record as JSON")


def run(args: argparse.Namespace) -> int:
    from tflab.process.settings import table_rows, table_text
    from tflab.runtime import runtime_config

    from custom_ops.python.ops.warp_softmax_ops import planned_cpu_path

    cfg = runtime_config()
    path = planned_cpu_path()  # from the CPU flags and TFLAB_WARP_SOFTMAX_ISA; builds nothing
    if args.json:
        print(json.dumps({**cfg.to_dict(), "warp_softmax_cpu_path": path, "settings": table_rows()}, indent=2))
    else:
        print(cfg.to_text())
        print(f"WarpSoftmax CPU path: {path}")
        print()
        print(table_text())
    return 0
