"""Small real programs carrying each kind of probe table, built once per session with gcc."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import CROSS, IN_CI, need_tool, run

ARCHES = ("x86_64", "i386", "aarch64", "riscv64")
SDT_H = Path("/usr/include/x86_64-linux-gnu/sys/sdt.h")


def gcc_for(arch: str) -> str:
    if arch in CROSS:
        return need_tool(*CROSS[arch])
    return "gcc"


@pytest.fixture(scope="session")
def sdt_include(tmp_path_factory) -> Path:
    """sys/sdt.h (systemtap-sdt-dev) in a directory of its own: the header is the same on every
    architecture, and the cross compilers do not search the host's multiarch include directory."""
    if not SDT_H.exists():
        message = "sys/sdt.h not found: apt-get install systemtap-sdt-dev"
        if IN_CI:
            pytest.fail(message + " (CI installs it in .ci/run)")
        pytest.skip(message)
    inc = tmp_path_factory.mktemp("sdt-include")
    (inc / "sys").mkdir()
    for h in SDT_H.parent.glob("sdt*.h"):
        shutil.copy(h, inc / "sys" / h.name)
    return inc


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


@pytest.fixture(scope="session")
def builder(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    made: dict[str, Builder] = {}

    def get(arch: str) -> Builder:
        if arch not in made:
            made[arch] = Builder(arch, root)
        return made[arch]

    return get
