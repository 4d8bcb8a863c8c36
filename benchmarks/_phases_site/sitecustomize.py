"""`benchmarks/bench_tour.py`'s phase timers in the tour's second process (`tflab._tour.lane`).

The benchmark puts this folder on PYTHONPATH and names an output folder in
``TFLAB_BENCH_PHASES_DIR``; Python imports this module at start-up in every
process the tour starts, and in the lane's process only (``sys.orig_argv``
names ``tflab._tour.lane``) it installs the same wrappers as
``benchmarks/_tour_phases.py``, which writes ``lane-<pid>.json`` at exit.
"""

import os
import sys

_dir = os.environ.get("TFLAB_BENCH_PHASES_DIR")
if _dir and "tflab._tour.lane" in getattr(sys, "orig_argv", ()):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import _tour_phases

    _tour_phases.install_lane(os.path.join(_dir, f"lane-{os.getpid()}.json"))
