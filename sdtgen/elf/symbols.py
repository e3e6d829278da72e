"""The one symbol index: which function (or object) holds an address, for every place sdtgen names.

A linked file is indexed by address; a relocatable object by section index and offset (each of
its sections starts at 0). A symbol holds ``[value, value + size)``. A size-0 symbol (a label,
assembler code without ``.size``) holds the bytes up to the next symbol of its section, and never
past its section's end: an address outside every section is in no function, however close the
last label is.
"""

from __future__ import annotations

import bisect

from sdtgen.elf.reader import ET_REL, STT_FUNC, STT_GNU_IFUNC, STT_OBJECT, ElfFile

CODE, DATA = (STT_FUNC, STT_GNU_IFUNC), (STT_OBJECT,)
_Row = tuple[int, int, int, str]  # start, sort rank, end, name


class SymbolIndex:
    """Symbols of some types (``CODE`` by default) by where they are."""

    def __init__(self, elf: ElfFile, types: tuple[int, ...] = CODE, sections: set[int] | None = None) -> None:
        self.relocatable = elf.type == ET_REL
        by_section: dict[int, list[tuple[int, int, str]]] = {}
        for shndx, value, size, name in elf.typed_symbols(types, sections):
            if name:
                by_section.setdefault(shndx, []).append((value, size, name))
        keyed: dict[int | None, list[_Row]] = {}
        for shndx, syms in by_section.items():
            sec = elf.sections[shndx]
            base = 0 if self.relocatable else sec.addr
            keyed.setdefault(shndx if self.relocatable else None, []).extend(_rows(syms, base, base + sec.size))
        self._tables: dict[int | None, tuple[list[int], list[_Row], list[int]]] = {}
        for key, rows in keyed.items():
            # At one address, labels first, then the biggest symbol: the walk back below meets the
            # smallest symbol first, and a label only when nothing with a size holds the address.
            rows.sort(key=lambda r: (r[0], r[1], r[0] - r[2]))
            reach, top = [], 0
            for r in rows:
                top = max(top, r[2])
                reach.append(top)
            self._tables[key] = ([r[0] for r in rows], rows, reach)

    def containing(self, addr: int, section: int | None = None) -> tuple[str, int] | None:
        """(name, offset into it) of the symbol holding ``addr`` (an offset in section index
        ``section`` of a relocatable object), or None."""
        starts, rows, reach = self._tables.get(section, ((), (), ()))
        i = bisect.bisect_right(starts, addr) - 1
        while i >= 0 and reach[i] > addr:  # an earlier symbol still reaches past addr
            start, _, end, name = rows[i]
            if addr < end:
                return name, addr - start
            i -= 1
        return None

    def preceding(self, addr: int, section: int | None = None) -> int | None:
        """The start of the last symbol starting at or before ``addr``, whether or not it holds it:
        a place where an instruction is known to begin."""
        starts = self._tables.get(section, ((),))[0]
        i = bisect.bisect_right(starts, addr) - 1
        return starts[i] if i >= 0 else None

    def following(self, addr: int, section: int | None = None) -> tuple[str, int] | None:
        """(name, distance after ``addr``) of the first symbol starting at or after it."""
        starts, rows, _ = self._tables.get(section, ((), (), ()))
        i = bisect.bisect_left(starts, addr)
        return (rows[i][3], rows[i][0] - addr) if i < len(rows) else None

    def name(self, addr: int, section: int | None = None) -> str:
        """``function+0xoff`` of an address, or the bare address in hex outside every symbol."""
        found = self.containing(addr, section)
        return f"{found[0]}+{found[1]:#x}" if found else f"{addr:#x}"


def _rows(syms: list[tuple[int, int, str]], lo: int, hi: int) -> list[_Row]:
    """The symbols of one section as (start, rank, end, name); a label ends at the next start."""
    starts = sorted({v for v, _, _ in syms})
    out = []
    for value, size, name in syms:
        if size:
            out.append((value, 1, value + size, name))
            continue
        i = bisect.bisect_right(starts, value)
        end = min(starts[i] if i < len(starts) else hi, hi)
        out.append((value, 0, end if lo <= value else value, name))
    return out
