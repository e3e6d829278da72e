"""Driving compilers and linkers: one kernel build in a given toolchain and link mode.

Used by `sdtgen matrix` and by the tests; the steps are the ones sdtgen.mk
runs (compile, partial link, gen, stubs and table, final link), with the
compiler, the partial and final linkers and the flags as parameters.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sdtgen.errors import SdtError


@dataclass(frozen=True)
class Tool:
    name: str
    command: str
    package: str  # the Debian package that provides it


COMPILERS = {"gcc": Tool("gcc", "gcc", "gcc"), "clang": Tool("clang", "clang", "clang")}
LINKERS = {
    "bfd": Tool("bfd", "ld.bfd", "binutils"),
    "gold": Tool("gold", "ld.gold", "binutils"),
    "lld": Tool("lld", "ld.lld", "lld"),
}
# Partial linkers: the three linkers' `-r`, plus the compiler driver's `-r` (which runs LTO).
PARTIAL_LINKERS = {**LINKERS, "gcc-r": Tool("gcc-r", "gcc", "gcc")}

KERNEL_CFLAGS = ("-ffreestanding", "-mcmodel=kernel", "-mno-red-zone", "-fno-pic", "-O2",
                 "-fno-asynchronous-unwind-tables", "-fno-stack-protector", "-fno-common")


def missing_package(*tools: Tool) -> str | None:
    """The Debian package to install for the first tool not on PATH, or None."""
    for t in tools:
        if shutil.which(t.command) is None:
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
    """How to build one kernel: the toolchain and the link mode."""

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

    def tools(self) -> list[Tool]:
        return [COMPILERS[self.compiler], PARTIAL_LINKERS[self.partial], LINKERS[self.final]]


def script_path(arch: str, name: str) -> Path:
    from sdtgen import arch as arches

    if name in ("final", "partial"):
        return arches.by_name(arch).linker_script(name)
    path = arches.by_name(arch).linker_script("final").with_name(f"{name}.ld")
    if not path.exists():
        raise SdtError("", f"no linker script {name!r} for {arch}")
    return path


def include_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("sdtgen") / "include"))


def compile_sources(b: Build, sources: list[Path], out: Path) -> list[Path]:
    cc = COMPILERS[b.compiler].command
    objs = []
    for src in [*sources, *b.extra_sources]:
        obj = out / f"{src.stem}.o"
        run_tool(f"compile {src.name}", [cc, *b.cflags, f"-I{src.parent}", f"-I{include_dir()}", "-c", "-o",
                                         str(obj), str(src)])
        objs.append(obj)
    return objs


def partial_link(b: Build, objs: list[Path], out: Path) -> Path:
    script = ["-T", str(script_path(b.arch, "partial"))] if b.merge_text else []
    if b.partial == "gcc-r":
        cmd = [COMPILERS["gcc"].command, "-r", "-nostdlib", *b.cflags, *b.partial_flags, *(
            [f"-Wl,{script[0]},{script[1]}"] if script else [])]
    else:
        cmd = [PARTIAL_LINKERS[b.partial].command, "-r", *script, *b.partial_flags]
    run_tool("partial link", [*cmd, "-o", str(out), *map(str, objs)])
    return out


def compile_table(b: Build, stubs: Path, table: Path, out: Path) -> tuple[Path, Path]:
    """Stubs with the kernel's flags but never LTO; the table assembled by the same compiler."""
    cc = COMPILERS[b.compiler].command
    flags = [f for f in b.cflags if not f.startswith(("-flto", "-ffat-lto"))]
    stubs_o, table_o = out / "sdt_stubs.o", out / "sdt_table.o"
    run_tool("compile stubs", [cc, *flags, "-fno-lto", "-c", "-o", str(stubs_o), str(stubs)])
    run_tool("assemble table", [cc, *flags, "-fno-lto", "-c", "-o", str(table_o), str(table)])
    return stubs_o, table_o


def final_link(b: Build, partial: Path, stubs_o: Path, table_o: Path, out: Path) -> Path:
    objs = [stubs_o, partial, table_o] if b.stubs_first else [partial, stubs_o, table_o]
    run_tool("final link", [LINKERS[b.final].command, "-T", str(script_path(b.arch, b.final_script)),
                            "-e", b.entry, *b.final_flags, "-o", str(out), *map(str, objs)])
    return out
