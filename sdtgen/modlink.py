"""A module object placed at an address: what a kernel's loader does with one, done by GNU ld.

A module is a relocatable object (`ld -r` of its code and of what `sdtgen gen --module NAME` wrote). Placing
it is relocating it: the architecture's own ld links it at ``base`` with sdtgen's module script (one run of
sections from the base, code first; no __global_pointer$, so RISC-V's data accesses are never relaxed to gp,
a register only the kernel's own start-up sets). Against a kernel image (``-R``: the module calls the kernel's
runtime), as the emulated boot loads it; or alone, what it uses of the kernel at 0, as `check` proves its table.

A target's loader (the emulator's, QEMU's fw_cfg file) then takes the placed module whole: link_module
places it in the module area after the image and reads back its code, table and name; the runtime does the
rest (sdt_module_load), as it would for a kernel's own loader.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from contextlib import contextmanager

from sdtgen.elf.reader import PT_LOAD, SHF_EXECINSTR, ElfFile
from sdtgen.errors import SdtError, printable
from sdtgen.layout import MODULE_TABLE
from sdtgen.plaindata import record
from sdtgen.probes import is_c_identifier
from sdtgen.table import MODULE_TABLE_SECTION, PROBES_SET, SITES_SET, Bounds

ET_REL = 1

SCRIPT = """SECTIONS {{
  . = {base:#x};
  .text : {{ *(.text .text.*) }}
  .rodata : {{ *(.rodata .rodata.* .srodata .srodata.*) }}
  .data : {{ *(.data .data.* .sdata .sdata.*) }}
{sets}  .bss : {{ *(.bss .bss.* .sbss .sbss.* COMMON) }}
}}
"""
# The table's two sets with their bounds, as a kernel's final script gives them (what check reads).
SETS = "".join(f"  {name} : {{ __start_{name} = .; *({name}) __stop_{name} = .; }}\n" for name in (PROBES_SET,
                                                                                                  SITES_SET))


def _undefined(path: str) -> list[str]:
    """The global symbols ``path`` uses and does not define (the kernel's: placed alone, they are 0)."""
    with ElfFile(path) as obj:
        return sorted({s.name for s in obj.symbols if s.name and not s.defined and s.bind in (1, 2)
                       and is_c_identifier(s.name)})


def check_module_object(path: str, machine: int | None = None, arch_name: str = "") -> None:
    """``path`` is a module object: relocatable, of the kernel's machine, with a module table."""
    if not os.path.isfile(path):
        raise SdtError(path, "no such module file", "give the module object `sdtgen gen --module` built")
    with ElfFile(path) as obj:
        if obj.type != ET_REL:
            raise obj.fail("is not a relocatable object (a module is its ld -r output)",
                           "give the module object before any final link")
        if machine is not None and obj.machine != machine:
            raise obj.fail(f"is not built for {arch_name}", "build the module for the kernel's architecture")
        if obj.section(MODULE_TABLE_SECTION) is None:
            raise obj.fail("has no module table (section sdt_module_table)",
                           "run `sdtgen gen --module NAME` on it and link the generated table in")


@contextmanager
def placed(path: str, arch, base: int, tmp: str, kernel: str | None = None, relax: bool = True,
           define: dict[str, int] | None = None):
    """The path of ``path`` linked at ``base`` in directory ``tmp``: against ``kernel``'s symbols, or alone with
    the sets' bounds and what it uses of the kernel at address 0 (``relax`` False: as a kernel's loader, which
    never relaxes, leaves every instruction); ``define``: symbols given values, as a loader resolves them."""
    out, script = os.path.join(tmp, "module.elf"), os.path.join(tmp, "module.ld")
    with open(script, "w") as f:
        f.write(SCRIPT.format(base=base, sets="" if kernel else SETS))
    ld = f"{arch.toolchain.cross_prefix}ld"
    cmd = [ld, "-N", "-e", "0", "-T", script, "--no-warn-rwx-segments", "-o", out, path]
    cmd += ["-R", kernel] if kernel else [f"--defsym={name}=0" for name in _undefined(path)]
    cmd += [] if relax or not arch.relaxes else ["--no-relax"]
    cmd += [f"--defsym={name}={value:#x}" for name, value in (define or {}).items()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise SdtError(path, f"{ld} is not installed: placing a module uses it",
                       f"install {arch.toolchain.binutils_package}") from None
    if done.returncode:
        first = (done.stderr.strip().splitlines() or ["(no message)"])[0]
        raise SdtError(path, f"cannot be relocated{' against the kernel' if kernel else ''}: {printable(first)}",
                       "build the module with the kernel's flags, calling only functions the kernel has")
    yield out

MODULE_AREA = 4 << 20  # bytes the boot maps for modules, after the image (one module at a time)


@record(frozen=True)
class LinkedModule:
    """A module relocated at ``base``: its bytes, where its code and tables are, and its functions."""

    path: str
    name: str
    base: int
    size: int  # bytes from base, its zero-filled tail included
    segments: tuple[tuple[int, bytes, int], ...]  # (address, file bytes, memory size)
    text: tuple[int, int]  # (start, size) of its code: where its sites must be
    table: int  # its struct sdt_module_table
    bounds: Bounds
    functions: dict[str, int]


def module_area(image) -> int:
    """Where the boot maps the module area: the next 2 MiB boundary past the image, 2 MiB further on (branch
    range of every architecture's call from the module to the kernel)."""
    top = max(s.vaddr + s.memsz for s in image.elf.segments if s.type == PT_LOAD)
    return ((top + (2 << 20) - 1) & ~((2 << 20) - 1)) + (2 << 20)


def link_module(image, path: str, base: int, area: int = MODULE_AREA) -> LinkedModule:
    """``path`` relocated at ``base`` against ``image``'s symbols, to fit ``area`` bytes with the struct
    sdt_module after it; an SdtError saying what is wrong with it."""
    arch = image.arch
    check_module_object(path, image.elf.machine, arch.name)
    with tempfile.TemporaryDirectory(prefix="sdtgen-module-") as tmp, \
            placed(path, arch, base, tmp, kernel=image.path) as out, ElfFile(out) as elf:
        return _placed(elf, path, base, area)


def _placed(elf: ElfFile, path: str, base: int, area: int) -> LinkedModule:
    loads = [s for s in elf.segments if s.type == PT_LOAD and s.memsz]
    end = max(s.vaddr + s.memsz for s in loads)
    if min(s.vaddr for s in loads) < base or end - base > area - 4096:  # the struct sdt_module after it
        raise SdtError(path, f"needs {end - base:#x} bytes at {base:#x}, more than the {area >> 10} KiB module "
                       "area", "load a smaller module")
    code = [s for s in elf.sections if s.is_alloc and s.flags & SHF_EXECINSTR and s.size]
    sites, probes, table = (elf.section(n) for n in (SITES_SET, PROBES_SET, MODULE_TABLE_SECTION))
    if not code or table is None or table.size < MODULE_TABLE.size(64):
        raise SdtError(path, "has no code or no module table once relocated", "rebuild the module")
    lo, hi = min(s.addr for s in code), max(s.addr + s.size for s in code)
    raw = elf.data[table.offset:table.offset + MODULE_TABLE.size(64)]
    fields = dict(zip(MODULE_TABLE.names(), MODULE_TABLE.struct(64, elf.little).unpack(raw), strict=True))
    name_at = table.addr + MODULE_TABLE.offset("name", 64) + fields["name"]
    name = ""
    for size in (65, 33, 17, 9, 5, 2):  # a name is at most 64 bytes; the section may end sooner
        try:
            name = elf.read_addr(name_at, size).split(b"\0")[0].decode("ascii", "replace")
            break
        except SdtError:
            continue
    functions = {s.name: s.value for s in elf.symbols if s.type == 2 and s.value and base <= s.value < end}
    if not name.isidentifier():
        raise SdtError(path, "its module table names no module", "rebuild it with `sdtgen gen --module NAME`")
    return LinkedModule(path, name, base, end - base,
                        tuple((s.vaddr, bytes(elf.data[s.offset:s.offset + s.filesz]), s.memsz) for s in loads),
                        (lo, hi - lo), table.addr, Bounds(_span(sites), _span(probes)), functions)


def _span(sec) -> tuple[int, int]:
    return (sec.addr, sec.addr + sec.size) if sec is not None else (0, 0)


def flat(linked: LinkedModule) -> bytes:
    """The module's bytes from its base as a loader copies them (its zero-filled tail included)."""
    out = bytearray(linked.size)
    for addr, data, _ in linked.segments:
        out[addr - linked.base:addr - linked.base + len(data)] = data
    return bytes(out)


def module_probes(linked: LinkedModule, bits: int, little: bool) -> tuple:
    """The module's probes as placed (TableProbe, its name where a definition leaves the module empty)."""
    from sdtgen.table import module_sites

    image = flat(linked)

    def read(addr: int, size: int) -> bytes:
        if not 0 <= addr - linked.base <= len(image) - size:
            raise SdtError(linked.path, f"its table reads {addr:#x}, outside the module")
        return image[addr - linked.base:addr - linked.base + size]

    sites = module_sites(read, linked.bounds, linked.name, bits, little)
    return tuple({s.probe.addr: s.probe for s in sites}.values())
