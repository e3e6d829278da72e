"""Driving compilers and linkers: one kernel build in a given toolchain, link mode and architecture.

Used by `sdtgen matrix`, the benchmarks and the tests; the steps are the ones
sdtgen.mk runs (compile, partial link, gen, stubs and table, final link), with
the architecture, the compiler, the partial and final linkers and the flags as
parameters. What differs per architecture (cross prefix, triple, packages,
flags) comes from the registry in sdtgen.arch: Debian's cross toolchains
(`aarch64-linux-gnu-gcc` and its binutils), clang with `--target`, and lld,
which serves every architecture.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sdtgen import arch as arches


@dataclass(frozen=True)
class Tool:
    name: str
    command: list[str]
    package: str  # the Debian package that provides it


COMPILER_NAMES = ("gcc", "clang")
LINKER_NAMES = ("bfd", "gold", "lld")
PARTIAL_NAMES = (*LINKER_NAMES, "gcc-r")  # the linkers' `-r`, and gcc's (which runs LTO)

COMMON_CFLAGS = ("-ffreestanding", "-fno-pic", "-O2", "-fno-asynchronous-unwind-tables", "-fno-stack-protector",
                 "-fno-common")


def kernel_cflags(arch: str) -> tuple[str, ...]:
    return (*COMMON_CFLAGS, *arches.by_name(arch).cflags)


KERNEL_CFLAGS = kernel_cflags("x86_64")


def compiler(name: str, arch: str) -> Tool:
    t = arches.by_name(arch)
    if name == "clang":
        return Tool("clang", ["clang", f"--target={t.triple}"], "clang")
    return Tool("gcc", [f"{t.cross_prefix}gcc"], t.gcc_package)


def linker(name: str, arch: str, partial: bool = False) -> Tool | None:
    """A linker for the architecture; None where Debian has none (gold for RISC-V)."""
    t = arches.by_name(arch)
    if name == "lld":
        return Tool("lld", ["ld.lld"], "lld")
    if name == "gold" and not t.gold:
        return None
    if name == "gcc-r" and partial:
        return Tool("gcc-r", [f"{t.cross_prefix}gcc"], t.gcc_package)
    if name in ("bfd", "gold"):
        return Tool(name, [f"{t.cross_prefix}ld.{name}"], t.binutils_package)
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
    cflags: tuple[str, ...] = KERNEL_CFLAGS
    merge_text: bool = True  # partial link with sdtgen's script (one .text) or plain `-r`
    partial_flags: tuple[str, ...] = ()
    final_flags: tuple[str, ...] = ()
    final_script: str = "final"  # a script of sdtgen's: final or linux-like
    stubs_first: bool = False
    entry: str = "kmain"
    arch: str = "x86_64"
    extra_sources: tuple[Path, ...] = field(default_factory=tuple)

    def cc(self) -> list[str]:
        return compiler(self.compiler, self.arch).command

    def tools(self) -> list[Tool | None]:
        return [compiler(self.compiler, self.arch), linker(self.partial, self.arch, partial=True),
                linker(self.final, self.arch)]


def script_path(arch: str, name: str, out: Path) -> Path:
    """The linker script ``name`` of the architecture; the final one is written from its template into ``out``."""
    if name != "final":
        return arches.by_name(arch).linker_script(name)
    path = out / f"final-{arch}.ld"
    path.write_text(arches.by_name(arch).final_script())
    return path


def include_dir() -> Path:
    return Path(__file__).resolve().parent / "include"


def compile_sources(b: Build, sources: list[Path], out: Path) -> list[Path]:
    objs = []
    for src in [*sources, *b.extra_sources]:
        obj = out / f"{src.stem}.o"
        run_tool(f"compile {src.name}", [*b.cc(), *b.cflags, f"-I{src.parent}", f"-I{include_dir()}", "-c", "-o",
                                         str(obj), str(src)])
        objs.append(obj)
    return objs


def partial_link(b: Build, objs: list[Path], out: Path) -> Path:
    script = ["-T", str(script_path(b.arch, "partial", out.parent))] if b.merge_text else []
    tool = linker(b.partial, b.arch, partial=True)
    if tool is None:
        raise BuildError("partial link", f"no {b.partial} linker for {b.arch}")
    if b.partial == "gcc-r":
        cmd = [*tool.command, "-r", "-nostdlib", *b.cflags, *b.partial_flags,
               *([f"-Wl,{script[0]},{script[1]}"] if script else [])]
    else:
        cmd = [*tool.command, "-r", *script, *b.partial_flags]
    run_tool("partial link", [*cmd, "-o", str(out), *map(str, objs)])
    return out


def runtime_dir() -> Path:
    return Path(__file__).resolve().parent / "runtime"


def compile_table(b: Build, stubs: Path, table: Path, out: Path) -> list[Path]:
    """Stubs, table and the runtime with the kernel's flags but never LTO: the objects gen's output adds."""
    flags = [f for f in b.cflags if not f.startswith(("-flto", "-ffat-lto"))]
    inc = f"-I{include_dir()}"
    objs = []
    for step, src, name in (("compile stubs", stubs, "sdt_stubs.o"), ("assemble table", table, "sdt_table.o"),
                            ("compile runtime", runtime_dir() / "sdt_runtime.c", "sdt_runtime.o"),
                            ("compile runtime", runtime_dir() / "arch" / f"sdt_{b.arch}.c", "sdt_arch.o")):
        run_tool(step, [*b.cc(), *flags, "-fno-lto", inc, "-c", "-o", str(out / name), str(src)])
        objs.append(out / name)
    return objs


def final_link(b: Build, partial: Path, sdt_objs: list[Path], out: Path) -> Path:
    objs = [*sdt_objs, partial] if b.stubs_first else [partial, *sdt_objs]
    tool = linker(b.final, b.arch)
    if tool is None:
        raise BuildError("final link", f"no {b.final} linker for {b.arch}")
    run_tool("final link", [*tool.command, "-T", str(script_path(b.arch, b.final_script, out.parent)),
                            "-e", b.entry, *b.final_flags, "-o", str(out), *map(str, objs)])
    return out
