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

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["DumpResult", "DumpChild", "OwnDump", "WindowDump", "dumper", "arm_own_dump", "disarm_own_dump", "disassembler",
           "parse_buffer_assignment"]

_CHILD = Path(__file__).with_name("_child.py")
CHILD_TIMEOUT_S = 600.0
#: Temporary folders carry `tflab._io.paths.OWNER` under this prefix: the CLI's start sweeps those
#: whose owner is gone (``tflab_*``), so a SIGKILLed lowering leaves nothing behind for long.
TEMP_PREFIX = "tflab_lower_"
_DUMP_FLAGS = "--xla_dump_hlo_as_text"
_own_dump: Path | None = None  # this process's XLA dump folder, armed before TF loaded (`arm_own_dump`)
_flags_before: str | None = None  # XLA_FLAGS as they were before `arm_own_dump`


def arm_own_dump(passes: bool = False) -> Path | None:
    """Turns XLA's dump on for this process, when TF has not loaded yet; returns the folder or None.

    XLA parses ``XLA_FLAGS`` once, at its first compile, so the flag must be in
    the environment before TF loads. The ``tflab lower`` verb runs in a fresh
    supervised child process and calls this first: its own compile then
    writes the dump and no second process (TF import, SavedModel save and
    load) is needed. The folder is an owned temporary folder
    (`tflab._io.paths.owned_temp_dir`): removed by `disarm_own_dump`, by the
    supervisor when this process is killed, or by a later run's sweep.
    """
    global _own_dump, _flags_before
    if _own_dump is not None:
        return _own_dump
    from tflab.process.supervisor import report_stream

    if report_stream() is None:
        return None  # not the supervised verb process: a test's or notebook's flags are never touched
    if "tensorflow" in sys.modules or "--xla_dump_to" in os.environ.get("XLA_FLAGS", ""):
        return None  # too late (XLA may have read its flags) or the user dumps already: the child does it
    from tflab._io.paths import owned_temp_dir

    tmp = owned_temp_dir(TEMP_PREFIX)
    dump = tmp / "xla_dump"
    dump.mkdir()
    _flags_before = os.environ.get("XLA_FLAGS")
    from tflab.process.xla_probe import dump_flags, note_own_dump

    pass_flag = " --xla_dump_hlo_pass_re=.*" if passes else ""  # the module after each pass that changed it
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + dump_flags(dump) + pass_flag).strip()
    note_own_dump(dump)  # reports record the user's XLA_FLAGS, these apart (`tflab.runtime`)
    _own_dump = dump
    return dump


def disarm_own_dump() -> None:
    """Removes this process's dump folder (`arm_own_dump`) and restores ``XLA_FLAGS`` for its children.

    XLA itself keeps the flags it read; nothing compiles here after the lowering.
    """
    global _own_dump
    if _own_dump is not None:
        shutil.rmtree(_own_dump.parent, ignore_errors=True)
        _own_dump = None
        if _flags_before is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = _flags_before


#: The jit function `tflab.lower` compiles is named ``NAME`` + this suffix, so that XLA's module name
#: (``a_inference_NAME__tflab_lower_N__.M``) matches `_MODULE_RE` and no other compile of the process dumps.
JIT_SUFFIX = "__tflab_lower"
_MODULE_RE = r".*__tflab_lower_[0-9]+__.*"
_in_process: Path | bool | None = None  # None: not probed; a folder: XLA dumps tflab's compiles there; False: not


def _probe_in_process() -> Path | bool:
    """Arms XLA's dump in this process if XLA has not read its flags yet; the folder, or False.

    XLA reads ``XLA_FLAGS`` at the first compile of the process (not at TF's
    import: ``xla/debug_options_flags.cc`` parses them once, when a compile first
    asks for its debug options). Until then the dump flags can still be set here:
    ``--xla_dump_to=DIR`` with ``--xla_dump_hlo_module_re`` matching only the
    compiles of `tflab.lower` (`JIT_SUFFIX`), so none of the caller's own jit
    compiles is ever dumped. A trivial compile named like a lowering then
    tells whether XLA took them (its files appear in DIR). ``XLA_FLAGS`` is
    restored in ``os.environ`` at once (XLA keeps its own copy), so child
    processes inherit the user's flags only. DIR stays, emptied after each
    lowering, until the process ends (or a later run's sweep, after a SIGKILL).
    """
    import tensorflow as tf

    from tflab._io.paths import owned_temp_dir

    if "--xla_dump_to" in os.environ.get("XLA_FLAGS", ""):
        return False  # the user dumps already: their folder is theirs
    tmp = owned_temp_dir(TEMP_PREFIX)
    folder = tmp / "xla_dump"
    before = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = (f"{before or ''} --xla_dump_to={folder} --xla_dump_hlo_as_text "
                               f"--xla_dump_hlo_module_re={_MODULE_RE}").strip()
    try:
        def probe(x):
            return x + 1.0

        probe.__name__ = "probe" + JIT_SUFFIX
        tf.function(probe, jit_compile=True).experimental_get_compiler_ir(tf.zeros([1]))(stage="optimized_hlo")
    except Exception:  # no XLA here: the child route says why
        pass
    finally:
        if before is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = before
    if folder.is_dir() and any(folder.iterdir()):
        import atexit

        atexit.register(shutil.rmtree, tmp, True)
        return folder
    shutil.rmtree(tmp, ignore_errors=True)
    return False


def dumper(passes: bool = False):
    """The dump of this lowering's one compile: in this process when it can dump, else a `DumpChild`.

    This process dumps when the CLI armed it before TF loaded (`arm_own_dump`: `OwnDump`),
    when XLA can read its dump flags again for this compile alone (`WindowDump`, through
    `tflab.lowering.dump_flags`: whether or not XLA compiled here before), or, on a TF without
    that, when XLA had not compiled anything yet at the first lowering (`_probe_in_process`).
    Then no second process, TF import or SavedModel is needed. The child remains for a user
    whose ``XLA_FLAGS`` dump already, and for a TF where neither works.

    Args:
        passes: also dump the module after each HLO pass that changed it. The CLI's own dump has it
            only when `arm_own_dump` was asked for it; `WindowDump` sets it for this compile alone;
            without either a child compiles with the flag (the in-process probe's flags are XLA's
            for the whole process, and a dump after every pass of every later lowering would cost
            each of them).
    """
    global _in_process
    if _own_dump is not None and _own_dump.is_dir():
        return OwnDump(_own_dump)
    from tflab.lowering.dump_flags import available

    if _in_process is None and not available():
        return WindowDump(passes)
    if passes:
        return DumpChild(passes)
    if _in_process is None:
        _in_process = _probe_in_process()
    if _in_process:
        return OwnDump(_in_process, where="this process (XLA's dump flags set before its first compile)")
    return DumpChild()


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
    compile_cpu: float = 0.0  # CPU seconds of the compile (this process's route; 0 from the child)
    child_seconds: float = 0.0
    save_seconds: float = 0.0
    error: str = ""
    asm_why: str = ""
    hlo: str = ""
    files: dict = dataclasses.field(default_factory=dict)  # the module's dump files (pass dumps included)
    call_levels: int = 2  # the child calls the program through a SavedModel signature: 2 call ops
    where: str = "a child process"
    waited_for: str = "the SavedModel save and the child, whose TF import began with the lowering"

    def note(self, wall: float) -> str:
        """How the dump was made and what it cost, for the optimized_hlo level's note."""
        cpu = f", {self.compile_cpu:.2f} CPU s" if self.compile_cpu else ""
        return (f"XLA's dump of one compile in {self.where} ({self.compile_seconds:.2f} s compile{cpu}, "
                f"{wall:.2f} s waited here for {self.waited_for})")


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

    def __init__(self, passes: bool = False) -> None:
        self.passes = passes
        self.tmp: Path | None = None
        self.group = None
        self.proc = None
        self.started = 0.0

    def __enter__(self) -> "DumpChild":
        from tflab.process.group import ChildGroup

        from tflab._io.paths import owned_temp_dir

        self.tmp = owned_temp_dir(TEMP_PREFIX)  # carries its owner: swept after a SIGKILL
        env = dict(os.environ)
        dump = self.tmp / "xla_dump"
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
                            + (" --xla_dump_hlo_pass_re=.*" if self.passes else "")).strip()
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
        """`submit`, then `collect`."""
        self.submit(concrete, specs, variables)
        return self.collect(None)

    def submit(self, concrete, specs: list[tuple[str, str, list[int]]], variables) -> None:
        """Saves ``concrete`` for the child, which compiles it as soon as it has (no waiting here).

        Args:
            concrete: the jit ConcreteFunction whose inputs are ``specs`` (flat, named tensors).
            specs: ``(name, dtype name, static shape)`` per input, in order.
            variables: the variables it captures (saved with it).

        The SavedModel skips its saver ops (``SaveOptions(experimental_skip_saver=True)``):
        the child only compiles, and the variables' values do not change the program.
        """
        import tensorflow as tf

        self.out = out = DumpResult()
        tmp = self.tmp
        t0 = time.perf_counter()
        try:
            holder = tf.Module()
            holder.variables_to_save = list(variables)
            tf.saved_model.save(holder, str(tmp / "saved_model"), signatures={"lower": concrete},
                                options=tf.saved_model.SaveOptions(experimental_skip_saver=True))
        except Exception as e:  # a capture SavedModel cannot hold (a lookup table, a py_function)
            out.error = f"the program could not be saved for the child compile: {type(e).__name__}: {str(e)[:300]}"
            return
        out.save_seconds = time.perf_counter() - t0
        ready = tmp / "specs.json.tmp"
        ready.write_text(json.dumps([list(s) for s in specs]))
        os.replace(ready, tmp / "specs.json")  # the child starts compiling when this name appears

    def collect(self, generator=None) -> DumpResult:
        """Waits for the child's compile (`submit` first) and reads XLA's dump.

        Returns:
            A `DumpResult`; ``error`` says why there is none (the SavedModel could not
            be written, the child failed or timed out), quoting TF.
        """
        out = getattr(self, "out", None)
        if out is None:
            return DumpResult(error="nothing was submitted to the child")
        if out.error:
            return out
        tmp = self.tmp
        result_file = tmp / "result.json"
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
        read_dump(tmp / "xla_dump", out)
        return out


class OwnDump:
    """This process's own compile, with XLA's dump on since before TF loaded (`arm_own_dump`).

    `collect` empties the dump folder, compiles with the lowering's
    ``experimental_get_compiler_ir(...)(stage="optimized_hlo")`` (one
    ``BuildExecutable``: the same compile the child makes) and reads the
    dump; nothing else is started or saved.
    """

    def __init__(self, folder: Path, where: str = "this process (XLA_FLAGS set before TF loaded)") -> None:
        self.folder = Path(folder)
        self.where = where

    def __enter__(self) -> "OwnDump":
        return self

    def __exit__(self, *exc) -> None:
        self._clear()

    def _clear(self) -> None:
        for p in list(self.folder.iterdir()) if self.folder.is_dir() else []:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    p.unlink()

    def submit(self, concrete, specs, variables) -> None:
        """Nothing to hand over: the compile happens here, in `collect`."""

    def collect(self, generator) -> DumpResult:
        out = DumpResult(where=self.where, waited_for="this compile",
                         call_levels=0)
        self._clear()  # only this compile's files: earlier jit compiles of the user's script dumped too
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            with self._window():
                generator(stage="optimized_hlo")
        except Exception as e:  # as in the child: reported, and the stages before are kept
            out.error = f"{type(e).__name__}: {str(getattr(e, 'message', None) or e)[:4000]}"
            return out
        out.compile_seconds, out.compile_cpu = time.perf_counter() - t0, time.process_time() - c0
        read_dump(self.folder, out)
        return out

    def _window(self):
        return contextlib.nullcontext()


class WindowDump(OwnDump):
    """This process's own compile, XLA's dump flags turned on for it alone (`tflab.lowering.dump_flags`).

    For a process whose XLA read its flags already (another compile ran first): no
    child process, TF import or SavedModel. When the compile under the window dumps
    nothing (a TF whose exported flags are not the ones its compiles read), the
    window is not used again in this process and this lowering's dump comes from a
    `DumpChild` after all.
    """

    def __init__(self, passes: bool = False) -> None:
        from tflab._io.paths import owned_temp_dir

        self.tmp = owned_temp_dir(TEMP_PREFIX)  # carries its owner: swept after a SIGKILL
        (self.tmp / "xla_dump").mkdir()
        super().__init__(self.tmp / "xla_dump", where="this process (XLA's dump flags re-read for this compile)")
        self.passes = passes
        self.program = None

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def submit(self, concrete, specs, variables) -> None:
        self.program = (concrete, specs, variables)  # kept for the child, should the window dump nothing

    def _window(self):
        from tflab.lowering.dump_flags import dump_window

        return dump_window(self.folder, _MODULE_RE, self.passes)

    def collect(self, generator) -> DumpResult:
        out = super().collect(generator)
        if out.error and not module_files(self.folder) and self.program is not None and out.compile_seconds:
            from tflab.lowering.dump_flags import mark_broken

            mark_broken("a compile under XLA's re-read dump flags wrote no dump in this process")
            with DumpChild(self.passes) as child:
                child.submit(*self.program)
                return child.collect(generator)
        return out


def module_files(dump: Path) -> dict[str, Path]:
    """The files of the dumped module with an after-optimizations HLO (the largest, if several)."""
    afters = sorted(dump.glob("module_*.cpu_after_optimizations.txt"), key=lambda p: p.stat().st_size)
    if not afters:
        return {}
    prefix = afters[-1].name[: -len("cpu_after_optimizations.txt")]
    return {p.name[len(prefix):]: p for p in dump.iterdir() if p.name.startswith(prefix)}


def read_dump(dump: Path, out: DumpResult) -> None:
    files = module_files(dump)
    out.files = files
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
    out.hlo = before.read_text(errors="replace") if before is not None else ""
    mt = {k: p.stat().st_mtime_ns / 1e9 for k, p in files.items()}
    t_before = mt.get("before_optimizations.txt", mt["cpu_after_optimizations.txt"])
    t_after = mt["cpu_after_optimizations.txt"]
    t_ll = max((mt[n] for n, _ in lls), default=t_after)
    t_o = max((mt[n] for n, _ in objs), default=t_ll)
    out.seconds = {"optimized_hlo": max(t_after - t_before, 0.0), "llvm_ir": max(t_ll - t_after, 0.0),
                   "asm": max(t_o - t_ll, 0.0)}
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
            a["shape"] = ", ".join(sorted({v["shape"] for v in a["values"]}))  # whole shapes: the text elides
        a["values"] = a["values"][:8]
    return {"total_bytes": int(total.group(1)) if total else sum(a["bytes"] for a in allocs),
            "temp_bytes": sum(a["bytes"] for a in allocs if a["kind"] == "temp"),
            "allocations": len(allocs), "largest": largest}
