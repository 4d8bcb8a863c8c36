"""``python -m tflab._tour.precision_child OUT``: step 10's loss-scaling demo in its own process.

`tflab.precision.loss_scaling.demonstrate_loss_scaling` builds its own MobileNetV3Small
(64×64×3) three times and runs a training step under each policy: nothing of
the tour's model or state, seeded by itself (seed 0). The tour starts this
process at its start (`tflab._tour.background`), so the demo's builds and
steps run on the other core while the earlier sections trace, and step 10
prints the `LossScalingDemo` it sends back through `tflab.process.channel`
(the result file committed last, so a killed child leaves no half result).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tflab.process.watch import tie_to_parent

    # Never an orphan: a tour stopped by Ctrl-C or SIGTERM takes this process with it.
    tie_to_parent(300.0, margin_s=5)
    from tflab._tour.s10_precision import DEMO_ATTRIBUTE, DEMO_BATCH, DEMO_SHAPE
    from tflab.precision.loss_scaling import demonstrate_loss_scaling

    demo = demonstrate_loss_scaling(input_shape=DEMO_SHAPE, batch=DEMO_BATCH, attribute=DEMO_ATTRIBUTE)
    from tflab.process.channel import send_result

    send_result(argv[0], objects=demo)  # the one channel back: committed last, never half-read
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
