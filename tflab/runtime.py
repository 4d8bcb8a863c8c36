"""The runtime configuration a measurement ran on: TF build, CPU ISA, oneDNN, XLA, allocator.

One TF 2.21 wheel runs different kernels on different x86-64 CPUs, so every
measured claim in tflab names the configuration it was measured on. The two
switches that change numbers are:

* **oneDNN.** TF's oneDNN CPU kernels (MatMul, Softmax, Conv2D, ...) are on by
  default, on Linux, only on CPUs with AVX-512 VNNI, AVX-512 BF16, AVX-VNNI or
  AMX; elsewhere TF runs its Eigen kernels. ``TF_ENABLE_ONEDNN_OPTS=0/1``
  (also ``false/true``, any case) forces the choice; any other value is ignored
  with a warning. TF reads the variable once, when its libraries load (the
  allocator registry asks ``IsMKLEnabled()`` in a static initializer), so
  changing ``os.environ`` after ``import tensorflow`` has no effect.
  Source: ``tensorflow/core/util/port.cc`` (``DefaultOneDnnPolicy``,
  ``IsMklEnabled``) and ``tensorflow/core/util/env_var.cc``
  (``ReadBoolFromEnvVar``); TF logs "oneDNN custom operations are on" when on.
* **XLA.** XLA's CPU backend compiles for the host CPU's ISA (``XLA_FLAGS``,
  e.g. ``--xla_cpu_max_isa=AVX2``, can cap it).

Three ISA caps let one CPU run what an older CPU runs (`read_isa_caps`):
``ONEDNN_MAX_CPU_ISA`` caps oneDNN's JIT code generation (measured on TF 2.21,
which bundles oneDNN 3.7: with ``ONEDNN_VERBOSE=1`` and ``=SSE41`` on an
AVX2 CPU, softmax runs ``jit:sse41`` instead of ``jit:avx2``; any case is
accepted; an unknown value is ignored without a word), ``XLA_FLAGS=
--xla_cpu_max_isa=AVX2`` caps XLA (an unknown value only logs "Unknown CPU
ISA" and is ignored; ``xla/backends/cpu/codegen/cpu_features.cc``), and
``TFLAB_WARP_SOFTMAX_ISA`` picks WarpSoftmax's CPU path. Since two of the
three ignore a bad value silently, tflab refuses one: `read_isa_caps` raises
`tflab.errors.UsageError`, and every CLI verb exits 2 with that one line.

The CPU allocator also changes timings: ``TF_CPU_ALLOCATOR_USE_BFC=1`` selects
the BFC allocator; otherwise TF takes the highest-priority registered
allocator, ``MklCPUAllocator`` (priority 200) when oneDNN is on and the
malloc-based ``DefaultCPUAllocator`` (100) when it is off
(``tensorflow/core/common_runtime/process_state.cc``,
``threadpool_device.cc`` ``REGISTER_MEM_ALLOCATOR``).

`runtime_config()` reads all of this without running any op: it imports TF
(once per process, as any tflab call does) and asks
``tensorflow.python.util._pywrap_util_port.IsMklEnabled()`` (through
`tflab._tf.runtime.onednn_enabled`), the same function TF's kernels ask. The
caps themselves are read and checked in `tflab.isa_caps`.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from typing import Any, Mapping

from tflab.isa_caps import ONEDNN_ISA_ENV, WARP_ISA_ENV, capped_pass_env, read_isa_caps

# ISA flags that matter for TF's CPU kernels and XLA's CPU code generation, as
# Linux names them in /proc/cpuinfo.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16",
             "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")

# The flags whose presence turns oneDNN on by default on Linux x86-64
# (tensorflow/core/util/port.cc, DefaultOneDnnPolicy).
ONEDNN_DEFAULT_ON_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                           "amx_bf16")

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
BFC_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


def parse_env_bool(value: str | None) -> bool | None:
    """Parses an environment value the way TF's ``ReadBoolFromEnvVar`` does.

    Args:
        value: the raw value, or None when the variable is unset.

    Returns:
        True for "1"/"true", False for "0"/"false" (any case), None when the
        value is unset or anything else (TF then keeps its default and, for a
        set-but-invalid value, logs a warning).

    Example:
        >>> parse_env_bool("TRUE"), parse_env_bool("0"), parse_env_bool("yes")
        (True, False, None)
    """
    if value is None:
        return None
    v = value.lower()
    if v in ("1", "true"):
        return True
    if v in ("0", "false"):
        return False
    return None


def read_cpuinfo(text: str) -> tuple[str, str, dict[str, bool]]:
    """Reads the CPU model, vendor and the `ISA_FLAGS` from /proc/cpuinfo text.

    Args:
        text: the contents of /proc/cpuinfo (Linux); only the first processor
            block is read (all cores of one machine report the same flags).

    Returns:
        ``(model, vendor, isa)``: the "model name" line ("" if absent), the
        "vendor_id" ("" if absent), and ``{flag: present}`` for every name in
        `ISA_FLAGS`.

    Example:
        >>> read_cpuinfo("vendor_id : AuthenticAMD\\nmodel name : AMD EPYC 9R14\\n"
        ...              "flags : sse4_2 avx avx2 fma avx512f avx512_vnni\\n")[2]["avx512_vnni"]
        True
    """
    model = vendor = ""
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if model and flags:
                break  # end of the first processor block
            continue
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model, vendor, {f: f in flags for f in ISA_FLAGS}


def onednn_default_for(isa: Mapping[str, bool], system: str = "Linux") -> bool:
    """TF 2.21's default oneDNN choice for a CPU, without the environment variable.

    Args:
        isa: ``{flag: present}`` as from `read_cpuinfo`.
        system: ``platform.system()``; TF turns oneDNN on by default only on
            Linux (off on Windows; macOS and aarch64 wheels are built otherwise).

    Returns:
        True when any of `ONEDNN_DEFAULT_ON_FLAGS` is present on Linux.
    """
    return system == "Linux" and any(isa.get(f, False) for f in ONEDNN_DEFAULT_ON_FLAGS)


def explain_onednn(env_value: str | None, isa: Mapping[str, bool],
                   system: str = "Linux") -> tuple[bool, str]:
    """Predicts TF's oneDNN decision and says why, from the environment and the CPU.

    Args:
        env_value: the raw ``TF_ENABLE_ONEDNN_OPTS`` value, None when unset.
        isa: ``{flag: present}`` as from `read_cpuinfo`.
        system: ``platform.system()``.

    Returns:
        ``(enabled, reason)``: what ``IsMklEnabled()`` returns under that
        environment on that CPU, and one phrase saying why.

    Example:
        >>> explain_onednn("0", {"avx512_vnni": True})
        (False, 'TF_ENABLE_ONEDNN_OPTS=0')
        >>> explain_onednn(None, {"avx2": True})[1]
        'TF default for this CPU: no AVX-512 VNNI/BF16, AVX-VNNI or AMX'
    """
    default = onednn_default_for(isa, system)
    have = [f for f in ONEDNN_DEFAULT_ON_FLAGS if isa.get(f, False)]
    if system != "Linux":
        why_default = f"TF default on {system or 'this OS'}: off"
    elif default:
        why_default = "TF default for this CPU: has " + ", ".join(have)
    else:
        why_default = "TF default for this CPU: no AVX-512 VNNI/BF16, AVX-VNNI or AMX"
    forced = parse_env_bool(env_value)
    if forced is not None:
        return forced, f"{ONEDNN_ENV}={env_value}"
    if env_value is not None:
        return default, (f"{ONEDNN_ENV}={env_value!r} is not 0/1/true/false, so TF ignores it; "
                         + why_default)
    return default, why_default


def isa_summary(isa: Mapping[str, bool]) -> str:
    """A short ISA tag such as ``avx512f+vnni+bf16``, ``avx2+fma`` or ``sse4.2``.

    Args:
        isa: ``{flag: present}`` as from `read_cpuinfo`.

    Returns:
        The widest vector ISA with its ML extensions, or ``"isa unknown"``
        when no flag is known (non-Linux hosts).
    """
    if isa.get("avx512f"):
        tag = "avx512f" + "".join(f"+{s}" for f, s in (("avx512_vnni", "vnni"),
                                                       ("avx512_bf16", "bf16"))
                                  if isa.get(f))
    elif isa.get("avx2"):
        tag = "avx2" + ("+fma" if isa.get("fma") else "") + ("+avx_vnni" if isa.get("avx_vnni")
                                                              else "")
    elif isa.get("avx"):
        tag = "avx"
    elif isa.get("sse4_2"):
        tag = "sse4.2"
    else:
        return "isa unknown"
    if isa.get("amx_tile"):
        tag += "+amx"
    return tag



@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """The configuration a tflab measurement ran on (see the module docstring).

    Attributes:
        tf_version: ``tf.version.VERSION``, e.g. "2.21.0".
        tf_git_version: ``tf.version.GIT_VERSION``.
        build: CUDA/cuDNN entries of ``tf.sysconfig.get_build_info()``
            (``is_cuda_build``, ``cuda_version``, ``cudnn_version``, ...).
        python_version: ``platform.python_version()``.
        platform: ``platform.platform()`` (OS, kernel, libc).
        machine: ``platform.machine()``, e.g. "x86_64".
        cpu_model: the "model name" of /proc/cpuinfo (``platform.processor()``
            elsewhere).
        cpu_vendor: "GenuineIntel", "AuthenticAMD", or "".
        isa: ``{flag: present}`` for `ISA_FLAGS`; all False where unknown.
        schedulable_cpus: CPUs this process may run on
            (``os.sched_getaffinity``), what TF's thread pools size to.
        onednn_enabled: whether TF's oneDNN CPU kernels are on in this
            process (``_pywrap_util_port.IsMklEnabled()``).
        onednn_reason: why: the environment variable, or TF's default for
            this CPU and the flags that decide it.
        onednn_env: the raw ``TF_ENABLE_ONEDNN_OPTS`` value, None if unset.
        onednn_default: TF's default for this CPU without the variable.
        xla_flags: the user's ``XLA_FLAGS``, None if unset (tflab's own dump flags left out:
            `tflab_xla_flags`).
        tf_xla_flags: ``TF_XLA_FLAGS``, None if unset.
        cpu_allocator: "BFC", "MklCPUAllocator" or "DefaultCPUAllocator (malloc)".
        cpu_allocator_reason: the variable or default that chose it.
        intra_op_threads: ``tf.config.threading`` value; 0 means TF's default
            (``TF_NUM_INTRAOP_THREADS`` if set, else `schedulable_cpus`).
        inter_op_threads: likewise for inter-op (``TF_NUM_INTEROP_THREADS``).
        gpus: visible GPUs, e.g. ``("GPU:0 NVIDIA H200 (cc 9.0)",)``; empty on CPU.
        isa_caps: `IsaCaps.to_dict` of the caps in force (``ONEDNN_MAX_CPU_ISA``,
            ``--xla_cpu_max_isa``, ``TFLAB_WARP_SOFTMAX_ISA``) and whether each lowers
            anything on this CPU.
    """

    tf_version: str
    tf_git_version: str
    build: dict
    python_version: str
    platform: str
    machine: str
    cpu_model: str
    cpu_vendor: str
    isa: dict
    schedulable_cpus: int
    onednn_enabled: bool
    onednn_reason: str
    onednn_env: str | None
    onednn_default: bool
    xla_flags: str | None
    tf_xla_flags: str | None
    cpu_allocator: str
    cpu_allocator_reason: str
    intra_op_threads: int
    inter_op_threads: int
    gpus: tuple
    isa_caps: dict = dataclasses.field(default_factory=dict)
    tflab_xla_flags: str | None = None  # XLA_FLAGS words tflab added for its own dump folder (removed after)

    @property
    def isa_summary(self) -> str:
        """The short ISA tag, e.g. "avx512f+vnni+bf16" (see `isa_summary`)."""
        return isa_summary(self.isa)

    @property
    def onednn_label(self) -> str:
        """"oneDNN on" or "Eigen (oneDNN off)": the TF CPU kernel path, for speed baselines."""
        return "oneDNN on" if self.onednn_enabled else "Eigen (oneDNN off)"

    @property
    def key(self) -> str:
        """The configuration key used in README tables: "<isa>, oneDNN on|off"."""
        return f"{self.isa_summary}, oneDNN {'on' if self.onednn_enabled else 'off'}"

    def to_dict(self) -> dict[str, Any]:
        """All fields as JSON types, plus ``isa_summary`` and ``one_line``."""
        d = dataclasses.asdict(self)
        d["gpus"] = list(self.gpus)
        d["isa_summary"] = self.isa_summary
        d["one_line"] = self.one_line()
        return d

    def one_line(self) -> str:
        """One line naming the configuration, printed at the top of reports.

        Example:
            "TF 2.21.0 · Python 3.11.7 · Intel(R) Xeon(R) Processor · avx512f+vnni+bf16 ·
            oneDNN on (TF default for this CPU) · XLA_FLAGS unset · allocator MklCPUAllocator"
        """
        if self.onednn_reason.startswith("TF read"):
            why = "as TF read it at load"
        elif parse_env_bool(self.onednn_env) is not None:
            why = f"{ONEDNN_ENV}={self.onednn_env}"
        elif self.onednn_env is not None:
            why = f"TF default for this CPU; {ONEDNN_ENV}={self.onednn_env!r} ignored"
        else:
            why = "TF default for this CPU"
        parts = [f"TF {self.tf_version}", f"Python {self.python_version}",
                 self.cpu_model or self.machine or "unknown CPU", self.isa_summary,
                 f"oneDNN {'on' if self.onednn_enabled else 'off'} ({why})",
                 f"XLA_FLAGS {self.xla_flags!r}" if self.xla_flags else "XLA_FLAGS unset",
                 f"allocator {self.cpu_allocator}"]
        if self.tflab_xla_flags:
            parts.append(f"tflab's own XLA dump flags {self.tflab_xla_flags!r} (a temporary folder, removed)")
        if self.isa_caps.get("summary", "none") != "none":
            parts.append(f"ISA caps {self.isa_caps['summary']}")
        if self.gpus:
            parts.append(f"{len(self.gpus)} GPU" + ("s" if len(self.gpus) > 1 else ""))
        return " · ".join(parts)

    def to_text(self) -> str:
        """A readable multi-line report (what ``tflab env`` prints)."""
        flags = " ".join(f for f in ISA_FLAGS if self.isa.get(f)) or "unknown"
        build = ", ".join(f"{k} {v}" for k, v in self.build.items()) or "no GPU build info"
        threads = (f"intra-op {self.intra_op_threads or 'default'}, "
                   f"inter-op {self.inter_op_threads or 'default'} "
                   f"(0/default = TF picks, sized to {self.schedulable_cpus} schedulable CPUs)")
        rows = [
            ("TensorFlow", f"{self.tf_version} ({self.tf_git_version})"),
            ("build", build),
            ("Python", f"{self.python_version} on {self.platform}"),
            ("CPU", f"{self.cpu_model or 'unknown'} [{self.cpu_vendor or self.machine}]"),
            ("ISA", f"{self.isa_summary}  (flags: {flags})"),
            ("oneDNN", f"{'on' if self.onednn_enabled else 'off'}: {self.onednn_reason}"),
            ("XLA_FLAGS", self.xla_flags if self.xla_flags else "unset"),
            ("TF_XLA_FLAGS", self.tf_xla_flags if self.tf_xla_flags else "unset"),
            ("ISA caps", self.isa_caps.get("summary", "none") + (
                "" if self.isa_caps.get("summary", "none") != "none" else
                f"  ({ONEDNN_ISA_ENV}, XLA_FLAGS=--xla_cpu_max_isa=, {WARP_ISA_ENV} cap them)")),
            ("CPU allocator", f"{self.cpu_allocator} ({self.cpu_allocator_reason})"),
            ("threads", threads),
            ("GPUs", ", ".join(self.gpus) if self.gpus else "none visible"),
        ]
        from tflab.report.text import table

        return table(rows, align="<<")

    def __repr__(self) -> str:
        return f"RuntimeConfig({self.one_line()!r})"


def _cpu() -> tuple[str, str, dict[str, bool]]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return read_cpuinfo(f.read())
    except OSError:
        return platform.processor(), "", {f: False for f in ISA_FLAGS}


def _schedulable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _allocator(onednn_enabled: bool) -> tuple[str, str]:
    from tflab.process.settings import get

    raw = os.environ.get(BFC_ENV)
    if parse_env_bool(raw) and get("TFLAB_CPU_ALLOCATOR_SET") == "1":
        mine = "MklCPUAllocator" if onednn_enabled else "DefaultCPUAllocator (malloc)"
        return "BFC", (f"{BFC_ENV}={raw} set by tflab for its verb's processes; TF's default, in your own "
                       f"processes: {mine}")
    if parse_env_bool(raw):
        return "BFC", f"{BFC_ENV}={raw}"
    base = "MklCPUAllocator" if onednn_enabled else "DefaultCPUAllocator (malloc)"
    why = "TF default with oneDNN " + ("on" if onednn_enabled else "off")
    if raw is not None and parse_env_bool(raw) is None:
        # TF reads 0/1/true/false only and keeps its default for anything else: the user asked for an
        # allocator and runs another (a verb's processes too: tflab does not override a value the user set).
        why = f"{BFC_ENV}={raw!r} is not 0/1/true/false, so TF ignores it; " + why
    elif raw is not None:
        why = f"{BFC_ENV}={raw}; " + why
    return base, why


def _gpus(tf) -> tuple[str, ...]:
    out = []
    for dev in tf.config.list_physical_devices("GPU"):
        label = dev.name.replace("/physical_device:", "")
        try:
            details = tf.config.experimental.get_device_details(dev)
        except Exception:  # noqa: BLE001 - details are best effort
            details = {}
        name = details.get("device_name")
        cc = details.get("compute_capability")
        if name:
            label += f" {name}"
        if cc:
            label += f" (cc {cc[0]}.{cc[1]})"
        out.append(label)
    return tuple(out)


def runtime_config() -> RuntimeConfig:
    """Reads the configuration this process runs TF on; runs no op.

    Imports TensorFlow if it is not imported yet (TF reads
    ``TF_ENABLE_ONEDNN_OPTS`` then, once per process), reads /proc/cpuinfo, the
    environment, ``tf.sysconfig.get_build_info()``, ``tf.config.threading`` and
    ``tf.config.list_physical_devices("GPU")``.

    Returns:
        A frozen `RuntimeConfig`; ``.one_line()``, ``.to_text()``, ``.to_dict()``.

    Raises:
        ImportError: TensorFlow is not installed.
        tflab.errors.UsageError: an ISA cap has a value that would be ignored (`read_isa_caps`).

    Example:
        >>> cfg = tflab.runtime_config()
        >>> cfg.onednn_enabled, cfg.onednn_reason
        (True, 'TF default for this CPU: has avx512_vnni, avx512_bf16, avx_vnni')
    """
    caps = read_isa_caps()  # a bad cap is one UsageError before TF loads
    import tensorflow as tf

    from tflab._tf.runtime import onednn_enabled

    system = platform.system()
    model, vendor, isa = _cpu()
    env = os.environ.get(ONEDNN_ENV)
    enabled = onednn_enabled()
    predicted, reason = explain_onednn(env, isa, system)
    if enabled != predicted:
        # TF read the variable when it loaded; the environment changed since,
        # or the CPU probe (cpuid in TF, /proc/cpuinfo here) disagrees.
        reason = (f"TF read its environment when it loaded; {ONEDNN_ENV} is now "
                  f"{env if env is not None else 'unset'}, which would give "
                  f"{'on' if predicted else 'off'}")
    build_info = dict(tf.sysconfig.get_build_info())
    build = {k: build_info[k] for k in sorted(build_info)
             if k.startswith(("is_cuda", "is_rocm", "cuda", "cudnn", "is_tensorrt"))}
    allocator, allocator_reason = _allocator(enabled)
    from tflab.process.xla_probe import split_own_flags

    user_flags, own_flags = split_own_flags(os.environ.get("XLA_FLAGS"))  # the user's, tflab's dump apart
    return RuntimeConfig(
        tf_version=tf.version.VERSION,
        tf_git_version=tf.version.GIT_VERSION,
        build=build,
        python_version=platform.python_version(),
        platform=platform.platform(),
        machine=platform.machine(),
        cpu_model=model,
        cpu_vendor=vendor,
        isa=isa,
        schedulable_cpus=_schedulable_cpus(),
        onednn_enabled=enabled,
        onednn_reason=reason,
        onednn_env=env,
        onednn_default=onednn_default_for(isa, system),
        xla_flags=user_flags,
        tflab_xla_flags=own_flags,
        tf_xla_flags=os.environ.get("TF_XLA_FLAGS"),
        cpu_allocator=allocator,
        cpu_allocator_reason=allocator_reason,
        intra_op_threads=int(tf.config.threading.get_intra_op_parallelism_threads()),
        inter_op_threads=int(tf.config.threading.get_inter_op_parallelism_threads()),
        gpus=_gpus(tf),
        isa_caps=caps.to_dict(),
    )


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--capped-env"]:  # the Makefile's emulated-AVX2 pass; no TF import
        import shlex

        print(" ".join(f"{k}={shlex.quote(v)}" for k, v in capped_pass_env().items()))
        sys.exit(0)
    print(runtime_config().to_text())
    sys.exit(0)
