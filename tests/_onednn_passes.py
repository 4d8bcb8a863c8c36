"""``make test``'s oneDNN passes, side by side: ``python tests/_onednn_passes.py --jobs N FILE...``.

The tests marked ``onednn`` depend on TF's CPU kernel path (oneDNN or Eigen) and on the ISA that
oneDNN, XLA and WarpSoftmax generate code for. TF reads ``TF_ENABLE_ONEDNN_OPTS`` and the ISA caps
once, when it loads, so each configuration is its own pytest process:

* pass 2: ``TF_ENABLE_ONEDNN_OPTS=0`` (Eigen, what an AVX2-only EPYC runs by default);
* pass 3: oneDNN on with every ISA cap at AVX2 (``python -m tflab.runtime --capped-env``); left out,
  with a line saying so, on a CPU at AVX2 or below, where it would repeat pass 4;
* pass 4: ``TF_ENABLE_ONEDNN_OPTS=1`` (oneDNN on, whatever this CPU's default is).

With ``--jobs`` 2 or more the passes run at the same time, one process each and no pytest-xdist
workers: the marked tests are ~20 s of work of which a third is TF's import and the collection,
which a worker per core would repeat, and the three processes together keep 2 cores busy where
three passes one after the other left one idle half the time. With ``--jobs 1`` they run one after
the other and the first failure stops the rest, as the Makefile's passes did.

Each pass's pytest output is printed whole when the pass ends (never interleaved): passes that
passed first, a failing one last, so the last summary line printed is a failing pass's (CI reads
the last one). The exit status is the first failing pass's, else 0. Ctrl-C or SIGTERM stops every
pass; each pass is started tied to this script (`tflab.process.group.start_tied`), so a SIGKILL of it
ends them too.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def passes() -> list[tuple[str, dict[str, str]]]:
    """``(label, environment additions)`` per pass, in the Makefile's numbering."""
    sys.path.insert(0, str(REPO))
    from tflab.runtime import capped_pass_env  # no TF import

    out = [("pass 2: TF_ENABLE_ONEDNN_OPTS=0", {"TF_ENABLE_ONEDNN_OPTS": "0"})]
    caps = capped_pass_env()
    if caps:
        out.append(("pass 3: TF_ENABLE_ONEDNN_OPTS=1 " + " ".join(f"{k}={v}" for k, v in caps.items()),
                    {"TF_ENABLE_ONEDNN_OPTS": "1", **caps}))
    out.append(("pass 4: TF_ENABLE_ONEDNN_OPTS=1", {"TF_ENABLE_ONEDNN_OPTS": "1"}))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tests/_onednn_passes.py", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="passes at the same time when 2 or more")
    parser.add_argument("files", nargs="+", help="the test files that hold onednn-marked tests")
    args = parser.parse_args(argv)

    todo = passes()
    running: list[tuple[str, subprocess.Popen, object, float]] = []
    done: list[tuple[str, int, str, float]] = []
    tmp = tempfile.TemporaryDirectory(prefix="tflab-onednn-passes-")

    def start(label: str, extra: dict[str, str]) -> None:
        log = open(Path(tmp.name) / f"{len(running) + len(done)}.log", "w+", encoding="utf-8")
        from tflab.process.group import start_tied  # a pass dies with this script, even under SIGKILL

        proc = start_tied([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-m", "onednn", *args.files],
                          cwd=REPO, env={**os.environ, **extra}, stdout=log, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL)
        running.append((label, proc, log, time.monotonic()))

    def finish(item) -> None:
        label, proc, log, t0 = item
        log.seek(0)
        done.append((label, proc.returncode, log.read(), time.monotonic() - t0))
        log.close()

    def stop(*_: object) -> None:
        for _, proc, _, _ in running:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _, _ in running:
            proc.wait()
        tmp.cleanup()
        sys.exit(130)

    signal.signal(signal.SIGTERM, stop)
    try:
        if args.jobs >= 2:
            for label, extra in todo:
                start(label, extra)
                print(f"{label}: started", flush=True)
            for item in list(running):
                item[1].wait()
                finish(item)
        else:
            for label, extra in todo:
                start(label, extra)
                running[-1][1].wait()
                finish(running.pop())
                if done[-1][1] != 0:
                    break
    except KeyboardInterrupt:
        stop()
    tmp.cleanup()

    failed = [d for d in done if d[1] != 0]
    for label, rc, text, seconds in [d for d in done if d[1] == 0] + failed:
        print(f"\n{label} ({seconds:.0f} s{'' if rc == 0 else f', exit {rc}'})", flush=True)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    return failed[0][1] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
