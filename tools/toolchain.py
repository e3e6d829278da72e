"""Driving compilers, linkers and sdtgen: one kernel build in a given toolchain, link mode and architecture.

Used by the matrix, the benchmarks and the tests; the steps are the ones
sdtgen.mk runs (compile, partial link, gen, stubs and table, final link), with
the architecture, the compiler, the partial and final linkers and the flags as
parameters. It imports nothing of sdtgen: what differs per architecture (cross
prefix, triple, packages, flags) comes from the registry of the `sdtgen` it
drives (`$SDTGEN`, or the one on PATH): Debian's cross toolchains
(`aarch64-linux-gnu-gcc` and its binutils), clang with `--target`, and lld,
which serves every architecture. The kernel flags every build starts from are
tools/kernel_flags.mk's, which the fixture Makefiles include too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Tool:
    name: str
    command: list[str]
    package: str  # the Debian package that provides it


COMPILER_NAMES = ("gcc", "clang")
LINKER_NAMES = ("bfd", "gold", "lld")
PARTIAL_NAMES = (*LINKER_NAMES, "gcc-r")  # the linkers' `-r`, and gcc's (which runs LTO)


def sdtgen_command() -> str:
    return os.environ.get("SDTGEN") or "sdtgen"


def sdtgen(*args: str | Path) -> str:
    """What the sdtgen command prints; a failure raises SdtgenError with its message."""
    try:
        proc = subprocess.run([sdtgen_command(), *map(str, args)], capture_output=True, text=True)
    except FileNotFoundError:
        raise SdtgenError(f"sdtgen: error: no command {sdtgen_command()!r}; put sdtgen on PATH, or set SDTGEN "
                          "to it") from None
    if proc.returncode != 0:
        raise SdtgenError(proc.stderr.strip() or f"sdtgen {args[0]} exited {proc.returncode}")
    return proc.stdout


class SdtgenError(Exception):
    """sdtgen refused or failed; the message is its diagnostic."""


@cache
def registry() -> dict[str, dict]:
    """`sdtgen arch --json`, by architecture name, x86-64 first."""
    return {a["name"]: a for a in json.loads(sdtgen("arch", "--json"))["arches"]}


def arch_names() -> tuple[str, ...]:
    return tuple(registry())


@cache
def kernel_flags() -> tuple[str, ...]:
    """KERNEL_CFLAGS of tools/kernel_flags.mk: the one list of common kernel flags."""
    for line in (HERE / "kernel_flags.mk").read_text().splitlines():
        name, sep, value = line.partition(":=")
        if sep and name.strip() == "KERNEL_CFLAGS":
            return tuple(value.split())
    raise RuntimeError("tools/kernel_flags.mk defines no KERNEL_CFLAGS")


def kernel_cflags(arch: str) -> tuple[str, ...]:
    return (*kernel_flags(), *registry()[arch]["cflags"])


@cache
def include_dir() -> str:
    return sdtgen("include-dir").strip()


@cache
def runtime_dir() -> Path:
    return Path(sdtgen("runtime-dir").strip())


@cache
def runtime_sources() -> tuple[Path, ...]:
    """The runtime's portable sources as the Makefile fragment builds them for every kernel (SDT_RUNTIME_SRCS,
    its one list), asked of make; each build here adds the architecture's port, arch/sdt_ARCH.c."""
    fragment = sdtgen("makefile").strip()
    proc = subprocess.run(["make", "-s", "--no-print-directory", "-f", fragment, f"SDTGEN={sdtgen_command()}",
                           "--eval", "sdt_list: ; @echo $(SDT_RUNTIME_SRCS)", "sdt_list"],
                          capture_output=True, text=True, check=True)
    return tuple(Path(s) for s in proc.stdout.split())


@cache
def snippet_dir() -> str:
    """Where sdtgen's linker script snippets are: a kernel's own script INCLUDEs them through -L."""
    return os.path.dirname(sdtgen("linker-script", "sdt_text", "--path").strip())


def compiler(name: str, arch: str) -> Tool:
    a = registry()[arch]
    if name == "clang":
        return Tool("clang", ["clang", f"--target={a['triple']}"], "clang")
    return Tool("gcc", [f"{a['cross-prefix']}gcc"], a["packages"][0])


def linker(name: str, arch: str, partial: bool = False) -> Tool | None:
    """A linker for the architecture; None where its binutils have none (gold, which Debian's RISC-V
    binutils do not ship: GNU ld installed and gold not)."""
    a = registry()[arch]
    prefix, binutils = a["cross-prefix"], a["packages"][1]
    if name == "lld":
        return Tool("lld", ["ld.lld"], "lld")
    if name == "gold" and shutil.which(f"{prefix}ld.bfd") and not shutil.which(f"{prefix}ld.gold"):
        return None
    if name == "gcc-r" and partial:
        return Tool("gcc-r", [f"{prefix}gcc"], a["packages"][0])
    if name in ("bfd", "gold"):
        return Tool(name, [f"{prefix}ld.{name}"], binutils)
    return None


def missing_package(*tools: Tool) -> str | None:
    """The Debian package to install for the first tool not on PATH, or None."""
    for t in tools:
        if shutil.which(t.command[0]) is None:
            return t.package
    return None


class BuildError(Exception):
    """A toolchain step failed; ``step`` names it, ``output`` is what the tool said."""

    def __init__(self, step: str, output: str) -> None:
        super().__init__(f"{step}: {output.strip().splitlines()[-1] if output.strip() else 'failed'}")
        self.step = step
        self.output = output


def run_tool(step: str, cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(step, proc.stderr or proc.stdout)
    return proc.stdout


@dataclass(frozen=True)
class Build:
    """How to build one kernel: the architecture, the toolchain and the link mode."""

    compiler: str = "gcc"
    partial: str = "bfd"
    final: str = "bfd"
    cflags: tuple[str, ...] | None = None  # None: the kernel flags of the architecture
    merge_text: bool = True  # partial link with sdtgen's script (one .text) or plain `-r`
    partial_flags: tuple[str, ...] = ()
    final_flags: tuple[str, ...] = ()
    final_script: str | Path = "final"  # sdtgen's, or a script of the kernel's own (it INCLUDEs the snippets)
    stubs_first: bool = False
    entry: str = "kmain"
    arch: str = "x86_64"
    extra_sources: tuple[Path, ...] = field(default_factory=tuple)

    def flags(self) -> tuple[str, ...]:
        return kernel_cflags(self.arch) if self.cflags is None else self.cflags

    def cc(self) -> list[str]:
        return compiler(self.compiler, self.arch).command

    def tools(self) -> list[Tool | None]:
        return [compiler(self.compiler, self.arch), linker(self.partial, self.arch, partial=True),
                linker(self.final, self.arch)]


def script_path(arch: str, name: str | Path, out: Path) -> Path:
    """sdtgen's partial or final script (the final one written from its template into ``out``), or a
    script file of the kernel's own."""
    if name == "final":
        path = out / f"final-{arch}.ld"
        path.write_text(_final_script(arch))
        return path
    if name == "partial":
        return _partial_script()
    return Path(name)


@cache
def _final_script(arch: str) -> str:
    return sdtgen("linker-script", "final", "--arch", arch)


@cache
def _partial_script() -> Path:
    return Path(sdtgen("linker-script", "partial", "--path").strip())


def compile_sources(b: Build, sources: list[Path], out: Path) -> list[Path]:
    objs = []
    for src in [*sources, *b.extra_sources]:
        obj = out / f"{src.stem}.o"
        run_tool(f"compile {src.name}", [*b.cc(), *b.flags(), f"-I{src.parent}", f"-I{include_dir()}", "-c", "-o",
                                         str(obj), str(src)])
        objs.append(obj)
    return objs


def partial_link(b: Build, objs: list[Path], out: Path) -> Path:
    script = ["-T", str(script_path(b.arch, "partial", out.parent))] if b.merge_text else []
    tool = linker(b.partial, b.arch, partial=True)
    if tool is None:
        raise BuildError("partial link", f"no {b.partial} linker for {b.arch}")
    if b.partial == "gcc-r":
        cmd = [*tool.command, "-r", "-nostdlib", *b.flags(), *b.partial_flags,
               *([f"-Wl,{script[0]},{script[1]}"] if script else [])]
    else:
        cmd = [*tool.command, "-r", *script, *b.partial_flags]
    run_tool("partial link", [*cmd, "-o", str(out), *map(str, objs)])
    return out


def gen(obj: Path, stubs: Path, table: Path, mode: str = "reloc") -> None:
    """`sdtgen gen`; its refusal raises SdtgenError with the diagnostic."""
    sdtgen("gen", obj, "--mode", mode, "--stubs", stubs, "--table", table)


def compile_table(b: Build, stubs: Path, table: Path, out: Path) -> list[Path]:
    """Stubs, recorders, table and sdtgen's runtime with the kernel's flags but never LTO, as the fragment
    compiles them: the objects gen's output adds to the final link."""
    flags = [*b.flags(), "-fno-lto", f"-I{include_dir()}"]
    objs = []
    runtime = [("compile runtime", src, f"sdt_rt_{src.stem}.o") for src in runtime_sources()]
    for step, src, name in (("compile stubs", stubs, "sdt_stubs.o"), ("assemble table", table, "sdt_table.o"),
                            *runtime, ("compile runtime", runtime_dir() / "arch" / f"sdt_{b.arch}.c", "sdt_arch.o")):
        run_tool(step, [*b.cc(), *flags, "-c", "-o", str(out / name), str(src)])
        objs.append(out / name)
    return objs


def final_link(b: Build, partial: Path, sdt_objs: list[Path], out: Path) -> Path:
    objs = [*sdt_objs, partial] if b.stubs_first else [partial, *sdt_objs]
    tool = linker(b.final, b.arch)
    if tool is None:
        raise BuildError("final link", f"no {b.final} linker for {b.arch}")
    run_tool("final link", [*tool.command, "-L", snippet_dir(), "-T", str(script_path(b.arch, b.final_script,
                                                                                         out.parent)),
                            "-e", b.entry, *b.final_flags, "-o", str(out), *map(str, objs)])
    return out
