"""XLA's own dump of one compile, made in a child process, read back and removed.

`DumpChild` saves the lowered program (the jit ConcreteFunction and its
variables) as a SavedModel in a private temporary folder, starts
``tflab/lowering/_child.py`` with ``XLA_FLAGS`` extended by
``--xla_dump_to=DIR --xla_dump_hlo_as_text`` (a fresh process: XLA parses its
flags once per process, so they cannot be turned on where TF already ran),
and reads what XLA wrote there:

* ``module_N.NAME.cpu_after_optimizations.txt``: the optimized HLO;
* ``…cpu_after_optimizations-buffer-assignment.txt``: the buffer assignment
  (allocations with their sizes and the values in them) and
  ``…-memory-usage-report.txt``;
* one LLVM module per kernel (``…KERNEL_kernel_module.ir-with-opt.ll``, after
  LLVM's optimization) and its object file (``…obj-file.KERNEL_kernel_module.o``),
  disassembled with ``objdump`` or ``llvm-objdump`` when one is on PATH.

The folder is removed when the run ends, on every path. The stage times come
from the dump files' modification times (XLA writes each as its pass ends):
optimized HLO = after-optimizations minus before-optimizations, LLVM IR = the
last ``.ll`` minus after-optimizations, machine code = the last ``.o`` minus
the last ``.ll``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["DumpResult", "DumpChild", "disassembler", "parse_buffer_assignment"]

_CHILD = Path(__file__).with_name("_child.py")
CHILD_TIMEOUT_S = 600.0


@dataclasses.dataclass
class DumpResult:
    """What one child compile left: texts, per-kernel sizes, memory, timings, or why not."""

    optimized_hlo: str = ""
    llvm_ir: str = ""
    asm: str = ""
    kernel_ir_bytes: dict = dataclasses.field(default_factory=dict)
    kernel_asm_bytes: dict = dataclasses.field(default_factory=dict)
    kernel_asm_text: dict = dataclasses.field(default_factory=dict)
    kernel_ir_text: dict = dataclasses.field(default_factory=dict)
    buffer_assignment: str = ""
    seconds: dict = dataclasses.field(default_factory=dict)
    compile_seconds: float = 0.0
    child_seconds: float = 0.0
    save_seconds: float = 0.0
    error: str = ""
    asm_why: str = ""


def disassembler() -> list[str] | None:
    """``objdump`` (GNU binutils) or ``llvm-objdump`` from PATH, with the flags used; None when neither is."""
    for tool in ("objdump", "llvm-objdump"):
        path = shutil.which(tool)
        if path:
            return [path, "-d", "-t", "--no-show-raw-insn"]
    return None


class DumpChild:
    """The child process of one lowering, started early so its TF import overlaps the caller's work.

    `start` creates the private temporary folder and starts ``_child.py``
    (which imports TF and waits for the program); `finish` saves the program,
    waits for the compile and reads the dump; `close` stops the child if it
    still runs and removes the folder. Use as a context manager.
    """

    def __init__(self) -> None:
        self.tmp: Path | None = None
        self.group = None
        self.proc = None
        self.started = 0.0

    def __enter__(self) -> "DumpChild":
        from tflab.process.group import ChildGroup

        self.tmp = Path(tempfile.mkdtemp(prefix="tflab-lower-"))
        env = dict(os.environ)
        dump = self.tmp / "xla_dump"
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} --xla_dump_hlo_as_text").strip()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.group = ChildGroup().__enter__()
        self.started = time.perf_counter()
        self.proc = self.group.start([sys.executable, str(_CHILD), str(self.tmp / "saved_model"),
                                      str(self.tmp / "specs.json"), str(self.tmp / "result.json")],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.group is not None:
                self.group.__exit__(None, None, None)
        finally:
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def finish(self, concrete, specs: list[tuple[str, str, list[int]]], variables) -> DumpResult:
        """Saves ``concrete`` for the child, waits for its compile, reads XLA's dump.

        Args:
            concrete: the jit ConcreteFunction whose inputs are ``specs`` (flat, named tensors).
            specs: ``(name, dtype name, static shape)`` per input, in order.
            variables: the variables it captures (saved with it).

        Returns:
            A `DumpResult`; ``error`` says why there is none (the SavedModel could not
            be written, the child failed or timed out), quoting TF.
        """
        import tensorflow as tf

        out = DumpResult()
        tmp = self.tmp
        saved, result_file = tmp / "saved_model", tmp / "result.json"
        t0 = time.perf_counter()
        try:
            holder = tf.Module()
            holder.variables_to_save = list(variables)
            tf.saved_model.save(holder, str(saved), signatures={"lower": concrete})
        except Exception as e:  # a capture SavedModel cannot hold (a lookup table, a py_function)
            out.error = f"the program could not be saved for the child compile: {type(e).__name__}: {str(e)[:300]}"
            return out
        out.save_seconds = time.perf_counter() - t0
        ready = tmp / "specs.json.tmp"
        ready.write_text(json.dumps([list(s) for s in specs]))
        os.replace(ready, tmp / "specs.json")  # the child starts compiling when this name appears
        try:
            _, err = self.proc.communicate(timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            out.error = f"the child compile took over {CHILD_TIMEOUT_S:.0f} s and was stopped"
            return out
        out.child_seconds = time.perf_counter() - self.started
        if not result_file.exists():
            tail = (err or b"").decode(errors="replace").strip().splitlines()[-3:]
            out.error = f"the child compile ended with exit {self.proc.returncode}: {' | '.join(tail)[:400]}"
            return out
        result = json.loads(result_file.read_text())
        if "error" in result:
            out.error = f"{result['error']}: {result['message']}"
            return out
        out.compile_seconds = float(result.get("seconds", 0.0))
        _read_dump(tmp / "xla_dump", out)
        return out


def _module_files(dump: Path) -> dict[str, Path]:
    """The files of the dumped module with an after-optimizations HLO (the largest, if several)."""
    afters = sorted(dump.glob("module_*.cpu_after_optimizations.txt"), key=lambda p: p.stat().st_size)
    if not afters:
        return {}
    prefix = afters[-1].name[: -len("cpu_after_optimizations.txt")]
    return {p.name[len(prefix):]: p for p in dump.iterdir() if p.name.startswith(prefix)}


def _read_dump(dump: Path, out: DumpResult) -> None:
    files = _module_files(dump)
    after = files.get("cpu_after_optimizations.txt")
    if after is None:
        out.error = "XLA wrote no optimized HLO (no *.cpu_after_optimizations.txt in its dump)"
        return
    out.optimized_hlo = after.read_text(errors="replace")
    out.buffer_assignment = (files["cpu_after_optimizations-buffer-assignment.txt"].read_text(errors="replace")
                             if "cpu_after_optimizations-buffer-assignment.txt" in files else "")
    lls = sorted((n, p) for n, p in files.items() if n.endswith(".ir-with-opt.ll"))
    objs = sorted((n, p) for n, p in files.items() if n.endswith(".o"))
    parts = []
    for name, path in lls:
        text = path.read_text(errors="replace")
        parts.append(f"; ===== {name} =====\n{text}")
        for fn_name, body in _ll_functions(text).items():
            out.kernel_ir_bytes[fn_name] = out.kernel_ir_bytes.get(fn_name, 0) + len(body.encode())
            out.kernel_ir_text[fn_name] = body
    out.llvm_ir = "\n".join(parts)
    before = files.get("before_optimizations.txt")
    mt = {k: p.stat().st_mtime_ns / 1e9 for k, p in files.items()}
    t_before = mt.get("before_optimizations.txt", mt["cpu_after_optimizations.txt"])
    t_after = mt["cpu_after_optimizations.txt"]
    t_ll = max((mt[n] for n, _ in lls), default=t_after)
    t_o = max((mt[n] for n, _ in objs), default=t_ll)
    out.seconds = {"optimized_hlo": max(t_after - t_before, 0.0), "llvm_ir": max(t_ll - t_after, 0.0),
                   "asm": max(t_o - t_ll, 0.0)}
    del before
    tool = disassembler()
    if not objs:
        out.asm_why = "XLA wrote no object file for this program (every op ran as a library call)"
        return
    if tool is None:
        out.asm_why = ("neither objdump nor llvm-objdump is on PATH (apt-get install binutils, or llvm); "
                       f"XLA wrote {len(objs)} object file(s)")
        return
    t0 = time.perf_counter()
    texts = []
    for i in range(0, len(objs), 64):
        chunk = [str(p) for _, p in objs[i:i + 64]]
        run = subprocess.run(tool + chunk, capture_output=True, text=True, errors="replace")
        if run.returncode != 0:
            out.asm_why = f"{os.path.basename(tool[0])} failed: {run.stderr.strip()[:200]}"
            return
        texts.append(run.stdout)
    asm = "\n".join(texts).replace(str(dump) + os.sep, "")
    sizes, bodies = _asm_symbols(asm)
    out.kernel_asm_bytes, out.kernel_asm_text = sizes, bodies
    out.asm = "\n".join(f"{name}:\n{body}" for name, body in bodies.items())
    out.seconds["asm"] += time.perf_counter() - t0


_DEFINE_RE = re.compile(r"^define\b[^@]*@\"?([\w.$\-]+)\"?\(", re.M)


def _ll_functions(text: str) -> dict[str, str]:
    """LLVM IR function name → its text (``define … @name(…) { … }``)."""
    out = {}
    for m in _DEFINE_RE.finditer(text):
        end = text.find("\n}\n", m.start())
        out[m.group(1)] = text[m.start(): (end + 2) if end >= 0 else len(text)]
    return out


# objdump -t: address, 7 flag characters ("g     F"), section, size, name.
_SYM_RE = re.compile(r"^[0-9a-f]{8,} (.{7}) (\S+)\s+([0-9a-f]{8,})\s+(\S+)\s*$", re.M)
_BLOCK_RE = re.compile(r"^[0-9a-f]+ <([^>]+)>:\n((?:\s+[0-9a-f]+:.*\n?)*)", re.M)


def _asm_symbols(asm: str) -> tuple[dict[str, int], dict[str, str]]:
    """Function symbol → machine-code bytes (the symbol table's size), and → its disassembly."""
    sizes: dict[str, int] = {}
    for flags, _, size, name in _SYM_RE.findall(asm):
        if "F" in flags:
            sizes[name] = sizes.get(name, 0) + int(size, 16)
    bodies: dict[str, str] = {}
    for name, body in _BLOCK_RE.findall(asm):
        bodies[name] = bodies.get(name, "") + body
    for name in bodies:
        sizes.setdefault(name, 0)
    return sizes, bodies


_ALLOC_RE = re.compile(r"^allocation (\d+): size (\d+), (.*?):?\s*$")
_VALUE_RE = re.compile(r"^\s*value: <\d+ ([^ >]+)[^>]*> \(size=(\d+),offset=(\d+)\): (\S+)")


def parse_buffer_assignment(text: str, top: int = 10) -> dict:
    """XLA's buffer assignment: total and temp bytes, the ``top`` largest allocations with their shapes.

    ``Total bytes used`` is XLA's own sum; temp bytes are the allocations that
    are neither parameters, outputs, constants nor thread-local (XLA's
    ``preallocated-temp`` buffers: what the executable allocates per run).
    """
    allocs = []
    for line in text.split("\nUsed values:", 1)[0].splitlines():
        m = _ALLOC_RE.match(line)
        if m:
            desc = m.group(3)
            shape = re.search(r"shape \|([^|]*)\|", desc)
            kind = ("parameter" if desc.startswith("parameter") else "output" if "output" in desc
                    else "constant" if "constant" in desc else "thread-local" if "thread-local" in desc
                    else "temp")
            allocs.append({"index": int(m.group(1)), "bytes": int(m.group(2)), "kind": kind,
                           "shape": shape.group(1) if shape else "", "values": []})
            continue
        v = _VALUE_RE.match(line)
        if v and allocs:
            allocs[-1]["values"].append({"instruction": v.group(1), "bytes": int(v.group(2)),
                                         "offset": int(v.group(3)), "shape": v.group(4)})
    total = re.search(r"Total bytes used: (\d+)", text)
    largest = sorted(allocs, key=lambda a: -a["bytes"])[:top]
    for a in largest:
        if not a["shape"] and a["values"]:
            a["shape"] = ", ".join(sorted({v["shape"] for v in a["values"]}))[:200]
        a["values"] = a["values"][:8]
    return {"total_bytes": int(total.group(1)) if total else sum(a["bytes"] for a in allocs),
            "temp_bytes": sum(a["bytes"] for a in allocs if a["kind"] == "temp"),
            "allocations": len(allocs), "largest": largest}
