"""Which compiler transformation made a traced mode differ from eager: one setting changed at a time.

When XLA's outputs or gradients differ from eager's beyond the comparison's
bound, the comparison's forward+backward step is saved (a SavedModel signature,
the variables as they were before the comparison) with the inputs, and run
again in child processes (``tflab/modes/_bisect_child.py``), each with ONE
setting changed. XLA reads ``XLA_FLAGS`` once per process
(``xla/debug_options_flags.cc``), so each setting costs one TF import.

1. **Baseline**: the user's ``XLA_FLAGS`` plus XLA's dump of every pass that
   changed the module (``--xla_dump_hlo_pass_re=.*``). Its outputs must equal
   this process's XLA outputs bit for bit, or nothing is bisected. Its dump
   gives the candidates and the machine code (`tflab.lowering.dump.read_dump`).
2. **Flags**, measured to exist in TF 2.21's XLA (an unknown flag stops the
   process: ``parse_flags_from_env.cc``): where the dumped machine code holds
   fused multiply-add instructions (``vfmadd…``/``vfmsub…``), the ISA cap
   ``--xla_cpu_max_isa=AVX`` (AVX has no FMA3: LLVM cannot contract a multiply
   and an add into one rounding); the user's own fast-math flags flipped back
   (``--xla_cpu_enable_fast_math``, ``--xla_cpu_fast_math_honor_*``,
   ``--xla_cpu_enable_fast_min_max``).
3. **HLO passes**, one ``--xla_disable_hlo_passes=NAME`` at a time, for each
   pass the dump shows changed the module (layout, copy and scheduling passes
   left out: they move no arithmetic).

The first setting under which the step's outputs and gradients equal eager's
(`tflab.fix.values_match`, the comparison's ULP bound, against the eager values
recorded before any change) names the transformation. The total time is bounded:
past ``budget_s`` the bisection stops and says what it did not try.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["Trial", "Bisection", "SavedStep", "bisect_xla", "FMA_RE", "fma_sites", "fusion_sites", "FmaSite", "CHILD_TIMEOUT_S",
           "DEFAULT_BUDGET_S"]

_CHILD = Path(__file__).with_name("_bisect_child.py")
CHILD_TIMEOUT_S = 60.0
DEFAULT_BUDGET_S = 120.0
TEMP_PREFIX = "tflab_bisect_"
#: x86 fused multiply-add mnemonics (FMA3, AVX-512): one rounding for ``a*b ± c``.
FMA_RE = re.compile(r"\bvf(?:n)?m(?:add|sub|addsub|subadd)(?:132|213|231)(?:ss|sd|ps|pd|sh|ph)\b")
# Passes that move layouts, copies or the schedule, not arithmetic: never candidates.
_STRUCTURAL = ("layout", "copy", "sharding", "call-graph", "sub-byte", "scheduler", "schedule", "verifier",
               "pipeline-start", "canonicalizer", "dce", "cse", "tuple", "wrapper", "annotat", "metadata",
               "dynamic-dimension", "normalizer", "while-loop-hoisting", "decomposer")
_PASS_FILE_RE = re.compile(r"\.\d{4}\.([^.]+)\.after_([\w-]+)\.before_[\w-]+\.txt$")
# The user's fast-math flags and the value that undoes each (xla/debug_options_flags.cc defaults).
_UNDO_FLAGS = {"xla_cpu_enable_fast_math": "false", "xla_cpu_fast_math_honor_nans": "true",
               "xla_cpu_fast_math_honor_infs": "true", "xla_cpu_fast_math_honor_division": "true",
               "xla_cpu_fast_math_honor_functions": "true", "xla_cpu_enable_fast_min_max": "false"}


@dataclasses.dataclass
class Trial:
    """One run of the step under one changed setting.

    Attributes:
        kind: ``"flag"``, ``"pass"``, ``"optimizer"`` or ``"onednn"``.
        setting: what was changed (``--xla_cpu_max_isa=AVX``, ``fusion``, ``remapping``).
        what: the setting in words.
        restored: True when the outputs and gradients equal eager's within the bound; None when it could not run.
        check: the `tflab.fix.ValuesCheck` against eager's recorded values, or None.
        error: why it could not run, or "".
        seconds: wall time of this setting's run.
    """

    kind: str
    setting: str
    what: str
    restored: bool | None = None
    check: Any = None
    error: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"kind": self.kind, "setting": self.setting, "what": self.what, "restored": self.restored,
                "check": self.check.text if self.check is not None else "", "error": self.error,
                "seconds": round(self.seconds, 3)}


@dataclasses.dataclass
class Bisection:
    """What a bisection of one mode tried and found.

    Attributes:
        mode: ``"xla"`` or ``"graph"``.
        trials: every setting tried, in order.
        found: the first `Trial` that restored eager's values, or None.
        why_not: why nothing was named (``"not bisected: …"``), or "".
        fusion: the fusion holding the instruction where it acted, or "".
        instruction: that instruction's machine-code line (``vfmsub213ss %xmm1,%xmm0,%xmm2``), or "".
        hlo: the HLO instructions it came from (``multiply %mul.0 -> add %add_1.0``), or "".
        tf_ops: the TF op names of those HLO instructions.
        seconds: the bisection's wall time.
        sites: every `FmaSite` of the baseline's code (the caller picks one by measurement).
    """

    mode: str
    trials: list = dataclasses.field(default_factory=list)
    found: Trial | None = None
    why_not: str = ""
    fusion: str = ""
    instruction: str = ""
    hlo: str = ""
    tf_ops: tuple = ()
    seconds: float = 0.0
    sites: list = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "trials": [t.to_dict() for t in self.trials],
                "found": self.found.to_dict() if self.found else None, "why_not": self.why_not,
                "fusion": self.fusion, "instruction": self.instruction, "hlo": self.hlo,
                "tf_ops": list(self.tf_ops), "seconds": round(self.seconds, 3),
                "sites": [dataclasses.asdict(x) for x in self.sites]}


class SavedStep:
    """The comparison's forward+backward step saved once, run in children under one setting each.

    Args:
        step: the step (``srcs -> (outputs, grads)``) as `tflab.modes.api` builds it.
        sources: the flat input tensors.
        grad_names: called once the step is traced: the name of each gradient it returns, in
            order (``arg:x``, ``var:NAME``; the order of a tape's watched variables is the
            trace's own, so gradients are matched by name, never by position).

    Use as a context manager: the private temporary folder is removed on exit.
    """

    def __init__(self, step, sources, grad_names=None) -> None:
        self.step, self.sources = step, list(sources)
        self._grad_names_fn = grad_names
        self.grad_names: list = []
        self.tmp: Path | None = None
        self.error = ""
        self.runs = 0
        self._forks = None  # a tflab.process.forks.ForkServer, started by the first run that can fork
        self._forks_env: dict = {}  # its environment (the first such run's, XLA_FLAGS left out)

    def __enter__(self) -> "SavedStep":
        import numpy as np
        import tensorflow as tf

        from tflab._io.paths import owned_temp_dir

        self.tmp = owned_temp_dir(TEMP_PREFIX)
        step = self.step
        specs = [tf.TensorSpec(s.shape, s.dtype, name=f"s{i}") for i, s in enumerate(self.sources)]

        def flat(*xs):
            outputs, grads = step(list(xs))
            out = {f"o{i:04d}": tf.convert_to_tensor(o) for i, o in enumerate(tf.nest.flatten(outputs))}
            out.update({f"g{i:04d}": tf.convert_to_tensor(g) for i, g in enumerate(grads) if g is not None})
            return out

        try:
            concrete = tf.function(flat, input_signature=specs).get_concrete_function()
            self.grad_names = list(self._grad_names_fn()) if self._grad_names_fn is not None else []
            holder = tf.Module()
            holder.captured = list(concrete.graph.variables)
            tf.saved_model.save(holder, str(self.tmp / "saved_model"), signatures={"step": concrete},
                                options=tf.saved_model.SaveOptions(experimental_skip_saver=True))
            np.savez(self.tmp / "inputs.npz", **{f"s{i}": s.numpy() for i, s in enumerate(self.sources)})
        except Exception as e:  # a capture a SavedModel cannot hold (a lookup table, a py_function)
            self.error = f"the step could not be saved for a child process: {type(e).__name__}: {str(e)[:200]}"
        return self

    def __exit__(self, *exc) -> None:
        if self._forks is not None:
            self._forks.kill()  # idle: every run waited for its child
            self._forks = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _forked(self, args: list[str], env: dict, stderr):
        """The run's child forked from a server that imported TF once, or None: start a fresh process.

        Only where the run's environment differs from the server's (the first forked run's, with
        ``XLA_FLAGS`` left out) in ``XLA_FLAGS`` alone: XLA reads it at its first compile, which
        happens in the child; a variable TF reads when it loads (``TF_ENABLE_ONEDNN_OPTS``, the ISA
        caps) needs a fresh process. Linux only; ``TFLAB_FORK_WORKERS=0`` turns it off.
        """
        from tflab.process.settings import get as setting

        base = {k: v for k, v in env.items() if k != "XLA_FLAGS"}
        if not sys.platform.startswith("linux") or setting("TFLAB_FORK_WORKERS") == "0":
            return None
        from tflab.process.forks import ForkServer, ForkUnavailable

        if self._forks is None:
            self._forks = ForkServer(("numpy", "tensorflow", "tflab.modes._bisect_child"), base)
            self._forks_env = base
        if base != self._forks_env:
            return None
        try:
            with open(os.devnull, "w") as devnull:
                return self._forks.spawn("tflab.modes._bisect_child", args, env=env, stdout=devnull, stderr=stderr)
        except ForkUnavailable:
            return None

    def run(self, mode: str, env_changes: dict, timeout: float, dump: Path | None = None):
        """Runs the step once in a child with ``env_changes``; returns (outputs, grads by index) or raises RuntimeError."""
        import numpy as np

        from tflab.process.group import start_tied
        from tflab.process.xla_probe import private_dumps_env

        self.runs += 1
        prefix = self.tmp / f"run{self.runs}"
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        for k, v in env_changes.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        env = private_dumps_env(env, self.tmp / "user_dumps")  # the user's own dump folders stay theirs
        if dump is not None:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
                                " --xla_dump_hlo_pass_re=.*").strip()
        args = [str(self.tmp / "saved_model"), str(self.tmp / "inputs.npz"), str(prefix), mode]
        with open(str(prefix) + ".stderr", "w+b") as err_file:
            proc = self._forked(args, env, err_file) or start_tied(
                [sys.executable, str(_CHILD), *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err_file)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"the child ran past its {timeout:.0f} s limit and was stopped") from None
            err_file.seek(0)
            err = err_file.read()
        result_file = Path(str(prefix) + ".json")
        if not result_file.exists():
            tail = (err or b"").decode(errors="replace").strip().splitlines()[-2:]
            raise RuntimeError(f"the child ended with exit {proc.returncode}: {' | '.join(tail)[:300]}")
        result = json.loads(result_file.read_text())
        if "error" in result:
            raise RuntimeError(f"{result['error']}: {result['message'][:300]}")
        with np.load(str(prefix) + ".npz", allow_pickle=False) as z:
            outs = [z[k] for k in sorted(z.files) if k.startswith("o")]
            grads = {int(k[1:]): z[k] for k in z.files if k.startswith("g")}
        return outs, grads


def _changed_passes(dump: Path) -> list[str]:
    """Names of the HLO passes that changed the module, in pipeline order (from the dump's file names)."""
    seen: list[str] = []
    pipelines = set()
    for p in sorted(dump.glob("module_*.txt")):
        m = _PASS_FILE_RE.search(p.name)
        if m:
            pipelines.add(m.group(1))
            if m.group(2) not in seen:
                seen.append(m.group(2))
    return [n for n in seen if n not in pipelines and not any(s in n for s in _STRUCTURAL)]


def fma_sites(kernel_asm: dict) -> list[tuple[str, str]]:
    """``(kernel symbol, instruction line)`` for each kernel whose machine code holds a fused multiply-add."""
    out = []
    for name, body in kernel_asm.items():
        for line in body.splitlines():
            if FMA_RE.search(line):
                out.append((name, line.split(":", 1)[-1].strip()))
                break
    return out


def _flag_candidates(dumped, user_flags: str) -> list[tuple[str, str, str]]:
    """``(kind, XLA_FLAGS words, words)`` of the flag settings to try, from what was measured."""
    out = []
    capped = re.findall(r"--xla_cpu_max_isa=(\w+)", user_flags)
    if fma_sites(dumped.kernel_asm_text) and not (capped and capped[-1].upper() in ("AVX", "SSE4_2")):
        # the last word wins (absl's flag parsing): a user's AVX2 or AVX512 cap is overridden here
        out.append(("flag", "--xla_cpu_max_isa=AVX", "FMA instructions withheld: AVX has no FMA3"))
    for flag, undo in _UNDO_FLAGS.items():
        m = re.search(rf"--{flag}(?:=(\w+))?", user_flags)
        if m and (m.group(1) or "true").lower() != undo:
            out.append(("flag", f"--{flag}={undo}", f"your --{flag} undone"))
    return out


@dataclasses.dataclass(frozen=True)
class FmaSite:
    """A multiply feeding an add or subtract inside a fusion whose machine code holds an FMA."""

    fusion: str
    instruction: str
    hlo: str
    tf_ops: tuple
    mul_ops: tuple
    add_ops: tuple
    backward: bool


def fusion_sites(dumped, call_levels: int = 2) -> list:
    """Every `FmaSite` of a dump: each multiply→add/subtract pair in a fusion whose code holds an FMA.

    Forward ops (no ``gradient_tape/`` name) come before gradient ones; the
    caller picks among them by measurement (`tflab.modes.causes`).
    """
    from tflab.lowering.hlo import clean_op_name, parse_module

    sites = fma_sites(dumped.kernel_asm_text)
    if not sites:
        return []
    comps = parse_module(dumped.optimized_hlo)
    by_name = {c.name: c for c in comps}
    fusions = {i.name: i for c in comps for i in c.instructions if i.opcode == "fusion"}

    def squash(n: str) -> str:
        return n.replace("_", "").replace(".", "").replace("-", "")

    found = []
    for symbol, instr in sites:
        name = max((f for f in fusions if squash(f) in squash(symbol)), key=len, default="")
        comp = by_name.get(fusions[name].calls[0]) if name and fusions[name].calls else None
        ins = {i.name: i for i in comp.instructions} if comp is not None else {}
        for i in ins.values():
            muls = [ins[o] for o in i.operands if o in ins and ins[o].opcode == "multiply"]
            if i.opcode in ("add", "subtract") and muls:
                mul_ops = tuple(clean_op_name(n, call_levels) for m in muls for n in m.op_names)
                add_ops = tuple(clean_op_name(n, call_levels) for n in i.op_names)
                ops = tuple(dict.fromkeys(n for n in mul_ops + add_ops if n))
                backward = any(n.startswith(("gradient_tape/", "gradients/")) for n in ops)
                found.append(FmaSite(name, instr, f"multiply %{muls[0].name} -> {i.opcode} %{i.name}", ops,
                                     mul_ops, add_ops, backward))
    if not found:
        return [FmaSite(sites[0][0], sites[0][1], "", (), (), (), False)]
    return sorted(found, key=lambda f: f.backward)


def bisect_xla(saved: SavedStep, reference: list, parent_xla: list, ulp_bound: float,
               budget_s: float = DEFAULT_BUDGET_S, child_timeout_s: float = CHILD_TIMEOUT_S,
               grad_names: list | None = None) -> Bisection:
    """Finds the XLA flag or HLO pass whose change gives eager's values back (see the module docstring).

    Args:
        saved: the saved step (`SavedStep`, entered).
        reference: eager's outputs then gradients (numpy), recorded before any change.
        parent_xla: this process's XLA outputs then gradients, in the same order.
        ulp_bound: the comparison's ULP bound, for `tflab.fix.values_match`.
        budget_s: the whole bisection's time limit, seconds.
        child_timeout_s: one child's time limit, seconds.
        grad_names: the names of the gradients in ``reference``, in order (matched by name
            against ``saved.grad_names``; the last of equal names, as a dict keeps it); None
            compares the child's gradients in the order it returns them.

    Returns:
        A `Bisection`.
    """
    from tflab.fix import values_match
    from tflab.lowering.dump import DumpResult, read_dump

    t_start = time.perf_counter()
    out = Bisection("xla")
    if saved.error:
        out.why_not = "not bisected: " + saved.error
        return out
    user_flags = os.environ.get("XLA_FLAGS", "")
    n_out = len(reference[0]) if reference else 0

    def flat(res):
        outs, grads = res
        if grad_names is None or not saved.grad_names:
            return list(outs) + [grads[i] for i in sorted(grads)]
        last = {n: i for i, n in enumerate(saved.grad_names)}
        return list(outs) + [grads[last[n]] for n in grad_names if n in last and last[n] in grads]

    dump = saved.tmp / f"dump{saved.runs}"
    try:
        base = flat(saved.run("xla", {}, child_timeout_s, dump=dump))
    except RuntimeError as e:
        out.why_not = f"not bisected: the step did not run in a child process ({e})"
        out.seconds = time.perf_counter() - t_start
        return out
    same = values_match([parent_xla], [base], ulp_bound=0)
    if not same.ok:
        out.why_not = (f"not bisected: the step compiled again in a child process does not give this process's "
                       f"XLA values ({same.text})")
        out.seconds = time.perf_counter() - t_start
        return out
    dumped = DumpResult()
    read_dump(dump, dumped)
    candidates = _flag_candidates(dumped, user_flags)
    candidates += [("pass", p, f"HLO pass {p!r} disabled") for p in _changed_passes(dump)]
    shutil.rmtree(dump, ignore_errors=True)
    for kind, setting, what in candidates:
        left = budget_s - (time.perf_counter() - t_start)
        if left < 5:
            untried = [s for _, s, _ in candidates[len(out.trials):]]
            out.why_not = (f"not bisected: out of time ({budget_s:.0f} s) before trying "
                           + ", ".join(untried))
            break
        flags = f"{user_flags} {setting}" if kind == "flag" else f"{user_flags} --xla_disable_hlo_passes={setting}"
        trial = Trial(kind, setting, what)
        t0 = time.perf_counter()
        try:
            got = flat(saved.run("xla", {"XLA_FLAGS": flags.strip()}, min(child_timeout_s, left)))
            trial.check = values_match([reference], [got], ulp_bound=ulp_bound,
                                       why_bound="the comparison's own ULP bound")
            trial.restored = trial.check.ok
        except RuntimeError as e:
            trial.error = str(e)
        trial.seconds = time.perf_counter() - t0
        out.trials.append(trial)
        if trial.restored:
            out.found = trial
            break
    else:
        if not out.found:
            tried = ", ".join(t.setting for t in out.trials) or "nothing (no candidate setting was found)"
            out.why_not = f"no single setting gave eager's values back (tried: {tried})"
    out.sites = fusion_sites(dumped)
    if out.sites:
        site = out.sites[0]
        out.fusion, out.instruction, out.hlo, out.tf_ops = site.fusion, site.instruction, site.hlo, site.tf_ops
    del n_out
    out.seconds = time.perf_counter() - t_start
    return out
