"""``tflab build-op``: build (or find cached) the WarpSoftmax custom op library."""

from __future__ import annotations

import argparse
import os

HELP = ("build the WarpSoftmax custom op against the installed TF (cached): print the .so "
        "path and whether the CUDA kernels were compiled")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="rebuild even when the cache has this build")
    p.add_argument("--no-cuda", action="store_true", help="CPU kernels only, even when nvcc is found")
    p.add_argument("--check", action="store_true",
                   help="also load the library and run custom_ops.opcheck on a float32 [4, 37] input")
    p.add_argument("-v", "--verbose", action="store_true", help="print the compile commands on stderr")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from custom_ops.build import BuildError, build
    from tflab.report import jsonable as _jsonutil
    from tflab.errors import TflabError

    try:
        res = build(force=args.force, cuda=False if args.no_cuda else None, verbose=args.verbose)
    except BuildError as e:
        # One line for the CLI; the compiler's own lines follow it in the message.
        raise TflabError(str(e)) from e
    from tflab.process.settings import get as setting

    out: dict = {"build": res}
    prebuilt = setting("TFLAB_WARP_SOFTMAX_SO")
    if prebuilt:  # the loader takes that file, not this build (`warp_softmax_ops.load_library`)
        out["loads"] = os.path.abspath(prebuilt)
    if args.check:
        import tensorflow as tf

        from custom_ops.opcheck import OpcheckError, opcheck
        from custom_ops.python.ops import warp_softmax_ops

        warp_softmax_ops.load_library(res)
        try:
            out["opcheck"] = opcheck(warp_softmax_ops.warp_softmax,
                                     tf.random.stateless_normal([4, 37], seed=[0, 1]))
        except OpcheckError as e:
            raise TflabError(str(e)) from e
    if args.json:
        print(_jsonutil.dumps(out))
        return 0
    print(res.to_text())
    if "loads" in out:
        print(f"note: TFLAB_WARP_SOFTMAX_SO is set: the op loads {out['loads']}, not this build "
              f"(unset it to load this one)")
    if "opcheck" in out:
        print(out["opcheck"].to_text())
    return 0
