"""Names for the places tables point at: the function (or, for keys, the object) that holds them.

A linked file names addresses from .symtab, or from .dynsym when it was stripped (Debian's
libraries are); a relocatable object names offsets within each section from .symtab.
"""

from __future__ import annotations

import bisect
import struct

from sdtgen.elf.reader import ET_REL, SHN_LORESERVE, SHN_UNDEF, STT_FUNC, STT_OBJECT, ElfFile
from sdtgen.tables.fields import Place

SHT_DYNSYM = 11
STT_GNU_IFUNC = 10
CODE, DATA = (STT_FUNC, STT_GNU_IFUNC), (STT_OBJECT,)


class Namer:
    """Symbol lookups by place, for one file and one family of symbol types."""

    def __init__(self, elf: ElfFile, types: tuple[int, ...]) -> None:
        self.relocatable = elf.type == ET_REL
        by_section: dict[str | None, list[tuple[int, int, str]]] = {}
        for shndx, value, size, typ, name in _symbols(elf):
            if typ in types and name and shndx != SHN_UNDEF and shndx < SHN_LORESERVE:
                key = elf.section_at(shndx).name if self.relocatable else None
                by_section.setdefault(key, []).append((value, -size, name))
        self.tables = {}
        for key, rows in by_section.items():
            rows.sort()
            self.tables[key] = ([r[0] for r in rows], rows)

    def lookup(self, place: Place) -> tuple[str, int] | None:
        """(symbol, offset into it) of the symbol holding ``place``, or None."""
        if place.symbol:
            return place.symbol, place.value
        starts, rows = self.tables.get(place.section, ((), ()))
        i = bisect.bisect_right(starts, place.value) - 1
        # Among symbols at the same address the biggest sorts first; step back to one that covers.
        while i >= 0:
            value, neg_size, name = rows[i]
            if neg_size == 0 or place.value < value - neg_size:  # a size-0 label runs to the next symbol
                return name, place.value - value
            if i and rows[i - 1][0] == value:
                i -= 1
                continue
            return None
        return None

    def next_start(self, place: Place) -> tuple[str, int] | None:
        """(symbol, its distance after ``place``) of the first symbol starting at or after it."""
        if place.symbol:
            return None
        starts, rows = self.tables.get(place.section, ((), ()))
        i = bisect.bisect_left(starts, place.value)
        return (rows[i][2], rows[i][0] - place.value) if i < len(rows) else None

    def name(self, place: Place) -> str:
        found = self.lookup(place)
        return found[0] if found else ""


def _symbols(elf: ElfFile):
    """(section index, value, size, type, name) of .symtab's symbols, else of .dynsym's."""
    if elf.symtab is not None:
        for s in elf.symbols:
            yield s.shndx, s.value, s.size, s.type, s.name
        return
    dyn = next((s for s in elf.sections if s.type == SHT_DYNSYM), None)
    if dyn is None:
        return
    fmt = struct.Struct(elf.endian + ("IBBHQQ" if elf.is64 else "IIIBBH"))
    if dyn.entsize != fmt.size or dyn.size % fmt.size:
        raise elf.fail(f"corrupt ELF file: {dyn.name} has entry size {dyn.entsize}, expected {fmt.size}",
                       "rebuild it; the file is damaged")
    strsec = elf.section_at(dyn.link)
    strings = bytes(elf.contents(strsec))
    for row in fmt.iter_unpack(elf.contents(dyn)):
        name, info, _other, shndx, value, size = row if elf.is64 else (row[0], row[3], row[4], row[5], row[1], row[2])
        end = strings.find(b"\0", name)
        if name >= len(strings) or end < 0:
            raise elf.fail(f"corrupt ELF file: a name in {dyn.name} lies outside its string table",
                           "rebuild it; the file is damaged")
        yield shndx, value, size, info & 0xF, strings[name:end].decode("utf-8", "backslashreplace")
