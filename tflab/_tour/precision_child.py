"""``python -m tflab._tour.precision_child OUT.pickle``: step 10's loss-scaling demo in its own process.

`tflab.precision.loss_scaling.demonstrate_loss_scaling` builds its own MobileNetV3Small
(64×64×3) three times and runs a training step under each policy: nothing of
the tour's model or state, seeded by itself (seed 0). The tour starts this
process at its start (`tflab._tour.background`), so the demo's builds and
steps run on the other core while the earlier sections trace, and step 10
prints the `LossScalingDemo` it pickled. Written atomically (``OUT.tmp``,
then renamed).
"""

from __future__ import annotations

import os
import pickle
import sys


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tflab.process.watch import watch_parent as _watch_parent

    # Never an orphan: a tour stopped by Ctrl-C or SIGTERM takes this process with it.
    _watch_parent(os.getppid(), float(os.environ.get("TFLAB_DEADLINE_S", "300")) + 5)
    from tflab._tour.s10_precision import DEMO_BATCH, DEMO_SHAPE
    from tflab.precision.loss_scaling import demonstrate_loss_scaling

    demo = demonstrate_loss_scaling(input_shape=DEMO_SHAPE, batch=DEMO_BATCH)
    out = argv[0]
    with open(out + ".tmp", "wb") as f:
        pickle.dump(demo, f)
    os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
