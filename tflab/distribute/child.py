"""Entry point of the processes `tflab.distribute` starts (logical devices need a fresh process).

``python -m tflab.distribute.child mirrored``: `tflab.distribute.lab.mirrored_lab`.
``python -m tflab.distribute.child worker``: one MultiWorkerMirroredStrategy
worker (`tflab.distribute.workers.worker_main`), with ``TF_CONFIG`` set by its parent.
``user-mirrored`` / ``user-worker``: the same on the user's step
(`tflab.distribute.user`), named by ``$TFLAB_USER_STEP``.
Each exits on its own when its parent is gone (`tflab.process.watch.tie_to_parent`).
The JSON report goes back through `tflab.process.channel.send_result` to ``$TFLAB_REPORT``.
"""

from __future__ import annotations

import os
import sys


def name_os_exit() -> None:
    """The user's ``os._exit(N)`` in a step writes one line first, so the parent names it.

    Without it the worker's last stderr line was TF's cuInit log line, quoted as the cause.
    """
    from tflab.distribute.processes import OS_EXIT_MARK

    real, pid = os._exit, os.getpid()

    def _exit(n):
        if os.getpid() == pid and n not in (0, 124):  # 124: the parent watch's own exit
            try:
                sys.stderr.write(f"\n{OS_EXIT_MARK}({n})\n")
                sys.stderr.flush()
            except Exception:  # noqa: BLE001  (exiting anyway)
                pass
        real(n)

    os._exit = _exit


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tflab.process.settings import get as setting
    from tflab.process.watch import tie_to_parent

    tie_to_parent(120.0, margin_s=5)
    name_os_exit()
    mode = argv[0] if argv else ""
    if mode == "mirrored":
        from tflab.distribute.lab import mirrored_lab

        export = setting("TFLAB_LAB_EXPORT") == "1"
        import shutil

        from tflab._io.paths import owned_temp_dir

        tmp = str(owned_temp_dir("tflab_lab_export_"))  # carries its owner: swept after a SIGKILL
        try:
            report = mirrored_lab(export_dir=tmp if export else None)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    elif mode == "worker":
        from tflab.distribute.workers import worker_main

        report = worker_main()
    elif mode in ("user-mirrored", "user-worker"):
        from tflab.distribute import user

        report = user.user_mirrored_main() if mode == "user-mirrored" else user.user_worker_main()
    else:
        print("usage: python -m tflab.distribute.child {mirrored,worker,user-mirrored,user-worker}",
              file=sys.stderr)
        return 2
    from tflab.process.channel import send_result
    from tflab.report.jsonable import to_jsonable

    send_result(setting("TFLAB_REPORT"), data=to_jsonable(report))  # the one channel back (committed last)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
