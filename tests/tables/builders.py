"""Small real programs for the table tests: compile and link with gcc for each architecture."""

from __future__ import annotations

from pathlib import Path

from helpers import CROSS, need_tool, run

ARCHES = ("x86_64", "i386", "aarch64", "riscv64")


def gcc_for(arch: str) -> str:
    if arch in CROSS:
        return need_tool(*CROSS[arch])
    return "gcc"


class Builder:
    """Compile and link small C programs for one architecture."""

    def __init__(self, arch: str, root: Path) -> None:
        self.arch, self.cc, self.dir = arch, gcc_for(arch), root / arch
        self.dir.mkdir(parents=True, exist_ok=True)

    def obj(self, name: str, source: str, *flags: str) -> Path:
        src = self.dir / f"{name}.c"
        src.write_text(source)
        out = self.dir / f"{name}.o"
        run([self.cc, "-O2", *flags, "-c", "-o", str(out), str(src)])
        return out

    def link(self, name: str, objs: list[Path], *flags: str) -> Path:
        """Link without the C library: the cross compilers come without the target's libc."""
        out = self.dir / name
        run([self.cc, "-nostdlib", *flags, "-o", str(out), *map(str, objs)])
        return out
