"""The three ISA caps that let one CPU run what an older CPU runs, read and checked before TF loads.

``ONEDNN_MAX_CPU_ISA`` caps oneDNN's JIT code generation, ``XLA_FLAGS=
--xla_cpu_max_isa=…`` caps XLA's CPU backend, and ``TFLAB_WARP_SOFTMAX_ISA``
picks WarpSoftmax's CPU path. oneDNN and XLA ignore an unknown value without
an error, so `read_isa_caps` refuses one (`tflab.errors.UsageError`, one line);
`capped_pass_env` is the environment of ``make test``'s emulated-AVX2 pass.
`tflab.runtime` reports the caps in force (``RuntimeConfig.isa_caps``). This
module imports nothing heavy: the CLI calls it before TensorFlow loads.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

__all__ = ["ONEDNN_ISA_ENV", "WARP_ISA_ENV", "ONEDNN_ISA_VALUES", "XLA_ISA_VALUES", "WARP_SOFTMAX_ISA_FLAGS",
           "CAPPED_PASS_ISA", "IsaCaps", "read_isa_caps", "capped_pass_env", "cpu_flags", "xla_max_isa"]

ONEDNN_ISA_ENV = "ONEDNN_MAX_CPU_ISA"
WARP_ISA_ENV = "TFLAB_WARP_SOFTMAX_ISA"
# oneDNN 3.7's dispatcher-control values (doc/performance_considerations/dispatcher_control.md),
# each with the vector width class it allows: sse4 < avx < avx2 < avx512.
ONEDNN_ISA_VALUES = {
    "SSE41": "sse4", "AVX": "avx", "AVX2": "avx2", "AVX2_VNNI": "avx2", "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512", "AVX512_CORE_VNNI": "avx512", "AVX512_CORE_BF16": "avx512",
    "AVX10_1_512": "avx512", "AVX512_CORE_FP16": "avx512", "AVX10_1_512_AMX": "avx512",
    "AVX512_CORE_AMX": "avx512", "AVX10_1_512_AMX_FP16": "avx512", "AVX512_CORE_AMX_FP16": "avx512",
    "DEFAULT": "avx512",
}
# XLA's --xla_cpu_max_isa values (xla/backends/cpu/codegen/cpu_features.cc); each measured on
# TF 2.21 not to log "Unknown CPU ISA".
XLA_ISA_VALUES = {"SSE4_2": "sse4", "AVX": "avx", "AVX2": "avx2", "AVX512": "avx512",
                  "AVX512_VNNI": "avx512", "AVX512_BF16": "avx512", "AMX": "avx512",
                  "AMX_FP16": "avx512"}
# WarpSoftmax's CPU paths and the /proc/cpuinfo flags each needs (warp_softmax_cpu.cc, Choice).
WARP_SOFTMAX_ISA_FLAGS = {
    "scalar": (), "avx2": ("avx2", "fma", "f16c"),
    "avx512": ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq")}
_WARP_CLASS = {"scalar": "scalar", "avx2": "avx2", "avx512": "avx512"}
_ISA_ORDER = ("scalar", "sse4", "avx", "avx2", "avx512")



def cpu_flags() -> frozenset[str]:
    """Every flag of the first ``flags`` line of /proc/cpuinfo (empty where it is unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _host_class(flags: frozenset[str]) -> str:
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    if "avx" in flags:
        return "avx"
    return "sse4" if "sse4_2" in flags or "sse4_1" in flags else "scalar"


def xla_max_isa(xla_flags: str | None) -> str | None:
    """The value of ``--xla_cpu_max_isa`` in an ``XLA_FLAGS`` string (the last one wins), or None."""
    value = None
    for tok in (xla_flags or "").split():
        if tok.startswith("--xla_cpu_max_isa="):
            value = tok.split("=", 1)[1]
    return value


@dataclasses.dataclass(frozen=True)
class IsaCaps:
    """The ISA caps in force in this process (see the module docstring).

    Attributes:
        onednn: ``ONEDNN_MAX_CPU_ISA`` in oneDNN's spelling (upper case), or None.
        xla: ``--xla_cpu_max_isa`` of ``XLA_FLAGS`` (upper case), or None.
        warp_softmax: ``TFLAB_WARP_SOFTMAX_ISA`` ("scalar", "avx2", "avx512"), or None.
        host: this CPU's vector class: "avx512", "avx2", "avx", "sse4" or "scalar".
        lowers: for each cap that is set, whether it is below this CPU's class (a cap at
            or above it changes nothing), e.g. ``{"onednn": True}``.
    """

    onednn: str | None
    xla: str | None
    warp_softmax: str | None
    host: str
    lowers: dict

    @property
    def any(self) -> bool:
        """Whether any cap is set."""
        return any(v is not None for v in (self.onednn, self.xla, self.warp_softmax))

    def describe(self) -> str:
        """E.g. "oneDNN<=AVX2, XLA<=AVX2 (no effect: this CPU is avx2), WarpSoftmax=avx2", or "none"."""
        parts = []
        for key, label, value, op in (("onednn", "oneDNN", self.onednn, "<="), ("xla", "XLA", self.xla, "<="),
                                      ("warp_softmax", "WarpSoftmax", self.warp_softmax, "=")):
            if value is not None:
                parts.append(f"{label}{op}{value}" + ("" if self.lowers.get(key) else
                                                      f" (no effect: this CPU is {self.host})"))
        return ", ".join(parts) or "none"

    def to_dict(self) -> dict[str, Any]:
        return {"onednn_max_cpu_isa": self.onednn, "xla_cpu_max_isa": self.xla,
                "warp_softmax_isa": self.warp_softmax, "host": self.host, "lowers": dict(self.lowers),
                "summary": self.describe()}


def read_isa_caps(env: Mapping[str, str] | None = None,
                  flags: frozenset[str] | None = None) -> IsaCaps:
    """Reads and checks the three ISA caps; imports nothing heavy.

    Args:
        env: the environment (default ``os.environ``).
        flags: the CPU flags (default: /proc/cpuinfo, `cpu_flags`).

    Returns:
        An `IsaCaps`.

    Raises:
        tflab.errors.UsageError: a cap has a value its reader would ignore (oneDNN and XLA
            ignore an unknown ISA silently), or ``TFLAB_WARP_SOFTMAX_ISA`` names a path this
            CPU lacks. One line naming the variable and the values it takes.

    Example:
        >>> read_isa_caps({"ONEDNN_MAX_CPU_ISA": "avx2"}).onednn
        'AVX2'
    """
    from tflab.errors import UsageError

    env = os.environ if env is None else env
    flags = cpu_flags() if flags is None else flags
    host = _host_class(flags)
    rank = _ISA_ORDER.index

    onednn = env.get(ONEDNN_ISA_ENV)
    if onednn is not None:
        onednn = onednn.strip().upper()
        if onednn not in ONEDNN_ISA_VALUES:
            raise UsageError(f"{ONEDNN_ISA_ENV}={env.get(ONEDNN_ISA_ENV)!r} is not an ISA oneDNN knows "
                             f"(it would ignore it silently); use one of "
                             f"{', '.join(ONEDNN_ISA_VALUES)}, or unset it")
    raw_xla = xla_max_isa(env.get("XLA_FLAGS"))
    xla = None
    if raw_xla is not None:
        xla = raw_xla.strip().upper()
        if xla not in XLA_ISA_VALUES:
            raise UsageError(f"XLA_FLAGS: --xla_cpu_max_isa={raw_xla!r} is not an ISA XLA knows (it "
                             f"would only log 'Unknown CPU ISA' and compile for this CPU); use one of "
                             f"{', '.join(XLA_ISA_VALUES)}, or drop the flag")
    from tflab.process.settings import get as setting

    warp = setting(WARP_ISA_ENV, env) or None
    if warp is not None:
        if warp not in WARP_SOFTMAX_ISA_FLAGS:
            raise UsageError(f"{WARP_ISA_ENV}={warp} is not a CPU path; use scalar, avx2 or avx512, "
                             f"or unset it")
        missing = [f for f in WARP_SOFTMAX_ISA_FLAGS[warp] if f not in flags]
        if missing and flags:
            raise UsageError(f"{WARP_ISA_ENV}={warp}: this CPU lacks {', '.join(missing)}; use "
                             f"{'avx2 or ' if warp == 'avx512' and 'avx2' in flags else ''}scalar, "
                             f"or unset it")
    lowers = {}
    if onednn is not None:
        lowers["onednn"] = rank(ONEDNN_ISA_VALUES[onednn]) < rank(host) and onednn != "DEFAULT"
    if xla is not None:
        lowers["xla"] = rank(XLA_ISA_VALUES[xla]) < rank(host)
    if warp is not None:
        lowers["warp_softmax"] = rank(_WARP_CLASS[warp]) < rank(host)
    return IsaCaps(onednn=onednn, xla=xla, warp_softmax=warp, host=host, lowers=lowers)


CAPPED_PASS_ISA = {ONEDNN_ISA_ENV: "AVX2", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2", WARP_ISA_ENV: "avx2"}


def capped_pass_env(flags: frozenset[str] | None = None,
                    env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of `make test`'s emulated-AVX2 pass: each cap that lowers this CPU.

    A cap at or above this CPU changes nothing, so it is left out; on an AVX2-only
    CPU the result is empty and the pass would repeat the oneDNN-on pass. An
    ``XLA_FLAGS`` already set keeps its other flags.

    Args:
        flags: the CPU flags (default: /proc/cpuinfo).
        env: the environment to extend (default ``os.environ``).

    Returns:
        ``{variable: value}``, e.g. ``{"ONEDNN_MAX_CPU_ISA": "AVX2", "XLA_FLAGS":
        "--xla_cpu_max_isa=AVX2", "TFLAB_WARP_SOFTMAX_ISA": "avx2"}`` on an AVX-512 CPU.
    """
    env = os.environ if env is None else env
    flags = cpu_flags() if flags is None else flags
    if _ISA_ORDER.index(_host_class(flags)) <= _ISA_ORDER.index("avx2"):
        return {}
    out = dict(CAPPED_PASS_ISA)
    if env.get("XLA_FLAGS"):
        out["XLA_FLAGS"] = env["XLA_FLAGS"] + " " + out["XLA_FLAGS"]
    return out
