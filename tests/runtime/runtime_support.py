"""What the runtime's tests share, in a module of its own name: test images of the runtime's C built by each
architecture's gcc and binutils, the runtime's directories, and the records of the C drivers (tests import these
from here, never from `conftest`, which names whichever conftest.py was imported first)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from helpers import cross_tool, readelf_symbols, run, sdtgen

from sdtgen import arch as arches

HERE = Path(__file__).resolve().parent
KERNEL_FLAGS = ("-ffreestanding", "-O2", "-fno-pic", "-fno-stack-protector", "-fno-asynchronous-unwind-tables",
                "-nostdlib", "-Wall", "-Wextra", "-Werror")

# The driver's case records (arch_driver.c), little-endian on every architecture sdtgen has.
ENCODE = struct.Struct("<QQQIIIIII16s")  # site stub recorder form size state keep ret pad out
VERIFY = struct.Struct("<QQQIIII")  # code site stub form length ret keep
STORE = struct.Struct("<QIIIIII")  # site size lo hi ret at width
COND = struct.Struct("<QII")  # flags keep ret


def runtime_dir() -> Path:
    return Path(sdtgen("runtime-dir", check=True).stdout.strip())


def include_dir() -> Path:
    return Path(sdtgen("include-dir", check=True).stdout.strip())


@dataclass
class ArchImage:
    """The driver and one architecture's encoders linked into an image, loaded in a Machine."""

    arch: arches.Arch
    path: Path
    symbols: dict[str, int]
    machine: object = field(repr=False)

    def cases(self, entry: str, layout: struct.Struct, rows: list[tuple]) -> list[tuple]:
        """Run the driver's ``entry`` over ``rows``; the rows as the C code left them."""
        base, out = self.symbols["sdt_test_cases"], []
        chunk = (1 << 20) // layout.size
        for at in range(0, len(rows), chunk):
            part = rows[at:at + chunk]
            self.machine.write(base, b"".join(layout.pack(*r) for r in part))
            self.machine.call(self.symbols[entry], [base, len(part)])
            data = self.machine.read(base, layout.size * len(part))
            out += [layout.unpack_from(data, i * layout.size) for i in range(len(part))]
        return out

    def read(self, addr: int, n: int) -> bytes:
        return self.machine.read(addr, n)

    def write(self, addr: int, data: bytes) -> None:
        self.machine.write(addr, data)


def build_image(out: Path, arch_name: str, sources: list[tuple[str, str, list[str]]],
                ld_flags: list[str] = ()) -> ArchImage:
    """arch_driver.c and arch/sdt_<arch>.c compiled with the kernel's flags, ``sources`` (name, assembly,
    flags) assembled by GNU as, all linked by GNU ld at the architecture's kernel address."""
    from sdtgen.elf.reader import ElfFile
    from sdtgen.targets.emulator.machine import Machine

    a = arches.by_name(arch_name)
    gcc, gas, ld = (cross_tool(arch_name, t) for t in ("gcc", "as", "ld"))
    out.mkdir(parents=True, exist_ok=True)
    rt = runtime_dir()
    flags = [*KERNEL_FLAGS, *a.toolchain.cflags, f"-I{include_dir()}", f"-I{rt}"]
    objs = []
    for name, src in (("driver", HERE / "arch_driver.c"), ("arch", rt / "arch" / f"sdt_{arch_name}.c")):
        objs.append(out / f"{name}.o")
        run([gcc, *flags, "-c", "-o", str(objs[-1]), str(src)])
    for name, text, as_flags in sources:
        src = out / f"{name}.s"
        src.write_text(text)
        objs.append(out / f"{name}.o")
        run([gas, *as_flags, "-o", str(objs[-1]), str(src)])
    image = out / "image.elf"
    run([ld, f"-Ttext={a.kernel_base:#x}", "-e", "sdt_test_encode", "--no-warn-rwx-segments", *ld_flags,
         "-o", str(image), *map(str, objs)])
    symbols = {name: value for value, _, _, _, _, name in readelf_symbols(image)}
    return ArchImage(a, image, symbols, Machine(ElfFile(image), a))
