"""bfloat16 kernels tried in a child before a mixed_bfloat16 run, where oneDNN's ISA is capped (`check_bfloat16_kernels`).

TF 2.21 sends bfloat16 ``MatMul`` and ``Conv2D`` to its oneDNN kernels when oneDNN
is on and the CPU itself has AVX512F or AVX_NE_CONVERT
(``IsBF16SupportedByOneDNNOnThisCPU`` in ``tensorflow/core/util/util.cc`` and
``tensorflow/core/graph/mkl_graph_util.h`` ask the CPU), and never asks ``ONEDNN_MAX_CPU_ISA``.
Capped at AVX2 on such a CPU (what ``make test``'s third pass does to emulate an
AVX2 machine, or a user pinning oneDNN's code generation), oneDNN has no
bfloat16 primitive to give: measured on an AMD EPYC with AVX512_BF16, a bfloat16
``tf.matmul`` ends the process with SIGSEGV and ``tf.nn.conv2d`` raises
``AbortedError: could not create a primitive descriptor``. A real AVX2 CPU never
gets there (TF keeps bfloat16 on Eigen), so the crash belongs to the cap.

A child that runs both ops under the same environment answers first, once per
process; only when oneDNN is on and ``ONEDNN_MAX_CPU_ISA`` is set (otherwise no
child). When it fails, the candidate fixes are run the same way, in children,
and the message names the first that worked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

# The two op kinds mixed_bfloat16 puts on the CPU's matrix units, in bfloat16.
_PROBE = ("import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3'); import tensorflow as tf; "
          "b = tf.ones([8, 8], tf.bfloat16); tf.matmul(b, b).numpy(); "
          "tf.nn.conv2d(tf.ones([1, 8, 8, 8], tf.bfloat16), tf.ones([3, 3, 8, 8], tf.bfloat16), 1, 'SAME').numpy()")

# (what to change, the environment entries it sets; None removes the variable)
FIXES = (
    ("TF_ENABLE_ONEDNN_OPTS=0 (TF's Eigen kernels run bfloat16)", {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    ("unset ONEDNN_MAX_CPU_ISA", {"ONEDNN_MAX_CPU_ISA": None}),
)

_ANSWERS: dict[tuple[str, str], str | None] = {}  # (ONEDNN_MAX_CPU_ISA, TF_ENABLE_ONEDNN_OPTS) -> failure or None


def _run_probe(env: dict[str, str], timeout: float) -> str | None:
    """None when both ops ran in a child under ``env``; else how the child failed, in a few words."""
    from tflab.process.group import start_tied

    try:  # tied: it dies with this process (else a SIGKILLed tflab would leave it running)
        p = start_tied([sys.executable, "-c", _PROBE], waits=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL)
    except OSError:
        return None  # no child to ask: let the run itself decide
    try:
        _, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return f"a child running them did not finish in {timeout:.0f} s"
    if p.returncode == 0:
        return None
    if p.returncode < 0:
        try:
            name = signal.Signals(-p.returncode).name
        except ValueError:
            name = f"signal {-p.returncode}"
        return f"a child running a bfloat16 tf.matmul and tf.nn.conv2d died with {name}"
    last = [ln.strip() for ln in stderr.splitlines() if ln.strip()][-1:] or [f"exit {p.returncode}"]
    return f"a child running a bfloat16 tf.matmul and tf.nn.conv2d failed: {last[0][:200]}"


def bfloat16_failure(timeout: float = 300.0, ask_tf: bool = True) -> str | None:
    """Why bfloat16 MatMul/Conv2D cannot run in this process's configuration, measured once; None when they can.

    No child is started (None) unless TF's oneDNN kernels are on here and ``ONEDNN_MAX_CPU_ISA``
    is set: only the cap makes the two disagree (see the module docstring).

    Args:
        timeout: seconds each child may take.
        ask_tf: ask this process's TF whether oneDNN is on (it imports TF); False leaves that to
            the child (the ``tflab`` supervisor, which has no TF, after its child crashed).

    Returns:
        One sentence: the configuration, what the child did, and the first fix of `FIXES` that
        let the same child run (or that none did); None when nothing is wrong.
    """
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip()
    if not cap:
        return None
    if ask_tf:
        from tflab._tf.runtime import onednn_enabled

        if not onednn_enabled():
            return None
    key = (cap, os.environ.get("TF_ENABLE_ONEDNN_OPTS", ""))
    if key not in _ANSWERS:
        failed = _run_probe(dict(os.environ), timeout)
        if failed is not None:
            worked = None
            for what, change in FIXES:
                env = {k: v for k, v in os.environ.items() if change.get(k, "") is not None}
                env.update({k: v for k, v in change.items() if v is not None})
                if _run_probe(env, timeout) is None:
                    worked = what
                    break
            fix = (f"set {worked} (checked: the same child ran both ops so)" if worked else
                   f"none of {', '.join(w for w, _ in FIXES)} let the same child run them either")
            failed = (f"bfloat16 kernels do not run with TF's oneDNN on and ONEDNN_MAX_CPU_ISA={cap}: {failed} "
                      f"(TF picks oneDNN for bfloat16 by this CPU's own features, and oneDNN capped at {cap} "
                      f"has no bfloat16 primitive); {fix}")
        _ANSWERS[key] = failed
    return _ANSWERS[key]


def check_bfloat16_kernels(timeout: float = 300.0, instead: str = "or leave mixed_bfloat16 out") -> None:
    """Before the first bfloat16 run in this process: `bfloat16_failure`, raised as one `UsageError`.

    Args:
        timeout: seconds each child may take.
        instead: the other way out, for the caller's own terms (appended to the message).

    Raises:
        tflab.errors.UsageError: bfloat16 MatMul/Conv2D crash or fail here (a child measured it);
            the message names the first fix that let the child run them.
    """
    failure = bfloat16_failure(timeout)
    if failure is not None:
        from tflab.errors import UsageError

        raise UsageError(f"{failure}, {instead}" if instead else failure)
