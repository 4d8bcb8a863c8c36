"""Entry point of the processes `tflab.distribute` starts (logical devices need a fresh process).

``python -m tflab._distribute_worker mirrored``: `tflab.distribute.mirrored_lab`.
``python -m tflab._distribute_worker worker``: one MultiWorkerMirroredStrategy
worker (`tflab.distribute.worker_main`), with ``TF_CONFIG`` set by its parent.
``user-mirrored`` / ``user-worker``: the same on the user's step
(`tflab.distribute_user`), named by ``$TFLAB_USER_STEP``.
The JSON report goes to ``$TFLAB_REPORT``, written atomically.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tflab import distribute

    parent = int(os.environ.get("TFLAB_PARENT_PID", os.getppid()))
    distribute._watch_parent(parent, float(os.environ.get("TFLAB_DEADLINE_S", "120")) + 5)
    mode = argv[0] if argv else ""
    if mode == "mirrored":
        export = os.environ.get("TFLAB_LAB_EXPORT") == "1"
        with tempfile.TemporaryDirectory(prefix="tflab_lab_export_") as tmp:
            report = distribute.mirrored_lab(export_dir=tmp if export else None)
    elif mode == "worker":
        report = distribute.worker_main()
    elif mode in ("user-mirrored", "user-worker"):
        from tflab import distribute_user

        report = (distribute_user.user_mirrored_main() if mode == "user-mirrored"
                  else distribute_user.user_worker_main())
    else:
        print("usage: python -m tflab._distribute_worker {mirrored,worker,user-mirrored,user-worker}",
              file=sys.stderr)
        return 2
    from tflab._jsonutil import to_jsonable

    out = os.environ["TFLAB_REPORT"]
    with open(out + ".tmp", "w") as f:
        json.dump(to_jsonable(report), f)
    os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
