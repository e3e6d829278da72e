"""Hostile images for the boot, each made by editing a copy of a real gcc + GNU ld image (ELF64, little-endian).

The edits are the smallest that make each case: program headers appended at the end of the file, a site
table entry pointed elsewhere, a section header retyped. readelf reads every result back in the tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from sdtgen.elf.reader import ElfFile
from sdtgen.layout import SITE
from sdtgen.table import SITE_SIZE

PT_LOAD = 1
PF_X, PF_W, PF_R = 1, 2, 4
PHDR = struct.Struct("<IIQQQQQQ")
SHDR = struct.Struct("<IIQQQQIIQQ")
R_X86_64_RELATIVE = 8
SHT_RELA, SHF_ALLOC = 4, 2


@dataclass(frozen=True)
class Load:
    vaddr: int
    memsz: int
    flags: int = PF_R | PF_W
    offset: int = 0
    filesz: int = 0
    align: int = 0x1000


def with_loads(image: Path, out: Path, loads: list[Load], keep: bool = True) -> Path:
    """A copy of ``image`` whose program header table (moved to the end of the file) gains ``loads``."""
    data = bytearray(image.read_bytes())
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    (phnum,) = struct.unpack_from("<H", data, 0x38)
    table = bytes(data[phoff:phoff + phnum * PHDR.size]) if keep else b""
    for ld in loads:
        table += PHDR.pack(PT_LOAD, ld.flags, ld.offset, ld.vaddr, ld.vaddr, ld.filesz, ld.memsz, ld.align)
    data += bytes(-len(data) % 8)
    struct.pack_into("<Q", data, 0x20, len(data))
    struct.pack_into("<H", data, 0x38, len(table) // PHDR.size)
    out.write_bytes(data + table)
    return out


def point_site_entry(image: Path, index: int, addr: int) -> None:
    """Make site table entry ``index`` of ``image`` (in place) point at ``addr``."""
    with ElfFile(image) as elf:
        sec = elf.section("set_sdt_sites_set")
        field_addr = sec.addr + SITE_SIZE * index
        offset = sec.offset + SITE_SIZE * index
    data = bytearray(image.read_bytes())
    struct.pack_into("<i", data, offset, addr - field_addr)
    image.write_bytes(data)


def set_site_length(image: Path, index: int, length: int) -> None:
    with ElfFile(image) as elf:
        offset = elf.section("set_sdt_sites_set").offset + SITE_SIZE * index + SITE.offset("length", 64)
    data = bytearray(image.read_bytes())
    data[offset] = length
    image.write_bytes(data)


def with_relative_reloc(image: Path, out: Path, section: str, where: int) -> Path:
    """A copy of ``image`` whose section ``section`` became an allocated .rela holding one RELATIVE at ``where``."""
    with ElfFile(image) as elf:
        index = next(i for i, s in enumerate(elf.sections) if s.name == section)
        sec = elf.sections[index]
        shoff = elf.shoff
        shentsize = SHDR.size
    data = bytearray(image.read_bytes())
    at = shoff + index * shentsize
    name, _t, _f, addr, off, _size, _link, _info, _align, _es = SHDR.unpack_from(data, at)
    SHDR.pack_into(data, at, name, SHT_RELA, SHF_ALLOC, addr, off, 24, 0, 1, 8, 24)
    struct.pack_into("<QQq", data, sec.offset, where, R_X86_64_RELATIVE, 0x1234)
    out.write_bytes(data)
    return out
