"""A loadable module in the emulated boot: what a kernel's loader does with one, done by the host.

The host places the module object in the module area the boot mapped (sdtgen/modlink.py: relocated there
against the kernel's symbols by the architecture's GNU ld), copies its bytes in, and gives the runtime its
table (the section sdt_module_table) and its code; the runtime does the rest (sdt_module_load), as it would
for a kernel's own loader.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from sdtgen.elf.reader import PT_LOAD, SHF_EXECINSTR, ElfFile
from sdtgen.errors import SdtError
from sdtgen.layout import MODULE_TABLE
from sdtgen.modlink import check_module_object, placed
from sdtgen.table import MODULE_TABLE_SECTION, PROBES_SET, SITES_SET, Bounds

MODULE_AREA = 4 << 20  # bytes the boot maps for modules, after the image (one module at a time)


@dataclass(frozen=True)
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
